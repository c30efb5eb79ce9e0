import Foundation
import ParleyPostgres
import Testing

/// Parameter binding and decoding of every supported type against a real server.
@Suite struct TypeRoundTripTests {
    @Test func textUnicodeLargeAndInjectionAreStoredVerbatim() throws {
        let db = try freshConnection()
        try db.simpleQuery("CREATE TABLE t (id serial PRIMARY KEY, body text)")
        let injection = "'); DROP TABLE t; --\\ $1 \"x\""
        let values = [
            "", "héllo wörld", "emoji 🎉👨‍👩‍👧‍👦 and CJK 漢字", injection, String(repeating: "abcdefghij", count: 100_000),
        ]
        for value in values {
            let id = try db.query(sql: "INSERT INTO t (body) VALUES ($1) RETURNING id", [value])[0][0].int
            let back = try db.query(sql: "SELECT body FROM t WHERE id = $1", [id])[0][0].string
            #expect(back == value)
        }
        #expect(try db.query(sql: "SELECT count(*) FROM t")[0][0].int == values.count)
        #expect(try db.query(sql: "SELECT length(body) FROM t WHERE length(body) > 1000")[0][0].int == 1_000_000)
        #expect(try db.query(sql: "SELECT $1::text", [Substring("sub")])[0][0].string == "sub")
        #expect(throws: PostgresError.self) { try db.query(sql: "SELECT $1::text", ["nul\u{0}byte"]) }
    }

    @Test func nullsBindAndDecode() throws {
        let db = try freshConnection()
        let row = try db.query(sql: "SELECT $1::text AS a, $2::int AS b, $3::bytea AS c", [nil, nil, nil])[0]
        #expect(row["a"].isNull)
        #expect(try row.decode(String?.self, named: "a") == nil)
        #expect(try row.decode(Int?.self, at: 1) == nil)
        #expect(throws: PostgresError.self) { try row["a"].string }
        #expect(throws: PostgresError.self) { try row["c"].bytes }
        let optional: Int? = 5
        #expect(try db.query(sql: "SELECT $1::int", [optional])[0].decode(Int?.self, at: 0) == 5)
    }

    @Test func integersBoolsAndDoubles() throws {
        let db = try freshConnection()
        let row = try db.query(
            sql:
                "SELECT $1::bigint, $2::bigint, $3::int, $4::smallint, $5::bool, $6::bool, $7::float8, $8::float8, $9::numeric, $10::int",
            [Int64.max, Int64.min, Int32.min, Int16.max, true, false, 0.1, -1.5e300, 12.25, 42])[0]
        #expect(try row[0].int64 == .max)
        #expect(try row[1].int64 == .min)
        #expect(try row[2].int == Int(Int32.min))
        #expect(try row.decode(Int32.self, at: 2) == .min)
        #expect(try row[3].int == Int(Int16.max))
        #expect(try row[4].bool == true)
        #expect(try row[5].bool == false)
        #expect(try row[6].double == 0.1)
        #expect(try row[7].double == -1.5e300)
        #expect(try row[8].double == 12.25)
        #expect(try row[9].int == 42)
        // Type mismatches throw instead of guessing.
        #expect(throws: PostgresError.self) { try row[4].int }
        #expect(throws: PostgresError.self) { try row[9].bool }
        #expect(throws: PostgresError.self) { try db.query(sql: "SELECT 'x'::text")[0][0].int }
        #expect(throws: PostgresError.self) { try db.query(sql: "SELECT 'x'::text")[0][0].bytes }
        let special = try db.query(sql: "SELECT $1::float8, $2::float8", [Double.infinity, Double.nan])[0]
        #expect(try special[0].double == .infinity)
        #expect(try special[1].double.isNaN)
    }

