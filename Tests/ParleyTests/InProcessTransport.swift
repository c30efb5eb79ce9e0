import Parley
import ParleyCore
import ParleyHTTP
import ParleyTesting
import Testing

/// A suite trait: the servers its tests start answer `request` in process, with no socket
/// (`TestServer.Transport.inProcess`), unless a test passes `transport: .sockets`.
///
/// For suites of the domain behind HTTP. Suites that test HTTP itself (framing, keep-alive, limits, headers, CORS)
/// or streams keep the default, sockets.
struct InProcessTransport: SuiteTrait, TestTrait, TestScoping {
    var isRecursive: Bool { true }

    func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        try await TestServer.$defaultTransport.withValue(.inProcess) { try await function() }
    }
}

extension Trait where Self == InProcessTransport {
    /// Servers started by the suite's tests answer in process (see `InProcessTransport`).
    static var inProcess: Self { Self() }
}

@Suite("In-process transport", .inProcess)
struct InProcessTransportTests {
    @Test func suiteTraitPicksInProcessAndATestMayAskForSockets() throws {
        try withTestServer { local in
            let socket = try TestServer.start(transport: .sockets)
            defer { socket.stop() }
            #expect(local.transport == .inProcess)
            #expect(socket.transport == .sockets)
            for server in [local, socket] {
                let r = try server.request(.get, "/v1/nope", bearer: server.adminKey)
                #expect(r.status == 404)
                #expect(r.json?["request_id"]?.stringValue == r.headers["X-Request-Id"])
            }
        }
    }

    @Test func twoNodesOfOneDatabaseAnswerInProcess() throws {
        try withTestServer { nodeA in
            let nodeB = try TestServer.start(database: nodeA.database)
            defer { nodeB.stop() }
            let app = try nodeA.createApp()
            try app.createUser("u1", name: "one")
            let onB = TestApp(server: nodeB, appID: app.appID, key: app.key)
            let r = try onB.request(.get, "/v1/users/u1")
            #expect(r.status == 200)
            #expect(r.json?["name"]?.stringValue == "one")
        }
    }
}
