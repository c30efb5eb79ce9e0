import Glibc
import Parley
import ParleyCore
import ParleyHTTP
import ParleyPostgres
import ParleySync
import Synchronization

/// A real Parley server for one test: its own fresh database, listening on 127.0.0.1:0, stopped by `stop()`
/// (or when released).
///
/// `request` reaches it through its `transport`. The listener runs either way, so a test that needs a socket (an
/// SSE stream, raw bytes) connects to `port` whatever the transport.
public final class TestServer: @unchecked Sendable {
    /// How `request` reaches the server.
    public enum Transport: Sendable {
        /// A TCP connection per request to `port`: what a client sees, HTTP included.
        case sockets
        /// Straight into the server's router and handlers in this process, with no socket (`HTTPInProcessClient`):
        /// the same parser, limits, request ids, handler threads and response head, without the TCP round trips
        /// and event-loop hand-offs. For tests of the domain behind HTTP, not of HTTP itself; a streaming response
        /// is answered 501.
        case inProcess
    }

    /// The transport of servers started without one; a suite sets it with the `.inProcess` trait.
    @TaskLocal public static var defaultTransport: Transport = .sockets

    /// Immutable after `start` except `stopped` (atomic).
    public let app: ParleyApp
    public let port: Int
    public let adminKey: String
    public let database: PostgresConfiguration
    public let transport: Transport
    private let inProcess: HTTPInProcessClient
    private let stopped = Atomic<Bool>(false)

    /// Concurrent servers are limited so a parallel test run stays within the cluster's connection cap.
    private static let slots = CountingSlots(4)

    private init(app: ParleyApp, database: PostgresConfiguration, transport: Transport) {
        self.app = app
        self.port = app.port
        self.adminKey = app.adminKey
        self.database = database
        self.transport = transport
        self.inProcess = HTTPInProcessClient(server: app.httpServer, timeout: .seconds(30))
    }

    /// Starts a server on a fresh migrated database (or on `database`, for a second node of the same one).
    /// `transport` nil takes `defaultTransport`.
    public static func start(
        testClock: Bool = false, poolSize: Int = 4, database: PostgresConfiguration? = nil, transport: Transport? = nil,
        configure: (inout Configuration) -> Void = { _ in }
    ) throws -> TestServer {
        let db = try database ?? TestDatabase.shared().makeDatabase()
        var configuration = baseConfiguration()
        configuration.poolSize = poolSize
        configuration.testClock = testClock
        configure(&configuration)
        return try launch(configuration, database: db, transport: transport)
    }

    /// Starts a server that runs its own embedded PostgreSQL in `dataDirectory` (a fresh one when nil), as
    /// `parley serve` without `DATABASE_URL` does: for tests of the cluster's supervision and of restarts.
    public static func startEmbedded(
        dataDirectory: String? = nil, transport: Transport? = nil, configure: (inout Configuration) -> Void = { _ in }
    ) throws -> TestServer {
        var configuration = baseConfiguration()
        configuration.dataDirectory = try dataDirectory ?? TestDatabase.makeDataDirectory()
        configure(&configuration)
        return try launch(configuration, database: nil, transport: transport)
    }

    /// A test server's settings: 127.0.0.1 on a free port, a random admin key, 4 connections, warnings only.
    private static func baseConfiguration() -> Configuration {
        var configuration = Configuration()
        configuration.listenHost = "127.0.0.1"
        configuration.listenPort = 0
        configuration.adminKey = "test-admin-key-" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
        configuration.poolSize = 4
        configuration.logLevel = .warning
        return configuration
    }

    /// Starts the app on `database` (nil: its own embedded cluster) once a server slot is free.
    private static func launch(_ configuration: Configuration, database: PostgresConfiguration?, transport: Transport?) throws -> TestServer {
        try slots.acquire()
        do {
            let app = try ParleyApp(configuration: configuration, database: database, output: { _ in })
            return TestServer(app: app, database: database ?? app.database, transport: transport ?? defaultTransport)
        } catch {
            slots.release()
            throw error
        }
    }

    public func stop() {
        if stopped.exchange(true, ordering: .acquiringAndReleasing) { return }
        app.shutdown()
        Self.slots.release()
    }

    deinit { stop() }

