/// Why a JSON document was rejected, with the byte offset where the parser stopped.
public struct JSONParseError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Byte offset into the input of the offending byte (or of the end of input).
    public var offset: Int
    /// A short human-readable reason, safe to return to the caller.
    public var message: String

    public init(offset: Int, message: String) {
        self.offset = offset
        self.message = message
    }

    public var description: String { "\(message) at byte \(offset)" }
}

extension JSONValue {
    /// The default nesting limit for request bodies (with the header and body size limits, what bounds a request).
    public static let defaultMaxDepth = 64

    /// Parses one JSON document (RFC 8259, strict) from UTF-8 bytes.
    ///
    /// Rejects invalid UTF-8, unescaped control characters, lone surrogate escapes, leading zeros, non-finite
    /// numbers (`1e400`), trailing garbage and nesting deeper than `maxDepth` arrays/objects.
    ///
    /// ```swift
    /// let v = try JSONValue.parse(Array(#"{"a":[1,2.5]}"#.utf8))
    /// ```
    public static func parse(_ bytes: UnsafeRawBufferPointer, maxDepth: Int = defaultMaxDepth) throws(JSONParseError)
        -> JSONValue
    {
        var parser = JSONParser(bytes, maxDepth: maxDepth)
        return try parser.parseDocument()
    }

    /// Parses one JSON document from a byte array; see ``parse(_:maxDepth:)-(UnsafeRawBufferPointer,_)``.
    public static func parse(_ bytes: [UInt8], maxDepth: Int = defaultMaxDepth) throws(JSONParseError) -> JSONValue {
        try parseNotingNUL(bytes, maxDepth: maxDepth).value
    }

    /// Parses like ``parse(_:maxDepth:)-([UInt8],_)`` and also tells whether a string or member name holds U+0000
    /// (only a `\u0000` escape can put one there), so that a reader that refuses it (``NULCharacter``) looks for
    /// where only when there is one.
    public static func parseNotingNUL(_ bytes: [UInt8], maxDepth: Int = defaultMaxDepth) throws(JSONParseError)
        -> (value: JSONValue, containsNUL: Bool)
    {
        let result: Result<(JSONValue, Bool), JSONParseError> = bytes.withUnsafeBytes { raw in
            var parser = JSONParser(raw, maxDepth: maxDepth)
            do throws(JSONParseError) {
                let value = try parser.parseDocument()
                return .success((value, parser.sawNUL))
            } catch {
                return .failure(error)
            }
        }
        let (value, containsNUL) = try result.get()
        return (value, containsNUL)
    }

    /// Parses one JSON document from a string's UTF-8.
    public static func parse(_ text: String, maxDepth: Int = defaultMaxDepth) throws(JSONParseError) -> JSONValue {
        try parse(Array(text.utf8), maxDepth: maxDepth)
    }
}

/// A single-pass recursive-descent JSON parser over a borrowed byte buffer.
///
/// Value type owned by the caller for the duration of one `parse` call; it never copies the input except for
/// the bytes of strings and numbers it materialises.
struct JSONParser {
    private let base: UnsafeRawBufferPointer
    private var pos = 0
    private let maxDepth: Int
    private var depth = 0
    /// Reused scratch buffer for strings with escapes, so each escaped string does not allocate its own.
    private var scratch: [UInt8] = []
    /// A `\u0000` escape was decoded (raw control bytes are rejected, so this is the only way to U+0000).
    private(set) var sawNUL = false

    init(_ bytes: UnsafeRawBufferPointer, maxDepth: Int) {
        self.base = bytes
        self.maxDepth = maxDepth
    }

    mutating func parseDocument() throws(JSONParseError) -> JSONValue {
        skipWhitespace()
        let value = try parseValue()
        skipWhitespace()
        if pos != base.count { throw fail("unexpected data after the JSON value") }
        return value
    }

    // MARK: - Helpers

    private func fail(_ message: String, at offset: Int? = nil) -> JSONParseError {
        JSONParseError(offset: offset ?? pos, message: message)
    }

