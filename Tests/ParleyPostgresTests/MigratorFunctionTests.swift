import Foundation
import ParleyPostgres
import ParleyTesting
import Testing

/// Function files (`Migrations/functions`): applied after the numbered migrations, again whenever their text changes.
@Suite struct MigratorFunctionTests {
    /// A temporary migrations directory (with a `functions` directory) holding the given files.
    func makeDirectory(_ files: [String: String]) throws -> String {
        let directory = NSTemporaryDirectory() + "parley-migrations-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory + "/functions", withIntermediateDirectories: true)
        for (name, sql) in files { try write(sql, directory + "/" + name) }
        return directory
    }

    func write(_ sql: String, _ path: String) throws {
        try sql.write(toFile: path, atomically: true, encoding: .utf8)
    }

    /// SQL function bodies are checked when created, so each function file fails unless everything it names exists:
    /// `describe_counter` needs 0002's column and `counter_value`; `counter_touch` needs 0002's column at run time.
    let files = [
        "0001_counter.sql": "CREATE TABLE counter (n int NOT NULL); INSERT INTO counter VALUES (1);",
        "0002_label.sql": "ALTER TABLE counter ADD COLUMN label text NOT NULL DEFAULT 'one';",
        "functions/describe_counter.sql": """
        CREATE OR REPLACE FUNCTION describe_counter() RETURNS text LANGUAGE sql STABLE
        AS $$ SELECT label || '=' || counter_value() FROM counter $$;
        """,
        "functions/counter_value.sql": """
        CREATE OR REPLACE FUNCTION counter_value() RETURNS int LANGUAGE sql STABLE AS $$ SELECT n FROM counter $$;
        """,
        "functions/counter_touch.sql": touch("touched"),
        "functions/README.md": "not a function",
    ]

    /// A trigger function and its trigger in one file, as the function files allow.
    static func touch(_ label: String) -> String {
        """
        CREATE OR REPLACE FUNCTION counter_touch() RETURNS trigger LANGUAGE plpgsql
        AS $$ BEGIN NEW.label := '\(label)'; RETURN NEW; END $$;
        DROP TRIGGER IF EXISTS counter_touch ON counter;
        CREATE TRIGGER counter_touch BEFORE UPDATE ON counter FOR EACH ROW EXECUTE FUNCTION counter_touch();
        """
    }

    @Test func functionFilesRunAfterTheNumberedOnesInNameOrderOnce() throws {
        let directory = try makeDirectory(files)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let configuration = try freshDatabase(migrated: false)
        let migrator = try Migrator(directory: directory)
        #expect(try migrator.loadFunctions().map(\.name) == ["counter_touch", "counter_value", "describe_counter"])
        let results = Collector<Migrator.Applied>()
        let errors = Collector<String>()
        onThreads(4) { _ in
            do {
                results.append(try Migrator(directory: directory).apply(configuration: configuration))
            } catch {
                errors.append("\(error)")
            }
        }
        #expect(errors.all.isEmpty, "\(errors.all)")
        #expect(results.all.flatMap(\.versions).sorted() == [1, 2])
        // One migrator did all the work under the lock, in file-name order; the others found it done.
        #expect(results.all.map(\.functions).filter { !$0.isEmpty } == [["counter_touch", "counter_value", "describe_counter"]])

        let db = try PostgresConnection(configuration)
        #expect(try db.query(sql: "SELECT describe_counter()")[0][0].string == "one=1")
        let rows = try db.query(sql: "SELECT name, checksum, applied_at::text FROM schema_functions ORDER BY name")
        #expect(try rows.map { try $0[0].string } == ["counter_touch", "counter_value", "describe_counter"])
        #expect(try rows.map { try $0[1].string } == migrator.loadFunctions().map(\.checksum))
        #expect(try rows[0][1].string.count == 64)

        // Running again applies nothing and leaves the records as they were.
        #expect(try migrator.apply(configuration: configuration) == Migrator.Applied(versions: [], functions: []))
        #expect(try migrator.migrate(configuration: configuration) == [])
        let again = try db.query(sql: "SELECT applied_at::text FROM schema_functions ORDER BY name")
        #expect(try again.map { try $0[0].string } == rows.map { try $0[2].string })
    }

    @Test func anEditedFunctionFileIsReappliedAndItsNewDefinitionIsLive() throws {
        let directory = try makeDirectory(files)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let configuration = try freshDatabase(migrated: false)
        let migrator = try Migrator(directory: directory)
        _ = try migrator.apply(configuration: configuration)
        let db = try PostgresConnection(configuration)
        try db.query(sql: "UPDATE counter SET n = n + 1")
        #expect(try db.query(sql: "SELECT describe_counter()")[0][0].string == "touched=2")

        try write(
            "CREATE OR REPLACE FUNCTION counter_value() RETURNS int LANGUAGE sql STABLE AS $$ SELECT n * 100 FROM counter $$;",
            directory + "/functions/counter_value.sql")
        try write(Self.touch("touched again"), directory + "/functions/counter_touch.sql")
        #expect(
            try migrator.apply(configuration: configuration)
                == Migrator.Applied(versions: [], functions: ["counter_touch", "counter_value"]))
        #expect(try db.query(sql: "SELECT describe_counter()")[0][0].string == "touched=200")
        try db.query(sql: "UPDATE counter SET n = n + 1")
        #expect(try db.query(sql: "SELECT describe_counter()")[0][0].string == "touched again=300")

