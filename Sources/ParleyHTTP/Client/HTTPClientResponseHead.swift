/// The status line and header fields of one response, and the body framing they imply (RFC 9112, section 6.3).
///
/// Pure parsing, no I/O: `HTTPClientConnection` and `HTTPClientStream` feed it the bytes they buffered.
struct HTTPClientResponseHead: Sendable {
    /// How the body of a response is delimited.
    enum Framing: Sendable, Equatable {
        /// No body at all (`HEAD`, `1xx`, `204`, `304`).
        case none
        /// Exactly this many bytes (`Content-Length`).
        case length(Int)
        /// `Transfer-Encoding: chunked`, ended by the last chunk and trailers.
        case chunked
        /// Everything until the server closes the connection.
        case untilClose
    }

    var version: HTTPVersion
    var status: Int
    var reason: String
    var headers: HTTPHeaders

    /// Parses a complete head at the start of `bytes`.
    ///
    /// Returns the head and how many bytes it used (through the empty line), or nil when the empty line has not
    /// arrived yet. Lines end in CRLF; a bare LF is accepted too (RFC 9112, section 2.2 allows it).
    static func parse(_ bytes: ArraySlice<UInt8>, limit: Int) throws -> (head: HTTPClientResponseHead, length: Int)? {
        guard let end = headEnd(bytes) else {
            if bytes.count > limit {
                throw HTTPClientError(.tooLarge, "response head is larger than \(limit) bytes")
            }
            return nil
        }
        if end - bytes.startIndex > limit {
            throw HTTPClientError(.tooLarge, "response head is larger than \(limit) bytes")
        }
        var lines = splitLines(bytes[bytes.startIndex..<end])
        guard !lines.isEmpty else { throw HTTPClientError(.malformedResponse, "empty response head") }
        let statusLine = lines.removeFirst()
        var head = try parseStatusLine(statusLine)
        for line in lines {
            let field = try parseField(line)
            head.headers.add(field.name, field.value)
        }
        return (head, end - bytes.startIndex)
    }

    /// The index just past the empty line that ends the head, or nil.
    private static func headEnd(_ bytes: ArraySlice<UInt8>) -> Int? {
        var lineStart = bytes.startIndex
        var i = bytes.startIndex
        while i < bytes.endIndex {
            if bytes[i] == UInt8(ascii: "\n") {
                let length = i - lineStart
                if length == 0 || (length == 1 && bytes[lineStart] == UInt8(ascii: "\r")) {
                    // An empty line before the status line is not the end of a head.
                    if lineStart != bytes.startIndex { return i + 1 }
                }
                lineStart = i + 1
            }
            i += 1
        }
        return nil
    }

    /// Splits a head (ending in its empty line) into its non-empty lines without line terminators.
    private static func splitLines(_ bytes: ArraySlice<UInt8>) -> [ArraySlice<UInt8>] {
        var lines: [ArraySlice<UInt8>] = []
        var lineStart = bytes.startIndex
        for i in bytes.indices where bytes[i] == UInt8(ascii: "\n") {
            var line = bytes[lineStart..<i]
            if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
            if !line.isEmpty { lines.append(line) }
            lineStart = i + 1
        }
        return lines
    }

    /// Parses `HTTP/1.x SSS reason`.
    static func parseStatusLine(_ line: ArraySlice<UInt8>) throws -> HTTPClientResponseHead {
        let bytes = Array(line)
        let prefix = Array("HTTP/1.".utf8)
        guard bytes.count >= 12, Array(bytes[0..<7]) == prefix, HTTPClientBytes.isDigit(bytes[7]),
            bytes[8] == UInt8(ascii: " "),
            HTTPClientBytes.isDigit(bytes[9]), HTTPClientBytes.isDigit(bytes[10]), HTTPClientBytes.isDigit(bytes[11]),
            bytes.count == 12 || bytes[12] == UInt8(ascii: " ")
        else {
            throw HTTPClientError(.malformedResponse, "bad status line: \(HTTPClientBytes.printable(line))")
        }
        let minor = Int(bytes[7] - 48)
        let status = Int(bytes[9] - 48) * 100 + Int(bytes[10] - 48) * 10 + Int(bytes[11] - 48)
        guard status >= 100 else { throw HTTPClientError(.malformedResponse, "bad status code \(status)") }
        let reason = bytes.count > 13 ? String(decoding: bytes[13...], as: UTF8.self) : ""
        return HTTPClientResponseHead(
            version: HTTPVersion(major: 1, minor: minor), status: status, reason: reason, headers: HTTPHeaders())
    }

    /// Parses one `name: value` line (a header or a trailer field); optional whitespace around the value is dropped.
    static func parseField(_ line: ArraySlice<UInt8>) throws -> (name: String, value: String) {
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > line.startIndex else {
            throw HTTPClientError(.malformedResponse, "bad header line: \(HTTPClientBytes.printable(line))")
        }
        let name = line[line.startIndex..<colon]
        guard name.allSatisfy(HTTPClientBytes.isToken) else {
            throw HTTPClientError(.malformedResponse, "bad header name: \(HTTPClientBytes.printable(name))")
        }
        var value = line[(colon + 1)...]
        while let first = value.first, first == UInt8(ascii: " ") || first == UInt8(ascii: "\t") {
            value = value.dropFirst()
        }
        while let last = value.last, last == UInt8(ascii: " ") || last == UInt8(ascii: "\t") {
            value = value.dropLast()
        }
        if value.contains(where: { $0 == 0 || $0 == UInt8(ascii: "\r") || $0 == UInt8(ascii: "\n") }) {
            throw HTTPClientError(.malformedResponse, "bad header value for \(HTTPClientBytes.printable(name))")
        }
        return (String(decoding: name, as: UTF8.self), String(decoding: value, as: UTF8.self))
    }

    /// The body framing of this response to a request made with `method` (RFC 9112, section 6.3, in its order).
    func framing(for method: HTTPMethod) throws -> Framing {
        if method == .head || (100..<200).contains(status) || status == 204 || status == 304 { return .none }
        let encodings = headers.values("Transfer-Encoding")
            .flatMap { $0.split(separator: ",") }
            .map { HTTPClientBytes.trimmed($0).lowercased() }
            .filter { !$0.isEmpty }
        if !encodings.isEmpty {
            return encodings.last == "chunked" ? .chunked : .untilClose
        }
        let lengths = headers.values("Content-Length").flatMap {
            $0.split(separator: ",", omittingEmptySubsequences: false)
        }
        if !lengths.isEmpty {
            var length: Int?
            for text in lengths {
                let trimmed = HTTPClientBytes.trimmed(text)
                guard !trimmed.isEmpty, trimmed.utf8.count <= 18, trimmed.utf8.allSatisfy(HTTPClientBytes.isDigit),
                    let value = Int(trimmed)
                else {
                    throw HTTPClientError(.malformedResponse, "bad Content-Length: \(text)")
                }
                if let length, length != value {
                    throw HTTPClientError(.malformedResponse, "conflicting Content-Length values")
                }
                length = value
            }
            return .length(length!)
        }
        return .untilClose
    }

    /// Whether the connection may carry another request after this response.
    var keepAlive: Bool {
        let tokens = headers.values("Connection").flatMap { $0.split(separator: ",") }.map {
            HTTPClientBytes.trimmed($0).lowercased()
        }
        if tokens.contains("close") { return false }
        if version.minor == 0 { return tokens.contains("keep-alive") }
        return true
    }
}
