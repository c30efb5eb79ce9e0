import CParleyShims
import Glibc
import ParleySync
import Synchronization

/// Settings of the HTTP server; every limit and timeout a client could otherwise abuse is here.
public struct HTTPServerConfiguration: Sendable {
    public var host: String = "127.0.0.1"
    /// 0 picks a free port (read it back from `HTTPServer.port`).
    public var port: Int = 8080
    /// Event-loop threads; default one per core.
    public var loopCount: Int = max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))
    /// Open connections beyond this are closed as soon as they are accepted. The open-files limit bounds them too
    /// (`HTTPServer.openFilesLimit`; event streams stop at it less a reserve, docs/scaling.md#open-files).
    public var maxConnections: Int = 65_536
    /// Descriptors never given to client connections: a connection accepted while the open ones would leave fewer
    /// than this below the open-files limit (less what the process held at start) is closed at once, so the process
    /// keeps descriptors for its database and outbound connections instead of meeting `EMFILE` (docs/scaling.md#open-files).
    public var descriptorsKeptFree: Int = 64
    public var limits = HTTPParserLimits()
    /// The request line and headers must arrive within this (from the first byte, or from accept).
    public var headerTimeout: Duration = .seconds(10)
    /// A request body that makes no progress for this long is cut off.
    public var bodyTimeout: Duration = .seconds(30)
    /// A keep-alive connection with no request for this long is closed.
    public var idleTimeout: Duration = .seconds(60)
    /// A response (or stream) the client does not read for this long is cut off.
    public var writeTimeout: Duration = .seconds(30)
    /// After answering a request whose body was over its limit (not read), input is dropped for at most this long
    /// and at most `lingerBytes`, so the client can finish sending and read the answer (``HTTPConnection``).
    public var lingerTimeout: Duration = .seconds(5)
    public var lingerBytes: Int = 64 * 1024 * 1024
    /// How long shutdown waits for in-flight requests before closing everything.
    public var shutdownGrace: Duration = .seconds(10)
    /// Bytes a streaming response may queue for a slow client before the connection is closed.
    public var streamBufferLimit: Int = 1024 * 1024
    /// The kernel send buffer (`SO_SNDBUF`) of a connection once it streams; nil leaves the kernel's autotuning (up
    /// to `net.ipv4.tcp_wmem`'s maximum, 4 MiB by default), which a client that stops reading fills before
    /// `streamBufferLimit` starts counting. Tests set it small so that a stalled client is cut after little data.
    public var streamSendBuffer: Int?
    /// Send CORS headers on every response and answer preflights (any origin).
    public var cors: Bool = true
    /// The response headers a browser script may read (`Access-Control-Expose-Headers`); the application's own.
    public var corsExposedHeaders: [String] = ["X-Request-Id"]
    /// The request headers a browser script may send (`Access-Control-Allow-Headers` of a preflight).
    public var corsAllowedHeaders: [String] = ["Authorization", "Content-Type", "X-Request-Id"]

    public init() {}
}

/// Server-generated failures that need a response body in the application's error format.
public enum ServerProblem: Sendable {
    case badRequest(String)
    case notFound
    case methodNotAllowed([HTTPMethod])
    case payloadTooLarge
    case headersTooLarge
    case notImplemented(String)
    case versionNotSupported
    case requestTimeout
    case unavailable
    case internalError

    public var status: Int {
        switch self {
        case .badRequest: 400
        case .notFound: 404
        case .methodNotAllowed: 405
        case .payloadTooLarge: 413
        case .headersTooLarge: 431
        case .notImplemented: 501
        case .versionNotSupported: 505
        case .requestTimeout: 408
        case .unavailable: 503
        case .internalError: 500
        }
    }
}

/// What the server reports after each response (for logs and metrics).
public struct RequestRecord: Sendable {
    public var method: HTTPMethod
    public var route: String
    /// The matched route's position in `Router.routes` (nil when none matched): a key cheaper than `route`.
    public var routeIndex: Int?
    public var status: Int
    public var durationSeconds: Double
    public var requestID: String
}