        let recorded = try db.query(sql: "SELECT checksum FROM schema_functions WHERE name = 'counter_value'")[0][0].string
        #expect(try recorded == migrator.loadFunctions().first { $0.name == "counter_value" }?.checksum)
        // Re-applying stamps the time; the unchanged file keeps its first one.
        #expect(
            try db.query(
                sql:
                    """
                    SELECT (SELECT applied_at FROM schema_functions WHERE name = 'counter_value')
                         > (SELECT applied_at FROM schema_functions WHERE name = 'describe_counter')
                    """)[0][0].bool)
        #expect(try migrator.apply(configuration: configuration) == Migrator.Applied(versions: [], functions: []))
    }

    @Test func aRecordedFunctionWhoseFileIsGoneIsLoggedAndIgnored() throws {
        let directory = try makeDirectory(files)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let configuration = try freshDatabase(migrated: false)
        _ = try Migrator(directory: directory).apply(configuration: configuration)

        try FileManager.default.removeItem(atPath: directory + "/functions/describe_counter.sql")
        try write("UPDATE counter SET n = n + 10;", directory + "/0003_bump.sql")
        let lines = Collector<String>()
        let logger = PostgresLogger { level, message in lines.append("\(level) \(message)") }
        #expect(
            try Migrator(directory: directory, logger: logger).apply(configuration: configuration)
                == Migrator.Applied(versions: [3], functions: []))
        #expect(lines.all.contains { $0.hasPrefix("warning") && $0.contains("functions/describe_counter.sql") }, "\(lines.all)")
        #expect(lines.all.contains("info migrations: applied 0003_bump.sql"), "\(lines.all)")

        // The definition and its record stay: dropping a function is a numbered migration's job.
        let db = try PostgresConnection(configuration)
        #expect(try db.query(sql: "SELECT describe_counter()")[0][0].string == "touched=11")
        #expect(try db.query(sql: "SELECT count(*) FROM schema_functions WHERE name = 'describe_counter'")[0][0].int == 1)

        // With no functions directory at all, only the numbered migrations matter.
        try FileManager.default.removeItem(atPath: directory + "/functions")
        #expect(try Migrator(directory: directory).apply(configuration: configuration) == Migrator.Applied(versions: [], functions: []))
    }

    @Test func aFailingFunctionFileRollsBackAndIsRetriedNextTime() throws {
        var broken = files
        broken["functions/broken.sql"] = "CREATE OR REPLACE FUNCTION half() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$; SELECT 1/0;"
        let directory = try makeDirectory(broken)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let configuration = try freshDatabase(migrated: false)
        let lines = Collector<String>()
        let logger = PostgresLogger { level, message in lines.append("\(level) \(message)") }
        let migrator = try Migrator(directory: directory, logger: logger)
        #expect { try migrator.apply(configuration: configuration) } throws: { error in
            (error as? Migrator.Failure)?.description.contains("functions/broken.sql") == true
                && (error as? Migrator.Failure)?.underlying?.sqlState == "22012"
        }
        let db = try PostgresConnection(configuration)
        #expect(try db.query(sql: "SELECT to_regprocedure('half()') IS NULL")[0][0].bool)
        #expect(try db.query(sql: "SELECT count(*) FROM schema_functions")[0][0].int == 0)
        // The numbered migrations ran first and stay applied.
        #expect(try db.query(sql: "SELECT count(*) FROM schema_migrations")[0][0].int == 2)

        try write("CREATE OR REPLACE FUNCTION half() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;", directory + "/functions/broken.sql")
        #expect(
            try migrator.apply(configuration: configuration)
                == Migrator.Applied(versions: [], functions: ["broken", "counter_touch", "counter_value", "describe_counter"]))
        #expect(try db.query(sql: "SELECT half()")[0][0].int == 1)
        #expect(lines.all.contains("info migrations: applied functions/broken.sql"), "\(lines.all)")
    }

    @Test func testDatabasesHaveTheTreesFunctionFiles() throws {
        let functions = try Migrator().loadFunctions()
        let db = try PostgresConnection(freshDatabase())
        var recorded: [String: String] = [:]
        for row in try db.query(sql: "SELECT name, checksum FROM schema_functions") { recorded[try row[0].string] = try row[1].string }
        for function in functions { #expect(recorded[function.name] == function.checksum, "\(function.name)") }
    }
}
