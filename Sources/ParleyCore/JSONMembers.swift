/// Reads a few members of a JSON object in place, without building a ``JSONValue`` tree: for hot paths that look at a
/// handful of fields of a large document written by the server itself (the push bridge's check of each message event).
///
/// A member is found by its name's raw bytes (names written with escapes are not matched, which the server's own
/// ``JSONWriter`` never does for plain names); values are skipped by structure (strings with their escapes, nested
/// objects and arrays, literals), so nothing is allocated. Input that is not well-formed JSON yields nil, never a crash.
public struct JSONMembers {
    private let bytes: UnsafeBufferPointer<UInt8>

    /// The object (or value) spanning `range` of `bytes`.
    public let range: Range<Int>

    public init(_ bytes: UnsafeBufferPointer<UInt8>, range: Range<Int>? = nil) {
        self.bytes = bytes
        self.range = range ?? 0..<bytes.count
    }

    /// The value of member `name` of this object, or nil when this is not an object or has no such member.
    public func member(_ name: StaticString) -> JSONMembers? {
        var i = skipSpace(range.lowerBound)
        guard i < range.upperBound, bytes[i] == UInt8(ascii: "{") else { return nil }
        i = skipSpace(i + 1)
        while i < range.upperBound, bytes[i] == UInt8(ascii: "\"") {
            guard let keyEnd = stringEnd(i) else { return nil }
            let matches = equals(name, i + 1..<keyEnd - 1)
            i = skipSpace(keyEnd)
            guard i < range.upperBound, bytes[i] == UInt8(ascii: ":") else { return nil }
            let valueStart = skipSpace(i + 1)
            guard let valueEnd = valueEnd(valueStart) else { return nil }
            if matches { return JSONMembers(bytes, range: valueStart..<valueEnd) }
            i = skipSpace(valueEnd)
            guard i < range.upperBound else { return nil }
            if bytes[i] == UInt8(ascii: ",") { i = skipSpace(i + 1) } else { return nil }
        }
        return nil
    }

    /// This value is `null`.
    public var isNull: Bool { literal("null") }

    /// This value as a boolean, nil when it is not one.
    public var bool: Bool? { literal("true") ? true : literal("false") ? false : nil }

    /// This value as an integer, nil when it is not one.
    public var int: Int64? {
        var i = range.lowerBound
        var negative = false
        if i < range.upperBound, bytes[i] == UInt8(ascii: "-") {
            negative = true
            i += 1
        }
        guard i < range.upperBound else { return nil }
        var value: Int64 = 0
        while i < range.upperBound {
            let c = bytes[i]
            guard c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9") else { return nil }
            let (times, o1) = value.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times.addingReportingOverflow(Int64(c - UInt8(ascii: "0")))
            guard !o1 && !o2 else { return nil }
            value = sum
            i += 1
        }
        return negative ? -value : value
    }

    /// Whether this value is the string `text` (compared by its raw bytes: strings without escapes).
    public func isString(_ text: StaticString) -> Bool {
        range.count >= 2 && bytes[range.lowerBound] == UInt8(ascii: "\"") && equals(text, range.lowerBound + 1..<range.upperBound - 1)
    }

    /// This value is a JSON string.
    public var isString: Bool { range.count >= 2 && bytes[range.lowerBound] == UInt8(ascii: "\"") }

    // MARK: - Scanning

    private func literal(_ text: StaticString) -> Bool { equals(text, range) }

    private func equals(_ text: StaticString, _ span: Range<Int>) -> Bool {
        guard span.count == text.utf8CodeUnitCount else { return false }
        for k in 0..<span.count where bytes[span.lowerBound + k] != text.utf8Start[k] { return false }
        return true
    }

    private func skipSpace(_ start: Int) -> Int {
        var i = start
        while i < range.upperBound, bytes[i] == 0x20 || bytes[i] == 0x09 || bytes[i] == 0x0A || bytes[i] == 0x0D { i += 1 }
        return i
    }

    /// The index after the string starting at `start` (its opening quote).
    private func stringEnd(_ start: Int) -> Int? {
        var i = start + 1
        while i < range.upperBound {
            switch bytes[i] {
            case UInt8(ascii: "\\"): i += 2
            case UInt8(ascii: "\""): return i + 1
            default: i += 1
            }
        }
        return nil
    }

    /// The index after the value starting at `start`.
    private func valueEnd(_ start: Int) -> Int? {
        guard start < range.upperBound else { return nil }
        switch bytes[start] {
        case UInt8(ascii: "\""):
            return stringEnd(start)
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            var depth = 0
            var i = start
            while i < range.upperBound {
                switch bytes[i] {
                case UInt8(ascii: "\""):
                    guard let end = stringEnd(i) else { return nil }
                    i = end
                    continue
                case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    depth -= 1
                    if depth == 0 { return i + 1 }
                default: break
                }
                i += 1
            }
            return nil
        default:
            // A number or literal: up to the next delimiter.
            var i = start
            while i < range.upperBound {
                let c = bytes[i]
                if c == UInt8(ascii: ",") || c == UInt8(ascii: "}") || c == UInt8(ascii: "]") || c == 0x20 || c == 0x0A || c == 0x0D
                    || c == 0x09
                {
                    break
                }
                i += 1
            }
            return i > start ? i : nil
        }
    }
}
