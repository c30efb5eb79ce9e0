import Glibc
import ParleyHTTP

/// Parley's settings: read from the environment, each overridable by a `parley serve` flag.
public struct Configuration: Sendable {
    /// One setting: its environment variable, its flag, and the text `--help` shows.
    public struct Setting: Sendable {
        public let variable: String
        public let flag: String
        public let help: String
    }

    public static let settings: [Setting] = [
        Setting(variable: "PARLEY_LISTEN", flag: "--listen", help: "address to serve HTTP on, host:port (default 127.0.0.1:8080)"),
        Setting(
            variable: "DATABASE_URL", flag: "--database-url",
            help: "PostgreSQL URL or conninfo; unset: run an embedded PostgreSQL in the data directory"),
        Setting(variable: "PARLEY_DATA_DIR", flag: "--data-dir", help: "data directory (default ./parley-data)"),
        Setting(
            variable: "PARLEY_ADMIN_KEY", flag: "--admin-key",
            help: "server admin key; unset: generated on first start, saved in the data directory (mode 0600)"),
        Setting(
            variable: "PARLEY_DB_POOL_SIZE", flag: "--db-pool-size",
            help: "PostgreSQL connections and handler threads (default 2 per core, at least 4; 1-512)"),
        Setting(variable: "PARLEY_LOG_LEVEL", flag: "--log-level", help: "debug, info, warn, error or off (default info)"),
        Setting(
            variable: "PARLEY_TEST_CLOCK", flag: "--test-clock", help: "1 enables the movable test clock of POST /v1/test/clock/advance (default 0)"),
        Setting(variable: "PARLEY_METRICS_TOKEN", flag: "--metrics-token", help: "when set, GET /metrics requires Bearer <token>"),
        Setting(
            variable: "PARLEY_SSE_HEARTBEAT_MS", flag: "--sse-heartbeat-ms",
            help: "ms between `: ping` lines on SSE streams, 100-15000 (default 15000)"),
        Setting(
            variable: "PARLEY_DB_TIMEOUT_MS", flag: "--db-timeout-ms",
            help: "ms to wait for PostgreSQL to answer one statement or connect, 100-60000 (default 2000)"),
        Setting(
            variable: "PARLEY_WEBHOOK_ALLOW_PRIVATE", flag: "--webhook-allow-private",
            help: "1 lets webhooks and hooks reach loopback, private and link-local addresses (default 0: refused)"),
        Setting(
            variable: "PARLEY_WEBHOOK_CA_FILE", flag: "--webhook-ca-file",
            help: "PEM file of extra CAs trusted for https webhook receivers, besides the system's"),
        Setting(
            variable: "PARLEY_PUBLIC_URL", flag: "--public-url",
            help: "base of the signed file URLs, e.g. https://chat.example.com (default: the request's scheme and Host)"),
        Setting(
            variable: "PARLEY_FILES_BACKEND", flag: "--files-backend",
            help: "where file bytes are stored: postgres (default) or s3 (then the PARLEY_FILES_S3_* settings)"),
        Setting(variable: "PARLEY_FILES_S3_ENDPOINT", flag: "--files-s3-endpoint", help: "S3 service URL, http(s)://host[:port]"),
        Setting(variable: "PARLEY_FILES_S3_BUCKET", flag: "--files-s3-bucket", help: "S3 bucket the file bytes go to (must exist)"),
        Setting(variable: "PARLEY_FILES_S3_REGION", flag: "--files-s3-region", help: "S3 region requests are signed for (default us-east-1)"),
        Setting(variable: "PARLEY_FILES_S3_ACCESS_KEY_ID", flag: "--files-s3-access-key-id", help: "S3 access key id"),
        Setting(variable: "PARLEY_FILES_S3_SECRET_ACCESS_KEY", flag: "--files-s3-secret-access-key", help: "S3 secret access key"),
        Setting(
            variable: "PARLEY_FILES_S3_PATH_STYLE", flag: "--files-s3-path-style",
            help: "1: endpoint/bucket/key; 0: bucket.host/key (default 1 for an IP address or localhost, else 0)"),
    ]

