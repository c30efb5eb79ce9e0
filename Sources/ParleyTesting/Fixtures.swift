import Parley
import ParleyCore
import ParleyPostgres

/// Starts a test server (the arguments of `TestServer.start`), runs `body` with it, and stops it.
public func withTestServer(
    testClock: Bool = false, poolSize: Int = 4, database: PostgresConfiguration? = nil,
    transport: TestServer.Transport? = nil, configure: (inout Configuration) -> Void = { _ in },
    _ body: (TestServer) throws -> Void
) throws {
    let server = try TestServer.start(
        testClock: testClock, poolSize: poolSize, database: database, transport: transport, configure: configure)
    defer { server.stop() }
    try body(server)
}

/// Starts a test server, creates a fresh app on it, runs `body` with both, and stops the server: the set-up of most
/// end-to-end tests. `settings` are the app's (as `createApp` takes them); `unthrottled` lifts the app-key rate limit
/// (`rate_limit_app_rps` 100000) so a load of requests never meets it.
public func withApp(
    testClock: Bool = false, poolSize: Int = 4, database: PostgresConfiguration? = nil,
    transport: TestServer.Transport? = nil, configure: (inout Configuration) -> Void = { _ in }, settings: String? = nil,
    unthrottled: Bool = false, _ body: (TestServer, TestApp) throws -> Void
) throws {
    var settings = settings
    if unthrottled {
        var merged = try JSONValue.parse(Array((settings ?? "{}").utf8)).objectValue ?? JSONObject()
        merged["rate_limit_app_rps"] = 100_000
        settings = JSONValue.object(merged).description
    }
    try withTestServer(
        testClock: testClock, poolSize: poolSize, database: database, transport: transport, configure: configure
    ) { server in
        try body(server, try server.createApp(settings: settings))
    }
}
