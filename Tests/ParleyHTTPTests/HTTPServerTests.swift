import Dispatch
import Glibc
import ParleyHTTP
import ParleyTesting
import Synchronization
import Testing

/// A server on 127.0.0.1:0 with a few routes (and those `routes` adds), stopped when the body returns.
func withServer<T>(
    configure: (inout HTTPServerConfiguration) -> Void = { _ in },
    routes: (inout RouterBuilder) -> Void = { _ in },
    logger: Logger = Logger(label: "test", level: .off),
    _ body: (HTTPServer) throws -> T
) throws -> T {
    var builder = RouterBuilder()
    builder.add(.get, "/healthz", options: RouteOptions(runsOnEventLoop: true)) { _ in .json("{\"status\":\"ok\"}") }
    builder.add(.get, "/v1/users/{user_id}") { request in
        .json("{\"user_id\":\"\(request.pathParameters["user_id"] ?? "")\",\"q\":\"\(request.queryValue("q") ?? "")\"}")
    }
    builder.add(.post, "/v1/users/import") { _ in .json("{\"import\":true}") }
    builder.add(.post, "/echo") { request in Response(status: 200, body: request.body) }
    builder.add(.post, "/small", options: RouteOptions(maxBodyBytes: 10)) { request in Response(status: 200, body: request.body) }
    builder.add(.get, "/slow") { _ in
        // Deliberate: a handler that takes real time.
        usleep(600_000)
        return .json("{\"slow\":true}")
    }
    builder.add(.get, "/big") { _ in Response(status: 200, body: [UInt8](repeating: 0x61, count: 8 * 1024 * 1024)) }
    builder.add(.get, "/fail") { _ in throw CancellationError() }
    routes(&builder)
    var config = HTTPServerConfiguration()
    config.port = 0
    config.loopCount = 2
    configure(&config)
    let executor = ThreadPoolExecutor(threads: 4)
    let server = try HTTPServer(
        configuration: config, router: builder.build(), executor: executor, logger: logger)
    defer {
        server.shutdown()
        executor.shutdown()
    }
    return try body(server)
}

func connect(_ server: HTTPServer, timeout: Duration = .seconds(10)) throws -> HTTPClientConnection {
    try HTTPClientConnection(host: "127.0.0.1", port: server.port, timeout: timeout)
}

@Suite struct HTTPServerTests {
    @Test func healthzAndKeepAliveReuse() throws {
        try withServer { server in
            let client = try connect(server)
            for _ in 0..<3 {
                let response = try client.send(method: .get, path: "/healthz")
                #expect(response.status == 200)
                #expect(response.text == "{\"status\":\"ok\"}")
                #expect(response.headers["Access-Control-Allow-Origin"] == "*")
                #expect(response.headers["X-Request-Id"]?.isEmpty == false)
            }
            #expect(client.connectCount == 1)
        }
    }

    @Test func pathParametersAreDecodedAndLiteralsWin() throws {
        try withServer { server in
            let client = try connect(server)
            let r = try client.send(method: .get, path: "/v1/users/a%2Fb%23c?q=x%20y")
            #expect(r.text == "{\"user_id\":\"a/b#c\",\"q\":\"x y\"}")
            #expect(try client.send(method: .post, path: "/v1/users/import", body: "{}").text == "{\"import\":true}")
            // GET on the literal path falls back to the parameter route.
            #expect(try client.send(method: .get, path: "/v1/users/import").text.contains("\"user_id\":\"import\""))
        }
    }

    @Test func notFoundMethodNotAllowedAndBadEscapes() throws {
        try withServer { server in
            let client = try connect(server)
            #expect(try client.send(method: .get, path: "/nope").status == 404)
            let r = try client.send(method: .delete, path: "/healthz")
            #expect(r.status == 405)
            #expect(r.headers["Allow"]?.contains("GET") == true)
            #expect(try client.send(method: .get, path: "/v1/users/%zz").status == 400)
        }
    }