    public var listenHost = "127.0.0.1"
    public var listenPort = 8080
    public var databaseURL: String?
    public var dataDirectory = "./parley-data"
    public var adminKey: String?
    /// Default: two connections (and handler threads) per core, at least 4. Measured on 2 cores, 4 threads
    /// served GET /v1/users/{id} ~40% faster than 16 (fewer context switches; bench/RESULTS.md).
    public var poolSize = max(4, 2 * Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))
    public var logLevel = Logger.Level.info
    public var testClock = false
    public var metricsToken: String?
    /// Interval of the `: ping` comment on idle SSE streams (15 s, docs/events.md#live-streams-server-sent-events;
    /// tests shorten it).
    public var sseHeartbeatMillis = 15_000
    /// How long one exchange with PostgreSQL (a statement, a connect) may wait for its answer before the connection is
    /// abandoned and the request answered 503 (`PostgresConfiguration.responseTimeout`). While the database does not
    /// answer, an API request fails within about twice this, well within 5 s (docs/reliability.md#a-stalled-database).
    public var databaseTimeoutMillis = 2_000
    /// A request head must arrive within this, and a body must not stall for longer, else 408 `7000015` and the
    /// connection closes (the HTTP server's `headerTimeout` and `bodyTimeout`; tests shorten them).
    /// Webhook and hook destinations in loopback, private, link-local and metadata ranges are refused unless this is
    /// set: a tenant's endpoint must not reach the operator's internal services.
    public var webhookAllowPrivate = false
    /// Extra trusted CAs (PEM) for https webhook receivers.
    public var webhookCAFile: String?
    /// The scheme, host and optional port (and path prefix) clients reach the server at, for signed file URLs; nil:
    /// each request's own `Host` (docs/files.md#signed-urls).
    public var publicURL: String?
    /// Where file bytes go (docs/files.md#storage); metadata is always in PostgreSQL.
    public var fileStorage = FileStorageSettings()
    public var requestHeadTimeoutMillis = 10_000
    public var requestBodyTimeoutMillis = 30_000
    /// Tests only (no setting reads it): the message writer's overload threshold (docs/errors.md#rate-limits,
    /// priority-1 room sends are refused while more sends than this wait); nil keeps the writer's default. -1 forces
    /// overload.
    public var sendOverloadThreshold: Int?
    /// How long a node's claim on a job holds without a step (docs/jobs.md#guarantees): a job whose node died resumes
    /// elsewhere at most this long after its last step. Tests shorten it.
    public var jobLeaseMillis = 30_000
    /// A pause after each job step (0: none), leaving the database to requests; tests use it to catch a job mid-way.
    public var jobStepPauseMillis = 0

    public init() {}

    /// A configuration problem, naming the variable (and flag) that holds the bad value.
    public struct Invalid: Error, CustomStringConvertible, Sendable {
        public let description: String
    }

    /// Reads `environment`, then applies `arguments` (`--flag value` or `--flag=value`) on top.
    public static func load(environment: [String: String], arguments: [String]) throws(Invalid) -> Configuration {
        var values: [String: String] = [:]
        for setting in settings {
            if let value = environment[setting.variable], !value.isEmpty { values[setting.variable] = value }
        }
        var i = 0
        while i < arguments.count {
            let argument = arguments[i]
            let (flag, inline) = argument.split(separator: "=", maxSplits: 1).map(String.init).pairOrSingle
            guard let setting = settings.first(where: { $0.flag == flag }) else {
                throw Invalid(description: "unknown option \(argument) (see parley serve --help)")
            }
            if let inline {
                values[setting.variable] = inline
            } else {
                guard i + 1 < arguments.count else { throw Invalid(description: "option \(flag) needs a value") }
                i += 1
                values[setting.variable] = arguments[i]
            }
            i += 1
        }
        var config = Configuration()
        if let listen = values["PARLEY_LISTEN"] {
            guard let colon = listen.lastIndex(of: ":"), let port = Int(listen[listen.index(after: colon)...]),
                (0...65535).contains(port), !listen[..<colon].isEmpty
            else {
                throw Invalid(description: "PARLEY_LISTEN (--listen) must be host:port, got \"\(listen)\"")
            }
            config.listenHost = String(listen[..<colon])
            config.listenPort = port
        }
        config.databaseURL = values["DATABASE_URL"]
        if let dir = values["PARLEY_DATA_DIR"] { config.dataDirectory = dir }
        if let key = values["PARLEY_ADMIN_KEY"] {
            guard key.utf8.count >= 16, key.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
                throw Invalid(description: "PARLEY_ADMIN_KEY (--admin-key) must be at least 16 printable ASCII characters without spaces")
            }
            config.adminKey = key
        }
        if let size = values["PARLEY_DB_POOL_SIZE"] {
            guard let n = Int(size), (1...512).contains(n) else {
                throw Invalid(description: "PARLEY_DB_POOL_SIZE (--db-pool-size) must be an integer from 1 to 512, got \"\(size)\"")
            }
            config.poolSize = n
        }
        if let level = values["PARLEY_LOG_LEVEL"] {
            guard let parsed = Logger.Level(name: level) else {
                throw Invalid(description: "PARLEY_LOG_LEVEL (--log-level) must be debug, info, warn, error or off, got \"\(level)\"")
            }
            config.logLevel = parsed
        }
        if let clock = values["PARLEY_TEST_CLOCK"] {
            switch clock.lowercased() {
            case "1", "true", "yes", "on": config.testClock = true
            case "0", "false", "no", "off": config.testClock = false
            default: throw Invalid(description: "PARLEY_TEST_CLOCK (--test-clock) must be 0 or 1, got \"\(clock)\"")
            }
        }
        config.metricsToken = values["PARLEY_METRICS_TOKEN"]
        if let text = values["PARLEY_SSE_HEARTBEAT_MS"] {
            guard let ms = Int(text), (100...15_000).contains(ms) else {
                throw Invalid(description: "PARLEY_SSE_HEARTBEAT_MS (--sse-heartbeat-ms) must be 100 to 15000, got \"\(text)\"")
            }
            config.sseHeartbeatMillis = ms
        }
        if let text = values["PARLEY_DB_TIMEOUT_MS"] {
            guard let ms = Int(text), (100...60_000).contains(ms) else {
                throw Invalid(description: "PARLEY_DB_TIMEOUT_MS (--db-timeout-ms) must be 100 to 60000, got \"\(text)\"")
            }
            config.databaseTimeoutMillis = ms
        }
        if let allow = values["PARLEY_WEBHOOK_ALLOW_PRIVATE"] {
            switch allow {
            case "1", "true": config.webhookAllowPrivate = true
            case "0", "false": config.webhookAllowPrivate = false
            default: throw Invalid(description: "PARLEY_WEBHOOK_ALLOW_PRIVATE (--webhook-allow-private) must be 0 or 1, got \"\(allow)\"")
            }
        }
        if let file = values["PARLEY_WEBHOOK_CA_FILE"], !file.isEmpty {
            guard access(file, R_OK) == 0 else {
                throw Invalid(description: "PARLEY_WEBHOOK_CA_FILE (--webhook-ca-file) must name a readable PEM file, got \"\(file)\"")
            }
            config.webhookCAFile = file
        }
        if let url = values["PARLEY_PUBLIC_URL"], !url.isEmpty {
            let trimmed = url.hasSuffix("/") ? String(url.dropLast()) : url
            guard trimmed.hasPrefix("http://") || trimmed.hasPrefix("https://"), trimmed.utf8.count <= 1024, !trimmed.contains("?"),
                !trimmed.contains("#"), !trimmed.contains(" ")
            else {
                throw Invalid(description: "PARLEY_PUBLIC_URL (--public-url) must be an absolute http(s) URL without query, got \"\(url)\"")
            }
            config.publicURL = trimmed
        }
        config.fileStorage = try fileStorage(values)
        return config
    }

    /// The file storage of `values`: the backend new uploads go to (`postgres` unless `PARLEY_FILES_BACKEND` says
    /// `s3`) and the bucket, whenever its endpoint is given (the `s3` backend needs it, with its bucket and keys).
    private static func fileStorage(_ values: [String: String]) throws(Invalid) -> FileStorageSettings {
        let name = values["PARLEY_FILES_BACKEND"]?.lowercased() ?? "postgres"
        guard let backend = FileBackend(rawValue: name) else {
            throw Invalid(description: "PARLEY_FILES_BACKEND (--files-backend) must be postgres or s3, got \"\(name)\"")
        }
        guard values["PARLEY_FILES_S3_ENDPOINT"] != nil || backend == .s3 else { return FileStorageSettings(backend: backend) }
        func required(_ variable: String) throws(Invalid) -> String {
            guard let value = values[variable] else {
                let flag = settings.first { $0.variable == variable }?.flag ?? ""
                throw Invalid(
                    description:
                        "\(variable) (\(flag)) is required with the s3 file storage (PARLEY_FILES_BACKEND=s3 or PARLEY_FILES_S3_ENDPOINT set)")
            }
            return value
        }
        var endpoint = try required("PARLEY_FILES_S3_ENDPOINT")
        if endpoint.hasSuffix("/") { endpoint.removeLast() }
        guard endpoint.hasPrefix("http://") || endpoint.hasPrefix("https://"),
            !endpoint.dropFirst(endpoint.hasPrefix("https://") ? 8 : 7).contains(where: { "/?#@ ".contains($0) })
        else {
            throw Invalid(description: "PARLEY_FILES_S3_ENDPOINT (--files-s3-endpoint) must be http(s)://host[:port], got \"\(endpoint)\"")
        }
        let bucket = try required("PARLEY_FILES_S3_BUCKET")
        guard (3...63).contains(bucket.utf8.count),
            bucket.utf8.allSatisfy({ ($0 >= 97 && $0 <= 122) || ($0 >= 48 && $0 <= 57) || $0 == 45 || $0 == 46 })
        else {
            throw Invalid(
                description: "PARLEY_FILES_S3_BUCKET (--files-s3-bucket) must be 3-63 lower-case letters, digits, dots and hyphens, got \"\(bucket)\""
            )
        }
        var pathStyle = S3Settings.defaultPathStyle(endpoint: endpoint)
        if let style = values["PARLEY_FILES_S3_PATH_STYLE"] {
            switch style.lowercased() {
            case "1", "true": pathStyle = true
            case "0", "false": pathStyle = false
            default: throw Invalid(description: "PARLEY_FILES_S3_PATH_STYLE (--files-s3-path-style) must be 0 or 1, got \"\(style)\"")
            }
        }
        let s3 = S3Settings(
            endpoint: endpoint, bucket: bucket, region: values["PARLEY_FILES_S3_REGION"] ?? "us-east-1",
            accessKeyID: try required("PARLEY_FILES_S3_ACCESS_KEY_ID"), secretAccessKey: try required("PARLEY_FILES_S3_SECRET_ACCESS_KEY"),
            pathStyle: pathStyle)
        return FileStorageSettings(backend: backend, s3: s3)
    }

    /// The `parley serve --help` text.
    public static var helpText: String {
        var text = "usage: parley serve [options]\n\nEvery option can also be set through its environment variable.\n\n"
        for setting in settings {
            let left = "  \(setting.flag) <value>"
            text += left.padding(to: 26) + setting.variable.padding(to: 22) + setting.help + "\n"
        }
        // Kept in step with EmbeddedPostgres.relocatedClustersDirectory (ParleyCore does not see that module).
        text += """

            Without DATABASE_URL, Parley runs its own PostgreSQL in the data directory (pg/). Run as root, that
            cluster runs as user postgres; when postgres cannot reach the data directory (a directory under
            root's home, mode 0700), the cluster lives in /var/lib/parley/clusters/<hash of the data directory's
            path>/pg instead, with the data directory's pg a link to it (the start-up log says so).

            """
        return text
    }
}

extension [String] {
    fileprivate var pairOrSingle: (String, String?) { count == 2 ? (self[0], self[1]) : (self.first ?? "", nil) }
}

extension String {
    fileprivate func padding(to width: Int) -> String {
        count >= width ? self + " " : self + String(repeating: " ", count: width - count)
    }
}
