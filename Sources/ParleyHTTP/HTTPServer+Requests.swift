import CParleyShims
import Glibc
import Synchronization

/// A request between its head and its response: what the server decided when the head arrived.
///
/// A class: it travels from the head to the log line through several hands, and a reference is one retain where
/// the fields (head, route, id, problem) are a dozen. Immutable, so any thread may hold it.
final class PendingRequest: Sendable {
    let head: HTTPRequestHead
    let match: Router.Match
    let requestID: String
    let startedNanos: UInt64
    /// The largest body accepted (the route's `maxBodyBytes`, else the server default).
    let bodyLimit: Int
    /// A head the parser accepted but HTTP does not (``HTTPServer/headProblem(_:)``): answered with this problem
    /// without routing, and the connection closes after it.
    let problem: ServerProblem?

    init(head: HTTPRequestHead, match: Router.Match, requestID: String, startedNanos: UInt64, bodyLimit: Int, problem: ServerProblem? = nil) {
        self.head = head
        self.match = match
        self.requestID = requestID
        self.startedNanos = startedNanos
        self.bodyLimit = bodyLimit
        self.problem = problem
    }

    /// Whether the connection may carry another request after this one.
    var keepsConnection: Bool { head.keepAlive && problem == nil }

    /// The matched route, if any.
    var route: Route? {
        if case .found(let route, _) = match { return route }
        return nil
    }
}

/// Where a handler's settled response goes.
enum ResponseTarget: Sendable {
    /// To the connection `ConnectionID` on its loop, queued there as a plain value (no closure per answer).
    case connection(ConnectionID, EventLoop)
    /// To a callback, on whichever thread settles the response (the in-process path).
    case callback(@Sendable (Response) -> Void)

    func callAsFunction(_ response: Response) {
        switch self {
        case .connection(let id, let loop): loop.deliver(response, to: id)
        case .callback(let done): done(response)
        }
    }
}

/// The steps of a request from its parsed head to its logged response, shared by the two ways a request arrives:
/// a socket (`HTTPConnection`) and a test in the same process (`respond(toRequest:done:)`). One code path, so an
/// in-process test sees the routing, limits, request ids, handler threads, deferred responses, response head and
/// log line the socket path has.
extension HTTPServer {
    /// What happens to a request whose body is complete.
    enum Disposition {
        /// Answered without a handler: a preflight, a malformed query, an unknown route or method.
        case answer(Response)
        /// The route's handler runs on `request`.
        case handle(Route, Request)
    }

    /// Starts a request whose head is parsed: its id (the caller's `X-Request-Id` when acceptable, else
    /// `generateID()`), its route (preflights and malformed heads are answered without routing) and its body limit.
    func begin(_ head: HTTPRequestHead, generateID: () -> String) -> PendingRequest {
        let requestID: String
        if let given = head.headers["X-Request-Id"], Self.isAcceptableRequestID(given) {
            requestID = given
        } else {
            requestID = generateID()
        }
        let problem = Self.headProblem(head)
        let match: Router.Match
        if problem != nil {
            match = .notFound  // a head HTTP does not allow: answered without routing
        } else if head.method == .options {
            // A route of its own for OPTIONS (tus discovery, docs/files.md#resumable-uploads-tus) answers it; any other
            // OPTIONS is a preflight, answered without routing.
            let own = router.match(method: .options, path: head.rawPath)
            if case .found = own { match = own } else { match = .notFound }
        } else {
            match = router.match(method: head.method, path: head.rawPath)
        }
        var bodyLimit = configuration.limits.maxBodyBytes
        if case .found(let route, _) = match, let limit = route.options.maxBodyBytes { bodyLimit = limit }
        return PendingRequest(
            head: head, match: match, requestID: requestID, startedNanos: Self.monotonicNanos(), bodyLimit: bodyLimit,
            problem: problem)
    }

