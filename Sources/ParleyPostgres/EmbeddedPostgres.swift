internal import CLibPQ
import Foundation
import Glibc
import ParleySync
import Synchronization

/// Parley's own PostgreSQL cluster: `initdb` on first start, then `postgres` as a supervised child process that
/// listens only on a private Unix socket and stops when Parley stops (or dies: it gets SIGINT as parent-death signal).
///
/// Layout under `dataDirectory`: `pg/` (the cluster, owned by the cluster user), `run/` (socket directory,
/// mode 0700; a `/tmp/parley-pg-XXXXXX` directory when that path is too long for a socket), `pg.log`, and `pg.lock`,
/// locked (`flock`) by the one process that runs the cluster: the kernel drops the lock when that process dies, even
/// by SIGKILL, so a restart knows at once whether another Parley still owns the directory.
///
/// Supervision: a thread waits for the server process. If it exits while nobody asked it to stop (`pg_ctl stop`, a
/// crash, a kill), the server is started again on the same socket, after `restartDelay` and then with doubling
/// delays (up to 10 s) while starts fail; each restart is logged and counted (`restarts`). `state` tells whether it
/// runs. A start after a crashed Parley waits (up to 30 s, logged) for the previous server, orphaned and shutting down,
/// to exit, and retries while its last processes still hold the shared memory; it never starts a second postmaster on
/// a directory whose postmaster still runs. Running as root, the cluster runs as user `postgres`; when that user
/// cannot reach the data directory (under root's home, mode 0700 on Debian), the cluster's own files (`pg/`, the
/// socket directory) go to `relocatedClustersDirectory` instead, and `pg` in the data directory is a symbolic link to
/// them (see ``clusterHome``). Durability settings stay at their defaults.
///
/// State: the supervised process under a `LockedValue`, `state` and `restarts` in atomics; the supervisor thread
/// alone reaps the server process. Call `start`/`stop` from one thread at a time.
public final class EmbeddedPostgres: Sendable {
    /// The superuser that `initdb` creates (trust authentication, reachable only through the private socket).
    public static let superuser = "parley"
    /// Port number: with no TCP listener it only names the socket file (`.s.PGSQL.5432`).
    public static let port = 5432

    /// Whether the server runs, as `/healthz` reports it.
    public enum State: Int, Sendable {
        /// Not started, or stopped by `stop()`.
        case stopped = 0
        /// Accepting connections.
        case running = 1
        /// It exited unexpectedly; the supervisor is starting it again.
        case restarting = 2
    }

    /// Absolute path of the Parley data directory.
    public let dataDirectory: String
    /// How long the supervisor waits before the first restart after an unexpected exit.
    public let restartDelay: Duration
    private let logger: PostgresLogger

    private struct Supervised: Sendable {
        var pid: pid_t
        var startedNanos: UInt64
        let socketDirectory: String
        let temporarySocketDirectory: Bool
        /// The open `pg.lock`, locked for as long as this process owns the cluster.
        let lockFD: Int32
        var stopping = false
    }
    private let running = LockedValue<Supervised?>(nil)
    private let supervisor = LockedValue<BackgroundThread?>(nil)
    /// The supervisor thread says here that it has returned (`stop` waits for it with a deadline).
    private let supervisorDone = WaitQueue<Bool>()
    /// Cuts short the supervisor's wait between restarts when `stop` is called.
    private let wakeup = Wakeup()
    private let stateValue = Atomic<Int>(State.stopped.rawValue)
    private let restartCount = Atomic<Int>(0)

    /// The longest the supervisor waits between two restart attempts.
    static let maxRestartDelayNanos: UInt64 = 10_000_000_000
    /// A server that ran this long before exiting is restarted after `restartDelay` again (not a longer delay).
    static let stableRunNanos: UInt64 = 30_000_000_000
    /// How long a start waits for the previous server of the directory to exit, and retries a start that failed
    /// because the previous server's processes still hold its shared memory or lock files.
    static let takeoverNanos: UInt64 = 30_000_000_000

