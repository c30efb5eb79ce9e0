import Glibc
import ParleyAPI
import ParleyCore
import ParleyDomains
import ParleyHTTP
import ParleyLive
import ParleyPostgres
import ParleySync
import Synchronization

/// The running server: database (embedded or external), migrations, pool, routes and the HTTP listener.
///
/// Owner: immutable after `init` except `stopping` (atomic). `shutdown()` stops the parts in reverse order.
public final class ParleyApp: Sendable {
    public let configuration: Configuration
    public let logger: Logger
    let embedded: EmbeddedPostgres?
    public let database: PostgresConfiguration
    let pool: PostgresPool
    let services: Services
    /// This node's live hub and message writer (started after the server, stopped around it).
    let hub: EventHub
    let writer: MessageWriter
    /// This node's push bridge (docs/push.md): plans the event log into gateway requests and sends them.
    let push: PushBridge
    /// This node's job runner (docs/jobs.md).
    let jobs: JobRunner
    /// The readiness probe and the database's state (`/healthz`, `/readyz`, `/metrics`).
    let health: DatabaseHealth
    let server: HTTPServer
    /// The server admin key in force (configured, or generated and saved in the data directory).
    public let adminKey: String
    let stopping = StopFlag()

    /// The bound HTTP port.
    public var port: Int { server.port }
    /// The HTTP server (tests answer requests through it in process: `HTTPServer.respond(toRequest:done:)`).
    public var httpServer: HTTPServer { server }
    /// The embedded cluster this server runs and supervises; nil with `DATABASE_URL` (or a database handed in).
    public var embeddedPostgres: EmbeddedPostgres? { embedded }

