import Foundation
import Glibc
import ParleyPostgres
import ParleySync
import Synchronization

/// What the test process must undo at exit: stop clusters, remove their directories, drop databases
/// created on an external server. Guarded by a `LockedValue`; runs once from an `atexit` handler.
enum TestDatabaseCleanup {
    private struct State {
        var clusters: [(EmbeddedPostgres, String)] = []
        /// Directories of clusters run by a Parley server (stopped by its test) or a `parley` process.
        var directories: [String] = []
        var externalDatabases: [(String, PostgresConfiguration)] = []
        /// The per-test databases whose events are written out at exit (``TestEventRecording``).
        var recordedDatabases: [(String, PostgresConfiguration)] = []
        var installed = false
    }

    private static let state = LockedValue(State())

    static func register(cluster: EmbeddedPostgres, directory: String) {
        let install = state.withLock { state in
            state.clusters.append((cluster, directory))
            return installOnce(&state)
        }
        if install { atexit { TestDatabaseCleanup.run() } }
    }

    static func register(directory: String) {
        let install = state.withLock { state in
            state.directories.append(directory)
            return installOnce(&state)
        }
        if install { atexit { TestDatabaseCleanup.run() } }
    }

    static func register(database: String, admin: PostgresConfiguration, external: Bool) {
        if TestEventRecording.path != nil {
            let install = state.withLock { state in
                state.recordedDatabases.append((database, admin))
                return installOnce(&state)
            }
            if install { atexit { TestDatabaseCleanup.run() } }
        }
        // Embedded clusters vanish with their directory; only an external server needs its databases dropped.
        guard external else { return }
        let install = state.withLock { state in
            state.externalDatabases.append((database, admin))
            return installOnce(&state)
        }
        if install { atexit { TestDatabaseCleanup.run() } }
    }

    private static func installOnce(_ state: inout State) -> Bool {
        defer { state.installed = true }
        return !state.installed
    }

    private static func run() {
        let (clusters, databases, directories, recorded) = state.withLock { state in
            defer {
                state.clusters = []
                state.externalDatabases = []
                state.directories = []
                state.recordedDatabases = []
            }
            return (state.clusters, state.externalDatabases, state.directories, state.recordedDatabases)
        }
        // Before anything is dropped or stopped: the events are read from the databases.
        TestEventRecording.write(databases: recorded)
        for directory in directories { try? FileManager.default.removeItem(atPath: directory) }
        for (name, admin) in databases {
            guard let connection = try? PostgresConnection(admin), let quoted = try? connection.escapeIdentifier(name) else { continue }
            _ = try? connection.simpleQuery("DROP DATABASE IF EXISTS \(quoted) WITH (FORCE)")
        }
        for (cluster, directory) in clusters {
            // The directory is deleted next: skip the shutdown checkpoint.
            cluster.stop(.immediate)
            try? FileManager.default.removeItem(atPath: directory)
        }
    }
}