    @inline(__always)
    private func peek() -> UInt8? { pos < base.count ? base[pos] : nil }

    @inline(__always)
    private mutating func skipWhitespace() {
        while pos < base.count {
            switch base[pos] {
            case 0x20, 0x09, 0x0A, 0x0D: pos += 1
            default: return
            }
        }
    }

    // MARK: - Values

    private mutating func parseValue() throws(JSONParseError) -> JSONValue {
        guard let c = peek() else { throw fail("unexpected end of input, expected a value") }
        switch c {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"):
            try expectLiteral("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try expectLiteral("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try expectLiteral("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return try parseNumber()
        default:
            throw fail("unexpected character, expected a value")
        }
    }

    private mutating func expectLiteral(_ literal: StaticString) throws(JSONParseError) {
        let n = literal.utf8CodeUnitCount
        let start = pos
        guard base.count - pos >= n else { throw fail("invalid literal", at: start) }
        let lit = literal.utf8Start
        for i in 0..<n where base[pos + i] != lit[i] {
            throw fail("invalid literal", at: start)
        }
        pos += n
    }

    private mutating func enter() throws(JSONParseError) {
        depth += 1
        if depth > maxDepth { throw fail("nesting deeper than \(maxDepth) levels") }
    }

    private mutating func parseArray() throws(JSONParseError) -> JSONValue {
        try enter()
        pos += 1  // [
        var items: [JSONValue] = []
        skipWhitespace()
        if peek() == UInt8(ascii: "]") {
            pos += 1
            depth -= 1
            return .array(items)
        }
        // Most arrays in request bodies are short lists; start with room for a few to skip the 1→2→4 regrowth.
        items.reserveCapacity(4)
        while true {
            skipWhitespace()
            items.append(try parseValue())
            skipWhitespace()
            switch peek() {
            case UInt8(ascii: ","): pos += 1
            case UInt8(ascii: "]"):
                pos += 1
                depth -= 1
                return .array(items)
            case nil: throw fail("unexpected end of input in array")
            default: throw fail("expected ',' or ']' in array")
            }
        }
    }

    private mutating func parseObject() throws(JSONParseError) -> JSONValue {
        try enter()
        pos += 1  // {
        var object = JSONObject()
        skipWhitespace()
        if peek() == UInt8(ascii: "}") {
            pos += 1
            depth -= 1
            return .object(object)
        }
        object.reserveCapacity(8)
        while true {
            skipWhitespace()
            guard peek() == UInt8(ascii: "\"") else {
                throw fail(peek() == nil ? "unexpected end of input in object" : "expected a string key in object")
            }
            let key = try parseString()
            skipWhitespace()
            guard peek() == UInt8(ascii: ":") else { throw fail("expected ':' after object key") }
            pos += 1
            skipWhitespace()
            object[key] = try parseValue()
            skipWhitespace()
            switch peek() {
            case UInt8(ascii: ","): pos += 1
            case UInt8(ascii: "}"):
                pos += 1
                depth -= 1
                return .object(object)
            case nil: throw fail("unexpected end of input in object")
            default: throw fail("expected ',' or '}' in object")
            }
        }
    }

    // MARK: - Strings

    /// Parses a string starting at its opening quote; validates UTF-8 and escapes as it goes.
    private mutating func parseString() throws(JSONParseError) -> String {
        pos += 1  // opening quote
        let start = pos
        // Fast path: no escapes. Scan, validating UTF-8, until the closing quote.
        while true {
            guard pos < base.count else { throw fail("unterminated string", at: start - 1) }
            let c = base[pos]
            if c == UInt8(ascii: "\"") {
                let s = makeString(from: start, to: pos)
                pos += 1
                return s
            } else if c == UInt8(ascii: "\\") {
                break
            } else if c < 0x20 {
                throw fail("unescaped control character in string")
            } else if c < 0x80 {
                pos += 1
            } else {
                try skipUTF8Sequence()
            }
        }
        // Slow path: copy what was scanned, then decode escapes into the scratch buffer.
        scratch.removeAll(keepingCapacity: true)
        scratch.append(contentsOf: UnsafeRawBufferPointer(rebasing: base[start..<pos]))
        while true {
            guard pos < base.count else { throw fail("unterminated string", at: start - 1) }
            let c = base[pos]
            if c == UInt8(ascii: "\"") {
                pos += 1
                return String(decoding: scratch, as: UTF8.self)
            } else if c == UInt8(ascii: "\\") {
                try parseEscape()
            } else if c < 0x20 {
                throw fail("unescaped control character in string")
            } else if c < 0x80 {
                scratch.append(c)
                pos += 1
            } else {
                let s = pos
                try skipUTF8Sequence()
                scratch.append(contentsOf: UnsafeRawBufferPointer(rebasing: base[s..<pos]))
            }
        }
    }

    private func makeString(from start: Int, to end: Int) -> String {
        // Already validated, so decoding cannot substitute replacement characters.
        String(decoding: UnsafeRawBufferPointer(rebasing: base[start..<end]), as: UTF8.self)
    }

    /// Validates one multi-byte UTF-8 sequence at `pos` (RFC 3629: no overlongs, no surrogates, ≤ U+10FFFF).
    @inline(__always)
    private mutating func skipUTF8Sequence() throws(JSONParseError) {
        let b0 = base[pos]
        let n: Int
        var lo: UInt8 = 0x80
        var hi: UInt8 = 0xBF
        switch b0 {
        case 0xC2...0xDF: n = 2
        case 0xE0:
            n = 3
            lo = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: n = 3
        case 0xED:
            n = 3
            hi = 0x9F
        case 0xF0:
            n = 4
            lo = 0x90
        case 0xF1...0xF3: n = 4
        case 0xF4:
            n = 4
            hi = 0x8F
        default: throw fail("invalid UTF-8")
        }
        guard base.count - pos >= n else { throw fail("invalid UTF-8") }
        let b1 = base[pos + 1]
        guard b1 >= lo && b1 <= hi else { throw fail("invalid UTF-8", at: pos + 1) }
        var i = 2
        while i < n {
            guard base[pos + i] & 0xC0 == 0x80 else { throw fail("invalid UTF-8", at: pos + i) }
            i += 1
        }
        pos += n
    }

    /// Decodes one escape sequence at `pos` (the backslash) into `scratch`.
    private mutating func parseEscape() throws(JSONParseError) {
        let escapeStart = pos
        guard pos + 1 < base.count else { throw fail("unterminated escape sequence") }
        let e = base[pos + 1]
        pos += 2
        switch e {
        case UInt8(ascii: "\""): scratch.append(0x22)
        case UInt8(ascii: "\\"): scratch.append(0x5C)
        case UInt8(ascii: "/"): scratch.append(0x2F)
        case UInt8(ascii: "b"): scratch.append(0x08)
        case UInt8(ascii: "f"): scratch.append(0x0C)
        case UInt8(ascii: "n"): scratch.append(0x0A)
        case UInt8(ascii: "r"): scratch.append(0x0D)
        case UInt8(ascii: "t"): scratch.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = UInt32(try parseHex4())
            if (0xD800...0xDBFF).contains(scalar) {
                // A high surrogate must be followed by an escaped low surrogate.
                guard base.count - pos >= 6, base[pos] == UInt8(ascii: "\\"), base[pos + 1] == UInt8(ascii: "u")
                else { throw fail("lone surrogate in \\u escape", at: escapeStart) }
                pos += 2
                let low = UInt32(try parseHex4())
                guard (0xDC00...0xDFFF).contains(low) else {
                    throw fail("lone surrogate in \\u escape", at: escapeStart)
                }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            } else if (0xDC00...0xDFFF).contains(scalar) {
                throw fail("lone surrogate in \\u escape", at: escapeStart)
            }
            if scalar == 0 { sawNUL = true }
            appendUTF8(scalar)
        default:
            throw fail("invalid escape sequence", at: escapeStart)
        }
    }

    private mutating func parseHex4() throws(JSONParseError) -> UInt16 {
        guard base.count - pos >= 4 else { throw fail("truncated \\u escape") }
        var v: UInt16 = 0
        for i in 0..<4 {
            let c = base[pos + i]
            let d: UInt8
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): d = c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): d = c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): d = c - UInt8(ascii: "A") + 10
            default: throw fail("invalid hex digit in \\u escape", at: pos + i)
            }
            v = v << 4 | UInt16(d)
        }
        pos += 4
        return v
    }

    private mutating func appendUTF8(_ scalar: UInt32) {
        switch scalar {
        case 0..<0x80:
            scratch.append(UInt8(scalar))
        case 0x80..<0x800:
            scratch.append(UInt8(0xC0 | (scalar >> 6)))
            scratch.append(UInt8(0x80 | (scalar & 0x3F)))
        case 0x800..<0x10000:
            scratch.append(UInt8(0xE0 | (scalar >> 12)))
            scratch.append(UInt8(0x80 | ((scalar >> 6) & 0x3F)))
            scratch.append(UInt8(0x80 | (scalar & 0x3F)))
        default:
            scratch.append(UInt8(0xF0 | (scalar >> 18)))
            scratch.append(UInt8(0x80 | ((scalar >> 12) & 0x3F)))
            scratch.append(UInt8(0x80 | ((scalar >> 6) & 0x3F)))
            scratch.append(UInt8(0x80 | (scalar & 0x3F)))
        }
    }

    // MARK: - Numbers

    private static func isDigit(_ c: UInt8) -> Bool { c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9") }

    /// Parses `-? (0 | [1-9][0-9]*) (\.[0-9]+)? ([eE][+-]?[0-9]+)?`; integers that fit become `.int`.
    private mutating func parseNumber() throws(JSONParseError) -> JSONValue {
        let start = pos
        var negative = false
        if base[pos] == UInt8(ascii: "-") {
            negative = true
            pos += 1
        }
        guard let first = peek(), Self.isDigit(first) else { throw fail("invalid number: expected a digit") }
        // Accumulate negatively so Int64.min parses without overflow.
        var acc: Int64 = 0
        var fits = true
        if first == UInt8(ascii: "0") {
            pos += 1
            if let c = peek(), Self.isDigit(c) { throw fail("invalid number: leading zero") }
        } else {
            while let c = peek(), Self.isDigit(c) {
                if fits {
                    let (m, o1) = acc.multipliedReportingOverflow(by: 10)
                    let (s, o2) = m.subtractingReportingOverflow(Int64(c - UInt8(ascii: "0")))
                    if o1 || o2 { fits = false } else { acc = s }
                }
                pos += 1
            }
        }
        var isInteger = true
        if peek() == UInt8(ascii: ".") {
            isInteger = false
            pos += 1
            guard let c = peek(), Self.isDigit(c) else { throw fail("invalid number: expected a digit after '.'") }
            while let c = peek(), Self.isDigit(c) { pos += 1 }
        }
        if let e = peek(), e == UInt8(ascii: "e") || e == UInt8(ascii: "E") {
            isInteger = false
            pos += 1
            if let s = peek(), s == UInt8(ascii: "+") || s == UInt8(ascii: "-") { pos += 1 }
            guard let c = peek(), Self.isDigit(c) else {
                throw fail("invalid number: expected a digit in exponent")
            }
            while let c = peek(), Self.isDigit(c) { pos += 1 }
        }
        if isInteger && fits {
            if negative { return .int(acc) }
            if acc != Int64.min { return .int(-acc) }
        }
        let text = String(decoding: UnsafeRawBufferPointer(rebasing: base[start..<pos]), as: UTF8.self)
        guard let d = Double(text), d.isFinite else { throw fail("number out of range", at: start) }
        return .double(d)
    }
}
