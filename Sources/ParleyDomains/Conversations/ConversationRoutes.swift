import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Conversations (docs/conversations.md): HTTP ↔ ``ConversationService``. Paths are under the owner's
/// `/v1/users/{user_id}`; a user token acts only on its own entries (`.appOrSelf`).
package enum ConversationRoutes {
    package static func register(on api: inout API) {
        api.add(.get, "/v1/users/{user_id}/conversations", .appOrSelf, "listConversations") { ctx in
            try list(ctx)
        }

        api.add(.get, "/v1/users/{user_id}/conversations/{type}/{id}", .appOrSelf, "getConversation") { ctx in
            let (userID, type, id) = try address(ctx)
            return Reply.json(try ConversationService(ctx).get(userID: userID, type: type, id: id, on: ctx.db).json(MessageViewer(ctx), now: ctx.now))
        }

        api.add(.patch, "/v1/users/{user_id}/conversations/{type}/{id}", .appOrSelf, "updateConversation") { ctx in
            try update(ctx)
        }

        api.add(.delete, "/v1/users/{user_id}/conversations/{type}/{id}", .appOrSelf, "deleteConversation") { ctx in
            let (userID, type, id) = try address(ctx)
            var query = ctx.query()
            let deleteMessages = query.bool("delete_messages") ?? false
            try query.check()
            try ConversationService(ctx).delete(userID: userID, type: type, id: id, deleteMessages: deleteMessages)
            return Reply.noContent()
        }

        api.add(.post, "/v1/users/{user_id}/conversations/{type}/{id}/read", .appOrSelf, "markConversationRead") { ctx in
            let (userID, type, id) = try address(ctx)
            var body = try ctx.body()
            let seq = body.int("seq", range: 0...Int64.max)
            try body.check()
            let conversation = try ConversationService(ctx).markRead(userID: userID, type: type, id: id, seq: seq)
            return Reply.json(conversation.json(MessageViewer(ctx), now: ctx.now))
        }

        api.add(.post, "/v1/users/{user_id}/conversations/read_all", .appOrSelf, "markAllConversationsRead") { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            let count = try ConversationService(ctx).markAllRead(userID: userID)
            var o = JSONObjectWriter(capacity: 32)
            o["conversations"] = count
            return Reply.json(o.finish())
        }

        api.add(.post, "/v1/users/{user_id}/conversations/marks", .appOrSelf, "setConversationMarks") { ctx in
            try marks(ctx)
        }

        api.add(.get, "/v1/users/{user_id}/unread_count", .appOrSelf, "getUnreadCount") { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            var query = ctx.query()
            var filter = readFilter(&query)
            filter.excludeDND = query.bool("exclude_dnd") ?? false
            try query.check()
            var o = JSONObjectWriter(capacity: 32)
            o["unread_count"] = try ConversationService(ctx).totalUnread(userID: userID, filter: filter)
            return Reply.json(o.finish())
        }
    }

    /// `notification_status` (docs/api.md).
    enum NotificationStatus: String, CaseIterable {
        case notify
        case doNotDisturb = "do_not_disturb"
    }

    /// The conversation types that have entries (rooms have none).
    enum EntryType: String, CaseIterable {
        case peer, group
    }

    /// `{user_id}`, `{type}` (peer or group) and `{id}` of an entry's path.
    private static func address(_ ctx: APIContext) throws -> (String, String, String) {
        let userID = try ctx.pathID("user_id", .userID)
        let type = ctx.path("type")
        guard type == "peer" || type == "group" else { throw APIError.invalidParam("type", "must be peer or group") }
        return (userID, type, try ctx.pathID("id", type == "peer" ? .userID : .groupID))
    }

    /// `types` and `marks` (-1 any marked, 0 unmarked, 1–20 union), shared by the list and the total.
    private static func readFilter(_ query: inout QueryReader) -> ConversationService.Filter {
        var filter = ConversationService.Filter()
        if let types = query.list("types", maxItems: 2) {
            if types.allSatisfy({ $0 == "peer" || $0 == "group" }) {
                filter.types = types.isEmpty ? nil : types
            } else {
                query.addError("types", "must be a list of peer, group")
            }
        }
        if let marks = query.list("marks", maxItems: 22) {
            var wanted: [Int64] = []
            for raw in marks {
                guard let mark = Int64(raw), (-1...20).contains(mark) else {
                    query.addError("marks", "must be a list of -1, 0 or 1 to 20")
                    break
                }
                switch mark {
                case -1: filter.anyMarked = true
                case 0: filter.unmarked = true
                default: wanted.append(mark)
                }
            }
            if !wanted.isEmpty { filter.marks = wanted }
        }
        return filter
    }

    /// `GET …/conversations`: by `order_key` desc, then type desc, then id desc.
    private static func list(_ ctx: APIContext) throws -> Response {
        let userID = try ctx.pathID("user_id", .userID)
        var query = ctx.query()
        var filter = readFilter(&query)
        filter.unreadOnly = query.bool("unread_only") ?? false
        filter.pinned = query.bool("pinned")
        let limit = query.limit()
        let cursor = query.cursor()
        try query.check()
        let list =
            "conversations|\(ctx.appID)|\(userID)|\(filter.types ?? [])|\(filter.marks ?? [])|\(filter.anyMarked)|\(filter.unmarked)|"
            + "\(filter.unreadOnly)|\(String(describing: filter.pinned))"
        var after: (orderKey: Int64, type: String, id: String)?
        if let cursor {
            let values = try ctx.decodeCursor(cursor, list: list)
            guard values.count == 3, let key = values[0].intValue, let type = values[1].stringValue, let id = values[2].stringValue else {
                throw APIError(.invalidCursor, "malformed cursor")
            }
            after = (key, type, id)
        }
        let entries = try ConversationService(ctx).list(userID: userID, filter: filter, after: after, limit: limit + 1)
        let page = entries.prefix(limit)
        let next =
            entries.count > limit
            ? page.last.map { ctx.cursors.encode(list: list, values: [.int($0.orderKey), .string($0.type), .string($0.id)]) } : nil
        let viewer = MessageViewer(ctx)
        return Reply.list(page.map { $0.json(viewer, now: ctx.now) }, nextCursor: next)
    }

    /// `PATCH …/conversations/{type}/{id}`: `pinned`, `notification_status`, `draft`; `alias` is for groups only.
    private static func update(_ ctx: APIContext) throws -> Response {
        let (userID, type, id) = try address(ctx)
        var body = try ctx.body()
        var patch = ConversationService.Patch()
        patch.pinned = body.bool("pinned")
        patch.notificationStatus = body.enumeration("notification_status", NotificationStatus.self)?.rawValue
        patch.draft = body.string("draft", maxBytes: 4096)
        if type == "group" {
            patch.alias = body.string("alias", maxBytes: 64)
        } else if body.contains("alias") {
            body.addError("alias", "applies to group conversations only")
        }
        try body.check()
        let conversation = try ConversationService(ctx).update(userID: userID, type: type, id: id, patch: patch)
        return Reply.json(conversation.json(MessageViewer(ctx), now: ctx.now))
    }

    /// `POST …/conversations/marks`: batch with `id` = `"type:id"`; per item `conversation_not_found`.
    private static func marks(_ ctx: APIContext) throws -> Response {
        let userID = try ctx.pathID("user_id", .userID)
        var body = try ctx.body()
        let mark = body.int("mark", required: true, range: 1...20)
        let enable = body.bool("enable", required: true)
        let items = body.objectArray("conversations", required: true, minItems: 1, maxItems: 100) { item, _ -> (String, String) in
            let type = item.enumeration("type", EntryType.self, required: true)?.rawValue ?? ""
            let id = item.string("id", required: true, minBytes: 1, maxBytes: 32) ?? ""
            return (type, id)
        }
        try body.check()
        guard let mark, let enable, let items else { throw APIError.internalError }
        var seen: Set<String> = []
        var keys: [(type: String, id: String)] = []
        var repeated: Set<Int> = []
        for (index, item) in items.enumerated() {
            if seen.insert(item.0 + ":" + item.1).inserted { keys.append(item) } else { repeated.insert(index) }
        }
        let existing = try ConversationService(ctx).setMark(userID: userID, mark: mark, enable: enable, keys: keys)
        let results = items.enumerated().map { index, item -> BatchResult in
            let key = item.0 + ":" + item.1
            if repeated.contains(index) {
                return BatchResult(index: index, id: key, outcome: .failed(.invalidParams, "conversation \(key) is repeated in this request"))
            }
            guard existing.contains(key) else {
                return BatchResult(index: index, id: key, outcome: .failed(.conversationNotFound, "conversation \(key) not found"))
            }
            return BatchResult(index: index, id: key, outcome: .ok(nil))
        }
        return Reply.batch(results)
    }
}
