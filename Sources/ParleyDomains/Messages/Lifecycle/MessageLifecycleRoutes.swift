import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Revoke, edit, delete and the edit history (docs/messages.md#revoke-edit-delete): HTTP ↔ ``MessageLifecycle``.
package enum MessageLifecycleRoutes {
    /// `revokePush`: the push bridge's revoke push (docs/push.md#what-is-pushed-to-whom), which the app layer wires
    /// (Push sits above Messages).
    package static func register(
        on api: inout API, pool: PostgresPool, blocklists: BlocklistCache,
        revokePush:
            @escaping @Sendable (_ db: PostgresConnection, _ appID: String, _ messageID: String, _ push: JSONValue?, _ now: Int64)
            throws -> Void
    ) {
        let revokes = MessageRevokes(pool: pool, removeObjects: MessageFiles.objectRemover(api.services), revokePush: revokePush)
        api.add(.post, "/v1/messages/{message_id}/revoke", .appOrUser, "revokeMessage") { ctx in
            let messageID = try ctx.pathID("message_id", .opaque)
            var body = try ctx.body()
            let actor = try actor(&body, ctx)
            let extendedData = body.string("revoke_extended_data", maxBytes: 1024) ?? ""
            let push = PushConfig.read(from: &body)
            try body.check()
            let (viewer, request, logger) = (MessageViewer(ctx), ctx.request, ctx.services.logger)
            let (appID, now, revokeWindowS) = (ctx.appID, ctx.now, ctx.app.settings.int("revoke_window_s"))
            let deleteFiles = ctx.app.settings.bool("delete_files_with_messages")
            let recentUnstored = MessageService.isRecentUnstored(messageID, ctx)
            return .later { respond in
                let job = MessageRevokes.Job(
                    messageID: messageID, actor: actor, extendedData: extendedData, push: push, now: now, revokeWindowS: revokeWindowS,
                    deleteFiles: deleteFiles)
                revokes.submit(job, appID: appID) { result in
                    do {
                        respond(Reply.json(try MessageService.tellingUnstored(messageID, recentUnstored) { try result.get() }.json(viewer)))
                    } catch {
                        respond(ProblemRendering.handlerError(error, request: request, logger: logger))
                    }
                }
            }
        }

        api.add(.patch, "/v1/messages/{message_id}", .appOrUser, "editMessage") { ctx in
            let messageID = try ctx.pathID("message_id", .opaque)
            var body = try ctx.body()
            let actor = try actor(&body, ctx)
            let newBody = body.value("body", required: true)
            let extendedData = body.string("extended_data", maxBytes: 4096)
            try body.check()
            guard let newBody else { throw APIError.internalError }
            let message = try MessageService.tellingUnstored(messageID, ctx) {
                try MessageLifecycle(ctx).edit(
                    messageID, by: actor, body: newBody, extendedData: extendedData, settings: ctx.app.settings, blocklists: blocklists)
            }
            return Reply.json(message.json(MessageViewer(ctx)))
        }

        api.add(.post, "/v1/messages/delete", .appOrUser, "deleteMessages") { ctx in
            var body = try ctx.body()
            let scope = body.enumeration("scope", MessageLifecycle.DeleteScope.self, required: true)
            let items = body.batchIDs("message_ids", minItems: 1, maxItems: 100, kind: .opaque)
            var userID: String?
            var actor = MessageLifecycle.Actor()
            if scope == .`self` {
                userID = try ctx.actingUser(body.id("user_id", .userID), field: body.fieldPath("user_id"))
            } else {
                actor = try Self.actor(&body, ctx)
            }
            try body.check()
            guard let scope else { throw APIError.internalError }
            let results = try MessageLifecycle(ctx).delete(items, scope: scope, userID: userID, by: actor, revokePush: revokePush)
            return Reply.batch(results)
        }

        api.add(.get, "/v1/messages/{message_id}/edits", .appOrUser, "listMessageEdits") { ctx in
            let messageID = try ctx.pathID("message_id", .opaque)
            var query = ctx.query()
            let limit = query.limit()
            let cursor = query.cursor()
            try query.check()
            let list = "edits|\(ctx.appID)|\(messageID)"
            var from = 1
            if let cursor {
                guard let version = try ctx.decodeCursor(cursor, list: list).first?.intValue else {
                    throw APIError(.invalidCursor, "malformed cursor")
                }
                from = Int(version) + 1
            }
            let rows = try MessageLifecycle(ctx).edits(messageID, viewer: MessageViewer(ctx), from: from, limit: limit + 1)
            let page = rows.prefix(limit)
            let next = rows.count > limit ? page.last.map { ctx.cursors.encode(list: list, values: [.int(Int64($0.version))]) } : nil
            return Reply.list(page.map(\.json), nextCursor: next)
        }
    }

    /// The acting user of a revoke, edit or delete for everyone: `operator` (the token's user for a user token;
    /// optional for the app key, which then acts itself) and `skip_checks` (app key only).
    private static func actor(_ body: inout BodyReader, _ ctx: APIContext) throws -> MessageLifecycle.Actor {
        let named = body.id("operator", .userID)
        let operatorID = ctx.tokenUserID == nil ? named : try ctx.actingUser(named, field: body.fieldPath("operator"))
        let skipChecks = try ctx.appOnlyFlag(body.bool("skip_checks"))
        return try MessageLifecycle(ctx).actor(userID: operatorID, skipChecks: skipChecks)
    }
}
