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
