import ParleyAPI
import ParleyCore
import ParleyPostgres

/// Where pushable items come from (docs/push.md#what-is-pushed-to-whom): the stored messages, broadcasts and
/// application actions behind the events the planner takes, and who receives each one.
enum PushSources {
    /// An item and how to find its recipients.
    struct Sourced {
        enum Recipients {
            case users([String])
            /// The members of the group when the event was written (its membership intervals, Migrations/0009).
            case groupMembers(String)
            /// Every active user with a device (broadcasts).
            case deviceOwners
        }

        var item: PushItem
        var recipients: Recipients
    }

    /// The pushable items behind `events`, by event id. Messages come from their events' data (the Message in the app
    /// view); those read from the log rather than handed over at their commit are checked against the table first,
    /// since a message revoked, deleted or purged meanwhile is no longer pushed. Sender and group names are filled in
    /// by ``fillNames(_:appID:on:)``.
    static func items(of events: [PushLogEvent], appID: String, on db: PostgresConnection) throws -> [Int64: Sourced] {
        var out: [Int64: Sourced] = [:]
        var toCheck: [(eventID: Int64, messageID: String)] = []
        for event in events {
            switch event.type {
            case "message.sent":
                guard let sourced = messageItem(sentEvent: event.data) else { continue }
                out[event.id] = sourced
                if event.fromLog, let id = sourced.item.messageID { toCheck.append((event.id, id)) }
            case "message.broadcast":
                let data = (try? JSONValue.parse(event.data)) ?? .null
                guard let item = try broadcastItem(data["message"], appID: appID, on: db) else { continue }
                out[event.id] = Sourced(item: item, recipients: .deviceOwners)
            case "friend.application_created", "friend.application_updated":
                let data = (try? JSONValue.parse(event.data)) ?? .null
                guard let sourced = try friendApplication(data["application"], created: event.type.hasSuffix("created"), appID: appID, on: db)
                else { continue }
                out[event.id] = sourced
            case "group.application_updated":
                let data = (try? JSONValue.parse(event.data)) ?? .null
                guard let sourced = try groupApplication(data["application"], appID: appID, on: db) else { continue }
                out[event.id] = sourced
            default: continue
            }
        }
        if !toCheck.isEmpty {
            let alive = try PushStore.stillPushable(appID: appID, messageIDs: toCheck.map(\.messageID), on: db)
            for (eventID, messageID) in toCheck where !alive.contains(messageID) { out[eventID] = nil }
        }
        return out
    }

    /// Fills in the sender's name and the group's name of the message items of `batch` (one query).
    static func fillNames(_ batch: inout [(item: PushItem, userIDs: [String])], appID: String, on db: PostgresConnection) throws {
        let messages = batch.indices.filter { batch[$0].item.kind == .message && !batch[$0].userIDs.isEmpty }
        guard !messages.isEmpty else { return }
        let names = try PushStore.names(
            appID: appID, users: Array(Set(messages.map { batch[$0].item.sender })),
            groups: Array(Set(messages.compactMap { batch[$0].item.groupID })), on: db)
        for i in messages {
            batch[i].item.senderName = names.users[batch[i].item.sender] ?? ""
            if let group = batch[i].item.groupID { batch[i].item.groupName = names.groups[group] }
        }
    }

    /// Up to `limit` recipients of `sourced` after `after` (user id order), never the sender.
    static func recipients(
        of sourced: Sourced, eventID: Int64, after: String?, limit: Int, appID: String, on db: PostgresConnection
    ) throws -> [String] {
        let sender = sourced.item.sender
        switch sourced.recipients {
        case .users(let users):
            return Array(users.filter { $0 != sender && (after == nil || $0 > after!) }.sorted().prefix(limit))
        case .groupMembers(let groupID):
            return try db.query(
                """
                SELECT user_id FROM (
                    SELECT user_id FROM group_members
                    WHERE app_id = \(appID) AND group_id = \(groupID) AND joined_event < \(eventID) AND user_id > \(after ?? "")
                    UNION
                    SELECT user_id FROM group_member_history
                    WHERE app_id = \(appID) AND group_id = \(groupID) AND joined_event < \(eventID)
                      AND (left_event IS NULL OR left_event > \(eventID)) AND user_id > \(after ?? "")
                ) m
                WHERE user_id <> \(sender) ORDER BY user_id LIMIT \(limit)
                """
            ).decode(String.self)
        case .deviceOwners:
            return try db.query(
                """
                SELECT DISTINCT d.user_id FROM devices d JOIN users u ON u.app_id = d.app_id AND u.user_id = d.user_id
                WHERE d.app_id = \(appID) AND d.user_id > \(after ?? "") AND d.user_id <> \(sender) AND u.deleted_at IS NULL
                ORDER BY d.user_id LIMIT \(limit)
                """
            ).decode(String.self)
        }
    }

