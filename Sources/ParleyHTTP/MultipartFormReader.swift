#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Why a `multipart/form-data` body could not be read. Messages never echo request bytes, so they are safe to send
/// back to the client in a 400.
///
/// Failures of the body itself (client gone, timeout, over the route's limit) are not wrapped in this type: the
/// reader's chunk source throws them and they pass through as they are (a `RequestBodyError` over a
/// `RequestBodyStream`), so a handler can answer 408/413 for those and 400 for these.
public enum MultipartError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The boundary handed to the reader is empty, longer than 70 characters, or not printable ASCII (RFC 2046).
    case invalidBoundary
    /// The body ended without a single boundary delimiter line.
    case missingBoundary
    /// The body ended inside a part or its headers, before the close delimiter `--boundary--`.
    case truncated
    /// A boundary delimiter was followed by something other than `--` or the end of its line.
    case malformedDelimiter
    /// A part's header block is over ``MultipartFormReader/maxHeaderBytes``.
    case headersTooLarge
    /// A part has more than ``MultipartFormReader/maxHeaderLines`` header lines.
    case tooManyHeaderLines
    /// A header line is not `name: value` (or folds onto no header).
    case malformedHeader
    /// A part has no `Content-Disposition`, which RFC 7578 requires of every part.
    case missingContentDisposition
    /// A part's `Content-Disposition` is not `form-data` with a `name`, or its syntax is broken; says what was wrong.
    case badContentDisposition(String)
    /// The body has more than ``MultipartFormReader/maxParts`` parts.
    case tooManyParts
    /// A part read with `readAll(limit:)` is longer than `limit` bytes.
    case partTooLarge(name: String, limit: Int)

    public var description: String {
        switch self {
        case .invalidBoundary: "multipart boundary must be 1 to 70 printable ASCII characters"
        case .missingBoundary: "multipart body has no boundary delimiter"
        case .truncated: "multipart body ended before its close delimiter"
        case .malformedDelimiter: "multipart boundary delimiter not followed by a line end or \"--\""
        case .headersTooLarge: "multipart part headers over \(MultipartFormReader.maxHeaderBytes) bytes"
        case .tooManyHeaderLines: "multipart part has more than \(MultipartFormReader.maxHeaderLines) header lines"
        case .malformedHeader: "multipart part header line is not \"name: value\""
        case .missingContentDisposition: "multipart part has no Content-Disposition"
        case .badContentDisposition(let reason): "multipart Content-Disposition: \(reason)"
        case .tooManyParts: "multipart body has more than \(MultipartFormReader.maxParts) parts"
        case .partTooLarge(let name, let limit): "multipart field \"\(name)\" over \(limit) bytes"
        }
    }
}

/// Reads a `multipart/form-data` body (RFC 7578, framed as RFC 2046 says) as it arrives, so an upload of any size
/// passes through in pieces: `curl -F file=@photo.jpg` sends exactly this, and files may be far larger than memory
/// should hold.
///
/// Usage: `nextPart()` gives each part's headers; the part's body is read with `readPiece()` (nil at its end) or,
/// for a small text field, `readAll(limit:)`. Calling `nextPart()` again skips whatever is left of the previous
/// part, and a part already passed reads as ended. `nextPart()` returns nil after the close delimiter, having read
/// (and dropped) the epilogue to the body's end so that the connection can carry the next request.
///
/// Memory: the reader keeps the unread bytes of at most one source chunk plus what it cannot hand out yet, which
/// is at most `delimiter.count - 1` bytes in a part's body (they may be the start of a delimiter split across
/// chunks) and the unfinished header line while it reads a part's headers (at most ``maxHeaderBytes``). Pieces
/// are copies of the buffer, so a caller holding one piece raises the total to about two chunks plus the boundary;
/// ``peakBufferedBytes`` reports the buffer's largest size.
///
/// The delimiter (`CRLF--boundary`) is found with `memchr` on its first byte and `memcmp` on the rest, so the
/// body is never walked byte by byte in Swift. The CRLF before a delimiter belongs to the delimiter, not to the
/// part (RFC 2046 section 5.1.1); the first delimiter may open the body without one, and anything before it (the
/// preamble) is skipped.
///
/// Errors: malformed framing throws ``MultipartError``; an error thrown by the source passes through unchanged.
/// After any error the reader stays failed and throws the same error again. One thread at a time (a handler's
/// worker thread, where blocking on the source is fine).
public final class MultipartFormReader {
    /// A part's header block (its lines and CRLFs, blank line included) may be at most this long.
    public static let maxHeaderBytes = 8 << 10
    /// A part may have at most this many header lines.
    public static let maxHeaderLines = 20
    /// A body may have at most this many parts: a form has a few fields, so more is abuse.
    public static let maxParts = 100