/// Application callbacks of the server. Defaults produce minimal JSON problems and log nothing extra.
public struct HTTPServerHooks: Sendable {
    /// Renders a server-generated failure (parse errors, 404, 405, 503 …).
    public var problem: @Sendable (ServerProblem, _ requestID: String) -> Response
    /// Renders an error a handler threw.
    public var handlerError: @Sendable (any Error, Request) -> Response
    /// Called on the loop after each response is queued.
    public var requestCompleted: @Sendable (RequestRecord) -> Void
    /// Called when the open-connection count changes.
    public var connectionsChanged: @Sendable (Int) -> Void

    public init(
        problem: @escaping @Sendable (ServerProblem, String) -> Response = HTTPServerHooks.defaultProblem,
        handlerError: @escaping @Sendable (any Error, Request) -> Response = { _, r in
            HTTPServerHooks.defaultProblem(.internalError, r.requestID)
        },
        requestCompleted: @escaping @Sendable (RequestRecord) -> Void = { _ in },
        connectionsChanged: @escaping @Sendable (Int) -> Void = { _ in }
    ) {
        self.problem = problem
        self.handlerError = handlerError
        self.requestCompleted = requestCompleted
        self.connectionsChanged = connectionsChanged
    }

    public static func defaultProblem(_ problem: ServerProblem, _ requestID: String) -> Response {
        var detail = HTTPStatus.reason(problem.status)
        switch problem {
        case .badRequest(let d), .notImplemented(let d): detail = d
        default: break
        }
        var escaped = ""
        for ch in detail.unicodeScalars {
            switch ch {
            case "\"": escaped += "\\\""
            case "\\": escaped += "\\\\"
            case _ where ch.value < 0x20: escaped += " "
            default: escaped.unicodeScalars.append(ch)
            }
        }
        var response = Response(
            status: problem.status, headers: ["Content-Type": "application/problem+json"],
            body: Array("{\"status\":\(problem.status),\"detail\":\"\(escaped)\",\"request_id\":\"\(requestID)\"}".utf8))
        if case .methodNotAllowed(let allow) = problem {
            response.headers.add("Allow", allow.map(\.rawValue).joined(separator: ", "))
        }
        return response
    }
}

/// The HTTP/1.1 server: a listening socket shared by `loopCount` epoll loops, handlers run by an executor.
///
/// Owner: immutable after `start()` except `state` (guarded by its `LockedValue`) and the atomic counters.
public final class HTTPServer: Sendable {
    public let configuration: HTTPServerConfiguration
    public let router: Router
    let executor: any RequestExecutor
    let hooks: HTTPServerHooks
    let logger: Logger
    let loops: [EventLoop]
    let openConnections = Atomic<Int>(0)
    let inFlightRequests = Atomic<Int>(0)
    let draining = Atomic<Bool>(false)
    /// Counter behind the ids of requests answered in process (`respond(toRequest:done:)`).
    let inProcessRequestCounter = Atomic<UInt64>(0)
    let listenFD: Int32
    /// The bound port (useful when the configuration asked for port 0).
    public let port: Int
    let requestIDPrefix: String
    /// The configuration's timeouts in milliseconds, converted once: a `Duration` conversion per request cost more
    /// than the rest of the deadline bookkeeping.
    let headerTimeoutMillis: Int64
    let bodyTimeoutMillis: Int64
    let idleTimeoutMillis: Int64
    let writeTimeoutMillis: Int64
    let lingerTimeoutMillis: Int64
    /// The CORS lines of every response, and the extra ones of a preflight answer (from the configuration).
    let corsHeaders: [UInt8]
    let preflightHeaders: [UInt8]
    private let state = LockedValue<Bool>(false)  // stopped
    /// The soft open-files limit (RLIMIT_NOFILE) after start raised it to the hard limit; `Int.max` when unlimited.
    public let openFilesLimit: Int
    /// Descriptors the process held when the server started, before its listener (counted once from /proc/self/fd).
    public let descriptorsAtStart: Int
    /// Client connections held at most: `maxConnections`, and no more than the open-files limit allows less the
    /// descriptors held at start and `descriptorsKeptFree`.
    public let connectionLimit: Int
    /// A descriptor held in reserve (on /dev/null) for the one case the limit cannot prevent, `accept` failing with
    /// `EMFILE`/`ENFILE` (descriptors used elsewhere in the process): it is closed, the waiting connection accepted
    /// and closed at once, and the reserve taken again; without that the listener would stay readable and the loops
    /// spin on it. -1 while not held. Owner: `spare`'s lock.
    private let spare = LockedValue<Int32>(-1)
    /// Connections closed at accept (over the limit, or out of descriptors), for the log's rate limit.
    private let refused = Atomic<Int>(0)
    private let refusedLogged = Atomic<Int64>(0)

