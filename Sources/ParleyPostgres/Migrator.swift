import Foundation

/// Brings a database to the schema in the tree: the numbered migrations once each, then the database functions
/// as they are now.
///
/// Numbered files (`NNNN_name.sql`) change tables and data, which cannot be redone, so each is applied exactly once,
/// in version order, and never edited afterwards: `schema_migrations` records version, name, SHA-256 and time, and an
/// applied file whose checksum changed is a start-up error naming the file (fix forward with a new file instead). Each
/// runs in its own transaction unless its first line is `-- migrate: no-transaction` (for
/// `CREATE INDEX CONCURRENTLY`).
///
/// Function files (`functions/*.sql`: one `CREATE OR REPLACE FUNCTION` each, with the `DROP TRIGGER IF EXISTS` /
/// `CREATE TRIGGER` lines that use it, if any) can be re-run at will, so they are edited in place: the live definition
/// is always the one in the tree, and a change to a function reviews as a diff of that function, not as a new copy of
/// it in a migration. A file is re-applied whenever its SHA-256 differs from the one `schema_functions` records under
/// its name (the file name without `.sql`). They run after every numbered migration, so that a function may use
/// anything the migrations create (a numbered migration cannot rely on them: on a fresh database they do not exist
/// yet when it runs), in file-name order (bytewise, whatever the locale), each in its own transaction. A function
/// whose signature or return type changes needs its old definition dropped first, which `CREATE OR REPLACE` does not
/// do.
///
/// A recorded version or function whose file is gone is logged and ignored: removing a function is a schema change,
/// made by a numbered migration that drops it. Everything runs under `pg_advisory_lock(Migrator.advisoryLockKey)`,
/// so that several nodes starting at once serialise and apply each file once. Files must not contain their own
/// BEGIN/COMMIT.
public struct Migrator: Sendable {
    /// One migration file.
    public struct Migration: Sendable, Equatable {
        public let version: Int
        public let name: String
        public let path: String
        public let sql: String
        /// SHA-256 (hex) of the file's bytes.
        public let checksum: String
        var runsInTransaction: Bool {
            !(sql.split(separator: "\n", maxSplits: 1).first?.contains("migrate: no-transaction") ?? false)
        }
    }

    /// One database function file (`functions/name.sql`).
    public struct FunctionFile: Sendable, Equatable {
        /// The file name without `.sql`: its key in `schema_functions`.
        public let name: String
        public let path: String
        public let sql: String
        /// SHA-256 (hex) of the file's bytes.
        public let checksum: String
    }

    /// What one run applied.
    public struct Applied: Sendable, Equatable {
        /// Versions of the numbered migrations applied, ascending.
        public let versions: [Int]
        /// Names of the function files applied (new or changed), in the order they ran.
        public let functions: [String]

        public init(versions: [Int], functions: [String]) {
            self.versions = versions
            self.functions = functions
        }
    }

