/// A statement and its parameters, written as one string whose interpolated values become bound parameters:
/// `"SELECT name FROM users WHERE app_id = \(appID) AND user_id = \(userID)"` sends `… = $1 AND user_id = $2` with
/// the two values bound. A value can never become SQL text, and parameters cannot be listed out of order.
///
/// Parts of the statement itself (a constant fragment shared by several queries, a column list) go in with
/// `\(sql: fragment)`; never pass a value that way. Statements kept as static text with numbered parameters (long
/// shared statements such as the message write) use ``init(sql:binds:)``.
public struct PostgresQuery: Sendable, ExpressibleByStringInterpolation {
    /// The SQL text, with `$n` where values are bound.
    public let sql: String
    /// The bound values in parameter order (`nil` binds NULL).
    public let binds: [(any PostgresEncodable)?]

    /// A statement written with numbered parameters and its values in order.
    public init(sql: String, binds: [(any PostgresEncodable)?]) {
        self.sql = sql
        self.binds = binds
    }

    public init(stringLiteral value: String) {
        sql = value
        binds = []
    }

    public init(stringInterpolation: StringInterpolation) {
        sql = stringInterpolation.sql
        binds = stringInterpolation.binds
    }

    /// Builds the text and the binds as the literal is read.
    public struct StringInterpolation: StringInterpolationProtocol {
        var sql = ""
        var binds: [(any PostgresEncodable)?] = []

        public init(literalCapacity: Int, interpolationCount: Int) {
            sql.reserveCapacity(literalCapacity + 4 * interpolationCount)
            binds.reserveCapacity(interpolationCount)
        }

        public mutating func appendLiteral(_ literal: String) { sql += literal }

        /// A value: bound as the next parameter (`nil` binds NULL).
        public mutating func appendInterpolation(_ value: (some PostgresEncodable)?) {
            binds.append(value)
            sql += "$\(binds.count)"
        }

        /// A fragment of the statement's own text: a constant of the code, never a value from a request.
        public mutating func appendInterpolation(sql fragment: String) { sql += fragment }
    }
}

extension PostgresConnection {
    /// Runs `query` with its bound values and returns its rows.
    ///
    /// Prepared by default: the statement is parsed and planned once per connection and reused by its text (queries
    /// whose text varies with their options make one prepared statement per variant, up to the connection's cap).
    @discardableResult
    public func query(_ query: PostgresQuery, prepared: Bool = true) throws(PostgresError) -> PostgresResult {
        try self.query(sql: query.sql, query.binds, prepared: prepared)
    }
}

extension PostgresRow {
    /// The row's columns, in order, as the types of `types`: `row.decode((String, Int64?).self)`. Use an Optional
    /// type for a nullable column. The row must have exactly as many columns as `types` has members.
    public func decode<each Column: PostgresDecodable>(_ types: (repeat each Column).Type) throws(PostgresError) -> (repeat each Column) {
        var count = 0
        for _ in repeat (each Column).self { count += 1 }
        guard count == result.columnCount else {
            throw .decoding("the row has \(result.columnCount) columns, decoded as \(count)")
        }
        var column = 0
        func next<Value: PostgresDecodable>(_ type: Value.Type) throws(PostgresError) -> Value {
            defer { column += 1 }
            return try Value(postgresCell: self[column])
        }
        return (repeat try next((each Column).self))
    }
}

extension PostgresResult {
    /// Every row decoded as ``PostgresRow/decode(_:)`` does.
    public func decode<each Column: PostgresDecodable>(_ types: (repeat each Column).Type) throws(PostgresError) -> [(repeat each Column)] {
        var rows: [(repeat each Column)] = []
        rows.reserveCapacity(rowCount)
        for index in 0..<rowCount { rows.append(try self[index].decode(types)) }
        return rows
    }

    /// Every row's only column as `T` (a one-column pack is not a plain `T` to the type checker, so single
    /// columns have their own overloads).
    public func decode<T: PostgresDecodable>(_ type: T.Type) throws(PostgresError) -> [T] {
        guard columnCount == 1 else { throw .decoding("the rows have \(columnCount) columns, decoded as 1") }
        var values: [T] = []
        values.reserveCapacity(rowCount)
        for index in 0..<rowCount { values.append(try T(postgresCell: self[index][0])) }
        return values
    }

    /// The first row's only column as `T`, or nil when there is no row.
    public func decodeFirst<T: PostgresDecodable>(_ type: T.Type) throws(PostgresError) -> T? {
        guard columnCount == 1 else { throw .decoding("the rows have \(columnCount) columns, decoded as 1") }
        return rowCount == 0 ? nil : try T(postgresCell: self[0][0])
    }

    /// The first row decoded as ``PostgresRow/decode(_:)`` does, or nil when there is none.
    public func decodeFirst<each Column: PostgresDecodable>(_ types: (repeat each Column).Type) throws(PostgresError) -> (repeat each Column)? {
        rowCount == 0 ? nil : try self[0].decode(types)
    }
}
