import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// The push bridge's routes (docs/push.md#the-attempt-log): the dry run (or a real test push) and the attempt log.
package enum PushRoutes {
    package static func register(on api: inout API, bridge: PushBridge) {
        api.add(.post, "/v1/push/test", .app, "testPush") { ctx in
            try test(ctx, bridge: bridge)
        }

        api.add(.get, "/v1/push/attempts", .app, "listPushAttempts") { ctx in
            var query = ctx.query()
            var filter = PushAttemptFilter()
            filter.userID = query.id("user_id", .userID)
            filter.messageID = query.id("message_id", .opaque)
            filter.callID = query.id("call_id", .opaque)
            filter.kind = query.choice("kind", PushItem.Kind.allCases.map(\.rawValue))
            filter.status = query.choice("status", ["pending", "sent", "rejected", "failed", "suppressed"])
            let limit = query.limit()
            let cursor = query.cursor()
            try query.check()
            let list = "push_attempts|\(ctx.appID)"
            var after: (Int64, String)?
            if let cursor {
                let values = try ctx.decodeCursor(cursor, list: list)
                guard values.count == 2, let at = values[0].intValue, let id = values[1].stringValue else {
                    throw APIError(.invalidCursor, "malformed cursor")
                }
                after = (at, id)
            }
            let rows = try PushService(ctx).attempts(filter, after: after, limit: limit + 1)
            let page = rows.prefix(limit)
            let next =
                rows.count > limit
                ? page.last.map { ctx.cursors.encode(list: list, values: [.int($0.createdAt), .string($0.attemptID)]) } : nil
            return Reply.list(page.map { $0.json() }, nextCursor: next)
        }

        api.add(.get, "/v1/push/attempts/{attempt_id}", .app, "getPushAttempt") { ctx in
            let attemptID = try ctx.pathID("attempt_id", .opaque)
            return Reply.json(try PushService(ctx).attempt(attemptID).json())
        }
    }

    /// `POST /v1/push/test`: the push decision (docs/push.md#what-is-pushed-to-whom) for each of the user's devices and
    /// the request it comes to; with `dry_run: false` the request is really sent (kind `test`) and logged as an
    /// attempt.
    private static func test(_ ctx: APIContext, bridge: PushBridge) throws -> Response {
        var body = try ctx.body()
        let userID = body.id("user_id", .userID, required: true)
        let messageID = body.id("message_id", .opaque)
        let callID = body.id("call_id", .opaque)
        let message = body.contains("message") && !body.isNull("message") ? body.object("message") { $0.object } : nil
        let dryRun = body.bool("dry_run") ?? true
        let given = [messageID != nil, callID != nil, message != nil].filter { $0 }.count
        if given != 1 { body.addError("message", "give exactly one of message, message_id and call_id") }
        try body.check()
        guard let userID else { throw APIError.internalError }
        let source: PushService.TestSource
        if let message {
            var reader = BodyReader(message, path: "body.message")
            source = .unsent(try SendRequest(&reader, ctx: ctx, settings: ctx.app.settings))
        } else if let messageID {
            source = .message(messageID)
        } else if let callID {
            source = .call(callID)
        } else {
            throw APIError.internalError
        }
        let outcome = try PushService(ctx).test(
            userID: userID, source, dryRun: dryRun, settings: PushSettings(ctx.app.settings), bridge: bridge)
        var o = JSONObjectWriter(capacity: 1024)
        o.write("decisions") { w in
            w.beginArray()
            for (device, reason) in outcome.decision.devices {
                var d = JSONObjectWriter(capacity: 128)
                d["device_id"] = device.deviceID
                d["platform"] = device.platform.rawValue
                d["provider"] = device.provider.rawValue
                d["selected"] = reason == nil
                d["reason"] = reason?.rawValue
                w.writeRaw(d.finish())
            }
            w.endArray()
        }
        if let row = outcome.attempt, let url = row.url, let requestBody = row.body {
            var r = JSONObjectWriter(capacity: 256 + requestBody.utf8.count)
            r["url"] = url
            r.raw("body", Array(requestBody.utf8))
            o.raw("request", r.finish())
        } else {
            o["request"] = JSONValue.null
        }
        if let response = outcome.response {
            var r = JSONObjectWriter(capacity: 256)
            r["status_code"] = response.statusCode.map { Int64($0) }
            r["body"] = String(decoding: response.body, as: UTF8.self)
            r["rejected"] = JSONValue.array(response.rejectedKeys.map(JSONValue.string))
            o.raw("response", r.finish())
        } else {
            o["response"] = JSONValue.null
        }
        if !dryRun, let row = outcome.attempt { o.raw("attempt", row.json()) }
        return Reply.json(o.finish())
    }
}