    /// What makes a head the parser accepted a malformed request (400 `7000019` in Parley): `Host` is required in
    /// HTTP/1.1, at most one is allowed, and its value is `host[:port]` (RFC 9112, section 3.2). Nil for a good head.
    ///
    /// Here rather than in the parser, which delimits messages and stays usable for heads without `Host`; both ways
    /// a request arrives (socket and in process) start with ``begin(_:generateID:)``.
    static func headProblem(_ head: HTTPRequestHead) -> ServerProblem? {
        var count = 0
        var value = ""
        for field in head.headers.fields where field.name.utf8.count == 4 && field.name.equalsASCIICaseInsensitive("Host") {
            count += 1
            value = field.value
        }
        if count > 1 { return .badRequest("more than one Host header") }
        if count == 0 { return head.version == .http1_1 ? .badRequest("missing Host header") : nil }
        // reg-name, IPv4 or an IP literal in brackets, and an optional port (an empty value is allowed: RFC 9112,
        // section 3.2).
        let valid = value.utf8.withContiguousStorageIfAvailable { $0.allSatisfy(Self.isHostByte) } ?? value.utf8.allSatisfy(Self.isHostByte)
        if !valid { return .badRequest("invalid Host header") }
        return nil
    }

    /// Whether `c` may appear in a `Host` value: unreserved characters, `%`, the sub-delims of RFC 3986 and
    /// `: [ ]`. A bit set (as in the parser's `isTokenChar`): this runs on every request.
    @inline(__always)
    static func isHostByte(_ c: UInt8) -> Bool {
        // Bits below 64: ! $ % & ' ( ) * + , - . 0-9 : ; =; from 64: A-Z [ ] _ a-z ~.
        let low: UInt64 = 0x2FFF_7FF2_0000_0000
        let high: UInt64 = 0x47FF_FFFE_AFFF_FFFE
        if c < 64 { return (low >> UInt64(c)) & 1 != 0 }
        if c < 128 { return (high >> UInt64(c &- 64)) & 1 != 0 }
        return false
    }

    /// The request a parse failure, a slow head or a stalled body answers: the one in progress, else a stand-in
    /// (`GET /`).
    func failedRequest(_ pending: PendingRequest?, generateID: () -> String) -> PendingRequest {
        PendingRequest(
            head: pending?.head ?? HTTPRequestHead(method: .get, target: "/"), match: .notFound,
            requestID: pending?.requestID ?? generateID(), startedNanos: Self.monotonicNanos(),
            bodyLimit: configuration.limits.maxBodyBytes)
    }

    /// Builds the handler's `Request` (query decoded) or the answer given without a handler.
    ///
    /// `bodyOverLimit`: the body was over `pending.bodyLimit` and was not read (`body` is empty). A route with
    /// `RouteOptions.answersOversizedBody` gets the request anyway, flagged, to answer 413 in the order of its own
    /// checks; any other is answered 413 here.
    ///
    /// `bodyStream`: the body still arriving, for a route with `RouteOptions.streamsBody` (the socket path); such a
    /// route given a whole `body` (the in-process path) reads it through a complete stream.
    func dispatch(
        _ pending: PendingRequest, body: [UInt8], bodyOverLimit: Bool = false, bodyStream: RequestBodyStream? = nil,
        receivedAtMillis: Int64
    ) -> Disposition {
        if let problem = pending.problem { return .answer(hooks.problem(problem, pending.requestID)) }
        if pending.head.method == .options, pending.route == nil { return .answer(Response(status: 204, headers: HTTPHeaders())) }
        guard case .found(let route, let parameters) = pending.match else {
            return .answer(hooks.problem(Self.problem(for: pending.match), pending.requestID))
        }
        if bodyOverLimit && !route.options.answersOversizedBody {
            return .answer(hooks.problem(.payloadTooLarge, pending.requestID))
        }
        var query: [(String, String)] = []
        if let raw = pending.head.rawQuery {
            guard let parsed = PercentDecoding.parseQuery(raw) else {
                return .answer(hooks.problem(.badRequest("malformed query string"), pending.requestID))
            }
            query = parsed
        }
        var request = Request(
            head: pending.head, body: body, routeTemplate: route.template, pathParameters: parameters, query: query,
            requestID: pending.requestID, receivedAtMillis: receivedAtMillis)
        request.bodyOverLimit = bodyOverLimit
        if route.options.streamsBody && !bodyOverLimit {
            request.bodyStream = bodyStream ?? RequestBodyStream(complete: body)
            request.body = []
        }
        return .handle(route, request)
    }

    /// Runs an event-loop route's handler on the calling thread. It must answer at once: it cannot wait on the
    /// thread that runs it, so a deferred answer becomes a 500.
    func runInline(_ route: Route, _ request: Request) -> Response {
        var response = Self.run(route.handler, request, hooks: hooks)
        if case .later = response.body { response = hooks.problem(.internalError, request.requestID) }
        return response
    }

