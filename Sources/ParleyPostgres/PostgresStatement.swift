/// A statement that carries its SQL, its inputs and the type of its rows, in the spirit of postgres-nio's prepared
/// statements: the code that runs it gets typed values, never `row[n]`.
///
///     let statement = PostgresStatement(
///         "SELECT user_id, name FROM users WHERE app_id = \(appID)", rows: (String, String?).self)
///     for (id, name) in try db.run(statement) { … }
///
/// Rows decode as a tuple in column order (``PostgresRow/decode(_:)``: the count of columns is checked), or through
/// a type of the caller's that reads its columns by name (``PostgresRowDecodable``).
public struct PostgresStatement<Row> {
    public let query: PostgresQuery
    let decodeRow: (PostgresRow) throws(PostgresError) -> Row

    /// A statement whose rows are tuples of `rows`' members, in column order.
    public init<each Column: PostgresDecodable>(_ query: PostgresQuery, rows: (repeat each Column).Type)
    where Row == (repeat each Column) {
        self.query = query
        decodeRow = { (row) throws(PostgresError) in try row.decode(rows) }
    }

    /// A statement whose rows are one column each.
    public init(_ query: PostgresQuery, column: Row.Type) where Row: PostgresDecodable {
        self.query = query
        decodeRow = { (row) throws(PostgresError) in try Row(postgresCell: row[0]) }
    }

    /// A statement whose rows decode by column name into `Row`.
    public init(_ query: PostgresQuery, rows: Row.Type) where Row: PostgresRowDecodable {
        self.query = query
        decodeRow = { (row) throws(PostgresError) in try Row(row: row) }
    }
}

/// A type read from a row by its columns' names (`try row.decode(Int64.self, named: "seq")`).
public protocol PostgresRowDecodable {
    init(row: PostgresRow) throws(PostgresError)
}

/// An outcome a statement names in SQL (`'muted'`, not `8`) and Swift reads as a case of its enum: the names are the
/// raw values, and a name the enum does not know is a decoding error, not a silent default.
public protocol PostgresOutcome: PostgresDecodable, RawRepresentable, CaseIterable where RawValue == String {}

extension PostgresOutcome {
    public init(postgresCell cell: PostgresCell) throws(PostgresError) {
        let name = try cell.string
        guard let value = Self(rawValue: name) else { throw .decoding("column \(cell.columnName): unknown outcome '\(name)'") }
        self = value
    }

    /// The outcome as a SQL string literal, for statements that name it (raw values are plain lowercase words).
    public var sql: String {
        precondition(rawValue.allSatisfy { $0.isLetter || $0 == "_" }, "an outcome name must be a plain word")
        return "'\(rawValue)'"
    }
}

extension PostgresConnection {
    /// Runs `statement` and decodes every row.
    public func run<Row>(_ statement: PostgresStatement<Row>, prepared: Bool = true) throws(PostgresError) -> [Row] {
        let result = try query(statement.query, prepared: prepared)
        var rows: [Row] = []
        rows.reserveCapacity(result.rowCount)
        for index in 0..<result.rowCount { rows.append(try statement.decodeRow(result[index])) }
        return rows
    }

    /// Runs `statement` and decodes its first row, or nil when there is none.
    public func runFirst<Row>(_ statement: PostgresStatement<Row>, prepared: Bool = true) throws(PostgresError) -> Row? {
        let result = try query(statement.query, prepared: prepared)
        return result.rowCount == 0 ? nil : try statement.decodeRow(result[0])
    }
}
