import ParleyPostgres
import Synchronization
import Testing

/// BEGIN/COMMIT/ROLLBACK, retries and savepoints through the pool.
@Suite struct TransactionTests {
    struct Boom: Error {}

    @Test func rollbackOnThrow() throws {
        let pool = PostgresPool(configuration: try freshDatabase(migrated: false), size: 2)
        defer { pool.shutdown() }
        try pool.withConnection { try $0.simpleQuery("CREATE TABLE t (x int)") }
        #expect(throws: Boom.self) {
            try pool.transaction { db in
                try db.execute(sql: "INSERT INTO t VALUES (1)")
                throw Boom()
            }
        }
        #expect(try pool.withConnection { try $0.query("SELECT count(*) FROM t")[0][0].int } == 0)
        try pool.transaction { db in try db.execute(sql: "INSERT INTO t VALUES (2)") }
        #expect(try pool.withConnection { try $0.query("SELECT count(*) FROM t")[0][0].int } == 1)
        // A body that swallows a server error must not "commit" an aborted transaction.
        #expect(throws: PostgresError.self) {
            try pool.transaction { db in
                _ = try? db.query(sql: "SELECT 1/0")
                try db.execute(sql: "INSERT INTO t VALUES (3)")
            }
        }
    }

    /// Work waiting for a commit runs after it, only when it happens: not after a rollback, not when the savepoint that
    /// added it rolls back, at once outside a transaction.
    @Test func workAfterCommitRunsOnlyForACommit() throws {
        let pool = PostgresPool(configuration: try freshDatabase(migrated: false), size: 1)
        defer { pool.shutdown() }
        let ran = Mutex<[String]>([])
        let note: @Sendable (String) -> () -> Void = { name in { ran.withLock { $0.append(name) } } }
        try pool.withConnection { try $0.simpleQuery("CREATE TABLE t (x int)") }
        try pool.transaction { db in
            try db.execute(sql: "INSERT INTO t VALUES (1)")
            db.afterCommit(note("committed"))
            _ = try? db.savepoint { db -> Void in
                db.afterCommit(note("in a savepoint rolled back"))
                throw Boom()
            }
            try db.savepoint { db in db.afterCommit(note("in a savepoint released")) }
            #expect(ran.withLock { $0 }.isEmpty, "nothing runs before the commit")
        }
        #expect(throws: Boom.self) {
            try pool.transaction { db in
                try db.execute(sql: "INSERT INTO t VALUES (2)")
                db.afterCommit(note("rolled back"))
                throw Boom()
            }
        }
        try pool.withConnection { db in db.afterCommit(note("no transaction")) }
        #expect(ran.withLock { $0 } == ["committed", "in a savepoint released", "no transaction"])
    }

    /// BEGIN goes out with the transaction's first statement (one pipeline, or in front of a simple query): the
    /// isolation level holds, the first statement runs inside the transaction whatever protocol it takes, an error in
    /// it leaves the transaction failed and rolled back, and a transaction that runs nothing sends nothing.
    @Test func beginTravelsWithTheFirstStatement() throws {
        let pool = PostgresPool(configuration: try freshDatabase(migrated: false), size: 1)
        defer { pool.shutdown() }
        try pool.withConnection { try $0.simpleQuery("CREATE TABLE t (x int)") }
        for prepared in [true, false] {
            let level = try pool.transaction(isolation: .serializable) { db in
                try db.query(sql: "SELECT current_setting('transaction_isolation')", prepared: prepared)[0][0].string
            }
            #expect(level == "serializable")
            let inBlock = try pool.transaction { db in
                try db.query(sql: "SELECT now() = statement_timestamp() OR true, txid_current_if_assigned() IS NULL", prepared: prepared)
                    .decodeFirst((Bool, Bool).self)
            }
            #expect(inBlock?.1 == true)
        }
        // A simple query first: BEGIN rides in front of its text.
        #expect(
            try pool.transaction(isolation: .repeatableRead) { db in try db.simpleQuery("SHOW transaction_isolation")[0][0].string }
                == "repeatable read")
        // The first statement fails: nothing of the transaction stays, and the connection is usable again.
        #expect(throws: PostgresError.self) {
            try pool.transaction { db in
                try db.execute(sql: "INSERT INTO t VALUES (1/0)")
            }
        }
        #expect(throws: Boom.self) {
            try pool.transaction { db in
                try db.execute(sql: "INSERT INTO t VALUES (1)")
                try db.execute(sql: "INSERT INTO t VALUES (2)")
                throw Boom()
            }
        }
        #expect(try pool.withConnection { try $0.query("SELECT count(*) FROM t")[0][0].int } == 0)
        // Two statements in one transaction see each other and commit together; a transaction with no statement is
        // nothing to the server (the connection is not left in a transaction).
        let seen = try pool.transaction { db -> Int in
            try db.execute(sql: "INSERT INTO t VALUES (3)")
            return try db.query(sql: "SELECT count(*) FROM t")[0][0].int
        }
        #expect(seen == 1)
        try pool.transaction { _ in }
        let after = try pool.withConnection { db -> (Bool, Int) in (db.inTransaction, try db.query("SELECT count(*) FROM t")[0][0].int) }
        #expect(after == (false, 1))
    }

    @Test func retriesOnSerializationFailure() throws {
        let pool = PostgresPool(configuration: try freshDatabase(migrated: false), size: 1)
        defer { pool.shutdown() }
        try pool.withConnection { try $0.simpleQuery("CREATE TABLE t (x int)") }
        var attempts = 0
        let result = try pool.transaction(isolation: .serializable) { db -> Int in
            attempts += 1
            try db.execute(sql: "INSERT INTO t VALUES ($1)", [attempts])
            if attempts == 1 {
                try db.simpleQuery("DO $$ BEGIN RAISE EXCEPTION 'forced' USING ERRCODE = 'serialization_failure'; END $$")
            }
            return attempts
        }
        #expect(result == 2)
        // Only the successful attempt's row is there.
        #expect(try pool.withConnection { try $0.query("SELECT array_agg(x) FROM t")[0][0].intArray } == [2])
        // A deadlock (40P01) is retried too; a persistent failure gives up after 5 retries.
        var deadlocks = 0
        #expect {
            try pool.transaction { db in
                deadlocks += 1
                try db.simpleQuery("DO $$ BEGIN RAISE EXCEPTION 'forced' USING ERRCODE = 'deadlock_detected'; END $$")
            }
        } throws: { ($0 as? PostgresError)?.isDeadlock == true }
        #expect(deadlocks == 6)
    }

    @Test func realSerializationConflictsAreRetried() async throws {
        let pool = PostgresPool(configuration: try freshDatabase(migrated: false), size: 4)
        defer { pool.shutdown() }
        try await pool.withConnection { db in _ = try db.simpleQuery("CREATE TABLE c (n int); INSERT INTO c VALUES (0)") }
        try await withThrowingTaskGroup(of: Void.self) { group in
            // Each round of conflicts commits at least one, so 4 writers need at most 3 of the 5 retries.
            for _ in 0..<4 {
                group.addTask {
                    try await pool.transaction(isolation: .serializable) { db in
                        let n = try db.query(sql: "SELECT n FROM c")[0][0].int
                        try db.execute(sql: "UPDATE c SET n = $1", [n + 1])
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(try await pool.withConnection { try $0.query("SELECT n FROM c")[0][0].int } == 4)
    }

    @Test func retriesOnceWhenTheConnectionBreaksBeforeCommit() throws {
        let pool = PostgresPool(configuration: try freshDatabase(migrated: false), size: 1)
        defer { pool.shutdown() }
        try pool.withConnection { try $0.simpleQuery("CREATE TABLE t (x int)") }
        var attempts = 0
        try pool.transaction { db in
            attempts += 1
            try db.execute(sql: "INSERT INTO t VALUES ($1)", [attempts])
            if attempts == 1 { try db.query(sql: "SELECT pg_terminate_backend(pg_backend_pid())") }
        }
        #expect(attempts == 2)
        #expect(try pool.withConnection { try $0.query("SELECT array_agg(x) FROM t")[0][0].intArray } == [2])
    }

    @Test func savepointRollsBackOnlyItsPart() throws {
        let pool = PostgresPool(configuration: try freshDatabase(migrated: false), size: 1)
        defer { pool.shutdown() }
        try pool.withConnection { try $0.simpleQuery("CREATE TABLE t (x int)") }
        try pool.transaction { db in
            try db.execute(sql: "INSERT INTO t VALUES (1)")
            #expect(throws: PostgresError.self) {
                try db.savepoint { db in
                    try db.execute(sql: "INSERT INTO t VALUES (2)")
                    try db.query(sql: "SELECT 1/0")
                }
            }
            try db.savepoint { db in try db.execute(sql: "INSERT INTO t VALUES (3)") }
            // A nested transaction is a savepoint.
            #expect(throws: Boom.self) {
                try pool.transaction { db in
                    try db.execute(sql: "INSERT INTO t VALUES (4)")
                    throw Boom()
                }
            }
        }
        #expect(try pool.withConnection { try $0.query("SELECT array_agg(x ORDER BY x) FROM t")[0][0].intArray } == [1, 3])
    }
}