    /// Why migrating failed (start-up error); `description` names the file.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public let message: String
        /// The server's error, when a statement failed.
        public let underlying: PostgresError?
        public var description: String {
            underlying.map { "\(message): \(String(reflecting: $0))" } ?? message
        }
    }

    /// Key of the session advisory lock that serialises migrators ("Parley" in ASCII).
    public static let advisoryLockKey: Int64 = 0x5061_726C_6579

    /// The directory the migrations are read from.
    public let directory: String
    /// The directory the function files are read from (`functions` inside `directory`; it may be absent).
    public var functionsDirectory: String { directory + "/functions" }
    private let logger: PostgresLogger

    /// Uses `directory`, or finds one with `locateDirectory`.
    public init(directory: String? = nil, logger: PostgresLogger = .disabled) throws(Failure) {
        guard let found = Self.locateDirectory(explicit: directory) else {
            throw Failure(
                message: "no Migrations directory found (set PARLEY_MIGRATIONS_DIR, or run from the repository)",
                underlying: nil)
        }
        self.directory = found
        self.logger = logger
    }

    /// Finds the migrations directory; the first that applies wins:
    ///
    /// 1. `explicit`, when given (it must exist);
    /// 2. the environment variable `PARLEY_MIGRATIONS_DIR` (it must exist);
    /// 3. `Migrations` next to the running executable (an installed layout);
    /// 4. walking up from the executable's directory, a `Migrations` directory beside a `Package.swift`
    ///    (`swift run`, `.build/…/parley`);
    /// 5. the repository this file was compiled from (`#filePath`, for tests and builds with a scratch path
    ///    outside the repository);
    /// 6. `./Migrations`.
    public static func locateDirectory(explicit: String? = nil, filePath: String = #filePath) -> String? {
        if let explicit { return isDirectory(explicit) ? explicit : nil }
        if let fromEnvironment = ProcessInfo.processInfo.environment["PARLEY_MIGRATIONS_DIR"], !fromEnvironment.isEmpty {
            return isDirectory(fromEnvironment) ? fromEnvironment : nil
        }
        if let executable = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            var directory = (executable as NSString).deletingLastPathComponent
            let beside = directory + "/Migrations"
            if isDirectory(beside) { return beside }
            while directory != "/" && !directory.isEmpty {
                let candidate = directory + "/Migrations"
                if isDirectory(candidate), FileManager.default.fileExists(atPath: directory + "/Package.swift") {
                    return candidate
                }
                directory = (directory as NSString).deletingLastPathComponent
            }
        }
        // Sources/ParleyPostgres/Migrator.swift → repository root.
        let root = ((filePath as NSString).deletingLastPathComponent as NSString).deletingLastPathComponent
        let fromSource = (root as NSString).deletingLastPathComponent + "/Migrations"
        if isDirectory(fromSource) { return fromSource }
        let local = FileManager.default.currentDirectoryPath + "/Migrations"
        return isDirectory(local) ? local : nil
    }

    private static func isDirectory(_ path: String) -> Bool {
        var isDirectory: ObjCBool = false
        return FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && isDirectory.boolValue
    }

    /// Reads and sorts the migration files; duplicate versions are an error.
    public func loadMigrations() throws(Failure) -> [Migration] {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory)
        } catch {
            throw Failure(message: "cannot read migrations directory \(directory)", underlying: nil)
        }
        var migrations: [Migration] = []
        for fileName in names where fileName.hasSuffix(".sql") {
            let stem = fileName.dropLast(4)
            guard let underscore = stem.firstIndex(of: "_"), let version = Int(stem[..<underscore]),
                stem[..<underscore].allSatisfy(\.isASCII)
            else {
                logger.log(.warning, "migrations: ignoring \(fileName) (not NNNN_name.sql)")
                continue
            }
            let path = directory + "/" + fileName
            let (sql, checksum) = try Self.read(path, named: "migration \(fileName)")
            migrations.append(
                Migration(
                    version: version, name: String(stem[stem.index(after: underscore)...]), path: path, sql: sql,
                    checksum: checksum))
        }
        migrations.sort { $0.version < $1.version }
        for (a, b) in zip(migrations, migrations.dropFirst()) where a.version == b.version {
            throw Failure(message: "two migrations have version \(a.version): \(a.path) and \(b.path)", underlying: nil)
        }
        return migrations
    }

    /// Reads the function files in the order they are applied; none when `functionsDirectory` is absent.
    public func loadFunctions() throws(Failure) -> [FunctionFile] {
        guard Self.isDirectory(functionsDirectory) else { return [] }
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: functionsDirectory)
        } catch {
            throw Failure(message: "cannot read functions directory \(functionsDirectory)", underlying: nil)
        }
        var functions: [FunctionFile] = []
        // Bytewise, so the order cannot depend on the locale or on Unicode collation.
        for fileName in names.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) })
        where fileName.hasSuffix(".sql") && fileName.count > 4 {
            let path = functionsDirectory + "/" + fileName
            if Self.isDirectory(path) { continue }
            let (sql, checksum) = try Self.read(path, named: "function file functions/\(fileName)")
            functions.append(FunctionFile(name: String(fileName.dropLast(4)), path: path, sql: sql, checksum: checksum))
        }
        return functions
    }

    /// The UTF-8 text and SHA-256 of one SQL file; `what` names it in errors.
    private static func read(_ path: String, named what: String) throws(Failure) -> (sql: String, checksum: String) {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw Failure(message: "cannot read \(what) (\(path))", underlying: nil)
        }
        let bytes = [UInt8](data)
        guard let sql = String(validating: bytes, as: UTF8.self) else {
            throw Failure(message: "\(what) is not valid UTF-8", underlying: nil)
        }
        return (sql, SHA256.hex(bytes))
    }

    /// Opens a dedicated connection, migrates, closes it; returns the versions applied now.
    ///
    /// Function files are applied too (and logged); `apply(configuration:)` also reports which.
    public func migrate(configuration: PostgresConfiguration) throws(Failure) -> [Int] {
        try apply(configuration: configuration).versions
    }

    /// Migrates using `connection` (must not be inside a transaction); returns the versions applied now.
    ///
    /// Function files are applied too (and logged); `apply(on:)` also reports which.
    public func migrate(on connection: PostgresConnection) throws(Failure) -> [Int] {
        try apply(on: connection).versions
    }

    /// Opens a dedicated connection, applies the numbered migrations and the function files, closes it.
    public func apply(configuration: PostgresConfiguration) throws(Failure) -> Applied {
        var migratorConfiguration = configuration
        migratorConfiguration.applicationName = "parley-migrator"
        let connection: PostgresConnection
        do {
            connection = try PostgresConnection(migratorConfiguration, logger: logger)
        } catch {
            throw Failure(message: "cannot connect to migrate", underlying: error)
        }
        return try apply(on: connection)
    }

    /// Applies the numbered migrations, then the function files, using `connection` (must not be inside a
    /// transaction).
    public func apply(on connection: PostgresConnection) throws(Failure) -> Applied {
        // Every file is read before the database is touched: an unreadable one changes nothing.
        let migrations = try loadMigrations()
        let functions = try loadFunctions()
        try Self.attempt("cannot take the migration lock") { () throws(PostgresError) in
            try connection.query(sql: "SELECT pg_advisory_lock($1)", [Self.advisoryLockKey])
        }
        defer { _ = try? connection.query(sql: "SELECT pg_advisory_unlock($1)", [Self.advisoryLockKey]) }
        let versions = try applyMigrations(migrations, on: connection)
        let functionNames = try applyFunctions(functions, on: connection)
        return Applied(versions: versions, functions: functionNames)
    }

    /// Applies the numbered migrations not recorded yet (the lock is held); returns their versions.
    private func applyMigrations(_ migrations: [Migration], on connection: PostgresConnection) throws(Failure) -> [Int] {
        try Self.attempt("cannot create schema_migrations") { () throws(PostgresError) in
            try connection.simpleQuery(
                """
                CREATE TABLE IF NOT EXISTS schema_migrations (
                    version int PRIMARY KEY,
                    name text NOT NULL,
                    checksum text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )
                """)
        }
        let applied: [Int: (name: String, checksum: String)] = try Self.attempt("cannot read schema_migrations") {
            () throws(PostgresError) in
            var map: [Int: (name: String, checksum: String)] = [:]
            for row in try connection.query(sql: "SELECT version, name, checksum FROM schema_migrations") {
                map[try row[0].int] = (try row[1].string, try row[2].string)
            }
            return map
        }
        let known = Set(migrations.map(\.version))
        for (version, record) in applied.sorted(by: { $0.key < $1.key }) where !known.contains(version) {
            logger.log(.warning, "migrations: version \(version) (\(record.name)) is applied but its file is missing; ignoring")
        }
        var appliedNow: [Int] = []
        for migration in migrations {
            let fileName = (migration.path as NSString).lastPathComponent
            if let record = applied[migration.version] {
                guard record.checksum == migration.checksum else {
                    throw Failure(
                        message:
                            "migration \(fileName) was changed after it was applied (checksum \(record.checksum) in schema_migrations, \(migration.checksum) on disk); add a new migration instead",
                        underlying: nil)
                }
                continue
            }
            try Self.attempt("migration \(fileName) failed") { () throws(PostgresError) in
                try Self.inTransaction(migration.runsInTransaction, on: connection) { () throws(PostgresError) in
                    try connection.simpleQuery(migration.sql)
                    try connection.query(
                        sql:
                            "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                        [migration.version, migration.name, migration.checksum])
                }
            }
            logger.log(.info, "migrations: applied \(fileName)")
            appliedNow.append(migration.version)
        }
        return appliedNow
    }

    /// Applies the function files that are new or changed since recorded (the lock is held); returns their names.
    private func applyFunctions(_ functions: [FunctionFile], on connection: PostgresConnection) throws(Failure) -> [String] {
        try Self.attempt("cannot create schema_functions") { () throws(PostgresError) in
            try connection.simpleQuery(
                """
                CREATE TABLE IF NOT EXISTS schema_functions (
                    name text PRIMARY KEY,
                    checksum text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )
                """)
        }
        let recorded: [String: String] = try Self.attempt("cannot read schema_functions") { () throws(PostgresError) in
            var map: [String: String] = [:]
            for row in try connection.query(sql: "SELECT name, checksum FROM schema_functions") {
                map[try row[0].string] = try row[1].string
            }
            return map
        }
        let known = Set(functions.map(\.name))
        for name in recorded.keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) where !known.contains(name) {
            logger.log(.warning, "migrations: function file functions/\(name).sql is recorded but missing; ignoring (its definition stays)")
        }
        var appliedNow: [String] = []
        for function in functions where recorded[function.name] != function.checksum {
            try Self.attempt("function file functions/\(function.name).sql failed") { () throws(PostgresError) in
                try Self.inTransaction(true, on: connection) { () throws(PostgresError) in
                    try connection.simpleQuery(function.sql)
                    try connection.query(
                        sql:
                            """
                            INSERT INTO schema_functions (name, checksum) VALUES ($1, $2)
                            ON CONFLICT (name) DO UPDATE SET checksum = excluded.checksum, applied_at = now()
                            """,
                        [function.name, function.checksum])
                }
            }
            logger.log(.info, "migrations: applied functions/\(function.name).sql\(recorded[function.name] == nil ? "" : " (changed)")")
            appliedNow.append(function.name)
        }
        return appliedNow
    }

    /// Runs `body` inside BEGIN … COMMIT when `transactional`, rolling back when it throws.
    private static func inTransaction(
        _ transactional: Bool, on connection: PostgresConnection, _ body: () throws(PostgresError) -> Void
    ) throws(PostgresError) {
        do throws(PostgresError) {
            if transactional { try connection.simpleQuery("BEGIN") }
            try body()
            if transactional { try connection.simpleQuery("COMMIT") }
        } catch {
            if connection.inTransaction { _ = try? connection.simpleQuery("ROLLBACK") }
            throw error
        }
    }

    /// Runs `body`, turning a server error into a `Failure` that says `what` failed.
    @discardableResult
    private static func attempt<R>(_ what: String, _ body: () throws(PostgresError) -> R) throws(Failure) -> R {
        do { return try body() } catch { throw Failure(message: what, underlying: error) }
    }
}