    /// Runs a route's handler on its executor (the route's own, else the server's); `deliver` gets its settled response
    /// (a 503 when the executor turns the job away) on whichever thread settles it. The request counts as in flight
    /// until then (shutdown waits).
    func execute(_ route: Route, _ request: Request, deliver: ResponseTarget) {
        _ = inFlightRequests.add(1, ordering: .relaxed)
        // One object carries the job; closures that capture only it need no context of their own.
        let job = HandlerJob(server: self, route: route, request: request, target: deliver)
        (route.options.executor ?? executor).execute({ job.run() }, rejected: { job.reject() })
    }

    /// A handler's run on an executor: what it needs, and where its settled response goes.
    ///
    /// Immutable; run once on the executor's thread, or rejected.
    private final class HandlerJob: Sendable {
        let server: HTTPServer
        let route: Route
        let request: Request
        let target: ResponseTarget

        init(server: HTTPServer, route: Route, request: Request, target: ResponseTarget) {
            self.server = server
            self.route = route
            self.request = request
            self.target = target
        }

        func run() {
            let response = HTTPServer.run(route.handler, request, hooks: server.hooks)
            if case .later = response.body {
                response.settle { [self] settled in finish(settled) }
            } else {
                finish(response)
            }
        }

        func reject() { finish(server.hooks.problem(.unavailable, request.requestID)) }

        private func finish(_ response: Response) {
            server.inFlightRequests.subtract(1, ordering: .relaxed)
            target(response)
        }
    }

    fileprivate static func run(_ handler: HTTPHandler, _ request: Request, hooks: HTTPServerHooks) -> Response {
        do {
            return try handler(request)
        } catch {
            return hooks.handlerError(error, request)
        }
    }

    /// The problem that answers `pending` without its handler: its malformed head, else its unknown route or method.
    static func problem(for pending: PendingRequest) -> ServerProblem { pending.problem ?? problem(for: pending.match) }

    static func problem(for match: Router.Match) -> ServerProblem {
        switch match {
        case .methodNotAllowed(let allow): .methodNotAllowed(allow)
        case .badPath: .badRequest("malformed percent-encoding in path")
        default: .notFound
        }
    }

    static func problem(for error: HTTPParseError) -> ServerProblem {
        switch error.kind {
        case .badRequest: .badRequest(error.detail)
        case .headersTooLarge: .headersTooLarge
        case .payloadTooLarge: .payloadTooLarge
        case .notImplemented: .notImplemented(error.detail)
        case .versionNotSupported: .versionNotSupported
        }
    }

    // MARK: - The response

    /// Appends the response as it goes on the wire: status line, `Date`, CORS, `X-Request-Id`, the handler's
    /// fields, framing and `Connection`, then (bytes bodies, not for HEAD) the body. A handler's
    /// `Connection: close` field is not copied: it sets `closeAfterResponse`, as a stream does.
    func writeResponse(
        _ response: Response, for pending: PendingRequest, dateHeader: [UInt8], closeAfterResponse: inout Bool,
        into output: inout [UInt8]
    ) {
        var dropConnectionField = false
        if let connection = response.headers["Connection"], connection.equalsASCIICaseInsensitive("close") {
            closeAfterResponse = true
            dropConnectionField = true
        }
        let isHead = pending.head.method == .head
        let isPreflight = pending.head.method == .options && configuration.cors
        let statusLine = HTTPStatus.statusLine(response.status)
        // The head in one bounded write (see `write(atMost:)`): its size is known before it is written.
        var limit =
            statusLine.count + dateHeader.count + corsHeaders.count + Self.requestIDName.count + pending.requestID.utf8.count
            + Self.crlf.count + Self.framingLimit
        if isPreflight { limit += preflightHeaders.count }
        for field in response.headers.fields { limit += field.name.utf8.count + field.value.utf8.count + 4 }
        let framing: Framing
        switch response.body {
        case .bytes(let body):
            if closeAfterResponse {
                framing = .length(body.count, Self.connectionClose)
            } else if pending.head.version == .http1_0 {
                framing = .length(body.count, Self.connectionKeepAlive)
            } else {
                framing = .length(body.count, [])
            }
        case .later:
            preconditionFailure("a deferred response reached writeResponse() unsettled")
        case .stream:
            // A stream of known length (the handler's `Content-Length`) goes out as it is and keeps the connection as a
            // bytes body does; any other is chunked on HTTP/1.1 and delimited by the close on 1.0, and ends the
            // connection.
            if response.headers["Content-Length"] != nil {
                framing = .stream(
                    closeAfterResponse ? Self.connectionClose : pending.head.version == .http1_0 ? Self.connectionKeepAlive : [])
            } else {
                framing = .stream(pending.head.version == .http1_1 ? Self.chunked : Self.connectionClose)
                closeAfterResponse = true
            }
        }
        let status = response.status
        output.write(atMost: limit) { out in
            out.bytes(statusLine)
            out.bytes(dateHeader)
            out.bytes(corsHeaders)
            if isPreflight { out.bytes(preflightHeaders) }
            out.bytes(Self.requestIDName)
            out.utf8(pending.requestID)
            out.bytes(Self.crlf)
            for field in response.headers.fields {
                if dropConnectionField && field.name.equalsASCIICaseInsensitive("Connection") { continue }
                out.utf8(field.name)
                out.byte(0x3A)
                out.byte(0x20)
                out.utf8(field.value)
                out.bytes(Self.crlf)
            }
            switch framing {
            case .length(let length, let connection):
                if status != 204 && status != 304 {
                    out.bytes(Self.contentLengthName)
                    out.decimal(length)
                    out.bytes(Self.crlf)
                }
                out.bytes(connection)
            case .stream(let line):
                out.bytes(line)
            }
            out.bytes(Self.crlf)
        }
        if case .bytes(let body) = response.body, !isHead, !body.isEmpty { output.append(contentsOf: body) }
    }

