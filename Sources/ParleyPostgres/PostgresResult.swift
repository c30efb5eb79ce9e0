internal import CLibPQ

/// The rows (or command status) of one statement; owns its `PGresult` and clears it exactly once in `deinit`.
///
/// Not `Sendable`: read it on the thread that ran the query, copy values out into your own types.
public final class PostgresResult {
    let pointer: OpaquePointer
    /// Number of rows returned.
    public let rowCount: Int
    /// Number of columns returned.
    public let columnCount: Int
    private lazy var columnIndexes: [String: Int] = {
        var map: [String: Int] = [:]
        for i in (0..<columnCount).reversed() { map[columnName(i)] = i }
        return map
    }()

    init(_ pointer: OpaquePointer) {
        self.pointer = pointer
        self.rowCount = Int(PQntuples(pointer))
        self.columnCount = Int(PQnfields(pointer))
    }

    deinit { PQclear(pointer) }

    /// The name of column `index` as the server reported it.
    public func columnName(_ index: Int) -> String {
        precondition(index >= 0 && index < columnCount, "column index out of range")
        return PQfname(pointer, Int32(index)).map { String(cString: $0) } ?? ""
    }

    /// The index of the first column named exactly `name`, if any.
    public func columnIndex(_ name: String) -> Int? { columnIndexes[name] }

    /// The type OID of column `index`.
    public func columnType(_ index: Int) -> UInt32 { UInt32(PQftype(pointer, Int32(index))) }
    /// Whether column `index` came in binary format (``PostgresConnection/queryBinary(sql:_:bytes:)``).
    func isBinary(_ index: Int) -> Bool { PQfformat(pointer, Int32(index)) == 1 }

    /// Rows affected by INSERT/UPDATE/DELETE/MERGE/SELECT/MOVE/FETCH/COPY (0 for other commands).
    public var affectedRows: Int {
        guard let text = PQcmdTuples(pointer) else { return 0 }
        return Int(String(cString: text)) ?? 0
    }

    /// The row at `index`.
    public subscript(index: Int) -> PostgresRow {
        precondition(index >= 0 && index < rowCount, "row index out of range")
        return PostgresRow(result: self, row: index)
    }

    /// Every row, in order.
    public var rows: [PostgresRow] { (0..<rowCount).map { PostgresRow(result: self, row: $0) } }

    /// The first row, or nil when there are none.
    public var first: PostgresRow? { rowCount > 0 ? self[0] : nil }
}

extension PostgresResult: RandomAccessCollection {
    public var startIndex: Int { 0 }
    public var endIndex: Int { rowCount }
}

/// One row of a `PostgresResult`; cells by column index or name.
public struct PostgresRow {
    @usableFromInline let result: PostgresResult
    @usableFromInline let row: Int

    /// The cell in column `column`.
    public subscript(column: Int) -> PostgresCell {
        precondition(column >= 0 && column < result.columnCount, "column index out of range")
        return PostgresCell(result: result, row: row, column: column)
    }

    /// The cell in the column named `name`; traps if there is no such column (a programming error).
    public subscript(name: String) -> PostgresCell {
        guard let column = result.columnIndex(name) else { preconditionFailure("no column named \(name)") }
        return PostgresCell(result: result, row: row, column: column)
    }

    /// The cell in the column named `name`, or a decoding error if there is none.
    public func cell(named name: String) throws(PostgresError) -> PostgresCell {
        guard let column = result.columnIndex(name) else { throw .decoding("no column named \(name)") }
        return PostgresCell(result: result, row: row, column: column)
    }

    /// Decodes column `column` as `T` (use an Optional type for nullable columns).
    public func decode<T: PostgresDecodable>(_ type: T.Type = T.self, at column: Int) throws(PostgresError) -> T {
        try T(postgresCell: self[column])
    }

    /// Decodes the column named `name` as `T`.
    public func decode<T: PostgresDecodable>(_ type: T.Type = T.self, named name: String) throws(PostgresError) -> T {
        try T(postgresCell: cell(named: name))
    }
}
