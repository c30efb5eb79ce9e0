internal import CLibPQ
import Foundation
import Glibc
import ParleySync
import Synchronization

/// Parley's own PostgreSQL cluster: `initdb` on first start, then `postgres` as a child process that listens
/// only on a private Unix socket and stops when Parley stops (or dies: it gets SIGINT as parent-death signal).
///
/// Layout under `dataDirectory`: `pg/` (the cluster, owned by the cluster user), `run/` (socket directory,
/// mode 0700; a `/tmp/parley-pg-XXXXXX` directory when that path is too long for a socket), `pg.log`.
/// Running as root, the cluster runs as user `postgres`. Durability settings stay at their defaults.
/// State (the child pid) is guarded by a `LockedValue`; call `start`/`stop` from one thread at a time.
public final class EmbeddedPostgres: Sendable {
    /// The superuser that `initdb` creates (trust authentication, reachable only through the private socket).
    public static let superuser = "parley"
    /// Port number: with no TCP listener it only names the socket file (`.s.PGSQL.5432`).
    public static let port = 5432

    /// Absolute path of the Parley data directory.
    public let dataDirectory: String
    private let logger: PostgresLogger

    private struct Running: Sendable {
        var pid: pid_t
        var socketDirectory: String
        var temporarySocketDirectory: Bool
    }
    private let running = LockedValue<Running?>(nil)

    public init(dataDirectory: String, logger: PostgresLogger = .disabled) {
        let absolute = dataDirectory.hasPrefix("/") ? dataDirectory : FileManager.default.currentDirectoryPath + "/" + dataDirectory
        self.dataDirectory = (absolute as NSString).standardizingPath
        self.logger = logger
    }

    /// `<dataDirectory>/pg`: the cluster's own directory.
    public var clusterDirectory: String { dataDirectory + "/pg" }
    /// `<dataDirectory>/pg.log`: the server's log.
    public var logFile: String { dataDirectory + "/pg.log" }

    /// True while the child server runs.
    public var isRunning: Bool { running.withLock { $0 != nil } }

    /// The server process (the postmaster) while it runs: for tests that freeze or kill it.
    public var postmasterPID: pid_t? { running.withLock { $0?.pid } }

    /// How to connect while running (database `postgres`).
    public var configuration: PostgresConfiguration? {
        running.withLock { $0 }.map { Self.configuration(socketDirectory: $0.socketDirectory) }
    }

    private static func configuration(socketDirectory: String) -> PostgresConfiguration {
        PostgresConfiguration(host: socketDirectory, port: port, user: superuser, database: "postgres")
    }

    /// Initialises the cluster if needed, starts it and waits (≤ 30 s) until it accepts connections.
    ///
    /// Returns the configuration for database `postgres`; already running: returns it again.
    public func start() throws(PostgresError) -> PostgresConfiguration {
        if let configuration { return configuration }
        let binaries = try Self.findBinaries()
        let owner = try clusterOwner()
        try prepareDataDirectory(owner: owner)
        if !FileManager.default.fileExists(atPath: clusterDirectory + "/PG_VERSION") {
            try initialise(binaries: binaries, owner: owner)
        }
        try checkClusterOwnership(owner: owner)
        try removeStalePidFile()
        let (socketDirectory, temporary) = try makeSocketDirectory(owner: owner)
        let logFD = try openLog()
        defer { close(logFD) }
        let arguments = [
            binaries + "/postgres", "-D", clusterDirectory, "-k", socketDirectory, "-p", String(Self.port),
            "-c", "listen_addresses=", "-c", "max_connections=300", "-c", "shared_buffers=128MB",
            "-c", "unix_socket_permissions=0700",
        ]
        let pid: pid_t
        switch ProcessSpawner.shared.spawn(
            path: binaries + "/postgres", arguments: arguments, environment: Self.childEnvironment,
            uid: owner?.uid ?? -1, gid: owner?.gid ?? -1, parentDeathSignal: SIGINT, outputFD: logFD,
            workingDirectory: clusterDirectory)
        {
        case .started(let started): pid = started
        case .failed(let code):
            throw Self.failure("cannot start \(binaries)/postgres: \(String(cString: strerror(code)))")
        }
        logger.log(.info, "embedded postgres: started pid \(pid), socket \(socketDirectory)")
        let configuration = Self.configuration(socketDirectory: socketDirectory)
        do {
            try waitUntilReady(pid: pid, configuration: configuration)
        } catch {
            Self.terminate(pid: pid, signal: SIGKILL, graceMilliseconds: 0)
            if temporary { rmdir(socketDirectory) }
            throw error
        }
        running.withLock { $0 = Running(pid: pid, socketDirectory: socketDirectory, temporarySocketDirectory: temporary) }
        return configuration
    }