    // MARK: - Messages

    /// The item of a `message.sent` event's message (its data in the app view, which carries `push` and `suppressed`)
    /// when the bridge pushes it: a stored, unsuppressed peer or group message of a pushable type with `push.enable`
    /// not false; nil otherwise. The sender's and the group's names are left empty (``PushStore/names``).
    static func messageItem(sentEvent data: [UInt8]) -> Sourced? {
        // Most events of an app's log are not pushed: they are told apart without parsing the whole message.
        guard isPushable(sentEvent: data), let message = (try? JSONValue.parse(data))?["message"] else { return nil }
        return messageItem(message)
    }

    /// The rule of a pushable message, whichever way its fields were read: stored, in a peer or group conversation,
    /// of a pushable type, not suppressed, not deleted, and its `push.enable` not false.
    static func isPushable(conversationType: String?, stored: Bool, type: Int64?, suppressed: Bool, deleted: Bool, pushEnabled: Bool) -> Bool {
        (conversationType == "peer" || conversationType == "group") && stored && type.map { PushItem.pushableMessageTypes.contains(Int($0)) } == true
            && !suppressed && !deleted && pushEnabled
    }

    /// Whether a `message.sent` event's message is pushable, read in place (``JSONMembers``): the bridge counts the
    /// pushable messages of apps without push configured this way, and skips the others before parsing.
    static func isPushable(sentEvent data: [UInt8]) -> Bool {
        data.withUnsafeBufferPointer { bytes in
            guard let message = JSONMembers(bytes).member("message") else { return false }
            let conversationType = message.member("conversation_type")
            let push = message.member("push")
            return isPushable(
                conversationType: conversationType?.isString("peer") == true ? "peer" : conversationType?.isString("group") == true ? "group" : nil,
                stored: message.member("seq")?.int != nil, type: message.member("type")?.int,
                suppressed: message.member("suppressed")?.isString == true, deleted: message.member("deleted")?.bool == true,
                pushEnabled: push?.member("enable")?.bool != false)
        }
    }

    /// ``messageItem(sentEvent:)`` from the parsed Message object.
    static func messageItem(_ message: JSONValue) -> Sourced? {
        let push = message["push"]?.objectValue
        guard let id = message["message_id"]?.stringValue, let conversationType = message["conversation_type"]?.stringValue,
            isPushable(
                conversationType: conversationType, stored: message["seq"]?.intValue != nil, type: message["type"]?.intValue,
                suppressed: message["suppressed"]?.stringValue != nil, deleted: message["deleted"]?.boolValue == true,
                pushEnabled: push?["enable"]?.boolValue != false),
            let seq = message["seq"]?.intValue, let type = message["type"]?.intValue,
            let from = message["from"]?.stringValue, let to = message["to"]?.stringValue
        else { return nil }
        let item = PushItem(
            kind: .message, eventID: id, messageID: id, callID: nil, conversationType: conversationType,
            groupID: conversationType == "group" ? to : nil, sender: from, senderName: "", groupName: nil, applicationKind: nil,
            messageType: Int(type), seq: seq, priority: Int(message["priority"]?.intValue ?? 2), push: push ?? PushItem.defaultPush,
            defaultContent: PushItem.defaultContent(type: Int(type), body: message["body"]),
            imageURL: PushItem.imageURL(type: Int(type), body: message["body"]))
        let visibleTo = message["visible_to"]?.arrayValue?.compactMap(\.stringValue)
        return Sourced(item: item, recipients: recipients(conversationType: conversationType, to: to, visibleTo: visibleTo))
    }