    /// Starts everything: on return the server answers requests.
    ///
    /// `database` overrides `DATABASE_URL` (tests hand in the database they created).
    public init(
        configuration: Configuration, database explicitDatabase: PostgresConfiguration? = nil,
        output: @escaping @Sendable (String) -> Void = ParleyApp.printLine
    ) throws {
        self.configuration = configuration
        let logger = Logger(label: "parley", level: configuration.logLevel)
        self.logger = logger
        var external = explicitDatabase
        if external == nil, let url = configuration.databaseURL { external = try PostgresConfiguration(url) }
        if external == nil || configuration.adminKey == nil { try DataDirectory.prepare(configuration.dataDirectory) }
        let (adminKey, generated) = try DataDirectory.adminKey(configured: configuration.adminKey, in: configuration.dataDirectory)
        self.adminKey = adminKey
        // Keys made by this start, shown once the server is ready (below the migration log, where they are seen).
        let generatedAdminKey = generated ? adminKey : nil
        var defaultAppKey: String?
        let pgLogger = PostgresLogger.bridging(logger.named("postgres"))
        if let external {
            embedded = nil
            database = external
        } else {
            let cluster = EmbeddedPostgres(dataDirectory: configuration.dataDirectory, logger: pgLogger)
            database = try cluster.start()
            embedded = cluster
        }
        do {
            let applied = try Migrator(logger: pgLogger).migrate(configuration: database)
            if !applied.isEmpty { logger.info("msg=migrated versions=\(applied.map(String.init).joined(separator: ","))") }
            // Generic plans for the pool's prepared statements. Parley's queries all lead with app_id on its indexes,
            // and many carry optional filters (`$n IS NULL OR …`) that make PostgreSQL's "auto" mode keep choosing
            // custom plans, so it re-planned every execution: perf showed planning as PostgreSQL's top cost on GET
            // history, and forcing generic plans took that route from 3.3k to 4.3k req/s (bench/RESULTS.md).
            // The price: a generic plan cannot see which optional filters are open, so a new index can capture a list
            // query (the BRIN index on messages.timestamp did, MessageStore.historySQL). Check a new index or list
            // query with PREPARE + EXPLAIN EXECUTE on a big table, as MessagesTests does for history.
            // Serving connections (the pool's, the background threads', the listener's) wait for an answer no longer
            // than the configured timeout, and share one circuit: once the database stops answering, the others fail
            // fast instead of each waiting it out (docs/reliability.md). Migrations above ran without a bound.
            let circuit = PostgresCircuit(logger: pgLogger)
            var serving = database
            serving.responseTimeout = .milliseconds(configuration.databaseTimeoutMillis)
            serving.circuit = circuit
            var pooled = serving
            pooled.addServerSetting("plan_cache_mode", "force_generic_plan")
            pool = PostgresPool(configuration: pooled, size: configuration.poolSize, logger: pgLogger)
            let health = DatabaseHealth(embedded: embedded, database: database, circuit: circuit, logger: pgLogger)
            self.health = health
            // Every commit (the message writer's batches, the sequencer's rounds, another node's notice) is told to
            // the node's readers of the log in one list, filled below once the push bridge exists (it is made after the
            // services: it shares their transport). Another node's events reach them at once, not at their next poll.
            let observers = CommitObservers()
            let hub = EventHub(
                heartbeatMillis: configuration.sseHeartbeatMillis, logger: logger.named("live"),
                descriptorReserve: configuration.effectiveDescriptorReserve,
                remoteEvents: { appID in observers.storedElsewhere(appID: appID) },
                notificationsMissed: { observers.notificationsMissed() })
            let services = Services(
                pool: pool, clock: ServerClock(testClock: configuration.testClock), adminKey: adminKey, metrics: Metrics(),
                logger: logger, configuration: configuration, stopping: stopping,
                timerKinds: TimerKinds.all + [StatsSampler(everyMillis: Int64(configuration.statsSampleMillis)).kind],
                observers: observers,
                tokenSubject: { appID, userID, now, db in
                    try UserStore.authState(appID: appID, userID: userID, on: db).map {
                        TokenSubject(
                            isDeleted: $0.deletedAt != nil, tokenGeneration: $0.tokenGeneration,
                            isBanned: UserStore.isActive(until: $0.bannedUntil, now: now))
                    }
                })
            self.services = services
            let push = PushBridge(
                transport: services.webhooks.transport, clock: services.clock, apps: services.apps, logger: logger.named("push"),
                eventsWritten: { services.sequencer.poke($0) })
            // The history cache first: a send's pages are dropped before anything else hears of it.
            observers.set([services.historyCache, hub, services.webhooks.dispatcher, push])
            self.push = push
            // Batches the writer commits may hold pushable messages and events for webhook endpoints (handed over in memory).
            let writer = MessageWriter(
                logger: logger.named("messages"),
                overloadThreshold: configuration.sendOverloadThreshold ?? MessageWriter.defaultOverloadThreshold
            ) { committed in observers.committed(committed) }
            self.hub = hub
            self.writer = writer
            if embedded != nil { defaultAppKey = try Self.createDefaultAppIfNone(services: services) }
            let jobs = JobRunner(
                kinds: Routes.jobKinds(services: services), leaseMillis: Int64(configuration.jobLeaseMillis),
                stepPauseMillis: configuration.jobStepPauseMillis)
            self.jobs = jobs
            let routes = Routes.build(services: services, hub: hub, writer: writer, push: push, health: health, jobs: jobs)
            var http = HTTPServerConfiguration()
            http.host = configuration.listenHost
            http.port = configuration.listenPort
            http.headerTimeout = .milliseconds(configuration.requestHeadTimeoutMillis)
            http.bodyTimeout = .milliseconds(configuration.requestBodyTimeoutMillis)
            if let limit = configuration.streamBufferLimit { http.streamBufferLimit = limit }
            http.streamSendBuffer = configuration.streamSendBuffer
            // Streams stop at the whole reserve (503); ordinary requests may use half of it, the other half is never
            // given to client connections: the database and outbound connections' share (docs/scaling.md#open-files).
            http.descriptorsKeptFree = max(32, hub.capacity.reserve / 2)
            // CORS: what browser consoles and browser tus clients (docs/files.md#resumable-uploads-tus) may read and send.
            http.corsExposedHeaders = [
                "X-Request-Id", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "Retry-After", "WWW-Authenticate",
                "Idempotent-Replayed", "Parley-Duplicate", "Parley-Last-Event-ID", "Location", "Parley-File-Id", "Tus-Resumable",
                "Tus-Version", "Tus-Extension", "Tus-Max-Size", "Upload-Offset", "Upload-Length", "Upload-Metadata", "Upload-Expires",
            ]
            http.corsAllowedHeaders = [
                "Authorization", "Content-Type", "Idempotency-Key", "Last-Event-ID", "Parley-App-Id", "X-Request-Id", "Tus-Resumable",
                "Upload-Length", "Upload-Metadata", "Upload-Offset",
            ]
            let httpLogger = logger.named("http")
            let metrics = services.metrics
            let hooks = HTTPServerHooks(
                problem: { problem, requestID in ProblemRendering.serverProblem(problem, requestID: requestID) },
                handlerError: { error, request in ProblemRendering.handlerError(error, request: request, logger: httpLogger) },
                requestCompleted: { metrics.record($0) },
                connectionsChanged: { count in
                    metrics.connections(count)
                    hub.capacity.connectionsChanged(count)
                })
            // The hub before the listener: in a rolling restart the balancer sends streams the moment the port
            // accepts, and a stream the hub took before it started would not be recorded for presence.
            hub.start(database: serving, pgLogger: pgLogger, services: services)
            server = try HTTPServer(
                configuration: http, router: routes, executor: PoolExecutor(pool: pool), hooks: hooks, logger: httpLogger)
            let streamCap = hub.capacity.start(openFiles: server.openFilesLimit, atStart: server.descriptorsAtStart)
            logger.named("live").info(
                "msg=\"stream capacity\" connections=\(streamCap == Int.max ? "unlimited" : String(streamCap)) fd_reserve=\(hub.capacity.reserve)")
            services.sequencer.start(database: serving, pgLogger: pgLogger)
            writer.start(database: serving, pgLogger: pgLogger)
            services.webhooks.dispatcher.start(database: serving, pgLogger: pgLogger)
            push.start(database: serving, pgLogger: pgLogger)
            services.timers.start(services: services)
            jobs.start(services: services)
        } catch {
            embedded?.stop()
            throw error
        }
        if let warning = ConsoleRoutes.missingAssetsWarning(
            assets: ConsoleRoutes.assets, overrideDirectory: ConsoleRoutes.overrideDirectory)
        {
            logger.warning(warning)
        }
        logger.info("msg=ready listen=\(configuration.listenHost):\(server.port) embedded_postgres=\(embedded != nil)")
        for line in Self.firstStartBanner(
            adminKey: generatedAdminKey, defaultAppKey: defaultAppKey, dataDirectory: configuration.dataDirectory)
        {
            output(line)
        }
    }

