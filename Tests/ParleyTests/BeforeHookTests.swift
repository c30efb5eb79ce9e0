import ParleyHTTP
import ParleySync
import ParleyTesting
import Synchronization
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Before-event hooks (docs/webhooks.md#before-event-hooks) end to end: a real server calling a loopback receiver.
@Suite("Before-event hooks", .inProcess)
struct BeforeHookTests: ProblemAssertions {
    /// A server that may call loopback hooks, an app with users a and b, a receiver, and an endpoint serving `types`.
    struct Fixture {
        let server: TestServer
        let app: TestApp
        let receiver: TestReceiver
        let webhookID: String

        init(_ types: [String] = ["message.before_send"], failOpen: Bool = true, timeoutMillis: Int = 300, users: [String] = ["a", "b"]) throws {
            server = try TestServer.start(configure: { $0.webhookAllowPrivate = true })
            app = try server.createApp(settings: #"{"rate_limit_app_rps":100000}"#)
            for user in users { try app.createUser(user) }
            receiver = try TestReceiver { _ in Self.reply(#"{"action":"allow"}"#) }
            let list = types.map { "\"\($0)\"" }.joined(separator: ",")
            let r = try app.request(
                .post, "/v1/webhooks",
                json: #"{"url":"\#(receiver.url)/hook","event_types":[\#(list)],"timeout_ms":\#(timeoutMillis),"fail_open":\#(failOpen)}"#)
            guard r.status == 201, let id = r.json?["webhook_id"]?.stringValue else {
                throw TestFailure("creating the webhook failed: \(r.status) \(r.text)")
            }
            webhookID = id
        }

        /// A hook answer: `status` with the JSON `body`, after `delayMillis`.
        static func reply(status: Int = 200, _ body: String, delayMillis: Int = 0) -> TestReceiver.Answer {
            TestReceiver.Answer(
                status: status, body: Array(body.utf8), headers: [("Content-Type", "application/json")], delayMillis: delayMillis)
        }

        /// What the next hook calls get.
        func answer(status: Int = 200, _ body: String, delayMillis: Int = 0) {
            let reply = Self.reply(status: status, body, delayMillis: delayMillis)
            receiver.setHandler { _ in reply }
        }

        func send(_ text: String = "hi", from: String = "a", to: String = "b", extra: String = "") throws -> TestResponse {
            try PeerMessages.sendText(app, from, to, text, extra: extra)
        }

        func history(_ user: String = "b", _ peer: String = "a") throws -> [JSONValue] { try PeerMessages.history(app, user, peer) }

        /// `parley_hook_calls_total` of `message.before_send` calls that decided `decision` (/metrics).
        func hookCalls(_ decision: String) throws -> Int {
            let prefix = #"parley_hook_calls_total{hook="message.before_send",decision="\#(decision)"} "#
            let text = try server.request(.get, "/metrics").text
            let line = text.split(separator: "\n").first { $0.hasPrefix(prefix) }
            return line.flatMap { Int($0.dropFirst(prefix.count)) } ?? 0
        }

        /// The endpoint's `before` deliveries, newest first (after the dispatcher wrote its log).
        func beforeDeliveries() throws -> [JSONValue] {
            _ = server.app.services.webhooks.dispatcher.drain()
            let r = try app.request(.get, "/v1/webhooks/\(webhookID)/deliveries?kind=before")
            #expect(r.status == 200, "\(r.text)")
            return r.json?["items"]?.arrayValue ?? []
        }
    }

    // MARK: - message.before_send

    @Test func allowCallsTheHookWithTheProposedMessage() throws {
        let f = try Fixture()
        let r = try f.send("hello")
        #expect(r.status == 201, "\(r.text)")
        let calls = f.receiver.requests
        try #require(calls.count == 1)
        let call = calls[0]
        let body = try #require(call.json)
        #expect(body["id"]?.stringValue == call.header("webhook-id"))
        #expect(body["type"]?.stringValue == "message.before_send")
        #expect(body["app_id"]?.stringValue == f.app.appID)
        #expect(body["created_at"]?.intValue != nil)
        let message = try #require(body["data"]?["message"]?.objectValue)
        #expect(message["body"]?["text"]?.stringValue == "hello")
        #expect(message["from"]?.stringValue == "a")
        #expect(message["to"]?.stringValue == "b")
        #expect(message["message_id"] == nil && message["seq"] == nil && message["timestamp"] == nil)
        #expect(call.header("webhook-signature")?.hasPrefix("v1,") == true)
        #expect(try f.history().count == 1)
        let deliveries = try f.beforeDeliveries()
        try #require(deliveries.count == 1)
        #expect(deliveries[0]["kind"]?.stringValue == "before")
        #expect(deliveries[0]["decision"]?.stringValue == "allow")
        #expect(deliveries[0]["hook_call_id"]?.stringValue == call.header("webhook-id"))
    }

    @Test func rejectStoresNothing() throws {
        let f = try Fixture()
        f.answer(#"{"action":"reject","code":42,"reason":"no thanks"}"#)
        let r = try f.send()
        Self.expectProblem(r, 403, .rejectedByHook)
        #expect(r.json?["hook_code"]?.intValue == 42)
        #expect(r.json?["detail"]?.stringValue == "no thanks")
        #expect(try f.history().isEmpty)
        #expect(try f.history("a", "b").isEmpty)
        #expect(try f.beforeDeliveries().first?["decision"]?.stringValue == "reject")
        #expect(try f.hookCalls("reject") == 1)
    }

    @Test func modifyStoresThePatchedMessage() throws {
        let f = try Fixture()
        f.answer(#"{"action":"modify","patch":{"body":{"text":"patched"},"extended_data":"x","from":"z"}}"#)
        let r = try f.send("original")
        #expect(r.status == 201, "\(r.text)")
        #expect(r.json?["body"]?["text"]?.stringValue == "patched")
        #expect(r.json?["extended_data"]?.stringValue == "x")
        #expect(r.json?["from"]?.stringValue == "a")
        let items = try f.history()
        #expect(items.map { $0["body"]?["text"]?.stringValue } == ["patched"])
        #expect(try f.beforeDeliveries().first?["decision"]?.stringValue == "modify")
    }

    @Test func invalidPatchIs422() throws {
        let f = try Fixture()
        // A text over the limit (413 without a hook) and a bad member type (400 without a hook) are both 422.
        f.answer(#"{"action":"modify","patch":{"extended_data":42}}"#)
        Self.expectProblem(try f.send(), 422, .hookPatchInvalid)
        f.answer(#"{"action":"modify","patch":{"body":{"text":"\#(String(repeating: "x", count: 20_000))"}}}"#)
        Self.expectProblem(try f.send(), 422, .hookPatchInvalid)
        #expect(try f.history().isEmpty)
    }

    @Test func dropIsAFakeSuccess() throws {
        let f = try Fixture()
        f.answer(#"{"action":"drop"}"#)
        let r = try f.send("secret")
        #expect(r.status == 201, "\(r.text)")
        #expect(r.json?["seq"]?.intValue == 1)
        #expect(try f.history().isEmpty)
        #expect(try f.history("a", "b").count == 1)
        let stored = try f.app.request(.get, "/v1/messages/\(r.json?["message_id"]?.stringValue ?? "")")
        #expect(stored.json?["suppressed"]?.stringValue == "hook_drop")
        #expect(try PeerMessages.events(f.app, "message.sent", audience: "b").isEmpty)
        #expect(try f.beforeDeliveries().first?["decision"]?.stringValue == "drop")
    }

    @Test func timeoutFailsOpenOrClosed() throws {
        let open = try Fixture()
        open.answer(#"{"action":"reject"}"#, delayMillis: 600)
        #expect(try open.send().status == 201)
        #expect(try open.beforeDeliveries().first?["decision"]?.stringValue == "timeout")
        #expect(try open.hookCalls("fail_open") == 1)

        let closed = try Fixture(failOpen: false)
        closed.answer(#"{"action":"allow"}"#, delayMillis: 600)
        let r = try closed.send()
        Self.expectProblem(r, 503, .hookUnavailable)
        #expect(r.headers["Retry-After"] == "1")
        #expect(try closed.history().isEmpty)
        closed.answer(status: 500, "{}")
        Self.expectProblem(try closed.send(), 503, .hookUnavailable)
        #expect(try closed.hookCalls("error") == 2)
        #expect(try closed.hookCalls("allow") == 0)
    }

    @Test func skippedSendsDoNotCallTheHook() throws {
        let f = try Fixture()
        f.answer(#"{"action":"reject"}"#)
        #expect(try f.send(extra: #""skip_hooks":true"#).status == 201)
        let token = try f.app.token(for: "a")
        let userSend = try f.server.request(
            .post, "/v1/messages", bearer: token, json: #"{"conversation_type":"peer","to":"b","type":1,"body":{"text":"x"},"skip_hooks":true}"#)
        Self.expectProblem(userSend, 403, .forbidden)
        let batch = try f.app.request(
            .post, "/v1/messages/batch", json: #"{"from":"a","to_user_ids":["b"],"type":1,"body":{"text":"batch"}}"#)
        #expect(batch.status == 200, "\(batch.text)")
        #expect(f.receiver.requests.isEmpty)

        // A client_msg_id duplicate answers from the stored message without asking the hook.
        f.answer(#"{"action":"allow"}"#)
        #expect(try f.send("dup", extra: #""client_msg_id":"c1""#).status == 201)
        #expect(f.receiver.requests.count == 1)
        let again = try f.send("dup", extra: #""client_msg_id":"c1""#)
        #expect(again.status == 200)
        #expect(again.headers["Parley-Duplicate"] == "true")
        #expect(f.receiver.requests.count == 1)
    }

    @Test func hookWaitsDoNotHoldPoolWorkers() throws {
        let f = try Fixture(timeoutMillis: 2_000)
        f.answer(#"{"action":"allow"}"#, delayMillis: 300)
        let statuses = Mutex<[Int]>([])
        let start = ContinuousClock.now
        let threads = (0..<32).map { i in
            BackgroundThread(name: "sender") {
                let status = (try? f.send("m\(i)").status) ?? 0
                statuses.withLock { $0.append(status) }
            }
        }
        for thread in threads { thread.join() }
        let elapsed = ContinuousClock.now - start
        #expect(statuses.withLock { $0 }.allSatisfy { $0 == 201 })
        #expect(f.receiver.requests.count == 32)
        #expect(elapsed < .milliseconds(2_500), "32 sends with a 300 ms hook took \(elapsed)")
    }

    // MARK: - group.before_create

    @Test func groupCreateHook() throws {
        let f = try Fixture(["group.before_create"])
        f.answer(#"{"action":"modify","patch":{"name":"patched","attributes":{"k":"v"},"owner_id":"b"}}"#)
        let r = try f.app.request(.post, "/v1/groups", json: #"{"operator":"a","group_id":"g1","name":"orig","members":["b"]}"#)
        #expect(r.status == 201, "\(r.text)")
        #expect(r.json?["group"]?["name"]?.stringValue == "patched")
        #expect(r.json?["group"]?["owner_id"]?.stringValue == "a")
        let data = try #require(f.receiver.requests.first?.json?["data"])
        #expect(data["group"]?["name"]?.stringValue == "orig")
        #expect(data["group"]?["group_id"]?.stringValue == "g1")
        #expect(data["operator"]?.stringValue == "a")
        #expect(data["member_ids"]?.arrayValue?.compactMap(\.stringValue) == ["b"])

        f.answer(#"{"action":"modify","patch":{"name":"\#(String(repeating: "n", count: 60))"}}"#)
        Self.expectProblem(try f.app.request(.post, "/v1/groups", json: #"{"operator":"a","group_id":"g2"}"#), 422, .hookPatchInvalid)
        f.answer(#"{"action":"drop","code":7}"#)
        let dropped = try f.app.request(.post, "/v1/groups", json: #"{"operator":"a","group_id":"g3"}"#)
        Self.expectProblem(dropped, 403, .rejectedByHook)
        #expect(dropped.json?["hook_code"]?.intValue == 7)
        #expect(try f.app.request(.get, "/v1/groups/g3").status == 404)
        #expect(try f.app.request(.post, "/v1/groups", json: #"{"operator":"a","group_id":"g4","skip_hooks":true}"#).status == 201)
        #expect(f.receiver.requests.count == 3)
    }

    // MARK: - friend.before_add

    @Test func friendAddHook() throws {
        let f = try Fixture(["friend.before_add"], users: ["a", "b", "c"])
        f.answer(#"{"action":"modify","patch":{"alias":"bee","wording":"patched"}}"#)
        let added = try f.app.request(.post, "/v1/users/a/friends", json: #"{"friend_id":"b","wording":"hello"}"#)
        #expect(added.status == 201, "\(added.text)")
        #expect(added.json?["alias"]?.stringValue == "bee")
        #expect(added.json?["wording"]?.stringValue == "patched")
        let data = try #require(f.receiver.requests.first?.json?["data"])
        #expect(data["user_id"]?.stringValue == "a")
        #expect(data["friend_id"]?.stringValue == "b")
        #expect(data["via"]?.stringValue == "direct")
        #expect(data["wording"]?.stringValue == "hello")

        f.answer(#"{"action":"reject","reason":"spam"}"#)
        let rejected = try f.app.request(.post, "/v1/users/a/friend_applications", json: #"{"to":"c","wording":"hi"}"#)
        Self.expectProblem(rejected, 403, .rejectedByHook)
        #expect(f.receiver.requests.last?.json?["data"]?["via"]?.stringValue == "application")
        #expect(try f.app.request(.get, "/v1/users/c/friend_applications").json?["items"]?.arrayValue?.isEmpty == true)
        f.answer(#"{"action":"modify","patch":{"alias":42}}"#)
        Self.expectProblem(try f.app.request(.post, "/v1/users/a/friends", json: #"{"friend_id":"c"}"#), 422, .hookPatchInvalid)
    }
}