    /// How a response's body is delimited, with the `Connection`/`Transfer-Encoding` line that goes with it.
    private enum Framing {
        case length(Int, [UInt8])
        case stream([UInt8])
    }

    /// Reports a response once it is written: the `requestCompleted` hook and the request's log line.
    func completed(_ pending: PendingRequest, response: Response) {
        let elapsed = Double(Self.monotonicNanos() &- pending.startedNanos) / 1e9
        let route = pending.route
        let record = RequestRecord(
            method: pending.head.method, route: route?.template ?? "-", routeIndex: route?.index, status: response.status,
            durationSeconds: elapsed, requestID: pending.requestID)
        hooks.requestCompleted(record)
        guard logger.level <= .info else { return }
        // The request's log line is written as bytes straight into the log buffer: at the default level it is
        // written for every request.
        let (requestID, method, routeLabel, status, context) = (
            pending.requestID, pending.head.method.rawValue, record.route, response.status, response.logContext
        )
        let micros = Int((elapsed * 1_000_000).rounded())
        let limit =
            Self.logRequestID.count + requestID.utf8.count + Self.logMethod.count + method.utf8.count + Self.logRoute.count
            + routeLabel.utf8.count + Self.logStatus.count + 20 + Self.logDuration.count + 20 + 4 + 1 + (context?.utf8.count ?? 0)
        logger.log(.info) { line in
            line.write(atMost: limit) { out in
                out.bytes(Self.logRequestID)
                out.utf8(requestID)
                out.bytes(Self.logMethod)
                out.utf8(method)
                out.bytes(Self.logRoute)
                out.utf8(routeLabel)
                out.bytes(Self.logStatus)
                out.decimal(status)
                out.bytes(Self.logDuration)
                out.decimal(micros / 1000)
                out.byte(UInt8(ascii: "."))
                out.padded(micros % 1000, width: 3)
                if let context {
                    out.byte(UInt8(ascii: " "))
                    out.utf8(context)
                }
            }
        }
    }

    private static let logRequestID = Array("request_id=".utf8)
    private static let logMethod = Array(" method=".utf8)
    private static let logRoute = Array(" route=".utf8)
    private static let logStatus = Array(" status=".utf8)
    private static let logDuration = Array(" duration_ms=".utf8)

    private static let requestIDName = Array("X-Request-Id: ".utf8)
    private static let contentLengthName = Array("Content-Length: ".utf8)
    private static let crlf: [UInt8] = [0x0D, 0x0A]
    private static let connectionClose = Array("Connection: close\r\n".utf8)
    private static let connectionKeepAlive = Array("Connection: keep-alive\r\n".utf8)
    private static let chunked = Array("Transfer-Encoding: chunked\r\n".utf8)
    /// The most the framing lines and the blank line after them take.
    private static let framingLimit =
        contentLengthName.count + 20 + crlf.count + max(connectionClose.count, connectionKeepAlive.count, chunked.count) + crlf.count

    private static func isAcceptableRequestID(_ value: String) -> Bool {
        guard !value.isEmpty, value.utf8.count <= 128 else { return false }
        return value.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F }
    }

    static func monotonicNanos() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }
}