    /// Who a message's push goes to: the peer, the group's members, or only the members a targeted group message lists
    /// (docs/messages.md#targeted-group-messages).
    private static func recipients(conversationType: String, to: String, visibleTo: [String]?) -> Sourced.Recipients {
        guard conversationType == "group" else { return .users([to]) }
        return visibleTo.map(Sourced.Recipients.users) ?? .groupMembers(to)
    }

    /// The item of one stored peer or group message, whatever its push options say (revoke pushes); with
    /// `onlyPushable`, nil unless the bridge pushes it (dry runs).
    static func messageItem(appID: String, messageID: String, onlyPushable: Bool = false, on db: PostgresConnection) throws -> PushItem? {
        try messageItems(appID: appID, messageIDs: [messageID], on: db, onlyPushable: onlyPushable)[messageID]?.item
    }

    /// The items of stored, unsuppressed peer and group messages of pushable types with `push.enable` not false
    /// (with `onlyPushable`), by message id.
    ///
    /// The conversation type is checked here, not in the WHERE clause: as an index condition it let the planner read
    /// the whole app through `messages_pkey (app_id, conv_type, …)` and filter by id whenever the table had no
    /// statistics yet (a fresh server's first minute: 6 ms per batch at 10,000 messages, growing with the table),
    /// where `messages_by_id (app_id, message_id)` finds each message directly.
    static func messageItems(
        appID: String, messageIDs: [String], on db: PostgresConnection, onlyPushable: Bool = true
    ) throws -> [String: Sourced] {
        guard !messageIDs.isEmpty else { return [:] }
        let rows = try db.query(
            """
            SELECT m.message_id, m.conv_type, m.sender, m.recipient, m.type, m.body, m.seq, m.priority, m.push, m.suppressed, m.deleted,
                   coalesce(u.name, ''), g.name, m.visible_to
            FROM messages m
            LEFT JOIN users u ON u.app_id = m.app_id AND u.user_id = m.sender
            LEFT JOIN groups g ON m.conv_type = 'group' AND g.app_id = m.app_id AND g.group_id = m.recipient
            WHERE m.app_id = \(appID) AND m.message_id = ANY(\(messageIDs))
            """)
        var out: [String: Sourced] = [:]
        for row in try rows.decode(
            (String, String, String, String, Int, PostgresCell, Int64, Int, String?, PostgresCell, Bool, String, String?, [String]?).self)
        {
            let (
                id, conversationType, sender, recipient, type, bodyCell, seq, priority, pushText, suppressed, deleted, senderName, groupName,
                visibleTo
            ) = row
            guard conversationType == "peer" || conversationType == "group" else { continue }
            let push = pushText.flatMap { (try? JSONValue.parse($0))?.objectValue }
            if onlyPushable {
                guard PushItem.pushableMessageTypes.contains(type), suppressed.isNull, !deleted, push?["enable"]?.boolValue != false else {
                    continue
                }
            }
            let body = bodyCell.isNull ? nil : try? JSONValue.parse(try bodyCell.string)
            let item = PushItem(
                kind: .message, eventID: id, messageID: id, callID: nil, conversationType: conversationType,
                groupID: conversationType == "group" ? recipient : nil, sender: sender, senderName: senderName, groupName: groupName,
                applicationKind: nil, messageType: type, seq: seq, priority: priority, push: push ?? PushItem.defaultPush,
                defaultContent: PushItem.defaultContent(type: type, body: body),
                imageURL: PushItem.imageURL(type: type, body: body))
            out[id] = Sourced(item: item, recipients: recipients(conversationType: conversationType, to: recipient, visibleTo: visibleTo))
        }
        return out
    }

    /// A broadcast's item from its event's message (app view, which carries `push`).
    private static func broadcastItem(_ message: JSONValue?, appID: String, on db: PostgresConnection) throws -> PushItem? {
        guard let message, let id = message["message_id"]?.stringValue, let from = message["from"]?.stringValue else { return nil }
        let push = message["push"]?.objectValue
        guard push?["enable"]?.boolValue != false else { return nil }
        let type = Int(message["type"]?.intValue ?? 1)
        let names = try PushStore.userNames(appID: appID, userIDs: [from], on: db)
        return PushItem(
            kind: .broadcast, eventID: id, messageID: id, callID: nil, conversationType: nil, groupID: nil, sender: from,
            senderName: names[from] ?? "", groupName: nil, applicationKind: nil, messageType: type, seq: nil, priority: 2,
            push: push ?? PushItem.defaultPush, defaultContent: PushItem.defaultContent(type: type, body: message["body"]),
            imageURL: PushItem.imageURL(type: type, body: message["body"]))
    }

