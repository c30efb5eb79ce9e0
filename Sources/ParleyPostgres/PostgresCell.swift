internal import CLibPQ

/// One value of a result, read in text format with typed accessors that throw on NULL or a type mismatch.
public struct PostgresCell {
    let result: PostgresResult
    let row: Int
    let column: Int

    /// Well-known type OIDs (pg_type.h); only those the accessors check.
    enum OID {
        static let bool: UInt32 = 16, bytea: UInt32 = 17, name: UInt32 = 19, int8: UInt32 = 20, int2: UInt32 = 21
        static let int4: UInt32 = 23, text: UInt32 = 25, oid: UInt32 = 26, json: UInt32 = 114
        static let float4: UInt32 = 700, float8: UInt32 = 701, unknown: UInt32 = 705
        static let bpchar: UInt32 = 1042, varchar: UInt32 = 1043, timestamp: UInt32 = 1114
        static let timestamptz: UInt32 = 1184, numeric: UInt32 = 1700, uuid: UInt32 = 2950, jsonb: UInt32 = 3802
        static let int2Array: UInt32 = 1005, int4Array: UInt32 = 1007, int8Array: UInt32 = 1016
        static let textArray: UInt32 = 1009, varcharArray: UInt32 = 1015, bpcharArray: UInt32 = 1014
        static let nameArray: UInt32 = 1003, uuidArray: UInt32 = 2951, jsonArray: UInt32 = 199, jsonbArray: UInt32 = 3807
        /// The array types read as text arrays (a constant, so a check allocates nothing).
        static let textArrays: [UInt32] = [textArray, varcharArray, bpcharArray, nameArray, uuidArray, jsonArray, jsonbArray]
    }

    /// The column's type OID.
    public var typeOID: UInt32 { result.columnType(column) }

    /// The column's name.
    public var columnName: String { result.columnName(column) }

    /// True for SQL NULL.
    public var isNull: Bool { PQgetisnull(result.pointer, Int32(row), Int32(column)) == 1 }

    private var length: Int { Int(PQgetlength(result.pointer, Int32(row), Int32(column))) }

    /// The raw text bytes (valid while the result lives), or nil for NULL.
    private func withRawBytes<R>(_ body: (UnsafeBufferPointer<UInt8>) throws(PostgresError) -> R) throws(PostgresError) -> R {
        guard !isNull, let value = PQgetvalue(result.pointer, Int32(row), Int32(column)) else {
            throw .decoding("column \(columnName) is NULL")
        }
        let bytes = UnsafeRawPointer(value).assumingMemoryBound(to: UInt8.self)
        return try body(UnsafeBufferPointer(start: bytes, count: length))
    }

    private func text() throws(PostgresError) -> String {
        try withRawBytes { String(decoding: $0, as: UTF8.self) }
    }

    private func check(_ allowed: [UInt32], _ what: String) throws(PostgresError) {
        let type = typeOID
        guard allowed.contains(type) else {
            throw .decoding("column \(columnName) has type OID \(type), not \(what)")
        }
    }

    /// The text form of any non-bytea column (text, varchar, uuid, numeric, enums, …).
    public var string: String {
        get throws(PostgresError) {
            if typeOID == OID.bytea { throw .decoding("column \(columnName) is bytea, not text") }
            return try text()
        }
    }

    /// The UTF-8 text form of any non-bytea column as bytes: stored JSON copied into responses as it is, without
    /// a `String` in between.
    public var textBytes: [UInt8] {
        get throws(PostgresError) {
            try withTextBytes { Array($0) }
        }
    }

    /// Lends `body` the text form's bytes in libpq's buffer (valid only inside `body`): lists copy cells into a
    /// response this way without a `String` per cell. Throws on NULL and on bytea.
    public func withTextBytes<R>(_ body: (UnsafeBufferPointer<UInt8>) -> R) throws(PostgresError) -> R {
        if typeOID == OID.bytea { throw .decoding("column \(columnName) is bytea, not text") }
        return try withRawBytes { body($0) }
    }