    /// How to stop the server.
    public enum StopMode: Sendable {
        /// SIGINT: clean shutdown with a checkpoint, no recovery on the next start.
        case fast
        /// SIGQUIT: no checkpoint (crash recovery on the next start); for throw-away clusters (tests).
        case immediate
    }

    /// Stops the server and waits (SIGKILL after 30 s).
    public func stop(_ mode: StopMode = .fast) {
        guard let current = running.withLock({ $0.take() }) else { return }
        logger.log(.info, "embedded postgres: stopping pid \(current.pid)")
        Self.terminate(pid: current.pid, signal: mode == .fast ? SIGINT : SIGQUIT, graceMilliseconds: 30_000)
        if current.temporarySocketDirectory { rmdir(current.socketDirectory) }
    }

    /// Creates database `name` on the running cluster (no error when it exists and `ifNotExists`).
    public func createDatabase(_ name: String, ifNotExists: Bool = true) throws(PostgresError) {
        guard let configuration else { throw Self.failure("the embedded cluster is not running") }
        let connection = try PostgresConnection(configuration, logger: logger)
        if ifNotExists, try connection.query(sql: "SELECT 1 FROM pg_database WHERE datname = $1", [name]).rowCount > 0 { return }
        do {
            try connection.simpleQuery("CREATE DATABASE " + (try connection.escapeIdentifier(name)))
        } catch  where ifNotExists && error.sqlState == "42P04" {
            return  // created concurrently
        }
    }

