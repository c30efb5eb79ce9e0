import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// The steps every API request goes through (docs/api.md), in order: ``before`` steps until one answers or throws, then
/// the handler, then every ``after`` step on whatever the answer is (a problem included). Each step is a small
/// function of the request's ``Exchange``, so the order is written in one place and a step reads alone.
enum RequestPipeline {
    /// What a route asks of the pipeline.
    struct Route: Sendable {
        /// Which credentials an app route accepts; nil for server-admin routes.
        var access: Access?
        /// The credential may come as the `access_token` query parameter (SSE streams).
        var queryToken: Bool
        /// A write's answer waits until its events are sequenced (false for routes that number their own events).
        var sequenced: Bool
        /// The media type request bodies must have (JSON, except the NDJSON import; docs/api.md).
        var bodyMediaType = "application/json"
        /// A bucket of the route's own that a user token's requests take besides the token's (sends,
        /// docs/errors.md#rate-limits).
        var userBucket: RouteUserBucket? = nil
    }

    /// One request on its way through the pipeline. Owned by the worker thread running it.
    struct Exchange {
        let request: Request
        let route: Route
        let services: Services
        /// The worker thread's own connection; nil on a route's event-loop path (``runOnEventLoop(_:_:)``).
        let connection: PostgresConnection?
        /// The rate-limit bucket this request took a token from: given back when an event-loop run hands the request to
        /// a worker, which takes it again.
        var rateTaken: (bucket: String, rate: Int)?
        /// The route's user bucket token this request took (``routeUserLimit(_:)``), given back with `rateTaken`.
        var routeRateTaken: (bucket: String, rate: Int)?
        var credential: Credential = .admin
        /// The app the request acts in (app credentials), resolved once.
        var app: AppRecord?
        /// Server-clock milliseconds, read once per request.
        var now: Int64 = 0
        /// Headers every answer carries (the rate limit's).
        var headers: [(String, String)] = []
        /// The `Idempotency-Key` claim this request completes with its answer.
        var idempotency: Idempotency.Claim?
        /// The answer is a stored one (an idempotent replay): nothing ran.
        var replayed = false

        var appID: String? { app?.appID }

        /// The worker's connection; ``NeedsConnection`` on the event-loop path.
        var db: PostgresConnection {
            get throws {
                guard let connection else { throw NeedsConnection() }
                return connection
            }
        }
    }

    typealias Before = @Sendable (inout Exchange) throws -> Response?
    typealias After = @Sendable (Exchange, Response) -> Response

    /// The steps before the handler, in order; one that returns a response ends the request there. The order is
    /// The precedence of docs/errors.md#problems-rfc-9457: credentials (401/403), `Idempotency-Key` (replay, 422, 409),
    /// 415, 413, then 400.
    static let before: [Before] = [
        authenticate, resolveApp, rateLimit, readClock, replayIdempotent, requireJSON, limitBody, refuseNUL, routeUserLimit,
    ]
    /// The steps after it, in order, on every answer.
    static let after: [After] = [storeIdempotent, addHeaders, countErrors, publishEvents]

    static func run(_ initial: Exchange, _ handler: (Exchange) throws -> Response) -> Response {
        var exchange = initial
        var response: Response
        do {
            response = try answerBeforeHandler(&exchange) ?? answering(exchange, handler)
        } catch {
            response = ProblemRendering.handlerError(error, request: exchange.request, logger: exchange.services.logger)
        }
        for step in after { response = step(exchange, response) }
        return response
    }

    /// Runs the handler with the request it answers bound as ``AnsweringScope/current`` (app routes).
    private static func answering(_ exchange: Exchange, _ handler: (Exchange) throws -> Response) throws -> Response {
        guard let app = exchange.app else { return try handler(exchange) }
        let scope = AnsweringScope(app: app, request: exchange.request, now: exchange.now, services: exchange.services)
        return try AnsweringScope.answering(scope) { try handler(exchange) }
    }