    /// A smallint, integer, bigint or oid column.
    public var int: Int {
        get throws(PostgresError) { Int(try int64) }
    }

    /// A smallint, integer, bigint or oid column.
    ///
    /// Parsed from the cell's bytes in place: list routes decode hundreds of integer cells per response, and a
    /// `String` per cell showed in their profiles (bench/RESULTS.md).
    public var int64: Int64 {
        get throws(PostgresError) {
            switch typeOID {
            case OID.int2, OID.int4, OID.int8, OID.oid: break
            default: throw .decoding("column \(columnName) has type OID \(typeOID), not an integer")
            }
            return try withRawBytes { (raw) throws(PostgresError) -> Int64 in
                guard let value = Self.parseInt64(raw) else { throw .decoding("column \(columnName): bad integer") }
                return value
            }
        }
    }

    /// Decimal ASCII with an optional sign, as PostgreSQL prints integers; nil on anything else or overflow.
    static func parseInt64(_ raw: UnsafeBufferPointer<UInt8>) -> Int64? {
        var index = 0
        let negative = raw.first == UInt8(ascii: "-")
        if negative || raw.first == UInt8(ascii: "+") { index = 1 }
        guard index < raw.count else { return nil }
        var value: Int64 = 0
        while index < raw.count {
            let digit = raw[index] &- UInt8(ascii: "0")
            guard digit < 10 else { return nil }
            // Accumulate negatively so Int64.min parses too.
            let (shifted, o1) = value.multipliedReportingOverflow(by: 10)
            let (next, o2) = shifted.subtractingReportingOverflow(Int64(digit))
            guard !o1, !o2 else { return nil }
            value = next
            index += 1
        }
        if negative { return value }
        return value == .min ? nil : -value
    }

    /// A boolean column.
    public var bool: Bool {
        get throws(PostgresError) {
            guard typeOID == OID.bool else { throw .decoding("column \(columnName) has type OID \(typeOID), not boolean") }
            return try withRawBytes { (raw) throws(PostgresError) -> Bool in
                guard raw.count == 1 else { throw .decoding("column \(columnName): bad boolean") }
                switch raw[0] {
                case UInt8(ascii: "t"): return true
                case UInt8(ascii: "f"): return false
                default: throw .decoding("column \(columnName): bad boolean")
                }
            }
        }
    }

    /// A real, double precision, numeric or integer column.
    public var double: Double {
        get throws(PostgresError) {
            try check([OID.float4, OID.float8, OID.numeric, OID.int2, OID.int4, OID.int8], "a number")
            let text = try text()
            switch text {
            case "NaN": return .nan
            case "Infinity": return .infinity
            case "-Infinity": return -.infinity
            default:
                guard let value = Double(text) else { throw .decoding("column \(columnName): bad number") }
                return value
            }
        }
    }

    /// A bytea column (hex output format, the server default since 9.0; escape format is handed to libpq; a binary
    /// result's bytes as they are).
    public var bytes: [UInt8] {
        get throws(PostgresError) {
            try check([OID.bytea], "bytea")
            return try withRawBytes { (raw) throws(PostgresError) -> [UInt8] in
                if result.isBinary(column) { return Array(raw) }
                if raw.count >= 2, raw[0] == UInt8(ascii: "\\"), raw[1] == UInt8(ascii: "x") {
                    return try Self.decodeHex(raw, columnName: columnName)
                }
                return try Self.unescapeBytea(raw, columnName: columnName)
            }
        }
    }

    /// A json or jsonb column, as its raw text.
    public var json: String {
        get throws(PostgresError) {
            try check([OID.json, OID.jsonb], "json")
            return try text()
        }
    }

    /// A text-like array column; NULL elements are an error (see `optionalStringArray`).
    public var stringArray: [String] {
        get throws(PostgresError) {
            let elements = try optionalStringArray
            var out: [String] = []
            out.reserveCapacity(elements.count)
            for element in elements {
                guard let element else { throw .decoding("column \(columnName): NULL array element") }
                out.append(element)
            }
            return out
        }
    }

