#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Limits enforced while parsing (defaults = Parley's contract).
public struct HTTPParserLimits: Sendable {
    /// Request line plus all header lines, CRLFs included; exceeding it answers 431.
    public var maxHeadBytes = 16 * 1024
    /// Number of header fields; exceeding it answers 431.
    public var maxHeaderCount = 100
    /// Default body limit, answered with 413 (a route may change it per request with `setBodyLimit`).
    public var maxBodyBytes = 1024 * 1024

    public init(maxHeadBytes: Int = 16 * 1024, maxHeaderCount: Int = 100, maxBodyBytes: Int = 1024 * 1024) {
        self.maxHeadBytes = maxHeadBytes
        self.maxHeaderCount = maxHeaderCount
        self.maxBodyBytes = maxBodyBytes
    }
}

/// Why a request could not be parsed; carries the HTTP status the server answers with before closing.
public struct HTTPParseError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The class of failure; each maps to exactly one status.
    public enum Kind: Sendable, Equatable {
        case badRequest, headersTooLarge, payloadTooLarge, notImplemented, versionNotSupported
    }

    public var kind: Kind
    /// Short and safe to show to clients: it never echoes request bytes.
    public var detail: String

    public init(_ kind: Kind, _ detail: String) {
        self.kind = kind
        self.detail = detail
    }

    /// The HTTP status the server answers with.
    public var status: Int {
        switch kind {
        case .badRequest: 400
        case .headersTooLarge: 431
        case .payloadTooLarge: 413
        case .notImplemented: 501
        case .versionNotSupported: 505
        }
    }

    public var description: String { "\(status) \(detail)" }

    static func bad(_ detail: String) -> HTTPParseError { HTTPParseError(.badRequest, detail) }
}

/// A pure value-type state machine for HTTP/1.1 requests (RFC 9112): bytes in, events out; no I/O.
///
/// Owned by the connection's event-loop thread. The server appends what it reads and calls `next()` until it
/// returns nil; each request yields `.head` then `.end`, and pipelined requests follow in order. Input is
/// kept as bytes with a read index; lines are found with `memchr` and consumed as soon as they are parsed,
/// so an append never causes a rescan, and Strings are created only for the method, target and fields.
public struct HTTPRequestParser: Sendable {
    /// What the parser recognised.
    public enum Event: Sendable {
        /// Request line and headers are complete.
        case head(HTTPRequestHead)
        /// The whole body was received (empty for no body); the next request may follow.
        case end(body: [UInt8])
    }

    /// How the body of the current request is delimited.
    private enum Framing: Sendable {
        case none
        case length(Int)
        case chunked
    }

    /// Where the parser is within the current request; each case says what it waits for.
    private enum State: Sendable {
        /// Reading request-line and header lines (`requestLine` is nil until the first line is parsed).
        case head
        /// `.head` was returned; the body limit is checked on the next call so `setBodyLimit` can act first.
        case headDelivered(Framing)
        /// Length-delimited body; `remaining` bytes still to copy into `body`.
        case fixedBody(remaining: Int)
        /// Waiting for a `chunk-size [ext] CRLF` line.
        case chunkSizeLine
        /// Inside chunk data.
        case chunkData(remaining: Int)
        /// Waiting for the CRLF that ends a chunk's data.
        case chunkDataEnd
        /// Reading trailer lines after the last chunk, up to the empty line.
        case trailers
        /// Terminal: every later `next()` rethrows this.
        case failed(HTTPParseError)
    }

    /// The parsed request line of the head in progress.
    private struct RequestLine: Sendable {
        var method: HTTPMethod
        var target: String
        var version: HTTPVersion
    }

    /// Framing and connection facts collected from the headers as they arrive.
    private struct HeadFacts: Sendable {
        var contentLength: Int?
        var transferEncodingSeen = false
        var chunkedCount = 0
        var lastCodingIsChunked = false
        var otherCodingSeen = false
        var connectionClose = false
        var connectionKeepAlive = false
        var expectContinue = false
    }