    /// Binds the listening socket and starts the loops. Throws when the address cannot be bound.
    public init(
        configuration: HTTPServerConfiguration, router: Router, executor: any RequestExecutor,
        hooks: HTTPServerHooks = HTTPServerHooks(), logger: Logger = Logger(label: "http")
    ) throws {
        parley_ignore_sigpipe()
        var softBefore = 0
        var hard = 0
        let soft = parley_raise_nofile_limit(&softBefore, &hard)
        openFilesLimit = soft < 0 ? Int.max : soft
        descriptorsAtStart = max(0, Int(parley_count_open_files()))
        connectionLimit =
            openFilesLimit == Int.max
            ? configuration.maxConnections
            : min(configuration.maxConnections, max(1, openFilesLimit - descriptorsAtStart - configuration.descriptorsKeptFree))
        // One line, both values: an operator sees at once whether the hard limit (the unit's LimitNOFILE, the
        // container's ulimit) or only the soft one was low (docs/scaling.md#open-files).
        logger.info(
            "msg=\"open files limit\" soft_before=\(Self.limitText(softBefore)) soft=\(Self.limitText(soft)) hard=\(Self.limitText(hard)) open_at_start=\(descriptorsAtStart) connection_limit=\(connectionLimit)"
        )
        self.configuration = configuration
        self.router = router
        self.executor = executor
        self.hooks = hooks
        self.logger = logger
        headerTimeoutMillis = configuration.headerTimeout.millis
        bodyTimeoutMillis = configuration.bodyTimeout.millis
        idleTimeoutMillis = configuration.idleTimeout.millis
        writeTimeoutMillis = configuration.writeTimeout.millis
        lingerTimeoutMillis = configuration.lingerTimeout.millis
        var random = UInt32.random(in: 0...UInt32.max)
        requestIDPrefix = "r" + String(random & 0xFFFFFF, radix: 16)
        random = 0
        corsHeaders =
            configuration.cors
            ? Array(
                ("Access-Control-Allow-Origin: *\r\nAccess-Control-Expose-Headers: "
                    + configuration.corsExposedHeaders.joined(separator: ", ") + "\r\n").utf8) : []
        preflightHeaders = Array(
            ("Access-Control-Allow-Methods: GET, POST, PUT, PATCH, DELETE, OPTIONS\r\nAccess-Control-Allow-Headers: "
                + configuration.corsAllowedHeaders.joined(separator: ", ") + "\r\nAccess-Control-Max-Age: 86400\r\n").utf8)
        (listenFD, port) = try Self.bind(host: configuration.host, port: configuration.port)
        var loops: [EventLoop] = []
        for i in 0..<max(1, configuration.loopCount) { loops.append(try EventLoop(index: i)) }
        self.loops = loops
        spare.withLock { $0 = open("/dev/null", O_RDONLY | O_CLOEXEC) }
        for loop in loops {
            loop.start()
            let fd = listenFD
            let stem = Array("\(requestIDPrefix)-\(loop.index)-".utf8)
            loop.execute { [self] loop in
                loop.requestIDStem = stem
                let acceptor = Acceptor(server: self)
                loop.register(fd: fd, events: PARLEY_EPOLLIN | PARLEY_EPOLLEXCLUSIVE, watcher: acceptor)
                loop.onTick { loop in loop.sweepConnections() }
            }
        }
        logger.info("msg=listening address=\(configuration.host):\(port) loops=\(loops.count)")
    }

    private static func limitText(_ value: Int) -> String { value < 0 ? "unlimited" : String(value) }