    /// The directory holding `postgres` and `initdb`: `pg_config --bindir`, else the highest
    /// `/usr/lib/postgresql/<version>/bin`.
    public static func findBinaries() throws(PostgresError) -> String {
        func usable(_ directory: String) -> Bool {
            access(directory + "/postgres", X_OK) == 0 && access(directory + "/initdb", X_OK) == 0
        }
        if let pipe = popen("pg_config --bindir 2>/dev/null", "r") {
            var buffer = [CChar](repeating: 0, count: 4096)
            let line = fgets(&buffer, Int32(buffer.count), pipe).map { _ in
                String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            }
            pclose(pipe)
            if let directory = line?.trimmingTrailingNewlines(), !directory.isEmpty, usable(directory) { return directory }
        }
        let root = "/usr/lib/postgresql"
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? [])
            .compactMap { name in Double(name).map { (name, $0) } }
            .sorted { $0.1 > $1.1 }
        for (name, _) in versions where usable("\(root)/\(name)/bin") { return "\(root)/\(name)/bin" }
        throw failure(
            "no PostgreSQL server binaries found (pg_config --bindir, /usr/lib/postgresql/*/bin): install them with `apt-get install postgresql`, or set DATABASE_URL to use an existing server"
        )
    }

    // MARK: - Steps of start()

    private struct Owner {
        let uid: Int32
        let gid: Int32
        let name: String
    }

    private static let childEnvironment = ["PATH=/usr/bin:/bin", "LC_ALL=C", "LANG=C"]

    private static func failure(_ message: String) -> PostgresError {
        PostgresError(kind: .connection, message: "embedded PostgreSQL: " + message)
    }

    /// Root cannot run PostgreSQL: then the cluster belongs to `postgres`; otherwise to us.
    private func clusterOwner() throws(PostgresError) -> Owner? {
        guard getuid() == 0 else { return nil }
        guard let entry = getpwnam("postgres") else {
            throw Self.failure("running as root needs a `postgres` user to run the cluster (apt-get install postgresql creates it)")
        }
        return Owner(uid: Int32(bitPattern: entry.pointee.pw_uid), gid: Int32(bitPattern: entry.pointee.pw_gid), name: "postgres")
    }

    private func prepareDataDirectory(owner: Owner?) throws(PostgresError) {
        var isDirectory: ObjCBool = false
        if !FileManager.default.fileExists(atPath: dataDirectory, isDirectory: &isDirectory) {
            do {
                // 0711: the cluster user may pass through, but not list (the admin key file lives here too).
                try FileManager.default.createDirectory(
                    atPath: dataDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o711])
            } catch {
                throw Self.failure("cannot create data directory \(dataDirectory): \(error)")
            }
        } else if !isDirectory.boolValue {
            throw Self.failure("\(dataDirectory) is not a directory")
        }
        guard let owner else { return }
        // Every ancestor must be traversable by the cluster user, or postgres cannot reach its files.
        var path = ""
        for component in dataDirectory.split(separator: "/") {
            path += "/" + component
            var info = stat()
            guard stat(path, &info) == 0 else { throw Self.failure("cannot stat \(path)") }
            let mode = info.st_mode
            let traversable =
                (info.st_uid == UInt32(owner.uid) && mode & S_IXUSR != 0)
                || (info.st_gid == UInt32(owner.gid) && mode & S_IXGRP != 0) || mode & S_IXOTH != 0
            if !traversable {
                throw Self.failure(
                    "the cluster runs as user \(owner.name), which cannot enter \(path) (mode \(String(mode & 0o777, radix: 8))): `chmod o+x \(path)` or choose a data directory it can reach"
                )
            }
        }
    }

    private func initialise(binaries: String, owner: Owner?) throws(PostgresError) {
        let staging = dataDirectory + "/pg.initdb"
        if FileManager.default.fileExists(atPath: clusterDirectory) {
            throw Self.failure("\(clusterDirectory) exists but is not a PostgreSQL data directory (no PG_VERSION); move it away")
        }
        // initdb into a staging directory and rename: an interrupted initdb never looks like a cluster.
        try? FileManager.default.removeItem(atPath: staging)
        guard mkdir(staging, 0o700) == 0 else { throw Self.failure("cannot create \(staging): \(String(cString: strerror(errno)))") }
        if let owner, chown(staging, uid_t(owner.uid), gid_t(owner.gid)) != 0 {
            throw Self.failure("cannot chown \(staging) to \(owner.name): \(String(cString: strerror(errno)))")
        }
        logger.log(.info, "embedded postgres: initdb \(clusterDirectory)")
        let logFD = try openLog()
        defer { close(logFD) }
        let arguments = [
            binaries + "/initdb", "-D", staging, "--auth=trust", "-U", Self.superuser, "-E", "UTF8", "--locale=C",
            "--no-instructions",
        ]
        let pid: pid_t
        switch ProcessSpawner.shared.spawn(
            path: binaries + "/initdb", arguments: arguments, environment: Self.childEnvironment,
            uid: owner?.uid ?? -1, gid: owner?.gid ?? -1, parentDeathSignal: SIGKILL, outputFD: logFD,
            workingDirectory: "/")
        {
        case .started(let started): pid = started
        case .failed(let code): throw Self.failure("cannot run initdb: \(String(cString: strerror(code)))")
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        guard status & 0x7f == 0, (status >> 8) & 0xff == 0 else {
            throw Self.failure("initdb failed (status \(status)); log tail:\n\(logTail())")
        }
        guard rename(staging, clusterDirectory) == 0 else {
            throw Self.failure("cannot rename \(staging): \(String(cString: strerror(errno)))")
        }
    }

    private func checkClusterOwnership(owner: Owner?) throws(PostgresError) {
        var info = stat()
        guard stat(clusterDirectory, &info) == 0 else { throw Self.failure("cannot stat \(clusterDirectory)") }
        let expected = owner.map { UInt32($0.uid) } ?? getuid()
        if info.st_uid != expected {
            throw Self.failure("\(clusterDirectory) is owned by uid \(info.st_uid), but the cluster runs as uid \(expected)")
        }
    }

    /// A `postmaster.pid` left by a crash is removed; one of a live server is an error.
    private func removeStalePidFile() throws(PostgresError) {
        let pidFile = clusterDirectory + "/postmaster.pid"
        guard let text = try? String(contentsOfFile: pidFile, encoding: .utf8) else { return }
        if let first = text.split(separator: "\n").first, let pid = pid_t(first.trimmingCharacters(in: .whitespaces)),
            pid > 0, Self.isPostgresProcess(pid)
        {
            throw Self.failure("data directory \(clusterDirectory) in use by pid \(pid)")
        }
        logger.log(.warning, "embedded postgres: removing stale postmaster.pid")
        unlink(pidFile)
    }

    /// True when `pid` is alive and is a postgres process (a recycled pid of another program does not count).
    private static func isPostgresProcess(_ pid: pid_t) -> Bool {
        guard kill(pid, 0) == 0 || errno == EPERM else { return false }
        guard let command = try? String(contentsOfFile: "/proc/\(pid)/cmdline", encoding: .utf8) else { return true }
        return command.contains("postgres")
    }

    /// Unix socket paths are limited to 108 bytes: a long data directory gets a short /tmp socket directory.
    private func makeSocketDirectory(owner: Owner?) throws(PostgresError) -> (String, temporary: Bool) {
        var directory = dataDirectory + "/run"
        var temporary = false
        if (directory + "/.s.PGSQL.\(Self.port)").utf8.count > 90 {
            var template = Array("/tmp/parley-pg-XXXXXX".utf8CString)
            guard let made = mkdtemp(&template) else {
                throw Self.failure("cannot create a socket directory in /tmp: \(String(cString: strerror(errno)))")
            }
            directory = String(cString: made)
            temporary = true
        } else {
            if mkdir(directory, 0o700) != 0 && errno != EEXIST {
                throw Self.failure("cannot create \(directory): \(String(cString: strerror(errno)))")
            }
        }
        chmod(directory, 0o700)
        if let owner, chown(directory, uid_t(owner.uid), gid_t(owner.gid)) != 0 {
            throw Self.failure("cannot chown \(directory) to \(owner.name): \(String(cString: strerror(errno)))")
        }
        return (directory, temporary)
    }

    private func openLog() throws(PostgresError) -> Int32 {
        let fd = open(logFile, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Self.failure("cannot open \(logFile): \(String(cString: strerror(errno)))") }
        return fd
    }

    private func waitUntilReady(pid: pid_t, configuration: PostgresConfiguration) throws(PostgresError) {
        let deadline = monotonicNanos() + 30_000_000_000
        let pairs = configuration.connectKeywords
        while true {
            var status: Int32 = 0
            let exited = waitpid(pid, &status, WNOHANG)
            // ECHILD: someone else reaped it (a SIGCHLD handler elsewhere); then ask whether it is alive.
            if exited == pid || (exited < 0 && errno == ECHILD && kill(pid, 0) != 0) {
                throw Self.failure("postgres exited during start-up (status \(status)); log tail:\n\(logTail())")
            }
            if Self.ping(pairs) { return }
            if monotonicNanos() > deadline {
                throw Self.failure("postgres did not accept connections within 30 s; log tail:\n\(logTail())")
            }
            PostgresThread.sleep(milliseconds: 50)
        }
    }

    private static func ping(_ pairs: [(key: String, value: String)]) -> Bool {
        var keywords: [UnsafeMutablePointer<CChar>?] = pairs.map { strdup($0.key) } + [nil]
        var values: [UnsafeMutablePointer<CChar>?] = pairs.map { strdup($0.value) } + [nil]
        defer {
            for pointer in keywords { free(pointer) }
            for pointer in values { free(pointer) }
        }
        let result = keywords.withUnsafeMutableBufferPointer { k in
            values.withUnsafeMutableBufferPointer { v in
                k.withMemoryRebound(to: UnsafePointer<CChar>?.self) { k2 in
                    v.withMemoryRebound(to: UnsafePointer<CChar>?.self) { v2 in
                        PQpingParams(k2.baseAddress, v2.baseAddress, 0)
                    }
                }
            }
        }
        return result == PQPING_OK
    }

    /// Sends `signal`, waits up to `graceMilliseconds`, then SIGKILLs and reaps.
    private static func terminate(pid: pid_t, signal: Int32, graceMilliseconds: Int) {
        kill(pid, signal)
        let deadline = monotonicNanos() + UInt64(graceMilliseconds) * 1_000_000
        var status: Int32 = 0
        while true {
            let result = waitpid(pid, &status, WNOHANG)
            if result == pid { return }
            if result < 0 && errno == ECHILD && kill(pid, 0) != 0 { return }
            if monotonicNanos() >= deadline { break }
            PostgresThread.sleep(milliseconds: 10)
        }
        kill(pid, SIGKILL)
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    }

    /// The last few KB of the server log, for start-up errors.
    public func logTail(bytes: Int = 3000) -> String {
        guard let handle = FileHandle(forReadingAtPath: logFile) else { return "(no log at \(logFile))" }
        defer { try? handle.close() }
        let size = (try? handle.seekToEnd()) ?? 0
        try? handle.seek(toOffset: size > UInt64(bytes) ? size - UInt64(bytes) : 0)
        let data = (try? handle.readToEnd()) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }
}