    public init(dataDirectory: String, logger: PostgresLogger = .disabled, restartDelay: Duration = .milliseconds(250)) {
        let absolute = dataDirectory.hasPrefix("/") ? dataDirectory : FileManager.default.currentDirectoryPath + "/" + dataDirectory
        self.dataDirectory = (absolute as NSString).standardizingPath
        self.logger = logger
        self.restartDelay = restartDelay
    }

    /// Where root puts the cluster of a data directory its cluster user cannot reach: one directory per data
    /// directory (named by a hash of its path), root's, traversable (0711), holding the cluster user's `pg/` and `run/`.
    public static let relocatedClustersDirectory = "/var/lib/parley/clusters"

    /// The directory holding `pg/` and `run/` as the cluster user sees it (``clusterHome``); nil before `start`.
    private let home = LockedValue<String?>(nil)

    /// The cluster's own directory: `<dataDirectory>/pg`, or its relocated place (``relocatedClustersDirectory``).
    public var clusterDirectory: String { (home.withLock { $0 } ?? dataDirectory) + "/pg" }
    /// `<dataDirectory>/pg.log`: the server's log.
    public var logFile: String { dataDirectory + "/pg.log" }
    /// `<dataDirectory>/pg.lock`: held by the process that runs the cluster.
    var lockFile: String { dataDirectory + "/pg.lock" }

    /// True from `start` to `stop` (also while the supervisor restarts the server).
    public var isRunning: Bool { running.withLock { $0 != nil } }

    /// Whether the server accepts connections, is being restarted, or is stopped.
    public var state: State { State(rawValue: stateValue.load(ordering: .acquiring)) ?? .stopped }

    /// How many times the supervisor restarted the server since `start`.
    public var restarts: Int { restartCount.load(ordering: .relaxed) }

    /// The server process (the postmaster) while one runs: for tests that freeze or kill it.
    public var postmasterPID: pid_t? { running.withLock { $0?.pid }.flatMap { $0 > 0 ? $0 : nil } }

    /// How to connect while running (database `postgres`).
    public var configuration: PostgresConfiguration? {
        running.withLock { $0 }.map { Self.configuration(socketDirectory: $0.socketDirectory) }
    }

    private static func configuration(socketDirectory: String) -> PostgresConfiguration {
        PostgresConfiguration(host: socketDirectory, port: port, user: superuser, database: "postgres")
    }

    /// Initialises the cluster if needed, starts it, waits (≤ 30 s) until it accepts connections, and supervises it.
    ///
    /// Returns the configuration for database `postgres`; already running: returns it again. Fails when another
    /// process runs the cluster.
    public func start() throws(PostgresError) -> PostgresConfiguration {
        if let configuration { return configuration }
        let binaries = try Self.findBinaries()
        let owner = try clusterOwner()
        try prepareDataDirectory()
        let lockFD = try lockDataDirectory()
        do throws(PostgresError) {
            let place = try clusterHome(owner: owner)
            home.withLock { $0 = place }
        } catch {
            close(lockFD)
            throw error
        }
        do throws(PostgresError) {
            if !FileManager.default.fileExists(atPath: clusterDirectory + "/PG_VERSION") {
                try initialise(binaries: binaries, owner: owner)
            }
            try checkClusterOwnership(owner: owner)
            let (socketDirectory, temporary) = try makeSocketDirectory(owner: owner)
            let pid: pid_t
            do throws(PostgresError) {
                pid = try launch(binaries: binaries, owner: owner, socketDirectory: socketDirectory)
            } catch {
                if temporary { rmdir(socketDirectory) }
                throw error
            }
            running.withLock {
                $0 = Supervised(
                    pid: pid, startedNanos: monotonicNanos(), socketDirectory: socketDirectory, temporarySocketDirectory: temporary,
                    lockFD: lockFD)
            }
            stateValue.store(State.running.rawValue, ordering: .releasing)
            restartCount.store(0, ordering: .relaxed)
            let thread = BackgroundThread(name: "pg-supervisor") { [self] in
                supervise(binaries: binaries, owner: owner, socketDirectory: socketDirectory)
                supervisorDone.push(true)
            }
            supervisor.withLock { $0 = thread }
            return Self.configuration(socketDirectory: socketDirectory)
        } catch {
            close(lockFD)
            throw error
        }
    }

