import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The message rules (docs/messages.md#sending, docs/messages.md#history) for peer, group and room messages: preparing
/// sends for the node's writer (which checks and commits them in batches, ``MessageWrite``), broadcast, history and
/// reads.
///
/// A value made per request; it owns nothing mutable.
struct MessageService: DomainService {
    /// The request's connection (its worker thread's): reads run on it and transactions open on it.
    let db: PostgresConnection
    let appID: String
    /// Server-clock ms of the request.
    let now: Int64

    // MARK: - Send

    /// The write item for one send that passed validation (docs/messages.md#sending): resolves `reply_to` and
    /// combined messages and runs the sensitive-word filter on the request's connection, so the node's
    /// ``MessageWriter`` gets a batch-ready item and runs the dedupe, existence and policy checks inside its statement.
    /// `filter` false skips the sensitive-word filter (a hook's patched body: policy checks are not run again);
    /// `blocklists` (the node's compiled lists) are checked whenever checks are not skipped, patched bodies included
    /// (docs/blocklists.md#where-lists-apply).
    func item(
        for request: SendRequest, settings: AppSettings, filter: Bool = true, blocklists: BlocklistCache?, on db: PostgresConnection
    ) throws -> MessageWrite.Item {
        try Self.item(for: request, settings: settings, appID: appID, now: now, filter: filter, blocklists: blocklists, on: db)
    }

    /// ``item(for:settings:filter:on:)`` of app `appID` at `now`; without a connection (a send on the event loop),
    /// ``NeedsConnection`` when the send replies to or combines messages, which are read first.
    static func item(
        for request: SendRequest, settings: AppSettings, appID: String, now: Int64, filter: Bool = true, blocklists: BlocklistCache?,
        on connection: PostgresConnection?
    ) throws -> MessageWrite.Item {
        // Without a connection, a stale copy of the app's blocklists sends the request to a worker before anything.
        let snapshot = request.skipChecks ? nil : try blocklists?.snapshot(appID: appID, db: connection)
        var body = request.body
        let threadID = MessageStore.thread(request.conversationType, request.from, request.to)
        var message = Message(
            messageID: Self.newMessageID(stored: request.stored, now: now), clientMsgID: request.clientMsgID,
            type: body.type.rawValue, conversationType: request.conversationType, from: request.from, to: request.to,
            seq: request.stored ? 0 : nil, timestamp: now, body: nil, extendedData: request.extendedData,
            mentionIDs: request.mentionIDs, mentionAll: request.mentionAll, reply: nil, rootMessageID: nil, replyCount: 0,
            priority: request.priority, needReceipt: request.needReceipt, noUnread: request.noUnread,
            onlineOnly: request.onlineOnly, repeatCount: request.repeatCount, push: request.push.map { $0.serialized() },
            suppressed: nil, deleted: false, visibleTo: request.visibleTo)
        var item = MessageWrite.Item(
            appID: appID, now: now, message: message, threadID: threadID, contentHash: request.contentHash,
            mentionNotify: request.notifyMentioned, checks: request.skipChecks ? .existence : .all,
            blacklistError: settings.string("blacklist_feedback") == "error", friendOnly: settings.bool("friend_only_c2c"))
        item.cache = request.conversationType == .room && request.cache
        let fileIDs = body.fileIDs
        if request.replyTo != nil || body.type == .combine || !fileIDs.isEmpty || request.visibleTo != nil, connection == nil {
            throw NeedsConnection()
        }
        if let visibleTo = request.visibleTo, let db = connection {
            try Self.requireMembers(visibleTo, of: request.to, appID: appID, on: db)
        }
        if !fileIDs.isEmpty, let db = connection, let use = request.fileUse {
            try MessageFiles.fill(&body, from: request.from, use: use, appID: appID, now: now, on: db)
            item.namesFiles = true
        }
        if let replyTo = request.replyTo, let db = connection {
            let service = MessageService(db: db, appID: appID, now: now)
            if let replied = try MessageStore.fetch(appID: appID, messageID: replyTo, on: db),
                replied.conversationType == request.conversationType,
                MessageStore.thread(replied.conversationType, replied.from, replied.to) == threadID, !replied.deleted,
                try service.isVisible(replied, to: .user(request.from), on: db)
            {
                message.reply = Self.replyJSON(replied)
                message.rootMessageID = replied.rootMessageID ?? replied.messageID
                // A reply quotes what it replies to: to a targeted message, without a `visible_to` of its own, it stays
                // within that message's audience (docs/messages.md#targeted-group-messages).
                if message.visibleTo == nil, let audience = replied.visibleTo {
                    if request.mentionAll {
                        throw APIError(.unsupportedOperation, "a reply to a targeted message is targeted: it cannot mention all members")
                    }
                    var seen: Set<String> = [request.from]
                    message.visibleTo = ([replied.from] + audience).filter { seen.insert($0).inserted }
                }
            } else {
                item.replyMissing = true
            }
        }
        if body.type == .combine, let db = connection {
            let service = MessageService(db: db, appID: appID, now: now)
            let found = try MessageStore.fetchMany(appID: appID, messageIDs: body.combineMessageIDs, on: db)
            let byID = Dictionary(found.map { ($0.messageID, $0) }, uniquingKeysWith: { a, _ in a })
            let snapshots = try body.combineMessageIDs.compactMap { byID[$0] }.filter {
                try service.isVisible($0, to: .user(request.from), on: db)
            }
            if snapshots.count == body.combineMessageIDs.count {
                let combineID = IdentifierKind.generateSortableID(prefix: "cb", timestampMs: now)
                item.combineID = combineID
                item.combineItems = snapshots.map { String(decoding: $0.json(.user(request.from)), as: UTF8.self) }
                body.json = body.combineStored(combineID: combineID, messageCount: snapshots.count)
            } else {
                item.replyMissing = true
            }
        }
        if !request.skipChecks && filter {
            item.sensitiveReject = SensitiveWordFilter(settings: settings).apply(to: &body)
        }
        if let snapshot, !snapshot.isEmpty {
            MessageBlocklists.apply(MessageBlocklists.check(&body, against: snapshot), to: &item)
        }
        message.body = body.json.serialized()
        item.message = message
        return item
    }

    /// A targeted send's `visible_to` names members of the group only (docs/messages.md#targeted-group-messages): 400
    /// `invalid_params` naming each `body.visible_to[i]` that is not. Read only for targeted sends (untargeted ones pay
    /// nothing); an unknown group is left to the send's existence check (404).
    static func requireMembers(_ visibleTo: [String], of groupID: String, appID: String, on db: PostgresConnection) throws {
        guard let members = try MessageStore.groupMembers(appID: appID, groupID: groupID, among: visibleTo, on: db) else { return }
        let errors = visibleTo.enumerated().filter { !members.contains($0.element) }.map {
            FieldError(field: "body.visible_to[\($0.offset)]", message: "user \($0.element) is not a member of group \(groupID)")
        }
        if !errors.isEmpty { throw APIError.invalidParams(errors) }
    }

    // MARK: - The message.before_send hook

    /// The members of the proposed message a `message.before_send` hook may patch
    /// (docs/webhooks.md#before-event-hooks).
    static let patchable: Set<String> = ["body", "extended_data", "mentions", "push"]

    /// Whether `message.before_send` is called for `item`: a send that would be written now and delivered (not a
    /// `client_msg_id` duplicate, not failing the existence or policy checks, not suppressed by a silent blacklist).
    /// One read; only asked when the app has the hook.
    func needsHook(_ item: MessageWrite.Item) throws -> Bool {
        let (outcome, suppressed) = try MessageWrite.check(item, on: db)
        return outcome == .sent && !suppressed
    }

    /// The proposed message as the hook sees it (no `message_id`, `seq`, `timestamp`).
    static func proposed(_ item: MessageWrite.Item) throws -> JSONObject {
        guard case .object(var message) = try JSONValue.parse(item.message.json(.user(item.message.from))) else {
            throw APIError.internalError
        }
        for key in ["message_id", "seq", "timestamp"] { message[key] = nil }
        return message
    }

    /// The hook's `data`: `{message}`.
    static func hookData(_ item: MessageWrite.Item) throws -> [UInt8] {
        var o = JSONObjectWriter()
        o.raw("message", JSONValue.object(try proposed(item)).serialized())
        return o.finish()
    }

    /// The send after a `modify` verdict: the request re-read with the patched members of the proposed message and
    /// validated by the request's rules (any failure is 422 `hook_patch_invalid`), keeping the original's dedupe
    /// content hash. Policy is not checked again: a patched body is not filtered.
    func patched(
        _ item: MessageWrite.Item, verdict: HookVerdict, ctx: APIContext, blocklists: BlocklistCache?
    ) throws -> (SendRequest, MessageWrite.Item) {
        try ctx.repatched(verdict, proposed: try Self.proposed(item), patchable: Self.patchable) { reader in
            let settings = ctx.app.settings
            let next = try SendRequest(&reader, ctx: ctx, settings: settings)
            let filter = verdict.patch?["body"] == nil
            var nextItem = try self.item(for: next, settings: settings, filter: filter, blocklists: blocklists, on: db)
            nextItem.contentHash = item.contentHash
            return (next, nextItem)
        }
    }

    /// The problem of a send the writer did not accept (deduplication, existence or policy); nil for a sent message or
    /// a duplicate.
    static func problem(_ outcome: MessageWrite.Outcome, _ request: SendRequest) -> APIError? {
        switch outcome {
        case .sent, .duplicate: nil
        case .conflict: APIError(.clientMsgIdConflict, "client_msg_id \(request.clientMsgID ?? "") was used for another message")
        case .fromNotFound: UserService.notFound(request.from)
        case .toNotFound:
            APIError(
                .targetNotFound, "\(request.conversationType == .peer ? "user" : request.conversationType.rawValue) \(request.to) does not exist")
        case .groupDismissed: .groupDismissed(request.to)
        case .notMember: .notGroupMember(request.from, request.to)
        case .notInRoom: RoomAccess.notInRoom(request.from, request.to)
        case .receiptGroupTooLarge: APIError(.receiptGroupTooLarge, "need_receipt is refused in big groups and groups over 500 members")
        case .replyNotFound:
            APIError(.messageNotFound, request.replyTo != nil ? "reply_to message not found" : "a combined message was not found")
        case .muted: APIError(.senderMuted, "user \(request.from) is muted")
        case .blocked: APIError(.blockedByRecipient, "the recipient has blocked the sender")
        case .notFriends: APIError(.notFriendsC2c, "peer messages need a mutual friendship")
        case .sensitive: APIError(.sensitiveWord, "the message contains a sensitive word")
        case .contentBlocked: APIError(.contentBlocked, "the content is blocked by a blocklist")
        }
    }

    /// The stored answer to a repeated `client_msg_id` (a tombstone once its message is gone): the Message JSON as
    /// `viewer` sees it.
    func duplicate(_ request: SendRequest, viewer: MessageViewer, on db: PostgresConnection) throws -> [UInt8] {
        guard let clientMsgID = request.clientMsgID,
            let key = try MessageStore.key(appID: appID, from: request.from, clientMsgID: clientMsgID, on: db)
        else { throw APIError(.internalError, "dedupe key vanished") }
        let json =
            key.message.map { $0.json(viewer) } ?? key.unstoredJSON
            ?? Message.tombstone(
                messageID: key.messageID, clientMsgID: clientMsgID, conversationType: key.conversationType, from: request.from,
                to: key.to, seq: key.seq, timestamp: key.timestamp
            ).json(viewer)
        return json
    }

    /// The `reply` object of a reply to `replied` (docs/messages.md#sending): its identity and a snapshot of its type
    /// and body.
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

    /// A broadcast (docs/messages.md#sending): never stored; one `message.broadcast` event to every active user and the
    /// app.
    func broadcast(from: String, body: MessageBody, extendedData: String, push: JSONValue?) throws -> (messageID: String, timestamp: Int64) {
        let messageID = IdentifierKind.generateSortableID(prefix: "m", timestampMs: now)
        var message = Message(
            messageID: messageID, clientMsgID: nil, type: body.type.rawValue, conversationType: .peer, from: from, to: "",
            seq: nil, timestamp: now, body: body.json.serialized(), extendedData: extendedData, mentionIDs: [], mentionAll: false,
            reply: nil, rootMessageID: nil, replyCount: 0, priority: 2, needReceipt: false, noUnread: false, onlineOnly: false,
            repeatCount: 1, push: push.map { $0.serialized() }, suppressed: nil, deleted: false)
        message.isBroadcast = true
        try db.transaction { db in
            try UserService.requireActive(from, appID: appID, on: db)
            let json = message.json(.app)
            var data = JSONObjectWriter(capacity: json.count + 16)
            data.raw("message", json)
            // Every active user: the audience is resolved when the event is written, in the same transaction.
            let users =
                try db.query("SELECT coalesce(array_agg(user_id ORDER BY user_id), '{}') FROM users WHERE app_id = \(appID) AND deleted_at IS NULL")
                .decodeFirst([String].self) ?? []
            try EventLog.append(
                [NewEvent(type: "message.broadcast", data: data.finish(), audience: users, orderKey: appID)], appID: appID, now: now,
                on: db)
        }
        return (messageID, now)
    }

    // MARK: - Reads

    /// One message visible to `viewer` (docs/messages.md#history), else 404 `message_not_found`.
    func get(_ messageID: String, viewer: MessageViewer, on db: PostgresConnection) throws -> Message {
        guard let message = try MessageStore.fetch(appID: appID, messageID: messageID, on: db), try isVisible(message, to: viewer, on: db)
        else {
            throw Self.notFound(messageID)
        }
        return message
    }

    /// "Visible to a user" (docs/messages.md#history): ``Message/isVisible(to:)``, and for group and room messages a
    /// current member. A room message is visible to a member only while it belongs to the room's current life (seq
    /// after `first_seq`, as in the room's history); the app sees stored room messages even after the room is
    /// destroyed.
    func isVisible(_ message: Message, to viewer: MessageViewer, on db: PostgresConnection) throws -> Bool {
        guard message.isVisible(to: viewer) else { return false }
        guard case .user(let userID) = viewer else { return true }
        if message.stored, try MessageStore.isHidden(appID: appID, messageID: message.messageID, from: userID, on: db) { return false }
        switch message.conversationType {
        case .peer: return true
        case .group: return try MessageStore.groupAccess(appID: appID, groupID: message.to, userID: userID, on: db)?.member ?? false
        case .room:
            guard let access = try RoomAccess.fetch(appID: appID, roomID: message.to, userID: userID, on: db), access.member else {
                return false
            }
            return (message.seq ?? 0) > access.firstSeq
        }
    }

    /// Group history reads (docs/groups.md#roles, docs/messages.md#history): the group exists (404), is not dismissed
    /// (409) and a reading user is a current member (403).
    func requireGroupHistory(_ groupID: String, viewer userID: String?, on db: PostgresConnection) throws {
        guard let access = try MessageStore.groupAccess(appID: appID, groupID: groupID, userID: userID, on: db) else {
            throw APIError.groupNotFound(groupID)
        }
        if access.dismissed { throw APIError.groupDismissed(groupID) }
        if let userID, !access.member { throw APIError.notGroupMember(userID, groupID) }
    }

    static func notFound(_ messageID: String) -> APIError { APIError(.messageNotFound, "message \(messageID) not found") }

    /// A new message id (opaque, sortable by send time): `m…` for a stored message, `u…` for an unstored one, so
    /// an unstored message's id is told from an unknown one by its shape and send time, without a record of unstored
    /// ids on the send path (docs/messages.md#sending).
    static func newMessageID(stored: Bool, now: Int64) -> String {
        IdentifierKind.generateSortableID(prefix: stored ? "m" : "u", timestampMs: now)
    }

    /// Runs `body` for the change of message `messageID` (revoke, edit, pin, reaction): its "no such message" (404
    /// `7000210`) becomes 422 `6000013` for an unstored message's id within the app's `event_retention_hours` of its
    /// send (the server keeps unstored ids that long), and stays 404 afterwards. An unstored id never has a
    /// row, so every 404 for one means just that.
    static func tellingUnstored<T>(_ messageID: String, _ ctx: APIContext, _ body: () throws -> T) throws -> T {
        try tellingUnstored(messageID, isRecentUnstored(messageID, ctx), body)
    }

    /// ``tellingUnstored(_:_:_:)`` with ``isRecentUnstored(_:_:)`` read beforehand (for an answer given later).
    static func tellingUnstored<T>(_ messageID: String, _ recentUnstored: Bool, _ body: () throws -> T) throws -> T {
        do { return try body() } catch let error as APIError where error.code == .messageNotFound {
            guard recentUnstored else { throw error }
            throw APIError(.unsupportedOperation, "message \(messageID) was not stored: it cannot be changed")
        }
    }

    /// Whether `messageID` is an unstored message's id the server still knows (within the app's
    /// `event_retention_hours` of its send).
    static func isRecentUnstored(_ messageID: String, _ ctx: APIContext) -> Bool {
        guard let sentAt = IdentifierKind.sortableTimestamp(of: messageID, prefix: "u") else { return false }
        return ctx.now < sentAt + ctx.app.settings.eventRetentionHours * 3_600_000
    }
}

// MARK: - Reads

extension MessageService {
    typealias HistoryQuery = MessageStore.HistoryQuery

    /// The history rows of a conversation (docs/messages.md#history), as ``MessageRow`` reads them. The statement
    /// returns rows only when the read is allowed (a viewing user exists and is not soft-deleted; a group is live and
    /// the viewer a member), so the allowed read costs one round trip; no rows asks why, in the order of the checks:
    /// 404 `user_not_found`, then the group's 404, 409, 403.
    func history(_ type: ConversationType, id: String, viewer userID: String?, query: HistoryQuery) throws -> PostgresResult {
        let rows = try MessageStore.history(
            appID: appID, conversationType: type, threadID: MessageStore.thread(type, userID ?? "", id), peer: id, query: query, on: db)
        if rows.rowCount == 0 {
            if let userID { try UserService.requireActive(userID, appID: appID, on: db) }
            if type == .group { try requireGroupHistory(id, viewer: userID, on: db) }
        }
        return rows
    }

    /// How events name the conversation of `type` between `userID` and `id` (their ordering key, `peer:<a> <b>`,
    /// `group:<id>`, `room:<id>`): the history cache's conversation.
    static func conversationKey(_ type: ConversationType, _ userID: String, _ id: String) -> String {
        type.rawValue + ":" + MessageStore.thread(type, userID, id)
    }

    /// The snapshots of a combine message from `position` on.
    func combined(_ combineID: String, from position: Int, limit: Int) throws -> [(position: Int, json: [UInt8])] {
        try MessageStore.combined(appID: appID, combineID: combineID, from: position, limit: limit, on: db)
    }
}