    @Test func headIsGetWithoutBody() throws {
        try withServer { server in
            let client = try connect(server)
            let r = try client.send(method: .head, path: "/healthz")
            #expect(r.status == 200)
            #expect(r.body.isEmpty)
            #expect(r.headers["Content-Length"] == "15")
            #expect(try client.send(method: .get, path: "/healthz").status == 200)  // connection still in sync
        }
    }

    @Test func requestIDIsEchoedOrGenerated() throws {
        try withServer { server in
            let client = try connect(server)
            let given = try client.send(method: .get, path: "/healthz", headers: ["X-Request-Id": "abc-123"])
            #expect(given.headers["X-Request-Id"] == "abc-123")
            let a = try client.send(method: .get, path: "/healthz").headers["X-Request-Id"]
            let b = try client.send(method: .get, path: "/healthz").headers["X-Request-Id"]
            #expect(a != nil && a != b)
        }
    }

    @Test func preflightAnswers204WithCORS() throws {
        try withServer { server in
            let client = try connect(server)
            let r = try client.send(method: .options, path: "/anything/at/all")
            #expect(r.status == 204)
            #expect(r.headers["Access-Control-Allow-Methods"] == "GET, POST, PUT, PATCH, DELETE, OPTIONS")
            #expect(r.headers["Access-Control-Max-Age"] == "86400")
        }
    }

    @Test func pipelinedRequestsAreAnsweredInOrder() throws {
        try withServer { server in
            let client = try connect(server)
            try client.sendRaw(
                "GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/users/u1 HTTP/1.1\r\nHost: x\r\n\r\n"
                    + "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
            #expect(try client.readResponse().text == "{\"slow\":true}")
            #expect(try client.readResponse().text.contains("\"u1\""))
            #expect(try client.readResponse().text == "hello")
        }
    }

    /// Answers settled later on another thread (as sends are, by the message writer) reach their connections, each
    /// once, whether they come one by one or many at once, and a connection's pipelined answers keep their order.
    @Test func answersSettledOnAnotherThreadArriveInOrder() throws {
        let answerer = LaterAnswerer()
        try withServer(routes: { builder in
            builder.add(.get, "/later/{i}") { request in
                let i = request.pathParameters["i"] ?? ""
                return .later { respond in answerer.add { respond(.json("{\"i\":\"\(i)\"}")) } }
            }
        }) { server in
            // A burst: 32 connections wait on answers the answerer gives all at once.
            let clients = try (0..<32).map { _ in try connect(server) }
            for (c, client) in clients.enumerated() { try client.sendRaw("GET /later/\(c) HTTP/1.1\r\nHost: x\r\n\r\n") }
            answerer.release(expecting: 32)
            for (c, client) in clients.enumerated() {
                let r = try client.readResponse()
                #expect(r.status == 200 && r.text == "{\"i\":\"\(c)\"}", "\(c): \(r.status) \(r.text)")
            }
            // Pipelined on one connection: later, immediate, later; released one at a time.
            let client = clients[0]
            try client.sendRaw(
                "GET /later/a HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/users/b HTTP/1.1\r\nHost: x\r\n\r\n"
                    + "GET /later/c HTTP/1.1\r\nHost: x\r\n\r\n")
            answerer.release(expecting: 1)
            #expect(try client.readResponse().text == "{\"i\":\"a\"}")
            #expect(try client.readResponse().text.contains("\"b\""))
            answerer.release(expecting: 1)
            #expect(try client.readResponse().text == "{\"i\":\"c\"}")
            // Many rounds of one answer each, so each answer finds its loop asleep.
            for round in 0..<50 {
                try client.sendRaw("GET /later/r\(round) HTTP/1.1\r\nHost: x\r\n\r\n")
                answerer.release(expecting: 1)
                #expect(try client.readResponse().text == "{\"i\":\"r\(round)\"}")
            }
        }
    }

    /// The request log line: timestamp, level, component, then the request's fields in a fixed order.
    @Test func eachRequestIsLoggedOnOneLine() throws {
        var fds: [Int32] = [0, 0]
        try #require(pipe(&fds) == 0)
        defer {
            close(fds[0])
            close(fds[1])
        }
        let logger = Logger(label: "http", level: .info, sink: LogSink(fd: fds[1]))
        try withServer(logger: logger) { server in
            let client = try connect(server)
            #expect(try client.send(method: .get, path: "/healthz", headers: ["X-Request-Id": "log-1"]).status == 200)
            #expect(try client.send(method: .get, path: "/nowhere", headers: ["X-Request-Id": "log-2"]).status == 404)
        }
        logger.flush()
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        let n = read(fds[0], &buffer, buffer.count)
        let lines = String(decoding: buffer[0..<max(0, n)], as: UTF8.self).split(separator: "\n").filter { $0.contains("request_id=log-") }
        try #require(lines.count == 2, "\(lines)")
        for (line, tail) in zip(lines, ["request_id=log-1 method=GET route=/healthz status=200", "request_id=log-2 method=GET route=- status=404"]) {
            let parts = line.split(separator: " ")
            try #require(parts.count == 8, "\(line)")
            // 2026-11-30T15:40:00.123Z, as Timestamp.iso8601 writes it.
            let stamp = Array(parts[0].utf8)
            #expect(
                stamp.count == 24 && stamp[4] == UInt8(ascii: "-") && stamp[10] == UInt8(ascii: "T") && stamp[19] == UInt8(ascii: ".")
                    && stamp[23] == UInt8(ascii: "Z"), "\(line)")
            #expect(parts[1] == "level=info" && parts[2] == "component=http", "\(line)")
            #expect(parts[3...6].joined(separator: " ") == tail, "\(line)")
            let duration = parts[7].split(separator: "=")
            #expect(duration.first == "duration_ms" && duration.last?.split(separator: ".").last?.count == 3, "\(line)")
        }
    }