    /// How to stop the server.
    public enum StopMode: Sendable {
        /// SIGINT: clean shutdown with a checkpoint, no recovery on the next start.
        case fast
        /// SIGQUIT: no checkpoint (crash recovery on the next start); for throw-away clusters (tests).
        case immediate
    }

    /// Stops supervising, stops the server and waits (SIGKILL after 30 s).
    public func stop(_ mode: StopMode = .fast) {
        let current = running.withLock { supervised -> Supervised? in
            guard supervised != nil, !supervised!.stopping else { return nil }
            supervised!.stopping = true
            return supervised
        }
        guard let current else { return }
        logger.log(.info, "embedded postgres: stopping pid \(current.pid)")
        wakeup.signal()
        // 0: between two runs (the supervisor then returns instead of restarting).
        if current.pid > 0 { kill(current.pid, mode == .fast ? SIGINT : SIGQUIT) }
        // The supervisor reaps the server and returns; past the grace period the server is killed.
        if supervisorDone.pop(deadlineNanos: monotonicNanos() + 30_000_000_000) == nil {
            logger.log(.warning, "embedded postgres: pid \(current.pid) did not stop within 30 s; killing it")
            if let pid = postmasterPID { kill(pid, SIGKILL) }
            _ = supervisorDone.pop()
        }
        supervisor.withLock { $0.take() }?.join()
        running.withLock { $0 = nil }
        stateValue.store(State.stopped.rawValue, ordering: .releasing)
        if current.temporarySocketDirectory { rmdir(current.socketDirectory) }
        close(current.lockFD)
    }

    // MARK: - Supervision

    /// The supervisor thread: waits for the server to exit and, unless `stop` asked for it, starts it again.
    private func supervise(binaries: String, owner: Owner?, socketDirectory: String) {
        var delayNanos = PostgresConfiguration.nanos(restartDelay)
        while let current = running.withLock({ $0 }), current.pid > 0 {
            let pid = current.pid
            // Wait for the exit without reaping, forget the pid, then reap: `stop` never signals a pid that the kernel
            // may already have handed to another process.
            var info = siginfo_t()
            while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR {}
            let stopping = running.withLock { supervised -> Bool in
                supervised?.pid = 0
                return supervised?.stopping ?? true
            }
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
            if stopping { return }
            stateValue.store(State.restarting.rawValue, ordering: .releasing)
            if monotonicNanos() &- current.startedNanos >= Self.stableRunNanos {
                delayNanos = PostgresConfiguration.nanos(restartDelay)
            }
            logger.log(
                .warning,
                "embedded postgres: pid \(pid) exited unexpectedly (\(Self.describe(status: status))); restarting in \(delayNanos / 1_000_000) ms"
            )
            while true {
                wakeup.wait(timeoutMillis: Int(delayNanos / 1_000_000))
                if running.withLock({ $0?.stopping ?? true }) { return }
                do {
                    let restarted = try launch(binaries: binaries, owner: owner, socketDirectory: socketDirectory)
                    let kept = running.withLock { supervised -> Bool in
                        guard supervised != nil, !supervised!.stopping else { return false }
                        supervised!.pid = restarted
                        supervised!.startedNanos = monotonicNanos()
                        return true
                    }
                    guard kept else {
                        // `stop` came while it started: it is ours to stop.
                        Self.terminate(pid: restarted, signal: SIGINT, graceMilliseconds: 30_000)
                        return
                    }
                    let count = restartCount.add(1, ordering: .relaxed).newValue
                    stateValue.store(State.running.rawValue, ordering: .releasing)
                    logger.log(.warning, "embedded postgres: restarted as pid \(restarted) (restart \(count))")
                    break
                } catch {
                    delayNanos = min(delayNanos * 2, Self.maxRestartDelayNanos)
                    logger.log(.error, "embedded postgres: restart failed (\(error.message)); retrying in \(delayNanos / 1_000_000) ms")
                }
            }
        }
    }

