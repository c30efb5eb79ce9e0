import ParleyHTTP
import ParleyPostgres
import ParleySync
import ParleyTesting
import Synchronization
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains

/// After-event deliveries (docs/webhooks.md#retries) end to end: the outbox, the retry schedule on the test clock,
/// `dead`, the ordering rule, auto-disable and resume, a receiver that is away for most of a day, a restart mid-queue
/// and two nodes sharing the queue — against real loopback receivers.
@Suite("Webhook deliveries", .inProcess)
struct WebhookDeliveryTests: ProblemAssertions {
    /// A server whose webhooks may reach loopback receivers (refused by default).
    static func server(testClock: Bool = true, database: PostgresConfiguration? = nil) throws -> TestServer {
        try TestServer.start(testClock: testClock, database: database) { $0.webhookAllowPrivate = true }
    }

    /// Creates an endpoint; returns its id.
    static func endpoint(_ app: TestApp, url: String, types: [String], extra: String = "") throws -> String {
        let typesJSON = "[" + types.map { "\"\($0)\"" }.joined(separator: ",") + "]"
        let r = try app.request(.post, "/v1/webhooks", json: "{\"url\":\"\(url)\",\"event_types\":\(typesJSON)\(extra)}")
        #expect(r.status == 201, "\(r.text)")
        return r.json?["webhook_id"]?.stringValue ?? ""
    }

    static func deliveries(_ app: TestApp, _ webhookID: String, query: String = "") throws -> [JSONValue] {
        let r = try app.request(.get, "/v1/webhooks/\(webhookID)/deliveries?limit=100\(query)")
        #expect(r.status == 200, "\(r.text)")
        return r.json?["items"]?.arrayValue ?? []
    }

    /// Runs the server's dispatcher until nothing is due or in flight.
    static func drain(_ server: TestServer) {
        #expect(server.app.services.webhooks.dispatcher.drain(timeout: .seconds(30)), "the dispatcher did not settle")
    }

    @Test func retryScheduleOnTheTestClockKeepsTheBodyBytes() throws {
        let server = try Self.server()
        let failures = Atomic<Int>(0)
        let receiver = try TestReceiver { _ in
            failures.add(1, ordering: .relaxed).newValue <= 3 ? .status(500) : .status(204)
        }
        defer { receiver.stop() }
        let app = try server.createApp()
        let webhookID = try Self.endpoint(app, url: receiver.url, types: ["user.created"])
        _ = try app.createUser("alice")
        Self.drain(server)
        // After failed attempt n the next is 5 s, 30 s, 2 min later (±20 %).
        for (n, base) in [(1, 5_000.0), (2, 30_000.0), (3, 120_000.0)] {
            let delivery = try #require(try Self.deliveries(app, webhookID).first)
            #expect(delivery["status"]?.stringValue == "failed")
            #expect(delivery["attempts"]?.intValue == Int64(n))
            let wait = Double((delivery["next_attempt_at"]?.intValue ?? 0) - (delivery["last_attempt_at"]?.intValue ?? 0))
            #expect(wait >= base * 0.8 && wait <= base * 1.2, "after attempt \(n): \(wait) ms")
            // Not before its time …
            try server.advanceClock(ms: Int(base * 0.8) - 100)
            Self.drain(server)
            #expect(receiver.requests.count == n)
            // … and soon after it.
            try server.advanceClock(ms: Int(base * 0.4) + 200)
            Self.drain(server)
            #expect(receiver.requests.count == n + 1)
        }
        let requests = receiver.requests
        #expect(requests.count == 4)
        #expect(Set(requests.map(\.body)).count == 1, "every attempt carries the same bytes")
        #expect(requests.map { $0.header("Parley-Delivery-Attempt") } == ["1", "2", "3", "4"])
        #expect(Set(requests.compactMap { $0.header("webhook-id") }).count == 1)
        let stamps = requests.compactMap { $0.header("webhook-timestamp").flatMap { Int64($0) } }
        #expect(stamps == stamps.sorted() && stamps.last! - stamps.first! >= 150, "timestamps follow the server clock: \(stamps)")
        let done = try #require(try Self.deliveries(app, webhookID).first)
        #expect(done["status"]?.stringValue == "succeeded")
        let detail = try app.request(.get, "/v1/webhooks/\(webhookID)/deliveries/\(done["delivery_id"]?.stringValue ?? "")")
        #expect(detail.json?["attempts"]?.arrayValue?.map { $0["status_code"]?.intValue } == [500, 500, 500, 204])
    }

