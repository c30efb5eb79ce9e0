import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Message search (docs/messages.md#search): HTTP ↔ ``MessageSearch``.
package enum MessageSearchRoutes {
    package static func register(on api: inout API) {
        api.add(.get, "/v1/messages/search", .appOrUser, "searchMessages") { ctx in
            try search(ctx)
        }
    }

    /// `GET /v1/messages/search`: a list of Message by `timestamp`, then `seq`, then `message_id`, in `order`.
    private static func search(_ ctx: APIContext) throws -> Response {
        var query = ctx.query()
        var s = MessageSearch()
        // A user token searches its own history only (docs/users.md#user-tokens); the app searches everything, or one
        // user's view.
        if let tokenUser = ctx.tokenUserID {
            if let named = query.raw("user_id"), named != tokenUser { throw APIError.forbidden("a user token acts only for its own user") }
            s.viewer = tokenUser
        } else {
            s.viewer = query.id("user_id", .userID)
        }
        let keywords = (query.string("q") ?? "").split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        if keywords.count > 5 { query.addError("q", "at most 5 keywords") }
        s.conversationType = query.choice("conversation_type", ["peer", "group", "room"]).flatMap(ConversationType.init(rawValue:))
        let conversationID = query.raw("conversation_id")
        s.types = integers(&query, "types", range: 0...Int64(Int32.max), maxItems: 20)
        s.subTypes = integers(&query, "sub_types", range: 0...200, maxItems: 201)
        if let senders = query.list("senders", maxItems: 5) {
            for sender in senders where IdentifierKind.userID.problem(sender) != nil {
                query.addError("senders", "must be a list of user ids")
            }
            s.senders = senders
        }
        s.startAt = query.int("start_at", range: 0...Int64.max)
        s.endAt = query.int("end_at", range: 0...Int64.max)
        if let startAt = s.startAt, let endAt = s.endAt, endAt <= startAt { query.addError("end_at", "must be after start_at") }
        s.ascending = query.choice("order", ["desc", "asc"]) == "asc"
        s.limit = query.limit()
        let cursor = query.cursor()
        if let conversationID {
            if let type = s.conversationType {
                let kind: IdentifierKind = type == .peer ? .userID : type == .group ? .groupID : .roomID
                if let problem = kind.problem(conversationID) { query.addError("conversation_id", problem) }
                if type == .peer && s.viewer == nil { query.addError("user_id", "is required to name a peer conversation") }
            } else {
                query.addError("conversation_type", "is required with conversation_id")
            }
        }
        try query.check()
        let list =
            "search|\(ctx.appID)|\(s.viewer ?? "")|\(keywords.joined(separator: " "))|\(s.conversationType?.rawValue ?? "")|"
            + "\(conversationID ?? "")|\(query.raw("types") ?? "")|\(query.raw("sub_types") ?? "")|\(query.raw("senders") ?? "")|"
            + "\(s.startAt.map { String($0) } ?? "")|\(s.endAt.map { String($0) } ?? "")|\(s.ascending)"
        if let values = try ListPage.cursorValues(ctx, cursor, list: list, count: 3) {
            guard let timestamp = values[0].intValue, let seq = values[1].intValue, let messageID = values[2].stringValue else {
                throw ListPage.malformedCursor()
            }
            s.after = .init(timestamp: timestamp, seq: seq, messageID: messageID)
        }

        let limit = s.limit
        s.limit = limit + 1
        let rows = try MessageService(ctx).search(s, conversationID: conversationID, keywords: keywords)
        let pageCount = min(rows.count, limit)
        var next: String?
        if rows.count > limit {
            let last = MessageRow(rows[pageCount - 1])
            next = ctx.cursors.encode(
                list: list,
                values: [.int(try last.integer(.timestamp)), .int(try last.sequence() ?? 0), .string(try last[.messageID].string)])
        }
        return Reply.json(try MessageRoutes.page(rows, count: pageCount, nextCursor: next, viewer: MessageViewer(ctx)))
    }

    /// A comma-separated list of integers in `range` (400 naming `name` otherwise); nil when absent.
    private static func integers(_ query: inout QueryReader, _ name: String, range: ClosedRange<Int64>, maxItems: Int) -> [Int64]? {
        guard let items = query.list(name, maxItems: maxItems) else { return nil }
        var values: [Int64] = []
        for item in items {
            guard let value = Int64(item), range.contains(value) else {
                query.addError(name, "must be a list of integers from \(range.lowerBound) to \(range.upperBound)")
                return nil
            }
            values.append(value)
        }
        return values
    }
}
