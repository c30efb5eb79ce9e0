import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// The push bridge's routes (docs/push.md#the-attempt-log): the dry run (or a real test push) and the attempt log.
package enum PushRoutes {
    /// A real test push holds its pool worker while it waits for the gateway: at most this long.
    static let testTimeoutMillis = 5000

    package static func register(on api: inout API, bridge: PushBridge) {
        api.add(.post, "/v1/push/test", .app, "testPush") { ctx in
            try test(ctx, bridge: bridge)
        }

        api.add(.get, "/v1/push/attempts", .app, "listPushAttempts") { ctx in
            var query = ctx.query()
            var filter = PushStore.Filter()
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
            let rows = try PushStore.list(appID: ctx.appID, filter: filter, after: after, limit: limit + 1, on: ctx.db)
            let page = rows.prefix(limit)
            let next =
                rows.count > limit
                ? page.last.map { ctx.cursors.encode(list: list, values: [.int($0.createdAt), .string($0.attemptID)]) } : nil
            return Reply.list(page.map { $0.json() }, nextCursor: next)
        }

        api.add(.get, "/v1/push/attempts/{attempt_id}", .app, "getPushAttempt") { ctx in
            let attemptID = try ctx.pathID("attempt_id", .opaque)
            guard let attempt = try PushStore.fetch(appID: ctx.appID, attemptID: attemptID, on: ctx.db) else {
                throw APIError(.notFound, "push attempt \(attemptID) does not exist")
            }
            return Reply.json(attempt.json())
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
        guard let user = try UserStore.fetch(appID: ctx.appID, userID: userID, on: ctx.db), !user.isDeleted else {
            throw UserService.notFound(userID)
        }
        var item: PushItem
        if let message {
            item = try unsentMessageItem(message, ctx: ctx)
            try requireRecipient(userID, of: item, ctx: ctx)
        } else if let messageID {
            guard try MessageStore.fetch(appID: ctx.appID, messageID: messageID, on: ctx.db) != nil else {
                throw APIError(.messageNotFound, "message \(messageID) does not exist")
            }
            // A room message, an unpushable type, a suppressed or deleted message, `push.enable: false`: the bridge
            // pushes nothing for it, so there is nothing to predict.
            guard let stored = try PushSources.messageItem(appID: ctx.appID, messageID: messageID, onlyPushable: true, on: ctx.db) else {
                throw APIError(.unsupportedOperation, "message \(messageID) is not pushed (see docs/push.md: what is pushed)")
            }
            try requireRecipient(userID, of: stored, ctx: ctx)
            item = stored
        } else {
            guard let callID, let invitation = try PushSources.callInvitation(appID: ctx.appID, callID: callID, userID: userID, on: ctx.db)
            else { throw APIError(.callNotFound, "call \(callID ?? "") does not exist") }
            guard let invited = invitation else {
                throw APIError(.unsupportedOperation, "user \(userID) is not invited to call \(callID)")
            }
            item = invited
        }
        let settings = PushSettings(ctx.app.settings)
        if !dryRun {
            guard settings.configured else { throw APIError(.pushNotConfigured, "push is not enabled or has no gateway_url") }
            item.kind = .test
        }
        let (recipient, decision) = try decide(item, for: userID, settings: settings, ctx: ctx)
        var row =
            recipient.devices.isEmpty
            ? nil : PushPlanner.attempt(item, to: recipient, decision: decision, settings: settings, appID: ctx.appID, now: ctx.now)
        var response: [UInt8]?
        if !dryRun, var attempt = row {
            try ctx.db.transaction { db in try PushStore.insert([attempt], appID: ctx.appID, sentByCaller: true, on: db) }
            if attempt.status == "pending", let url = attempt.url, let body = attempt.body {
                let claimed = PushBridge.Claimed(
                    attemptID: attempt.attemptID, appID: ctx.appID, kind: attempt.kind, url: url, format: settings.format,
                    body: Array(body.utf8), attempt: 1, maxAttempts: 1, timeoutMillis: min(settings.timeoutMillis, Self.testTimeoutMillis),
                    secret: settings.secret,
                    pushKeys: attempt.pushKeys)
                let result = bridge.send(claimed)
                // Its `device.removed` events (rejected keys) are in this request's transaction: the pipeline
                // sequences them before the answer.
                try ctx.db.transaction { db in
                    _ = try PushBridge.record([PushBridge.Outcome(claimed: claimed, result: result)], now: result.at, on: db)
                }
                bridge.metrics.recorded([(attempt.kind, result.status)])
                var r = JSONObjectWriter(capacity: 256)
                r["status_code"] = result.statusCode.map { Int64($0) }
                r["body"] = String(decoding: result.attempt.responseBody.prefix(1024), as: UTF8.self)
                r["rejected"] = JSONValue.array(result.rejectedKeys.map(JSONValue.string))
                response = r.finish()
                attempt = try PushStore.fetch(appID: ctx.appID, attemptID: attempt.attemptID, on: ctx.db) ?? attempt
            }
            row = attempt
        }
        var o = JSONObjectWriter(capacity: 1024)
        o.write("decisions") { w in
            w.beginArray()
            for (device, reason) in decision.devices {
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
        if let row, let url = row.url, let requestBody = row.body {
            var r = JSONObjectWriter(capacity: 256 + requestBody.utf8.count)
            r["url"] = url
            r.raw("body", Array(requestBody.utf8))
            o.raw("request", r.finish())
        } else {
            o["request"] = JSONValue.null
        }
        if let response { o.raw("response", response) } else { o["response"] = JSONValue.null }
        if !dryRun, let row { o.raw("attempt", row.json()) }
        return Reply.json(o.finish())
    }

    /// The decision for one user, with its state read as the planner reads it.
    private static func decide(
        _ item: PushItem, for userID: String, settings: PushSettings, ctx: APIContext
    ) throws -> (PushRecipient, PushDecision) {
        var recipient =
            try PushStore.recipients(appID: ctx.appID, userIDs: [userID], on: ctx.db)[userID] ?? PushRecipient(userID: userID, devices: [])
        if item.enableBadge { recipient.unread = try ConversationStore.totalUnread(appID: ctx.appID, userIDs: [userID], on: ctx.db)[userID] ?? 0 }
        if item.kind.respectsDoNotDisturb || item.kind == .test, let type = item.conversationType, let id = item.conversationID {
            recipient.doNotDisturb =
                try !PushStore.doNotDisturb(appID: ctx.appID, entries: [(userID, type, id)], on: ctx.db).isEmpty
        }
        // A test push is decided as the item it stands for: a call invitation or a message.
        let kind = item.kind == .test ? (item.callID != nil ? PushItem.Kind.call : .message) : item.kind
        return (recipient, PushDecision(kind: kind, configured: settings.configured, recipient: recipient))
    }

    /// The item of a send body (`POST /v1/messages`), as if it were sent now (no `event_id`, no `seq`).
    private static func unsentMessageItem(_ object: JSONObject, ctx: APIContext) throws -> PushItem {
        var reader = BodyReader(object, path: "body.message")
        let request = try SendRequest(&reader, ctx: ctx, settings: ctx.app.settings)
        guard request.conversationType != .room, request.stored, PushItem.pushableMessageTypes.contains(Int(request.body.type.rawValue)),
            request.push?["enable"]?.boolValue != false
        else {
            throw APIError(.unsupportedOperation, "this message would not be pushed (see docs/push.md: what is pushed)")
        }
        let names = try PushStore.userNames(appID: ctx.appID, userIDs: [request.from], on: ctx.db)
        let groupName =
            request.conversationType == .group
            ? try ctx.db.query("SELECT name FROM groups WHERE app_id = \(ctx.appID) AND group_id = \(request.to)").decodeFirst(String.self)
            : nil
        let type = Int(request.body.type.rawValue)
        return PushItem(
            kind: .message, eventID: "", messageID: nil, callID: nil, conversationType: request.conversationType.rawValue,
            groupID: request.conversationType == .group ? request.to : nil, sender: request.from, senderName: names[request.from] ?? "",
            groupName: groupName, peerRecipient: request.conversationType == .peer ? request.to : nil, applicationKind: nil,
            messageType: type, seq: nil, priority: Int(request.priority),
            push: request.push?.objectValue ?? PushItem.defaultPush, defaultContent: PushItem.defaultContent(type: type, body: request.body.json))
    }

    /// 422 `6000013` unless `userID` receives `item`: the other side of a peer message, a member of its group (now:
    /// the planner asks for membership when the message was sent, which differs only for a member who joined or left
    /// since).
    private static func requireRecipient(_ userID: String, of item: PushItem, ctx: APIContext) throws {
        let receives: Bool
        if item.sender == userID {
            receives = false
        } else if item.conversationType == "group", let groupID = item.groupID {
            receives = try GroupStore.member(appID: ctx.appID, groupID: groupID, userID: userID, on: ctx.db) != nil
        } else if let messageID = item.messageID {
            receives =
                try ctx.db.query(
                    "SELECT recipient FROM messages WHERE app_id = \(ctx.appID) AND message_id = \(messageID)"
                ).decodeFirst(String.self) == userID
        } else {
            receives = item.peerRecipient == userID
        }
        guard receives else {
            throw APIError(.unsupportedOperation, "user \(userID) is not a recipient of \(item.messageID.map { "message " + $0 } ?? "this message")")
        }
    }
}