    // MARK: - Calls

    /// The invitation push (`call`) `userID` got or gets for call `callID` (Migrations/0016; the calls domain sits
    /// above this one and writes its pushes through ``PushPlanner/call(kind:appID:callID:actor:userIDs:push:now:on:)``):
    /// nil when the call does not exist, `.some(nil)` when the user was never invited to it.
    static func callInvitation(appID: String, callID: String, userID: String, on db: PostgresConnection) throws -> PushItem?? {
        guard try db.query("SELECT 1 FROM calls WHERE app_id = \(appID) AND call_id = \(callID)").first != nil else { return nil }
        guard
            let inviter = try db.query(
                """
                SELECT inviter_id FROM call_users
                WHERE app_id = \(appID) AND call_id = \(callID) AND user_id = \(userID) AND inviter_id IS NOT NULL
                """
            ).decodeFirst(String.self)
        else { return .some(nil) }
        let names = try PushStore.userNames(appID: appID, userIDs: [inviter], on: db)
        return PushItem.call(.call, callID: callID, actor: inviter, actorName: names[inviter] ?? "", push: nil)
    }

    // MARK: - Applications

    /// A friend application's push: its send to `to` (with the send's `push`), its accept or reject to `from` (with
    /// the answer's `push`). Nothing without `push`, and nothing for resends and expiries.
    private static func friendApplication(
        _ application: JSONValue?, created: Bool, appID: String, on db: PostgresConnection
    ) throws -> Sourced? {
        guard let application, let id = application["application_id"]?.stringValue else { return nil }
        let state = application["state"]?.stringValue ?? ""
        guard created ? state == "waiting" : state == "accepted" || state == "rejected" else { return nil }
        guard
            let (from, to, push) = try db.query(
                """
                SELECT a.from_id, a.to_id, \(unsafeSQL: created ? "a.push" : "a.response_push")::text FROM friend_applications a
                WHERE a.app_id = \(appID) AND a.application_id = \(id)
                """
            ).decodeFirst((String, String, String?).self), let push
        else { return nil }
        return try applicationItem(
            id: id, kind: "friend", actor: created ? from : to, recipient: created ? to : from, push: push, appID: appID, on: db)
    }

    /// A group application's accept or reject (with the answer's `push`) to the applicant (`join`) or the inviter
    /// (`invite`).
    private static func groupApplication(_ application: JSONValue?, appID: String, on db: PostgresConnection) throws -> Sourced? {
        guard let application, let id = application["application_id"]?.stringValue else { return nil }
        let state = application["state"]?.stringValue ?? ""
        guard state == "accepted" || state == "rejected" else { return nil }
        guard
            let (type, userID, inviterID, actor, push) = try db.query(
                """
                SELECT type, user_id, inviter_id, coalesce(operated_by, user_id), response_push::text FROM group_applications
                WHERE app_id = \(appID) AND application_id = \(id)
                """
            ).decodeFirst((String, String, String?, String, String?).self), let push
        else { return nil }
        guard let recipient = type == "join" ? userID : inviterID else { return nil }
        return try applicationItem(id: id, kind: "group", actor: actor, recipient: recipient, push: push, appID: appID, on: db)
    }

    private static func applicationItem(
        id: String, kind: String, actor: String, recipient: String, push: String, appID: String, on db: PostgresConnection
    ) throws -> Sourced? {
        let config = (try? JSONValue.parse(push))?.objectValue ?? PushItem.defaultPush
        guard config["enable"]?.boolValue != false else { return nil }
        let names = try PushStore.userNames(appID: appID, userIDs: [actor], on: db)
        let item = PushItem(
            kind: .application, eventID: id, messageID: nil, callID: nil, conversationType: nil, groupID: nil, sender: actor,
            senderName: names[actor] ?? "", groupName: nil, applicationKind: kind, messageType: nil, seq: nil, priority: 2, push: config,
            defaultContent: "")
        return Sourced(item: item, recipients: .users([recipient]))
    }
}
