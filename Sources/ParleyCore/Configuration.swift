import Glibc
import ParleyHTTP

/// Parley's settings: read from the environment, each overridable by a `parley serve` flag.
///
/// ``settings`` is the one table of them: ``load(environment:arguments:)`` validates and applies it, and
/// `parley serve --help`, `parley config` and docs/configuration.md are printed from it.
public struct Configuration: Sendable {
    /// Where a setting's value came from.
    public enum Source: Sendable, Equatable {
        case environment
        case flag
    }

    /// How `parley config` shows a value that must not be printed.
    public enum Masking: Sendable {
        case none
        /// Replaced by a short fingerprint, so two nodes' keys can be compared without showing either.
        case secret
        /// The password inside a PostgreSQL URL or conninfo is replaced.
        case password
    }

    /// One setting: where it is read from, what it means, which values it takes, and how it is applied.
    public struct Setting: Sendable {
        public let variable: String
        /// nil: environment only.
        public let flag: String?
        /// The default, as a reader sees it.
        public let defaultText: String
        public let meaning: String
        /// The values accepted, as a problem names them ("an integer from 1 to 512"); nil: any value.
        public let accepts: String?
        /// A page of docs/ (and anchor) that says more, e.g. `files.md#storage`.
        public let guide: String?
        public let masking: Masking
        /// Stores a value in the configuration; false when `accepts` does not hold for it (nothing is stored then).
        let apply: @Sendable (inout Configuration, String) -> Bool
        /// The effective value after loading, nil when unset.
        public let effective: @Sendable (Configuration) -> String?

        init(
            _ variable: String, flag: String?, default defaultText: String, meaning: String, accepts: String? = nil,
            guide: String? = nil, masking: Masking = .none, apply: @escaping @Sendable (inout Configuration, String) -> Bool,
            effective: @escaping @Sendable (Configuration) -> String?
        ) {
            self.variable = variable
            self.flag = flag
            self.defaultText = defaultText
            self.meaning = meaning
            self.accepts = accepts
            self.guide = guide
            self.masking = masking
            self.apply = apply
            self.effective = effective
        }

        /// How a problem names the setting: `PARLEY_LISTEN (--listen)`.
        public var label: String { flag.map { "\(variable) (\($0))" } ?? variable }
    }

