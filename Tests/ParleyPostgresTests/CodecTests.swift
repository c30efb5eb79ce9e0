import Testing

@testable import ParleyPostgres

/// Pure encoding/decoding logic, no server.
@Suite struct CodecTests {
    @Test func arrayLiteralQuotesEverything() throws {
        #expect(PostgresArrayLiteral.encode(["a", "b,c", "q\"t", "b\\s", nil, "NULL", ""]) == #"{"a","b,c","q\"t","b\\s",NULL,"NULL",""}"#)
        #expect([String]().postgresText == "{}")
        #expect([1, -2, 3].postgresText == #"{"1","-2","3"}"#)
        // Escapes next to each other, at both ends, and beside multi-byte characters survive the parser's reading.
        let awkward: [String?] = [#""中文\"😀\\"#, #""""#, #"\"#, "é", #"{"a":"b\"c"}"#]
        #expect(try PostgresArrayParser.parse(PostgresArrayLiteral.encode(awkward)) == awkward)
    }

    @Test func arrayParserHandlesQuotesNullsAndEscapes() throws {
        #expect(try PostgresArrayParser.parse(#"{a,"b,c",NULL,"NULL","q\"t","b\\s",""}"#) == ["a", "b,c", nil, "NULL", "q\"t", "b\\s", ""])
        #expect(try PostgresArrayParser.parse("{}") == [])
        #expect(try PostgresArrayParser.parse("[0:1]={1,2}") == ["1", "2"])
        #expect(throws: PostgresError.self) { try PostgresArrayParser.parse("{{1,2},{3,4}}") }
        #expect(throws: PostgresError.self) { try PostgresArrayParser.parse("not an array") }
    }

    @Test func byteaEncodesAsHex() {
        #expect([UInt8]([0, 1, 0xab, 0xff]).postgresText == #"\x0001abff"#)
        #expect([UInt8]().postgresText == #"\x"#)
    }

    @Test func timestampsRoundTripThroughText() {
        for millis: Int64 in [0, 1, -1, 1_709_210_096_789, -62_135_596_800_000, 253_402_300_799_999] {
            let text = PostgresTimestamp(millisecondsSince1970: millis).postgresText
            #expect(PostgresTimestampParser.millis(text) == millis, "\(text)")
        }
        #expect(PostgresTimestampParser.millis("2024-02-29 12:34:56.789+05:30") == 1_709_190_296_789)
        #expect(PostgresTimestampParser.millis("1970-01-01 00:00:00+00:19:32") == -1_172_000)
        #expect(PostgresTimestampParser.millis("infinity") == nil)
    }

    @Test func configurationParsesURLsAndConninfo() throws {
        let url = try PostgresConfiguration("postgres://alice:p%40ss@db.example:5433/app?sslmode=disable&application_name=web")
        #expect(url.host == "db.example")
        #expect(url.port == 5433)
        #expect(url.user == "alice")
        #expect(url["password"] == "p@ss")
        #expect(url.database == "app")
        #expect(url["sslmode"] == "disable")
        #expect(url.applicationName == "web")
        #expect(!url.description.contains("p@ss"))

        #expect(try PostgresConfiguration("postgresql://%2Fvar%2Frun%2Fpg/db").host == "/var/run/pg")
        #expect(try PostgresConfiguration("postgresql:///db?host=/tmp/sock").host == "/tmp/sock")
        let conninfo = try PostgresConfiguration("host=/tmp dbname='my db' user=u password='it\\'s'")
        #expect(conninfo.database == "my db")
        #expect(conninfo["password"] == "it's")
        #expect(throws: PostgresError.self) { try PostgresConfiguration("host=/tmp nonsense_keyword=1") }
        #expect(throws: PostgresError.self) { try PostgresConfiguration("postgres://[broken") }
    }

    @Test func errorDescriptionIsGenericAndDebugDescriptionComplete() {
        let error = PostgresError(
            kind: .query, sqlState: "23505", message: "duplicate key", detail: "Key (email)=(secret@x) already exists.", constraint: "users_email_key"
        )
        #expect(!error.description.contains("secret"))
        #expect(String(reflecting: error).contains("secret@x"))
        #expect(String(reflecting: error).contains("users_email_key"))
        #expect(error.isUniqueViolation)
        #expect(!error.isConnectionFailure)
        #expect(PostgresError(kind: .query, sqlState: "57P01", message: "x").isConnectionFailure)
        #expect(PostgresError(kind: .query, sqlState: "08006", message: "x").isConnectionFailure)
    }
}
