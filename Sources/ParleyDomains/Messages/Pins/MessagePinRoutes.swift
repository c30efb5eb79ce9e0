import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Pins and the replies list (docs/messages.md#reactions-pins-and-replies): HTTP ↔ ``MessagePins`` and
/// ``MessageReplies``.
package enum MessagePinRoutes {
    package static func register(on api: inout API) {
        api.add(.post, "/v1/messages/{message_id}/pin", .appOrUser, "pinMessage") { ctx in
            try pin(ctx, pinned: true)
        }

        api.add(.post, "/v1/messages/{message_id}/unpin", .appOrUser, "unpinMessage") { ctx in
            try pin(ctx, pinned: false)
        }

        api.add(.get, "/v1/users/{user_id}/conversations/{type}/{id}/pins", .appOrSelf, "listConversationPins") { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            let type = ctx.path("type")
            guard type == "peer" || type == "group" else { throw APIError.invalidParam("type", "must be peer or group") }
            let id = try ctx.pathID("id", type == "peer" ? .userID : .groupID)
            let rows = try MessagePins(ctx).list(type == "peer" ? .peer : .group, id: id, userID: userID)
            let viewer = MessageViewer(ctx)
            var w = JSONWriter(capacity: 256 + rows.count * 1024)
            w.beginObject()
            try MessageRow.writeItems(rows, count: rows.count, nextCursor: .none, to: &w, viewer)
            w.endObject()
            return Reply.json(w.bytes)
        }

        api.add(.get, "/v1/messages/{message_id}/replies", .appOrUser, "listMessageReplies") { ctx in
            try replies(ctx)
        }
    }

    /// `POST …/pin` and `…/unpin`: the Message as it is now. `operator` is the token's user, or with the app key the
    /// named user (its permission is checked) or nobody (the app itself).
    private static func pin(_ ctx: APIContext, pinned: Bool) throws -> Response {
        let messageID = try ctx.pathID("message_id", .opaque)
        var body = try ctx.body()
        let named = body.id("operator", .userID)
        try body.check()
        let operatorID = ctx.tokenUserID != nil ? try ctx.actingUser(named, field: "operator") : named
        let message = try MessageService.tellingUnstored(messageID, ctx) {
            try MessagePins(ctx).set(messageID, pinned: pinned, operatorID: operatorID)
        }
        return Reply.json(message.json(MessageViewer(ctx)))
    }

    /// `GET /v1/messages/{message_id}/replies`: `{root, items, next_cursor}`.
    private static func replies(_ ctx: APIContext) throws -> Response {
        let messageID = try ctx.pathID("message_id", .opaque)
        var query = ctx.query()
        let limit = query.limit()
        let cursor = query.cursor()
        try query.check()
        let viewer = MessageViewer(ctx)
        let service = MessageReplies(ctx)
        let root = try service.root(of: messageID, viewer: viewer)
        let list = "replies|\(ctx.appID)|\(ctx.tokenUserID ?? "")|\(root.messageID)"
        var afterSeq: Int64 = 0
        if let cursor {
            guard let seq = try ctx.decodeCursor(cursor, list: list).first?.intValue else {
                throw APIError(.invalidCursor, "malformed cursor")
            }
            afterSeq = seq
        }
        let rows = try service.replies(of: root, viewer: viewer, afterSeq: afterSeq, limit: limit + 1)
        let pageCount = min(rows.count, limit)
        var next: String?
        if rows.count > limit, let seq = try MessageRow(rows[pageCount - 1]).sequence() {
            next = ctx.cursors.encode(list: list, values: [.int(seq)])
        }
        var w = JSONWriter(capacity: 2048 + pageCount * 1024)
        w.beginObject()
        w.key(static: "root")
        w.object { w in
            w.key("message_id")
            w.writeString(root.messageID)
            w.key("state")
            w.writeString(root.state)
            w.key("reply_count")
            w.writeInt(root.replyCount)
            w.key("message")
            if let message = root.message { w.writeRaw(message.json(viewer)) } else { w.writeNull() }
        }
        try MessageRow.writeItems(rows, count: pageCount, nextCursor: .some(next), to: &w, viewer)
        w.endObject()
        return Reply.json(w.bytes)
    }
}
