import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Scheduled messages (docs/scheduled-messages.md): a send with `send_at` (``schedule(_:_:batch:)``, from the send
/// routes) and the `/v1/scheduled_messages` routes, HTTP ↔ ``ScheduledMessageService``.
enum ScheduledMessageRoutes {
    /// `sending`: the node's sender of due messages, which the timer kind reaches through the node's services.
    static func register(on api: inout API, sending: ScheduledSending) {
        ScheduledSending.bind(sending, to: api.services)

        api.add(.get, "/v1/scheduled_messages", .app, "listScheduledMessages") { ctx in
            var query = ctx.query()
            let limit = query.limit()
            let userID = query.id("user_id", .userID)
            let stateName = query.choice("state", ["scheduled", "sent", "failed", "cancelled"])
            let cursor = query.cursor()
            try query.check()
            let list = "scheduled|\(ctx.appID)|\(userID ?? "")|\(stateName ?? "")"
            let before = try ctx.timeAndIDCursor(cursor, list: list)
            let items = try ScheduledMessageService(ctx).list(
                userID: userID, state: stateName.flatMap(ScheduledMessage.State.init(rawValue:)), before: before, limit: limit + 1)
            return ListPage.page(items, limit: limit, list: list, ctx: ctx, { [.int($0.createdAt), .string($0.scheduledID)] }) { $0.json() }
        }

        // A user token reads, edits and cancels the messages it sends; another user's are unknown to it (404).
        api.add(.get, "/v1/scheduled_messages/{scheduled_id}", .appOrUser, "getScheduledMessage") { ctx in
            let id = try ctx.pathID("scheduled_id", .opaque)
            return Reply.json(try ScheduledMessageService(ctx).get(id, viewer: ctx.tokenUserID).json())
        }

        api.add(.patch, "/v1/scheduled_messages/{scheduled_id}", .appOrUser, "updateScheduledMessage") { ctx in
            let id = try ctx.pathID("scheduled_id", .opaque)
            var r = try ctx.body()
            let sendAt = r.int("send_at", range: ScheduledMessageService.sendAtRange(now: ctx.now))
            let body = r.object["body"]
            if body == .null { r.addError("body", "must be an object") }
            try r.check()
            let edited = try ScheduledMessageService(ctx).edit(id, viewer: ctx.tokenUserID, sendAt: sendAt, body: body) { request, batch in
                // The edited request must pass a send's validation now, as at scheduling.
                var fields = BodyReader(request)
                _ = try validate(ctx, &fields, batch: batch)
            }
            return Reply.json(edited.json())
        }

        api.add(.delete, "/v1/scheduled_messages/{scheduled_id}", .appOrUser, "cancelScheduledMessage") { ctx in
            let id = try ctx.pathID("scheduled_id", .opaque)
            try ScheduledMessageService(ctx).cancel(id, viewer: ctx.tokenUserID)
            return Reply.noContent()
        }
    }

    /// Whether a send body asks to be sent later (`send_at` present and not null).
    static func asksToSchedule(_ body: BodyReader) -> Bool {
        guard let sendAt = body.object["send_at"] else { return false }
        return sendAt != .null
    }

    /// `POST /v1/messages` or `POST /v1/messages/batch` with `send_at`: 202 `{scheduled_id, send_at, state}`. The request
    /// is validated as the send would be now (400, 413, 422 at once); existence, policy and hooks are the send's, at
    /// `send_at`.
    static func schedule(_ ctx: APIContext, _ body: BodyReader, batch: Bool) throws -> Response {
        var r = body
        let sendAt = r.int("send_at", required: true, range: ScheduledMessageService.sendAtRange(now: ctx.now))
        let from = try validate(ctx, &r, batch: batch)
        guard let sendAt else { throw APIError.internalError }
        let scheduled = try ScheduledMessageService(ctx).schedule(
            request: body.object, userID: from, asUser: ctx.tokenUserID != nil, batch: batch, sendAt: sendAt)
        var o = JSONObjectWriter(capacity: 96)
        o["scheduled_id"] = scheduled.scheduledID
        o["send_at"] = scheduled.sendAt
        o["state"] = "scheduled"
        return Reply.json(o.finish(), status: 202)
    }

    /// Validates a send request (`batch`: of `POST /v1/messages/batch`) as the send route does before any database
    /// work, collecting `r`'s earlier field errors too; returns the sender.
    private static func validate(_ ctx: APIContext, _ r: inout BodyReader, batch: Bool) throws -> String {
        guard batch else { return try SendRequest(&r, ctx: ctx, settings: ctx.app.settings).from }
        _ = r.array("to_user_ids", required: true, minItems: 1, maxItems: 500)
        var probe = r
        let from = try SendRequest(&probe, ctx: ctx, settings: ctx.app.settings, batchRecipient: "").from
        try r.check()
        return from
    }
}
