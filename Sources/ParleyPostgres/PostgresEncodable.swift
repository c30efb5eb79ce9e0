/// A Swift value that can be bound as a query parameter, in PostgreSQL's text format.
public protocol PostgresEncodable: Sendable {
    /// The text the server parses for this parameter (never interpolated into SQL).
    var postgresText: String { get }
}

/// A value that can be an element of a PostgreSQL array literal (`{…}`).
public protocol PostgresArrayElement: Sendable {
    /// The element's text, or nil for an SQL NULL element.
    var postgresArrayElementText: String? { get }
    /// Encodes a whole Swift array of this element type (bytes become bytea, everything else an array literal).
    static func postgresEncodeArray(_ elements: [Self]) -> String
}

extension PostgresArrayElement {
    public static func postgresEncodeArray(_ elements: [Self]) -> String {
        PostgresArrayLiteral.encode(elements.map(\.postgresArrayElementText))
    }
}

extension String: PostgresEncodable, PostgresArrayElement {
    public var postgresText: String { self }
    public var postgresArrayElementText: String? { self }
}

extension Substring: PostgresEncodable, PostgresArrayElement {
    public var postgresText: String { String(self) }
    public var postgresArrayElementText: String? { String(self) }
}

extension Int: PostgresEncodable, PostgresArrayElement {
    public var postgresText: String { String(self) }
    public var postgresArrayElementText: String? { String(self) }
}

extension Int64: PostgresEncodable, PostgresArrayElement {
    public var postgresText: String { String(self) }
    public var postgresArrayElementText: String? { String(self) }
}

extension Int32: PostgresEncodable, PostgresArrayElement {
    public var postgresText: String { String(self) }
    public var postgresArrayElementText: String? { String(self) }
}

extension Int16: PostgresEncodable, PostgresArrayElement {
    public var postgresText: String { String(self) }
    public var postgresArrayElementText: String? { String(self) }
}

extension Bool: PostgresEncodable, PostgresArrayElement {
    public var postgresText: String { self ? "t" : "f" }
    public var postgresArrayElementText: String? { postgresText }
}

extension Double: PostgresEncodable, PostgresArrayElement {
    public var postgresText: String {
        if isNaN { return "NaN" }
        if isInfinite { return self > 0 ? "Infinity" : "-Infinity" }
        return "\(self)"
    }
    public var postgresArrayElementText: String? { postgresText }
}

extension Optional: PostgresArrayElement where Wrapped: PostgresArrayElement {
    public var postgresArrayElementText: String? { self?.postgresArrayElementText ?? nil }
}

/// A byte is not a parameter on its own, but `[UInt8]` is a `bytea`.
extension UInt8: PostgresArrayElement {
    public var postgresArrayElementText: String? { String(self) }

    /// `[UInt8]` binds as `bytea` in hex format (`\x…`).
    public static func postgresEncodeArray(_ elements: [UInt8]) -> String {
        let digits: [UInt8] = Array("0123456789abcdef".utf8)
        var out: [UInt8] = [UInt8(ascii: "\\"), UInt8(ascii: "x")]
        out.reserveCapacity(2 + elements.count * 2)
        for byte in elements {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// Arrays of strings and integers bind as PostgreSQL array literals; `[UInt8]` binds as `bytea`.
extension Array: PostgresEncodable where Element: PostgresArrayElement {
    public var postgresText: String { Element.postgresEncodeArray(self) }
}

/// A JSON document bound as text, for `json`/`jsonb` parameters (cast with `$1::jsonb` when needed).
public struct PostgresJSON: PostgresEncodable, Hashable {
    /// The raw JSON text, not validated here (the server validates it).
    public var text: String
    public init(_ text: String) { self.text = text }
    public var postgresText: String { text }
}

/// A point in time bound as `timestamptz` from milliseconds since the Unix epoch.
///
/// Storing `bigint` milliseconds is simpler still; this exists for `timestamptz` columns.
public struct PostgresTimestamp: PostgresEncodable, Hashable {
    public var millisecondsSince1970: Int64
    public init(millisecondsSince1970: Int64) { self.millisecondsSince1970 = millisecondsSince1970 }

    /// ISO 8601 in UTC, which the server accepts whatever its DateStyle is.
    public var postgresText: String {
        let days = floorDiv(millisecondsSince1970, 86_400_000)
        let msOfDay = millisecondsSince1970 - days * 86_400_000
        let (y, m, d) = civilFromDays(days)
        let h = msOfDay / 3_600_000
        let mi = (msOfDay / 60_000) % 60
        let s = (msOfDay / 1000) % 60
        let ms = msOfDay % 1000
        func pad(_ v: Int64, _ w: Int) -> String {
            let t = String(v)
            return String(repeating: "0", count: max(0, w - t.count)) + t
        }
        let year = y > 0 ? pad(y, 4) : pad(1 - y, 4)
        let era = y > 0 ? "" : " BC"
        return "\(year)-\(pad(m, 2))-\(pad(d, 2)) \(pad(h, 2)):\(pad(mi, 2)):\(pad(s, 2)).\(pad(ms, 3))+00\(era)"
    }
}

/// Builds array literals: every element double-quoted, `"` and `\` backslash-escaped, NULL unquoted.
///
/// Works on UTF-8 bytes (both escaped characters are ASCII, so they never occur inside a multi-byte character) and
/// copies each run between them at once: event data (a whole message JSON per event) goes through here on every
/// write, and appending it scalar by scalar cost 3–4 % of a revoke's CPU (bench/RESULTS.md 2026-12-03).
enum PostgresArrayLiteral {
    static func encode(_ elements: [String?]) -> String {
        var capacity = 2
        for element in elements { capacity += (element?.utf8.count ?? 4) + 3 }
        var out: [UInt8] = []
        out.reserveCapacity(capacity + capacity / 16)
        out.append(UInt8(ascii: "{"))
        for (index, element) in elements.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            guard var element else {
                out.append(contentsOf: "NULL".utf8)
                continue
            }
            out.append(UInt8(ascii: "\""))
            element.withUTF8 { appendEscaped($0, to: &out) }
            out.append(UInt8(ascii: "\""))
        }
        out.append(UInt8(ascii: "}"))
        return String(decoding: out, as: UTF8.self)
    }

    private static func appendEscaped(_ bytes: UnsafeBufferPointer<UInt8>, to out: inout [UInt8]) {
        var runStart = 0
        for (i, byte) in bytes.enumerated() where byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<i]))
            out.append(UInt8(ascii: "\\"))
            runStart = i
        }
        out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart...]))
    }
}

func floorDiv(_ a: Int64, _ b: Int64) -> Int64 {
    let q = a / b
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q
}

/// Howard Hinnant's days-from-civil algorithm (proleptic Gregorian, astronomical year numbering).
func daysFromCivil(_ year: Int64, _ month: Int64, _ day: Int64) -> Int64 {
    let y = month <= 2 ? year - 1 : year
    let era = floorDiv(y, 400)
    let yoe = y - era * 400
    let mp = (month + 9) % 12
    let doy = (153 * mp + 2) / 5 + day - 1
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
    return era * 146_097 + doe - 719_468
}

func civilFromDays(_ days: Int64) -> (Int64, Int64, Int64) {
    let z = days + 719_468
    let era = floorDiv(z, 146_097)
    let doe = z - era * 146_097
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
    let mp = (5 * doy + 2) / 153
    let d = doy - (153 * mp + 2) / 5 + 1
    let m = mp < 10 ? mp + 3 : mp - 9
    return (yoe + era * 400 + (m <= 2 ? 1 : 0), m, d)
}