    /// Empty lines tolerated before a request line (RFC 9112, section 2.2), bounded so garbage cannot spin us.
    static let maxLeadingEmptyLines = 8
    /// A chunk-size line (with extensions) longer than this is rejected; real clients send a few bytes.
    static let maxChunkLineBytes = 4096
    /// Most a declared Content-Length reserves up front; larger bodies grow as their bytes arrive.
    static let maxBodyReservation = 64 * 1024
    /// When emptying the buffer, drop capacity above this so an idle connection that once received a
    /// large body does not keep that memory.
    static let retainedCapacity = 64 * 1024

    private let limits: HTTPParserLimits
    private var buffer: [UInt8] = []
    /// First unconsumed byte of `buffer`.
    private var readIndex = 0
    /// First byte not yet searched for LF, so appends never cause a rescan.
    private var scanIndex = 0
    private var state: State = .head
    private var bodyLimit: Int

    // The request in progress.
    private var requestLine: RequestLine?
    private var fields: [HTTPHeaders.Field] = []
    private var facts = HeadFacts()
    private var headBytes = 0
    private var leadingEmptyLines = 0
    private var body: [UInt8] = []
    /// Body bytes of the current request already handed on by ``takeBodySoFar()``.
    private var drainedBodyBytes = 0
    /// What the last `.head` / `.end` of ``advance()`` handed over, until taken.
    private var completedHead: HTTPRequestHead?
    private var completedBody: [UInt8] = []
    private var declaredBodyBytes = 0
    private var trailerBytes = 0
    private var trailerCount = 0

    /// Creates a parser enforcing `limits`.
    public init(limits: HTTPParserLimits = .init()) {
        self.limits = limits
        self.bodyLimit = limits.maxBodyBytes
    }

    /// Bytes held but not yet consumed.
    public var bufferedByteCount: Int { buffer.count - readIndex }

    /// True when no partial request is buffered (between requests, nothing buffered).
    public var isIdle: Bool {
        guard case .head = state else { return false }
        return requestLine == nil && readIndex == buffer.count
    }

