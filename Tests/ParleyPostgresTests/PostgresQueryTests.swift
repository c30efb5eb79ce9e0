import ParleyPostgres
import Synchronization
import Testing

/// Interpolated binds, typed row decoding, and transactions opened on a pooled connection.
@Suite struct PostgresQueryTests {
    @Test func interpolatedValuesAreBoundNeverSpliced() throws {
        let hostile = "x'); DROP TABLE t; --"
        let query: PostgresQuery = "SELECT \(hostile)::text, \(42)::int, \(nil as String?)::text, \(unsafeSQL: "'fragment'")"
        #expect(query.sql == "SELECT $1::text, $2::int, $3::text, 'fragment'")
        #expect(query.binds.count == 3)

        let db = try freshConnection()
        let row = try #require(try db.query(query).decodeFirst((String, Int, String?, String).self))
        #expect(row.0 == hostile)
        #expect(row.1 == 42)
        #expect(row.2 == nil)
        #expect(row.3 == "fragment")
    }

    @Test func partsCombineWithTheirValuesRenumbered() throws {
        var query: PostgresQuery = "SELECT x FROM generate_series(\(1)::int, \(10)::int) AS x WHERE true"
        let odd: PostgresQuery = " AND x % \(2)::int = \(1)"
        query += odd
        let nested: PostgresQuery = "SELECT count(*) FROM (\(query)) AS s WHERE s.x > \(4)::int"
        #expect(
            nested.sql
                == "SELECT count(*) FROM (SELECT x FROM generate_series($1::int, $2::int) AS x WHERE true AND x % $3::int = $4) AS s WHERE s.x > $5::int"
        )
        #expect(try freshConnection().query(nested).decodeFirst(Int.self) == 3)
        // A string literal in an interpolation is a value like any other.
        let literal: PostgresQuery = "SELECT \("abc")::text"
        #expect(literal.sql == "SELECT $1::text")
    }

    @Test func aNumberedStatementCombinesWhenItUsesEachParameterOnceInOrder() throws {
        // Numbered on either side: its $n follow the values before it, and the values after it follow its own.
        let numbered = PostgresQuery(sql: "SELECT x FROM generate_series($1::int, $2::int) AS x", binds: [1, 12])
        let nested: PostgresQuery = "WITH s AS (\(numbered)) SELECT count(*) FROM s WHERE s.x > \(4)::int AND s.x % \(2)::int = 0"
        #expect(
            nested.sql
                == "WITH s AS (SELECT x FROM generate_series($1::int, $2::int) AS x) SELECT count(*) FROM s WHERE s.x > $3::int AND s.x % $4::int = 0"
        )
        #expect(try freshConnection().query(nested).decodeFirst(Int.self) == 4)
        var lead = PostgresQuery(sql: "SELECT $1::int + $2::int", binds: [2, 3])
        lead += " + \(10)::int"
        #expect(lead.sql == "SELECT $1::int + $2::int + $3::int")
        #expect(try freshConnection().query(lead).decodeFirst(Int.self) == 15)
    }

    @Test func byteaCrossesInBinaryBothWays() throws {
        let db = try freshConnection()
        try db.simpleQuery("CREATE TEMP TABLE blobs (n int, data bytea)")
        let every = (0...255).map(UInt8.init) + [0, 0, 92, 120]  // NUL bytes and a literal "\x" inside
        try db.queryBinary(sql: "INSERT INTO blobs VALUES ($1, $2)", [1], bytes: every)
        try db.queryBinary(sql: "INSERT INTO blobs VALUES ($1, $2)", [2], bytes: [])
        let rows = try db.queryBinary(sql: "SELECT data FROM blobs WHERE n >= $1 ORDER BY n", [1]).decode(PostgresCell.self)
        #expect(try rows.map { try $0.bytes } == [every, []])
        // Written in binary, read as text (hex), and the other way round: the same bytes.
        #expect(try db.query("SELECT data FROM blobs WHERE n = 1").decodeFirst(PostgresCell.self)?.bytes == every)
        try db.query("INSERT INTO blobs VALUES (3, \(every))")
        #expect(try db.queryBinary(sql: "SELECT data FROM blobs WHERE n = $1", [3]).decodeFirst(PostgresCell.self)?.bytes == every)
    }

    @Test func decodesRowsIntoTypedTuples() throws {
        let db = try freshConnection()
        let values = try db.query("SELECT x, 'n' || x, ARRAY['a', x::text] FROM generate_series(1, \(3)) AS x ORDER BY x")
            .decode((Int64, String, [String]).self)
        #expect(values.map(\.0) == [1, 2, 3])
        #expect(values.map(\.1) == ["n1", "n2", "n3"])
        #expect(values.map(\.2) == [["a", "1"], ["a", "2"], ["a", "3"]])
        #expect(try db.query("SELECT 1 WHERE false").decodeFirst(Int.self) == nil)
        #expect(try db.query("SELECT 7").decodeFirst(Int.self) == 7)
    }

    @Test func aColumnCountThatDoesNotMatchIsADecodingError() throws {
        let db = try freshConnection()
        #expect(throws: PostgresError.self) { try db.query("SELECT 1, 2").decode((Int, Int, Int).self) }
        #expect(throws: PostgresError.self) { try db.query("SELECT 1, 2").decode(Int.self) }
    }

    @Test func decodesTheColumnsFromAnOffset() throws {
        let row = try freshConnection().query("SELECT 'lead', 2, NULL::text, 4")[0]
        let (second, third, fourth) = try row.decode((Int64, String?, Int).self, at: 1)
        #expect(second == 2 && third == nil && fourth == 4)
        let (first, afterFirst) = try row.decode((String, Int).self, at: 0)
        #expect(first == "lead" && afterFirst == 2)
        #expect(throws: PostgresError.self) { try row.decode((Int, Int).self, at: 3) }
        #expect(throws: PostgresError.self) { try row.decode((Int, Int).self, at: -1) }
    }

    @Test func aPooledConnectionsTransactionRetriesConflicts() throws {
        let pool = PostgresPool(configuration: try freshDatabase(migrated: false), size: 2)
        defer { pool.shutdown() }
        try pool.withConnection { try $0.simpleQuery("CREATE TABLE t (x int)") }
        let attempts = Atomic<Int>(0)
        try pool.withConnection { db in
            try db.transaction { db in
                try db.query("INSERT INTO t VALUES (\(1))")
                if attempts.add(1, ordering: .relaxed).newValue == 1 {
                    throw PostgresError(kind: .query, sqlState: "40001", message: "could not serialize access")
                }
            }
        }
        #expect(attempts.load(ordering: .relaxed) == 2)
        // The first attempt was rolled back; the retry committed.
        #expect(try pool.withConnection { try $0.query("SELECT count(*) FROM t").decodeFirst(Int.self) } == 1)
    }
}