    /// The keys a first start made, in a framed block that stands out from the log. The assignments start their
    /// lines (scripts read `^PARLEY_KEY=`) and, with the `export` line after them, paste into a shell as they are.
    /// Empty when this start made no key.
    static func firstStartBanner(adminKey: String?, defaultAppKey: String?, dataDirectory: String) -> [String] {
        let made = [("PARLEY_ADMIN_KEY", adminKey), ("PARLEY_KEY", defaultAppKey)].compactMap { name, key in key.map { (name, $0) } }
        if made.isEmpty { return [] }
        let rule = String(repeating: "=", count: 80)
        var lines = [
            rule, "First start: Parley made the keys below and shows them only now.",
            "Paste these lines into the shell you run the README's examples in:", "",
        ]
        lines += made.map { "\($0.0)=\($0.1)" }
        lines.append("export " + made.map(\.0).joined(separator: " "))
        lines.append("")
        if adminKey != nil {
            lines.append("PARLEY_ADMIN_KEY is the server admin key (the /v1/apps routes), also saved in \(dataDirectory)/admin_key.")
        }
        if defaultAppKey != nil { lines.append("PARLEY_KEY is the key of the app \"default\" (every other /v1 route).") }
        lines.append(rule)
        return lines
    }

    /// On the first start of the embedded default there is no app yet: create `default` and return its key (printed
    /// once, in the first-start banner), so a newcomer can call the API at once. Nil when an app exists.
    private static func createDefaultAppIfNone(services: Services) throws -> String? {
        let created = try services.pool.withConnection { db -> AppService.Created? in
            guard try db.query("SELECT count(*) FROM apps").decodeFirst(Int64.self) ?? 0 == 0 else { return nil }
            return try AppService.create(appID: "default", name: "Default app", settings: .defaults(), now: services.clock.now(), on: db)
        }
        return created?.secret
    }

