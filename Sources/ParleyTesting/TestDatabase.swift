import Foundation
import Glibc
import ParleyPostgres
import ParleySync
import Synchronization

/// Gives tests a real PostgreSQL with no set-up: one embedded cluster per test process, a fresh database
/// per test.
///
/// With `PARLEY_TEST_DATABASE_URL` set, that server is used instead (databases are created on it and
/// dropped at exit). The cluster starts lazily, once, in a `mkdtemp` directory (tmpfs when available) removed at exit.
public enum TestDatabase {
    /// The process-wide test cluster (started on first use; thread-safe through `static let` initialisation).
    public static func shared() throws -> TestCluster {
        try sharedCluster.get()
    }

    private static let sharedCluster: Result<TestCluster, any Error> = Result { try TestCluster.start() }

    /// A private embedded cluster in a fresh temporary directory, not started yet, for tests that stop and
    /// start their own server (outage tests). It is stopped and its directory removed at exit.
    public static func makeCluster(logger: PostgresLogger = .disabled) throws -> EmbeddedPostgres {
        let directory = try makeTemporaryDirectory()
        let cluster = EmbeddedPostgres(dataDirectory: directory, logger: logger)
        TestDatabaseCleanup.register(cluster: cluster, directory: directory)
        return cluster
    }

    /// A private, started embedded cluster with one migrated database on it, for tests that freeze or stop the server
    /// (never the shared cluster, which other tests use meanwhile). The cluster stops at exit.
    public static func makePrivateDatabase() throws -> (cluster: EmbeddedPostgres, database: PostgresConfiguration) {
        let cluster = try makeCluster()
        let admin = try cluster.start()
        try cluster.createDatabase("parley")
        var database = admin.with(database: "parley")
        _ = try Migrator().migrate(configuration: database)
        database.applicationName = "parley-test"
        return (cluster, database)
    }

    /// A fresh data directory for a Parley server that runs its own embedded cluster; removed at exit (its server must
    /// be stopped by then).
    public static func makeDataDirectory() throws -> String {
        let directory = try makeTemporaryDirectory()
        TestDatabaseCleanup.register(directory: directory)
        return directory
    }

    /// `mkdtemp("<base>/parley-test-XXXXXX")`, made traversable for the `postgres` user when running as root.
    ///
    /// The base is `PARLEY_TEST_TMPDIR`, else `/dev/shm` when writable, else `/tmp`: measured on these
    /// machines, `CREATE DATABASE … TEMPLATE` takes ~1.3 s on the disk and ~0.07 s on tmpfs, with the
    /// cluster's durability settings untouched.
    static func makeTemporaryDirectory() throws -> String {
        let environment = ProcessInfo.processInfo.environment["PARLEY_TEST_TMPDIR"].flatMap { $0.isEmpty ? nil : $0 }
        let base = environment ?? (access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp")
        var template = Array("\(base)/parley-test-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else {
            throw PostgresError(kind: .connection, message: "mkdtemp in \(base) failed: \(String(cString: strerror(errno)))")
        }
        let directory = String(cString: made)
        chmod(directory, 0o755)
        // Lets a later run remove this directory if this process is killed before its atexit cleanup.
        try? "\(getpid())\n".write(toFile: directory + "/owner.pid", atomically: true, encoding: .utf8)
        sweepOnce(base)
        return directory
    }

    private static let sweptBases = LockedValue<Set<String>>([])

    /// Removes `parley-test-*` directories of test processes that died (tmpfs memory is precious).
    private static func sweepOnce(_ base: String) {
        guard sweptBases.withLock({ $0.insert(base).inserted }) else { return }
        func alive(_ pidFile: String) -> Bool {
            guard let text = try? String(contentsOfFile: pidFile, encoding: .utf8),
                let pid = pid_t(text.split(separator: "\n").first?.trimmingCharacters(in: .whitespaces) ?? "")
            else { return false }
            return kill(pid, 0) == 0 || errno == EPERM
        }
        for name in (try? FileManager.default.contentsOfDirectory(atPath: base)) ?? [] where name.hasPrefix("parley-test-") {
            let directory = base + "/" + name
            guard FileManager.default.fileExists(atPath: directory + "/owner.pid"),
                !alive(directory + "/owner.pid"), !alive(directory + "/pg/postmaster.pid")
            else { continue }
            try? FileManager.default.removeItem(atPath: directory)
        }
    }
}

/// The server the tests use and the factory of per-test databases.
///
/// Immutable after start-up (`Sendable`); the template database is created once, when the cluster starts.
public final class TestCluster: Sendable {
    /// Superuser connection settings, database `postgres`.
    public let adminConfiguration: PostgresConfiguration
    /// The embedded cluster, or nil when `PARLEY_TEST_DATABASE_URL` names the server.
    public let embedded: EmbeddedPostgres?
    /// The migrated template database that `makeDatabase(migrated: true)` copies.
    public let templateDatabase: String
    /// Versions the template was migrated to.
    public let migratedVersions: [Int]

    private init(adminConfiguration: PostgresConfiguration, embedded: EmbeddedPostgres?, templateDatabase: String, migratedVersions: [Int]) {
        self.adminConfiguration = adminConfiguration
        self.embedded = embedded
        self.templateDatabase = templateDatabase
        self.migratedVersions = migratedVersions
    }

    static func start() throws -> TestCluster {
        let admin: PostgresConfiguration
        let embedded: EmbeddedPostgres?
        let template: String
        if let url = ProcessInfo.processInfo.environment["PARLEY_TEST_DATABASE_URL"], !url.isEmpty {
            admin = try PostgresConfiguration(url)
            embedded = nil
            // A per-process template: another process may be testing other migrations on the same server.
            template = "parley_template_\(getpid())_\(TestCluster.randomSuffix())"
        } else {
            let directory = try TestDatabase.makeTemporaryDirectory()
            let cluster = EmbeddedPostgres(dataDirectory: directory)
            TestDatabaseCleanup.register(cluster: cluster, directory: directory)
            admin = try cluster.start()
            embedded = cluster
            template = "parley_template"
        }
        let connection = try PostgresConnection(admin)
        try connection.simpleQuery("CREATE DATABASE " + (try connection.escapeIdentifier(template)))
        TestDatabaseCleanup.register(database: template, admin: admin, external: embedded == nil)
        let versions = try Migrator().migrate(configuration: admin.with(database: template))
        return TestCluster(adminConfiguration: admin, embedded: embedded, templateDatabase: template, migratedVersions: versions)
    }

    /// Creates a fresh database (a copy of the migrated template, or empty) and returns its settings.
    public func makeDatabase(migrated: Bool = true) throws -> PostgresConfiguration {
        let name = "t_" + Self.randomSuffix()
        let connection = try PostgresConnection(adminConfiguration)
        let sql =
            "CREATE DATABASE " + (try connection.escapeIdentifier(name))
            + (migrated ? " TEMPLATE " + (try connection.escapeIdentifier(templateDatabase)) : "")
        var attempt = 0
        while true {
            let failure: PostgresError
            do {
                try connection.simpleQuery(sql)
                break
            } catch {
                failure = error
            }
            // "source database is being accessed by other users": another copy is starting; retry.
            guard failure.sqlState == "55006", attempt < 50 else { throw failure }
            attempt += 1
            usleep(20_000)
        }
        TestDatabaseCleanup.register(database: name, admin: adminConfiguration, external: embedded == nil)
        var configuration = adminConfiguration.with(database: name)
        configuration.applicationName = "parley-test"
        return configuration
    }

    static func randomSuffix() -> String {
        String(UInt64.random(in: 0...UInt64.max), radix: 16)
    }
}
