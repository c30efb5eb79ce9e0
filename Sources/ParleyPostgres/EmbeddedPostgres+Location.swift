import Foundation
import Glibc

/// Finding a data directory's cluster from another process (`parley apps create`, `backup`, `data`): where it lives,
/// and where its running server listens. The server writes its socket directory into `postmaster.pid`, so the
/// answer holds wherever the socket went: `<data>/run`, the relocated directory's `run/`, or a `/tmp/parley-pg-*`
/// directory when those paths are too long for a socket.
extension EmbeddedPostgres {
    /// A running server of a cluster, as its `postmaster.pid` describes it.
    public struct RunningServer: Sendable {
        public let pid: pid_t
        public let socketDirectory: String
        /// How to connect (database `postgres`, the embedded superuser).
        public var configuration: PostgresConfiguration {
            PostgresConfiguration(host: socketDirectory, port: EmbeddedPostgres.port, user: EmbeddedPostgres.superuser, database: "postgres")
        }
    }

    /// Where a data directory's cluster lives and whether it runs.
    public struct Location: Sendable {
        public let dataDirectory: String
        /// `<dataDirectory>/pg`, or the relocated `pg/` that it links to.
        public let clusterDirectory: String
        /// The relocated directory (under ``relocatedClustersDirectory``) holding the cluster, when it was relocated.
        public let relocatedHome: String?
        /// True once `initdb` has run (`PG_VERSION` is there).
        public let initialised: Bool
        public let server: RunningServer?
    }

    /// Where the cluster of `dataDirectory` lives, without starting anything.
    public static func locate(dataDirectory: String) -> Location {
        let absolute = EmbeddedPostgres(dataDirectory: dataDirectory).dataDirectory
        let link = absolute + "/pg"
        var clusterDirectory = link
        var relocatedHome: String?
        if let target = try? FileManager.default.destinationOfSymbolicLink(atPath: link), target.hasPrefix("/") {
            clusterDirectory = target
            if target.hasSuffix("/pg") { relocatedHome = String(target.dropLast(3)) }
        }
        return Location(
            dataDirectory: absolute, clusterDirectory: clusterDirectory, relocatedHome: relocatedHome,
            initialised: FileManager.default.fileExists(atPath: clusterDirectory + "/PG_VERSION"),
            server: runningServer(clusterDirectory: clusterDirectory))
    }

    /// The server running on `clusterDirectory`, from its `postmaster.pid` (line 1: pid, line 5: socket directory),
    /// when that process is alive and is PostgreSQL.
    public static func runningServer(clusterDirectory: String) -> RunningServer? {
        guard let text = try? String(contentsOfFile: clusterDirectory + "/postmaster.pid", encoding: .utf8) else { return nil }
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
        guard lines.count >= 5, let pid = pid_t(lines[0]), pid > 0, isPostgresProcess(pid), lines[4].hasPrefix("/") else { return nil }
        return RunningServer(pid: pid, socketDirectory: lines[4])
    }
}

/// One directory under ``EmbeddedPostgres/relocatedClustersDirectory``: the cluster of a data directory that the
/// cluster user could not enter. Its `data-directory` file names the data directory it was made for (written on its
/// first start, and again on any later start, so a data directory that moved updates it).
public struct RelocatedCluster: Sendable {
    /// The file, inside the relocated directory, that names the owning data directory.
    static let ownerFile = "data-directory"

    /// The directory's name: the first 16 hex digits of the SHA-256 of the data directory's path.
    public let name: String
    public let path: String
    /// The data directory it was made for; nil for clusters made before Parley recorded it.
    public let recordedOwner: String?
    /// Bytes on disk.
    public let size: UInt64
    public let server: EmbeddedPostgres.RunningServer?

    /// What became of the data directory it belongs to.
    public enum Owner: Sendable, Equatable {
        /// The data directory exists and its `pg` links here.
        case linked(String)
        /// The recorded data directory is gone (or no longer links here): nothing uses this cluster.
        case gone(String)
        /// Made before owners were recorded, and no data directory at the path its name was made from links here.
        case unknown
    }
    public let owner: Owner

    /// The name a data directory's relocated cluster gets.
    public static func name(forDataDirectory path: String) -> String {
        String(SHA256.hex(Array(EmbeddedPostgres(dataDirectory: path).dataDirectory.utf8)).prefix(16))
    }

    /// Writes the owner record (best effort: a start never fails for it).
    static func recordOwner(_ dataDirectory: String, in relocated: String) {
        let path = relocated + "/" + ownerFile
        if (try? String(contentsOfFile: path, encoding: .utf8)) == dataDirectory + "\n" { return }
        try? (dataDirectory + "\n").write(toFile: path, atomically: true, encoding: .utf8)
    }

    /// The relocated clusters under `directory`, by name.
    public static func list(in directory: String = EmbeddedPostgres.relocatedClustersDirectory) -> [RelocatedCluster] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.sorted().compactMap { name in
            let path = directory + "/" + name
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue else { return nil }
            return inspect(path)
        }
    }

    /// One relocated directory: its record, what became of its data directory, its size and its server.
    public static func inspect(_ path: String) -> RelocatedCluster {
        let name = (path as NSString).lastPathComponent
        let text = (try? String(contentsOfFile: path + "/" + ownerFile, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
        let recorded = text?.isEmpty == false ? text : nil
        let owner: Owner
        if let recorded {
            owner = links(recorded, to: path) ? .linked(recorded) : .gone(recorded)
        } else {
            owner = .unknown
        }
        return RelocatedCluster(
            name: name, path: path, recordedOwner: recorded, size: diskUsage(path),
            server: EmbeddedPostgres.runningServer(clusterDirectory: path + "/pg"),
            owner: owner)
    }

    /// Whether `dataDirectory/pg` is a link into `relocated`.
    static func links(_ dataDirectory: String, to relocated: String) -> Bool {
        guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: dataDirectory + "/pg") else { return false }
        return (target as NSString).standardizingPath == (relocated + "/pg" as NSString).standardizingPath
    }

    /// Why this cluster must stay, or nil when removing it loses nothing in use. `force` accepts an unknown owner.
    public func reasonToKeep(force: Bool) -> String? {
        if let server { return "its server runs (postmaster pid \(server.pid))" }
        switch owner {
        case .linked(let dataDirectory): return "data directory \(dataDirectory) still links to it"
        case .gone: return nil
        case .unknown:
            return force
                ? nil
                : "it was made before Parley recorded which data directory owns it, so nothing says that data directory is gone: start that data directory's server once (it records itself), or pass --force if you know it is gone"
        }
    }

    /// Bytes on disk under `path` (allocated blocks; links are not followed).
    public static func diskUsage(_ path: String) -> UInt64 {
        var info = stat()
        guard lstat(path, &info) == 0 else { return 0 }
        var total = UInt64(info.st_blocks) * 512
        guard info.st_mode & S_IFMT == S_IFDIR, let entries = try? FileManager.default.contentsOfDirectory(atPath: path) else {
            return total
        }
        for entry in entries { total += diskUsage(path + "/" + entry) }
        return total
    }
}