    /// A text-like array column, NULL elements as nil.
    public var optionalStringArray: [String?] {
        get throws(PostgresError) {
            try check(OID.textArrays, "a text array")
            // Most array columns are empty (a message's mentions): no String, no parser for `{}`.
            if try withRawBytes({ $0.count == 2 && $0[0] == UInt8(ascii: "{") && $0[1] == UInt8(ascii: "}") }) { return [] }
            return try PostgresArrayParser.parse(try text(), columnName: columnName)
        }
    }

    /// An integer array column; NULL elements are an error (see `optionalIntArray`).
    public var intArray: [Int] {
        get throws(PostgresError) {
            var out: [Int] = []
            for element in try optionalIntArray {
                guard let element else { throw .decoding("column \(columnName): NULL array element") }
                out.append(element)
            }
            return out
        }
    }

    /// An integer array column, NULL elements as nil.
    public var optionalIntArray: [Int?] {
        get throws(PostgresError) {
            try check([OID.int2Array, OID.int4Array, OID.int8Array], "an integer array")
            var out: [Int?] = []
            for element in try PostgresArrayParser.parse(try text(), columnName: columnName) {
                guard let element else {
                    out.append(nil)
                    continue
                }
                guard let value = Int(element) else { throw .decoding("column \(columnName): bad integer element") }
                out.append(value)
            }
            return out
        }
    }

    /// A timestamptz (or timestamp, read as UTC) as milliseconds since the Unix epoch; a bigint is returned as is.
    ///
    /// Needs the server's default ISO DateStyle; ±infinity is an error.
    public var timestampMillis: Int64 {
        get throws(PostgresError) {
            let type = typeOID
            if type == OID.int8 || type == OID.int4 { return try int64 }
            try check([OID.timestamptz, OID.timestamp], "a timestamp")
            guard let value = PostgresTimestampParser.millis(try text()) else {
                throw .decoding("column \(columnName): unsupported timestamp text (needs DateStyle ISO, finite)")
            }
            return value
        }
    }

    private static func decodeHex(_ raw: UnsafeBufferPointer<UInt8>, columnName: String) throws(PostgresError) -> [UInt8] {
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        let count = (raw.count - 2) / 2
        guard (raw.count - 2) % 2 == 0 else { throw .decoding("column \(columnName): odd bytea hex length") }
        var out = [UInt8](repeating: 0, count: count)
        for i in 0..<count {
            guard let hi = nibble(raw[2 + 2 * i]), let lo = nibble(raw[3 + 2 * i]) else {
                throw .decoding("column \(columnName): bad bytea hex")
            }
            out[i] = hi << 4 | lo
        }
        return out
    }

    private static func unescapeBytea(_ raw: UnsafeBufferPointer<UInt8>, columnName: String) throws(PostgresError) -> [UInt8] {
        // PQunescapeBytea wants a NUL-terminated string; the value from PQgetvalue is one.
        var length = 0
        guard let base = raw.baseAddress, let out = PQunescapeBytea(base, &length) else {
            throw .decoding("column \(columnName): bad bytea")
        }
        defer { PQfreemem(out) }
        return Array(UnsafeBufferPointer(start: out, count: length))
    }
}

