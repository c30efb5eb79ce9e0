import ParleyCore
import ParleyHTTP
import ParleyPostgres
import ParleySync

/// The shared, immutable parts every route uses.
package final class Services: Sendable {
    package let pool: PostgresPool
    package let clock: ServerClock
    package let apps: AppDirectory
    let authenticator: Authenticator
    package let rateLimiter: RateLimiter
    package let cursors: CursorCodec
    package let metrics: Metrics
    /// This node's 4xx and 5xx answers per app and minute, until the stats sampler adds them to `stats_minutes`.
    package let appErrors = AppErrorTally()
    package let logger: Logger
    package let configuration: Configuration
    package let stopping: StopFlag
    package let timers: Timers
    package let sequencer: EventSequencer
    package let webhooks: Webhooks
    /// The newest pages of history this node has read (docs/scaling.md#history-cache).
    package let historyCache: HistoryCache
    /// The keys of signed file URLs (docs/files.md#signed-urls): derived from the admin key, so every node verifies the
    /// URLs every other node signed. The first signs; the one of the secondary admin key, while set, still verifies.
    package let fileURLKeys: [[UInt8]]
    /// Threads that move file bodies between clients and storage (uploads read as they arrive, downloads written as
    /// the client takes them): a slow client holds one of these, never a database connection, which each piece borrows
    /// only while it is written or read.
    package let transfers: ThreadPoolExecutor

    package init(
        pool: PostgresPool, clock: ServerClock, adminKey: String, metrics: Metrics, logger: Logger, configuration: Configuration,
        stopping: StopFlag, timerKinds: [TimerKind], observers: CommitObservers, tokenSubject: @escaping TokenSubject.Reader
    ) {
        self.pool = pool
        self.clock = clock
        let apps = AppDirectory()
        self.apps = apps
        // The configured key first: it signs; a secondary key (an admin key being rotated) is accepted and verifies.
        let adminKeys = [adminKey] + [configuration.secondaryAdminKey].compactMap { $0 }
        authenticator = Authenticator(adminKeyDigests: adminKeys.map { Crypto.sha256($0) }, apps: apps, clock: clock, tokenSubject: tokenSubject)
        rateLimiter = RateLimiter()
        // Cursors must verify on every node and across restarts, so their key derives from the admin key.
        cursors = CursorCodec(secrets: adminKeys.map { Crypto.hmacSHA256(key: Array($0.utf8), message: Array("parley cursor key".utf8)) })
        fileURLKeys = adminKeys.map { Crypto.hmacSHA256(key: Array($0.utf8), message: Array("parley file url key".utf8)) }
        transfers = ThreadPoolExecutor(threads: Self.transferThreads(poolSize: configuration.poolSize), maxQueued: 256, maxWait: .seconds(10))
        self.metrics = metrics
        self.logger = logger
        self.configuration = configuration
        self.stopping = stopping
        timers = Timers(kinds: timerKinds)
        // The log only says which apps got events; the node's readers of the log (the app layer's list) are told. The
        // history cache first, with what the events were about, before the request that wrote them is answered.
        let historyCache = HistoryCache(budgetBytes: configuration.historyCacheBytes)
        self.historyCache = historyCache
        let sequencer = EventSequencer(logger: logger.named("events")) { appID, changes in
            historyCache.invalidate(appID: appID, changes: changes)
            observers.stored(appID: appID)
        }
        self.sequencer = sequencer
        webhooks = Webhooks(
            configuration: configuration, clock: clock, logger: logger.named("webhooks"), eventsWritten: { sequencer.publish($0, then: $1) },
            appChanged: { apps.invalidate(appID: $0) })
    }
}

extension Services {
    /// File transfers one node runs at once (twice its database connections, which their pieces borrow in turn); more
    /// wait (up to 256, 10 s) and then get 503.
    static func transferThreads(poolSize: Int) -> Int { max(4, 2 * poolSize) }

    /// Stops the transfer threads (the app's shutdown, after the HTTP server stopped).
    package func shutdownTransfers() { transfers.shutdown() }
}

/// The executor of a route's event-loop path: the handler runs at once on the thread that read the request.
struct RunsOnTheCallingThread: RequestExecutor {
    func execute(_ work: @escaping @Sendable () -> Void, rejected: @escaping @Sendable () -> Void) { work() }
}

