import Foundation
import ParleyPostgres
import ParleyTesting
import Synchronization
import Testing

/// Migrations: order, exactly-once under concurrency, checksums.
@Suite struct MigratorTests {
    /// A temporary migrations directory with the given files.
    func makeDirectory(_ files: [String: String]) throws -> String {
        let directory = NSTemporaryDirectory() + "parley-migrations-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        for (name, sql) in files { try sql.write(toFile: directory + "/" + name, atomically: true, encoding: .utf8) }
        return directory
    }

    let files = [
        "0001_counter.sql": "CREATE TABLE counter (n int NOT NULL); INSERT INTO counter VALUES (1);",
        "0002_bump.sql": "UPDATE counter SET n = n + 1; SELECT pg_sleep(0.2);",
        "0010_bump_again.sql": "UPDATE counter SET n = n + 10;",
        "README.md": "not a migration",
    ]

    @Test func concurrentMigratorsApplyEachMigrationOnce() throws {
        let directory = try makeDirectory(files)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let configuration = try freshDatabase(migrated: false)
        let results = Collector<[Int]>()
        let errors = Collector<String>()
        onThreads(4) { _ in
            do {
                results.append(try Migrator(directory: directory).migrate(configuration: configuration))
            } catch {
                errors.append("\(error)")
            }
        }
        #expect(errors.all.isEmpty, "\(errors.all)")
        let applied = results.all.flatMap { $0 }
        #expect(applied.sorted() == [1, 2, 10])
        let db = try PostgresConnection(configuration)
        #expect(try db.query(sql: "SELECT n FROM counter")[0][0].int == 12)
        let rows = try db.query(sql: "SELECT version, name, checksum FROM schema_migrations ORDER BY version")
        #expect(try rows.map { try $0[0].int } == [1, 2, 10])
        #expect(try rows.map { try $0[1].string } == ["counter", "bump", "bump_again"])
        #expect(try rows[0][2].string.count == 64)
        // Running again applies nothing.
        #expect(try Migrator(directory: directory).migrate(configuration: configuration) == [])
    }

    @Test func tamperedMigrationIsRefusedAndFailedOneRollsBack() throws {
        let directory = try makeDirectory(files)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let configuration = try freshDatabase(migrated: false)
        #expect(try Migrator(directory: directory).migrate(configuration: configuration) == [1, 2, 10])
        try "UPDATE counter SET n = n + 2;".write(toFile: directory + "/0002_bump.sql", atomically: true, encoding: .utf8)
        do {
            _ = try Migrator(directory: directory).migrate(configuration: configuration)
            Issue.record("a changed migration must be refused")
        } catch {
            #expect(error.description.contains("0002_bump.sql"))
        }
        // A missing applied file is only logged; a failing new file is rolled back and not recorded.
        try FileManager.default.removeItem(atPath: directory + "/0002_bump.sql")
        try "CREATE TABLE half (x int); SELECT 1/0;".write(toFile: directory + "/0011_broken.sql", atomically: true, encoding: .utf8)
        #expect { try Migrator(directory: directory).migrate(configuration: configuration) } throws: { error in
            (error as? Migrator.Failure)?.description.contains("0011_broken.sql") == true
                && (error as? Migrator.Failure)?.underlying?.sqlState == "22012"
        }
        let db = try PostgresConnection(configuration)
        #expect(try db.query(sql: "SELECT to_regclass('half') IS NULL")[0][0].bool)
        #expect(try db.query(sql: "SELECT count(*) FROM schema_migrations")[0][0].int == 3)
    }

    @Test func locatesTheRepositoryMigrations() throws {
        let found = Migrator.locateDirectory()
        #expect(found?.hasSuffix("/Migrations") == true)
        #expect(Migrator.locateDirectory(explicit: "/definitely/not/here") == nil)
        #expect(try TestDatabase.shared().templateDatabase.isEmpty == false)
    }
}
