import Dispatch
import ParleySync

/// Sends requests to an `HTTPServer` of this process without a socket (`HTTPServer.respond(toRequest:done:)`).
///
/// The request bytes are those `HTTPClientConnection` writes and the response is read as it reads one, so a test
/// sees the same `HTTPClientResponse`. For tests of what lies behind the HTTP layer; tests of HTTP itself (keep-alive,
/// pipelining, framing, timeouts, streams) use a real connection. Immutable, so any thread may use it.
public struct HTTPInProcessClient: Sendable {
    public let server: HTTPServer
    /// Limit for one exchange.
    public var timeout: Duration

    public init(server: HTTPServer, timeout: Duration = .seconds(10)) {
        self.server = server
        self.timeout = timeout
    }

    /// Sends one request and waits for its response. Adds `Host` and `Content-Length` as `HTTPClientConnection`
    /// does.
    public func send(method: HTTPMethod, path: String, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8]? = nil) throws
        -> HTTPClientResponse
    {
        let request = try HTTPClientConnection.encodeRequest(
            method: method, path: path, headers: headers, body: body, host: "127.0.0.1", port: server.port)
        let answer = LockedValue<[UInt8]?>(nil)
        let answered = DispatchSemaphore(value: 0)
        server.respond(toRequest: request) { bytes in
            answer.withLock { $0 = bytes }
            answered.signal()
        }
        guard answered.wait(timeout: .now() + timeout / .seconds(1)) == .success, let bytes = answer.withLock({ $0 }) else {
            throw HTTPClientError(.timeout, "no response within \(timeout)")
        }
        return try Self.read(bytes[...], method: method)
    }

    /// Reads a whole response from the bytes the server wrote.
    static func read(_ bytes: ArraySlice<UInt8>, method: HTTPMethod) throws -> HTTPClientResponse {
        guard let (head, length) = try HTTPClientResponseHead.parse(bytes, limit: bytes.count) else {
            throw HTTPClientError(.malformedResponse, "incomplete response head")
        }
        var decoder = try HTTPClientBodyDecoder(framing: head.framing(for: method), maxBodyBytes: Int.max)
        var body: [UInt8] = []
        _ = try decoder.decode(bytes[(bytes.startIndex + length)...], into: &body)
        if !decoder.isDone { try decoder.finishAtEndOfStream() }
        return HTTPClientResponse(
            status: head.status, reason: head.reason, version: head.version, headers: head.headers, trailers: decoder.trailers,
            body: body)
    }
}
