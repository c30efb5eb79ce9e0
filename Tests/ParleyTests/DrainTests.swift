import Dispatch
import Glibc
import ParleyHTTP
import ParleyPostgres
import ParleySync
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// The graceful drain a node runs on SIGTERM (docs/operations.md#shutdown), as a rolling restart depends on it: two
/// nodes over one database, the first shut down as the signal would.
@Suite("Graceful drain")
struct DrainTests: ProblemAssertions {

    /// A stream on the draining node ends cleanly with the short retry hint; its client resumes on the other node with
    /// `Last-Event-ID` and gets every later event exactly once, in order; the user, back online there within the
    /// handover, never reads offline.
    @Test func aDrainedStreamResumesExactlyOnAnotherNodeWithoutAPresenceFlap() throws {
        let first = try TestServer.start()
        let second = try TestServer.start(database: first.database)
        defer { second.stop() }
        let app = try first.createApp()
        let elsewhere = TestApp(server: second, appID: app.appID, key: app.key)
        try app.createUser("u1")
        let token = try app.token(for: "u1")
        let start = try LiveStreams.head(app)
        let stream = try LiveStreams.open(first, "/v1/users/u1/events?platform=web", bearer: token, lastEventID: String(start))
        defer { stream.close() }
        _ = try OnlineStatus.status(app, "u1") { $0["online_status"] == .string("online") }
        try LiveStreams.rename(app, "u1", times: 3, tag: "before")
        var received: [Int64] = []
        while received.count < 3, let event = try LiveStreams.nextEvent(stream) { received.append(Int64(event.id ?? "") ?? -1) }

        let stopped = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            first.stop()
            stopped.signal()
        }
        // The rest of the stream: events still to come (none here), the retry hint, then a clean end (no truncation).
        var lines: [String] = []
        while let line = try stream.nextLine(timeout: .seconds(10)) { lines.append(line) }
        #expect(lines.contains("retry: \(EventHub.drainRetryMillis)"), "\(lines)")

        // Written while the first node drains; the client reconnects as the hint says, to the other node.
        try LiveStreams.rename(elsewhere, "u1", times: 2, tag: "during")
        let last = received.last ?? start
        let resumed = try LiveStreams.open(second, "/v1/users/u1/events?platform=web", bearer: token, lastEventID: String(last))
        defer { resumed.close() }
        #expect(resumed.status == 200)
        #expect(resumed.headers["Parley-Last-Event-ID"] == String(last))
        try LiveStreams.rename(elsewhere, "u1", times: 2, tag: "after")
        while received.count < 7, let event = try LiveStreams.nextEvent(resumed) { received.append(Int64(event.id ?? "") ?? -1) }
        let logged = try elsewhere.events(after: String(start), query: "types=user.updated").compactMap { Int64($0["id"]?.stringValue ?? "") }
        #expect(received == logged, "every event once, in order, across the drain")
        #expect(received.count == 7)

        #expect(stopped.wait(timeout: .now() + 20) == .success, "the drain ends")
        let status = try elsewhere.request(.get, "/v1/users/u1/status").json
        #expect(status?["online_status"] == .string("online"))
        let changes = try elsewhere.events(after: String(start), query: "types=user.status_updated")
        let offline = changes.filter { $0.description.contains(#""online_status":"offline""#) }
        #expect(offline.isEmpty, "the user reconnected within the handover: \(changes)")
    }

    /// A user whose only stream was on the drained node, and who does not come back, reads offline once the drain
    /// is over (not after the dead-node timeout), and the node's heartbeat row is gone.
    @Test func aUserWhoDoesNotComeBackIsOfflineWhenTheDrainEnds() throws {
        let first = try TestServer.start()
        let second = try TestServer.start(database: first.database)
        defer { second.stop() }
        let app = try first.createApp()
        let elsewhere = TestApp(server: second, appID: app.appID, key: app.key)
        try app.createUser("u1")
        let stream = try LiveStreams.open(first, "/v1/users/u1/events", bearer: try app.token(for: "u1"))
        defer { stream.close() }
        _ = try OnlineStatus.status(app, "u1") { $0["online_status"] == .string("online") }
        let nodesBefore = try liveNodes(second)
        first.stop()
        let status = try elsewhere.request(.get, "/v1/users/u1/status").json
        #expect(status?["online_status"] == .string("offline"))
        #expect(try liveNodes(second) == nodesBefore - 1, "the drained node left the node table")
    }

    /// While a node drains, `/readyz` answers 503 and a request already in flight still gets its answer, with
    /// `Connection: close`; new connections are refused.
    @Test func readinessFailsAndAnInFlightRequestFinishesDuringTheDrain() throws {
        let server = try TestServer.start(transport: .inProcess, configure: { $0.webhookAllowPrivate = true })
        let app = try server.createApp(settings: #"{"rate_limit_app_rps":100000}"#)
        try app.createUser("a")
        try app.createUser("b")
        // A before-send hook that answers after 3 s keeps the send in flight until the drain has reached the connections.
        let receiver = try TestReceiver { _ in
            TestReceiver.Answer(
                status: 200, body: Array(#"{"action":"allow"}"#.utf8), headers: [("Content-Type", "application/json")], delayMillis: 3000)
        }
        defer { receiver.stop() }
        let hook = try app.request(
            .post, "/v1/webhooks", json: #"{"url":"\#(receiver.url)/hook","event_types":["message.before_send"],"timeout_ms":5000}"#)
        #expect(hook.status == 201, "\(hook.text)")
        #expect(try server.request(.get, "/readyz").status == 200)

        let answer = LockedValue<HTTPClientResponse?>(nil)
        let sent = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            defer { sent.signal() }
            guard let connection = try? HTTPClientConnection(host: "127.0.0.1", port: server.port, timeout: .seconds(20)) else { return }
            defer { connection.close() }
            var headers = HTTPHeaders()
            headers.add("Authorization", "Bearer \(app.key)")
            headers.add("Content-Type", "application/json")
            let body = #"{"from":"a","conversation_type":"peer","to":"b","type":1,"body":{"text":"in flight"}}"#
            let response = try? connection.send(method: .post, path: "/v1/messages", headers: headers, body: Array(body.utf8))
            answer.withLock { $0 = response }
        }
        #expect(receiver.waitFor(count: 1).count == 1, "the send is in flight")
        let stopped = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            server.stop()
            stopped.signal()
        }
        #expect(eventually { (try? server.request(.get, "/readyz").status) == 503 })
        #expect(eventually { (try? HTTPClientConnection(host: "127.0.0.1", port: server.port, timeout: .seconds(1))) == nil })
        #expect(sent.wait(timeout: .now() + 20) == .success)
        let response = try #require(answer.withLock { $0 })
        #expect(response.status == 201, "\(String(decoding: response.body, as: UTF8.self))")
        #expect(response.headers["Connection"] == "close", "\(response.headers)")
        #expect(stopped.wait(timeout: .now() + 20) == .success)
    }

    /// The nodes that beat lately, as the other nodes count them.
    private func liveNodes(_ server: TestServer) throws -> Int64 {
        let connection = try PostgresConnection(server.database)
        return try connection.query("SELECT count(*) FROM live_nodes").decodeFirst(Int64.self) ?? 0
    }
}
