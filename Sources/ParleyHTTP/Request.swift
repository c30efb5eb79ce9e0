/// A complete request as a handler sees it: head, body, matched route and decoded parameters.
public struct Request: Sendable {
    public var head: HTTPRequestHead
    public var body: [UInt8]
    /// The matched route's template (`/v1/users/{user_id}`), for logs and metrics.
    public var routeTemplate: String
    /// Percent-decoded path parameters by name.
    public var pathParameters: [String: String]
    /// Percent-decoded query parameters in order (a name may repeat).
    public var query: [(String, String)]
    /// The caller's `X-Request-Id` or one the server generated.
    public var requestID: String
    /// When the server finished reading the request (monotonic ms), for latency accounting.
    public var receivedAtMillis: Int64
    /// The body was over the route's `maxBodyBytes`: it was not read, `body` is empty, and the connection closes
    /// after the answer. Only routes with `RouteOptions.answersOversizedBody` see such a request.
    public var bodyOverLimit = false
    /// The body as it arrives, for routes with `RouteOptions.streamsBody` (`body` is then empty); nil otherwise.
    public var bodyStream: RequestBodyStream?

    public init(
        head: HTTPRequestHead, body: [UInt8] = [], routeTemplate: String = "", pathParameters: [String: String] = [:],
        query: [(String, String)] = [], requestID: String = "", receivedAtMillis: Int64 = 0
    ) {
        self.head = head
        self.body = body
        self.routeTemplate = routeTemplate
        self.pathParameters = pathParameters
        self.query = query
        self.requestID = requestID
        self.receivedAtMillis = receivedAtMillis
    }

    public var method: HTTPMethod { head.method }
    public var headers: HTTPHeaders { head.headers }

    /// The first value of query parameter `name`.
    public func queryValue(_ name: String) -> String? {
        for (n, v) in query where n == name { return v }
        return nil
    }
}

/// A response: status, headers and a body that is either bytes or a stream written later.
public struct Response: Sendable {
    public enum Body: Sendable {
        case bytes([UInt8])
        /// The server writes the head (chunked framing), then calls `start` on the event loop with a stream the
        /// owner may write to from any thread until it closes it.
        case stream(@Sendable (ResponseStream) -> Void)
        /// Not known yet: the server calls `start` once (on the handler's thread) with a callback that any thread
        /// calls exactly once with the response to send (which may itself be `later`). Handlers use it to wait for
        /// work done elsewhere (a group commit) without holding their worker thread; the status and headers of the
        /// `later` response itself are not used.
        case later(@Sendable (_ respond: @escaping @Sendable (Response) -> Void) -> Void)
    }

    public var status: Int
    public var headers: HTTPHeaders
    public var body: Body
    /// Extra `key=value` text for the request's log line (e.g. `app=a1`); never sent to the client.
    public var logContext: String?

    public init(status: Int, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = .bytes(body)
    }

    public init(status: Int, headers: HTTPHeaders = HTTPHeaders(), stream: @escaping @Sendable (ResponseStream) -> Void) {
        self.status = status
        self.headers = headers
        self.body = .stream(stream)
    }

    /// A JSON response from already-serialized bytes.
    public static func json(_ bytes: [UInt8], status: Int = 200) -> Response {
        Response(status: status, headers: ["Content-Type": "application/json; charset=utf-8"], body: bytes)
    }

    /// A JSON response from a literal string (constant bodies).
    public static func json(_ text: String, status: Int = 200) -> Response {
        json(Array(text.utf8), status: status)
    }

    /// A response that comes later: `start` gets the callback to call with it (see `Body.later`).
    public static func later(_ start: @escaping @Sendable (_ respond: @escaping @Sendable (Response) -> Void) -> Void) -> Response {
        var response = Response(status: 0)
        response.body = .later(start)
        return response
    }

    /// Calls `done` with this response once it is known: at once, or when a `later` body has produced it.
    public func settle(_ done: @escaping @Sendable (Response) -> Void) {
        guard case .later(let start) = body else { return done(self) }
        start { next in next.settle(done) }
    }

    /// This response with `transform` applied once it is known (at once, unless the body is `later`).
    public func whenSettled(_ transform: @escaping @Sendable (Response) -> Response) -> Response {
        guard case .later = body else { return transform(self) }
        return .later { respond in self.settle { respond(transform($0)) } }
    }

    public var bodyBytes: [UInt8]? {
        if case .bytes(let b) = body { return b }
        return nil
    }
}

/// Runs request handlers off the event loop, on a bounded set of worker threads.
public protocol RequestExecutor: Sendable {
    /// Runs `work` on a worker thread. When it cannot start in time (all workers busy past the executor's
    /// bound, or too many jobs queued), `rejected` runs instead, so the request is answered 503.
    func execute(_ work: @escaping @Sendable () -> Void, rejected: @escaping @Sendable () -> Void)
}
