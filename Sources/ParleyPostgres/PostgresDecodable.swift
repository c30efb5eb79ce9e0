/// A Swift type that can be read from one result cell (text format); Optional reads NULL as nil.
public protocol PostgresDecodable {
    init(postgresCell cell: PostgresCell) throws(PostgresError)
}

extension String: PostgresDecodable {
    public init(postgresCell cell: PostgresCell) throws(PostgresError) { self = try cell.string }
}

extension Int: PostgresDecodable {
    public init(postgresCell cell: PostgresCell) throws(PostgresError) { self = try cell.int }
}

extension Int64: PostgresDecodable {
    public init(postgresCell cell: PostgresCell) throws(PostgresError) { self = try cell.int64 }
}

extension Int32: PostgresDecodable {
    public init(postgresCell cell: PostgresCell) throws(PostgresError) {
        guard let value = Int32(exactly: try cell.int64) else { throw .decoding("column \(cell.columnName): out of Int32 range") }
        self = value
    }
}

extension Bool: PostgresDecodable {
    public init(postgresCell cell: PostgresCell) throws(PostgresError) { self = try cell.bool }
}

extension Double: PostgresDecodable {
    public init(postgresCell cell: PostgresCell) throws(PostgresError) { self = try cell.double }
}

extension PostgresJSON: PostgresDecodable {
    public init(postgresCell cell: PostgresCell) throws(PostgresError) { self.init(try cell.json) }
}

extension PostgresTimestamp: PostgresDecodable {
    public init(postgresCell cell: PostgresCell) throws(PostgresError) {
        self.init(millisecondsSince1970: try cell.timestampMillis)
    }
}

extension Optional: PostgresDecodable where Wrapped: PostgresDecodable {
    public init(postgresCell cell: PostgresCell) throws(PostgresError) {
        self = cell.isNull ? nil : try Wrapped(postgresCell: cell)
    }
}

/// An element type of an array column that decodes into a Swift array (`text[]` as `[String]`, `int[]`/`bigint[]` as
/// `[Int]`).
public protocol PostgresDecodableArrayElement {
    static func postgresArray(_ cell: PostgresCell) throws(PostgresError) -> [Self]
}

extension String: PostgresDecodableArrayElement {
    public static func postgresArray(_ cell: PostgresCell) throws(PostgresError) -> [String] { try cell.stringArray }
}

extension Int: PostgresDecodableArrayElement {
    public static func postgresArray(_ cell: PostgresCell) throws(PostgresError) -> [Int] { try cell.intArray }
}

extension Array: PostgresDecodable where Element: PostgresDecodableArrayElement {
    public init(postgresCell cell: PostgresCell) throws(PostgresError) { self = try Element.postgresArray(cell) }
}

/// A text or json column's UTF-8 bytes as they are (``PostgresCell/textBytes``): stored JSON copied into a response
/// without a `String` in between.
public struct PostgresTextBytes: PostgresDecodable {
    public let bytes: [UInt8]

    public init(postgresCell cell: PostgresCell) throws(PostgresError) { bytes = try cell.textBytes }
}

/// A column lent as its cell, to read later or only on a condition (a body copied only when it is selected).
extension PostgresCell: PostgresDecodable {
    public init(postgresCell cell: PostgresCell) throws(PostgresError) { self = cell }
}
