import Foundation
import ParleyCore
import ParleyPostgres

/// `parley backup <file>` and `parley restore <file>` (docs/backup.md): a `pg_dump` archive of the database,
/// embedded or external, taken while the server runs; restored into a fresh data directory or an empty database.
enum BackupCommand {
    static let usage = """
        usage: parley backup <file> [--data-dir DIR | --database-url URL]
               parley restore <file> [--data-dir DIR | --database-url URL]

        backup   writes a consistent pg_dump archive (custom format) of the database to <file>, also while the
                 server runs; nothing is left at <file> when it fails
        restore  restores such an archive into a fresh data directory (or an empty DATABASE_URL database);
                 refuses a target that holds tables. Then start `parley serve` on it.

        The archive holds the database only: keep the data directory's admin_key (or your PARLEY_ADMIN_KEY) with
        it, and with the s3 file backend, the bucket (docs/backup.md).

        """

    static func run(_ command: String, arguments: [String], environment: [String: String]) -> Int32 {
        guard let file = arguments.first, !file.hasPrefix("-") else {
            ParleyCommand.printError(usage)
            return 2
        }
        let configuration: Configuration
        do {
            configuration = try Configuration.load(environment: environment, arguments: Array(arguments.dropFirst()))
        } catch {
            ParleyCommand.printError("parley: \(error.description)")
            return 2
        }
        let started = ContinuousClock.now
        do {
            if command == "backup" {
                let size = try ParleyCommand.withDatabase(configuration, migrate: false) { database in
                    try DatabaseArchive.backup(target(configuration, database), to: file)
                }
                print("parley: backup written to \(file) (\(size) bytes, \(elapsed(since: started)))")
            } else {
                try restore(file, configuration)
                print(
                    "parley: restored \(file) into \(configuration.databaseURL == nil ? configuration.dataDirectory : "DATABASE_URL") (\(elapsed(since: started)))"
                )
                if configuration.databaseURL == nil, configuration.adminKey == nil,
                    access(configuration.dataDirectory + "/admin_key", F_OK) != 0
                {
                    print(
                        "parley: \(configuration.dataDirectory)/admin_key does not exist: copy the source's there before `parley serve`, or the server makes a new admin key (apps and their keys are restored either way)"
                    )
                }
            }
            return 0
        } catch {
            ParleyCommand.printError("parley: \(command) failed: \(describe(error))")
            return 1
        }
    }

    /// Restores into the configured database; the embedded cluster is started for the duration (refused while a
    /// server runs on the data directory: its database is not empty, and the restore would race it).
    private static func restore(_ file: String, _ configuration: Configuration) throws {
        try DatabaseArchive.check(file)
        if let url = configuration.databaseURL {
            try DatabaseArchive.restore(file, into: .url(url))
            return
        }
        let location = EmbeddedPostgres.locate(dataDirectory: configuration.dataDirectory)
        if let server = location.server {
            throw DatabaseArchive.Failure(
                description: "a server runs on \(location.dataDirectory) (postmaster pid \(server.pid)): restore into a fresh data directory")
        }
        try DataDirectory.prepare(configuration.dataDirectory)
        let cluster = EmbeddedPostgres(dataDirectory: configuration.dataDirectory)
        let database = try cluster.start()
        defer { cluster.stop() }
        try DatabaseArchive.restore(file, into: .configuration(database))
    }

    private static func target(_ configuration: Configuration, _ database: PostgresConfiguration) -> DatabaseArchive.Target {
        configuration.databaseURL.map { .url($0) } ?? .configuration(database)
    }

    private static func elapsed(since start: ContinuousClock.Instant) -> String {
        let duration = ContinuousClock.now - start
        return String(format: "%.1f s", Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18)
    }

    static func describe(_ error: any Error) -> String {
        if let error = error as? PostgresError { return error.message }
        return String(describing: error)
    }
}