    /// `accept` failed with `EMFILE`/`ENFILE`: frees the spare descriptor, accepts one waiting connection and closes it
    /// (its client sees the connection end and retries, elsewhere behind a balancer), then takes the spare again.
    /// Returns whether a connection was taken off the backlog (false: nothing more to do until descriptors free up).
    func shedOneConnection() -> Bool {
        let shed = spare.withLock { spare -> Bool in
            guard spare >= 0 else { return false }
            close(spare)
            let fd = parley_accept4(listenFD)
            if fd >= 0 { close(fd) }
            spare = open("/dev/null", O_RDONLY | O_CLOEXEC)
            return fd >= 0
        }
        if shed { noteRefused(reason: "out of file descriptors") }
        return shed
    }

    /// Counts a connection closed at accept and logs it, at most once every 10 s with the count since the last line.
    func noteRefused(reason: String) {
        let count = refused.add(1, ordering: .relaxed).newValue
        let now = EventLoop.monotonicMillis()
        let last = refusedLogged.load(ordering: .relaxed)
        guard now - last >= 10_000, refusedLogged.compareExchange(expected: last, desired: now, ordering: .relaxed).exchanged else { return }
        logger.warning(
            "msg=\"connections closed at accept\" reason=\"\(reason)\" total=\(count) open=\(connectionCount) connection_limit=\(connectionLimit)")
    }

    private let loopCursor = Atomic<Int>(0)

    /// The loop the next accepted connection goes to (round-robin).
    func nextLoop() -> EventLoop {
        loops[loopCursor.add(1, ordering: .relaxed).newValue % loops.count]
    }

    /// Number of open client connections.
    public var connectionCount: Int { openConnections.load(ordering: .relaxed) }

    /// Graceful stop (docs/operations.md#shutdown): stop listening, so new connections are refused and a balancer
    /// tries another node; close idle connections, end streams, and let in-flight requests finish with
    /// `Connection: close` (up to `shutdownGrace`); then close what is left and stop the loops. Returns when everything
    /// is closed.
    public func shutdown() {
        let already = state.withLock { stopped -> Bool in
            defer { stopped = true }
            return stopped
        }
        if already { return }
        let started = EventLoop.monotonicMillis()
        draining.store(true, ordering: .releasing)
        stopListening()
        let busyAtStart = inFlightRequests.load(ordering: .acquiring)
        for loop in loops { loop.execute { loop in loop.drainConnections() } }
        let deadline = started + configuration.shutdownGrace.millis
        while EventLoop.monotonicMillis() < deadline
            && (openConnections.load(ordering: .acquiring) > 0 || inFlightRequests.load(ordering: .acquiring) > 0)
        {
            usleep(10_000)
        }
        let cutOff = openConnections.load(ordering: .acquiring)
        for loop in loops { loop.execute { loop in loop.closeAllConnections() } }
        for loop in loops { loop.stop() }
        for loop in loops { loop.join() }
        logger.info(
            "msg=stopped in_flight_at_drain=\(busyAtStart) connections_cut_off=\(cutOff) ms=\(EventLoop.monotonicMillis() - started)")
        logger.flush()
    }

    /// Closes the listening socket once every loop has let go of it. Each loop first accepts what already waits in
    /// the backlog (those clients have sent, or are sending, a request: they get their answer, with
    /// `Connection: close`); after the close the kernel refuses new connections at once, which a proxy treats as
    /// "try the next server" (nginx `proxy_next_upstream error`), instead of letting them wait for a dead accept.
    private func stopListening() {
        let released = LockedValue(0)
        let fd = listenFD
        for loop in loops {
            loop.execute { [self] loop in
                Acceptor(server: self).handle(events: 0, loop: loop)
                loop.deregister(fd: fd)
                released.withLock { $0 += 1 }
            }
        }
        // Bounded: a loop runs its jobs within one turn (well under a second even when busy). The socket is closed only
        // after every loop let go of it, or its number could be reused by a new socket that a late loop then deregisters.
        var waits = 0
        while released.withLock({ $0 }) < loops.count && waits < 2_500 {
            usleep(2_000)
            waits += 1
        }
        close(fd)
        spare.withLock { spare in
            if spare >= 0 { close(spare) }
            spare = -1
        }
    }