    @Test func theEleventhFailureMakesADeliveryDead() throws {
        let server = try Self.server()
        let receiver = try TestReceiver { _ in .status(503) }
        defer { receiver.stop() }
        let app = try server.createApp()
        let webhookID = try Self.endpoint(app, url: receiver.url, types: ["user.created"], extra: ",\"disable_after_failures\":1000")
        _ = try app.createUser("alice")
        Self.drain(server)
        for _ in 0..<12 {
            // Past the longest wait of the schedule (8 h + 20 %).
            try server.advanceClock(ms: 10 * 3_600_000)
            Self.drain(server)
        }
        #expect(receiver.requests.count == 11)
        let delivery = try #require(try Self.deliveries(app, webhookID).first)
        #expect(delivery["status"]?.stringValue == "dead")
        #expect(delivery["attempts"]?.intValue == 11)
        #expect(delivery["next_attempt_at"]?.isNull == true)
        // A manual retry of a dead delivery gets one attempt, and it returns to dead when that fails.
        let retried = try app.request(.post, "/v1/webhooks/\(webhookID)/deliveries/\(delivery["delivery_id"]?.stringValue ?? "")/retry")
        #expect(retried.status == 202, "\(retried.text)")
        Self.drain(server)
        #expect(receiver.requests.count == 12)
        #expect(receiver.requests.last?.header("Parley-Delivery-Attempt") == "12")
        try server.advanceClock(ms: 10 * 3_600_000)
        Self.drain(server)
        #expect(receiver.requests.count == 12)
        #expect(try Self.deliveries(app, webhookID).first?["status"]?.stringValue == "dead")
    }

    @Test func aFailingDeliveryHoldsBackItsKeyButNotOthers() throws {
        let server = try Self.server()
        // The first attempt of alice's creation fails; everything else succeeds.
        let failedOnce = Atomic<Bool>(false)
        let receiver = try TestReceiver { request in
            let text = request.text
            if text.contains("\"type\":\"user.created\""), text.contains("\"user_id\":\"alice\""),
                !failedOnce.exchange(true, ordering: .relaxed)
            {
                return .status(500)
            }
            return .status(200)
        }
        defer { receiver.stop() }
        let app = try server.createApp()
        _ = try Self.endpoint(app, url: receiver.url, types: ["user.*"])
        _ = try app.createUser("alice")
        for name in ["A1", "A2"] {
            let r = try app.request(.patch, "/v1/users/alice", json: "{\"name\":\"\(name)\"}")
            #expect(r.status == 200, "\(r.text)")
        }
        _ = try app.createUser("bob")
        Self.drain(server)
        // bob's event overtook alice's, whose later events wait for the failed one.
        let first = receiver.requests.map { $0.header("Parley-Event-Type") ?? "" }
        #expect(first.count == 2, "\(first)")
        #expect(receiver.requests.contains { $0.text.contains("\"user_id\":\"bob\"") })
        try server.advanceClock(ms: 6_100)
        Self.drain(server)
        let alice = receiver.requests.filter { $0.text.contains("\"user_id\":\"alice\"") }
        #expect(alice.map { $0.header("Parley-Event-Type") ?? "" } == ["user.created", "user.created", "user.updated", "user.updated"])
        let ids = alice.compactMap { $0.header("webhook-id").flatMap { Int64($0) } }
        #expect(ids == ids.sorted(), "in event order: \(ids)")
    }

