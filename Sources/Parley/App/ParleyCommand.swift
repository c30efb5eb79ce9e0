import Glibc
import ParleyAPI
import ParleyCore
import ParleyDomains
import ParleyHTTP
import ParleyLive
import ParleyPostgres

/// The `parley` command line: `serve`, `migrate`, `config`, `apps create`, `backup`, `restore`, `data`, `export`,
/// `import`, `version`, `help`.
public enum ParleyCommand {
    public static let version = "0.1.0"

    static let usage = """
        usage: parley <command> [options]

        commands:
          serve     run the server (embedded PostgreSQL unless DATABASE_URL is set)
          migrate   apply the database migrations and exit
          config [check] [serve options]
                    print the effective configuration with each value's source, or check it (exit 0 or 2)
          apps create <app_id> [--name NAME]
                    create an app and print its key (works while the server runs)
          backup <file>
                    write a consistent archive of the database (pg_dump), also while the server runs
          restore <file>
                    restore an archive into a fresh data directory or an empty database
          data [list | remove <name>]
                    where the embedded cluster lives; list and remove relocated clusters
          export    write one conversation's messages as NDJSON, from a running server
          import    send an NDJSON file of messages to a running server
          sql send <part>... | sql events
                    print the message writer's statement for a batch with these parts (peer, group, room,
                    keyed, checked, policy, friend_only, reply, combine), or its event append: the benchmarks
                    run what the server runs
          version   print the version
          help      this text

        parley serve --help lists the options and their environment variables.

        """

    /// Runs `command` and returns the process exit status.
    public static func run(command: String, arguments: [String], environment: [String: String]) -> Int32 {
        switch command {
        case "version", "--version":
            print("parley \(version)")
            return 0
        case "help", "--help", "-h":
            print(usage, terminator: "")
            return 0
        case "serve", "migrate":
            if arguments.contains("--help") || arguments.contains("-h") {
                print(Configuration.helpText, terminator: "")
                return 0
            }
            let configuration: Configuration
            do {
                // What `parley config check` runs: it passes exactly when this does.
                configuration = try ConfigCommand.validated(environment: environment, arguments: arguments)
            } catch {
                printError(error.problems.map { "parley: \($0)" }.joined(separator: "\n"))
                return 2
            }
            return command == "serve" ? serve(configuration) : migrate(configuration)
        case "config":
            let outcome = ConfigCommand.run(arguments: arguments, environment: environment)
            print(outcome.output, terminator: "")
            if !outcome.errors.isEmpty { printError(outcome.errors) }
            return outcome.status
        case "apps":
            guard arguments.first == "create", arguments.count >= 2 else {
                printError("usage: parley apps create <app_id> [--name NAME] [serve options]")
                return 2
            }
            return createApp(arguments: Array(arguments.dropFirst()), environment: environment)
        case "backup", "restore":
            if arguments.contains("--help") || arguments.contains("-h") {
                print(BackupCommand.usage, terminator: "")
                return 0
            }
            return BackupCommand.run(command, arguments: arguments, environment: environment)
        case "data":
            if arguments.contains("--help") || arguments.contains("-h") {
                print(DataCommand.usage, terminator: "")
                return 0
            }
            return DataCommand.run(arguments: arguments, environment: environment)
        case "sql":
            if arguments == ["events"] {
                print(EventLog.numberedAppend)
                return 0
            }
            guard arguments.first == "send", let text = MessageWrite.statement(named: Array(arguments.dropFirst())) else {
                printError("usage: parley sql send <part>... | parley sql events (parts: \(MessageWrite.partNames.joined(separator: ", ")))")
                return 2
            }
            print(text)
            return 0
        case "bench-blocklists":
            // Hidden: the blocklist micro-benchmark of bench/moderation.sh (docs/blocklists.md#cost).
            print(BlocklistBench.run(texts: Int(arguments.first ?? "") ?? 2000))
            return 0
        case "export", "import":
            if arguments.contains("--help") || arguments.contains("-h") {
                print(TransferCommand.usage, terminator: "")
                return 0
            }
            return TransferCommand.run(command, arguments: arguments, environment: environment)
        default:
            printError("parley: unknown command \(command)\n\n\(usage)")
            return 2
        }
    }