    /// Blocks the calling thread until SIGINT or SIGTERM arrives (self-pipe; works whatever the thread masks).
    public static func waitForTerminationSignal() -> Int32 {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { return 0 }
        _ = parley_install_term_handler(fds[1])
        var byte: UInt8 = 0
        while true {
            let n = read(fds[0], &byte, 1)
            if n == 1 { return Int32(byte) }
            if n < 0 && errno == EINTR { continue }
            return 0
        }
    }

    /// A fresh request id: process-random prefix, loop index, per-loop counter.
    func nextRequestID(loop: EventLoop) -> String {
        loop.requestCounter &+= 1
        var n = loop.requestCounter
        var digits = 0
        var rest = n
        repeat {
            digits += 1
            rest >>= 4
        } while rest > 0
        let stem = loop.requestIDStem
        // Written in place: a short id is a small (inline) string, so generating one allocates nothing.
        return String(unsafeUninitializedCapacity: stem.count + digits) { buffer in
            var i = buffer.initialize(fromContentsOf: stem) + digits
            let end = i
            repeat {
                i -= 1
                let d = UInt8(n & 0xF)
                buffer[i] = d < 10 ? 0x30 + d : 0x57 + d
                n >>= 4
            } while n > 0
            return end
        }
    }

    /// A non-blocking IPv4 listening socket on `host:port` (0 for a free port) and the port it got; also the test
    /// receiver's (ParleyTesting).
    package static func bind(host: String, port: Int) throws -> (Int32, Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        if fd < 0 { throw SystemError(function: "socket") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        let resolved = host == "localhost" ? "127.0.0.1" : host
        if inet_pton(AF_INET, resolved, &addr.sin_addr) != 1 {
            close(fd)
            throw SystemError(function: "inet_pton(\(host))", errno: EINVAL)
        }
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if rc != 0 {
            let e = errno
            close(fd)
            throw SystemError(function: "bind(\(host):\(port))", errno: e)
        }
        if listen(fd, 1024) != 0 {
            let e = errno
            close(fd)
            throw SystemError(function: "listen", errno: e)
        }
        var bound = sockaddr_in()
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &bound) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        return (fd, Int(UInt16(bigEndian: bound.sin_port)))
    }
}

/// Accepts connections on one loop (the listener is shared by all loops with `EPOLLEXCLUSIVE`).
final class Acceptor: EventLoop.Watcher {
    let server: HTTPServer

    init(server: HTTPServer) { self.server = server }

    func handle(events: UInt32, loop: EventLoop) {
        for _ in 0..<64 {
            let fd = parley_accept4(server.listenFD)
            if fd < 0 {
                // Out of descriptors: the connection stays in the backlog and the listener readable, so shed it.
                let error = errno
                if error == EMFILE || error == ENFILE, server.shedOneConnection() { continue }
                return  // EAGAIN (another loop took it), or a transient error
            }
            // Counted here, not when its loop adopts it: a burst dealt to the other loop would otherwise pass the limit
            // before any of it is counted. While draining too: a connection still in the backlog is served (its
            // response says `Connection: close`).
            if server.openConnections.add(1, ordering: .relaxed).newValue > server.connectionLimit {
                server.openConnections.subtract(1, ordering: .relaxed)
                close(fd)
                server.noteRefused(reason: "connection limit")
                continue
            }
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            // Connections are dealt round-robin over the loops: whichever loop wins the accept, a burst of new
            // connections (wrk opening 64 at once) must not all land on it.
            let target = server.nextLoop()
            if target === loop {
                Self.adopt(fd: fd, server: server, loop: loop)
            } else {
                let server = self.server
                target.execute { loop in Self.adopt(fd: fd, server: server, loop: loop) }
            }
        }
    }

    /// Registers an accepted socket on `loop` (its owner from now on); the acceptor has counted it already.
    static func adopt(fd: Int32, server: HTTPServer, loop: EventLoop) {
        let connection = HTTPConnection(fd: fd, server: server, loop: loop)
        let generation = loop.register(fd: fd, events: PARLEY_EPOLLIN | PARLEY_EPOLLRDHUP, watcher: connection)
        if generation == 0 {
            close(fd)
            server.hooks.connectionsChanged(server.openConnections.subtract(1, ordering: .relaxed).newValue)
            return
        }
        connection.generation = generation
        server.hooks.connectionsChanged(server.openConnections.load(ordering: .relaxed))
    }
}