    /// Runs the request on the calling thread (an HTTP event loop) with no database connection, for routes whose
    /// common case needs none (a send of a cached app key's: its writer does the database work): nil when a step or
    /// the handler needs one after all (``NeedsConnection``, thrown before anything was done but taking the rate-limit
    /// token, which is given back), and the caller runs it again on a worker with ``run(_:_:)``. A request with an
    /// `Idempotency-Key` always goes to a worker (its claim is a database row).
    static func runOnEventLoop(_ initial: Exchange, _ handler: (Exchange) throws -> Response) -> Response? {
        if initial.request.method == .post, initial.request.headers["Idempotency-Key"] != nil { return nil }
        var exchange = initial
        var response: Response
        do {
            response = try answerBeforeHandler(&exchange) ?? answering(exchange, handler)
        } catch is NeedsConnection {
            for (bucket, rate) in [exchange.rateTaken, exchange.routeRateTaken].compactMap({ $0 }) {
                exchange.services.rateLimiter.giveBack(key: bucket, ratePerSecond: rate)
            }
            return nil
        } catch {
            response = ProblemRendering.handlerError(error, request: exchange.request, logger: exchange.services.logger)
        }
        for step in after { response = step(exchange, response) }
        return response
    }

    private static func answerBeforeHandler(_ exchange: inout Exchange) throws -> Response? {
        for step in before {
            if let response = try step(&exchange) { return response }
        }
        return nil
    }

    // MARK: - Before the handler

    /// The bearer credential (docs/users.md#user-tokens), and the "Who" rules of the route.
    static func authenticate(_ x: inout Exchange) throws -> Response? {
        let request = x.request
        let presented = x.route.queryToken && request.headers["Authorization"] == nil ? request.queryValue("access_token") : nil
        let verified = try x.services.authenticator.authenticate(
            request, bearer: presented, appRoute: x.route.access != nil, db: x.connection)
        try check(x.route.access, credential: verified.credential, request: request)
        x.credential = verified.credential
        x.app = verified.app
        return nil
    }

    /// The app record of an app credential (when authenticating did not already read it).
    static func resolveApp(_ x: inout Exchange) throws -> Response? {
        guard x.app == nil, let id = x.credential.appID else { return nil }
        guard let record = try x.services.apps.app(id, db: x.connection) else { throw APIError.unauthenticated("app deleted") }
        x.app = record
        return nil
    }

    /// The app's or the user's request rate (docs/errors.md#rate-limits), with its headers on every answer.
    static func rateLimit(_ x: inout Exchange) throws -> Response? {
        guard let app = x.app else { return nil }
        let (bucket, rate) =
            x.credential.userID.map { ("u:\(app.appID):\($0)", app.settings.rateLimitUserRPS) }
            ?? ("a:\(app.appID)", app.settings.rateLimitAppRPS)
        let decision = x.services.rateLimiter.take(key: bucket, ratePerSecond: rate)
        if decision.allowed { x.rateTaken = (bucket, rate) }
        x.headers = [
            ("RateLimit-Limit", String(decision.limit)), ("RateLimit-Remaining", String(decision.remaining)),
            ("RateLimit-Reset", String(decision.resetSeconds)),
        ]
        if !decision.allowed {
            throw APIError.retryLater(.rateLimited, "rate limit exceeded", retryAfterSeconds: decision.retryAfterSeconds)
        }
        return nil
    }

    /// The route's own bucket for a user token's requests (``Route/userBucket``; sends, docs/errors.md#rate-limits),
    /// last of the checks, so a replayed or refused request takes none of it.
    static func routeUserLimit(_ x: inout Exchange) throws -> Response? {
        guard let bucket = x.route.userBucket, let app = x.app, let userID = x.credential.userID else { return nil }
        let key = "\(bucket.name):\(app.appID):\(userID)"
        let rate = bucket.rate(app.settings)
        let decision = x.services.rateLimiter.take(key: key, ratePerSecond: rate)
        guard decision.allowed else {
            throw APIError.retryLater(.rateLimited, bucket.refusal, retryAfterSeconds: decision.retryAfterSeconds)
        }
        x.routeRateTaken = (key, rate)
        return nil
    }