    @Test func chunkedBodiesExpectContinueAndHTTP10() throws {
        try withServer { server in
            let client = try connect(server)
            try client.sendRaw(
                "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n")
            #expect(try client.readResponse().text == "hello world")
            try client.sendRaw("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
            let interim = client.readAvailable(timeout: .seconds(2))
            #expect(String(decoding: interim, as: UTF8.self).hasPrefix("HTTP/1.1 100 Continue"))
            try client.sendRaw("ok")
            #expect(try client.readResponse().text == "ok")
            let old = try connect(server)
            try old.sendRaw("GET /healthz HTTP/1.0\r\n\r\n")
            let r = try old.readResponse()
            #expect(r.status == 200)
            #expect(r.headers["Connection"] == "close")
            #expect(old.isClosedByPeer(timeout: .seconds(2)))
        }
    }

    @Test func limitsAnswerTheirStatuses() throws {
        try withServer { server in
            let big = try connect(server)
            try big.sendRaw("GET /healthz HTTP/1.1\r\nX-Big: \(String(repeating: "a", count: 17_000))\r\n\r\n")
            #expect(try big.readResponse().status == 431)
            let many = try connect(server)
            var head = "GET /healthz HTTP/1.1\r\n"
            for i in 0..<101 { head += "X-\(i): v\r\n" }
            try many.sendRaw(head + "\r\n")
            #expect(try many.readResponse().status == 431)
            let large = try connect(server)
            #expect(try large.send(method: .post, path: "/small", body: "12345678901").status == 413)
            let fine = try connect(server)
            #expect(try fine.send(method: .post, path: "/small", body: "1234567890").status == 200)
            let gzip = try connect(server)
            try gzip.sendRaw("POST /echo HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n")
            #expect(try gzip.readResponse().status == 501)
            let garbage = try connect(server)
            try garbage.sendRaw("\u{01}\u{02}garbage\r\n\r\n")
            #expect(try garbage.readResponse().status == 400)
            #expect(garbage.isClosedByPeer(timeout: .seconds(2)))
            #expect(try connect(server).send(method: .get, path: "/fail").status == 500)
        }
    }

    @Test func oneThousandConcurrentConnections() throws {
        try withServer { server in
            var clients: [HTTPClientConnection] = []
            for _ in 0..<1000 { clients.append(try connect(server)) }
            for (i, client) in clients.enumerated() { try client.sendRaw("GET /v1/users/u\(i) HTTP/1.1\r\nHost: x\r\n\r\n") }
            var ok = 0
            for (i, client) in clients.enumerated() where try client.readResponse().text.contains("\"u\(i)\"") { ok += 1 }
            #expect(ok == 1000)
            #expect(server.connectionCount == 1000)
        }
    }

    @Test func slowHeaderClientIsCutOffWhileOthersAreServed() throws {
        try withServer(configure: { $0.headerTimeout = .seconds(2) }) { server in
            let slow = try connect(server)
            let request = Array("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\n\r\n".utf8)
            let fast = try connect(server)
            let start = ContinuousClock.now
            var cutOff = false
            for byte in request {
                do { try slow.sendRaw([byte]) } catch {
                    cutOff = true
                    break
                }
                let r = try fast.send(method: .get, path: "/healthz")
                #expect(r.status == 200)
                if slow.isClosedByPeer(timeout: .milliseconds(250)) {
                    cutOff = true
                    break
                }
            }
            #expect(cutOff)
            #expect(ContinuousClock.now - start < .seconds(5))
            #expect(try fast.send(method: .get, path: "/healthz").status == 200)
        }
    }

    @Test func idleKeepAliveConnectionsAreClosed() throws {
        try withServer(configure: { $0.idleTimeout = .seconds(1) }) { server in
            let client = try connect(server)
            #expect(try client.send(method: .get, path: "/healthz").status == 200)
            #expect(client.isClosedByPeer(timeout: .seconds(4)))
        }
    }

    @Test func connectionCapClosesNewConnectionsAtOnce() throws {
        try withServer(configure: { $0.maxConnections = 3 }) { server in
            let held = try (0..<3).map { _ in try connect(server) }
            for c in held { #expect(try c.send(method: .get, path: "/healthz").status == 200) }
            let extra = try connect(server)
            #expect(extra.isClosedByPeer(timeout: .seconds(2)))
        }
    }

    @Test func gracefulShutdownFinishesInFlightRequest() throws {
        var builder = RouterBuilder()
        builder.add(.get, "/slow") { _ in
            // Deliberate: a request still running when the shutdown starts.
            usleep(800_000)
            return .json("{\"slow\":true}")
        }
        var config = HTTPServerConfiguration()
        config.port = 0
        let executor = ThreadPoolExecutor(threads: 2)
        defer { executor.shutdown() }
        let server = try HTTPServer(
            configuration: config, router: builder.build(), executor: executor, logger: Logger(label: "t", level: .off))
        let client = try connect(server)
        let idle = try connect(server)
        try client.sendRaw("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        // Deliberate: the slow request gets in flight before the shutdown starts.
        usleep(100_000)
        let stopped = Atomic<Bool>(false)
        let box = Unmanaged.passRetained(server)
        var tid = pthread_t()
        pthread_create(
            &tid, nil,
            { arg in
                let s = Unmanaged<HTTPServer>.fromOpaque(arg!).takeRetainedValue()
                s.shutdown()
                return nil
            }, box.toOpaque())
        let response = try client.readResponse()
        #expect(response.status == 200)
        #expect(response.headers["Connection"] == "close")
        #expect(idle.isClosedByPeer(timeout: .seconds(3)))
        pthread_join(tid, nil)
        stopped.store(true, ordering: .relaxed)
        #expect(server.connectionCount == 0)
        #expect(throws: (any Error).self) { try connect(server, timeout: .seconds(1)).send(method: .get, path: "/slow") }
    }

    @Test func clientDisconnectingMidResponseLeaksNothing() throws {
        try withServer { server in
            for _ in 0..<5 {
                let client = try connect(server)
                try client.sendRaw("GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
                _ = client.readAvailable(timeout: .milliseconds(200))
                client.close()
            }
            #expect(eventually(every: .milliseconds(100)) { server.connectionCount == 0 })
            #expect(try connect(server).send(method: .get, path: "/healthz").status == 200)
        }
    }

    @Test func streamingResponseWritesFromAnotherThread() throws {
        let closed = Atomic<Int>(0)
        try withServer(routes: { builder in
            builder.add(.get, "/stream") { _ in
                Response(status: 200, headers: ["Content-Type": "text/event-stream"]) { stream in
                    stream.onClose { closed.add(1, ordering: .relaxed) }
                    let box = Unmanaged.passRetained(stream)
                    var tid = pthread_t()
                    pthread_create(
                        &tid, nil,
                        { arg in
                            let s = Unmanaged<ResponseStream>.fromOpaque(arg!).takeRetainedValue()
                            for i in 0..<3 {
                                s.write(Array("data: \(i)\n\n".utf8))
                                // Deliberate: the events go out as separate writes from this thread.
                                usleep(20_000)
                            }
                            return nil
                        }, box.toOpaque())
                    pthread_detach(tid)
                }
            }
        }) { server in
            let client = try connect(server)
            let stream = try client.openStream(path: "/stream")
            for i in 0..<3 {
                let event = try #require(try stream.nextEvent(timeout: .seconds(5)))
                #expect(event.data == "\(i)")
            }
            stream.close()
            eventually(timeout: .milliseconds(2_500), every: .milliseconds(50)) { closed.load(ordering: .relaxed) != 0 }
            #expect(closed.load(ordering: .relaxed) == 1)
        }
    }

    // MARK: - Issue 16: canonical paths, Host, stalled bodies, bodies over the limit

    /// One spelling of a path reaches a route (Router.match): percent-encoded unreserved characters are the
    /// characters, an empty segment or a trailing slash is no route, `%2F` stays inside a parameter.
    @Test func onlyTheCanonicalFormOfAPathReachesARoute() throws {
        try withServer { server in
            let client = try connect(server)
            #expect(try client.send(method: .get, path: "/v1/users/u1").status == 200)
            #expect(try client.send(method: .get, path: "/%76%31/users/u1").text.contains("\"user_id\":\"u1\""))
            #expect(try client.send(method: .get, path: "/v1/%75sers/%75%31").text.contains("\"user_id\":\"u1\""))
            #expect(try client.send(method: .get, path: "/v1/users/a%2Fb").text.contains("\"user_id\":\"a/b\""))
            for path in [
                "//v1/users/u1", "/v1//users/u1", "/v1/users//u1", "/v1/users/u1/", "/healthz/", "//healthz", "/v1%2Fusers/u1", "/",
            ] {
                let r = try client.send(method: .get, path: path)
                #expect(r.status == 404, "\(path): \(r.status) \(r.text)")
            }
            #expect(try client.send(method: .get, path: "/healthz").status == 200)
        }
    }

    /// RFC 9112, section 3.2: an HTTP/1.1 request needs exactly one valid `Host`; the answer is 400 and the connection
    /// closes.
    @Test func anHTTP11RequestWithoutOneValidHostIs400() throws {
        try withServer { server in
            for head in [
                "GET /healthz HTTP/1.1\r\n\r\n", "GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
                "GET /healthz HTTP/1.1\r\nHost: a/b\r\n\r\n", "OPTIONS /healthz HTTP/1.1\r\n\r\n",
                "POST /echo HTTP/1.1\r\nContent-Length: 2\r\n\r\nok", "GET /healthz HTTP/1.1\r\nHost: a\"b\r\n\r\n",
                "GET /healthz HTTP/1.1\r\nHost: a<b\r\n\r\n", "GET /healthz HTTP/1.1\r\nHost: a^b\r\n\r\n",
                "GET /healthz HTTP/1.1\r\nHost: a{b}\r\n\r\n", "GET /healthz HTTP/1.1\r\nHost: a b\r\n\r\n",
                "GET /healthz HTTP/1.1\r\nHost: a?b\r\n\r\n", "GET /healthz HTTP/1.1\r\nHost: h\u{E9}\r\n\r\n",
            ] {
                let client = try connect(server)
                try client.sendRaw(head)
                let r = try client.readResponse()
                #expect(r.status == 400, "\(head.debugDescription): \(r.status)")
                #expect(r.headers["Connection"] == "close", "\(head.debugDescription)")
                #expect(client.isClosedByPeer(timeout: .seconds(2)), "\(head.debugDescription)")
            }
            for head in [
                "GET /healthz HTTP/1.0\r\n\r\n", "GET /healthz HTTP/1.1\r\nHost:\r\n\r\n", "GET /healthz HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
                // Every byte a Host value may hold: unreserved, %, sub-delims, : [ ].
                "GET /healthz HTTP/1.1\r\nHost: AZaz09-._~%41!$&'()*+,;=:[]\r\n\r\n",
            ] {
                let client = try connect(server)
                try client.sendRaw(head)
                #expect(try client.readResponse().status == 200, "\(head.debugDescription)")
            }
        }
    }

    /// A body that stops arriving is answered 408 before the connection closes (no response had started).
    @Test func aStalledBodyIsAnswered408() throws {
        try withServer(configure: { $0.bodyTimeout = .seconds(1) }) { server in
            let client = try connect(server)
            try client.sendRaw("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
            let started = ContinuousClock.now
            let r = try client.readResponse()
            #expect(r.status == 408, "\(r.status) \(r.text)")
            #expect(r.headers["Connection"] == "close")
            #expect(ContinuousClock.now - started < .seconds(5))
            #expect(client.isClosedByPeer(timeout: .seconds(3)))
        }
    }

    /// A body over the route's limit is never buffered: the request is answered from its head, the rest of the body
    /// is read and dropped after the answer (so the client can send it all and read the answer), then the connection
    /// closes. A route that answers oversized bodies itself gets the request flagged, with no body.
    @Test func aBodyOverTheLimitIsAnsweredWithoutBeingRead() throws {
        try withServer(
            configure: { $0.lingerTimeout = .seconds(1) },
            routes: { builder in
                builder.add(.post, "/own", options: RouteOptions(maxBodyBytes: 10, answersOversizedBody: true)) { request in
                    .json("{\"over\":\(request.bodyOverLimit),\"bytes\":\(request.body.count)}", status: request.bodyOverLimit ? 401 : 200)
                }
            }
        ) { server in
            let big = [UInt8](repeating: 0x61, count: 4 << 20)
            let plain = try connect(server)
            let r = try plain.send(method: .post, path: "/small", body: big)
            #expect(r.status == 413)
            #expect(r.headers["Connection"] == "close")
            #expect(plain.isClosedByPeer(timeout: .seconds(3)))

            let own = try connect(server)
            let answered = try own.send(method: .post, path: "/own", body: big)
            #expect(answered.status == 401)
            #expect(answered.text == "{\"over\":true,\"bytes\":0}")
            #expect(answered.headers["Connection"] == "close")
            #expect(try connect(server).send(method: .post, path: "/own", body: "0123456789").text == "{\"over\":false,\"bytes\":10}")

            // Chunked: the limit is found mid-body; the same answer.
            let chunked = try connect(server)
            try chunked.sendRaw("POST /own HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n01234567\r\n8\r\n01234567\r\n")
            #expect(try chunked.readResponse().text == "{\"over\":true,\"bytes\":0}")
            #expect(chunked.isClosedByPeer(timeout: .seconds(4)), "a client that sends no more is closed after lingerTimeout")
        }
    }
}

/// Holds `later` answers until the test releases them, then gives them from its own thread (as the message writer
/// answers a batch of sends).
private final class LaterAnswerer: Sendable {
    private let pending = Mutex<[@Sendable () -> Void]>([])

    func add(_ answer: @escaping @Sendable () -> Void) { pending.withLock { $0.append(answer) } }

    /// Waits (up to 10 s) until `count` answers are held, then runs them all on a new thread.
    func release(expecting count: Int) {
        eventually(timeout: .seconds(10), every: .milliseconds(1)) { pending.withLock { $0.count } >= count }
        let answers = pending.withLock { held -> [@Sendable () -> Void] in
            defer { held.removeAll() }
            return held
        }
        DispatchQueue.global().async { for answer in answers { answer() } }
    }
}