    /// A wait status in words, for the log.
    private static func describe(status: Int32) -> String {
        let signal = status & 0x7f
        return signal == 0 ? "exit status \((status >> 8) & 0xff)" : "signal \(signal)"
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

    private func prepareDataDirectory() throws(PostgresError) {
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
    }

    /// The directory that holds the cluster's `pg/` and `run/`, as the cluster user reaches it.
    ///
    /// The data directory itself, unless root runs Parley and user `postgres` cannot pass through one of the data
    /// directory's ancestors (a clone under root's home, mode 0700): then `relocatedClustersDirectory/<hash of the data
    /// directory's path>`, made on the first start, with `<dataDirectory>/pg` a symbolic link to its `pg` — which later
    /// starts follow, also after the data directory moved. No permission of the user's directories changes.
    private func clusterHome(owner: Owner?) throws(PostgresError) -> String {
        guard let owner else { return dataDirectory }
        let link = dataDirectory + "/pg"
        if let target = try? FileManager.default.destinationOfSymbolicLink(atPath: link) {
            guard target.hasPrefix("/"), target.hasSuffix("/pg") else {
                throw Self.failure("\(link) links to \(target), not to a relocated cluster (an absolute path ending in /pg)")
            }
            let relocated = String(target.dropLast(3))
            if let (path, mode) = Self.unreachableAncestor(of: relocated, by: owner) {
                throw Self.failure("the cluster runs as user \(owner.name), which cannot enter \(path) (mode \(String(mode, radix: 8)))")
            }
            // Clusters made before the owner was recorded, and data directories that moved, get their record now.
            RelocatedCluster.recordOwner(dataDirectory, in: relocated)
            return relocated
        }
        guard let (path, mode) = Self.unreachableAncestor(of: dataDirectory, by: owner) else { return dataDirectory }
        if FileManager.default.fileExists(atPath: link) {
            // A cluster made where it can no longer be reached (permissions changed since): moving it is the operator's
            // call, not a start's.
            throw Self.failure(
                "the cluster runs as user \(owner.name), which cannot enter \(path) (mode \(String(mode, radix: 8))), and \(link) is there already: `chmod o+x \(path)`, or move \(link) into a directory it can reach and link it back"
            )
        }
        let relocated = Self.relocatedClustersDirectory + "/" + String(SHA256.hex(Array(dataDirectory.utf8)).prefix(16))
        do {
            try FileManager.default.createDirectory(
                atPath: relocated, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o711])
        } catch {
            throw Self.failure("cannot create \(relocated) for the cluster (user \(owner.name) cannot enter \(path)): \(error)")
        }
        for directory in [Self.relocatedClustersDirectory, relocated] { chmod(directory, 0o711) }
        if let (blocked, _) = Self.unreachableAncestor(of: relocated, by: owner) {
            throw Self.failure("the cluster runs as user \(owner.name), which cannot enter \(blocked) either")
        }
        // `parley data list` reads it to tell which data directory the cluster belongs to, and whether it is gone.
        RelocatedCluster.recordOwner(dataDirectory, in: relocated)
        guard symlink(relocated + "/pg", link) == 0 else {
            throw Self.failure("cannot link \(link) to \(relocated)/pg: \(String(cString: strerror(errno)))")
        }
        logger.log(
            .info,
            "embedded postgres: user \(owner.name) cannot enter \(path) (mode \(String(mode, radix: 8))); the cluster lives in \(relocated)/pg, linked from \(link)"
        )
        return relocated
    }

    /// The first ancestor of `path` (itself included) that `owner` cannot pass through, with its mode.
    private static func unreachableAncestor(of path: String, by owner: Owner) -> (path: String, mode: mode_t)? {
        var current = ""
        for component in path.split(separator: "/") {
            current += "/" + component
            var info = stat()
            guard stat(current, &info) == 0 else { return (current, 0) }
            let mode = info.st_mode
            let traversable =
                (info.st_uid == UInt32(owner.uid) && mode & S_IXUSR != 0)
                || (info.st_gid == UInt32(owner.gid) && mode & S_IXGRP != 0) || mode & S_IXOTH != 0
            if !traversable { return (current, mode & 0o777) }
        }
        return nil
    }

