import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres
import ParleySync

/// Messages (docs/messages.md#sending, docs/messages.md#history): HTTP ↔ ``MessageService``.
package enum MessageRoutes {
    /// `writer`: the node's message writer (built and started by the app layer); `blocklists`: the node's compiled
    /// blocklists, checked on every send (docs/blocklists.md#where-lists-apply).
    package static func register(on api: inout API, writer: MessageWriter, blocklists: BlocklistCache) {
        // Sends with `send_at` are kept for later and sent through this route's handlers (docs/scheduled-messages.md).
        ScheduledMessageRoutes.register(on: &api, sending: ScheduledSending(writer: writer, blocklists: blocklists))
        api.add(
            .post, "/v1/messages", .appOrUser, "sendMessage", numbersItsEvents: true,
            // User-token sends have their own bucket besides the token's (docs/errors.md#rate-limits).
            userBucket: .init(name: "s", refusal: "send rate limit exceeded") { $0.userSendRatePerS },
            onEventLoop: { caller in try sendOnEventLoop(caller, writer: writer, blocklists: blocklists) }
        ) { ctx in
            try send(ctx, writer: writer, blocklists: blocklists)
        }

        api.add(.post, "/v1/messages/batch", .app, "batchSendMessages", numbersItsEvents: true) { ctx in
            try batchSend(ctx, writer: writer, blocklists: blocklists)
        }

        api.add(.post, "/v1/messages/broadcast", .app, "broadcastMessage") { ctx in
            try broadcast(ctx)
        }

        api.add(.get, "/v1/messages/{message_id}", .appOrUser, "getMessage") { ctx in
            let messageID = try ctx.pathID("message_id", .opaque)
            let viewer = MessageViewer(ctx)
            let message = try MessageService(ctx).get(messageID, viewer: viewer, on: ctx.db)
            return Reply.json(try MessageReactions(ctx).forViewer(message, viewer).json(viewer))
        }

        api.add(.get, "/v1/messages/{message_id}/combined", .appOrUser, "listCombinedMessages") { ctx in
            try combined(ctx)
        }

        api.add(
            .get, "/v1/users/{user_id}/conversations/{type}/{id}/messages", .appOrSelf, "listConversationMessages",
            onEventLoop: { caller in
                let path = caller.request.pathParameters
                let type: ConversationType? = path["type"] == "peer" ? .peer : path["type"] == "group" ? .group : nil
                guard let type, let userID = path["user_id"], IdentifierKind.userID.problem(userID) == nil, let id = path["id"],
                    (type == .peer ? IdentifierKind.userID : .groupID).problem(id) == nil
                else { throw NeedsConnection() }
                return try cachedNewestPage(caller, type: type, id: id, viewer: userID)
            }
        ) { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            let type = ctx.path("type")
            guard type == "peer" || type == "group" else { throw APIError.invalidParam("type", "must be peer or group") }
            let id = try ctx.pathID("id", type == "peer" ? .userID : .groupID)
            return try history(ctx, type: type == "peer" ? .peer : .group, id: id, viewer: userID)
        }

        api.add(
            .get, "/v1/groups/{group_id}/messages", .appOrUser, "listGroupMessages",
            onEventLoop: { caller in
                guard let id = caller.request.pathParameters["group_id"], IdentifierKind.groupID.problem(id) == nil else {
                    throw NeedsConnection()
                }
                return try cachedNewestPage(caller, type: .group, id: id, viewer: caller.tokenUserID)
            }
        ) { ctx in
            // The app reads everything stored in the group; a member's token reads exactly its own view.
            try history(ctx, type: .group, id: try ctx.pathID("group_id", .groupID), viewer: ctx.tokenUserID)
        }

        api.add(.get, "/v1/rooms/{room_id}/messages", .appOrUser, "listRoomMessages") { ctx in
            // The stored messages of the room's current life (after its `first_seq`); a member's token reads its view.
            let roomID = try ctx.pathID("room_id", .roomID)
            return try history(ctx, type: .room, id: roomID, viewer: ctx.tokenUserID) {
                try RoomAccess.requireRead(appID: ctx.appID, roomID: roomID, viewer: ctx.tokenUserID, on: ctx.db)
            }
        }

        api.add(.get, "/v1/rooms/{room_id}/messages/recent", .appOrUser, "listRecentRoomMessages") { ctx in
            try recent(ctx)
        }
    }

    // MARK: - Send

    /// `POST /v1/messages`: 201 Message, or 200 with `Parley-Duplicate: true` for a `client_msg_id` duplicate. The
    /// send is written by the node's ``MessageWriter`` with the other sends of the moment; the answer comes after
    /// its batch commits.
    static func send(_ ctx: APIContext, writer: MessageWriter, blocklists: BlocklistCache) throws -> Response {
        let app = ctx.app
        var body = try ctx.body()
        if ScheduledMessageRoutes.asksToSchedule(body) { return try ScheduledMessageRoutes.schedule(ctx, body, batch: false) }
        let request = try SendRequest(&body, ctx: ctx, settings: app.settings)
        // Under overload, priority-1 room messages are refused first (docs/errors.md#rate-limits), before any database
        // work.
        try writer.admit(request)
        let service = MessageService(ctx)
        let item = try service.item(for: request, settings: app.settings, blocklists: blocklists, on: ctx.db)
        // The `message.before_send` hook: only for a send that would be delivered now (not a duplicate, failure or
        // suppressed one).
        let hooked = try ctx.hasHook("message.before_send", skip: request.skipHooks) && service.needsHook(item)
        // Only `modify` reads the database again: the other verdicts answer from the hook's thread.
        let origin = SendOrigin(ctx, blocklists: blocklists)
        let decide: @Sendable (HookVerdict) throws -> Response? = { verdict in
            switch verdict.action {
            case .allow: return write(item, request, origin: origin, writer: writer)
            case .reject: throw verdict.rejection
            case .drop:
                var dropped = item
                dropped.hookDrop = true
                return write(dropped, request, origin: origin, writer: writer)
            case .modify: return nil
            }
        }
        return try ctx.afterHook("message.before_send", data: { try MessageService.hookData(item) }, skip: !hooked, direct: decide) {
            ctx, verdict in
            if let response = try decide(verdict) { return response }
            let (next, nextItem) = try MessageService(ctx).patched(item, verdict: verdict, ctx: ctx, blocklists: blocklists)
            return write(nextItem, next, origin: origin, writer: writer)
        }
    }

    /// `POST /v1/messages` on the event loop that read it, for the common send that needs no database before the writer:
    /// an app key's (a user token's user is read first), without `reply_to` or combined messages to look up and with no
    /// `message.before_send` hook to call. It validates and answers its problems as ``send(_:writer:)`` would, and hands
    /// anything else to a worker (``NeedsConnection``) before it has done anything.
    private static func sendOnEventLoop(_ caller: CallerContext, writer: MessageWriter, blocklists: BlocklistCache) throws -> Response {
        // A user token's send runs on a worker (its user is read there); the pipeline takes its send bucket.
        if caller.tokenUserID != nil { throw NeedsConnection() }
        var body = try caller.body()
        // A scheduled send is stored, on a worker.
        if ScheduledMessageRoutes.asksToSchedule(body) { throw NeedsConnection() }
        let request = try SendRequest(&body, ctx: caller, settings: caller.app.settings)
        try writer.admit(request)
        if caller.hasHook("message.before_send", skip: request.skipHooks) { throw NeedsConnection() }
        let item = try MessageService.item(
            for: request, settings: caller.app.settings, appID: caller.appID, now: caller.now, blocklists: blocklists, on: nil)
        return write(item, request, origin: SendOrigin(caller, blocklists: blocklists), writer: writer)
    }

    /// What answering a send needs from its request, without its connection (a hook's verdict answers on its thread).
    private struct SendOrigin: Sendable {
        let viewer: MessageViewer
        let services: Services
        let request: Request
        let appID: String
        let now: Int64
        let blocklists: BlocklistCache

        init(_ caller: some AppCaller, blocklists: BlocklistCache) {
            (viewer, services, request, appID, now) = (MessageViewer(caller), caller.services, caller.request, caller.appID, caller.now)
            self.blocklists = blocklists
        }
    }

    private static func write(_ item: MessageWrite.Item, _ request: SendRequest, origin: SendOrigin, writer: MessageWriter) -> Response {
        .later { respond in
            writer.submit(item) { result in
                do {
                    let written = try result.get()
                    // A blocklist hit goes to the moderation hooks on a pool worker, before the answer (a refused
                    // send's 422 included), never on the writer's thread.
                    if let hit = MessageBlocklists.hit(of: item, written) {
                        return origin.services.resume(origin.request, answering: respond) {
                            origin.blocklists.report(hit)
                            respond(answer(written, item, request, origin: origin))
                        }
                    }
                    if let problem = MessageService.problem(written.outcome, request) { throw problem }
                    // The original is read back on a pool worker, not on the writer's thread.
                    guard written.outcome != .duplicate else {
                        return origin.services.resume(origin.request, answering: respond) { respond(duplicate(request, origin: origin)) }
                    }
                    origin.services.metrics.messageAccepted(conversationType: request.conversationType.rawValue, stored: request.stored)
                    respond(Reply.created(written.json(origin.viewer)))
                } catch {
                    respond(ProblemRendering.handlerError(error, request: origin.request, logger: origin.services.logger))
                }
            }
        }
    }

    /// The answer to a send a blocklist matched (sent, or refused by a `block` list: 422 naming the list).
    private static func answer(_ written: MessageWrite.Written, _ item: MessageWrite.Item, _ request: SendRequest, origin: SendOrigin) -> Response {
        if written.outcome == .contentBlocked, let check = item.blocklist {
            return ProblemRendering.handlerError(check.problem, request: origin.request, logger: origin.services.logger)
        }
        origin.services.metrics.messageAccepted(conversationType: request.conversationType.rawValue, stored: request.stored)
        return Reply.created(written.json(origin.viewer))
    }

    /// The answer to a `client_msg_id` duplicate: 200 with the original message and `Parley-Duplicate: true`, or the
    /// problem of reading it (on a pool worker, with a connection of its own).
    private static func duplicate(_ request: SendRequest, origin: SendOrigin) -> Response {
        let services = origin.services
        return services.answer(origin.request) {
            let original = try services.pool.withConnection { db in
                try MessageService(db: db, appID: origin.appID, now: origin.now).duplicate(request, viewer: origin.viewer, on: db)
            }
            var response = Reply.json(original)
            response.headers.add("Parley-Duplicate", "true")
            return response
        }
    }

    /// `POST /v1/messages/batch`: one peer message per recipient (≤ 500), results in input order; `data` =
    /// `{message_id, seq}`. Request-level validation fails the whole request; the dedupe, existence and policy checks
    /// fail single items. The items go to the node's writer together, so they share its transactions.
    static func batchSend(_ ctx: APIContext, writer: MessageWriter, blocklists: BlocklistCache) throws -> Response {
        let app = ctx.app
        var body = try ctx.body()
        if ScheduledMessageRoutes.asksToSchedule(body) { return try ScheduledMessageRoutes.schedule(ctx, body, batch: true) }
        let recipients = body.array("to_user_ids", required: true, minItems: 1, maxItems: 500)
        // Validate the shared fields once, for a placeholder recipient, so request-level problems fail the request.
        var probe = body
        let template = try SendRequest(&probe, ctx: ctx, settings: app.settings, batchRecipient: "")
        try body.check()
        let service = MessageService(ctx)
        var seen: Set<String> = []
        var results: [BatchResult?] = []
        var queued: [(index: Int, request: SendRequest, item: MessageWrite.Item)] = []
        for (index, value) in (recipients ?? []).enumerated() {
            guard case .string(let to) = value else {
                results.append(BatchResult(index: index, id: "", outcome: .failed(.invalidParams, "to_user_ids[\(index)]: expected string")))
                continue
            }
            if let problem = IdentifierKind.userID.problem(to) {
                results.append(BatchResult(index: index, id: to, outcome: .failed(.invalidParams, "to_user_ids[\(index)]: \(problem)")))
                continue
            }
            if to == template.from {
                results.append(BatchResult(index: index, id: to, outcome: .failed(.invalidParams, "a user cannot message itself")))
                continue
            }
            guard seen.insert(to).inserted else {
                results.append(BatchResult(index: index, id: to, outcome: .failed(.invalidParams, "user \(to) is repeated in this request")))
                continue
            }
            var fields = body
            do {
                let request = try SendRequest(&fields, ctx: ctx, settings: app.settings, batchRecipient: to)
                queued.append((index, request, try service.item(for: request, settings: app.settings, blocklists: blocklists, on: ctx.db)))
                results.append(nil)
            } catch let error as APIError {
                results.append(BatchResult(index: index, id: to, outcome: .failed(error.code, error.detail)))
            }
        }
        if queued.isEmpty { return Reply.batch(results.compactMap { $0 }) }
        let services = ctx.services
        let collected = LockedValue((results: results, left: queued.count, hits: [BlocklistHit]()))
        let sends = queued
        let httpRequest = ctx.request
        return .later { respond in
            for (index, request, item) in sends {
                writer.submit(item) { result in
                    let outcome: BatchResult.Outcome
                    switch result {
                    case .success(let written):
                        if let hit = MessageBlocklists.hit(of: item, written) { collected.withLock { $0.hits.append(hit) } }
                        if written.outcome == .contentBlocked, let problem = item.blocklist?.problem {
                            outcome = .failed(problem.code, problem.detail)
                        } else if let problem = MessageService.problem(written.outcome, request) {
                            outcome = .failed(problem.code, problem.detail)
                        } else {
                            if written.outcome == .sent {
                                services.metrics.messageAccepted(conversationType: request.conversationType.rawValue, stored: request.stored)
                            }
                            var o = JSONObjectWriter(capacity: 64)
                            o["message_id"] = written.original?.messageID ?? written.message.messageID
                            o["seq"] = written.original.map(\.seq) ?? written.message.seq
                            outcome = .ok(o.finish())
                        }
                    case .failure(let error):
                        let problem = error as? APIError ?? APIError.internalError
                        outcome = .failed(problem.code, problem.detail)
                    }
                    let done = collected.withLock { collected -> ([BatchResult], [BlocklistHit])? in
                        collected.results[index] = BatchResult(index: index, id: request.to, outcome: outcome)
                        collected.left -= 1
                        return collected.left == 0 ? (collected.results.compactMap { $0 }, collected.hits) : nil
                    }
                    guard let (done, hits) = done else { return }
                    if hits.isEmpty { return respond(Reply.batch(done)) }
                    // Blocklist hits go to the moderation hooks on a pool worker (never the writer's thread), before the answer.
                    services.resume(httpRequest, answering: respond) {
                        for hit in hits { blocklists.report(hit) }
                        respond(Reply.batch(done))
                    }
                }
            }
        }
    }

    /// `POST /v1/messages/broadcast`: 202 `{message_id, timestamp}`.
    private static func broadcast(_ ctx: APIContext) throws -> Response {
        let app = ctx.app
        var r = try ctx.body()
        let from = r.id("from", .userID, required: true)
        if let type = r.object["type"]?.intValue, ![1, 2, 11, 12, 13, 14, 200].contains(type) {
            r.addError("type", "a broadcast has type 1, 2, 11–14 or 200")
        }
        let extendedData = r.string("extended_data", maxBytes: 1024) ?? ""
        let push = PushConfig.read(from: &r, key: "push")
        let validated = try MessageBodyValidator.read(from: &r, textMaxBytes: Int(app.settings.int("text_max_bytes")))
        try r.check()
        guard var body = validated else { throw APIError.internalError }
        try MessageFiles.fill(&body, from: from ?? "", use: FileUse(ctx), appID: ctx.appID, now: ctx.now, on: ctx.db)
        let sent = try MessageService(ctx).broadcast(from: from ?? "", body: body, extendedData: extendedData, push: push)
        var o = JSONObjectWriter(capacity: 64)
        o["message_id"] = sent.messageID
        o["timestamp"] = sent.timestamp
        return Reply.json(o.finish(), status: 202)
    }

    // MARK: - Reads

    /// `GET /v1/messages/{message_id}/combined`: the snapshots of a type-100 message, in combine order.
    private static func combined(_ ctx: APIContext) throws -> Response {
        let messageID = try ctx.pathID("message_id", .opaque)
        var query = ctx.query()
        let limit = query.limit()
        let cursor = query.cursor()
        try query.check()
        let message = try MessageService(ctx).get(messageID, viewer: MessageViewer(ctx), on: ctx.db)
        guard message.type == 100 else { throw APIError(.unsupportedOperation, "message \(messageID) is not a combined message") }
        let combineID = message.body.flatMap { try? JSONValue.parse($0) }?["combine_id"]?.stringValue ?? ""
        let list = "combined|\(ctx.appID)|\(messageID)"
        var from = 0
        if let cursor {
            guard let position = try ctx.decodeCursor(cursor, list: list).first?.intValue else {
                throw APIError(.invalidCursor, "malformed cursor")
            }
            from = Int(position) + 1
        }
        let rows = try MessageService(ctx).combined(combineID, from: from, limit: limit + 1)
        let page = rows.prefix(limit)
        let next = rows.count > limit ? page.last.map { ctx.cursors.encode(list: list, values: [.int(Int64($0.position))]) } : nil
        return Reply.list(page.map(\.json), nextCursor: next)
    }

    /// `GET /v1/rooms/{room_id}/messages/recent`: `{items}`, the room's cached messages newest first (≤ 50).
    private static func recent(_ ctx: APIContext) throws -> Response {
        let roomID = try ctx.pathID("room_id", .roomID)
        _ = try RoomAccess.requireRead(appID: ctx.appID, roomID: roomID, viewer: ctx.tokenUserID, on: ctx.db)
        let items = try RoomRecent.read(appID: ctx.appID, roomID: roomID, viewer: MessageViewer(ctx), on: ctx.db)
        var w = JSONWriter(capacity: 64 + items.reduce(0) { $0 + $1.count + 1 })
        w.beginObject()
        w.key(static: "items")
        w.beginArray()
        for item in items { w.writeRaw(item) }
        w.endArray()
        w.endObject()
        return Reply.json(w.bytes)
    }

    /// A conversation's history (docs/messages.md#history) in seq order: `viewer`'s view (its `cleared_seq`, others'
    /// suppressed messages hidden), or with no viewer everything stored (the app's group read). `floor`, run once the
    /// query is valid, checks access and returns a seq the read stays after (a room's `first_seq`).
    private static func history(
        _ ctx: APIContext, type: ConversationType, id: String, viewer userID: String?, floor: () throws -> Int64 = { 0 }
    ) throws -> Response {
        var query = ctx.query()
        var h = MessageService.HistoryQuery()
        let afterSeq = query.int("after_seq", range: 0...Int64.max)
        let beforeSeq = query.int("before_seq", range: 0...Int64.max)
        let startAt = query.int("start_at", range: Int64.min...Int64.max)
        let endAt = query.int("end_at", range: Int64.min...Int64.max)
        let direction = query.choice("direction", ["backward", "forward"])
        let types = query.list("types", maxItems: 20)
        var typeValues: [Int64] = []
        for t in types ?? [] {
            if let v = Int64(t) { typeValues.append(v) } else { query.addError("types", "must be a list of message types") }
        }
        h.limit = query.limit()
        let cursor = query.cursor()
        let includeHidden = query.bool("include_hidden")
        try query.check()
        h.afterSeq = afterSeq ?? 0
        h.beforeSeq = beforeSeq ?? .max
        h.startAt = startAt ?? .min
        h.endAt = endAt ?? .max
        h.types = types == nil ? nil : typeValues
        h.forward = direction.map { $0 == "forward" } ?? (afterSeq != nil && beforeSeq == nil)
        h.viewer = userID
        // App key only (docs/messages.md#history): a user token asking for it is 403, not silently refused.
        if includeHidden == true && !ctx.isApp { throw APIError.forbidden("include_hidden needs an app key") }
        h.includeHidden = includeHidden ?? false
        h.requireGroupAccess = type == .group
        h.tokenUser = ctx.tokenUserID
        // `[1, 2]` is how `typeValues.description` printed the list when cursors were first minted; built by hand
        // because the description goes through the reflection-based printer on every request.
        let typeList = "[" + typeValues.map { String($0) }.joined(separator: ", ") + "]"
        let list =
            "history|\(ctx.appID)|\(userID ?? "")|\(type.rawValue)|\(id)|\(h.afterSeq)|\(h.beforeSeq)|\(h.startAt)|\(h.endAt)|"
            + "\(typeList)|\(h.forward)|\(h.includeHidden)"
        if let cursor {
            guard let seq = try ctx.decodeCursor(cursor, list: list).first?.intValue else {
                throw APIError(.invalidCursor, "malformed cursor")
            }
            if h.forward { h.afterSeq = max(h.afterSeq, seq) } else { h.beforeSeq = min(h.beforeSeq, seq) }
        }
        h.afterSeq = max(h.afterSeq, try floor())
        let limit = h.limit
        h.limit = limit + 1
        let read = { () throws -> (bytes: [UInt8], keep: Bool) in
            let rows = try MessageService(ctx).history(type, id: id, viewer: userID, query: h)
            let pageCount = min(rows.count, limit)
            var next: String?
            if rows.count > limit, let seq = try MessageRow(rows[pageCount - 1]).sequence() {
                next = ctx.cursors.encode(list: list, values: [.int(seq)])
            }
            // An empty page is not kept: no rows is also how the statement says the read was not allowed.
            return (try page(rows, count: pageCount, nextCursor: next, viewer: MessageViewer(ctx)), pageCount > 0)
        }
        // The newest page of a peer or group conversation, as most reads ask for it, comes from the node's cache
        // (docs/scaling.md#history-cache); rooms have their own recent-message cache.
        let newest =
            type != .room && cursor == nil && afterSeq == nil && beforeSeq == nil && startAt == nil && endAt == nil && types == nil
            && !h.forward
        guard newest else { return Reply.json(try read().bytes) }
        let key = newestPageKey(ctx, type: type, id: id, viewer: userID, limit: limit, includeHidden: h.includeHidden)
        return Reply.json(try ctx.services.historyCache.page(key, read: read))
    }

    /// The history cache's key of the newest page of `type` `id` as `viewer` sees it, read by `caller`.
    private static func newestPageKey(
        _ caller: some AppCaller, type: ConversationType, id: String, viewer: String?, limit: Int, includeHidden: Bool
    ) -> HistoryCache.Key {
        // File URLs in the page are signed for the base the request reached (docs/files.md#signed-urls): a view too.
        let urlBase = caller.services.configuration.publicURL == nil ? FileURLSigner.base(of: caller.request) : ""
        return HistoryCache.Key(
            appID: caller.appID, conversation: MessageService.conversationKey(type, viewer ?? "", id),
            view: "\(viewer ?? "")\u{0}\(caller.tokenUserID ?? "")\u{0}\(includeHidden)\u{0}\(limit)\u{0}\(urlBase)")
    }

    /// The newest page of a peer or group history from the node's cache, on the event loop that read the request (no
    /// hand-off to a worker thread): answered there when the request is exactly that read (no parameter but `limit` and
    /// `include_hidden`) and the page is kept; anything else — a miss, another form of the read, a problem to report —
    /// runs on a worker (``NeedsConnection``), which reads the page and keeps it.
    private static func cachedNewestPage(_ caller: CallerContext, type: ConversationType, id: String, viewer: String?) throws -> Response {
        guard caller.request.query.allSatisfy({ $0.0 == "limit" || $0.0 == "include_hidden" }) else { throw NeedsConnection() }
        var query = QueryReader(caller.request.query)
        let limit = query.limit()
        let includeHidden = query.bool("include_hidden") ?? false
        guard (try? query.check()) != nil, !includeHidden || caller.isApp,
            let page = caller.services.historyCache.cached(
                newestPageKey(caller, type: type, id: id, viewer: viewer, limit: limit, includeHidden: includeHidden))
        else { throw NeedsConnection() }
        return Reply.json(page)
    }

    /// A list page (docs/api.md) of the first `count` message rows as `viewer` sees them. The hot read: the rows go
    /// straight from libpq's buffer into one response buffer (the `Reply.list` shape).
    static func page(_ rows: PostgresResult, count: Int, nextCursor next: String?, viewer: MessageViewer) throws -> [UInt8] {
        var w = JSONWriter(capacity: 1024 + count * 1024)
        w.beginObject()
        try MessageRow.writeItems(rows, count: count, nextCursor: .some(next), to: &w, viewer)
        w.endObject()
        return w.bytes
    }
}