    /// Sends one request through `transport`. `bearer` is the credential; `json` the body (sent as application/json).
    @discardableResult
    public func request(
        _ method: HTTPMethod, _ path: String, bearer: String? = nil, json: String? = nil, headers: HTTPHeaders = HTTPHeaders()
    ) throws -> TestResponse {
        var all = headers
        if let bearer { all.add("Authorization", "Bearer \(bearer)") }
        if json != nil && all["Content-Type"] == nil { all.add("Content-Type", "application/json") }
        let body = json.map { Array($0.utf8) }
        let response: HTTPClientResponse
        switch transport {
        case .inProcess:
            response = try inProcess.send(method: method, path: path, headers: all, body: body)
        case .sockets:
            let connection = try HTTPClientConnection(host: "127.0.0.1", port: port, timeout: .seconds(30))
            defer { connection.close() }
            response = try connection.send(method: method, path: path, headers: all, body: body)
        }
        return TestResponse(status: response.status, headers: response.headers, body: response.body)
    }

    /// Creates a fresh tenant app through the admin API and returns its id and key.
    public func createApp(settings: String? = nil) throws -> TestApp {
        let id = "t" + String(UInt64.random(in: 0...UInt64.max), radix: 36)
        var body = "{\"app_id\":\"\(id)\",\"name\":\"test app\""
        if let settings { body += ",\"settings\":\(settings)" }
        body += "}"
        let response = try request(.post, "/v1/apps", bearer: adminKey, json: body)
        guard response.status == 201, let key = response.json?["key"]?["secret"]?.stringValue else {
            throw TestFailure("creating app failed: \(response.status) \(response.text)")
        }
        return TestApp(server: self, appID: id, key: key)
    }
}

/// A tenant app of a test server, with its key.
public struct TestApp: Sendable {
    public let server: TestServer
    public let appID: String
    public let key: String

    public init(server: TestServer, appID: String, key: String) {
        self.server = server
        self.appID = appID
        self.key = key
    }

    /// A request with the app key.
    @discardableResult
    public func request(_ method: HTTPMethod, _ path: String, json: String? = nil, headers: HTTPHeaders = HTTPHeaders()) throws
        -> TestResponse
    {
        try server.request(method, path, bearer: key, json: json, headers: headers)
    }

    /// Creates a user (201 expected) and returns its id.
    @discardableResult
    public func createUser(_ userID: String, name: String = "") throws -> String {
        let r = try request(.post, "/v1/users", json: "{\"user_id\":\"\(userID)\",\"name\":\"\(name)\"}")
        guard r.status == 201 else { throw TestFailure("creating user \(userID) failed: \(r.status) \(r.text)") }
        return userID
    }

    /// Mints a user token.
    public func token(for userID: String, ttl: Int? = nil) throws -> String {
        let body = ttl.map { "{\"ttl_s\":\($0)}" } ?? "{}"
        let r = try request(.post, "/v1/users/\(userID)/tokens", json: body)
        guard r.status == 201, let token = r.json?["token"]?.stringValue else {
            throw TestFailure("minting token for \(userID) failed: \(r.status) \(r.text)")
        }
        return token
    }

    /// Reads the app's event log after `after` (all retained events by default).
    public func events(after: String = "earliest", query: String = "") throws -> [JSONValue] {
        let r = try request(.get, "/v1/events/log?after=\(after)&limit=100\(query.isEmpty ? "" : "&" + query)")
        guard r.status == 200 else { throw TestFailure("reading the event log failed: \(r.status) \(r.text)") }
        return r.json?["items"]?.arrayValue ?? []
    }
}

/// A response with its body parsed as JSON when possible.
public struct TestResponse: Sendable {
    public let status: Int
    public let headers: HTTPHeaders
    public let body: [UInt8]

    public init(status: Int, headers: HTTPHeaders, body: [UInt8]) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    public var text: String { String(decoding: body, as: UTF8.self) }
    public var json: JSONValue? { try? JSONValue.parse(body) }

    /// The problem `code` of an error response.
    public var code: Int? { json?["code"]?.intValue.map(Int.init) }
}

/// A failure of the test harness itself.
public struct TestFailure: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// A counting semaphore for threads (not for async code): bounds concurrent test servers.
final class CountingSlots: Sendable {
    private let available: LockedValue<Int>

    init(_ count: Int) { available = LockedValue(count) }

    /// Waits for a slot; after `limitSeconds` it throws rather than hang the whole test run. A test that waits that
    /// long is in a cycle: slot holders that need cooperative threads while the waiters block those threads, or a
    /// test holding several servers while others wait for theirs (hold at most two per test).
    func acquire(limitSeconds: Int = 180) throws {
        let deadline = ContinuousClock.now + .seconds(limitSeconds)
        while true {
            let got = available.withLock { n -> Bool in
                if n > 0 {
                    n -= 1
                    return true
                }
                return false
            }
            if got { return }
            if ContinuousClock.now > deadline {
                throw TestFailure("no test server slot came free in \(limitSeconds) s: the running tests hold every slot and wait")
            }
            usleep(5_000)
        }
    }

    func release() { available.withLock { $0 += 1 } }
}