    private static func serve(_ configuration: Configuration) -> Int32 {
        do {
            let app = try ParleyApp(configuration: configuration)
            app.runUntilSignalled()
            return 0
        } catch {
            printError("parley: cannot start: \(String(reflecting: error))")
            return 1
        }
    }

    /// `parley apps create <app_id> [--name NAME]`: creates the app directly in the database and prints its key.
    private static func createApp(arguments: [String], environment: [String: String]) -> Int32 {
        let appID = arguments[0]
        var rest = Array(arguments.dropFirst())
        var name = appID
        if let i = rest.firstIndex(of: "--name"), i + 1 < rest.count {
            name = rest[i + 1]
            rest.removeSubrange(i...(i + 1))
        }
        if let problem = IdentifierKind.appID.problem(appID) {
            printError("parley: app_id \(appID) \(problem)")
            return 2
        }
        guard (1...128).contains(name.utf8.count) else {
            printError("parley: --name must be 1 to 128 bytes")
            return 2
        }
        do {
            let configuration = try Configuration.load(environment: environment, arguments: rest)
            return try withDatabase(configuration, migrate: true) { database in
                let connection = try PostgresConnection(database)
                guard
                    let created = try AppService.create(
                        appID: appID, name: name, settings: .defaults(), now: Timestamp.wallMillis(), on: connection)
                else {
                    printError("parley: app_id \(appID) is taken")
                    return 1
                }
                print("Created app \(appID). Its key (shown only now):")
                print(created.secret)
                return 0
            }
        } catch let error as Configuration.Invalid {
            printError(error.problems.map { "parley: \($0)" }.joined(separator: "\n"))
            return 2
        } catch {
            printError("parley: apps create failed: \(String(reflecting: error))")
            return 1
        }
    }

    /// Runs `body` against the configured database: `DATABASE_URL`, else the embedded cluster — reached through the
    /// socket its running server wrote into `postmaster.pid` (`<data>/run`, the relocated directory's `run/`, or a
    /// /tmp directory for long paths), otherwise started for the duration (and migrated first when `migrate`).
    static func withDatabase<T>(_ configuration: Configuration, migrate: Bool, _ body: (PostgresConfiguration) throws -> T) throws -> T {
        if let url = configuration.databaseURL { return try body(try PostgresConfiguration(url)) }
        if let server = EmbeddedPostgres.locate(dataDirectory: configuration.dataDirectory).server {
            return try body(server.configuration)
        }
        let cluster = EmbeddedPostgres(dataDirectory: configuration.dataDirectory)
        let started = try cluster.start()
        defer { cluster.stop() }
        if migrate { _ = try Migrator().migrate(configuration: started) }
        return try body(started)
    }

    private static func migrate(_ configuration: Configuration) -> Int32 {
        do {
            try DataDirectory.prepare(configuration.dataDirectory)
            let logger = Logger(label: "parley", level: configuration.logLevel)
            let pgLogger = PostgresLogger.bridging(logger.named("postgres"))
            var embedded: EmbeddedPostgres?
            let database: PostgresConfiguration
            if let url = configuration.databaseURL {
                database = try PostgresConfiguration(url)
            } else {
                let cluster = EmbeddedPostgres(dataDirectory: configuration.dataDirectory, logger: pgLogger)
                database = try cluster.start()
                embedded = cluster
            }
            defer { embedded?.stop() }
            let applied = try Migrator(logger: pgLogger).migrate(configuration: database)
            print(
                applied.isEmpty ? "parley: database is up to date" : "parley: applied migrations \(applied.map(String.init).joined(separator: ", "))")
            logger.flush()
            return 0
        } catch {
            printError("parley: migrate failed: \(String(reflecting: error))")
            return 1
        }
    }

    /// Writes a line to standard error (unbuffered: it may be the last thing the process does).
    static func printError(_ text: String) {
        let bytes = Array((text.hasSuffix("\n") ? text : text + "\n").utf8)
        _ = bytes.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    }
}
