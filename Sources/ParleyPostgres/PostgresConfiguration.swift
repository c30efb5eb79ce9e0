internal import CLibPQ

/// How to reach a PostgreSQL server: libpq connection keywords, parsed once and never re-serialised.
///
/// Built from a URL (`postgres://` or `postgresql://`, Unix socket directories as `host=%2Fpath` or
/// `?host=/path`), a key/value conninfo string, or explicit keywords. libpq itself parses the text
/// (`PQconninfoParse`), so quoting and escaping follow its rules exactly; connecting passes the keywords to
/// `PQconnectdbParams`, so no value is ever concatenated into a conninfo string.
/// Immutable value: `Sendable`.
public struct PostgresConfiguration: Sendable, CustomStringConvertible {
    /// The explicit keywords in a stable order (defaults such as `connect_timeout` are added at connect time).
    public private(set) var parameters: [(key: String, value: String)]

    /// The longest one exchange with the server may wait for its answer: connecting, or the results of one statement.
    /// Past it the connection is abandoned (its statement cancelled, the socket closed) and the call throws a
    /// `.timeout` error, so a stalled server (frozen, or its host gone) cannot hang a thread. nil: no bound beyond
    /// `connect_timeout` for connecting (tools, migrations, whose statements may rightly run long).
    public var responseTimeout: Duration?

    /// Shared by every connection opened with this configuration (and its copies): after one exchange went
    /// unanswered, the others fail fast until the server answers again. nil: each connection waits on its own.
    public var circuit: PostgresCircuit?

    /// Parses a `postgres://`/`postgresql://` URL or a `key=value …` conninfo string.
    public init(_ urlOrConninfo: String) throws(PostgresError) {
        var errorMessage: UnsafeMutablePointer<CChar>? = nil
        guard let options = PQconninfoParse(urlOrConninfo, &errorMessage) else {
            let text = errorMessage.map { String(cString: $0) } ?? "out of memory"
            if let errorMessage { PQfreemem(errorMessage) }
            // Only libpq's message: the input may contain a password.
            throw PostgresError(kind: .connection, message: "invalid connection string: \(text.trimmingTrailingNewlines())")
        }
        defer { PQconninfoFree(options) }
        var pairs: [(key: String, value: String)] = []
        var option = options
        while let keyword = option.pointee.keyword {
            if let value = option.pointee.val {
                pairs.append((String(cString: keyword), String(cString: value)))
            }
            option += 1
        }
        self.parameters = pairs
    }

    /// Explicit keywords, e.g. `["host": "/run/pg", "dbname": "parley"]` (any libpq keyword).
    public init(keywords: [String: String]) {
        self.parameters = keywords.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
    }

    /// The common keywords; `host` may be a Unix socket directory (starts with `/`).
    public init(
        host: String, port: Int = 5432, user: String, password: String? = nil, database: String,
        applicationName: String? = nil
    ) {
        var pairs: [(key: String, value: String)] = [("host", host), ("port", String(port)), ("user", user)]
        if let password { pairs.append(("password", password)) }
        pairs.append(("dbname", database))
        if let applicationName { pairs.append(("application_name", applicationName)) }
        self.parameters = pairs
    }

    /// The value of one libpq keyword, if set.
    public subscript(keyword: String) -> String? {
        get { parameters.last { $0.key == keyword }?.value }
        set {
            parameters.removeAll { $0.key == keyword }
            if let newValue { parameters.append((keyword, newValue)) }
        }
    }

    public var host: String? { self["host"] }
    public var port: Int? { self["port"].flatMap { Int($0) } }
    public var user: String? { self["user"] }
    public var database: String? {
        get { self["dbname"] }
        set { self["dbname"] = newValue }
    }
    /// Shown in `pg_stat_activity`.
    public var applicationName: String? {
        get { self["application_name"] }
        set { self["application_name"] = newValue }
    }
    /// Seconds libpq waits for a connection (defaults to 3 so an outage fails fast).
    public var connectTimeoutSeconds: Int? {
        get { self["connect_timeout"].flatMap { Int($0) } }
        set { self["connect_timeout"] = newValue.map { String($0) } }
    }

    /// How long connecting may take: `connect_timeout` (3 s unless set; 0 or less is unbounded, as in libpq), and no
    /// longer than `responseTimeout`.
    var connectTimeoutNanos: UInt64? {
        let seconds = connectTimeoutSeconds ?? 3
        let connect: UInt64? = seconds > 0 ? UInt64(seconds) * 1_000_000_000 : nil
        guard let response = responseTimeout.map(Self.nanos) else { return connect }
        return min(connect ?? .max, response)
    }

    static func nanos(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        return UInt64(max(0, seconds)) * 1_000_000_000 + UInt64(max(0, attoseconds) / 1_000_000_000)
    }

    /// Adds a server setting every connection starts with (`-c name=value` in libpq's `options`, after any the
    /// connection string already had). `name` and `value` must not contain spaces.
    public mutating func addServerSetting(_ name: String, _ value: String) {
        let setting = "-c \(name)=\(value)"
        self["options"] = self["options"].map { $0 + " " + setting } ?? setting
    }

    /// The same server and credentials, another database.
    public func with(database: String) -> PostgresConfiguration {
        var copy = self
        copy.database = database
        return copy
    }

    /// The keywords handed to libpq: explicit ones plus our defaults.
    var connectKeywords: [(key: String, value: String)] {
        var pairs = parameters
        if self["connect_timeout"] == nil { pairs.append(("connect_timeout", "3")) }
        if self["client_encoding"] == nil { pairs.append(("client_encoding", "UTF8")) }
        if self["application_name"] == nil { pairs.append(("application_name", "parley")) }
        return pairs
    }

    /// Never shows the password.
    public var description: String {
        let shown = parameters.map { $0.key == "password" ? "password=***" : "\($0.key)=\($0.value)" }
        return "PostgresConfiguration(\(shown.joined(separator: " ")))"
    }
}
