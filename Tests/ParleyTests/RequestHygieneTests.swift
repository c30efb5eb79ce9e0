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
}