    /// The server clock, read once for the whole request (docs/operations.md#test-clock).
    static func readClock(_ x: inout Exchange) throws -> Response? {
        x.now = x.services.clock.now()
        return nil
    }

    /// A POST with an `Idempotency-Key` seen before answers with the stored answer; a new one is claimed
    /// (docs/errors.md#retrying-safely).
    static func replayIdempotent(_ x: inout Exchange) throws -> Response? {
        guard x.request.method == .post, let key = x.request.headers["Idempotency-Key"] else { return nil }
        switch try Idempotency.begin(
            key: key, request: x.request, appID: x.appID ?? "", scope: x.credential.idempotencyScope, now: x.now, db: try x.db)
        {
        case .replay(var stored):
            stored.headers.add("Idempotent-Replayed", "true")
            x.replayed = true
            return stored
        case .proceed(let claim):
            x.idempotency = claim
            return nil
        case .unclaimed:
            return nil
        }
    }

    /// Request bodies are JSON (docs/api.md), or the route's own media type; a body over the limit counts as one (it
    /// was sent, only not read).
    static func requireJSON(_ x: inout Exchange) throws -> Response? {
        let expected = x.route.bodyMediaType
        if !x.request.body.isEmpty || x.request.bodyOverLimit, !isMediaType(x.request.headers["Content-Type"], expected) {
            throw APIError(.unsupportedMediaType, "request bodies must be \(expected)")
        }
        return nil
    }

    /// A body over the route's limit (1 MiB unless the route says otherwise) was not read; 413 comes here, after
    /// the credential, idempotency and media-type checks (docs/errors.md#problems-rfc-9457). The HTTP layer closes the
    /// connection after it.
    static func limitBody(_ x: inout Exchange) throws -> Response? {
        if x.request.bodyOverLimit { throw APIError(.payloadTooLarge, "request body too large") }
        return nil
    }

    /// U+0000 in a path or query parameter → 400 naming each (``NULCharacter``: the rule JSON bodies follow in
    /// `BodyReader.parse`). Before any handler, so no route can pass one to PostgreSQL.
    static func refuseNUL(_ x: inout Exchange) throws -> Response? {
        var errors: [FieldError] = []
        for name in x.request.pathParameters.keys.sorted() where NULCharacter.isIn(x.request.pathParameters[name] ?? "") {
            errors.append(FieldError(field: name, message: NULCharacter.message))
        }
        for (name, value) in x.request.query where NULCharacter.isIn(name) || NULCharacter.isIn(value) {
            // A name holding NUL is not repeated in the answer; the query as a whole is named instead.
            errors.append(FieldError(field: NULCharacter.isIn(name) ? "query" : name, message: NULCharacter.message))
        }
        if !errors.isEmpty { throw APIError.invalidParams(errors) }
        return nil
    }

    // MARK: - After the handler

    /// Stores the answer under the request's `Idempotency-Key` claim. An answer that comes later (a group commit)
    /// is stored from a pool worker once known.
    static func storeIdempotent(_ x: Exchange, _ response: Response) -> Response {
        guard let claim = x.idempotency else { return response }
        let services = x.services
        let request = x.request
        // A claim exists only on a worker (the event-loop path hands `Idempotency-Key` requests over first).
        if case .later = response.body {
        } else if let db = x.connection {
            complete(claim, response, request: request, services: services, db: db)
            return response
        }
        return .later { respond in
            response.settle { final in
                services.pool.submit(
                    {
                        try? services.pool.withConnection { db in complete(claim, final, request: request, services: services, db: db) }
                        respond(final)
                    }, rejected: { respond(final) })
            }
        }
    }

    private static func complete(_ claim: Idempotency.Claim, _ response: Response, request: Request, services: Services, db: PostgresConnection) {
        do { try Idempotency.complete(claim, response: response, db: db) } catch {
            services.logger.warning("request_id=\(request.requestID) msg=\"idempotency record not stored\" error=\"\(error)\"")
        }
    }

