import ParleyHTTP
import ParleyPostgres

/// The shared, immutable parts every route uses.
final class Services: Sendable {
    let pool: PostgresPool
    let clock: ServerClock
    let apps: AppDirectory
    let authenticator: Authenticator
    let rateLimiter: RateLimiter
    let cursors: CursorCodec
    let metrics: Metrics
    let logger: Logger
    let configuration: Configuration
    let stopping: StopFlag
    let timers: Timers
    let hub: EventHub
    let sequencer: EventSequencer
    let writer: MessageWriter

    init(pool: PostgresPool, clock: ServerClock, adminKey: String, metrics: Metrics, logger: Logger, configuration: Configuration, stopping: StopFlag)
    {
        self.pool = pool
        self.clock = clock
        let apps = AppDirectory()
        self.apps = apps
        authenticator = Authenticator(adminKey: adminKey, apps: apps, clock: clock)
        rateLimiter = RateLimiter()
        // Cursors must verify on every node and across restarts, so their key derives from the admin key.
        cursors = CursorCodec(secret: Crypto.hmacSHA256(key: Array(adminKey.utf8), message: Array("parley cursor key".utf8)))
        self.metrics = metrics
        self.logger = logger
        self.configuration = configuration
        self.stopping = stopping
        timers = Timers()
        hub = EventHub(heartbeatMillis: configuration.sseHeartbeatMillis, logger: logger.named("live"))
        sequencer = EventSequencer(hub: hub, logger: logger.named("events"))
        writer = MessageWriter(hub: hub, logger: logger.named("messages"))
    }
}

/// Registers API routes behind the shared pipeline of API.md §1: credentials and the acting-user rule, the rate
/// limit, `Idempotency-Key` replay, the content type, then the handler; every failure becomes a problem response.
struct API {
    let services: Services
    var builder: RouterBuilder

    typealias Handler = @Sendable (APIContext) throws -> Response

    /// Adds a route. `queryToken` routes (the SSE streams, which browsers' EventSource opens without headers)
    /// also accept the credential as the `access_token` query parameter when there is no `Authorization`.
    /// `numbersItsEvents` routes write their events with ids before they answer (the message writer), so their
    /// answer need not wait for the sequencer.
    mutating func add(
        _ method: HTTPMethod, _ template: String, _ access: Access, _ operationID: String, maxBodyBytes: Int? = nil,
        queryToken: Bool = false, numbersItsEvents: Bool = false, _ handler: @escaping Handler
    ) {
        let services = self.services
        builder.add(method, template, options: RouteOptions(maxBodyBytes: maxBodyBytes, operationID: operationID)) { request in
            do {
                return try services.pool.withConnection { db in
                    Self.run(
                        request, access: access, queryToken: queryToken, sequenced: !numbersItsEvents, services: services, db: db,
                        handler: handler)
                }
            } catch {
                return ProblemRendering.handlerError(error, request: request, logger: services.logger)
            }
        }
    }

    private static func run(
        _ request: Request, access: Access, queryToken: Bool, sequenced: Bool, services: Services, db: PostgresConnection,
        handler: Handler
    ) -> Response {
        var rateHeaders: [(String, String)] = []
        var idempotency: Idempotency.Claim?
        var appID: String?
        var response: Response
        do {
            let presented = queryToken && request.headers["Authorization"] == nil ? request.queryValue("access_token") : nil
            let credential = try services.authenticator.authenticate(
                request, bearer: presented, appRoute: access != .admin, db: db)
            try check(access, credential: credential, request: request)
            var app: AppRecord?
            if let id = credential.appID {
                guard let record = try services.apps.app(id, db: db) else { throw APIError.unauthenticated("app deleted") }
                app = record
                appID = id
            }
            if let id = appID, let record = app {
                let (bucket, rate) =
                    credential.userID.map { ("u:\(id):\($0)", record.settings.rateLimitUserRPS) }
                    ?? ("a:\(id)", record.settings.rateLimitAppRPS)
                let decision = services.rateLimiter.take(key: bucket, ratePerSecond: rate)
                rateHeaders = [
                    ("RateLimit-Limit", String(decision.limit)), ("RateLimit-Remaining", String(decision.remaining)),
                    ("RateLimit-Reset", String(decision.resetSeconds)),
                ]
                if !decision.allowed {
                    throw APIError.retryLater(.rateLimited, "rate limit exceeded", retryAfterSeconds: decision.retryAfterSeconds)
                }
            }
            let now = services.clock.now()
            if request.method == .post, let key = request.headers["Idempotency-Key"] {
                switch try Idempotency.begin(key: key, request: request, appID: appID ?? "", scope: credential.idempotencyScope, now: now, db: db) {
                case .replay(let stored):
                    response = stored
                    response.headers.add("Idempotent-Replayed", "true")
                    return finish(response, rateHeaders: rateHeaders, appID: appID)
                case .proceed(let claim): idempotency = claim
                }
            }
            if !request.body.isEmpty, !isJSON(request.headers["Content-Type"]) {
                throw APIError(.unsupportedMediaType, "request bodies must be application/json")
            }
            let context = APIContext(request: request, credential: credential, app: app, now: now, services: services, db: db)
            response = try handler(context)
        } catch {
            response = ProblemRendering.handlerError(error, request: request, logger: services.logger)
        }
        if let idempotency {
            if case .later = response.body {
                // The answer comes from another thread (a group commit): store it from a pool worker once known.
                let pending = response
                response = .later { respond in
                    pending.settle { final in
                        services.pool.submit(
                            {
                                try? services.pool.withConnection { db in complete(idempotency, final, request: request, services: services, db: db) }
                                respond(final)
                            }, rejected: { respond(final) })
                    }
                }
            } else {
                complete(idempotency, response, request: request, services: services, db: db)
            }
        }
        response = finish(response, rateHeaders: rateHeaders, appID: appID)
        // A change may have committed events: they are sequenced before the answer goes out, so a client that has its
        // answer finds the events in the log (API.md §14.1; the sequencer then pokes the live hub).
        if sequenced, request.method != .get && request.method != .head, let appID {
            let answer = response
            response = .later { respond in answer.settle { final in services.sequencer.publish(appID) { respond(final) } } }
        }
        return response
    }