/// Parses one-dimensional array literals as the server prints them: `{a,"b,c",NULL,"q\"uote"}`.
enum PostgresArrayParser {
    static func parse(_ text: String, columnName: String = "?") throws(PostgresError) -> [String?] {
        var scalars = Array(text.unicodeScalars)[...]
        // A non-default lower bound is printed as a prefix: `[0:1]={…}`.
        if scalars.first == "[", let eq = scalars.firstIndex(of: "=") { scalars = scalars[(eq + 1)...] }
        guard scalars.first == "{", scalars.last == "}" else {
            throw .decoding("column \(columnName): not an array literal")
        }
        scalars = scalars.dropFirst().dropLast()
        if scalars.isEmpty { return [] }
        var result: [String?] = []
        var i = scalars.startIndex
        while true {
            var element = String.UnicodeScalarView()
            var quoted = false
            if i < scalars.endIndex, scalars[i] == "{" {
                throw .decoding("column \(columnName): multi-dimensional arrays are not supported")
            }
            if i < scalars.endIndex, scalars[i] == "\"" {
                quoted = true
                i += 1
                while true {
                    guard i < scalars.endIndex else { throw .decoding("column \(columnName): unterminated array element") }
                    let c = scalars[i]
                    if c == "\\" {
                        i += 1
                        guard i < scalars.endIndex else { throw .decoding("column \(columnName): bad array escape") }
                        element.append(scalars[i])
                    } else if c == "\"" {
                        i += 1
                        break
                    } else {
                        element.append(c)
                    }
                    i += 1
                }
            } else {
                while i < scalars.endIndex, scalars[i] != "," {
                    if scalars[i] == "\\" { i += 1 }
                    guard i < scalars.endIndex else { throw .decoding("column \(columnName): bad array escape") }
                    element.append(scalars[i])
                    i += 1
                }
            }
            let value = String(element)
            result.append(!quoted && value.uppercased() == "NULL" ? nil : value)
            if i >= scalars.endIndex { break }
            guard scalars[i] == "," else { throw .decoding("column \(columnName): bad array literal") }
            i += 1
        }
        return result
    }
}

/// Parses ISO DateStyle timestamps: `2024-05-06 07:08:09.123456+02:30[:15]` (offset optional, ` BC` suffix).
enum PostgresTimestampParser {
    static func millis(_ text: String) -> Int64? {
        var s = Substring(text)
        var bc = false
        if s.hasSuffix(" BC") {
            bc = true
            s = s.dropLast(3)
        }
        let bytes = Array(s.utf8)
        var i = 0
        func number(_ maxDigits: Int = 20) -> Int64? {
            var value: Int64 = 0
            var digits = 0
            while i < bytes.count, digits < maxDigits, bytes[i] >= 48, bytes[i] <= 57 {
                value = value * 10 + Int64(bytes[i] - 48)
                i += 1
                digits += 1
            }
            return digits > 0 ? value : nil
        }
        func expect(_ c: Character) -> Bool {
            guard i < bytes.count, bytes[i] == c.asciiValue! else { return false }
            i += 1
            return true
        }
        guard var year = number(), expect("-"), let month = number(2), expect("-"), let day = number(2),
            expect(" ") || expect("T"), let hour = number(2), expect(":"), let minute = number(2), expect(":"),
            let second = number(2)
        else { return nil }
        var micros: Int64 = 0
        if expect(".") {
            let start = i
            guard let fraction = number(6) else { return nil }
            var scale = i - start
            micros = fraction
            while scale < 6 {
                micros *= 10
                scale += 1
            }
            while i < bytes.count, bytes[i] >= 48, bytes[i] <= 57 { i += 1 }
        }
        var offsetSeconds: Int64 = 0
        if i < bytes.count, bytes[i] == UInt8(ascii: "+") || bytes[i] == UInt8(ascii: "-") {
            let sign: Int64 = bytes[i] == UInt8(ascii: "-") ? -1 : 1
            i += 1
            guard let oh = number(2) else { return nil }
            var om: Int64 = 0
            var os: Int64 = 0
            if expect(":") { guard let m = number(2) else { return nil }; om = m }
            if expect(":") { guard let sec = number(2) else { return nil }; os = sec }
            offsetSeconds = sign * (oh * 3600 + om * 60 + os)
        }
        guard i == bytes.count else { return nil }
        if bc { year = 1 - year }
        let days = daysFromCivil(year, month, day)
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offsetSeconds
        return seconds * 1000 + floorDiv(micros, 1000)
    }
}
