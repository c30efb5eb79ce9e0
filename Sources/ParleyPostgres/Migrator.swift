import Foundation

/// Applies the forward-only SQL migrations (`NNNN_name.sql`) in version order, exactly once per database.
///
/// Each file runs in its own transaction (unless its first line is `-- migrate: no-transaction`, for
/// `CREATE INDEX CONCURRENTLY`), under `pg_advisory_lock(Migrator.advisoryLockKey)` so that several nodes
/// starting at once serialise and apply each file once. `schema_migrations` records version, name, SHA-256
/// and time; an applied file whose checksum changed is a start-up error naming the file (fix forward with a
/// new file instead). A recorded version whose file is gone is logged and ignored.
/// Files must not contain their own BEGIN/COMMIT.
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
            guard let data = FileManager.default.contents(atPath: path) else {
                throw Failure(message: "cannot read migration \(path)", underlying: nil)
            }
            let bytes = [UInt8](data)
            guard let sql = String(validating: bytes, as: UTF8.self) else {
                throw Failure(message: "migration \(fileName) is not valid UTF-8", underlying: nil)
            }
            migrations.append(
                Migration(
                    version: version, name: String(stem[stem.index(after: underscore)...]), path: path, sql: sql,
                    checksum: SHA256.hex(bytes)))
        }
        migrations.sort { $0.version < $1.version }
        for (a, b) in zip(migrations, migrations.dropFirst()) where a.version == b.version {
            throw Failure(message: "two migrations have version \(a.version): \(a.path) and \(b.path)", underlying: nil)
        }
        return migrations
    }

    /// Opens a dedicated connection, migrates, closes it; returns the versions applied now.
    public func migrate(configuration: PostgresConfiguration) throws(Failure) -> [Int] {
        var migratorConfiguration = configuration
        migratorConfiguration.applicationName = "parley-migrator"
        let connection: PostgresConnection
        do {
            connection = try PostgresConnection(migratorConfiguration, logger: logger)
        } catch {
            throw Failure(message: "cannot connect to migrate", underlying: error)
        }
        return try migrate(on: connection)
    }

    /// Migrates using `connection` (must not be inside a transaction); returns the versions applied now.
    public func migrate(on connection: PostgresConnection) throws(Failure) -> [Int] {
        let migrations = try loadMigrations()
        @discardableResult
        func run<R>(_ what: String, _ body: () throws(PostgresError) -> R) throws(Failure) -> R {
            do { return try body() } catch { throw Failure(message: what, underlying: error) }
        }
        try run("cannot take the migration lock") { () throws(PostgresError) in
            try connection.query("SELECT pg_advisory_lock($1)", [Self.advisoryLockKey])
        }
        defer { _ = try? connection.query("SELECT pg_advisory_unlock($1)", [Self.advisoryLockKey]) }
        try run("cannot create schema_migrations") { () throws(PostgresError) in
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
        let applied: [Int: (name: String, checksum: String)] = try run("cannot read schema_migrations") {
            () throws(PostgresError) in
            var map: [Int: (name: String, checksum: String)] = [:]
            for row in try connection.query("SELECT version, name, checksum FROM schema_migrations") {
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
            try run("migration \(fileName) failed") { () throws(PostgresError) in
                do throws(PostgresError) {
                    if migration.runsInTransaction { try connection.simpleQuery("BEGIN") }
                    try connection.simpleQuery(migration.sql)
                    try connection.query(
                        "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                        [migration.version, migration.name, migration.checksum])
                    if migration.runsInTransaction { try connection.simpleQuery("COMMIT") }
                } catch {
                    if connection.inTransaction { _ = try? connection.simpleQuery("ROLLBACK") }
                    throw error
                }
            }
            logger.log(.info, "migrations: applied \(fileName)")
            appliedNow.append(migration.version)
        }
        return appliedNow
    }
}
