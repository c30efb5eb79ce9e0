import Glibc
import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Hostile and unusual request input end to end, over real sockets (issue 16): each test names the rule it holds
/// the server to.
@Suite("Request hygiene")
struct RequestHygieneTests: ProblemAssertions {
    /// One raw request on a fresh connection, and its answer.
    static func raw(_ server: TestServer, _ request: String) throws -> (HTTPClientResponse, HTTPClientConnection) {
        let connection = try HTTPClientConnection(host: "127.0.0.1", port: server.port, timeout: .seconds(30))
        try connection.sendRaw(request)
        return (try connection.readResponse(), connection)
    }

    // MARK: - Item 6: one canonical path

    @Test func noOtherSpellingOfAPathReachesItsRoute() throws {
        let server = try TestServer.start()
        defer { server.stop() }
        let app = try server.createApp()
        try app.createUser("u1")
        #expect(try server.request(.get, "/v1/apps", bearer: server.adminKey).status == 200)
        // Percent-encoded unreserved characters are those characters (RFC 3986 §6.2.2.2), as a normalising proxy sees them.
        #expect(try server.request(.get, "/%76%31/apps", bearer: server.adminKey).status == 200)
        #expect(try app.request(.get, "/v1/users/%75%31").json?["user_id"]?.stringValue == "u1")
        for path in ["//v1//apps", "//v1/apps", "/v1//apps", "/v1/apps/", "/v1/apps//", "/v1/apps%2F", "/v1%2Fapps", "/v1/apps/\(app.appID)/"] {
            Self.expectProblem(try server.request(.get, path, bearer: server.adminKey), 404, 7_000_006, path)
        }
        Self.expectProblem(try app.request(.get, "/v1/users/u1/"), 404, 7_000_006, "trailing slash")
    }

    // MARK: - Item 8: Host, a stalled body

    @Test func anHTTP11RequestWithoutHostIs400() throws {
        let server = try TestServer.start()
        defer { server.stop() }
        let app = try server.createApp()
        let body = #"{"user_id":"nh"}"#
        let (r, connection) = try Self.raw(
            server,
            "POST /v1/users HTTP/1.1\r\nAuthorization: Bearer \(app.key)\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
        )
        Self.expectProblem(r, 400, 7_000_019, "no Host")
        #expect(connection.isClosedByPeer(timeout: .seconds(2)))
        Self.expectProblem(try app.request(.get, "/v1/users/nh"), 404, 6_000_011, "nothing was written")
        // HTTP/1.0 has no Host requirement.
        let (old, _) = try Self.raw(server, "GET /healthz HTTP/1.0\r\n\r\n")
        #expect(old.status == 200)
    }

    @Test func aStalledBodyIsAnswered408BeforeTheConnectionCloses() throws {
        let server = try TestServer.start { $0.requestBodyTimeoutMillis = 1000 }
        defer { server.stop() }
        let app = try server.createApp()
        let connection = try HTTPClientConnection(host: "127.0.0.1", port: server.port, timeout: .seconds(10))
        try connection.sendRaw(
            "POST /v1/users HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(app.key)\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"user_id\":"
        )
        let started = ContinuousClock.now
        let r = try connection.readResponse()
        Self.expectProblem(r, 408, 7_000_015, "stalled body")
        #expect(r.headers["Connection"] == "close")
        #expect(ContinuousClock.now - started < .seconds(5))
        #expect(connection.isClosedByPeer(timeout: .seconds(3)))
    }
}
