import ParleyPostgres

/// The rules of API.md §11.1–§11.4 for peer and group messages: sending (dedupe, existence, policy, commit in one
/// statement), batch send, broadcast, history and reads.
///
/// A value made per request; it owns nothing mutable.
struct MessageService: DomainService {
    let pool: PostgresPool
    let appID: String
    /// Server-clock ms of the request.
    let now: Int64

    /// The answer to a send: the Message JSON as the caller sees it, and whether it was a `client_msg_id` duplicate.
    struct Sent {
        var json: [UInt8]
        var messageID: String
        var seq: Int64?
        var duplicate: Bool
    }

    // MARK: - Send

    /// Sends one validated message as `viewer` sees it, following the check order of §11.1 from step 3 on.
    func send(_ request: SendRequest, settings: AppSettings, viewer: MessageViewer) throws -> Sent {
        guard request.conversationType != .room else {
            // Rooms come with their own domain; until then no such target exists.
            throw APIError(.targetNotFound, "room \(request.to) does not exist")
        }
        return try pool.withConnection { db in
            var body = request.body
            let threadID = MessageStore.thread(request.conversationType, request.from, request.to)
            var message = Message(
                messageID: IdentifierKind.generateSortableID(prefix: "m", timestampMs: now), clientMsgID: request.clientMsgID,
                type: body.type.rawValue, conversationType: request.conversationType, from: request.from, to: request.to,
                seq: request.stored ? 0 : nil, timestamp: now, body: nil, extendedData: request.extendedData,
                mentionIDs: request.mentionIDs, mentionAll: request.mentionAll, reply: nil, rootMessageID: nil, replyCount: 0,
                priority: request.priority, needReceipt: request.needReceipt, noUnread: request.noUnread,
                onlineOnly: request.onlineOnly, repeatCount: request.repeatCount, push: request.push.map { $0.serialized() },
                suppressed: nil, deleted: false)
            var options = MessageStore.SendOptions(
                threadID: threadID, clientMsgID: request.clientMsgID, contentHash: request.contentHash,
                mentionNotify: request.notifyMentioned, replyMissing: false, skipChecks: request.skipChecks,
                blacklistError: settings.string("blacklist_feedback") == "error", friendOnly: settings.bool("friend_only_c2c"),
                sensitiveReject: false, combineID: nil, combineItems: [])
            if let replyTo = request.replyTo {
                if let replied = try MessageStore.fetch(appID: appID, messageID: replyTo, on: db),
                    replied.conversationType == request.conversationType,
                    MessageStore.thread(replied.conversationType, replied.from, replied.to) == threadID, !replied.deleted,
                    try isVisible(replied, to: .user(request.from), on: db)
                {
                    message.reply = Self.replyJSON(replied)
                    message.rootMessageID = replied.rootMessageID ?? replied.messageID
                } else {
                    options.replyMissing = true
                }
            }
            if body.type == .combine {
                let found = try MessageStore.fetchMany(appID: appID, messageIDs: body.combineMessageIDs, on: db)
                let byID = Dictionary(found.map { ($0.messageID, $0) }, uniquingKeysWith: { a, _ in a })
                let snapshots = try body.combineMessageIDs.compactMap { byID[$0] }.filter {
                    try isVisible($0, to: .user(request.from), on: db)
                }
                if snapshots.count == body.combineMessageIDs.count {
                    let combineID = IdentifierKind.generateSortableID(prefix: "cb", timestampMs: now)
                    options.combineID = combineID
                    options.combineItems = snapshots.map { String(decoding: $0.json(.user(request.from)), as: UTF8.self) }
                    body.json = body.combineStored(combineID: combineID, messageCount: snapshots.count)
                } else {
                    options.replyMissing = true
                }
            }
            if !request.skipChecks {
                options.sensitiveReject = SensitiveWordFilter(settings: settings).apply(to: &body)
            }
            message.body = body.json.serialized()
            let result = try MessageStore.send(appID: appID, now: now, message: message, options: options, on: db)
            switch result.outcome {
            case "sent":
                message.seq = result.seq
                message.timestamp = result.timestamp
                message.suppressed = result.suppressed
                return Sent(json: message.json(viewer), messageID: message.messageID, seq: message.seq, duplicate: false)
            case "duplicate":
                return try duplicate(request, viewer: viewer, on: db)
            case "conflict":
                throw APIError(.clientMsgIdConflict, "client_msg_id \(request.clientMsgID ?? "") was used for another message")
            case "from_not_found": throw UserService.notFound(request.from)
            case "to_not_found":
                throw APIError(.targetNotFound, "\(request.conversationType == .group ? "group" : "user") \(request.to) does not exist")
            case "group_dismissed": throw GroupService.dismissed(request.to)
            case "not_member": throw GroupService.notMember(request.from, request.to)
            case "receipt_group_too_large":
                throw APIError(.receiptGroupTooLarge, "need_receipt is refused in big groups and groups over 500 members")
            case "reply_not_found":
                throw APIError(.messageNotFound, request.replyTo != nil ? "reply_to message not found" : "a combined message was not found")
            case "muted": throw APIError(.senderMuted, "user \(request.from) is muted")
            case "blocked": throw APIError(.blockedByRecipient, "the recipient has blocked the sender")
            case "not_friends": throw APIError(.notFriendsC2c, "peer messages need a mutual friendship")
            case "sensitive": throw APIError(.sensitiveWord, "the message contains a sensitive word")
            default: throw APIError(.internalError, "unknown send outcome \(result.outcome)")
            }
        }
    }