    public static let settings: [Setting] = [
        Setting(
            "PARLEY_LISTEN", flag: "--listen", default: "127.0.0.1:8080", meaning: "address to serve HTTP on",
            accepts: "host:port with a port from 0 to 65535",
            apply: { config, value in
                guard let colon = value.lastIndex(of: ":"), let port = Int(value[value.index(after: colon)...]), (0...65535).contains(port),
                    !value[..<colon].isEmpty
                else { return false }
                config.listenHost = String(value[..<colon])
                config.listenPort = port
                return true
            }, effective: { "\($0.listenHost):\($0.listenPort)" }),
        Setting(
            "DATABASE_URL", flag: "--database-url", default: "unset",
            meaning:
                "PostgreSQL URL or conninfo, e.g. postgres://parley:secret@db.internal:5432/parley; unset: an embedded PostgreSQL in the data directory",
            guide: "operations.md#embedded-or-external-postgresql", masking: .password,
            apply: { config, value in
                config.databaseURL = value
                return true
            }, effective: { $0.databaseURL }),
        Setting(
            "PARLEY_DATA_DIR", flag: "--data-dir", default: "./parley-data",
            meaning: "data directory: the embedded cluster (pg/), its log (pg.log), the admin key file (admin_key)",
            apply: { config, value in
                config.dataDirectory = value
                return true
            }, effective: { $0.dataDirectory }),
        Setting(
            "PARLEY_ADMIN_KEY", flag: "--admin-key", default: "generated",
            meaning:
                "server admin key; unset: the one in the data directory's admin_key, else generated on the first start, saved there (mode 0600) and printed once",
            accepts: adminKeyRule, guide: "configuration.md#rotating-the-admin-key", masking: .secret,
            apply: { config, value in
                guard isValidAdminKey(value) else { return false }
                config.adminKey = value
                return true
            }, effective: { $0.adminKey }),
        Setting(
            "PARLEY_ADMIN_KEY_SECONDARY", flag: "--admin-key-secondary", default: "unset",
            meaning:
                "a second server admin key, also accepted, while the admin key is rotated; cursors and file URLs signed under it still verify, new ones are signed with PARLEY_ADMIN_KEY",
            accepts: adminKeyRule + ", other than PARLEY_ADMIN_KEY", guide: "configuration.md#rotating-the-admin-key", masking: .secret,
            apply: { config, value in
                guard isValidAdminKey(value) else { return false }
                config.secondaryAdminKey = value
                return true
            }, effective: { $0.secondaryAdminKey }),
        Setting(
            "PARLEY_DB_POOL_SIZE", flag: "--db-pool-size", default: "2 per core, at least 4",
            meaning: "PostgreSQL connections, each with its own handler thread", accepts: "an integer from 1 to 512",
            apply: { config, value in
                guard let n = Int(value), (1...512).contains(n) else { return false }
                config.poolSize = n
                return true
            }, effective: { String($0.poolSize) }),
        Setting(
            "PARLEY_LOG_LEVEL", flag: "--log-level", default: "info", meaning: "the least severe log lines written",
            accepts: "debug, info, warn, error or off", guide: "operations.md#logs",
            apply: { config, value in
                guard let level = Logger.Level(name: value) else { return false }
                config.logLevel = level
                return true
            }, effective: { levelName($0.logLevel) }),
        Setting(
            "PARLEY_TEST_CLOCK", flag: "--test-clock", default: "0",
            meaning: "1 enables the movable test clock of POST /v1/test/clock/advance (for tests only)", accepts: "0 or 1",
            guide: "operations.md#test-clock",
            apply: { config, value in yesOrNo(value, ["1", "true", "yes", "on"], ["0", "false", "no", "off"]) { config.testClock = $0 } },
            effective: { $0.testClock ? "1" : "0" }),
        Setting(
            "PARLEY_METRICS_TOKEN", flag: "--metrics-token", default: "unset",
            meaning: "when set, GET /metrics requires this token as its bearer credential (Authorization: Bearer)",
            guide: "operations.md#health-readiness-and-metrics",
            masking: .secret,
            apply: { config, value in
                config.metricsToken = value
                return true
            }, effective: { $0.metricsToken }),
        Setting(
            "PARLEY_SSE_HEARTBEAT_MS", flag: "--sse-heartbeat-ms", default: "15000",
            meaning: "milliseconds between the `: ping` lines of idle event streams", accepts: "an integer from 100 to 15000",
            guide: "events.md#live-streams-server-sent-events",
            apply: { config, value in
                guard let ms = Int(value), (100...15_000).contains(ms) else { return false }
                config.sseHeartbeatMillis = ms
                return true
            }, effective: { String($0.sseHeartbeatMillis) }),
        Setting(
            "PARLEY_FD_RESERVE", flag: "--fd-reserve", default: "2 per pool connection + 128",
            meaning:
                "file descriptors kept free of client connections for the database connections, outbound webhooks and push, files and ordinary requests: past the open-files limit less this, a new event stream is 503 7000020",
            accepts: "an integer from 16 to 1000000", guide: "scaling.md#open-files",
            apply: { config, value in
                guard let n = Int(value), (16...1_000_000).contains(n) else { return false }
                config.descriptorReserve = n
                return true
            }, effective: { String($0.effectiveDescriptorReserve) }),
        Setting(
            "PARLEY_HISTORY_CACHE_MB", flag: "--history-cache-mb", default: "64",
            meaning:
                "MiB of rendered newest history pages each node keeps, served without a query until a change to their conversation; 0 turns the cache off",
            accepts: "an integer from 0 to 65536", guide: "scaling.md#history-cache",
            apply: { config, value in
                guard let mb = Int(value), (0...65_536).contains(mb) else { return false }
                config.historyCacheBytes = mb << 20
                return true
            }, effective: { String($0.historyCacheBytes >> 20) }),
        Setting(
            "PARLEY_DB_TIMEOUT_MS", flag: "--db-timeout-ms", default: "2000",
            meaning: "milliseconds one statement or connect may wait for PostgreSQL; past it the request gets 503 7000010",
            accepts: "an integer from 100 to 60000", guide: "reliability.md#a-stalled-database",
            apply: { config, value in
                guard let ms = Int(value), (100...60_000).contains(ms) else { return false }
                config.databaseTimeoutMillis = ms
                return true
            }, effective: { String($0.databaseTimeoutMillis) }),
        Setting(
            "PARLEY_STATS_SAMPLE_MS", flag: "--stats-sample-ms", default: "60000",
            meaning:
                "milliseconds between passes of the activity sampler behind GET /v1/stats/series (one node of the cluster samples per pass; every node adds its HTTP error counts)",
            accepts: "an integer from 100 to 60000", guide: "operations.md#activity-series",
            apply: { config, value in
                guard let ms = Int(value), (100...60_000).contains(ms) else { return false }
                config.statsSampleMillis = ms
                return true
            }, effective: { String($0.statsSampleMillis) }),
        Setting(
            "PARLEY_WEBHOOK_ALLOW_PRIVATE", flag: "--webhook-allow-private", default: "0",
            meaning: "1 lets webhooks, hooks and the push gateway reach loopback, private and link-local addresses", accepts: "0 or 1",
            apply: { config, value in yesOrNo(value, ["1", "true"], ["0", "false"]) { config.webhookAllowPrivate = $0 } },
            effective: { $0.webhookAllowPrivate ? "1" : "0" }),
        Setting(
            "PARLEY_WEBHOOK_CA_FILE", flag: "--webhook-ca-file", default: "unset",
            meaning: "PEM file of extra CAs trusted for https webhook receivers and push gateways, besides the system's",
            accepts: "a readable file",
            apply: { config, value in
                guard access(value, R_OK) == 0 else { return false }
                config.webhookCAFile = value
                return true
            }, effective: { $0.webhookCAFile }),
        Setting(
            "PARLEY_PUBLIC_URL", flag: "--public-url", default: "unset",
            meaning:
                "base of signed file URLs: the scheme, host, optional port and path prefix clients reach the server at; unset: each request's scheme and Host",
            accepts: "an absolute http(s) URL without query or fragment", guide: "files.md#signed-urls",
            apply: { config, value in
                let trimmed = value.hasSuffix("/") ? String(value.dropLast()) : value
                guard trimmed.hasPrefix("http://") || trimmed.hasPrefix("https://"), trimmed.utf8.count <= 1024,
                    !trimmed.contains(where: { "?# ".contains($0) })
                else { return false }
                config.publicURL = trimmed
                return true
            }, effective: { $0.publicURL }),
        Setting(
            "PARLEY_FILES_BACKEND", flag: "--files-backend", default: "postgres",
            meaning: "where new uploads' bytes go (s3 needs the PARLEY_FILES_S3_* settings)", accepts: "postgres or s3", guide: "files.md#storage",
            apply: { config, value in
                guard let backend = FileBackend(rawValue: value.lowercased()) else { return false }
                config.fileStorage.backend = backend
                return true
            }, effective: { $0.fileStorage.backend.rawValue }),
        // The S3 settings are checked one by one here and assembled together (`assembleS3`), once all are known.
        Setting(
            "PARLEY_FILES_S3_ENDPOINT", flag: "--files-s3-endpoint", default: "unset",
            meaning: "S3-compatible service; required for s3", accepts: "http(s)://host[:port]",
            apply: { _, value in
                let endpoint = value.hasSuffix("/") ? String(value.dropLast()) : value
                return (endpoint.hasPrefix("http://") || endpoint.hasPrefix("https://"))
                    && !endpoint.dropFirst(endpoint.hasPrefix("https://") ? 8 : 7).contains(where: { "/?#@ ".contains($0) })
            }, effective: { $0.fileStorage.s3?.endpoint }),
        Setting(
            "PARLEY_FILES_S3_BUCKET", flag: "--files-s3-bucket", default: "unset",
            meaning: "bucket of the file bytes (must exist); required for s3", accepts: "3-63 lower-case letters, digits, dots and hyphens",
            apply: { _, value in
                (3...63).contains(value.utf8.count)
                    && value.utf8.allSatisfy({ ($0 >= 97 && $0 <= 122) || ($0 >= 48 && $0 <= 57) || $0 == 45 || $0 == 46 })
            }, effective: { $0.fileStorage.s3?.bucket }),
        Setting(
            "PARLEY_FILES_S3_REGION", flag: "--files-s3-region", default: "us-east-1", meaning: "region S3 requests are signed for",
            apply: { _, _ in true }, effective: { $0.fileStorage.s3?.region }),
        Setting(
            "PARLEY_FILES_S3_ACCESS_KEY_ID", flag: "--files-s3-access-key-id", default: "unset", meaning: "S3 access key id; required for s3",
            apply: { _, _ in true }, effective: { $0.fileStorage.s3?.accessKeyID }),
        Setting(
            "PARLEY_FILES_S3_SECRET_ACCESS_KEY", flag: "--files-s3-secret-access-key", default: "unset",
            meaning: "S3 secret access key (never logged); required for s3", masking: .secret,
            apply: { _, _ in true }, effective: { $0.fileStorage.s3?.secretAccessKey }),
        Setting(
            "PARLEY_FILES_S3_PATH_STYLE", flag: "--files-s3-path-style", default: "1 for an IP address or localhost, else 0",
            meaning: "1: path-style requests (endpoint/bucket/key); 0: virtual-hosted (bucket.host/key)", accepts: "0 or 1",
            apply: { _, value in ["1", "true", "0", "false"].contains(value.lowercased()) },
            effective: { $0.fileStorage.s3.map { $0.pathStyle ? "1" : "0" } }),
        Setting(
            "PARLEY_MIGRATIONS_DIR", flag: nil, default: "Migrations/ beside the binary or in the checkout it was built from",
            meaning: "directory of the migration files", apply: { config, value in config.keepPath("PARLEY_MIGRATIONS_DIR", value) },
            effective: { $0.resourcePaths["PARLEY_MIGRATIONS_DIR"] }),
        Setting(
            "PARLEY_OPENAPI_PATH", flag: nil, default: "openapi/openapi.json beside the binary or in the checkout it was built from",
            meaning: "the API description served at GET /openapi.json", apply: { config, value in config.keepPath("PARLEY_OPENAPI_PATH", value) },
            effective: { $0.resourcePaths["PARLEY_OPENAPI_PATH"] }),
        Setting(
            "PARLEY_CONSOLE_DIR", flag: nil, default: "console/ beside the binary or in the checkout it was built from",
            meaning: "directory of the admin console's files, served at /console", guide: "console.md",
            apply: { config, value in config.keepPath("PARLEY_CONSOLE_DIR", value) }, effective: { $0.resourcePaths["PARLEY_CONSOLE_DIR"] }),
    ]

