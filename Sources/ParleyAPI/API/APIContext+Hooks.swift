import ParleyCore
import ParleyHTTP
import ParleyPostgres
import ParleySync

extension AppCaller {
    /// True when an enabled endpoint serves before-event `type` in the app and the request does not skip hooks.
    package func hasHook(_ type: String, skip: Bool = false) -> Bool { !skip && app.beforeHooks[type] != nil }
}

/// Before-event hooks (docs/webhooks.md#before-event-hooks) from a handler: the hook call holds no PostgreSQL
/// connection and no pool worker while it waits; the handler continues on a pool worker with a fresh connection once
/// the verdicts are in.
extension APIContext {
    /// This context on another connection (the continuation of a request on another pool worker).
    package func rebound(to db: PostgresConnection) -> APIContext {
        APIContext(request: request, credential: credential, app: app, now: now, services: services, db: db)
    }

    /// Calls the `type` hook with `data` (the `data` member's JSON), then `then` with the context rebound to a fresh
    /// connection and the verdict. Without an endpoint serving `type` (or with `skip`), `then` runs at once on this
    /// context with `.allow`: no query, no `later`. A fail-closed hook that fails answers 503 `7000502`.
    ///
    /// `direct`, when given, runs first with the verdict on the hook's call thread, without a connection, and answers
    /// when it returns a response (nil: `then` runs as above). For verdicts that need no database (a send's `allow`
    /// queues on the message writer): the request skips a second wait for a pool worker and a connection. It must not
    /// use this context's `db` (the connection went back to the pool while the hook was called). Without an endpoint,
    /// `then` runs at once as above.
    package func afterHook(
        _ type: String, data: () throws -> [UInt8], skip: Bool = false,
        direct: (@Sendable (HookVerdict) throws -> Response?)? = nil,
        then: @escaping @Sendable (APIContext, HookVerdict) throws -> Response
    ) throws -> Response {
        guard hasHook(type, skip: skip) else { return try then(self, .allow) }
        let direct = direct.map { direct in
            { @Sendable (results: [Result<HookVerdict, APIError>]) throws -> Response? in try direct(try results[0].get()) }
        }
        return try afterHooks(type, data: { [try data()] }, direct: direct) { ctx, results in
            try then(ctx, try results[0].get())
        }
    }

    /// ``afterHook(_:data:skip:then:)`` for one call per item (direct group invites): the calls run concurrently and
    /// `then` gets each item's verdict or failure, in item order; nothing (no calls) without an endpoint or with `skip`.
    package func afterHooks(
        _ type: String, data: () throws -> [[UInt8]], skip: Bool = false,
        direct: (@Sendable ([Result<HookVerdict, APIError>]) throws -> Response?)? = nil,
        then: @escaping @Sendable (APIContext, [Result<HookVerdict, APIError>]) throws -> Response
    ) throws -> Response {
        guard !skip, let endpoint = app.beforeHooks[type] else { return try then(self, []) }
        let calls = try data()
        if calls.isEmpty { return try then(self, []) }
        let (request, credential, app, now, services) = (self.request, self.credential, self.app, self.now, self.services)
        let collected = LockedValue((results: [Result<HookVerdict, APIError>?](repeating: nil, count: calls.count), left: calls.count))
        return .later { respond in
            let decided: @Sendable ([Result<HookVerdict, APIError>]) -> Void = { results in
                if let direct {
                    do {
                        if let response = try direct(results) { return respond(response) }
                    } catch {
                        return respond(ProblemRendering.handlerError(error, request: request, logger: services.logger))
                    }
                }
                services.resume(request, answering: respond) {
                    respond(
                        services.answer(request) {
                            try services.pool.withConnection { db in
                                let ctx = APIContext(request: request, credential: credential, app: app, now: now, services: services, db: db)
                                return try then(ctx, results)
                            }
                        })
                }
            }
            for (index, data) in calls.enumerated() {
                services.webhooks.hooks.call(type, endpoint: endpoint, appID: app.appID, data: data) { result in
                    let done = collected.withLock { c -> [Result<HookVerdict, APIError>]? in
                        c.results[index] = result
                        c.left -= 1
                        return c.left == 0 ? c.results.map { $0! } : nil
                    }
                    if let done { decided(done) }
                }
            }
        }
    }
}

extension APIContext {
    /// The request after a `modify` verdict (docs/webhooks.md#before-event-hooks): `proposed` (what the hook was sent)
    /// is patched in its `patchable` members, the request body gets the members the patch touched, and `read` reads and
    /// validates it with the request's own rules. Any failure is 422 `7000503`, never 400 or 413.
    package func repatched<T>(
        _ verdict: HookVerdict, proposed: JSONObject, patchable: Set<String>, read: (inout BodyReader) throws -> T
    ) throws -> T {
        let patched = verdict.patched(proposed, patchable: patchable)
        do {
            var fields = try body().object
            for key in patchable where verdict.patch?[key] != nil { fields[key] = patched[key] }
            var reader = BodyReader(fields)
            return try read(&reader)
        } catch let error as APIError {
            throw APIError(.hookPatchInvalid, "the hook's patch is invalid: \(error.detail)", fieldErrors: error.fieldErrors)
        }
    }
}
