/// A blocking HTTP/1.1 client connection to one `host:port` (plain TCP, or TLS for `https` URLs), reused across
/// requests.
///
/// For tests, webhooks and the push gateway: not for hot paths. Not `Sendable`: one thread at a time owns it.
/// Every exchange is bounded by `timeout` (connect by `connectTimeout`). A response saying `Connection: close`,
/// or one delimited by close, makes the next `send` open a new connection; `connectCount` tells tests whether a
/// connection was reused. Idempotent requests are retried once on a fresh connection when a reused one turns
/// out to have been closed by the server before any byte of the response arrived.
public final class HTTPClientConnection {
    /// The host name or address this connection resolves with `getaddrinfo`.
    public let host: String
    public let port: Int
    /// Limit for establishing the TCP connection.
    public let connectTimeout: Duration
    /// Limit for one exchange (writing a request and reading its response), and for each read and write.
    public var timeout: Duration
    /// Largest response head (status line and header fields) accepted.
    public var maxHeadBytes = 64 * 1024
    /// Largest decoded response body accepted.
    public var maxBodyBytes = 64 * 1024 * 1024
    /// How many TCP connections this object has opened so far.
    public private(set) var connectCount = 0
    /// A bound over everything (connects included) on top of the per-exchange `timeout`: `OutboundHTTP`'s deadline.
    var deadline: ContinuousClock.Instant?
    /// Cut a body longer than `maxBodyBytes` there (`truncated` response, connection not reused) instead of failing
    /// with `.tooLarge`.
    var truncatesLongBodies = false

    private let endpoint: HTTPClientEndpoint
    private var socket: (any HTTPClientTransport)?
    /// Received bytes not yet consumed start at `readIndex`.
    private var buffer: [UInt8] = []
    private var readIndex = 0
    private var peerClosed = false
    private var reusable = true
    private var exchangesOnSocket = 0

    /// Connects now to `host:port` (plain TCP).
    public convenience init(host: String, port: Int, connectTimeout: Duration = .seconds(5), timeout: Duration = .seconds(10))
        throws
    {
        try self.init(endpoint: HTTPClientEndpoint(host: host, port: port), connectTimeout: connectTimeout, timeout: timeout)
    }

    /// Connects now to the scheme, host and port of `url` (`http[s]://host[:port]`, any path ignored): TLS for `https`,
    /// verified against the system trust store. No address is refused (the caller's configuration chose it).
    public convenience init(url: String, connectTimeout: Duration = .seconds(5), timeout: Duration = .seconds(10)) throws {
        try self.init(endpoint: HTTPClientEndpoint(HTTPClientURL(url)), connectTimeout: connectTimeout, timeout: timeout)
    }

    /// Connects now to `endpoint`, before `deadline` if one is given.
    init(endpoint: HTTPClientEndpoint, connectTimeout: Duration, timeout: Duration, deadline: ContinuousClock.Instant? = nil)
        throws
    {
        self.endpoint = endpoint
        self.host = endpoint.host
        self.port = endpoint.port
        self.connectTimeout = connectTimeout
        self.timeout = timeout
        self.deadline = deadline
        try reconnect()
    }

    deinit { socket?.close() }

