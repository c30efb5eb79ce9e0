import Dispatch
import ParleyHTTP
import Synchronization
import Testing

/// `HTTPServer.respond(toRequest:done:)` through `HTTPInProcessClient`: the answers a socket gets, without one.
@Suite struct InProcessTests {
    /// Counts the streams the `/stream` route opened and saw closed.
    private static let streamsClosed = Atomic<Int>(0)

    private func withServer<T>(_ body: (HTTPServer) throws -> T) throws -> T {
        var builder = RouterBuilder()
        builder.add(.get, "/healthz", options: RouteOptions(runsOnEventLoop: true)) { _ in .json("{\"status\":\"ok\"}") }
        builder.add(.get, "/v1/users/{user_id}") { request in
            .json("{\"user_id\":\"\(request.pathParameters["user_id"] ?? "")\",\"q\":\"\(request.queryValue("q") ?? "")\"}")
        }
        builder.add(.post, "/echo") { request in Response(status: 200, body: request.body) }
        builder.add(.post, "/small", options: RouteOptions(maxBodyBytes: 10)) { request in Response(status: 200, body: request.body) }
        builder.add(.get, "/fail") { _ in throw CancellationError() }
        builder.add(.get, "/later") { request in
            .later { respond in
                DispatchQueue.global().asyncAfter(deadline: .now() + 0.05) {
                    respond(.json("{\"later\":\"\(request.requestID)\"}", status: 201))
                }
            }
        }
        builder.add(.get, "/close") { _ in Response(status: 200, headers: ["Connection": "close"], body: Array("bye".utf8)) }
        builder.add(.get, "/stream") { _ in
            Response(status: 200, headers: ["Content-Type": "text/event-stream"]) { stream in
                stream.onClose { Self.streamsClosed.add(1, ordering: .relaxed) }
                stream.write(Array("data: 1\n\n".utf8))
            }
        }
        var config = HTTPServerConfiguration()
        config.port = 0
        config.loopCount = 1
        let executor = ThreadPoolExecutor(threads: 2)
        let server = try HTTPServer(
            configuration: config, router: builder.build(), executor: executor, logger: Logger(label: "test", level: .off))
        defer {
            server.shutdown()
            executor.shutdown()
        }
        return try body(server)
    }

    /// The same request over a socket and in process gives the same status, fields (but the per-second `Date`) and
    /// body. Both carry one `X-Request-Id`, which error bodies repeat.
    @Test(
        arguments: [
            (HTTPMethod.get, "/healthz", nil), (.head, "/healthz", nil), (.get, "/v1/users/a%2Fb?q=x%20y+z", nil),
            (.get, "/v1/users/%zz", nil), (.get, "/v1/users/u1?q=%zz", nil), (.get, "/nope", nil), (.delete, "/healthz", nil),
            (.options, "/anything", nil), (.post, "/echo", "hello"), (.post, "/small", "1234567890"), (.post, "/small", "12345678901"),
            (.get, "/fail", nil), (.get, "/close", nil),
        ] as [(HTTPMethod, String, String?)])
    func answersAsASocketDoes(method: HTTPMethod, path: String, body: String?) throws {
        try withServer { server in
            let id: HTTPHeaders = ["X-Request-Id": "same-id"]
            let socket = try HTTPClientConnection(host: "127.0.0.1", port: server.port).send(
                method: method, path: path, headers: id, body: body.map { Array($0.utf8) })
            let local = try HTTPInProcessClient(server: server).send(
                method: method, path: path, headers: id, body: body.map { Array($0.utf8) })
            #expect(local.status == socket.status)
            #expect(local.body == socket.body)
            func fields(_ headers: HTTPHeaders) -> [String] {
                headers.fields.filter { $0.name != "Date" }.map { "\($0.name): \($0.value)" }
            }
            #expect(fields(local.headers) == fields(socket.headers))
            #expect(local.headers["Date"] != nil)
            #expect(local.headers["X-Request-Id"] == "same-id")
        }
    }

    @Test func requestIDsAreEchoedOrGeneratedAndDeferredResponsesAwaited() throws {
        try withServer { server in
            let client = HTTPInProcessClient(server: server)
            let given = try client.send(method: .get, path: "/later", headers: ["X-Request-Id": "abc-123"])
            #expect(given.status == 201)
            #expect(given.text == "{\"later\":\"abc-123\"}")
            #expect(given.headers["X-Request-Id"] == "abc-123")
            let a = try client.send(method: .get, path: "/healthz").headers["X-Request-Id"]
            let b = try client.send(method: .get, path: "/healthz").headers["X-Request-Id"]
            #expect(a != nil && a != b)
        }
    }

    @Test func streamingResponsesNeedASocket() throws {
        try withServer { server in
            let before = Self.streamsClosed.load(ordering: .relaxed)
            let r = try HTTPInProcessClient(server: server).send(method: .get, path: "/stream")
            #expect(r.status == 501)
            #expect(Self.streamsClosed.load(ordering: .relaxed) == before + 1)
        }
    }
}
