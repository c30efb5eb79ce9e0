/// One-shot HTTP requests by URL: blocking, or async on a dedicated thread.
///
/// Each call opens its own connection and closes it afterwards; keep an `HTTPClientConnection` to reuse one.
public struct HTTPClient: Sendable {
    public init() {}

    /// Sends one request to `url` (`http[s]://host:port/path?query`) and returns the whole response.
    ///
    /// `timeout` bounds the connect and the exchange separately. `https` verifies the server against the system
    /// trust store; no address is refused (for webhooks to customers' URLs use `OutboundHTTP`).
    public static func request(
        _ method: HTTPMethod, url: String, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8]? = nil,
        timeout: Duration = .seconds(10)
    ) throws -> HTTPClientResponse {
        let target = try HTTPClientURL(url)
        let connection = try HTTPClientConnection(
            endpoint: HTTPClientEndpoint(target), connectTimeout: timeout, timeout: timeout)
        defer { connection.close() }
        return try connection.send(method: method, path: target.target, headers: headers, body: body)
    }

    /// Like `request`, without blocking the caller: the blocking work runs on a dedicated thread.
    ///
    /// Swift's cooperative pool (as many threads as cores) never waits on the socket. Cancelling the task does
    /// not interrupt the request; `timeout` bounds it.
    public static func requestAsync(
        _ method: HTTPMethod, url: String, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8]? = nil,
        timeout: Duration = .seconds(10)
    ) async throws -> HTTPClientResponse {
        try await withCheckedThrowingContinuation {
            (continuation: CheckedContinuation<HTTPClientResponse, any Error>) in
            let started = HTTPClientWorkerThread.start {
                // The thread runs this closure once, so the continuation is resumed exactly once.
                do {
                    continuation.resume(
                        returning: try request(method, url: url, headers: headers, body: body, timeout: timeout))
                } catch {
                    continuation.resume(throwing: error)
                }
            }
            if !started {
                continuation.resume(throwing: HTTPClientError(.connectFailed, "cannot start a client thread"))
            }
        }
    }

    /// Opens `url` as a stream of lines or Server-Sent Events (see `HTTPClientConnection.openStream`).
    public static func openStream(url: String, headers: HTTPHeaders = HTTPHeaders(), timeout: Duration = .seconds(10))
        throws -> HTTPClientStream
    {
        let target = try HTTPClientURL(url)
        let connection = try HTTPClientConnection(
            endpoint: HTTPClientEndpoint(target), connectTimeout: timeout, timeout: timeout)
        return try connection.openStream(path: target.target, headers: headers)
    }
}