    @Test func anEndpointIsDisabledAfterItsFailureLimitAndResumesWhenEnabled() throws {
        let server = try Self.server()
        let up = Atomic<Bool>(false)
        let receiver = try TestReceiver { _ in up.load(ordering: .relaxed) ? .status(200) : .status(500) }
        defer { receiver.stop() }
        let app = try server.createApp()
        let webhookID = try Self.endpoint(
            app, url: receiver.url, types: ["user.created"], extra: ",\"disable_after_failures\":3,\"disable_after_s\":0")
        for user in ["u1", "u2", "u3"] { _ = try app.createUser(user) }
        Self.drain(server)
        let disabled = try app.request(.get, "/v1/webhooks/\(webhookID)")
        #expect(disabled.json?["enabled"]?.boolValue == false)
        #expect(disabled.json?["disabled_reason"]?.stringValue == "consecutive_failures")
        #expect(disabled.json?["consecutive_failures"]?.intValue == 3)
        let events = try app.events(query: "types=webhook.disabled")
        #expect(events.count == 1)
        #expect(events.first?["data"]?["webhook_id"]?.stringValue == webhookID)
        // While disabled: no new deliveries, the failed ones are not attempted.
        _ = try app.createUser("u4")
        try server.advanceClock(ms: 3_600_000)
        Self.drain(server)
        #expect(receiver.requests.count == 3)
        #expect(try Self.deliveries(app, webhookID).map { $0["status"]?.stringValue } == ["failed", "failed", "failed"])
        // Re-enabled: the paused deliveries go out.
        up.store(true, ordering: .relaxed)
        let enabled = try app.request(.patch, "/v1/webhooks/\(webhookID)", json: "{\"enabled\":true}")
        #expect(enabled.json?["consecutive_failures"]?.intValue == 0)
        #expect(enabled.json?["disabled_reason"]?.isNull == true)
        Self.drain(server)
        #expect(receiver.requests.count == 6)
        #expect(try Self.deliveries(app, webhookID).allSatisfy { $0["status"]?.stringValue == "succeeded" })
        #expect(!receiver.requests.contains { $0.text.contains("\"user_id\":\"u4\"") })
    }