    @Test func byteaWithAllByteValues() throws {
        let db = try freshConnection()
        let all = (0...255).map { UInt8($0) }
        let row = try db.query(sql: "SELECT $1::bytea, length($1::bytea), $2::bytea", [all, [UInt8]()])[0]
        #expect(try row[0].bytes == all)
        #expect(try row[1].int == 256)
        #expect(try row[2].bytes == [])
        let big = (0..<1_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        #expect(try db.query(sql: "SELECT $1::bytea", [big])[0][0].bytes == big)
    }

    @Test func arraysWithQuotesCommasNullsAndBackslashes() throws {
        let db = try freshConnection()
        let strings = ["plain", "comma,inside", "\"quoted\"", "back\\slash", "", "NULL", "{brace}", " spaced ", "ünï 🎉"]
        #expect(try db.query(sql: "SELECT $1::text[]", [strings])[0][0].stringArray == strings)
        let withNull: [String?] = ["a", nil, "NULL", "b"]
        #expect(try db.query(sql: "SELECT $1::text[]", [withNull])[0][0].optionalStringArray == withNull)
        #expect(throws: PostgresError.self) { try db.query(sql: "SELECT $1::text[]", [withNull])[0][0].stringArray }
        #expect(try db.query(sql: "SELECT $1::int[]", [[1, -2, 3]])[0][0].intArray == [1, -2, 3])
        #expect(try db.query(sql: "SELECT $1::bigint[]", [[Int64.max, Int64.min]])[0][0].intArray == [Int.max, Int.min])
        #expect(try db.query(sql: "SELECT $1::int[]", [[Int]()])[0][0].intArray == [])
        #expect(try db.query(sql: "SELECT ARRAY[1, NULL, 3]")[0][0].optionalIntArray == [1, nil, 3])
        #expect(try db.query(sql: "SELECT ARRAY['x y', 'z']::varchar[]")[0][0].stringArray == ["x y", "z"])
        #expect(throws: PostgresError.self) { try db.query(sql: "SELECT ARRAY[1]")[0][0].stringArray }
    }

    @Test func jsonAndJsonbRoundTrip() throws {
        let db = try freshConnection()
        let document = #"{"a": [1, 2.5, {"b": "ü \"q\" 🎉"}], "n": null, "t": true}"#
        let row = try db.query(sql: "SELECT $1::jsonb, $1::json, ($1::jsonb)->'a'->2->>'b'", [PostgresJSON(document)])[0]
        #expect(try row[0].json == document)
        #expect(try row[1].json == document)
        #expect(try row[2].string == "ü \"q\" 🎉")
        #expect(try row.decode(PostgresJSON.self, at: 0) == PostgresJSON(document))
    }

    @Test func timestamps() throws {
        let db = try freshConnection()
        let millis: Int64 = 1_709_210_096_789
        let row = try db.query(
            sql:
                "SELECT $1::timestamptz, $1::timestamptz::timestamp, '2024-02-29 12:34:56.789+05:30'::timestamptz, $2::bigint",
            [PostgresTimestamp(millisecondsSince1970: millis), millis])[0]
        #expect(try row[0].timestampMillis == millis)
        #expect(try row[2].timestampMillis == 1_709_190_296_789)
        #expect(try row[3].timestampMillis == millis)
        // Offsets with minutes and seconds, and BC dates, under a non-UTC session time zone.
        try db.simpleQuery("SET TimeZone = 'America/St_Johns'")
        #expect(try db.query(sql: "SELECT $1::timestamptz", [PostgresTimestamp(millisecondsSince1970: millis)])[0][0].timestampMillis == millis)
        try db.simpleQuery("SET TimeZone = 'Europe/Amsterdam'")
        let old = try db.query(
            sql:
                """
                SELECT x, (extract(epoch FROM x) * 1000)::bigint, x::text
                FROM unnest(ARRAY['1900-06-01 12:00:00.5+00', '0044-03-15 12:00:00+00 BC', '2038-01-19 03:14:08+00']::timestamptz[]) AS x
                """)
        #expect(old.count == 3)
        for row in old {
            let text = try row[2].string
            #expect(try row[0].timestampMillis == row[1].int64, "\(text)")
        }
        #expect(try old[0][2].string.hasSuffix("+00:19:32"))
        #expect(
            try db.query(sql: "SELECT extract(epoch FROM $1::timestamptz)::bigint", [PostgresTimestamp(millisecondsSince1970: -62_198_755_200_000)])[
                0][0]
                .int64 == -62_198_755_200)
        #expect(throws: PostgresError.self) { try db.query(sql: "SELECT 'infinity'::timestamptz")[0][0].timestampMillis }
        _ = row
    }

    @Test func columnsByNameAndResultShape() throws {
        let db = try freshConnection()
        let result = try db.query(sql: "SELECT 1 AS one, 'two' AS \"Two\" UNION ALL SELECT 3, 'four'")
        #expect(result.rowCount == 2)
        #expect(result.columnCount == 2)
        #expect(result.columnName(1) == "Two")
        #expect(try result[1]["Two"].string == "four")
        #expect(try result.map { try $0["one"].int } == [1, 3])
        #expect(throws: PostgresError.self) { try result[0].cell(named: "missing") }
        try db.simpleQuery("CREATE TABLE n (x int); INSERT INTO n VALUES (1), (2), (3)")
        #expect(try db.execute(sql: "UPDATE n SET x = x + 1 WHERE x >= $1", [2]) == 2)
    }

    @Test func preparedStatementsAreCachedPerConnection() throws {
        let db = try freshConnection()
        for i in 0..<5 {
            #expect(try db.query(sql: "SELECT $1::int + 1", [i], prepared: true)[0][0].int == i + 1)
        }
        #expect(try db.query(sql: "SELECT $1::text || 'x'", ["a"], prepared: true)[0][0].string == "ax")
        #expect(try db.query(sql: "SELECT count(*) FROM pg_prepared_statements")[0][0].int == 2)
        try db.prepare(name: "explicit", sql: "SELECT $1::text")
        #expect(try db.queryPrepared(name: "explicit", ["hi"])[0][0].string == "hi")
    }

    @Test func preparedStatementSurvivesASchemaChange() throws {
        let db = try freshConnection()
        try db.simpleQuery("CREATE TABLE p (a int); INSERT INTO p VALUES (1)")
        #expect(try db.query(sql: "SELECT * FROM p", prepared: true).columnCount == 1)
        try db.simpleQuery("ALTER TABLE p ADD COLUMN b int")
        // The server refuses the stale plan once; the cache forgets it and the next call re-prepares.
        #expect { try db.query(sql: "SELECT * FROM p", prepared: true) } throws: { ($0 as? PostgresError)?.sqlState == "0A000" }
        #expect(try db.query(sql: "SELECT * FROM p", prepared: true).columnCount == 2)
    }

    @Test func resetReconnects() throws {
        let db = try freshConnection()
        let before = db.backendPID
        try db.reset()
        #expect(db.backendPID != before)
        #expect(!db.isBroken)
        #expect(try db.query(sql: "SELECT 1")[0][0].int == 1)
    }

    @Test func noticesGoToTheLogger() throws {
        let lines = Collector<String>()
        let db = try PostgresConnection(try freshDatabase(migrated: false), logger: PostgresLogger { _, line in lines.append(line) })
        try db.simpleQuery("DROP TABLE IF EXISTS does_not_exist")
        #expect(lines.all.contains { $0.contains("does_not_exist") })
    }
}
