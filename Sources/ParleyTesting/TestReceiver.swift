import Glibc
import ParleyCore
import ParleyHTTP
import ParleySync
import Synchronization

/// A loopback HTTP or HTTPS server that records the requests it receives and answers them as a handler says: the
/// other end of webhook tests.
///
/// Listens on 127.0.0.1 on a free port. Each connection gets its own thread (a delayed answer holds up only its
/// own connection) and is kept alive between requests unless the client asks to close; bodies are read by
/// `Content-Length` or chunked. With TLS it presents a certificate for `localhost` and `127.0.0.1` signed by a
/// test CA made once per process (`caFile`). Stopped by `stop()` or when released.
public final class TestReceiver: Sendable {
    /// One request as it arrived.
    public struct Received: Sendable {
        public let method: String
        /// The request target: path and query.
        public let path: String
        /// The header fields in arrival order, names as sent.
        public let headers: [(String, String)]
        public let body: [UInt8]
        /// When the whole request had arrived.
        public let at: ContinuousClock.Instant

        /// The first value of the header `name` (case-insensitive).
        public func header(_ name: String) -> String? {
            let wanted = name.lowercased()
            return headers.first { $0.0.lowercased() == wanted }?.1
        }

        /// The body as UTF-8 text.
        public var text: String { String(decoding: body, as: UTF8.self) }

        /// The body parsed as JSON (nil when it is not).
        public var json: JSONValue? { try? JSONValue.parse(body) }
    }

    /// How to answer one request.
    public struct Answer: Sendable {
        public var status: Int
        public var body: [UInt8]
        /// Extra header fields (`Content-Length` is always sent).
        public var headers: [(String, String)]
        /// How long to wait before answering.
        public var delayMillis: Int

        public init(status: Int, body: [UInt8] = [], headers: [(String, String)] = [], delayMillis: Int = 0) {
            self.status = status
            self.body = body
            self.headers = headers
            self.delayMillis = delayMillis
        }

        public static func status(_ s: Int, body: String = "") -> Answer { Answer(status: s, body: Array(body.utf8)) }
    }

    /// `http://127.0.0.1:PORT`, or `https://localhost:PORT` with TLS.
    public let url: String
    public let port: Int
    /// The PEM file of the CA that signed the receiver's certificate (nil without TLS): give it to a client as
    /// `OutboundPolicy.extraCAFile`.
    public let caFile: String?

    private let state: State
    private let acceptThread: BackgroundThread

    /// A PEM file of a valid CA that signed no receiver's certificate: a client trusting it (and not `caFile`)
    /// fails verification.
    public static var untrustedCAFile: String { TestAuthority.untrusted.pemFile }

    /// Starts on 127.0.0.1 on a free port: plain HTTP, or with `tls` HTTPS presenting a certificate for
    /// `certificateNames` (DNS names and IP addresses) signed by the test CA.
    public init(
        tls: Bool = false, certificateNames: [String] = ["localhost", "127.0.0.1"],
        handler: @escaping @Sendable (Received) -> Answer = { _ in .status(200) }
    ) throws {
        let context = tls ? try TestAuthority.trusted.serverContext(names: certificateNames) : nil
        let (fd, port) = try HTTPServer.bind(host: "127.0.0.1", port: 0)
        self.port = port
        url = tls ? "https://localhost:\(port)" : "http://127.0.0.1:\(port)"
        caFile = tls ? TestAuthority.trusted.pemFile : nil
        let state = State(tls: context, handler: handler)
        self.state = state
        acceptThread = BackgroundThread(name: "test-receiver") { state.acceptLoop(listener: fd) }
    }

    deinit { stop() }

    /// Replaces how later requests are answered.
    public func setHandler(_ handler: @escaping @Sendable (Received) -> Answer) {
        state.handler.withLock { $0 = handler }
    }

    /// The requests received so far, in arrival order.
    public var requests: [Received] { state.received.withLock { $0 } }

    /// Waits until at least `count` requests arrived or `timeout` passed; returns the requests received by then.
    public func waitFor(count: Int, timeout: Duration = .seconds(10)) -> [Received] {
        eventually(timeout: timeout, every: .milliseconds(5)) { requests.count >= count }
        return requests
    }

    /// Stops listening (the port is closed when this returns); open connections end within a fraction of a second.
    public func stop() {
        state.stopped.store(true, ordering: .releasing)
        acceptThread.join()
    }

    /// What the receiver's threads share.
    private final class State: Sendable {
        let tls: TLSContext?
        let handler: LockedValue<@Sendable (Received) -> Answer>
        let received = LockedValue<[Received]>([])
        let stopped = Atomic<Bool>(false)
        /// How often a waiting thread looks at `stopped`.
        static let tick = Duration.milliseconds(100)

        init(tls: TLSContext?, handler: @escaping @Sendable (Received) -> Answer) {
            self.tls = tls
            self.handler = LockedValue(handler)
        }

        var isStopped: Bool { stopped.load(ordering: .acquiring) }

        func acceptLoop(listener: Int32) {
            defer { close(listener) }
            while !isStopped {
                var entry = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
                guard poll(&entry, 1, 100) > 0 else { continue }
                let fd = accept(listener, nil, nil)
                guard fd >= 0 else { continue }
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
                pthread_detach(BackgroundThread.start(name: "test-receiver-c") { self.serve(fd) })
            }
        }

        /// Serves one connection until the client closes it, asks to, or the receiver stops.
        private func serve(_ fd: Int32) {
            let transport: any HTTPClientTransport
            do {
                let socket = try HTTPClientSocket(adopting: fd, ioTimeout: .seconds(10))
                if let tls {
                    transport = try TLSStream.accept(over: socket, context: tls, deadline: .now + .seconds(10))
                } else {
                    transport = socket
                }
            } catch {
                close(fd)
                return
            }
            defer { transport.close() }
            var parser = HTTPRequestParser(limits: HTTPParserLimits(maxBodyBytes: 16 * 1024 * 1024))
            var head: HTTPRequestHead?
            var input: [UInt8] = []
            while !isStopped {
                do {
                    while let event = try parser.next() {
                        switch event {
                        case .head(let h): head = h
                        case .end(let body):
                            guard let h = head else { return }
                            try answer(h, body: body, over: transport)
                            if !h.keepAlive { return }
                        }
                    }
                    input.removeAll(keepingCapacity: true)
                    guard try transport.receive(appendingTo: &input, deadline: .now + Self.tick) > 0 else { return }
                    parser.append(input)
                } catch let error as HTTPClientError where error.kind == .timeout {
                    continue
                } catch {
                    return
                }
            }
        }

        private func answer(_ head: HTTPRequestHead, body: [UInt8], over transport: any HTTPClientTransport) throws {
            let request = Received(
                method: head.method.rawValue, path: head.target, headers: head.headers.map { ($0.name, $0.value) },
                body: body, at: .now)
            received.withLock { $0.append(request) }
            let reply = handler.withLock { $0 }(request)
            if reply.delayMillis > 0 { usleep(UInt32(reply.delayMillis) * 1000) }
            var text = "HTTP/1.1 \(reply.status) \(HTTPStatus.reason(reply.status))\r\nContent-Length: \(reply.body.count)\r\n"
            for (name, value) in reply.headers { text += "\(name): \(value)\r\n" }
            if !head.keepAlive { text += "Connection: close\r\n" }
            try transport.sendAll(Array((text + "\r\n").utf8) + reply.body, deadline: .now + .seconds(10))
        }
    }
}