    /// Buffers more input.
    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        guard prepareAppend() else { return }
        buffer.append(contentsOf: bytes)
    }

    /// Buffers more input.
    public mutating func append(_ bytes: [UInt8]) {
        guard prepareAppend() else { return }
        buffer.append(contentsOf: bytes)
    }

    /// Sets this request's body limit (per-route limit); called between `.head` and `.end`.
    ///
    /// If the head declared a Content-Length above the limit, the next `next()` throws payloadTooLarge.
    /// The limit returns to `limits.maxBodyBytes` when the request ends.
    public mutating func setBodyLimit(_ bytes: Int) {
        bodyLimit = bytes
    }

    /// Next event, or nil when more input is needed. After an error the parser stays failed.
    public mutating func next() throws(HTTPParseError) -> Event? {
        switch try advance() {
        case .needMore: nil
        case .head: .head(takeHead())
        case .end: .end(body: takeBody())
        }
    }

    /// What ``advance()`` reached; the head or body is then taken with ``takeHead()`` or ``takeBody()``.
    enum Progress {
        case needMore, head, end
    }

    /// `next()` without an enum payload: the server's connections read every request this way, and copying and
    /// destroying an optional `Event` through its value witnesses cost ~1,000 instructions a request.
    mutating func advance() throws(HTTPParseError) -> Progress {
        if case .failed(let error) = state { throw error }
        do {
            return try step()
        } catch {
            state = .failed(error)
            // Nothing after a framing error can be trusted; free the memory now.
            buffer = []
            readIndex = 0
            scanIndex = 0
            body = []
            throw error
        }
    }

    // MARK: - Driving the states

    /// The head ``advance()`` returned `.head` for.
    mutating func takeHead() -> HTTPRequestHead { completedHead.take()! }

    /// The body bytes parsed so far of a request still arriving (a streamed body, handed on in pieces); what the
    /// `.end` then hands over is the rest. The limit still counts every byte of the body.
    mutating func takeBodySoFar() -> [UInt8] {
        guard !body.isEmpty else { return [] }
        drainedBodyBytes += body.count
        defer { body = [] }
        return body
    }

    /// The body ``advance()`` returned `.end` for (empty for none).
    mutating func takeBody() -> [UInt8] {
        defer { completedBody = [] }
        return completedBody
    }

    private mutating func step() throws(HTTPParseError) -> Progress {
        while true {
            switch state {
            case .failed(let error):
                throw error

            case .head:
                guard let lf = findLF() else {
                    if headBytes + bufferedByteCount > limits.maxHeadBytes {
                        throw HTTPParseError(.headersTooLarge, "request head too large")
                    }
                    return .needMore
                }
                if let head = try headLine(endingAt: lf) {
                    completedHead = head
                    return .head
                }

            case .headDelivered(let framing):
                switch framing {
                case .none:
                    return finishRequest()
                case .length(let length):
                    try checkDeclaredBody(length)
                    // Capped: a route may allow huge uploads, and a declared length costs the client nothing.
                    body.reserveCapacity(Swift.min(length, Self.maxBodyReservation))
                    state = .fixedBody(remaining: length)
                case .chunked:
                    state = .chunkSizeLine
                }

            case .fixedBody(let remaining):
                // Re-checked on every call: the route may lower the limit after the first check.
                try checkDeclaredBody(drainedBodyBytes + body.count + remaining)
                let taken = takeBody(upTo: remaining)
                if taken == remaining { return finishRequest() }
                state = .fixedBody(remaining: remaining - taken)
                return .needMore

            case .chunkSizeLine:
                try checkDeclaredBody(declaredBodyBytes)
                guard let lf = findLF() else {
                    if bufferedByteCount > Self.maxChunkLineBytes { throw .bad("chunk size line too long") }
                    return .needMore
                }
                guard lf - readIndex <= Self.maxChunkLineBytes else { throw .bad("chunk size line too long") }
                let size = try buffer.withUnsafeBufferPointer { (p) throws(HTTPParseError) -> Int in
                    try Self.parseChunkSize(p, readIndex, Self.lineEnd(p, readIndex, lf))
                }
                consume(through: lf)
                if size == 0 {
                    state = .trailers
                } else {
                    let (total, overflow) = declaredBodyBytes.addingReportingOverflow(size)
                    if overflow { throw HTTPParseError(.payloadTooLarge, "request body too large") }
                    declaredBodyBytes = total
                    try checkDeclaredBody(declaredBodyBytes)
                    state = .chunkData(remaining: size)
                }

            case .chunkData(let remaining):
                try checkDeclaredBody(declaredBodyBytes)
                let taken = takeBody(upTo: remaining)
                if taken < remaining {
                    state = .chunkData(remaining: remaining - taken)
                    return .needMore
                }
                state = .chunkDataEnd

            case .chunkDataEnd:
                // CRLF, or a bare LF (the same leniency as for lines).
                guard bufferedByteCount >= 1 else { return .needMore }
                if buffer[readIndex] == 0x0A {
                    consume(count: 1)
                } else if buffer[readIndex] == 0x0D {
                    guard bufferedByteCount >= 2 else { return .needMore }
                    guard buffer[readIndex + 1] == 0x0A else { throw .bad("missing CRLF after chunk data") }
                    consume(count: 2)
                } else {
                    throw .bad("missing CRLF after chunk data")
                }
                state = .chunkSizeLine

            case .trailers:
                guard let lf = findLF() else {
                    if trailerBytes + bufferedByteCount > limits.maxHeadBytes {
                        throw HTTPParseError(.headersTooLarge, "trailer section too large")
                    }
                    return .needMore
                }
                trailerBytes += lf + 1 - readIndex
                if trailerBytes > limits.maxHeadBytes {
                    throw HTTPParseError(.headersTooLarge, "trailer section too large")
                }
                let isEmpty = try buffer.withUnsafeBufferPointer { (p) throws(HTTPParseError) -> Bool in
                    let end = Self.lineEnd(p, readIndex, lf)
                    if end == readIndex { return true }
                    // Trailers are validated like fields (a malformed one means broken framing) but discarded:
                    // nothing in Parley reads them, and merging them into the head would let a client forge
                    // fields after checks ran.
                    _ = try Self.parseField(p, readIndex, end)
                    return false
                }
                consume(through: lf)
                if isEmpty { return finishRequest() }
                trailerCount += 1
                if trailerCount > limits.maxHeaderCount {
                    throw HTTPParseError(.headersTooLarge, "too many trailer fields")
                }
            }
        }
    }

    /// Handles one complete line of the head; returns the head when this line was the empty line ending it.
    private mutating func headLine(endingAt lf: Int) throws(HTTPParseError) -> HTTPRequestHead? {
        let lineBytes = lf + 1 - readIndex
        headBytes += lineBytes
        if headBytes > limits.maxHeadBytes { throw HTTPParseError(.headersTooLarge, "request head too large") }
        let start = readIndex
        let end = buffer.withUnsafeBufferPointer { p in Self.lineEnd(p, start, lf) }

        guard let line = requestLine else {
            consume(through: lf)
            if end == start {
                // Robustness: a client may send a stray CRLF after a previous body (RFC 9112, section 2.2).
                headBytes = 0
                leadingEmptyLines += 1
                if leadingEmptyLines > Self.maxLeadingEmptyLines { throw .bad("too many empty lines") }
                return nil
            }
            requestLine = try buffer.withUnsafeBufferPointer { (p) throws(HTTPParseError) in
                try Self.parseRequestLine(p, start, end)
            }
            return nil
        }

        if end == start {
            consume(through: lf)
            return try completeHead(line)
        }

        let field = try buffer.withUnsafeBufferPointer { (p) throws(HTTPParseError) -> HTTPHeaders.Field in
            let parsed = try Self.parseField(p, start, end)
            try Self.collectFacts(p, parsed, into: &facts)
            return (
                name: String(decoding: UnsafeBufferPointer(rebasing: p[parsed.name]), as: UTF8.self),
                value: String(decoding: UnsafeBufferPointer(rebasing: p[parsed.value]), as: UTF8.self)
            )
        }
        consume(through: lf)
        if fields.count >= limits.maxHeaderCount { throw HTTPParseError(.headersTooLarge, "too many header fields") }
        if fields.isEmpty { fields.reserveCapacity(16) }
        fields.append(field)
        return nil
    }

    /// Derives framing and connection facts once the empty line arrived, and moves to the body.
    private mutating func completeHead(_ line: RequestLine) throws(HTTPParseError) -> HTTPRequestHead {
        let framing: Framing
        if facts.transferEncodingSeen {
            // Both framings at once is the classic request-smuggling vector (RFC 9112, section 6.3).
            if facts.contentLength != nil { throw .bad("both Transfer-Encoding and Content-Length") }
            // HTTP/1.0 has no chunked coding; RFC 9112, section 6.1 says to treat this framing as faulty.
            if line.version == .http1_0 { throw .bad("Transfer-Encoding in HTTP/1.0") }
            if facts.otherCodingSeen {
                throw HTTPParseError(.notImplemented, "unsupported transfer coding")
            }
            guard facts.chunkedCount == 1, facts.lastCodingIsChunked else {
                throw .bad("invalid Transfer-Encoding")
            }
            framing = .chunked
        } else if let length = facts.contentLength, length > 0 {
            framing = .length(length)
        } else {
            framing = .none
        }

        let keepAlive: Bool
        if line.version == .http1_1 {
            keepAlive = !facts.connectionClose
        } else {
            keepAlive = facts.connectionKeepAlive && !facts.connectionClose
        }

        let head = HTTPRequestHead(
            method: line.method, target: line.target, version: line.version, headers: HTTPHeaders(fields),
            keepAlive: keepAlive, contentLength: facts.contentLength, chunked: facts.transferEncodingSeen,
            // RFC 9110, section 10.1.1: a 100-continue expectation in an HTTP/1.0 request must be ignored.
            expectsContinue: facts.expectContinue && line.version == .http1_1)
        fields = []
        state = .headDelivered(framing)
        return head
    }

    private func checkDeclaredBody(_ bytes: Int) throws(HTTPParseError) {
        if bytes > bodyLimit { throw HTTPParseError(.payloadTooLarge, "request body too large") }
    }

    /// Ends the request: hands out the body and resets per-request state for a pipelined successor.
    private mutating func finishRequest() -> Progress {
        completedBody = body
        body = []
        state = .head
        requestLine = nil
        facts = HeadFacts()
        headBytes = 0
        leadingEmptyLines = 0
        declaredBodyBytes = 0
        drainedBodyBytes = 0
        trailerBytes = 0
        trailerCount = 0
        bodyLimit = limits.maxBodyBytes
        return .end
    }

    // MARK: - Buffer

    /// Compacts before an append; returns false when input is to be dropped (after a failure).
    private mutating func prepareAppend() -> Bool {
        if case .failed = state { return false }
        if readIndex == buffer.count {
            if buffer.capacity > Self.retainedCapacity {
                buffer = []
            } else {
                buffer.removeAll(keepingCapacity: true)
            }
            readIndex = 0
            scanIndex = 0
        } else if readIndex >= 4096 && readIndex >= buffer.count / 2 {
            // Moving at most as many bytes as were consumed keeps compaction amortised O(1) per byte.
            buffer.removeSubrange(0..<readIndex)
            scanIndex -= readIndex
            readIndex = 0
        }
        return true
    }

    /// Index of the next LF at or after the scan position, remembering how far it looked.
    private mutating func findLF() -> Int? {
        let from = Swift.max(scanIndex, readIndex)
        let count = buffer.count - from
        guard count > 0 else { return nil }
        let found: Int? = buffer.withUnsafeBytes { raw in
            guard let base = raw.baseAddress, let hit = memchr(base + from, 0x0A, count) else { return nil }
            return UnsafeRawPointer(hit) - base
        }
        scanIndex = found ?? buffer.count
        return found
    }

    private mutating func consume(through lf: Int) {
        readIndex = lf + 1
        scanIndex = readIndex
    }

    private mutating func consume(count: Int) {
        readIndex += count
        if scanIndex < readIndex { scanIndex = readIndex }
    }

    /// Moves up to `limit` buffered bytes into `body`; returns how many were moved.
    private mutating func takeBody(upTo limit: Int) -> Int {
        let taken = Swift.min(limit, bufferedByteCount)
        if taken > 0 {
            body.append(contentsOf: buffer[readIndex..<readIndex + taken])
            consume(count: taken)
        }
        return taken
    }

    // MARK: - Byte-level grammar (static so they work on a borrowed buffer)

    /// The end of the line content before `lf`, without its CR; a CR anywhere else is left for validation.
    private static func lineEnd(_ p: UnsafeBufferPointer<UInt8>, _ start: Int, _ lf: Int) -> Int {
        lf > start && p[lf - 1] == 0x0D ? lf - 1 : lf
    }

    /// `tchar` of RFC 9110, section 5.6.2, as a 128-bit set: one shift and mask per byte on the hottest loop.
    @inline(__always)
    static func isTokenChar(_ c: UInt8) -> Bool {
        // Bits for ! # $ % & ' * + - . 0-9 (below 64) and A-Z ^ _ ` a-z | ~ (64..<128).
        let low: UInt64 = 0x03FF_6CFA_0000_0000
        let high: UInt64 = 0x57FF_FFFF_C7FF_FFFE
        if c < 64 { return (low >> UInt64(c)) & 1 != 0 }
        if c < 128 { return (high >> UInt64(c &- 64)) & 1 != 0 }
        return false
    }

    @inline(__always)
    private static func isOWS(_ c: UInt8) -> Bool { c == 0x20 || c == 0x09 }

    /// `METHOD SP request-target SP HTTP/x.y` (RFC 9112, section 3).
    private static func parseRequestLine(
        _ p: UnsafeBufferPointer<UInt8>, _ start: Int, _ end: Int
    ) throws(HTTPParseError) -> RequestLine {
        var i = start
        while i < end, isTokenChar(p[i]) { i += 1 }
        guard i > start, i < end, p[i] == 0x20 else { throw .bad("invalid method") }
        let methodEnd = i
        i += 1
        let targetStart = i
        while i < end, p[i] != 0x20 {
            // Visible ASCII only: controls, DEL and raw non-ASCII are never valid in a request-target.
            guard p[i] > 0x20 && p[i] < 0x7F else { throw .bad("invalid character in request target") }
            i += 1
        }
        guard i > targetStart else { throw .bad("missing request target") }
        guard i < end else { throw .bad("missing HTTP version") }
        let targetEnd = i
        let version = try parseVersion(p, i + 1, end)
        let method =
            knownMethod(UnsafeBufferPointer(rebasing: p[start..<methodEnd]))
            ?? HTTPMethod(rawValue: String(decoding: UnsafeBufferPointer(rebasing: p[start..<methodEnd]), as: UTF8.self))
        let target = try parseTarget(p, targetStart, targetEnd, isOptions: method == .options)
        return RequestLine(method: method, target: target, version: version)
    }

    /// The API's methods without building a String from the bytes (methods are case-sensitive: `get` is not `GET`).
    private static func knownMethod(_ token: UnsafeBufferPointer<UInt8>) -> HTTPMethod? {
        switch token.count {
        case 3:
            if equals(token, "GET") { return .get }
            if equals(token, "PUT") { return .put }
        case 4:
            if equals(token, "POST") { return .post }
            if equals(token, "HEAD") { return .head }
        case 5: if equals(token, "PATCH") { return .patch }
        case 6: if equals(token, "DELETE") { return .delete }
        case 7: if equals(token, "OPTIONS") { return .options }
        default: break
        }
        return nil
    }

    @inline(__always)
    private static func equals(_ bytes: UnsafeBufferPointer<UInt8>, _ literal: StaticString) -> Bool {
        guard bytes.count == literal.utf8CodeUnitCount else { return false }
        return memcmp(bytes.baseAddress!, literal.utf8Start, bytes.count) == 0
    }

    /// `HTTP/DIGIT.DIGIT`: 1.0 and 1.1 are served, other well-formed versions get 505, anything else 400.
    private static func parseVersion(
        _ p: UnsafeBufferPointer<UInt8>, _ start: Int, _ end: Int
    ) throws(HTTPParseError) -> HTTPVersion {
        guard end - start == 8,
            p[start] == UInt8(ascii: "H"), p[start + 1] == UInt8(ascii: "T"), p[start + 2] == UInt8(ascii: "T"),
            p[start + 3] == UInt8(ascii: "P"), p[start + 4] == UInt8(ascii: "/"),
            p[start + 6] == UInt8(ascii: ".")
        else { throw .bad("invalid HTTP version") }
        let major = p[start + 5] &- UInt8(ascii: "0")
        let minor = p[start + 7] &- UInt8(ascii: "0")
        guard major <= 9, minor <= 9 else { throw .bad("invalid HTTP version") }
        guard major == 1, minor <= 1 else { throw HTTPParseError(.versionNotSupported, "HTTP version not supported") }
        return minor == 1 ? .http1_1 : .http1_0
    }

    /// Origin-form as sent, `*` for OPTIONS, or absolute-form reduced to its path and query.
    private static func parseTarget(
        _ p: UnsafeBufferPointer<UInt8>, _ start: Int, _ end: Int, isOptions: Bool
    ) throws(HTTPParseError) -> String {
        if p[start] == UInt8(ascii: "/") {
            return String(decoding: UnsafeBufferPointer(rebasing: p[start..<end]), as: UTF8.self)
        }
        if end - start == 1 && p[start] == UInt8(ascii: "*") {
            guard isOptions else { throw .bad("asterisk target outside OPTIONS") }
            return "*"
        }
        // absolute-form (RFC 9112, section 3.2.2): http[s]://authority[path][?query]
        var i = start
        while i < end, p[i] != UInt8(ascii: ":") { i += 1 }
        let scheme = UnsafeBufferPointer(rebasing: p[start..<i])
        guard equalsLowercased(scheme, "http") || equalsLowercased(scheme, "https"),
            end - i >= 3, p[i + 1] == UInt8(ascii: "/"), p[i + 2] == UInt8(ascii: "/")
        else { throw .bad("invalid request target") }
        let authorityStart = i + 3
        i = authorityStart
        while i < end, p[i] != UInt8(ascii: "/"), p[i] != UInt8(ascii: "?") { i += 1 }
        guard i > authorityStart else { throw .bad("invalid request target") }
        if i == end { return "/" }
        let rest = String(decoding: UnsafeBufferPointer(rebasing: p[i..<end]), as: UTF8.self)
        return p[i] == UInt8(ascii: "?") ? "/" + rest : rest
    }

    /// Byte ranges of one header (or trailer) field line.
    private struct FieldRanges {
        var name: Range<Int>
        var value: Range<Int>
    }

    /// `field-name ":" OWS field-value OWS` (RFC 9112, section 5), rejecting obs-fold and control characters.
    private static func parseField(
        _ p: UnsafeBufferPointer<UInt8>, _ start: Int, _ end: Int
    ) throws(HTTPParseError) -> FieldRanges {
        if isOWS(p[start]) { throw .bad("obsolete line folding") }
        var i = start
        while i < end, isTokenChar(p[i]) { i += 1 }
        guard i < end, p[i] == UInt8(ascii: ":") else {
            if i < end, isOWS(p[i]) { throw .bad("whitespace before colon") }
            throw .bad("invalid header field")
        }
        guard i > start else { throw .bad("empty header name") }
        let nameEnd = i
        i += 1
        for j in i..<end {
            let c = p[j]
            // HTAB is the only control allowed in a value; CR and NUL are how header injection starts.
            if (c < 0x20 && c != 0x09) || c == 0x7F { throw .bad("invalid character in header value") }
        }
        var valueEnd = end
        while i < valueEnd, isOWS(p[i]) { i += 1 }
        while valueEnd > i, isOWS(p[valueEnd - 1]) { valueEnd -= 1 }
        return FieldRanges(name: start..<nameEnd, value: i..<valueEnd)
    }

    /// Records what the framing and connection rules need from one field, straight from its bytes.
    private static func collectFacts(
        _ p: UnsafeBufferPointer<UInt8>, _ field: FieldRanges, into facts: inout HeadFacts
    ) throws(HTTPParseError) {
        let name = UnsafeBufferPointer(rebasing: p[field.name])
        switch name.count {
        case 14 where equalsLowercased(name, "content-length"):
            var elements = ListElements(p, field.value)
            var sawOne = false
            while let element = elements.next() {
                let length = try parseContentLength(p, element)
                // Repeated equal values are a proxy artefact and harmless; different ones are smuggling.
                if let previous = facts.contentLength, previous != length {
                    throw .bad("conflicting Content-Length")
                }
                facts.contentLength = length
                sawOne = true
            }
            if !sawOne { throw .bad("invalid Content-Length") }
        case 17 where equalsLowercased(name, "transfer-encoding"):
            facts.transferEncodingSeen = true
            var elements = ListElements(p, field.value)
            while let element = elements.next() {
                var codingEnd = element.lowerBound
                while codingEnd < element.upperBound, isTokenChar(p[codingEnd]) { codingEnd += 1 }
                let coding = UnsafeBufferPointer(rebasing: p[element.lowerBound..<codingEnd])
                // `chunked` takes no parameters, so only the bare token counts as chunked.
                if codingEnd == element.upperBound && equalsLowercased(coding, "chunked") {
                    facts.chunkedCount += 1
                    facts.lastCodingIsChunked = true
                } else {
                    facts.otherCodingSeen = true
                    facts.lastCodingIsChunked = false
                }
            }
        case 10 where equalsLowercased(name, "connection"):
            var elements = ListElements(p, field.value)
            while let element = elements.next() {
                let option = UnsafeBufferPointer(rebasing: p[element])
                if equalsLowercased(option, "close") {
                    facts.connectionClose = true
                } else if equalsLowercased(option, "keep-alive") {
                    facts.connectionKeepAlive = true
                }
            }
        case 6 where equalsLowercased(name, "expect"):
            var elements = ListElements(p, field.value)
            while let element = elements.next() {
                if equalsLowercased(UnsafeBufferPointer(rebasing: p[element]), "100-continue") {
                    facts.expectContinue = true
                }
            }
        default:
            break
        }
    }

    /// `1*DIGIT`, rejecting overflow.
    private static func parseContentLength(
        _ p: UnsafeBufferPointer<UInt8>, _ range: Range<Int>
    ) throws(HTTPParseError) -> Int {
        var value = 0
        for i in range {
            let digit = p[i] &- UInt8(ascii: "0")
            guard digit <= 9 else { throw .bad("invalid Content-Length") }
            let (times10, o1) = value.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times10.addingReportingOverflow(Int(digit))
            if o1 || o2 { throw .bad("invalid Content-Length") }
            value = sum
        }
        return value
    }

    /// `chunk-size [ chunk-ext ]` (RFC 9112, section 7.1): hex size; extensions are checked for controls and ignored.
    private static func parseChunkSize(
        _ p: UnsafeBufferPointer<UInt8>, _ start: Int, _ end: Int
    ) throws(HTTPParseError) -> Int {
        var i = start
        var size = 0
        while i < end {
            let c = p[i]
            let digit: UInt8
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = c - UInt8(ascii: "A") + 10
            default: digit = 0xFF
            }
            if digit == 0xFF { break }
            let (times16, o1) = size.multipliedReportingOverflow(by: 16)
            let (sum, o2) = times16.addingReportingOverflow(Int(digit))
            if o1 || o2 { throw .bad("chunk size too large") }
            size = sum
            i += 1
        }
        guard i > start else { throw .bad("invalid chunk size") }
        while i < end, isOWS(p[i]) { i += 1 }
        guard i == end || p[i] == UInt8(ascii: ";") else { throw .bad("invalid chunk size") }
        while i < end {
            let c = p[i]
            if (c < 0x20 && c != 0x09) || c == 0x7F { throw .bad("invalid chunk extension") }
            i += 1
        }
        return size
    }

    /// ASCII case-insensitive comparison of bytes with a lowercase literal.
    @inline(__always)
    static func equalsLowercased(_ bytes: UnsafeBufferPointer<UInt8>, _ literal: StaticString) -> Bool {
        guard bytes.count == literal.utf8CodeUnitCount else { return false }
        let lit = literal.utf8Start
        for i in 0..<bytes.count {
            let c = bytes[i]
            let lower = c >= 0x41 && c <= 0x5A ? c | 0x20 : c
            if lower != lit[i] { return false }
        }
        return true
    }

    /// Non-empty, OWS-trimmed elements of a comma-separated list (RFC 9110, section 5.6.1), without allocating.
    private struct ListElements {
        let p: UnsafeBufferPointer<UInt8>
        var i: Int
        let end: Int

        init(_ p: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) {
            self.p = p
            self.i = range.lowerBound
            self.end = range.upperBound
        }

        mutating func next() -> Range<Int>? {
            while i < end {
                var start = i
                while i < end, p[i] != UInt8(ascii: ",") { i += 1 }
                var stop = i
                if i < end { i += 1 }
                while start < stop, isOWS(p[start]) { start += 1 }
                while stop > start, isOWS(p[stop - 1]) { stop -= 1 }
                if stop > start { return start..<stop }
            }
            return nil
        }
    }
}