    private func initialise(binaries: String, owner: Owner?) throws(PostgresError) {
        let staging = (home.withLock { $0 } ?? dataDirectory) + "/pg.initdb"
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

    /// Locks `pg.lock` for this process, or fails naming the process that holds it (another Parley runs the cluster).
    private func lockDataDirectory() throws(PostgresError) -> Int32 {
        let fd = open(lockFile, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Self.failure("cannot open \(lockFile): \(String(cString: strerror(errno)))") }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let holder = (try? String(contentsOfFile: lockFile, encoding: .utf8))?.trimmingTrailingNewlines() ?? "?"
            close(fd)
            throw Self.failure("data directory \(dataDirectory) in use by pid \(holder.isEmpty ? "?" : holder) (another Parley runs its cluster)")
        }
        let text = Array("\(getpid())\n".utf8)
        _ = ftruncate(fd, 0)
        _ = text.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        return fd
    }

    /// Waits (≤ `takeoverNanos`) until no postmaster of a previous run lives on the cluster: with `pg.lock` held, one
    /// that still runs was left by a Parley that died and is shutting down (its parent-death signal). Removes
    /// `postmaster.pid` and the socket's lock file when they name a process that is gone (or not PostgreSQL).
    private func waitForPreviousServer(socketDirectory: String) throws(PostgresError) {
        let pidFile = clusterDirectory + "/postmaster.pid"
        let deadline = monotonicNanos() + Self.takeoverNanos
        var waited = false
        while let pid = Self.pid(inFile: pidFile), pid > 0, Self.isPostgresProcess(pid) {
            if !waited {
                logger.log(.warning, "embedded postgres: waiting for the previous server (pid \(pid)), left by a Parley that stopped, to exit")
                waited = true
            }
            guard monotonicNanos() < deadline else {
                throw Self.failure("data directory \(clusterDirectory) in use by pid \(pid), which did not exit within 30 s; stop it")
            }
            PostgresThread.sleep(milliseconds: 20)
        }
        if waited { logger.log(.info, "embedded postgres: the previous server exited") }
        for file in [pidFile, socketDirectory + "/.s.PGSQL.\(Self.port).lock"] where FileManager.default.fileExists(atPath: file) {
            if let pid = Self.pid(inFile: file), pid > 0, Self.isPostgresProcess(pid) { continue }
            logger.log(.warning, "embedded postgres: removing stale \((file as NSString).lastPathComponent)")
            unlink(file)
        }
    }