/// Registers API routes behind the request pipeline (``RequestPipeline``; the conventions of docs/api.md): every
/// failure becomes a problem response.
package struct API {
    package let services: Services
    package var builder: RouterBuilder

    package init(services: Services, builder: RouterBuilder) {
        self.services = services
        self.builder = builder
    }

    package typealias Handler = @Sendable (APIContext) throws -> Response
    package typealias AdminHandler = @Sendable (AdminContext) throws -> Response
    /// A route's event-loop path: the handler's work for the common case that needs no database, or
    /// ``NeedsConnection`` (the request then runs on a worker with the route's `Handler`).
    package typealias EventLoopHandler = @Sendable (CallerContext) throws -> Response

    /// Adds an app route. `queryToken` routes (the SSE streams, which browsers' EventSource opens without headers)
    /// also accept the credential as the `access_token` query parameter when there is no `Authorization`.
    /// `numbersItsEvents` routes write their events with ids before they answer (the message writer), so their
    /// answer need not wait for the sequencer. `bodyMediaType`: the media type of request bodies (JSON unless the route
    /// says otherwise, docs/api.md).
    ///
    /// `signedRequest`: answers, before the pipeline, a request that proves itself without a credential (a signed
    /// download URL, docs/files.md#signed-urls); it returns nil for any other request, which the pipeline then runs.
    package mutating func add(
        _ method: HTTPMethod, _ template: String, _ access: Access, _ operationID: String, maxBodyBytes: Int? = nil,
        queryToken: Bool = false, numbersItsEvents: Bool = false, bodyMediaType: String = "application/json",
        signedRequest: (@Sendable (Request, Services) -> Response?)? = nil, _ handler: @escaping Handler
    ) {
        let route = RequestPipeline.Route(
            access: access, queryToken: queryToken, sequenced: !numbersItsEvents, bodyMediaType: bodyMediaType)
        register(method, template, operationID, maxBodyBytes: maxBodyBytes, route, signedRequest: signedRequest, Self.appHandler(handler))
    }

    /// Adds an app route whose body its handler reads as it arrives (file uploads, docs/files.md#uploading). It runs on
    /// a transfer thread (``Services/transfers``): the pipeline and `handler` run with a connection borrowed from the
    /// pool; `handler` checks what it can before the body and answers later (``Response/later(_:)``), and that answer
    /// runs on the transfer thread once the connection went back, reading `request.bodyStream` and borrowing a
    /// connection for each piece it stores. The route numbers no events of its own.
    package mutating func addUpload(
        _ method: HTTPMethod, _ template: String, _ access: Access, _ operationID: String, maxBodyBytes: Int,
        _ handler: @escaping Handler
    ) {
        let route = RequestPipeline.Route(access: access, queryToken: false, sequenced: false)
        let services = self.services
        let options = RouteOptions(
            maxBodyBytes: maxBodyBytes, operationID: operationID, executor: services.transfers, answersOversizedBody: true,
            streamsBody: true)
        let appHandler = Self.appHandler(handler)
        builder.add(method, template, options: options) { request in Self.runOnWorker(request, route, services, appHandler) }
    }

    private static func appHandler(_ handler: @escaping Handler) -> @Sendable (RequestPipeline.Exchange) throws -> Response {
        { exchange in
            guard let app = exchange.app else { throw APIError(.internalError, "app route without an app") }
            return try handler(
                APIContext(
                    request: exchange.request, credential: exchange.credential, app: app, now: exchange.now, services: exchange.services,
                    db: try exchange.db))
        }
    }

    /// Adds an app route that first runs on the HTTP event loop that read the request, through the pipeline and
    /// `onEventLoop`, with no database connection and no hand-off to a worker thread: for a route whose common case
    /// needs none (a send, which the message writer commits). When a step or `onEventLoop` needs the database
    /// (``NeedsConnection``: a cache to refresh, a user token, an `Idempotency-Key`, a lookup the request asks for),
    /// the request runs again from the start on a worker with `handler`, as a route added with ``add(_:_:_:_:maxBodyBytes:queryToken:numbersItsEvents:bodyMediaType:_:)`` does.
    package mutating func add(
        _ method: HTTPMethod, _ template: String, _ access: Access, _ operationID: String, maxBodyBytes: Int? = nil,
        numbersItsEvents: Bool = false, userBucket: RouteUserBucket? = nil, onEventLoop: @escaping EventLoopHandler,
        _ handler: @escaping Handler
    ) {
        let route = RequestPipeline.Route(access: access, queryToken: false, sequenced: !numbersItsEvents, userBucket: userBucket)
        let services = self.services
        let onWorker: @Sendable (RequestPipeline.Exchange) throws -> Response = { exchange in
            guard let app = exchange.app else { throw APIError(.internalError, "app route without an app") }
            return try handler(
                APIContext(
                    request: exchange.request, credential: exchange.credential, app: app, now: exchange.now, services: exchange.services,
                    db: try exchange.db))
        }
        let options = RouteOptions(
            maxBodyBytes: maxBodyBytes, operationID: operationID, executor: RunsOnTheCallingThread(), answersOversizedBody: true)
        builder.add(method, template, options: options) { request in
            let fast = RequestPipeline.runOnEventLoop(
                RequestPipeline.Exchange(request: request, route: route, services: services, connection: nil)
            ) { exchange in
                guard let app = exchange.app else { throw APIError(.internalError, "app route without an app") }
                return try onEventLoop(
                    CallerContext(request: exchange.request, credential: exchange.credential, app: app, now: exchange.now, services: services))
            }
            if let fast { return fast }
            return .later { respond in
                services.resume(request, answering: respond) { respond(Self.runOnWorker(request, route, services, onWorker)) }
            }
        }
    }

    /// Adds a server-admin route (`S`: the admin key only; `Parley-App-Id` is ignored).
    package mutating func addAdmin(
        _ method: HTTPMethod, _ template: String, _ operationID: String, maxBodyBytes: Int? = nil, _ handler: @escaping AdminHandler
    ) {
        let route = RequestPipeline.Route(access: nil, queryToken: false, sequenced: true)
        register(method, template, operationID, maxBodyBytes: maxBodyBytes, route) { exchange in
            try handler(AdminContext(request: exchange.request, now: exchange.now, services: exchange.services, db: try exchange.db))
        }
    }

    private mutating func register(
        _ method: HTTPMethod, _ template: String, _ operationID: String, maxBodyBytes: Int?, _ route: RequestPipeline.Route,
        signedRequest: (@Sendable (Request, Services) -> Response?)? = nil,
        _ handler: @escaping @Sendable (RequestPipeline.Exchange) throws -> Response
    ) {
        let services = self.services
        // The pipeline answers a body over the limit itself, after the checks that come before 413
        // (docs/errors.md#problems-rfc-9457).
        let options = RouteOptions(maxBodyBytes: maxBodyBytes, operationID: operationID, answersOversizedBody: true)
        builder.add(method, template, options: options) { request in
            if let signedRequest, let answer = signedRequest(request, services) { return answer }
            return Self.runOnWorker(request, route, services, handler)
        }
    }

    /// Runs `request` through the pipeline and `handler` with this worker thread's connection.
    private static func runOnWorker(
        _ request: Request, _ route: RequestPipeline.Route, _ services: Services,
        _ handler: (RequestPipeline.Exchange) throws -> Response
    ) -> Response {
        do {
            return try services.pool.withConnection { db in
                RequestPipeline.run(RequestPipeline.Exchange(request: request, route: route, services: services, connection: db), handler)
            }
        } catch {
            return ProblemRendering.handlerError(error, request: request, logger: services.logger)
        }
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
package enum Reply {
    package static func json(_ bytes: [UInt8], status: Int = 200) -> Response { .json(bytes, status: status) }
    package static func created(_ bytes: [UInt8]) -> Response { .json(bytes, status: 201) }
    package static func noContent() -> Response { Response(status: 204) }

    /// `{"items": [...], "next_cursor": ...}` from pre-rendered items.
    package static func list(_ items: [[UInt8]], nextCursor: String?) -> Response {
        var w = JSONWriter()
        w.object { w in
            w.key("items")
            w.array { w in for item in items { w.writeRaw(item) } }
            w.key("next_cursor")
            if let nextCursor { w.writeString(nextCursor) } else { w.writeNull() }
        }
        return .json(w.bytes)
    }

    /// The batch shape: 200 with one result per input item, in input order (docs/errors.md#problems-rfc-9457).
    package static func batch(_ results: [BatchResult], extra: ((inout JSONWriter) -> Void)? = nil, status: Int = 200) -> Response {
        var w = JSONWriter()
        w.object { w in
            extra?(&w)
            w.key("results")
            w.array { w in for result in results { result.write(to: &w) } }
        }
        return .json(w.bytes, status: status)
    }
}

/// One entry of a batch response (docs/errors.md#problems-rfc-9457).
package struct BatchResult {
    var index: Int
    package var id: String
    package var outcome: Outcome

    package init(index: Int, id: String, outcome: Outcome) {
        self.index = index
        self.id = id
        self.outcome = outcome
    }

    package enum Outcome {
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