    /// Writes a line to standard output at once (unbuffered: scripts read it while the server runs).
    public static func printLine(_ text: String) {
        let bytes = Array((text + "\n").utf8)
        _ = bytes.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
    }

    /// Serves until SIGINT/SIGTERM, then shuts down gracefully.
    public func runUntilSignalled() {
        let signal = HTTPServer.waitForTerminationSignal()
        logger.info("msg=\"shutting down\" signal=\(signal)")
        shutdown()
    }

    /// The graceful drain (docs/operations.md#shutdown), each phase logged with its duration: `/readyz` answers 503;
    /// event streams end with a short `retry:` hint (clients resume on another node with `Last-Event-ID`); the
    /// listener closes (new connections are refused, so a balancer tries the next node), idle connections close, and
    /// in-flight requests finish with `Connection: close` (at most the server's shutdown grace, 10 s); the node leaves
    /// the cluster (its streams' presence is settled after the handover, its heartbeat row removed); then the
    /// background workers, the pool and the embedded cluster stop.
    public func shutdown() {
        if stopping.set() { return }  // from here on /readyz answers 503
        let started = EventLoop.monotonicMillis()
        var phaseStarted = started
        func phaseDone(_ phase: String, _ detail: String = "") {
            let now = EventLoop.monotonicMillis()
            logger.info("msg=\"shutdown phase done\" phase=\(phase) ms=\(now - phaseStarted)\(detail)")
            phaseStarted = now
        }
        let streams = hub.endStreams()
        phaseDone("streams_ended", " streams=\(streams)")
        server.shutdown()
        phaseDone("http_drained")
        // Its connections are closed: a transfer still reading or writing a body ends with them.
        services.shutdownTransfers()
        health.probeExecutor.shutdown()
        health.probe.close()
        hub.stop()
        phaseDone("cluster_left")
        // In-flight answers wait for the sequencer (and sends for the message writer): stop them after the server.
        writer.stop()
        services.sequencer.stop()
        services.webhooks.dispatcher.stop()
        push.stop()
        services.timers.stop()
        // The HTTP error counts of the minute so far (docs/operations.md#activity-series): the pool still runs.
        _ = try? StatsSampler.flushErrors(services: services)
        jobs.stop()
        pool.shutdown()
        phaseDone("workers_stopped")
        embedded?.stop()
        if embedded != nil { phaseDone("embedded_postgres_stopped") }
        logger.info("msg=stopped ms=\(EventLoop.monotonicMillis() - started)")
        logger.flush()
    }
}

/// Runs HTTP handlers on the PostgreSQL worker threads, so a handler and its queries share one thread.
struct PoolExecutor: RequestExecutor {
    let pool: PostgresPool

    func execute(_ work: @escaping @Sendable () -> Void, rejected: @escaping @Sendable () -> Void) {
        pool.submit(work, rejected: rejected)
    }
}

extension PostgresLogger {
    /// Routes the PostgreSQL layer's messages into Parley's logger.
    static func bridging(_ logger: Logger) -> PostgresLogger {
        PostgresLogger { level, message in
            switch level {
            case .debug: logger.debug("msg=\"\(message)\"")
            case .info, .notice: logger.info("msg=\"\(message)\"")
            case .warning: logger.warning("msg=\"\(message)\"")
            case .error: logger.error("msg=\"\(message)\"")
            }
        }
    }
}