    /// One part of the form: its headers, parsed, and its body, read through the reader that produced it.
    public struct Part {
        /// The field's name (`Content-Disposition: form-data; name="..."`).
        public let name: String
        /// The file's name as the client sent it (`filename*` of RFC 5987 wins over `filename`); nil for a plain
        /// field. Never a safe path as is: it may hold `/`, `..` or anything else.
        public let filename: String?
        /// The part's `Content-Type` as sent; `text/plain` when absent (RFC 7578 section 4.4).
        public let contentType: String
        /// Every header of the part in order, names lowercased (for the rare `Content-Transfer-Encoding` and such).
        public let headers: [(name: String, value: String)]

        private let reader: MultipartFormReader
        private let index: Int

        fileprivate init(
            name: String, filename: String?, contentType: String, headers: [(name: String, value: String)], reader: MultipartFormReader,
            index: Int
        ) {
            self.name = name
            self.filename = filename
            self.contentType = contentType
            self.headers = headers
            self.reader = reader
            self.index = index
        }

        /// The next piece of this part's body, never empty; nil at its end (or once the reader moved past it).
        public func readPiece() throws -> [UInt8]? {
            try reader.readPiece(ofPart: index)
        }

        /// The rest of this part's body in memory, for small fields; throws ``MultipartError/partTooLarge(name:limit:)``
        /// past `limit` bytes (having buffered no more than `limit` plus one piece).
        public func readAll(limit: Int) throws -> [UInt8] {
            var all: [UInt8] = []
            while let piece = try readPiece() {
                if all.count + piece.count > limit { throw reader.fail(MultipartError.partTooLarge(name: name, limit: limit)) }
                all += piece
            }
            return all
        }
    }

    /// Where the reader is in the body.
    private enum Position {
        /// Before the first delimiter.
        case preamble
        /// Just after a delimiter: `--` (close) or the end of the delimiter line comes next.
        case afterDelimiter
        /// Inside the body of the part numbered so.
        case body(Int)
        /// After the close delimiter and the epilogue.
        case finished
    }

    private let source: () throws -> [UInt8]?
    /// `CRLF--boundary`.
    private let delimiter: [UInt8]
    /// Unread bytes are `buffer[start...]`; what is before `start` has been handed out or skipped.
    private var buffer: [UInt8]
    private var start = 0
    private var sourceEnded = false
    private var position = Position.preamble
    private var partCount = 0
    private var failure: (any Error)?

    /// The most bytes the reader's buffer held at once (the memory bound's witness in tests).
    public private(set) var peakBufferedBytes = 0

    /// A reader of the body whose chunks `source` returns in order (nil at the end), for a body sent with
    /// `boundary` (from ``boundary(fromContentType:)``).
    public init(boundary: String, source: @escaping () throws -> [UInt8]?) throws(MultipartError) {
        guard Self.isValidBoundary(Array(boundary.utf8)) else { throw .invalidBoundary }
        self.source = source
        delimiter = Array("\r\n--\(boundary)".utf8)
        // The body's first delimiter line may open the body with no CRLF before it: a CRLF in front makes it one
        // like the others (and a preamble's last line end is part of its delimiter anyway).
        buffer = [13, 10]
        peakBufferedBytes = buffer.count
    }

    /// A reader of a streamed request body; its `RequestBodyError`s pass through unchanged.
    public convenience init(boundary: String, body: RequestBodyStream) throws(MultipartError) {
        try self.init(boundary: boundary) { try body.next() }
    }

    // MARK: - Parts

    /// The next part, with its headers read; nil after the close delimiter. Skips what is left of the previous part.
    public func nextPart() throws -> Part? {
        if let failure { throw failure }
        do {
            switch position {
            case .preamble: try skipPreamble()
            case .body: while try nextBodyRange() != nil {}
            case .afterDelimiter: break
            case .finished: return nil
            }
            guard try readDelimiterLineEnd() else {
                try drainEpilogue()
                position = .finished
                return nil
            }
            let part = try readPartHeaders()
            position = .body(partCount)
            return part
        } catch {
            throw fail(error)
        }
    }

    /// Remembers the first failure, so that every later call throws it too; returns it for throwing.
    fileprivate func fail(_ error: any Error) -> any Error {
        if failure == nil { failure = error }
        return error
    }