    /// The pid on the first line of a PostgreSQL lock file, if any.
    static func pid(inFile path: String) -> pid_t? {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8), let first = text.split(separator: "\n").first else {
            return nil
        }
        return pid_t(first.trimmingCharacters(in: .whitespaces))
    }

    /// True when `pid` is alive and is a postgres process (a recycled pid of another program does not count).
    static func isPostgresProcess(_ pid: pid_t) -> Bool {
        guard kill(pid, 0) == 0 || errno == EPERM else { return false }
        guard let command = try? String(contentsOfFile: "/proc/\(pid)/cmdline", encoding: .utf8) else { return true }
        return command.contains("postgres")
    }

    /// Unix socket paths are limited to 108 bytes: a long data directory gets a short /tmp socket directory.
    private func makeSocketDirectory(owner: Owner?) throws(PostgresError) -> (String, temporary: Bool) {
        var directory = (home.withLock { $0 } ?? dataDirectory) + "/run"
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

    /// Starts the server on `socketDirectory` and waits until it accepts connections; returns its pid.
    ///
    /// Waits first for a previous server of the directory to exit. A start that fails while the previous server's last
    /// processes still hold its shared memory or lock files (they exit soon after their postmaster was killed) is tried
    /// again, within `takeoverNanos`.
    private func launch(binaries: String, owner: Owner?, socketDirectory: String) throws(PostgresError) -> pid_t {
        let deadline = monotonicNanos() + Self.takeoverNanos
        var retries = 0
        while true {
            try waitForPreviousServer(socketDirectory: socketDirectory)
            let logOffset = logSize()
            let logFD = try openLog()
            defer { close(logFD) }
            // recovery_init_sync_method=syncfs: crash recovery (after the server and its postmaster were killed
            // together) first makes the whole data directory durable; the default opens and fsyncs each of its
            // ~1,500 files, 2–3 s of a restart here, where one syncfs(2) of the file system takes tens of ms
            // (docs/reliability.md, "Restarting right after a crash").
            let arguments = [
                binaries + "/postgres", "-D", clusterDirectory, "-k", socketDirectory, "-p", String(Self.port),
                "-c", "listen_addresses=", "-c", "max_connections=300", "-c", "shared_buffers=128MB",
                "-c", "unix_socket_permissions=0700", "-c", "recovery_init_sync_method=syncfs",
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
            switch waitUntilReady(pid: pid, configuration: Self.configuration(socketDirectory: socketDirectory)) {
            case .ready:
                return pid
            case .cancelled:
                Self.terminate(pid: pid, signal: SIGKILL, graceMilliseconds: 0)
                throw Self.failure("start cancelled by stop()")
            case .exited(let status):
                let output = logText(from: logOffset)
                let transient = Self.transientStartFailures.contains { output.contains($0) }
                if transient, monotonicNanos() < deadline, !running.withLock({ $0?.stopping ?? false }) {
                    if retries == 0 {
                        logger.log(.warning, "embedded postgres: the previous server's last processes still hold the cluster; retrying")
                    }
                    retries += 1
                    PostgresThread.sleep(milliseconds: 100)
                    continue
                }
                throw Self.failure("postgres exited during start-up (\(Self.describe(status: status))); log:\n\(output.suffix(3000))")
            case .timedOut:
                Self.terminate(pid: pid, signal: SIGKILL, graceMilliseconds: 0)
                throw Self.failure("postgres did not accept connections within 30 s; log:\n\(logText(from: logOffset).suffix(3000))")
            }
        }
    }

    /// What PostgreSQL logs when a start fails only because the previous server's processes have not all exited.
    static let transientStartFailures = ["pre-existing shared memory block", "Is another postmaster", "already exists"]

    private enum Readiness {
        case ready
        case exited(status: Int32)
        case timedOut
        /// `stop` was called while the supervisor restarted the server.
        case cancelled
    }

    private func waitUntilReady(pid: pid_t, configuration: PostgresConfiguration) -> Readiness {
        let deadline = monotonicNanos() + 30_000_000_000
        let pairs = configuration.connectKeywords
        while true {
            var status: Int32 = 0
            let exited = waitpid(pid, &status, WNOHANG)
            // ECHILD: someone else reaped it (a SIGCHLD handler elsewhere); then ask whether it is alive.
            if exited == pid || (exited < 0 && errno == ECHILD && kill(pid, 0) != 0) { return .exited(status: status) }
            if Self.ping(pairs) { return .ready }
            if monotonicNanos() > deadline { return .timedOut }
            if running.withLock({ $0?.stopping ?? false }) { return .cancelled }
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

    /// Sends `signal`, waits up to `graceMilliseconds`, then SIGKILLs and reaps (a child the supervisor does not wait for).
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

    private func logSize() -> UInt64 {
        var info = stat()
        return stat(logFile, &info) == 0 ? UInt64(info.st_size) : 0
    }

    /// The server log from `offset` on (what one start wrote).
    private func logText(from offset: UInt64) -> String {
        guard let handle = FileHandle(forReadingAtPath: logFile) else { return "(no log at \(logFile))" }
        defer { try? handle.close() }
        try? handle.seek(toOffset: offset)
        return String(decoding: (try? handle.readToEnd()) ?? Data(), as: UTF8.self)
    }

    /// The last few KB of the server log, for start-up errors.
    public func logTail(bytes: Int = 3000) -> String {
        let size = logSize()
        return logText(from: size > UInt64(bytes) ? size - UInt64(bytes) : 0)
    }
}