    /// The rate-limit headers, and the app in the request's log line.
    static func addHeaders(_ x: Exchange, _ response: Response) -> Response {
        let headers = x.headers
        let appID = x.appID
        return response.whenSettled { response in
            var response = response
            for (name, value) in headers { response.headers.add(name, value) }
            if let appID { response.logContext = "app=\(appID)" }
            return response
        }
    }

    /// A 4xx or 5xx answer in an identified app is counted for the app's activity series (``AppErrorTally``).
    static func countErrors(_ x: Exchange, _ response: Response) -> Response {
        guard let appID = x.appID else { return response }
        let (tally, clock) = (x.services.appErrors, x.services.clock)
        return response.whenSettled { response in
            tally.record(appID: appID, status: response.status, now: clock.now())
            return response
        }
    }

    /// A change may have committed events: they are sequenced before the answer goes out, so a client that has its
    /// answer finds them in the log (docs/events.md#the-event-object; the sequencer then pokes the live hub).
    static func publishEvents(_ x: Exchange, _ response: Response) -> Response {
        guard x.route.sequenced, !x.replayed, x.request.method != .get, x.request.method != .head, let appID = x.appID else {
            return response
        }
        let sequencer = x.services.sequencer
        return .later { respond in
            response.settle { final in
                guard final.status < 500 else {
                    // A 5xx promises nothing about the change (the database may be down): its events, if any committed,
                    // are sequenced soon, and the failure is not held up waiting for a database that may not answer.
                    sequencer.poke(appID)
                    respond(final)
                    return
                }
                sequencer.publish(appID) { respond(final) }
            }
        }
    }

    // MARK: - Rules

    /// The "Who" rules: admin-only routes (`access` nil), app routes (admin needs `Parley-App-Id`), and self-only
    /// user routes.
    static func check(_ access: Access?, credential: Credential, request: Request) throws {
        guard let access else {
            guard case .admin = credential else { throw APIError.forbidden("this route needs the server admin key") }
            return
        }
        switch (access, credential) {
        case (_, .admin): throw APIError.invalidParam("header Parley-App-Id", "is required with the admin key on app routes")
        case (_, .adminAsApp), (_, .app): return
        case (.app, .user): throw APIError.forbidden("this route needs an app key")
        case (.appOrSelf, .user(_, let userID)):
            if let target = request.pathParameters["user_id"], target != userID {
                throw APIError.forbidden("a user token acts only for its own user")
            }
        case (.appOrUser, .user): return
        }
    }

    /// Whether `contentType` names `mediaType` (parameters such as `charset` aside, case and surrounding spaces
    /// ignored). Byte-level: it runs on every request with a body (splitting and lowercasing the header cost ~7,000
    /// instructions a request).
    static func isMediaType(_ contentType: String?, _ mediaType: String) -> Bool {
        guard var contentType else { return false }
        var expected = mediaType
        return contentType.withUTF8 { u in
            expected.withUTF8 { e in
                var start = 0
                while start < u.count, u[start] == UInt8(ascii: " ") || u[start] == UInt8(ascii: "\t") { start += 1 }
                var end = start
                while end < u.count, u[end] != UInt8(ascii: ";") { end += 1 }
                while end > start, u[end - 1] == UInt8(ascii: " ") || u[end - 1] == UInt8(ascii: "\t") { end -= 1 }
                guard end - start == e.count else { return false }
                for i in 0..<e.count {
                    let c = u[start + i]
                    if (c >= UInt8(ascii: "A") && c <= UInt8(ascii: "Z") ? c | 0x20 : c) != e[i] { return false }
                }
                return true
            }
        }
    }
}

/// A route's own request rate per user token, taken by the pipeline besides the token's bucket: `name` keys the bucket
/// (with the app and the user), `rate` reads its requests per second from the app's settings, `refusal` is the 429's
/// detail.
package struct RouteUserBucket: Sendable {
    let name: String
    let rate: @Sendable (AppSettings) -> Int
    let refusal: String

    package init(name: String, refusal: String, rate: @escaping @Sendable (AppSettings) -> Int) {
        self.name = name
        self.rate = rate
        self.refusal = refusal
    }
}
