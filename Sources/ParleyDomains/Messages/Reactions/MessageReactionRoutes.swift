import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Message reactions (docs/messages.md#reactions-pins-and-replies): HTTP ↔ ``MessageReactions``.
package enum MessageReactionRoutes {
    package static func register(on api: inout API, pool: PostgresPool) {
        let changes = MessageReactions.Changes(pool: pool)
        api.add(.post, "/v1/messages/{message_id}/reactions", .appOrUser, "addMessageReaction") { ctx in
            let messageID = try ctx.pathID("message_id", .opaque)
            var body = try ctx.body()
            let userID = try ctx.actingUser(body.id("user_id", .userID), field: body.fieldPath("user_id"))
            let reactionType = body.string(
                "reaction_type", required: true, minBytes: MessageReactions.typeBytes.lowerBound, maxBytes: MessageReactions.typeBytes.upperBound)
            try body.check()
            let change = try MessageService.tellingUnstored(messageID, ctx) {
                try MessageReactions(ctx).adding(messageID, userID: userID, reactionType: reactionType ?? "", viewer: MessageViewer(ctx))
            }
            return written(change, ctx, changes) { reactions in
                var o = JSONObjectWriter(capacity: 64 + reactions.count)
                o["message_id"] = messageID
                o.raw("reactions", reactions)
                return Reply.created(o.finish())
            }
        }

        api.add(.delete, "/v1/messages/{message_id}/reactions/{reaction_type}", .appOrUser, "removeMessageReaction") { ctx in
            let messageID = try ctx.pathID("message_id", .opaque)
            let reactionType = try pathReactionType(ctx)
            var query = ctx.query()
            // 403 for another user's token first (docs/errors.md#problems-rfc-9457), then the id's format.
            let userID = try ctx.actingUser(query.raw("user_id"), field: "user_id")
            _ = query.id("user_id", .userID)
            try query.check()
            let change = try MessageService.tellingUnstored(messageID, ctx) {
                try MessageReactions(ctx).removing(messageID, userID: userID, reactionType: reactionType)
            }
            return written(change, ctx, changes) { _ in Reply.noContent() }
        }

        api.add(.get, "/v1/messages/{message_id}/reactions/{reaction_type}/users", .appOrUser, "listMessageReactionUsers") { ctx in
            let messageID = try ctx.pathID("message_id", .opaque)
            let reactionType = try pathReactionType(ctx)
            var query = ctx.query()
            let limit = query.limit()
            let cursor = query.cursor()
            try query.check()
            let list = "reaction_users|\(ctx.appID)|\(messageID)|\(reactionType)"
            let after = try ctx.timeAndIDCursor(cursor, list: list)
            let (reactors, total) = try MessageService.tellingUnstored(messageID, ctx) {
                try MessageReactions(ctx).reactors(messageID, reactionType: reactionType, viewer: MessageViewer(ctx), after: after, limit: limit + 1)
            }
            let page = reactors.prefix(limit)
            let next =
                reactors.count > limit
                ? page.last.map { ctx.cursors.encode(list: list, values: [.int($0.reactedAt), .string($0.userID)]) } : nil
            var o = JSONObjectWriter(capacity: 128 + page.count * 96)
            o.write("items") { w in
                w.beginArray()
                for reactor in page { w.writeRaw(reactor.json()) }
                w.endArray()
            }
            o["next_cursor"] = next
            o["total_count"] = total
            return Reply.json(o.finish())
        }
    }

    /// The answer to `change` once its batch is written: `reply` to its summary, or its problem.
    private static func written(
        _ change: MessageReactions.Change, _ ctx: APIContext, _ changes: MessageReactions.Changes,
        reply: @escaping @Sendable ([UInt8]) -> Response
    ) -> Response {
        let (request, logger, appID) = (ctx.request, ctx.services.logger, ctx.appID)
        return .later { respond in
            changes.submit(change, appID: appID) { result in
                do { respond(reply(try result.get())) } catch { respond(ProblemRendering.handlerError(error, request: request, logger: logger)) }
            }
        }
    }

    /// The `{reaction_type}` path segment (percent-decoded by the router): 1–32 bytes, else 400.
    private static func pathReactionType(_ ctx: APIContext) throws -> String {
        let value = ctx.path("reaction_type")
        guard MessageReactions.typeBytes.contains(value.utf8.count) else {
            throw APIError.invalidParam("reaction_type", "must be 1 to 32 bytes")
        }
        return value
    }
}
