import Foundation
import ParleyCore
import ParleyPostgres

/// `parley data`: where a data directory's embedded cluster lives, and the relocated clusters under
/// /var/lib/parley/clusters — listed with the data directory each belongs to, and removed once that is gone
/// (docs/backup.md#where-the-embedded-cluster-lives).
enum DataCommand {
    static let usage = """
        usage: parley data [--data-dir DIR]      where the data directory's cluster lives, its size, whether it runs
               parley data list                  the relocated clusters and the data directory each belongs to
               parley data remove <name|path> [--force]
                                                 removes a relocated cluster whose data directory is gone (never one
                                                 whose server runs or whose data directory links to it; --force
                                                 accepts one made before Parley recorded its data directory)

        """

    static func run(arguments: [String], environment: [String: String], clustersDirectory: String = EmbeddedPostgres.relocatedClustersDirectory)
        -> Int32
    {
        switch arguments.first {
        case "list":
            return list(clustersDirectory)
        case "remove":
            let rest = arguments.dropFirst()
            let force = rest.contains("--force")
            guard let given = rest.first(where: { $0 != "--force" }), rest.count == (force ? 2 : 1) else {
                ParleyCommand.printError(usage)
                return 2
            }
            return remove(given, force: force, clustersDirectory: clustersDirectory)
        default:
            do {
                let configuration = try Configuration.load(environment: environment, arguments: arguments)
                return show(configuration)
            } catch {
                ParleyCommand.printError("parley: \(error.description)\n\n\(usage)")
                return 2
            }
        }
    }

    private static func show(_ configuration: Configuration) -> Int32 {
        if configuration.databaseURL != nil {
            print("database: external (DATABASE_URL); the data directory holds no cluster")
            return 0
        }
        let location = EmbeddedPostgres.locate(dataDirectory: configuration.dataDirectory)
        print("data directory: \(location.dataDirectory)")
        guard location.initialised else {
            print("cluster:        none yet (the first `parley serve` or `migrate` creates \(location.clusterDirectory))")
            return 0
        }
        if let home = location.relocatedHome {
            print(
                "cluster:        \(location.clusterDirectory) (relocated: the cluster user cannot enter the data directory; \(location.dataDirectory)/pg links there)"
            )
            print("size:           \(megabytes(RelocatedCluster.inspect(home).size))")
        } else {
            print("cluster:        \(location.clusterDirectory)")
            print("size:           \(megabytes(RelocatedCluster.diskUsage(location.clusterDirectory)))")
        }
        if let server = location.server {
            print("server:         running (postmaster pid \(server.pid), socket directory \(server.socketDirectory))")
        } else {
            print("server:         stopped")
        }
        return 0
    }

    private static func list(_ clustersDirectory: String) -> Int32 {
        let clusters = RelocatedCluster.list(in: clustersDirectory)
        guard !clusters.isEmpty else {
            print("no relocated clusters in \(clustersDirectory)")
            return 0
        }
        for cluster in clusters {
            let owner: String
            switch cluster.owner {
            case .linked(let path): owner = "data directory \(path)"
            case .gone(let path): owner = "data directory \(path) is gone (or no longer links here): removable"
            case .unknown: owner = "data directory not recorded (made before Parley recorded it)"
            }
            let running = cluster.server.map { ", running (postmaster pid \($0.pid))" } ?? ""
            print("\(cluster.name)  \(megabytes(cluster.size))\(running)  \(owner)")
        }
        return 0
    }

    private static func remove(_ given: String, force: Bool, clustersDirectory: String) -> Int32 {
        guard let path = resolve(given, clustersDirectory: clustersDirectory) else {
            ParleyCommand.printError("parley: no relocated cluster \(given) in \(clustersDirectory) (`parley data list` shows them)")
            return 1
        }
        let cluster = RelocatedCluster.inspect(path)
        if let reason = cluster.reasonToKeep(force: force) {
            ParleyCommand.printError("parley: keeping \(path): \(reason)")
            return 1
        }
        do {
            try FileManager.default.removeItem(atPath: path)
        } catch {
            ParleyCommand.printError("parley: cannot remove \(path): \(error)")
            return 1
        }
        print("removed \(path) (\(megabytes(cluster.size)))")
        return 0
    }

    /// A cluster's name, its path, or the path of the data directory it was made for (recorded, or hashed as the name
    /// was made) — always a directory directly inside `clustersDirectory`.
    private static func resolve(_ given: String, clustersDirectory: String) -> String? {
        let clusters = RelocatedCluster.list(in: clustersDirectory)
        let standardized = (given as NSString).standardizingPath
        if let match = clusters.first(where: { $0.name == given || $0.path == standardized }) { return match.path }
        let absolute = EmbeddedPostgres(dataDirectory: given).dataDirectory
        if let match = clusters.first(where: { $0.recordedOwner == absolute }) { return match.path }
        let hashed = RelocatedCluster.name(forDataDirectory: absolute)
        return clusters.first(where: { $0.name == hashed })?.path
    }

    private static func megabytes(_ bytes: UInt64) -> String {
        String(format: "%.1f MB", Double(bytes) / 1_000_000)
    }
}