    fileprivate func readPiece(ofPart index: Int) throws -> [UInt8]? {
        if let failure { throw failure }
        guard case .body(let current) = position, current == index else { return nil }
        do {
            guard let range = try nextBodyRange() else { return nil }
            return Array(buffer[range])
        } catch {
            throw fail(error)
        }
    }

    /// Skips to the first delimiter.
    private func skipPreamble() throws {
        while true {
            if let at = findDelimiter() {
                start = at + delimiter.count
                position = .afterDelimiter
                return
            }
            // Only the last bytes could begin a delimiter that the next chunk completes.
            start = max(start, buffer.count - (delimiter.count - 1))
            guard try fetch() else { throw MultipartError.missingBoundary }
        }
    }

    /// The next run of the current part's body in `buffer`, consumed; nil at the part's end, with the delimiter
    /// consumed too.
    private func nextBodyRange() throws -> Range<Int>? {
        while true {
            if let at = findDelimiter() {
                if at > start {
                    defer { start = at }
                    return start..<at
                }
                start = at + delimiter.count
                position = .afterDelimiter
                return nil
            }
            // Everything but a possible delimiter start is body.
            let safeEnd = buffer.count - (delimiter.count - 1)
            if safeEnd > start {
                defer { start = safeEnd }
                return start..<safeEnd
            }
            guard try fetch() else { throw MultipartError.truncated }
        }
    }

    /// After a delimiter: true when its line ends (optional transport padding, then CRLF) and a part follows, false
    /// for the close delimiter's `--`.
    private func readDelimiterLineEnd() throws -> Bool {
        while buffer.count - start < 2 {
            guard try fetch() else { throw MultipartError.truncated }
        }
        if buffer[start] == UInt8(ascii: "-") && buffer[start + 1] == UInt8(ascii: "-") {
            start += 2
            return false
        }
        // Only transport padding (spaces, tabs) may come between a delimiter and its CRLF.
        let next = buffer[start]
        guard next == 13 || next == UInt8(ascii: " ") || next == UInt8(ascii: "\t") else { throw MultipartError.malformedDelimiter }
        let padding = try readLine(limit: Self.maxHeaderBytes)
        guard padding.allSatisfy({ $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }) else { throw MultipartError.malformedDelimiter }
        return true
    }

    /// Reads the source to its end, dropping the epilogue, so the request body is consumed whole.
    private func drainEpilogue() throws {
        start = buffer.count
        while try fetch() { start = buffer.count }
        buffer = []
        start = 0
    }

    /// Reads a part's header block (through its blank line) and parses what the form needs of it.
    private func readPartHeaders() throws -> Part {
        partCount += 1
        guard partCount <= Self.maxParts else { throw MultipartError.tooManyParts }
        var fields: [(name: String, value: [UInt8])] = []
        var budget = Self.maxHeaderBytes
        while true {
            let line = try readLine(limit: budget)
            budget -= line.count + 2
            if line.isEmpty { break }
            if line[0] == UInt8(ascii: " ") || line[0] == UInt8(ascii: "\t") {
                // An obsolete folded continuation (RFC 5322 section 3.2.2): it belongs to the previous header.
                guard !fields.isEmpty else { throw MultipartError.malformedHeader }
                fields[fields.count - 1].value += [UInt8(ascii: " ")] + Self.trimmed(line[...])
                continue
            }
            guard fields.count < Self.maxHeaderLines else { throw MultipartError.tooManyHeaderLines }
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > 0,
                !line[..<colon].contains(where: { $0 <= 0x20 || $0 >= 0x7F })
            else { throw MultipartError.malformedHeader }
            fields.append((Self.lowercasedASCII(line[..<colon]), Self.trimmed(line[(colon + 1)...])))
        }
        guard let disposition = fields.first(where: { $0.name == "content-disposition" }) else {
            throw MultipartError.missingContentDisposition
        }
        let (name, filename) = try Self.parseContentDisposition(disposition.value)
        let contentType = fields.first(where: { $0.name == "content-type" }).map { String(decoding: $0.value, as: UTF8.self) }
        return Part(
            name: name, filename: filename, contentType: contentType ?? "text/plain",
            headers: fields.map { ($0.name, String(decoding: $0.value, as: UTF8.self)) }, reader: self, index: partCount)
    }

    // MARK: - Buffer