    /// A receiver down for minutes keeps its endpoint however many deliveries fail; once the streak is older than
    /// `disable_after_s`, the next failure disables it. What was written while it was off is not delivered on
    /// re-enable, and `recover` writes exactly those deliveries, once (docs/webhooks.md#recovering-missed-events).
    @Test func aShortOutageKeepsTheEndpointAndRecoverDeliversWhatADisabledOneMissed() throws {
        let server = try Self.server()
        let up = Atomic<Bool>(false)
        let receiver = try TestReceiver { _ in up.load(ordering: .relaxed) ? .status(200) : .status(500) }
        defer { receiver.stop() }
        let app = try server.createApp()
        let webhookID = try Self.endpoint(app, url: receiver.url, types: ["user.created"], extra: ",\"disable_after_failures\":3")
        #expect(try app.request(.get, "/v1/webhooks/\(webhookID)").json?["disable_after_s"] == 86_400)
        for user in ["u1", "u2", "u3", "u4"] { _ = try app.createUser(user) }
        Self.drain(server)
        let enduring = try app.request(.get, "/v1/webhooks/\(webhookID)").json
        #expect(enduring?["consecutive_failures"]?.intValue == 4, "four failures in a streak minutes old")
        #expect(enduring?["enabled"] == true)
        // A day later the retries fail again: the streak is old enough, and the endpoint goes off.
        try server.advanceClock(ms: 86_400_000)
        Self.drain(server)
        let disabled = try app.request(.get, "/v1/webhooks/\(webhookID)").json
        #expect(disabled?["enabled"] == false)
        #expect(disabled?["disabled_reason"] == "consecutive_failures")
        #expect(try app.events(query: "types=webhook.disabled").count == 1)
        let attemptsBefore = receiver.requests.count

        // Written while it is off: no delivery, even after it is enabled again.
        for user in ["u5", "u6"] { _ = try app.createUser(user) }
        up.store(true, ordering: .relaxed)
        // Recovered while disabled, the deliveries wait with the endpoint's other paused ones.
        let recovered = try app.request(.post, "/v1/webhooks/\(webhookID)/recover", json: #"{"since":"1970-01-01T00:00:00Z"}"#)
        #expect(recovered.status == 202, "\(recovered.text)")
        #expect(recovered.json?["created"] == 2, "u5 and u6: the others have their deliveries")
        Self.drain(server)
        #expect(receiver.requests.count == attemptsBefore, "nothing is attempted while the endpoint is disabled")
        #expect(try app.request(.patch, "/v1/webhooks/\(webhookID)", json: #"{"enabled":true}"#).status == 200)
        // The paused ones resume at their next attempt time (30 s after their last failure), the recovered ones at once.
        Self.drain(server)
        try server.advanceClock(ms: 60_000)
        Self.drain(server)
        let delivered = receiver.requests.dropFirst(attemptsBefore).compactMap { try? JSONValue.parse($0.body) }
        #expect(delivered.compactMap { $0["data"]?["user"]?["user_id"]?.stringValue }.sorted() == ["u1", "u2", "u3", "u4", "u5", "u6"])
        #expect(try Self.deliveries(app, webhookID).allSatisfy { $0["status"] == "succeeded" })
        // Repeating a recover writes nothing twice; by event id it counts from after that event.
        let again = try app.request(.post, "/v1/webhooks/\(webhookID)/recover", json: #"{"since":"0"}"#)
        #expect(again.status == 202)
        #expect(again.json?["created"] == 0)

        // `since` must be an event id within the log or an RFC 3339 time.
        for since in [#""yesterday""#, #""99999999""#, #""2026-02-30T00:00:00Z""#, "5"] {
            let bad = try app.request(.post, "/v1/webhooks/\(webhookID)/recover", json: #"{"since":\#(since)}"#)
            Self.expectInvalid(bad, field: "body.since")
        }
        Self.expectProblem(try app.request(.post, "/v1/webhooks/wh_nope/recover", json: #"{"since":"0"}"#), 404, .notFound)
    }

    @Test func aReceiverAwayForMostOfADayGetsEverythingOnceInOrder() throws {
        let server = try Self.server()
        let clock = server.app.services.clock
        // Away for 18 simulated hours: the 11th attempt of the earliest delivery (≥ 0.8 × ~23.7 h) comes after that.
        let returnsAt = clock.now() + 18 * 3_600_000
        let accepted = Mutex<[(id: Int64, body: String)]>([])
        let receiver = try TestReceiver { request in
            guard clock.now() >= returnsAt else { return .status(503) }
            accepted.withLock { $0.append((Int64(request.header("webhook-id") ?? "") ?? -1, request.text)) }
            return .status(200)
        }
        defer { receiver.stop() }
        let app = try server.createApp()
        _ = try Self.endpoint(app, url: receiver.url, types: ["user.*"], extra: ",\"disable_after_failures\":1000")
        let users = ["u1", "u2", "u3", "u4", "u5"]
        for user in users {
            _ = try app.createUser(user)
            #expect(try app.request(.patch, "/v1/users/\(user)", json: "{\"name\":\"n\"}").status == 200)
        }
        Self.drain(server)
        for _ in 0..<30 {
            try server.advanceClock(ms: 3_600_000)
            Self.drain(server)
        }
        let got = accepted.withLock { $0 }
        #expect(got.count == 10, "\(got.map(\.id))")
        #expect(Set(got.map(\.id)).count == got.count, "each event accepted once")
        for user in users {
            let ids = got.filter { $0.body.contains("\"user_id\":\"\(user)\"") }.map(\.id)
            #expect(ids.count == 2 && ids == ids.sorted(), "\(user): \(ids)")
        }
    }

    @Test func aRestartMidQueueLosesNothing() throws {
        let first = try Self.server(testClock: false)
        let receiver = try TestReceiver { _ in .status(500) }
        defer { receiver.stop() }
        let app = try first.createApp()
        let webhookID = try Self.endpoint(app, url: receiver.url, types: ["user.created"], extra: ",\"disable_after_failures\":1000")
        for i in 0..<20 { _ = try app.createUser("u\(i)") }
        Self.drain(first)
        first.stop()
        receiver.setHandler { _ in .status(200) }
        let second = try Self.server(testClock: false, database: first.database)
        defer { second.stop() }
        // The failed deliveries are due 5 s (±20 %) after their attempt, by the real clock here.
        var succeeded = 0
        let again = TestApp(server: second, appID: app.appID, key: app.key)
        try eventually(timeout: .seconds(20), every: .milliseconds(250)) {
            Self.drain(second)
            succeeded = try Self.deliveries(again, webhookID, query: "&status=succeeded").count
            return succeeded == 20
        }
        #expect(succeeded == 20)
        let accepted = receiver.requests.suffix(20).compactMap { $0.header("webhook-id") }
        #expect(Set(accepted).count == 20)
    }

    @Test func aNodeStoppedWithAttemptsInFlightLeavesThemToTheNextHolder() throws {
        let first = try Self.server(testClock: false)
        let receiver = try TestReceiver { _ in TestReceiver.Answer(status: 204, delayMillis: 400) }
        defer { receiver.stop() }
        let app = try first.createApp()
        for user in ["u1", "u2", "u3"] { _ = try app.createUser(user) }
        let webhookID = try Self.endpoint(app, url: receiver.url, types: ["message.sent"])
        let count = 12
        for i in 0..<count {
            let (from, to) = i % 2 == 0 ? ("u1", "u2") : ("u2", "u3")
            let r = try app.request(
                .post, "/v1/messages", json: #"{"from":"\#(from)","conversation_type":"peer","to":"\#(to)","type":1,"body":{"text":"m\#(i)"}}"#)
            #expect(r.status == 201, "\(r.text)")
        }
        // Stopped while the receiver still holds the first attempts: their outcomes are never written, the cursor
        // stays before them, and the next node sends them again.
        first.stop()
        let second = try Self.server(testClock: false, database: first.database)
        defer { second.stop() }
        let again = TestApp(server: second, appID: app.appID, key: app.key)
        var listed: [JSONValue] = []
        try eventually(timeout: .seconds(20), every: .milliseconds(200)) {
            Self.drain(second)
            listed = try Self.deliveries(again, webhookID)
            return listed.count == count && listed.allSatisfy { $0["status"]?.stringValue == "succeeded" }
        }
        #expect(listed.count == count, "one delivery per event")
        #expect(Set(listed.compactMap { $0["event_id"]?.stringValue }).count == count)
        #expect(listed.allSatisfy { $0["status"]?.stringValue == "succeeded" })
        let events = try again.request(.get, "/v1/events/log?after=earliest&types=message.sent&limit=100").json?["items"]?.arrayValue ?? []
        #expect(Set(receiver.requests.compactMap { $0.header("webhook-id") }) == Set(events.compactMap { $0["id"]?.stringValue }))
    }

    @Test func twoNodesNeverAttemptOneDeliveryTwice() throws {
        let nodeA = try Self.server(testClock: false)
        let nodeB = try Self.server(testClock: false, database: nodeA.database)
        defer { nodeB.stop() }
        let receiver = try TestReceiver { _ in TestReceiver.Answer(status: 200, delayMillis: 20) }
        defer { receiver.stop() }
        let app = try nodeA.createApp()
        _ = try Self.endpoint(app, url: receiver.url, types: ["user.created"])
        let count = 120
        for i in 0..<count { _ = try app.createUser("u\(i)") }
        nodeA.app.services.webhooks.dispatcher.poke()
        nodeB.app.services.webhooks.dispatcher.poke()
        _ = receiver.waitFor(count: count, timeout: .seconds(30))
        Self.drain(nodeA)
        Self.drain(nodeB)
        let ids = receiver.requests.compactMap { $0.header("webhook-id") }
        #expect(ids.count == count, "\(ids.count) requests for \(count) events")
        #expect(Set(ids).count == count)
    }
}