    private static func complete(
        _ idempotency: Idempotency.Claim, _ response: Response, request: Request, services: Services, db: PostgresConnection
    ) {
        do { try Idempotency.complete(idempotency, response: response, db: db) } catch {
            services.logger.warning("request_id=\(request.requestID) msg=\"idempotency record not stored\" error=\"\(error)\"")
        }
    }

    private static func finish(_ response: Response, rateHeaders: [(String, String)], appID: String?) -> Response {
        response.whenSettled { response in
            var response = response
            for (name, value) in rateHeaders { response.headers.add(name, value) }
            if let appID { response.logContext = "app=\(appID)" }
            return response
        }
    }

    /// The "Who" rules: admin-only routes, app routes (admin needs `Parley-App-Id`), and self-only user routes.
    private static func check(_ access: Access, credential: Credential, request: Request) throws {
        switch (access, credential) {
        case (.admin, .admin): return
        case (.admin, _): throw APIError.forbidden("this route needs the server admin key")
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

    private static func isJSON(_ contentType: String?) -> Bool {
        guard let contentType else { return false }
        let mediaType = contentType.split(separator: ";", maxSplits: 1).first.map { $0.trimmingSpaces().lowercased() } ?? ""
        return mediaType == "application/json"
    }
}

extension Substring {
    func trimmingSpaces() -> Substring {
        var s = self
        while s.first == " " || s.first == "\t" { s.removeFirst() }
        while s.last == " " || s.last == "\t" { s.removeLast() }
        return s
    }
}

/// Response builders shared by the routes.
enum Reply {
    static func json(_ bytes: [UInt8], status: Int = 200) -> Response { .json(bytes, status: status) }
    static func created(_ bytes: [UInt8]) -> Response { .json(bytes, status: 201) }
    static func noContent() -> Response { Response(status: 204) }

    /// `{"items": [...], "next_cursor": ...}` from pre-rendered items.
    static func list(_ items: [[UInt8]], nextCursor: String?) -> Response {
        var w = JSONWriter()
        w.object { w in
            w.key("items")
            w.array { w in for item in items { w.writeRaw(item) } }
            w.key("next_cursor")
            if let nextCursor { w.writeString(nextCursor) } else { w.writeNull() }
        }
        return .json(w.bytes)
    }

    /// The batch shape of §1.7.
    static func batch(_ results: [BatchResult], extra: ((inout JSONWriter) -> Void)? = nil, status: Int = 200) -> Response {
        var w = JSONWriter()
        w.object { w in
            extra?(&w)
            w.key("results")
            w.array { w in for result in results { result.write(to: &w) } }
        }
        return .json(w.bytes, status: status)
    }
}

/// One entry of a batch response (§1.7).
struct BatchResult {
    var index: Int
    var id: String
    var outcome: Outcome

    enum Outcome {
        case ok([UInt8]?)
        case failed(ErrorCode, String)
    }

    func write(to w: inout JSONWriter) {
        w.object { w in
            w.key("index")
            w.writeInt(index)
            w.key("id")
            w.writeString(id)
            switch outcome {
            case .ok(let data):
                w.key("ok")
                w.writeBool(true)
                if let data {
                    w.key("data")
                    w.writeRaw(data)
                }
            case .failed(let code, let message):
                w.key("ok")
                w.writeBool(false)
                w.key("error")
                w.object { w in
                    w.key("code")
                    w.writeInt(code.code)
                    w.key("message")
                    w.writeString(message)
                }
            }
        }
    }
}