    /// Appends the source's next chunk to the unread bytes, dropping the read ones; false once the source has ended.
    private func fetch() throws -> Bool {
        if sourceEnded { return false }
        guard let chunk = try source() else {
            sourceEnded = true
            return false
        }
        let unread = buffer.count - start
        if unread == 0 {
            // The usual case in a large part: the chunk becomes the buffer without a copy.
            buffer = chunk
        } else {
            var joined: [UInt8] = []
            joined.reserveCapacity(unread + chunk.count)
            joined += buffer[start...]
            joined += chunk
            buffer = joined
        }
        start = 0
        peakBufferedBytes = max(peakBufferedBytes, buffer.count)
        return true
    }

    /// The index of the first delimiter at or after `start`.
    private func findDelimiter() -> Int? {
        Self.find(delimiter, in: buffer, from: start)
    }

    /// The next line (without its CRLF), consumed; throws ``MultipartError/headersTooLarge`` when the line and its
    /// CRLF would be over `limit` bytes, ``MultipartError/truncated`` when the body ends first.
    private func readLine(limit: Int) throws -> [UInt8] {
        var searchFrom = start
        while true {
            if let lineEnd = Self.find([13, 10], in: buffer, from: searchFrom) {
                guard lineEnd - start + 2 <= limit else { throw MultipartError.headersTooLarge }
                defer { start = lineEnd + 2 }
                return Array(buffer[start..<lineEnd])
            }
            guard buffer.count - start + 1 <= limit else { throw MultipartError.headersTooLarge }
            // The bytes searched hold no CRLF, except one that the next chunk completes after a final CR.
            let searched = max(0, buffer.count - start - 1)
            guard try fetch() else { throw MultipartError.truncated }
            searchFrom = start + searched
        }
    }

    /// The index of `needle` in `haystack` at or after `from`: `memchr` finds each candidate first byte, `memcmp`
    /// checks the rest, so a body with few CRs is scanned at memory speed.
    private static func find(_ needle: [UInt8], in haystack: [UInt8], from: Int) -> Int? {
        haystack.withUnsafeBytes { hay in
            needle.withUnsafeBytes { pattern in
                guard let base = hay.baseAddress, let patternBase = pattern.baseAddress else { return nil }
                let first = Int32(pattern[0])
                var at = from
                while hay.count - at >= pattern.count {
                    guard let hit = memchr(base + at, first, hay.count - pattern.count + 1 - at) else { return nil }
                    let index = UnsafeRawPointer(hit) - base
                    if memcmp(hit, patternBase, pattern.count) == 0 { return index }
                    at = index + 1
                }
                return nil
            }
        }
    }

    // MARK: - Header values

    /// The boundary of a `multipart/form-data` content type (`boundary=` quoted or not, any case); nil for another
    /// type or a missing or invalid boundary (RFC 2046: 1 to 70 characters).
    public static func boundary(fromContentType contentType: String) -> String? {
        guard let (type, parameters) = parseParameterized(Array(contentType.utf8)), type == "multipart/form-data" else { return nil }
        let boundaries = parameters.filter { $0.name == "boundary" }
        guard boundaries.count == 1, isValidBoundary(boundaries[0].value) else { return nil }
        return String(decoding: boundaries[0].value, as: UTF8.self)
    }

    /// RFC 2046's length rule, with printable ASCII rather than its narrower character set (clients stray from it,
    /// and any such boundary frames as well) and no trailing space, which the delimiter line would lose as padding.
    private static func isValidBoundary(_ boundary: [UInt8]) -> Bool {
        (1...70).contains(boundary.count) && boundary.allSatisfy { (0x20...0x7E).contains($0) } && boundary.last != UInt8(ascii: " ")
    }

    /// The field name and file name of a part's `Content-Disposition: form-data; name="..."; filename="..."`.
    private static func parseContentDisposition(_ value: [UInt8]) throws(MultipartError) -> (name: String, filename: String?) {
        guard let (type, parameters) = parseParameterized(value) else { throw .badContentDisposition("malformed parameters") }
        guard type == "form-data" else { throw .badContentDisposition("type is not form-data") }
        var seen: Set<String> = []
        for parameter in parameters {
            // Two values for one parameter would let a proxy and this server disagree on which counts.
            guard seen.insert(parameter.name).inserted else { throw .badContentDisposition("parameter \(parameter.name) given twice") }
        }
        guard let name = parameters.first(where: { $0.name == "name" }) else { throw .badContentDisposition("no name parameter") }
        var filename = parameters.first(where: { $0.name == "filename" }).map { String(decoding: $0.value, as: UTF8.self) }
        if let extended = parameters.first(where: { $0.name == "filename*" }) {
            guard let decoded = decodeExtendedValue(extended.value) else { throw .badContentDisposition("malformed filename*") }
            filename = decoded
        }
        return (String(decoding: name.value, as: UTF8.self), filename)
    }

