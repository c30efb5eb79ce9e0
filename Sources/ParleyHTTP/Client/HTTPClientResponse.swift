/// A complete HTTP response as read by `HTTPClientConnection`: status, headers and the whole body.
public struct HTTPClientResponse: Sendable {
    /// The status code (final status: interim `1xx` responses are skipped, except `101`).
    public var status: Int
    /// The reason phrase of the status line, verbatim (may be empty).
    public var reason: String
    /// The HTTP version of the status line.
    public var version: HTTPVersion
    /// The header fields in arrival order.
    public var headers: HTTPHeaders
    /// Trailer fields of a chunked body (empty otherwise).
    public var trailers: HTTPHeaders
    /// The decoded body (chunked framing removed), empty for `HEAD`, `204` and `304`.
    public var body: [UInt8]
    /// True when the body was cut at the client's limit (only `OutboundHTTP` asks for that; otherwise a longer body
    /// is a `.tooLarge` error).
    public var truncated: Bool

    public init(
        status: Int, reason: String = "", version: HTTPVersion = .http1_1, headers: HTTPHeaders = HTTPHeaders(),
        trailers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = [], truncated: Bool = false
    ) {
        self.status = status
        self.reason = reason
        self.version = version
        self.headers = headers
        self.trailers = trailers
        self.body = body
        self.truncated = truncated
    }

    /// The body decoded as UTF-8 (invalid sequences become U+FFFD).
    public var text: String { String(decoding: body, as: UTF8.self) }
}
