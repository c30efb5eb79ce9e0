import Foundation
import ParleyHTTP
import ParleyTesting
import Synchronization
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Webhooks (docs/webhooks.md#endpoints, docs/webhooks.md#how-deliveries-are-made) end to end: real HTTP against a real
/// server and database, deliveries to a loopback receiver, signatures checked with an HMAC computed here.
@Suite("Webhooks", .inProcess)
struct WebhooksTests: ProblemAssertions {
    // MARK: - Helpers

    /// Creates an endpoint; `extra` is appended inside the body object.
    @discardableResult
    static func create(_ app: TestApp, url: String, types: String = #"["user.*"]"#, _ extra: String = "") throws -> JSONValue {
        let r = try app.request(.post, "/v1/webhooks", json: "{\"url\":\"\(url)\",\"event_types\":\(types)\(extra)}")
        #expect(r.status == 201, "\(r.text)")
        return r.json ?? .null
    }

    /// A loopback receiver that answers 204 until told otherwise; endpoints get its `/hook` path.
    static func receiver() throws -> TestReceiver { try TestReceiver { _ in .status(204) } }

    static func drain(_ server: TestServer) {
        #expect(server.app.services.webhooks.dispatcher.drain(), "the dispatcher did not become idle")
    }

    static func deliveries(_ app: TestApp, _ webhookID: String, _ query: String = "") throws -> [JSONValue] {
        let r = try app.request(.get, "/v1/webhooks/\(webhookID)/deliveries" + (query.isEmpty ? "" : "?" + query))
        #expect(r.status == 200, "\(r.text)")
        return r.json?["items"]?.arrayValue ?? []
    }

    /// base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}")) with the key decoded from `whsec_…`.
    static func sign(secret: String, id: String, timestamp: String, body: [UInt8]) -> String {
        let key = Crypto.base64Decode(String(secret.dropFirst("whsec_".count))) ?? []
        return Crypto.base64Encode(Crypto.hmacSHA256(key: key, message: Array("\(id).\(timestamp).".utf8) + body))
    }

    /// The `v1,` signatures of a request, in header order.
    private static func signatures(_ request: TestReceiver.Received) -> [String] {
        (request.header("webhook-signature") ?? "").split(separator: " ").map(String.init)
    }

    /// Asserts that `request` carries exactly one `v1,` signature per secret, in order, each valid.
    private static func expectSigned(_ request: TestReceiver.Received, by secrets: [String], sourceLocation: SourceLocation = #_sourceLocation) {
        let id = request.header("webhook-id") ?? ""
        let timestamp = request.header("webhook-timestamp") ?? ""
        let expected = secrets.map { "v1," + sign(secret: $0, id: id, timestamp: timestamp, body: request.body) }
        #expect(signatures(request) == expected, "webhook-signature", sourceLocation: sourceLocation)
    }

    static let webhookKeys: Set<String> = [
        "webhook_id", "url", "event_types", "secret", "enabled", "disabled_reason", "description", "timeout_ms", "fail_open",
        "disable_after_failures", "disable_after_s", "consecutive_failures", "created_at", "updated_at",
    ]

    static let deliveryKeys: Set<String> = [
        "delivery_id", "webhook_id", "kind", "event_id", "hook_call_id", "event_type", "status", "attempts", "next_attempt_at",
        "last_attempt_at", "last_status_code", "last_error", "response_excerpt", "duration_ms", "decision", "created_at",
    ]

    // MARK: - Endpoints

    @Test func createAppliesDefaultsAndGeneratesOrKeepsTheSecret() throws {
        try withApp(configure: { $0.webhookAllowPrivate = true }) { server, app in

            let w = try Self.create(app, url: "https://hooks.example.com/a")
            #expect(Set(w.objectValue?.keys ?? []) == Self.webhookKeys)
            #expect(w["url"] == .string("https://hooks.example.com/a"))
            #expect(w["event_types"] == .array([.string("user.*")]))
            #expect(w["enabled"] == .bool(true))
            #expect(w["disabled_reason"] == .null)
            #expect(w["description"] == .string(""))
            #expect(w["timeout_ms"] == .int(2000))
            #expect(w["fail_open"] == .bool(true))
            #expect(w["disable_after_failures"] == .int(20))
            #expect(w["disable_after_s"] == .int(86_400))
            #expect(w["consecutive_failures"] == .int(0))
            #expect(w["created_at"] == w["updated_at"])
            let secret = w["secret"]?.stringValue ?? ""
            #expect(secret.hasPrefix("whsec_"))
            let key = Crypto.base64Decode(String(secret.dropFirst(6)))
            #expect(key.map { (24...64).contains($0.count) } == true, "\(secret)")

            // A given secret is kept; the other fields as given.
            let given = "whsec_" + Crypto.base64Encode([UInt8](repeating: 7, count: 24))
            let g = try Self.create(
                app, url: "http://hooks.example.com/b", types: #"["*"]"#,
                ",\"secret\":\"\(given)\",\"description\":\"d\",\"timeout_ms\":100,\"fail_open\":false,\"disable_after_failures\":1,\"disable_after_s\":0"
            )
            #expect(g["secret"] == .string(given))
            #expect(g["description"] == .string("d"))
            #expect(g["timeout_ms"] == .int(100))
            #expect(g["fail_open"] == .bool(false))
            #expect(g["disable_after_failures"] == .int(1))
            #expect(g["disable_after_s"] == .int(0))

            // Created disabled: disabled_reason manual.
            let d = try Self.create(app, url: "http://hooks.example.com/c", #","enabled":false"#)
            #expect(d["enabled"] == .bool(false))
            #expect(d["disabled_reason"] == .string("manual"))

            // GET shows the same view, secret included.
            let id = w["webhook_id"]?.stringValue ?? ""
            let got = try app.request(.get, "/v1/webhooks/\(id)")
            #expect(got.status == 200)
            #expect(got.json == w)
        }
    }

    @Test func createValidatesEveryField() throws {
        try withApp(configure: { $0.webhookAllowPrivate = true }) { server, app in
            func post(_ body: String) throws -> TestResponse { try app.request(.post, "/v1/webhooks", json: body) }
            let url = "\"url\":\"https://hooks.example.com/h\""

            Self.expectInvalid(try post(#"{"event_types":["*"]}"#), field: "body.url")
            Self.expectInvalid(try post(#"{"url":"ftp://x.example.com/","event_types":["*"]}"#), field: "body.url")
            Self.expectInvalid(try post(#"{"url":"not a url","event_types":["*"]}"#), field: "body.url")
            Self.expectInvalid(try post("{\(url)}"), field: "body.event_types")
            Self.expectInvalid(try post("{\(url),\"event_types\":[]}"), field: "body.event_types")
            Self.expectInvalid(try post("{\(url),\"event_types\":[\"user.created\",\"user.nope\"]}"), field: "body.event_types[1]")
            Self.expectInvalid(try post("{\(url),\"event_types\":[\"webhook.ping\"]}"), field: "body.event_types[0]")
            Self.expectInvalid(try post("{\(url),\"event_types\":[\"nope.*\"]}"), field: "body.event_types[0]")
            Self.expectInvalid(try post("{\(url),\"event_types\":[\"user.*\",\"message.*\",\"user.*\"]}"), field: "body.event_types[2]")
            Self.expectInvalid(try post("{\(url),\"event_types\":[\"*\"],\"timeout_ms\":99}"), field: "body.timeout_ms")
            Self.expectInvalid(try post("{\(url),\"event_types\":[\"*\"],\"timeout_ms\":5001}"), field: "body.timeout_ms")
            Self.expectInvalid(try post("{\(url),\"event_types\":[\"*\"],\"disable_after_failures\":0}"), field: "body.disable_after_failures")
            Self.expectInvalid(try post("{\(url),\"event_types\":[\"*\"],\"disable_after_failures\":1001}"), field: "body.disable_after_failures")
            Self.expectInvalid(try post("{\(url),\"event_types\":[\"*\"],\"disable_after_s\":-1}"), field: "body.disable_after_s")
            Self.expectInvalid(try post("{\(url),\"event_types\":[\"*\"],\"disable_after_s\":2592001}"), field: "body.disable_after_s")
            Self.expectInvalid(try post("{\(url),\"event_types\":[\"*\"],\"secret\":\"whsec_c2hvcnQ=\"}"), field: "body.secret")
            Self.expectInvalid(try post("{\(url),\"event_types\":[\"*\"],\"secret\":\"nope\"}"), field: "body.secret")
            let long = String(repeating: "x", count: 257)
            Self.expectInvalid(try post("{\(url),\"event_types\":[\"*\"],\"description\":\"\(long)\"}"), field: "body.description")
            #expect(try app.request(.get, "/v1/webhooks").json?["items"]?.arrayValue?.count == 0)

            // `*`, `prefix.*`, exact after and before types, and the range bounds are accepted.
            let ok = try post(
                "{\(url),\"event_types\":[\"*\",\"message.*\",\"user.created\",\"message.before_send\",\"call.before_invite\"],"
                    + "\"timeout_ms\":5000,\"disable_after_failures\":1000}")
            #expect(ok.status == 201, "\(ok.text)")
            #expect(ok.json?["event_types"]?.arrayValue?.count == 5)

            // A PATCH validates the same way.
            let id = ok.json?["webhook_id"]?.stringValue ?? ""
            Self.expectInvalid(try app.request(.patch, "/v1/webhooks/\(id)", json: #"{"event_types":["x.y"]}"#), field: "body.event_types[0]")
            Self.expectInvalid(try app.request(.patch, "/v1/webhooks/\(id)", json: #"{"timeout_ms":6000}"#), field: "body.timeout_ms")
        }
    }

    @Test func beforeHookOwnershipAndTheEndpointLimit() throws {
        try withApp(configure: { $0.webhookAllowPrivate = true }) { server, app in
            let url = "https://hooks.example.com/h"

            let a = try Self.create(app, url: url, types: #"["message.before_send","user.*"]"#)
            let aID = a["webhook_id"]?.stringValue ?? ""
            // A second enabled endpoint listing the same before type: 409.
            Self.expectProblem(
                try app.request(.post, "/v1/webhooks", json: "{\"url\":\"\(url)\",\"event_types\":[\"message.before_send\"]}"), 409, .beforeHookTaken)
            // `*` does not claim before types; another before type is free.
            try Self.create(app, url: url, types: #"["*","group.before_create"]"#)
            // Created disabled it is allowed, but enabling it by PATCH conflicts.
            let b = try Self.create(app, url: url, types: #"["message.before_send"]"#, #","enabled":false"#)
            let bID = b["webhook_id"]?.stringValue ?? ""
            Self.expectProblem(try app.request(.patch, "/v1/webhooks/\(bID)", json: #"{"enabled":true}"#), 409, .beforeHookTaken)
            #expect(try app.request(.get, "/v1/webhooks/\(bID)").json?["enabled"] == .bool(false))
            // Adding the type to an enabled endpoint by PATCH conflicts too.
            let c = try Self.create(app, url: url, types: #"["user.*"]"#)
            let cID = c["webhook_id"]?.stringValue ?? ""
            Self.expectProblem(
                try app.request(.patch, "/v1/webhooks/\(cID)", json: #"{"event_types":["message.before_send"]}"#), 409, .beforeHookTaken)
            // Once the owner is disabled the type is free.
            #expect(try app.request(.patch, "/v1/webhooks/\(aID)", json: #"{"enabled":false}"#).status == 200)
            let enabled = try app.request(.patch, "/v1/webhooks/\(bID)", json: #"{"enabled":true}"#)
            #expect(enabled.status == 200, "\(enabled.text)")
            // …and the former owner cannot take it back while b serves it.
            Self.expectProblem(try app.request(.patch, "/v1/webhooks/\(aID)", json: #"{"enabled":true}"#), 409, .beforeHookTaken)

            // 20 endpoints at most (4 exist).
            for i in 4..<20 { try Self.create(app, url: url + "/\(i)") }
            Self.expectProblem(
                try app.request(.post, "/v1/webhooks", json: "{\"url\":\"\(url)\",\"event_types\":[\"*\"]}"), 422, .webhookLimit)
            // Deleting one makes room again.
            #expect(try app.request(.delete, "/v1/webhooks/\(cID)").status == 204)
            try Self.create(app, url: url)
        }
    }

    @Test func listPagesAndUnknownEndpointsAre404() throws {
        try withApp(configure: { $0.webhookAllowPrivate = true }) { server, app in
            var ids: [String] = []
            for i in 0..<3 { ids.append(try Self.create(app, url: "https://hooks.example.com/\(i)")["webhook_id"]?.stringValue ?? "") }

            let first = try app.request(.get, "/v1/webhooks?limit=2")
            #expect(first.status == 200)
            let page1 = first.json?["items"]?.arrayValue?.compactMap { $0["webhook_id"]?.stringValue } ?? []
            let cursor = first.json?["next_cursor"]?.stringValue ?? ""
            #expect(!cursor.isEmpty)
            let second = try app.request(.get, "/v1/webhooks?limit=2&cursor=\(cursor)")
            let page2 = second.json?["items"]?.arrayValue?.compactMap { $0["webhook_id"]?.stringValue } ?? []
            #expect(second.json?["next_cursor"] == .null)
            #expect(page1 + page2 == ids, "by created_at asc, then webhook_id")
            #expect(second.json?["items"]?[0]?["secret"]?.stringValue?.hasPrefix("whsec_") == true)
            Self.expectProblem(try app.request(.get, "/v1/webhooks?cursor=garbage"), 400, .invalidCursor)
            Self.expectInvalid(try app.request(.get, "/v1/webhooks?limit=0"), field: "limit")

            // Another app sees none of them.
            let other = try server.createApp()
            #expect(try other.request(.get, "/v1/webhooks").json?["items"]?.arrayValue?.count == 0)
            Self.expectProblem(try other.request(.get, "/v1/webhooks/\(ids[0])"), 404, .notFound)

            let missing = "/v1/webhooks/wh_nope"
            Self.expectProblem(try app.request(.get, missing), 404, .notFound)
            Self.expectProblem(try app.request(.patch, missing, json: #"{"enabled":false}"#), 404, .notFound)
            Self.expectProblem(try app.request(.delete, missing), 404, .notFound)
            Self.expectProblem(try app.request(.post, missing + "/rotate_secret", json: "{}"), 404, .notFound)
            Self.expectProblem(try app.request(.post, missing + "/ping"), 404, .notFound)
            Self.expectProblem(try app.request(.get, missing + "/deliveries"), 404, .notFound)
            Self.expectProblem(try app.request(.get, missing + "/deliveries/dlv_1"), 404, .notFound)
            Self.expectProblem(try app.request(.post, missing + "/deliveries/dlv_1/retry"), 404, .notFound)
            Self.expectProblem(try app.request(.get, "/v1/webhooks/\(ids[0])/deliveries/dlv_nope"), 404, .notFound)
            Self.expectProblem(try app.request(.post, "/v1/webhooks/\(ids[0])/deliveries/dlv_nope/retry"), 404, .notFound)

            // PATCH changes only what it names; DELETE then 404.
            let patched = try app.request(.patch, "/v1/webhooks/\(ids[1])", json: #"{"description":"new","url":"https://x.example.com/"}"#)
            #expect(patched.status == 200, "\(patched.text)")
            #expect(patched.json?["description"] == .string("new"))
            #expect(patched.json?["url"] == .string("https://x.example.com/"))
            #expect(patched.json?["event_types"] == .array([.string("user.*")]))
            #expect(try app.request(.delete, "/v1/webhooks/\(ids[1])").status == 204)
            Self.expectProblem(try app.request(.get, "/v1/webhooks/\(ids[1])"), 404, .notFound)
            Self.expectProblem(try app.request(.delete, "/v1/webhooks/\(ids[1])"), 404, .notFound)
        }
    }

    @Test func disableAndReEnable() throws {
        try withApp(configure: { $0.webhookAllowPrivate = true }) { server, app in
            let receiver = try Self.receiver()
            defer { receiver.stop() }
            receiver.setHandler { _ in .status(500) }
            let w = try Self.create(app, url: receiver.url + "/hook")
            let id = w["webhook_id"]?.stringValue ?? ""

            // A failed attempt counts.
            try app.createUser("u1")
            Self.drain(server)
            #expect(receiver.requests.count == 1)
            #expect(try app.request(.get, "/v1/webhooks/\(id)").json?["consecutive_failures"] == .int(1))
            let failed = try Self.deliveries(app, id)
            #expect(failed.first?["status"] == .string("failed"))
            #expect(failed.first?["attempts"] == .int(1))
            #expect(failed.first?["last_status_code"] == .int(500))
            #expect(failed.first?["next_attempt_at"]?.intValue != nil)

            // Disabled by hand: manual; no new deliveries while disabled.
            let off = try app.request(.patch, "/v1/webhooks/\(id)", json: #"{"enabled":false}"#)
            #expect(off.json?["enabled"] == .bool(false))
            #expect(off.json?["disabled_reason"] == .string("manual"))
            try app.createUser("u2")
            Self.drain(server)
            #expect(try Self.deliveries(app, id).count == 1)
            #expect(receiver.requests.count == 1)

            // Re-enabled: the failure count and reason are reset; new events are delivered again.
            let on = try app.request(.patch, "/v1/webhooks/\(id)", json: #"{"enabled":true}"#)
            #expect(on.json?["enabled"] == .bool(true))
            #expect(on.json?["disabled_reason"] == .null)
            #expect(on.json?["consecutive_failures"] == .int(0))
            receiver.setHandler { _ in .status(204) }
            try app.createUser("u3")
            Self.drain(server)
            let types = receiver.requests.map { $0.json?["data"]?["user"]?["user_id"]?.stringValue }
            #expect(types.contains("u3"))
            #expect(!types.contains("u2"), "no delivery was created for an event written while disabled")
        }
    }

    // MARK: - Ping

    @Test func pingSendsOneSignedRequestAndIsLogged() throws {
        try withApp(configure: { $0.webhookAllowPrivate = true }) { server, app in
            let receiver = try Self.receiver()
            defer { receiver.stop() }
            let w = try Self.create(app, url: receiver.url + "/hook")
            let id = w["webhook_id"]?.stringValue ?? ""
            let secret = w["secret"]?.stringValue ?? ""

            let ok = try app.request(.post, "/v1/webhooks/\(id)/ping")
            #expect(ok.status == 200, "\(ok.text)")
            #expect(ok.json?["ok"] == .bool(true))
            #expect(ok.json?["status_code"] == .int(204))
            #expect(ok.json?["error"] == .null)
            #expect(ok.json?["duration_ms"]?.intValue != nil)
            let requests = receiver.requests
            #expect(requests.count == 1)
            let ping = try #require(requests.first)
            #expect(ping.method == "POST")
            #expect(ping.path == "/hook")
            let pingID = ping.header("webhook-id") ?? ""
            #expect(pingID.hasPrefix("ping_"))
            #expect(ping.json?["id"] == .string(pingID))
            #expect(ping.json?["type"] == .string("webhook.ping"))
            #expect(ping.json?["app_id"] == .string(app.appID))
            #expect(ping.json?["created_at"]?.intValue != nil)
            #expect(ping.json?["data"] == .object(["webhook_id": .string(id)]))
            #expect(ping.header("Parley-Event-Type") == "webhook.ping")
            #expect(ping.header("Parley-Delivery-Attempt") == "1")
            #expect(ping.header("User-Agent") == "Parley-Webhooks/1")
            Self.expectSigned(ping, by: [secret])

            // A 500 answer: ok false with its status; still 200.
            receiver.setHandler { _ in .status(500, body: "boom") }
            let bad = try app.request(.post, "/v1/webhooks/\(id)/ping")
            #expect(bad.status == 200)
            #expect(bad.json?["ok"] == .bool(false))
            #expect(bad.json?["status_code"] == .int(500))
            #expect(bad.json?["error"]?.stringValue != nil)

            // Both are ping deliveries, newest first; the failures do not count.
            Self.drain(server)
            let pings = try Self.deliveries(app, id, "kind=ping")
            #expect(pings.map { $0["status"] } == [.string("dead"), .string("succeeded")])
            #expect(pings.last?["event_id"] == .string(pingID))
            #expect(pings.last?["event_type"] == .string("webhook.ping"))
            #expect(pings.first?["last_status_code"] == .int(500))
            #expect(pings.first?["response_excerpt"] == .string("boom"))
            #expect(Set(pings.first?.objectValue?.keys ?? []) == Self.deliveryKeys)
            #expect(try app.request(.get, "/v1/webhooks/\(id)").json?["consecutive_failures"] == .int(0))
            #expect(try app.events(query: "types=webhook.*").isEmpty, "pings are not written to the log")

            // A ping delivery cannot be retried.
            let pingDelivery = pings.last?["delivery_id"]?.stringValue ?? ""
            Self.expectProblem(try app.request(.post, "/v1/webhooks/\(id)/deliveries/\(pingDelivery)/retry"), 409, .conflict)

            // Nobody listening: ok false without a status.
            let closed = try Self.receiver()
            let closedURL = closed.url
            closed.stop()
            #expect(try app.request(.patch, "/v1/webhooks/\(id)", json: "{\"url\":\"\(closedURL)\"}").status == 200)
            let refused = try app.request(.post, "/v1/webhooks/\(id)/ping")
            #expect(refused.status == 200)
            #expect(refused.json?["ok"] == .bool(false))
            #expect(refused.json?["status_code"] == .null)
            #expect(refused.json?["error"]?.stringValue?.isEmpty == false)
        }
    }

    // MARK: - Destinations

    @Test func httpsReceiverIsTrustedThroughTheConfiguredCA() throws {
        let receiver = try TestReceiver(tls: true) { _ in .status(204) }
        defer { receiver.stop() }
        let server = try TestServer.start(configure: {
            $0.webhookAllowPrivate = true
            $0.webhookCAFile = receiver.caFile
        })
        defer { server.stop() }
        let app = try server.createApp()
        #expect(receiver.url.hasPrefix("https://"))
        let w = try Self.create(app, url: receiver.url + "/hook")
        let id = w["webhook_id"]?.stringValue ?? ""
        let secret = w["secret"]?.stringValue ?? ""

        try app.createUser("u1")
        Self.drain(server)
        let requests = receiver.requests
        #expect(requests.count == 1)
        let request = try #require(requests.first)
        #expect(request.path == "/hook")
        #expect(request.header("Parley-Event-Type") == "user.created")
        #expect(request.json?["data"]?["user"]?["user_id"] == .string("u1"))
        Self.expectSigned(request, by: [secret])
        let delivery = try #require(try Self.deliveries(app, id).first)
        #expect(delivery["status"] == .string("succeeded"))
        #expect(delivery["last_status_code"] == .int(204))
        #expect(try app.request(.post, "/v1/webhooks/\(id)/ping").json?["ok"] == .bool(true))
    }

    @Test func privateDestinationsAreRefusedByDefault() throws {
        let receiver = try Self.receiver()
        defer { receiver.stop() }
        try withApp { server, app in
            // The URL is accepted (the check is made when connecting: a name may resolve elsewhere later).
            let w = try Self.create(app, url: receiver.url + "/hook")
            let id = w["webhook_id"]?.stringValue ?? ""
            let refusal = "private or special-purpose range"

            let ping = try app.request(.post, "/v1/webhooks/\(id)/ping")
            #expect(ping.status == 200, "\(ping.text)")
            #expect(ping.json?["ok"] == .bool(false))
            #expect(ping.json?["status_code"] == .null)
            let pingError = ping.json?["error"]?.stringValue ?? ""
            #expect(pingError.contains(refusal), "\(pingError)")

            try app.createUser("u1")
            Self.drain(server)
            let delivery = try #require(try Self.deliveries(app, id, "kind=after").first)
            #expect(delivery["status"] == .string("failed"))
            #expect(delivery["attempts"] == .int(1))
            #expect(delivery["last_status_code"] == .null)
            let lastError = delivery["last_error"]?.stringValue ?? ""
            #expect(lastError.contains(refusal), "\(lastError)")
            #expect(receiver.requests.isEmpty, "the loopback receiver was never reached")
        }
    }

    // MARK: - After-event deliveries

    @Test func afterEventDeliveryEndToEnd() throws {
        try withApp(configure: { $0.webhookAllowPrivate = true }) { server, app in
            let receiver = try Self.receiver()
            defer { receiver.stop() }
            let w = try Self.create(app, url: receiver.url + "/hook")
            let id = w["webhook_id"]?.stringValue ?? ""
            let secret = w["secret"]?.stringValue ?? ""

            let before = Int64(Date().timeIntervalSince1970)
            try app.createUser("u1", name: "Änne ✓")
            Self.drain(server)
            let after = Int64(Date().timeIntervalSince1970)
            let requests = receiver.requests
            #expect(requests.count == 1)
            let request = try #require(requests.first)
            let logged = try #require(try app.events(query: "types=user.created").first)
            let eventID = logged["id"]?.stringValue ?? ""
            #expect(request.method == "POST")
            #expect(request.header("webhook-id") == eventID)
            let timestamp = Int64(request.header("webhook-timestamp") ?? "") ?? 0
            #expect(timestamp >= before && timestamp <= after + 1, "seconds, not milliseconds")
            #expect(request.header("Parley-Event-Type") == "user.created")
            #expect(request.header("Parley-Delivery-Attempt") == "1")
            #expect(request.header("User-Agent") == "Parley-Webhooks/1")
            #expect(request.header("Content-Type")?.hasPrefix("application/json") == true)
            Self.expectSigned(request, by: [secret])
            // The body is the event as the log shows it, byte for byte.
            #expect(request.json == logged)
            let log = try app.request(.get, "/v1/events/log?after=earliest&types=user.created")
            #expect(log.text.contains(String(decoding: request.body, as: UTF8.self)))

            // The delivery log.
            let listed = try Self.deliveries(app, id)
            #expect(listed.count == 1)
            let d = try #require(listed.first)
            #expect(Set(d.objectValue?.keys ?? []) == Self.deliveryKeys)
            #expect(d["webhook_id"] == .string(id))
            #expect(d["kind"] == .string("after"))
            #expect(d["event_id"] == .string(eventID))
            #expect(d["hook_call_id"] == .null)
            #expect(d["event_type"] == .string("user.created"))
            #expect(d["status"] == .string("succeeded"))
            #expect(d["attempts"] == .int(1))
            #expect(d["last_status_code"] == .int(204))
            #expect(d["last_error"] == .null)
            #expect(d["decision"] == .null)
            let deliveryID = d["delivery_id"]?.stringValue ?? ""
            let one = try app.request(.get, "/v1/webhooks/\(id)/deliveries/\(deliveryID)")
            #expect(one.status == 200)
            let attempts = one.json?["attempts"]?.arrayValue ?? []
            #expect(attempts.count == 1)
            #expect(Set(attempts.first?.objectValue?.keys ?? []) == ["at", "status_code", "error", "duration_ms"])
            #expect(attempts.first?["status_code"] == .int(204))
            #expect(attempts.first?["error"] == .null)

            // A second event type, and the filters.
            #expect(try app.request(.patch, "/v1/users/u1", json: #"{"name":"Anne"}"#).status == 200)
            Self.drain(server)
            #expect(receiver.requests.count == 2)
            #expect(try Self.deliveries(app, id).map { $0["event_type"] } == [.string("user.updated"), .string("user.created")])
            #expect(try Self.deliveries(app, id, "event_type=user.created").map { $0["delivery_id"] } == [.string(deliveryID)])
            #expect(try Self.deliveries(app, id, "status=succeeded").count == 2)
            #expect(try Self.deliveries(app, id, "status=pending").isEmpty)
            #expect(try Self.deliveries(app, id, "kind=after").count == 2)
            #expect(try Self.deliveries(app, id, "kind=ping").isEmpty)
            let page = try app.request(.get, "/v1/webhooks/\(id)/deliveries?limit=1")
            let cursor = page.json?["next_cursor"]?.stringValue ?? ""
            let rest = try Self.deliveries(app, id, "limit=1&cursor=\(cursor)")
            #expect(rest.map { $0["delivery_id"] } == [.string(deliveryID)])
            Self.expectInvalid(try app.request(.get, "/v1/webhooks/\(id)/deliveries?status=nope"), field: "status")
            Self.expectInvalid(try app.request(.get, "/v1/webhooks/\(id)/deliveries?kind=nope"), field: "kind")

            // An event type the endpoint does not select creates no delivery.
            #expect(try app.request(.patch, "/v1/settings", json: #"{"revoke_window_s":60}"#).status == 200)
            Self.drain(server)
            #expect(try Self.deliveries(app, id).count == 2)
            #expect(receiver.requests.count == 2)

            // Retry of a succeeded delivery: 202 pending, then the same request again as attempt 2.
            let retried = try app.request(.post, "/v1/webhooks/\(id)/deliveries/\(deliveryID)/retry")
            #expect(retried.status == 202, "\(retried.text)")
            #expect(retried.json?["status"] == .string("pending"))
            #expect(retried.json?["attempts"] == .int(1))
            Self.drain(server)
            let again = try #require(receiver.requests.last)
            #expect(receiver.requests.count == 3)
            #expect(again.header("webhook-id") == eventID)
            #expect(again.header("Parley-Delivery-Attempt") == "2")
            #expect(again.body == request.body)
            Self.expectSigned(again, by: [secret])
            let detail = try app.request(.get, "/v1/webhooks/\(id)/deliveries/\(deliveryID)").json
            #expect(detail?["status"] == .string("succeeded"))
            #expect(detail?["attempts"]?.arrayValue?.count == 2)

            // Retry of a pending delivery (held back behind a failed one of its key): 409.
            receiver.setHandler { _ in .status(500) }
            try app.createUser("u2")
            Self.drain(server)
            #expect(try app.request(.patch, "/v1/users/u2", json: #"{"name":"U2"}"#).status == 200)
            Self.drain(server)
            let all = try Self.deliveries(app, id)
            let pending = try #require(try Self.deliveries(app, id, "status=pending").first, "\(all)")
            #expect(pending["event_type"] == .string("user.updated"))
            Self.expectProblem(
                try app.request(.post, "/v1/webhooks/\(id)/deliveries/\(pending["delivery_id"]?.stringValue ?? "")/retry"), 409, .conflict)
            receiver.setHandler { _ in .status(204) }

            // Deleting the endpoint drops its deliveries.
            #expect(try app.request(.delete, "/v1/webhooks/\(id)").status == 204)
            Self.expectProblem(try app.request(.get, "/v1/webhooks/\(id)/deliveries"), 404, .notFound)
            #expect(try server.count("SELECT count(*) FROM webhook_deliveries WHERE webhook_id = $1", [id]) == 0)
        }
    }

    @Test func sendsAreDeliveredOnceEachWithTheLogsBytes() throws {
        try withApp(configure: { $0.webhookAllowPrivate = true }) { server, app in
            let receiver = try Self.receiver()
            defer { receiver.stop() }
            try app.createUser("u1")
            try app.createUser("u2")
            try app.createUser("u3")
            let id = try Self.create(app, url: receiver.url + "/hook", types: #"["message.*"]"#)["webhook_id"]?.stringValue ?? ""
            // Concurrent sends, so that the writer commits several per batch and hands them over together.
            let count = 40
            let results = Mutex<[Int]>([])
            DispatchQueue.concurrentPerform(iterations: count) { i in
                let (from, to) = i % 3 == 0 ? ("u1", "u2") : (i % 3 == 1 ? ("u2", "u3") : ("u3", "u1"))
                let status =
                    (try? app.request(
                        .post, "/v1/messages",
                        json: #"{"from":"\#(from)","conversation_type":"peer","to":"\#(to)","type":1,"body":{"text":"m\#(i) ✓"}}"#
                    ).status) ?? 0
                results.withLock { $0.append(status) }
            }
            #expect(results.withLock { $0 }.allSatisfy { $0 == 201 })
            Self.drain(server)
            let requests = receiver.requests
            let logged = try app.request(.get, "/v1/events/log?after=earliest&types=message.sent&limit=100")
            let events = logged.json?["items"]?.arrayValue ?? []
            #expect(events.count == count)
            #expect(requests.count == count, "each send delivered once")
            #expect(Set(requests.compactMap { $0.header("webhook-id") }) == Set(events.compactMap { $0["id"]?.stringValue }))
            for request in requests {
                #expect(logged.text.contains(String(decoding: request.body, as: UTF8.self)), "the body is the logged event, byte for byte")
            }
            // Per conversation, in event order.
            for pair in [["u1", "u2"], ["u2", "u3"], ["u1", "u3"]] {
                let ids = requests.filter {
                    let from = $0.json?["data"]?["message"]?["from"]?.stringValue ?? ""
                    let to = $0.json?["data"]?["message"]?["to"]?.stringValue ?? ""
                    return Set([from, to]) == Set(pair)
                }.compactMap { $0.header("webhook-id").flatMap { Int64($0) } }
                #expect(ids == ids.sorted(), "\(pair): \(ids)")
            }
            let listed = try Self.deliveries(app, id, "limit=100")
            #expect(listed.count == count)
            #expect(listed.allSatisfy { $0["status"] == .string("succeeded") && $0["attempts"] == .int(1) })
        }
    }

    @Test func orderingHoldsBackLaterEventsWithTheSameKey() throws {
        try withApp(testClock: true, configure: { $0.webhookAllowPrivate = true }) { server, app in
            let receiver = try Self.receiver()
            defer { receiver.stop() }
            let w = try Self.create(app, url: receiver.url + "/hook")
            let id = w["webhook_id"]?.stringValue ?? ""

            // user.created of u1 fails; user.updated of u1 (same key user:u1) waits behind it; u2's key is independent.
            receiver.setHandler { _ in .status(503) }
            try app.createUser("u1")
            Self.drain(server)
            #expect(try app.request(.patch, "/v1/users/u1", json: #"{"name":"U1"}"#).status == 200)
            receiver.setHandler { _ in .status(204) }
            try app.createUser("u2")
            Self.drain(server)
            let seen = receiver.requests.map { "\($0.header("Parley-Event-Type") ?? "") \($0.json?["data"]?["user"]?["user_id"]?.stringValue ?? "")" }
            #expect(seen == ["user.created u1", "user.created u2"], "user.updated u1 is held back by the failed user.created u1")
            #expect(try Self.deliveries(app, id, "status=pending").map { $0["event_type"] } == [.string("user.updated")])
            #expect(try Self.deliveries(app, id, "status=failed").map { $0["event_type"] } == [.string("user.created")])

            // Once the retry is due (5 s × [0.8, 1.2]) the first succeeds, then the second follows.
            try server.advanceClock(ms: 6500)
            Self.drain(server)
            let order = receiver.requests.dropFirst(2).map { $0.header("Parley-Event-Type") ?? "" }
            #expect(order == ["user.created", "user.updated"])
            #expect(receiver.requests[2].header("Parley-Delivery-Attempt") == "2")
            #expect(try Self.deliveries(app, id, "status=succeeded").count == 3)
        }
    }

    @Test func autoDisableAfterConsecutiveFailuresAndRetryOfADeadDelivery() throws {
        try withApp(testClock: true, configure: { $0.webhookAllowPrivate = true }) { server, app in
            let receiver = try Self.receiver()
            defer { receiver.stop() }
            let watcher = try Self.receiver()
            defer { watcher.stop() }
            receiver.setHandler { _ in .status(500) }
            let w = try Self.create(app, url: receiver.url + "/hook", ",\"disable_after_failures\":2,\"disable_after_s\":0")
            let id = w["webhook_id"]?.stringValue ?? ""
            let watching = try Self.create(app, url: watcher.url + "/hook", types: #"["webhook.*"]"#)
            let watchingID = watching["webhook_id"]?.stringValue ?? ""

            try app.createUser("u1")
            Self.drain(server)
            #expect(try app.request(.get, "/v1/webhooks/\(id)").json?["consecutive_failures"] == .int(1))
            try server.advanceClock(ms: 6500)
            Self.drain(server)
            let disabled = try app.request(.get, "/v1/webhooks/\(id)").json
            #expect(disabled?["enabled"] == .bool(false))
            #expect(disabled?["disabled_reason"] == .string("consecutive_failures"))
            #expect(disabled?["consecutive_failures"] == .int(2))
            let events = try app.events(query: "types=webhook.disabled")
            #expect(events.count == 1)
            #expect(events.first?["data"] == .object(["webhook_id": .string(id), "reason": .string("consecutive_failures")]))
            // The event reaches the other endpoint (it is sequenced after the round that disabled the endpoint, so its
            // delivery goes out in a later round); the disabled one's delivery keeps its status and is not attempted.
            Self.drain(server)
            #expect(watcher.requests.map { $0.header("Parley-Event-Type") } == ["webhook.disabled"])
            #expect(try Self.deliveries(app, watchingID).first?["event_type"] == .string("webhook.disabled"))
            let paused = try #require(try Self.deliveries(app, id).first)
            #expect(paused["status"] == .string("failed"))
            #expect(paused["attempts"] == .int(2))
            try server.advanceClock(ms: 3_600_000)
            Self.drain(server)
            #expect(receiver.requests.count == 2)

            // Re-enabled with a high limit, the delivery resumes and fails until it is dead after the 11th attempt.
            let on = try app.request(.patch, "/v1/webhooks/\(id)", json: #"{"enabled":true,"disable_after_failures":1000}"#)
            #expect(on.json?["consecutive_failures"] == .int(0))
            for _ in 0..<10 {
                try server.advanceClock(ms: 10 * 3_600_000)
                Self.drain(server)
            }
            #expect(receiver.requests.count == 11)
            let dead = try #require(try Self.deliveries(app, id).first)
            #expect(dead["status"] == .string("dead"))
            #expect(dead["attempts"] == .int(11))
            #expect(dead["next_attempt_at"] == .null)

            // A retried dead delivery gets one more attempt.
            receiver.setHandler { _ in .status(200, body: "thanks") }
            let deliveryID = dead["delivery_id"]?.stringValue ?? ""
            let retried = try app.request(.post, "/v1/webhooks/\(id)/deliveries/\(deliveryID)/retry")
            #expect(retried.status == 202, "\(retried.text)")
            Self.drain(server)
            #expect(receiver.requests.last?.header("Parley-Delivery-Attempt") == "12")
            let done = try app.request(.get, "/v1/webhooks/\(id)/deliveries/\(deliveryID)").json
            #expect(done?["status"] == .string("succeeded"))
            #expect(done?["response_excerpt"] == .string("thanks"))
            #expect(done?["attempts"]?.arrayValue?.count == 12)
        }
    }

    @Test func rotationSignsWithBothSecretsNewFirst() throws {
        try withApp(configure: { $0.webhookAllowPrivate = true }) { server, app in
            let receiver = try Self.receiver()
            defer { receiver.stop() }
            let old = "whsec_" + Crypto.base64Encode(Crypto.randomBytes(32))
            let w = try Self.create(app, url: receiver.url + "/hook", ",\"secret\":\"\(old)\"")
            let id = w["webhook_id"]?.stringValue ?? ""

            let rotated = try app.request(.post, "/v1/webhooks/\(id)/rotate_secret")
            #expect(rotated.status == 200, "\(rotated.text)")
            let new = rotated.json?["secret"]?.stringValue ?? ""
            #expect(new.hasPrefix("whsec_") && new != old)
            #expect(try app.request(.get, "/v1/webhooks/\(id)").json?["secret"] == .string(new))
            #expect(try app.request(.get, "/v1/webhooks").json?["items"]?[0]?["secret"] == .string(new))

            try app.createUser("u1")
            Self.drain(server)
            let request = try #require(receiver.requests.first)
            #expect(Self.signatures(request).count == 2)
            Self.expectSigned(request, by: [new, old])

            // A given secret on a second rotation: the previous (generated) one is the second signature now.
            let given = "whsec_" + Crypto.base64Encode(Crypto.randomBytes(64))
            let second = try app.request(.post, "/v1/webhooks/\(id)/rotate_secret", json: "{\"secret\":\"\(given)\"}")
            #expect(second.json?["secret"] == .string(given))
            Self.expectInvalid(try app.request(.post, "/v1/webhooks/\(id)/rotate_secret", json: #"{"secret":"whsec_"}"#), field: "body.secret")
            #expect(try app.request(.post, "/v1/webhooks/\(id)/ping").json?["ok"] == .bool(true))
            Self.expectSigned(try #require(receiver.requests.last), by: [given, new])
        }
    }

    /// Deliveries for a Standard Webhooks implementation other than ours: with `PARLEY_WEBHOOK_CAPTURE=<path>`, the
    /// captured requests (headers, exact body bytes, the secrets in signing order) are written there as JSON for
    /// `scripts/verify-webhooks.py` (CI runs it with the `standardwebhooks` package).
    @Test func standardWebhooksCapture() throws {
        try withApp(configure: { $0.webhookAllowPrivate = true }) { server, app in
            let receiver = try Self.receiver()
            defer { receiver.stop() }
            let w = try Self.create(app, url: receiver.url + "/hook", types: #"["user.*","message.sent"]"#)
            let id = w["webhook_id"]?.stringValue ?? ""
            let first = w["secret"]?.stringValue ?? ""
            var captured: [(request: TestReceiver.Received, secrets: [String])] = []

            try app.createUser("u1", name: "Zoë \\\"quoted\\\" 😀")
            #expect(try app.request(.patch, "/v1/users/u1", json: #"{"extended_data":"{\"a\":[1,2]}"}"#).status == 200)
            #expect(try app.request(.post, "/v1/webhooks/\(id)/ping").json?["ok"] == .bool(true))
            Self.drain(server)
            captured += receiver.requests.map { ($0, [first]) }
            #expect(captured.count == 3)

            let second = try app.request(.post, "/v1/webhooks/\(id)/rotate_secret").json?["secret"]?.stringValue ?? ""
            let seen = receiver.requests.count
            try app.createUser("u2")
            // A send's delivery is rendered from memory, not from the log: the same checks hold.
            let sent = try app.request(
                .post, "/v1/messages", json: #"{"from":"u1","conversation_type":"peer","to":"u2","type":1,"body":{"text":"Zoë \"q\" 😀\n"}}"#)
            #expect(sent.status == 201, "\(sent.text)")
            Self.drain(server)
            captured += receiver.requests.dropFirst(seen).map { ($0, [second, first]) }
            #expect(captured.count == 5)
            for (request, secrets) in captured { Self.expectSigned(request, by: secrets) }

            guard let path = ProcessInfo.processInfo.environment["PARLEY_WEBHOOK_CAPTURE"], !path.isEmpty else { return }
            var items: [RawJSON] = []
            for (request, secrets) in captured {
                var headers = JSONObjectWriter()
                for (name, value) in request.headers { headers[name.lowercased()] = value }
                var o = JSONObjectWriter()
                o["secrets"] = secrets
                o.raw("headers", headers.finish())
                o["body_base64"] = Crypto.base64Encode(request.body)
                items.append(RawJSON(o.finish()))
            }
            var file = JSONObjectWriter()
            file["deliveries"] = items
            try Data(file.finish()).write(to: URL(fileURLWithPath: path))
        }
    }
}