    /// Decodes an RFC 5987 extended value, `charset'language'percent-encoded`; UTF-8 and ISO-8859-1 are the two
    /// charsets it requires.
    static func decodeExtendedValue(_ value: [UInt8]) -> String? {
        let pieces = value.split(separator: UInt8(ascii: "'"), maxSplits: 2, omittingEmptySubsequences: false)
        guard pieces.count == 3 else { return nil }
        var bytes: [UInt8] = []
        var i = pieces[2].startIndex
        let encoded = pieces[2]
        while i < encoded.endIndex {
            if encoded[i] == UInt8(ascii: "%") {
                guard encoded.endIndex - i >= 3, let high = PercentDecoding.hexValue(encoded[i + 1]),
                    let low = PercentDecoding.hexValue(encoded[i + 2])
                else { return nil }
                bytes.append(high << 4 | low)
                i += 3
            } else {
                bytes.append(encoded[i])
                i += 1
            }
        }
        switch lowercasedASCII(pieces[0]) {
        case "utf-8": return String(validating: bytes, as: UTF8.self)
        case "iso-8859-1": return String(String.UnicodeScalarView(bytes.map { Unicode.Scalar($0) }))
        default: return nil
        }
    }

    /// Splits `value; a=b; c="d"` into its lowercased leading value and its parameters (names lowercased, quoted
    /// strings unescaped); nil when the syntax is broken (RFC 9110 section 5.6.6).
    static func parseParameterized(_ bytes: [UInt8]) -> (value: String, parameters: [(name: String, value: [UInt8])])? {
        let space = UInt8(ascii: " ")
        let tab = UInt8(ascii: "\t")
        let semicolon = UInt8(ascii: ";")
        let quote = UInt8(ascii: "\"")
        var i = 0
        func skipWhitespace() {
            while i < bytes.count && (bytes[i] == space || bytes[i] == tab) { i += 1 }
        }
        skipWhitespace()
        let valueStart = i
        while i < bytes.count && bytes[i] != semicolon { i += 1 }
        let value = trimmed(bytes[valueStart..<i])
        guard !value.isEmpty else { return nil }
        var parameters: [(name: String, value: [UInt8])] = []
        while i < bytes.count {
            i += 1  // the ';'
            skipWhitespace()
            if i == bytes.count { break }  // a trailing ';'
            let nameStart = i
            while i < bytes.count && bytes[i] != UInt8(ascii: "=") && bytes[i] != semicolon && bytes[i] != space && bytes[i] != tab { i += 1 }
            let name = bytes[nameStart..<i]
            skipWhitespace()
            guard !name.isEmpty, i < bytes.count, bytes[i] == UInt8(ascii: "=") else { return nil }
            i += 1
            skipWhitespace()
            var parameterValue: [UInt8] = []
            if i < bytes.count && bytes[i] == quote {
                i += 1
                var closed = false
                while i < bytes.count {
                    if bytes[i] == quote {
                        closed = true
                        i += 1
                        break
                    }
                    if bytes[i] == UInt8(ascii: "\\") {
                        i += 1
                        guard i < bytes.count else { return nil }
                    }
                    parameterValue.append(bytes[i])
                    i += 1
                }
                guard closed else { return nil }
            } else {
                let tokenStart = i
                while i < bytes.count && bytes[i] != semicolon && bytes[i] != space && bytes[i] != tab && bytes[i] != quote { i += 1 }
                parameterValue = Array(bytes[tokenStart..<i])
                guard !parameterValue.isEmpty else { return nil }
            }
            skipWhitespace()
            guard i == bytes.count || bytes[i] == semicolon else { return nil }
            parameters.append((lowercasedASCII(name), parameterValue))
        }
        return (lowercasedASCII(value[...]), parameters)
    }

    private static func trimmed(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
        var slice = bytes
        while let first = slice.first, first == UInt8(ascii: " ") || first == UInt8(ascii: "\t") { slice.removeFirst() }
        while let last = slice.last, last == UInt8(ascii: " ") || last == UInt8(ascii: "\t") { slice.removeLast() }
        return Array(slice)
    }

    private static func lowercasedASCII(_ bytes: ArraySlice<UInt8>) -> String {
        String(decoding: bytes.map { (0x41...0x5A).contains($0) ? $0 | 0x20 : $0 }, as: UTF8.self)
    }
}