    /// The stored answer to a repeated `client_msg_id` (a tombstone once its message is gone).
    private func duplicate(_ request: SendRequest, viewer: MessageViewer, on db: PostgresConnection) throws -> Sent {
        guard let clientMsgID = request.clientMsgID,
            let key = try MessageStore.key(appID: appID, from: request.from, clientMsgID: clientMsgID, on: db)
        else { throw APIError(.internalError, "dedupe key vanished") }
        let json =
            key.message.map { $0.json(viewer) } ?? key.unstoredJSON
            ?? Message.tombstone(
                messageID: key.messageID, clientMsgID: clientMsgID, conversationType: key.conversationType, from: request.from,
                to: key.to, seq: key.seq, timestamp: key.timestamp
            ).json(viewer)
        return Sent(json: json, messageID: key.messageID, seq: key.seq, duplicate: true)
    }

    /// The `reply` object of a reply to `replied` (§2): its identity and a snapshot of its type and body.
    static func replyJSON(_ replied: Message) -> [UInt8] {
        var o = JSONObjectWriter(capacity: 160 + (replied.body?.count ?? 0))
        o["message_id"] = replied.messageID
        o["seq"] = replied.seq
        o["from"] = replied.from
        o["timestamp"] = replied.timestamp
        o["state"] = "normal"
        o.write("snapshot") { w in
            w.object { w in
                w.key("type")
                w.writeInt(replied.type)
                w.key("body")
                if let body = replied.body { w.writeRaw(body) } else { w.writeNull() }
            }
        }
        return o.finish()
    }

    // MARK: - Broadcast

    /// A broadcast (§11.2): never stored; one `message.broadcast` event to every active user and the app.
    func broadcast(from: String, body: MessageBody, extendedData: String, push: JSONValue?) throws -> (messageID: String, timestamp: Int64) {
        let messageID = IdentifierKind.generateSortableID(prefix: "m", timestampMs: now)
        var message = Message(
            messageID: messageID, clientMsgID: nil, type: body.type.rawValue, conversationType: .peer, from: from, to: "",
            seq: nil, timestamp: now, body: body.json.serialized(), extendedData: extendedData, mentionIDs: [], mentionAll: false,
            reply: nil, rootMessageID: nil, replyCount: 0, priority: 2, needReceipt: false, noUnread: false, onlineOnly: false,
            repeatCount: 1, push: push.map { $0.serialized() }, suppressed: nil, deleted: false)
        message.isBroadcast = true
        try pool.transaction { db in
            guard let user = try UserStore.fetch(appID: appID, userID: from, on: db), !user.isDeleted else {
                throw UserService.notFound(from)
            }
            let json = message.json(.app)
            var data = JSONObjectWriter(capacity: json.count + 16)
            data.raw("message", json)
            // Every active user: the audience is resolved when the event is written, in the same transaction.
            let users =
                try db.query(
                    "SELECT coalesce(array_agg(user_id ORDER BY user_id), '{}') FROM users WHERE app_id = $1 AND deleted_at IS NULL",
                    [appID], prepared: true
                ).first?[0].stringArray ?? []
            try EventLog.append(
                [NewEvent(type: "message.broadcast", data: data.finish(), audience: users, orderKey: appID)], appID: appID, now: now,
                on: db)
        }
        return (messageID, now)
    }

    // MARK: - Reads

    /// One message visible to `viewer` (§11.4), else 404 `message_not_found`.
    func get(_ messageID: String, viewer: MessageViewer, on db: PostgresConnection) throws -> Message {
        guard let message = try MessageStore.fetch(appID: appID, messageID: messageID, on: db), try isVisible(message, to: viewer, on: db)
        else {
            throw Self.notFound(messageID)
        }
        return message
    }

    /// "Visible to a user" (§11.4): ``Message/isVisible(to:)``, and for group messages a current member.
    func isVisible(_ message: Message, to viewer: MessageViewer, on db: PostgresConnection) throws -> Bool {
        guard message.isVisible(to: viewer) else { return false }
        guard case .user(let userID) = viewer, message.conversationType == .group else { return true }
        return try GroupStore.member(appID: appID, groupID: message.to, userID: userID, on: db) != nil
    }

    /// Group history reads (§9.1, §11.3): the group exists (404), is not dismissed (409) and a reading user is a
    /// current member (403).
    func requireGroupHistory(_ groupID: String, viewer userID: String?, on db: PostgresConnection) throws {
        guard let group = try GroupStore.fetch(appID: appID, groupID: groupID, on: db) else { throw GroupService.notFound(groupID) }
        if group.isDismissed { throw GroupService.dismissed(groupID) }
        if let userID, try GroupStore.member(appID: appID, groupID: groupID, userID: userID, on: db) == nil {
            throw GroupService.notMember(userID, groupID)
        }
    }

    static func notFound(_ messageID: String) -> APIError { APIError(.messageNotFound, "message \(messageID) not found") }
}