    public var listenHost = "127.0.0.1"
    public var listenPort = 8080
    public var databaseURL: String?
    public var dataDirectory = "./parley-data"
    public var adminKey: String?
    /// A second admin key, accepted beside `adminKey` while the key is rotated (docs/configuration.md#rotating-the-admin-key):
    /// cursors and file URLs signed under it still verify, new ones are signed with `adminKey`.
    public var secondaryAdminKey: String?
    /// Default: two connections (and handler threads) per core, at least 4. Measured on 2 cores, 4 threads
    /// served GET /v1/users/{id} ~40% faster than 16 (fewer context switches; bench/RESULTS.md).
    public var poolSize = max(4, 2 * Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))
    public var logLevel = Logger.Level.info
    public var testClock = false
    public var metricsToken: String?
    /// Interval of the `: ping` comment on idle SSE streams (15 s, docs/events.md#live-streams-server-sent-events;
    /// tests shorten it).
    public var sseHeartbeatMillis = 15_000
    /// Descriptors kept free of client connections (docs/scaling.md#open-files); nil: ``effectiveDescriptorReserve``'s
    /// default.
    public var descriptorReserve: Int?
    /// The reserve in force: the setting, else one descriptor per pool connection and one per pool thread's outbound
    /// connection or file, plus 128 for the 7 dedicated database connections, the listener and the loops' epoll and
    /// wake descriptors, the embedded PostgreSQL's pipes, webhook and push deliveries, and ordinary requests' connections.
    public var effectiveDescriptorReserve: Int { descriptorReserve ?? 2 * poolSize + 128 }
    /// Tests only (no setting reads it): bytes a stream may queue for a client that does not read before the server
    /// closes it (the HTTP server's `streamBufferLimit`, 1 MiB); nil keeps the default.
    public var streamBufferLimit: Int?
    /// Tests only: the kernel send buffer of a streaming connection (the HTTP server's `streamSendBuffer`); nil leaves
    /// the kernel's autotuning.
    public var streamSendBuffer: Int?
    /// Bytes of rendered history pages the node keeps (docs/scaling.md#history-cache); 0: no cache.
    public var historyCacheBytes = 64 << 20
    /// How long one exchange with PostgreSQL (a statement, a connect) may wait for its answer before the connection is
    /// abandoned and the request answered 503 (`PostgresConfiguration.responseTimeout`). While the database does not
    /// answer, an API request fails within about twice this, well within 5 s (docs/reliability.md#a-stalled-database).
    public var databaseTimeoutMillis = 2_000
    /// Interval of the activity sampler (docs/operations.md#activity-series): at most a minute, so every minute is
    /// sampled; tests shorten it.
    public var statsSampleMillis = 60_000
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
    /// Where each setting given to ``load(environment:arguments:)`` came from, by variable; a variable missing here has
    /// its default.
    public var sources: [String: Source] = [:]
    /// The environment-only paths (`PARLEY_MIGRATIONS_DIR`, …), kept so `parley config` shows them; the modules that
    /// locate those files read the variables themselves.
    public var resourcePaths: [String: String] = [:]

    public init() {}

    /// Every configuration problem found, each naming the variable (and flag) that holds the bad value.
    public struct Invalid: Error, CustomStringConvertible, Sendable {
        public let problems: [String]
        public var description: String { problems.joined(separator: "\n") }

        public init(_ problems: [String]) { self.problems = problems }
    }

    /// Reads `environment`, then applies `arguments` (`--flag value` or `--flag=value`) on top. Throws every problem
    /// found, not only the first.
    public static func load(environment: [String: String], arguments: [String]) throws(Invalid) -> Configuration {
        var values: [String: String] = [:]
        var config = Configuration()
        var problems: [String] = []
        for setting in settings {
            if let value = environment[setting.variable], !value.isEmpty {
                values[setting.variable] = value
                config.sources[setting.variable] = .environment
            }
        }
        var i = 0
        while i < arguments.count {
            let argument = arguments[i]
            i += 1
            let (flag, inline) = argument.split(separator: "=", maxSplits: 1).map(String.init).pairOrSingle
            guard let setting = settings.first(where: { $0.flag == flag }) else {
                problems.append("unknown option \(argument) (see parley serve --help)")
                continue
            }
            guard let value = inline ?? (i < arguments.count ? arguments[i] : nil) else {
                problems.append("option \(flag) needs a value")
                continue
            }
            if inline == nil { i += 1 }
            // An empty value, like an empty variable, leaves the default.
            values[setting.variable] = value.isEmpty ? nil : value
            config.sources[setting.variable] = value.isEmpty ? nil : .flag
        }
        for setting in settings {
            guard let value = values[setting.variable], !setting.apply(&config, value) else { continue }
            // A secret's bad value is not repeated: the message may end up in a log.
            let got = setting.masking == .none ? ", got \"\(value)\"" : ""
            problems.append("\(setting.label) must be \(setting.accepts ?? "valid")\(got)")
        }
        if let secondary = config.secondaryAdminKey, secondary == config.adminKey {
            problems.append("PARLEY_ADMIN_KEY_SECONDARY (--admin-key-secondary) must differ from PARLEY_ADMIN_KEY")
        }
        problems += assembleS3(values, into: &config)
        guard problems.isEmpty else { throw Invalid(problems) }
        return config
    }

    /// The bucket of the file storage, whenever its endpoint is given or the backend is `s3` (which needs it, with its
    /// bucket and keys); its settings were each checked already. Returns what is missing.
    private static func assembleS3(_ values: [String: String], into config: inout Configuration) -> [String] {
        guard values["PARLEY_FILES_S3_ENDPOINT"] != nil || config.fileStorage.backend == .s3 else { return [] }
        let required = ["PARLEY_FILES_S3_ENDPOINT", "PARLEY_FILES_S3_BUCKET", "PARLEY_FILES_S3_ACCESS_KEY_ID", "PARLEY_FILES_S3_SECRET_ACCESS_KEY"]
        let missing = settings.filter { required.contains($0.variable) && values[$0.variable] == nil }
        guard missing.isEmpty else {
            return missing.map { "\($0.label) is required with the s3 file storage (PARLEY_FILES_BACKEND=s3 or PARLEY_FILES_S3_ENDPOINT set)" }
        }
        var endpoint = values["PARLEY_FILES_S3_ENDPOINT"] ?? ""
        if endpoint.hasSuffix("/") { endpoint.removeLast() }
        let pathStyle = values["PARLEY_FILES_S3_PATH_STYLE"].map { ["1", "true"].contains($0.lowercased()) }
        config.fileStorage.s3 = S3Settings(
            endpoint: endpoint, bucket: values["PARLEY_FILES_S3_BUCKET"] ?? "", region: values["PARLEY_FILES_S3_REGION"] ?? "us-east-1",
            accessKeyID: values["PARLEY_FILES_S3_ACCESS_KEY_ID"] ?? "", secretAccessKey: values["PARLEY_FILES_S3_SECRET_ACCESS_KEY"] ?? "",
            pathStyle: pathStyle ?? S3Settings.defaultPathStyle(endpoint: endpoint))
        return []
    }

    static let adminKeyRule = "at least 16 printable ASCII characters without spaces"

    static func isValidAdminKey(_ key: String) -> Bool { key.utf8.count >= 16 && key.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F } }

    /// Applies a yes/no value given in one of `yes` or `no` (compared without case); false for anything else.
    private static func yesOrNo(_ value: String, _ yes: Set<String>, _ no: Set<String>, set: (Bool) -> Void) -> Bool {
        let lowered = value.lowercased()
        guard yes.contains(lowered) || no.contains(lowered) else { return false }
        set(yes.contains(lowered))
        return true
    }

    private static func levelName(_ level: Logger.Level) -> String {
        switch level {
        case .debug: "debug"
        case .info: "info"
        case .warning: "warn"
        case .error: "error"
        case .off: "off"
        }
    }

    private mutating func keepPath(_ variable: String, _ path: String) -> Bool {
        resourcePaths[variable] = path
        return true
    }

    /// The `parley serve --help` text.
    public static var helpText: String {
        var text = "usage: parley serve [options]\n\nEvery option can also be set through its environment variable.\n\n"
        for setting in settings {
            guard let flag = setting.flag else { continue }
            let left = "  \(flag) <value>"
            var help = setting.meaning
            if let accepts = setting.accepts { help += "; " + accepts }
            help += " (default " + setting.defaultText + ")"
            text += left.padding(to: 30) + setting.variable.padding(to: 28) + help + "\n"
        }
        // Kept in step with EmbeddedPostgres.relocatedClustersDirectory (ParleyCore does not see that module).
        text += """

            Environment only: \(settings.filter { $0.flag == nil }.map(\.variable).joined(separator: ", ")) (paths of the files
            Parley serves and migrates from). `parley config` shows the effective configuration, `parley config check`
            validates it; docs/configuration.md describes every setting.

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
