/// A statement and its parameters, written as one string whose interpolated values become bound parameters:
/// `"SELECT name FROM users WHERE app_id = \(appID) AND user_id = \(userID)"` sends `… = $1 AND user_id = $2` with
/// the two values bound. A value can never become SQL text, and parameters cannot be listed out of order.
///
/// Parts of the statement itself (a constant fragment shared by several queries, a column list) go in with
/// `\(unsafeSQL: fragment)`, named for what it does (its text becomes SQL as it is); never pass a value that way. Statements kept as static text with numbered parameters (long
/// shared statements such as the message write) use ``init(sql:binds:)``.
public struct PostgresQuery: Sendable, ExpressibleByStringInterpolation {
    /// The text around the bound values: `segments[i]` comes before value `i + 1`, the last one after the last
    /// value. A statement written with numbered parameters keeps its whole text in `numberedSQL` instead.
    private var segments: [String]
    private var numberedSQL: String?
    /// The bound values in parameter order (`nil` binds NULL).
    public private(set) var binds: [(any PostgresEncodable)?]

    /// The SQL text, with `$n` where values are bound.
    public var sql: String {
        if let numberedSQL { return numberedSQL }
        var text = segments[0]
        for (index, segment) in segments.dropFirst().enumerated() {
            text += "$"
            text += String(index + 1)
            text += segment
        }
        return text
    }

    /// A statement written with numbered parameters and its values in order (long shared statements kept as static
    /// text). It can be combined with other queries only when it uses each parameter once, in order ($1, $2, …).
    public init(sql: String, binds: [(any PostgresEncodable)?]) {
        // No segments (an empty array allocates nothing): hot reads take this path on every request.
        segments = []
        numberedSQL = sql
        self.binds = binds
    }

    public init(stringLiteral value: String) {
        segments = [value]
        binds = []
    }

    public init(stringInterpolation: StringInterpolation) {
        segments = stringInterpolation.query.segments
        binds = stringInterpolation.query.binds
    }

    /// Appends `other`'s text and values (its parameters are numbered after this query's).
    public mutating func append(_ other: PostgresQuery) {
        if numberedSQL != nil {
            segments = combinableSegments
            numberedSQL = nil
        }
        let tail = other.combinableSegments
        segments[segments.count - 1] += tail[0]
        segments += tail.dropFirst()
        binds += other.binds
    }

    /// The text around the values; for a statement written with numbered parameters, its text cut at each `$n`, which
    /// must run 1, 2, … once each (a statement that reuses or reorders them cannot be renumbered by cutting).
    private var combinableSegments: [String] {
        guard let numberedSQL else { return segments }
        var cuts: [String] = []
        let bytes = Array(numberedSQL.utf8)
        var start = 0
        var i = 0
        while i < bytes.count {
            guard bytes[i] == UInt8(ascii: "$"), i + 1 < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[i + 1]) else {
                i += 1
                continue
            }
            var end = i + 1
            var number = 0
            while end < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[end]) {
                number = number * 10 + Int(bytes[end] - UInt8(ascii: "0"))
                end += 1
            }
            precondition(number == cuts.count + 1, "a statement combined with others must use $1, $2, … once each, in order")
            cuts.append(String(decoding: bytes[start..<i], as: UTF8.self))
            start = end
            i = end
        }
        precondition(cuts.count == binds.count, "a statement combined with others must use each of its parameters")
        cuts.append(String(decoding: bytes[start...], as: UTF8.self))
        return cuts
    }

    public static func + (lhs: PostgresQuery, rhs: PostgresQuery) -> PostgresQuery {
        var query = lhs
        query.append(rhs)
        return query
    }

    public static func += (lhs: inout PostgresQuery, rhs: PostgresQuery) { lhs.append(rhs) }

    /// Builds the text and the binds as the literal is read.
    public struct StringInterpolation: StringInterpolationProtocol {
        var query = PostgresQuery(stringLiteral: "")

        public init(literalCapacity: Int, interpolationCount: Int) {
            query.segments.reserveCapacity(interpolationCount + 1)
            query.binds.reserveCapacity(interpolationCount)
        }

        public mutating func appendLiteral(_ literal: String) { query.segments[query.segments.count - 1] += literal }

        /// A value: bound as the next parameter (`nil` binds NULL).
        public mutating func appendInterpolation(_ value: (some PostgresEncodable)?) {
            query.binds.append(value)
            query.segments.append("")
        }

        /// A part of a statement built elsewhere (a shared condition, an optional filter), with its values.
        public mutating func appendInterpolation(_ part: PostgresQuery) { query.append(part) }

        /// A fragment of the statement's own text: a constant of the code, never a value from a request.
        public mutating func appendInterpolation(unsafeSQL fragment: String) { query.segments[query.segments.count - 1] += fragment }
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

    /// Runs `query` and returns the number of rows it affected.
    @discardableResult
    public func execute(_ query: PostgresQuery, prepared: Bool = true) throws(PostgresError) -> Int {
        try self.query(query, prepared: prepared).affectedRows
    }
}

extension PostgresRow {
    /// The row's columns, in order, as the types of `types`: `row.decode((String, Int64?).self)`. Use an Optional
    /// type for a nullable column. The row must have exactly as many columns as `types` has members.
    @inlinable  // specialised in the caller: an unspecialised pack decode goes through metadata for every cell
    public func decode<each Column: PostgresDecodable>(_ types: (repeat each Column).Type) throws(PostgresError) -> (repeat each Column) {
        var count = 0
        for _ in repeat (each Column).self { count += 1 }
        guard count == result.columnCount else {
            throw .decoding("the row has \(result.columnCount) columns, decoded as \(count)")
        }
        return try decode(types, at: 0)
    }

    /// The columns from `offset` on, as many as `types` has members, decoded as ``decode(_:)`` decodes a whole row.
    ///
    /// For a row that joins shapes decoded by different code, so that no one tuple is the whole row: a user id
    /// before the status columns a shared decoder reads, a key's columns before the message `MessageRow` reads.
    /// The columns must exist; those outside them are left to the other decoders.
    @inlinable
    public func decode<each Column: PostgresDecodable>(_ types: (repeat each Column).Type, at offset: Int) throws(PostgresError) -> (
        repeat each Column
    ) {
        var count = 0
        for _ in repeat (each Column).self { count += 1 }
        guard offset >= 0, offset + count <= result.columnCount else {
            throw .decoding("the row has \(result.columnCount) columns, decoded as \(count) from column \(offset)")
        }
        var column = offset
        func next<Value: PostgresDecodable>(_ type: Value.Type) throws(PostgresError) -> Value {
            defer { column += 1 }
            return try Value(postgresCell: self[column])
        }
        return (repeat try next((each Column).self))
    }
}

extension PostgresResult {
    /// Every row decoded as ``PostgresRow/decode(_:)`` does.
    @inlinable
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
    @inlinable
    public func decodeFirst<each Column: PostgresDecodable>(_ types: (repeat each Column).Type) throws(PostgresError) -> (repeat each Column)? {
        rowCount == 0 ? nil : try self[0].decode(types)
    }
}
