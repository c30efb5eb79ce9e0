import ParleyPostgres
import Testing

/// Server errors arrive as one typed error carrying the SQLSTATE fields.
@Suite struct ErrorTests {
    @Test func uniqueViolationCarriesSQLStateAndConstraint() throws {
        let db = try freshConnection()
        try db.simpleQuery("CREATE TABLE users (id int PRIMARY KEY, email text CONSTRAINT users_email_key UNIQUE)")
        try db.execute(sql: "INSERT INTO users VALUES ($1, $2)", [1, "a@example.com"])
        do {
            try db.execute(sql: "INSERT INTO users VALUES ($1, $2)", [2, "a@example.com"])
            Issue.record("expected a unique violation")
        } catch {
            #expect(error.kind == .query)
            #expect(error.sqlState == "23505")
            #expect(error.isUniqueViolation)
            #expect(error.constraint == "users_email_key")
            #expect(error.table == "users")
            #expect(error.detail?.contains("a@example.com") == true)
            #expect(!error.description.contains("a@example.com"))
            #expect(!error.isConnectionFailure)
        }
        // The connection stays usable after an error.
        #expect(try db.query(sql: "SELECT count(*) FROM users")[0][0].int == 1)
    }

    @Test func syntaxErrorAndBadInputAreQueryErrors() throws {
        let db = try freshConnection()
        #expect { try db.query(sql: "SELEC 1") } throws: { ($0 as? PostgresError)?.sqlState == "42601" }
        #expect { try db.query(sql: "SELECT $1::int", ["not a number"]) } throws: { ($0 as? PostgresError)?.sqlState == "22P02" }
    }

    @Test func connectingToNowhereFailsFastWithAConnectionError() throws {
        let (result, seconds) = measure {
            Result { try PostgresConnection(PostgresConfiguration(host: "/nonexistent-dir", user: "x", database: "x")) }
        }
        #expect(seconds < 2)
        guard case .failure(let error as PostgresError) = result else {
            Issue.record("expected a PostgresError")
            return
        }
        #expect(error.kind == .connection)
        #expect(error.isConnectionFailure)
    }
}