    /// Sends one request and reads its response. Adds `Host` and `Content-Length` unless `headers` has them.
    ///
    /// `Content-Length` is sent when there is a body, and always for `POST`, `PUT` and `PATCH`.
    public func send(
        method: HTTPMethod, path: String, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8]? = nil
    ) throws -> HTTPClientResponse {
        let request = try encodeRequest(method: method, path: path, headers: headers, body: body)
        let reused = try prepareSocket()
        do {
            return try exchange(request, method: method)
        } catch let error as HTTPClientError
            where error.kind == .closed && reused && Self.isIdempotent(method) && readIndex == buffer.count
        {
            try reconnect()
            return try exchange(request, method: method)
        }
    }

    /// Sends one request with a UTF-8 text body.
    public func send(method: HTTPMethod, path: String, headers: HTTPHeaders = HTTPHeaders(), body: String) throws
        -> HTTPClientResponse
    {
        try send(method: method, path: path, headers: headers, body: Array(body.utf8))
    }

    /// Writes `bytes` as they are (malformed or pipelined requests in tests); read replies with `readResponse`.
    public func sendRaw(_ bytes: [UInt8]) throws {
        _ = try prepareSocket()
        try write(bytes, deadline: limit(timeout))
    }

    /// Writes the UTF-8 bytes of `text` as they are.
    public func sendRaw(_ text: String) throws { try sendRaw(Array(text.utf8)) }

    /// Reads the next final response; `method` is the method of the request it answers (`HEAD` has no body).
    ///
    /// Interim `1xx` responses (`100 Continue`, `103 Early Hints`) are skipped; `101` is returned as final.
    /// After an error the connection is not reused: the rest of that response may still arrive.
    public func readResponse(method: HTTPMethod = .get) throws -> HTTPClientResponse {
        try readResponse(method: method, deadline: limit(timeout))
    }

    /// Writes one request and reads its response, both within one `timeout`.
    private func exchange(_ request: [UInt8], method: HTTPMethod) throws -> HTTPClientResponse {
        let deadline = limit(timeout)
        try write(request, deadline: deadline)
        return try readResponse(method: method, deadline: deadline)
    }

    private func readResponse(method: HTTPMethod, deadline: ContinuousClock.Instant) throws -> HTTPClientResponse {
        do {
            return try readFinalResponse(method: method, deadline: deadline)
        } catch {
            reusable = false
            throw error
        }
    }

    private func readFinalResponse(method: HTTPMethod, deadline: ContinuousClock.Instant) throws -> HTTPClientResponse {
        while true {
            let head = try readHead(deadline: deadline)
            if (100..<200).contains(head.status) && head.status != 101 { continue }
            let framing = try head.framing(for: method)
            var decoder = try HTTPClientBodyDecoder(
                framing: framing, maxBodyBytes: maxBodyBytes, truncating: truncatesLongBodies)
            var body: [UInt8] = []
            while !decoder.isDone {
                if readIndex < buffer.count {
                    readIndex += try decoder.decode(buffer[readIndex...], into: &body)
                    if decoder.isDone { break }
                }
                if try !fill(deadline: deadline) { try decoder.finishAtEndOfStream() }
            }
            exchangesOnSocket += 1
            if !head.keepAlive || framing == .untilClose || head.status == 101 || decoder.truncated { reusable = false }
            return HTTPClientResponse(
                status: head.status, reason: head.reason, version: head.version, headers: head.headers,
                trailers: decoder.trailers, body: body, truncated: decoder.truncated)
        }
    }

    /// Returns the bytes already buffered plus whatever arrives until the peer closes or `timeout` passes.
    ///
    /// For tests that look at a server's raw answer. Errors end the wait early; they are not thrown.
    public func readAvailable(timeout: Duration) -> [UInt8] {
        let deadline = ContinuousClock.now + timeout
        while (try? fill(deadline: deadline)) == true {}
        let bytes = Array(buffer[readIndex...])
        buffer.removeAll(keepingCapacity: true)
        readIndex = 0
        return bytes
    }

    /// Waits up to `timeout` for the peer to close (or reset) the connection; false if it is still open.
    ///
    /// Bytes that arrive meanwhile stay buffered for `readResponse` and `readAvailable`. Also true after our own
    /// `close()`.
    /// Whether the socket is open and may carry another request (no `Connection: close`, nothing left unread).
    var canCarryAnother: Bool { socket != nil && !peerClosed && reusable && readIndex == buffer.count }

    public func isClosedByPeer(timeout: Duration) -> Bool {
        if socket == nil { return peerClosed }
        let deadline = ContinuousClock.now + timeout
        while true {
            do {
                if try !fill(deadline: deadline) { return true }
            } catch let error as HTTPClientError {
                return error.kind != .timeout
            } catch {
                return true
            }
        }
    }

    /// Sends `GET path` (with `Accept: text/event-stream` unless given) and returns a reader of the response body.
    ///
    /// The response head is read before returning; the connection then belongs to the stream.
    public func openStream(path: String, headers: HTTPHeaders = HTTPHeaders()) throws -> HTTPClientStream {
        var headers = headers
        if !headers.contains("Accept") { headers.add("Accept", "text/event-stream") }
        let request = try encodeRequest(method: .get, path: path, headers: headers, body: nil)
        _ = try prepareSocket()
        let deadline = limit(timeout)
        try write(request, deadline: deadline)
        var head = try readHead(deadline: deadline)
        while (100..<200).contains(head.status) && head.status != 101 { head = try readHead(deadline: deadline) }
        let decoder = try HTTPClientBodyDecoder(framing: head.framing(for: .get), maxBodyBytes: Int.max)
        reusable = false
        return HTTPClientStream(connection: self, status: head.status, headers: head.headers, decoder: decoder)
    }

    /// Closes the connection (idempotent); the next `send` opens a new one.
    public func close() {
        socket?.close()
        socket = nil
        peerClosed = true
        buffer.removeAll()
        readIndex = 0
    }

    // MARK: - Internals shared with HTTPClientStream

    /// The buffered, not yet consumed bytes.
    var unconsumed: ArraySlice<UInt8> { buffer[readIndex...] }

    /// Marks `count` buffered bytes as consumed.
    func consume(_ count: Int) { readIndex += count }

    /// Reads more bytes into the buffer, waiting until `deadline`; false at end of stream, `.timeout` past it.
    func fill(deadline: ContinuousClock.Instant) throws -> Bool {
        if peerClosed { return false }
        guard let socket else { throw HTTPClientError(.closed, "connection is closed") }
        if readIndex == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            readIndex = 0
        } else if readIndex >= 64 * 1024 {
            buffer.removeFirst(readIndex)
            readIndex = 0
        }
        if try socket.receive(appendingTo: &buffer, deadline: deadline) == 0 {
            peerClosed = true
            return false
        }
        return true
    }

    // MARK: - Private

    /// Opens a new connection if there is none or the last one cannot carry another request.
    /// Returns true when an already used connection is being reused.
    private func prepareSocket() throws -> Bool {
        if socket == nil || peerClosed || !reusable {
            try reconnect()
            return false
        }
        return exchangesOnSocket > 0
    }

    private func reconnect() throws {
        socket?.close()
        socket = nil
        buffer.removeAll(keepingCapacity: true)
        readIndex = 0
        socket = try endpoint.open(deadline: limit(connectTimeout), ioTimeout: timeout)
        connectCount += 1
        peerClosed = false
        reusable = true
        exchangesOnSocket = 0
    }

    /// `now + duration`, capped by `deadline`.
    private func limit(_ duration: Duration) -> ContinuousClock.Instant {
        let end = ContinuousClock.now + duration
        guard let deadline else { return end }
        return min(end, deadline)
    }

    private func write(_ bytes: [UInt8], deadline: ContinuousClock.Instant) throws {
        guard let socket else { throw HTTPClientError(.closed, "connection is closed") }
        try socket.sendAll(bytes, deadline: deadline)
    }

    private func readHead(deadline: ContinuousClock.Instant) throws -> HTTPClientResponseHead {
        while true {
            if let (head, length) = try HTTPClientResponseHead.parse(buffer[readIndex...], limit: maxHeadBytes) {
                readIndex += length
                return head
            }
            if try !fill(deadline: deadline) {
                let what = readIndex == buffer.count ? "before the response" : "in the middle of the response head"
                throw HTTPClientError(.closed, "connection closed \(what)")
            }
        }
    }

    private func encodeRequest(method: HTTPMethod, path: String, headers: HTTPHeaders, body: [UInt8]?) throws
        -> [UInt8]
    {
        try Self.encodeRequest(
            method: method, path: path, headers: headers, body: body, host: host, port: port,
            defaultPort: endpoint.defaultPort)
    }

    /// The bytes of one request to `host:port` (shared with `HTTPInProcessClient`); `Host` names the port unless it
    /// is `defaultPort` (80 for `http`, 443 for `https`).
    static func encodeRequest(
        method: HTTPMethod, path: String, headers: HTTPHeaders, body: [UInt8]?, host: String, port: Int, defaultPort: Int = 80
    ) throws -> [UInt8] {
        guard !method.rawValue.isEmpty, method.rawValue.utf8.allSatisfy(HTTPClientBytes.isToken) else {
            throw HTTPClientError(.invalidRequest, "bad method \(method)")
        }
        guard !path.isEmpty, path.utf8.allSatisfy({ $0 > 32 && $0 != 127 }) else {
            throw HTTPClientError(.invalidRequest, "bad request target \(HTTPClientBytes.printable(path.utf8))")
        }
        var head = "\(method.rawValue) \(path) HTTP/1.1\r\n"
        if !headers.contains("Host") {
            let name = host.contains(":") ? "[\(host)]" : host
            head += port == defaultPort ? "Host: \(name)\r\n" : "Host: \(name):\(port)\r\n"
        }
        for field in headers {
            guard !field.name.isEmpty, field.name.utf8.allSatisfy(HTTPClientBytes.isToken),
                !field.value.utf8.contains(where: { $0 == 0 || $0 == 10 || $0 == 13 })
            else {
                throw HTTPClientError(.invalidRequest, "bad header field \(HTTPClientBytes.printable(field.name.utf8))")
            }
            head += "\(field.name): \(field.value)\r\n"
        }
        let needsLength = body != nil || method == .post || method == .put || method == .patch
        if needsLength && !headers.contains("Content-Length") && !headers.contains("Transfer-Encoding") {
            head += "Content-Length: \(body?.count ?? 0)\r\n"
        }
        head += "\r\n"
        var bytes = Array(head.utf8)
        if let body { bytes += body }
        return bytes
    }

    private static func isIdempotent(_ method: HTTPMethod) -> Bool {
        [.get, .head, .put, .delete, .options].contains(method)
    }
}
