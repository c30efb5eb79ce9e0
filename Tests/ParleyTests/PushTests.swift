import Foundation
import ParleyHTTP
import ParleyPostgres
import ParleyTesting
import Synchronization
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains

/// The push bridge (docs/push.md) end to end against a loopback gateway: each step of the push decision, the Matrix
/// and generic bodies field by field, rejected keys pruned, retries then `failed`, revoke and call pushes, a
/// 5,000-member group, application and broadcast pushes, the dry run and the attempt log.
@Suite("Push bridge", .inProcess)
struct PushTests: ProblemAssertions {
    /// A server whose push gateway may be on loopback (refused by default), with the test clock.
    static func server() throws -> TestServer {
        try TestServer.start(testClock: true) { $0.webhookAllowPrivate = true }
    }

    // MARK: - Push decisions (docs/push.md#what-is-pushed-to-whom)

    @Test func aStoredPeerMessageIsPushedToTheRecipientsDevicesInMatrixFormat() throws {
        try PushFixtures.withScene { server, app, gateway in
            let device = try PushFixtures.device(app, "bob", key: "key-bob-1")
            try PushFixtures.device(app, "alice", key: "key-alice-1")
            try PushFixtures.configure(app, gateway)
            let message = try PushFixtures.send(app, extra: #","push":{"payload":"deep://link","sound":"ding.caf","resources_id":"res1"}"#)
            PushFixtures.drain(server)
            #expect(gateway.requests.count == 1, "one request, for bob (never the sender)")
            let request = try #require(gateway.requests.first)
            #expect(request.method == "POST")
            #expect(request.path == "/_matrix/push/v1/notify")
            let n = try #require(request.json?["notification"])
            #expect(n["event_id"] == message["message_id"])
            #expect(n["room_id"] == .string("peer:alice"))
            #expect(n["type"] == .string("parley.message"))
            #expect(n["sender"] == .string("alice"))
            #expect(n["sender_display_name"] == .string("Alice"))
            #expect(n["room_name"] == .string("Alice"))
            #expect(n["prio"] == .string("high"))
            #expect(n["counts"] == nil, "no counts without enable_badge")
            let content = try #require(n["content"])
            #expect(content["kind"] == .string("message"))
            #expect(content["title"] == .string("Alice"), "title defaults to the sender's name")
            #expect(content["body"] == .string("hello there"))
            #expect(content["payload"] == .string("deep://link"))
            #expect(content["message_type"] == .int(1))
            #expect(content["seq"] == .int(1))
            #expect(content["sound"] == .string("ding.caf"))
            #expect(content["badge_increment"] == .int(1))
            #expect(content["resources_id"] == .string("res1"))
            let devices = try #require(n["devices"]?.arrayValue)
            #expect(devices.count == 1)
            #expect(devices[0]["app_id"] == .string("com.example"))
            #expect(devices[0]["pushkey"] == .string("key-bob-1"))
            #expect(devices[0]["pushkey_ts"] == .int((device["updated_at"]?.intValue ?? 0) / 1000), "updated_at in whole seconds")
            #expect(devices[0]["data"]?["device_id"] == device["device_id"])
            #expect(devices[0]["data"]?["provider"] == .string("fcm"))
            #expect(devices[0]["data"]?["platform"] == .string("android"))
            #expect(devices[0]["data"]?["voip"] == .bool(false))
            #expect(devices[0]["data"]?["apptype"] == .int(1))
            #expect(devices[0]["tweaks"]?["sound"] == .string("ding.caf"))

            let attempts = try PushFixtures.attempts(app)
            #expect(attempts.count == 1)
            #expect(attempts.first?["status"] == .string("sent"))
            #expect(attempts.first?["kind"] == .string("message"))
            #expect(attempts.first?["user_id"] == .string("bob"))
            #expect(attempts.first?["message_id"] == message["message_id"])
            #expect(attempts.first?["device_ids"] == .array([device["device_id"] ?? .null]))
            #expect(attempts.first?["gateway_status"] == .int(200))
            #expect(attempts.first?["tries"] == .int(1))
            let listed = try app.request(.get, "/v1/users/bob/devices").json?["items"]?[0]
            #expect(listed?["last_push_at"]?.intValue ?? 0 > 0, "last_push_at is stamped")
        }
    }

    @Test func badgeCountsPriorityAndEventIDOnly() throws {
        try PushFixtures.withScene { server, app, gateway in
            try PushFixtures.device(app, "bob", key: "key-bob")
            try PushFixtures.configure(app, gateway)
            _ = try PushFixtures.send(app)
            _ = try PushFixtures.send(app, extra: #","priority":1,"push":{"enable_badge":true,"title":"T","content":"C"}"#)
            PushFixtures.drain(server)
            #expect(gateway.requests.count == 2)
            let badge = try #require(gateway.requests.last?.json?["notification"])
            #expect(badge["counts"]?["unread"] == .int(2), "bob's total unread just after the commit")
            #expect(badge["prio"] == .string("low"), "priority 1 is low")
            #expect(badge["content"]?["title"] == .string("T"))
            #expect(badge["content"]?["body"] == .string("C"))

            try PushFixtures.configure(app, gateway, #""event_id_only":true"#)
            let message = try PushFixtures.send(app)
            PushFixtures.drain(server)
            let n = try #require(gateway.requests.last?.json?["notification"])
            #expect(n["event_id"] == message["message_id"])
            #expect(n["content"] == nil && n["sender_display_name"] == nil && n["room_name"] == nil, "\(n)")
            #expect(n["sender"] == .string("alice"))
            #expect(n["devices"]?[0]?["data"]?["format"] == .string("event_id_only"))
        }
    }

    @Test func eachStepOfTheDecisionSuppressesWithItsReason() throws {
        try PushFixtures.withScene { server, app, gateway in
            for user in ["carol", "dave", "erin", "frank", "gina"] { try app.createUser(user) }
            try PushFixtures.device(app, "bob", key: "key-bob")

            // 1. Not configured: nothing is planned, no attempt is recorded (pushNotConfiguredPaysNothing).
            try PushFixtures.configure(app, gateway)
            var attempts: [JSONValue]

            // 2. Do not disturb (bob's conversation with alice).
            var r = try app.request(.patch, "/v1/users/bob/conversations/peer/alice", json: #"{"notification_status":"do_not_disturb"}"#)
            #expect(r.status == 200, "\(r.text)")
            _ = try PushFixtures.send(app, to: "bob", extra: #","mentions":{"user_ids":["bob"]}"#)
            // 3a. Kind: messages never go to voip devices.
            try PushFixtures.device(app, "dave", key: "key-dave-voip", voip: true)
            _ = try PushFixtures.send(app, to: "dave")
            // 3b. Online: erin has an open stream on ios, not on android.
            try PushFixtures.device(app, "erin", platform: "ios", key: "key-erin-ios")
            try PushFixtures.device(app, "erin", platform: "android", key: "key-erin-android")
            let erinToken = try app.token(for: "erin")
            let stream = try LiveStreams.open(server, "/v1/users/erin/events?platform=ios", bearer: erinToken)
            defer { stream.close() }
            _ = try OnlineStatus.status(app, "erin", until: { $0["online_status"] == .string("online") })
            _ = try PushFixtures.send(app, to: "erin")
            // 3c. Push rule: while frank is online on web, his android devices are muted.
            try PushFixtures.device(app, "frank", platform: "android", key: "key-frank")
            r = try app.request(
                .put, "/v1/users/frank/push_rule", json: #"{"online_platforms":["web"],"not_to_receive_offline_push_platforms":["android"]}"#)
            #expect(r.status == 200, "\(r.text)")
            let frankStream = try LiveStreams.open(server, "/v1/users/frank/events?platform=web", bearer: try app.token(for: "frank"))
            defer { frankStream.close() }
            _ = try OnlineStatus.status(app, "frank", until: { $0["online_status"] == .string("online") })
            _ = try PushFixtures.send(app, to: "frank")
            // push.enable false: no attempt at all.
            try PushFixtures.device(app, "gina", key: "key-gina")
            _ = try PushFixtures.send(app, to: "gina", extra: #","push":{"enable":false}"#)
            PushFixtures.drain(server)

            attempts = try PushFixtures.attempts(app)
            func latest(_ user: String) -> JSONValue? { attempts.first { $0["user_id"] == .string(user) } }
            #expect(latest("bob")?["status"] == .string("suppressed"))
            #expect(latest("bob")?["reason"] == .string("dnd"), "mentions do not override dnd")
            #expect(latest("dave")?["reason"] == .string("kind"))
            #expect(latest("erin")?["status"] == .string("sent"), "android is offline")
            #expect(latest("frank")?["reason"] == .string("push_rule"))
            #expect(latest("gina") == nil, "push.enable false pushes nothing")
            let erin = try #require(gateway.requests.first { $0.text.contains("key-erin") })
            #expect(erin.text.contains("key-erin-android") && !erin.text.contains("key-erin-ios"), "only the offline platform")
            #expect(gateway.requests.count == 1, "\(gateway.requests.map(\.text))")
        }
    }

    // MARK: - Push not configured

    /// With `push.enabled` false or no `gateway_url` nothing is planned and no attempt is recorded, for messages,
    /// calls and revokes alike; the dry run still says `not_configured` per device, and `/metrics` counts the
    /// pushable messages in `parley_push_skipped_total`.
    @Test func pushNotConfiguredPaysNothing() throws {
        try PushFixtures.withScene { server, app, gateway in
            try app.createUser("carol")
            try PushFixtures.device(app, "bob", key: "key-bob")
            try PushFixtures.device(app, "carol", key: "key-carol-voip", voip: true)
            try PushFixtures.device(app, "carol", key: "key-carol")
            var r = try app.request(.post, "/v1/groups", json: #"{"group_id":"g","operator":"alice","members":["bob","carol"]}"#)
            #expect(r.status == 201, "\(r.text)")
            let peer = try PushFixtures.send(app, to: "bob")
            _ = try PushFixtures.send(app, to: "g", type: "group")
            _ = try PushFixtures.send(app, to: "bob", extra: #","push":{"enable":false}"#)  // not pushable: not counted
            _ = try PushFixtures.send(app, to: "bob", extra: #","online_only":true"#)  // not stored: not counted
            // Enabled without a gateway is not configured either.
            r = try app.request(.patch, "/v1/settings", json: #"{"push":{"enabled":true}}"#)
            #expect(r.status == 200, "\(r.text)")
            _ = try PushFixtures.send(app, to: "bob")
            r = try app.request(.post, "/v1/calls", json: #"{"caller":"alice","invitees":["bob","carol"]}"#)
            #expect(r.status == 200, "\(r.text)")
            r = try app.request(.post, "/v1/messages/\(peer["message_id"]?.stringValue ?? "")/revoke", json: #"{"operator":"alice"}"#)
            #expect(r.status == 200, "\(r.text)")
            PushFixtures.drain(server)
            #expect(try PushFixtures.attempts(app).isEmpty, "no attempt at all, not even suppressed ones")
            #expect(gateway.requests.isEmpty)
            let metrics = try server.request(.get, "/metrics").text
            #expect(metrics.contains("parley_push_skipped_total 3"), "the peer text, the group text and the last peer text")
            #expect(metrics.contains(#"parley_push_attempts_total{kind="message",status="suppressed"} 0"#))
            // The dry run still decides each device, and a real test push is refused.
            let messageID = try PushFixtures.send(app, to: "bob")["message_id"]?.stringValue ?? ""
            let dry = try app.request(.post, "/v1/push/test", json: #"{"user_id":"bob","message_id":"\#(messageID)"}"#)
            #expect(dry.status == 200, "\(dry.text)")
            #expect(dry.json?["decisions"]?.arrayValue?.map { $0["reason"] } == [.string("not_configured")])
            #expect(dry.json?["request"] == .null)
            Self.expectProblem(
                try app.request(.post, "/v1/push/test", json: #"{"user_id":"bob","message_id":"\#(messageID)","dry_run":false}"#), 422,
                .pushNotConfigured)
            PushFixtures.drain(server)
            #expect(try PushFixtures.attempts(app).isEmpty)
        }
    }

    /// Turning push on starts with the events written after the change: what was sent while push was off is never
    /// pushed later, and neither is what was sent while it was off again.
    @Test func turningPushOnDoesNotPushOlderMessages() throws {
        try PushFixtures.withScene { server, app, gateway in
            try PushFixtures.device(app, "bob", key: "key-bob")
            for _ in 0..<3 { _ = try PushFixtures.send(app) }
            PushFixtures.drain(server)
            try PushFixtures.configure(app, gateway)
            PushFixtures.drain(server)
            #expect(gateway.requests.isEmpty, "\(gateway.requests.map(\.text))")
            let first = try PushFixtures.send(app)
            PushFixtures.drain(server)
            #expect(gateway.requests.compactMap { $0.json?["notification"]?["event_id"] } == [first["message_id"] ?? .null])
            // Off, a send, on again: only the send after the second change is pushed.
            var r = try app.request(.patch, "/v1/settings", json: #"{"push":{"enabled":false}}"#)
            #expect(r.status == 200, "\(r.text)")
            _ = try PushFixtures.send(app)
            PushFixtures.drain(server)
            r = try app.request(.patch, "/v1/settings", json: #"{"push":{"gateway_url":null}}"#)
            #expect(r.status == 200, "\(r.text)")
            r = try app.request(.patch, "/v1/settings", json: #"{"push":{"enabled":true}}"#)
            #expect(r.status == 200, "\(r.text)")
            _ = try PushFixtures.send(app)
            PushFixtures.drain(server)
            #expect(gateway.requests.count == 1, "enabled without a gateway is still off")
            try PushFixtures.configure(app, gateway)
            let second = try PushFixtures.send(app)
            PushFixtures.drain(server)
            #expect(
                gateway.requests.compactMap { $0.json?["notification"]?["event_id"] } == [
                    first["message_id"] ?? .null, second["message_id"] ?? .null,
                ])
            #expect(try PushFixtures.attempts(app).count == 2)
        }
    }

    // MARK: - Gateway answers

    @Test func rejectedKeysAreDeletedWithDeviceRemoved() throws {
        try PushFixtures.withScene(answering: { _ in .status(200, body: #"{"rejected":["key-dead"]}"#) }) { server, app, gateway in
            let dead = try PushFixtures.device(app, "bob", platform: "android", key: "key-dead")
            try PushFixtures.device(app, "bob", platform: "ios", key: "key-live")
            try PushFixtures.configure(app, gateway)
            _ = try PushFixtures.send(app)
            PushFixtures.drain(server)
            let attempt = try #require(try PushFixtures.attempts(app).first)
            #expect(attempt["status"] == .string("sent"), "one of two candidates was rejected")
            #expect(attempt["rejected_push_keys"] == .array([.string("key-dead")]))
            let devices = try app.request(.get, "/v1/users/bob/devices").json?["items"]?.arrayValue ?? []
            #expect(devices.map { $0["push_key"] } == [.string("key-live")])
            var removed: [JSONValue] = []
            try eventually(timeout: .milliseconds(2_500), every: .milliseconds(50)) {
                removed = try app.events(query: "types=device.removed")
                return !removed.isEmpty
            }
            #expect(removed.first?["data"]?["device_id"] == dead["device_id"])
            #expect(removed.first?["data"]?["reason"] == .string("rejected"))

            // The next push no longer uses the key; a push whose every key is rejected ends `rejected`.
            let only = try PushFixtures.gateway { _ in .status(200, body: #"{"rejected":["key-live"]}"#) }
            defer { only.stop() }
            try PushFixtures.configure(app, only)
            _ = try PushFixtures.send(app)
            PushFixtures.drain(server)
            #expect(only.requests.count == 1)
            #expect(!(only.requests.first?.text.contains("key-dead") ?? true))
            #expect(try PushFixtures.attempts(app).first?["status"] == .string("rejected"))
        }
    }

    @Test func serverErrorsAreRetriedOnTheClockThenFail() throws {
        try PushFixtures.withScene(answering: { _ in .status(503) }) { server, app, gateway in
            try PushFixtures.device(app, "bob", key: "key-bob")
            try PushFixtures.configure(app, gateway, #""max_attempts":3"#)
            let message = try PushFixtures.send(app)
            PushFixtures.drain(server)
            var attempt = try #require(try PushFixtures.attempts(app).first)
            #expect(attempt["status"] == .string("pending"))
            #expect(attempt["tries"] == .int(1))
            #expect(attempt["gateway_status"] == .int(503))
            try server.advanceClock(ms: 1000)
            PushFixtures.drain(server)
            attempt = try #require(try PushFixtures.attempts(app).first)
            #expect(attempt["tries"] == .int(2), "retried after 1 s")
            // The test clock also moves with real time: a margin of half a second either way.
            try server.advanceClock(ms: 1500)
            PushFixtures.drain(server)
            #expect(try PushFixtures.attempts(app).first?["tries"] == .int(2), "the third try waits 2 s")
            try server.advanceClock(ms: 600)
            PushFixtures.drain(server)
            attempt = try #require(try PushFixtures.attempts(app).first)
            #expect(attempt["tries"] == .int(3))
            #expect(attempt["status"] == .string("failed"), "\(attempt)")
            #expect(gateway.requests.count == 3)
            let bodies = Set(gateway.requests.map(\.text))
            #expect(bodies.count == 1, "every try sends the same body")
            #expect(try PushFixtures.attempts(app, "message_id=\(message["message_id"]?.stringValue ?? "")&status=failed").count == 1)

            // A 4xx other than success fails at once; connection refused is retried like a 5xx.
            let refusing = try PushFixtures.gateway { _ in .status(400) }
            try PushFixtures.configure(app, refusing)
            _ = try PushFixtures.send(app)
            PushFixtures.drain(server)
            #expect(try PushFixtures.attempts(app).first?["status"] == .string("failed"))
            #expect(try PushFixtures.attempts(app).first?["tries"] == .int(1))
            let closedPort = refusing.url
            refusing.stop()
            try PushFixtures.configure(app, refusing, #""max_attempts":2"#)
            _ = closedPort
            _ = try PushFixtures.send(app)
            PushFixtures.drain(server)
            attempt = try #require(try PushFixtures.attempts(app).first)
            #expect(attempt["status"] == .string("pending"), "connection refused is retried: \(attempt)")
            #expect(attempt["gateway_status"] == .null)
            try server.advanceClock(ms: 1000)
            PushFixtures.drain(server)
            attempt = try #require(try PushFixtures.attempts(app).first)
            #expect(attempt["status"] == .string("failed"))
            #expect(attempt["tries"] == .int(2))
            #expect(attempt["reason"]?.stringValue?.isEmpty == false)
        }
    }

    // MARK: - Generic format

    @Test func theGenericFormatIsSignedLikeAWebhook() throws {
        try PushFixtures.withScene { server, app, gateway in
            let device = try PushFixtures.device(app, "bob", key: "key-bob")
            try PushFixtures.configure(app, gateway, #""format":"generic","max_attempts":2"#)
            let secret = try app.request(.get, "/v1/settings").json?["push"]?["secret"]?.stringValue ?? ""
            #expect(secret.hasPrefix("whsec_"))
            let message = try PushFixtures.send(app, extra: #","push":{"enable_badge":true}"#)
            PushFixtures.drain(server)
            let request = try #require(gateway.requests.first)
            #expect(request.path == "/", "the gateway URL itself")
            let body = try #require(request.json)
            let attempt = try #require(try PushFixtures.attempts(app).first)
            #expect(body["push_id"] == attempt["attempt_id"])
            #expect(request.header("webhook-id") == attempt["attempt_id"]?.stringValue)
            #expect(body["kind"] == .string("message"))
            #expect(body["app_id"] == .string(app.appID))
            #expect(body["user_id"] == .string("bob"))
            #expect(body["created_at"]?.intValue ?? 0 > 0)
            let n = try #require(body["notification"])
            #expect(n["title"] == .string("Alice"))
            #expect(n["body"] == .string("hello there"))
            #expect(n["unread"] == .int(1))
            #expect(n["conversation_type"] == .string("peer"))
            #expect(n["conversation_id"] == .string("alice"))
            #expect(n["message_id"] == message["message_id"])
            #expect(n["message_type"] == .int(1))
            #expect(n["seq"] == .int(1))
            #expect(n["call_id"] == .null)
            #expect(body["devices"]?[0]?["device_id"] == device["device_id"])
            #expect(body["devices"]?[0]?["push_key"] == .string("key-bob"))
            let timestamp = try #require(request.header("webhook-timestamp"))
            let expected = WebhookRequest.signature(
                id: request.header("webhook-id") ?? "", timestampSeconds: Int64(timestamp) ?? 0, body: request.body, secrets: [secret])
            #expect(request.header("webhook-signature") == expected)
            Self.writeCapture([(request, secret)])
        }
    }

    /// With `PARLEY_PUSH_CAPTURE=<path>`, a generic push request is written there for `scripts/verify-webhooks.py`
    /// (CI verifies its signature with the `standardwebhooks` package), in the webhook capture's format.
    static func writeCapture(_ captured: [(TestReceiver.Received, String)]) {
        guard let path = ProcessInfo.processInfo.environment["PARLEY_PUSH_CAPTURE"], !path.isEmpty else { return }
        var items: [RawJSON] = []
        for (request, secret) in captured {
            var headers = JSONObjectWriter()
            for (name, value) in request.headers { headers[name.lowercased()] = value }
            var o = JSONObjectWriter()
            o["secrets"] = [secret]
            o.raw("headers", headers.finish())
            o["body_base64"] = Crypto.base64Encode(request.body)
            items.append(RawJSON(o.finish()))
        }
        var file = JSONObjectWriter()
        file["deliveries"] = items
        try? Data(file.finish()).write(to: URL(fileURLWithPath: path))
    }

    // MARK: - Revoke, call, application and broadcast pushes

    @Test func aRevokePushGoesToExactlyTheDevicesThatGotTheOriginal() throws {
        try PushFixtures.withScene { server, app, gateway in
            try PushFixtures.device(app, "bob", platform: "android", key: "key-android")
            try PushFixtures.device(app, "bob", platform: "ios", key: "key-ios")
            try PushFixtures.configure(app, gateway)
            let message = try PushFixtures.send(app)
            PushFixtures.drain(server)
            #expect(gateway.requests.count == 1)
            // A device registered after the push gets no revoke push.
            try PushFixtures.device(app, "bob", platform: "web", key: "key-web")
            let messageID = message["message_id"]?.stringValue ?? ""
            // Revoked through the API (docs/messages.md#revoke-edit-delete): the revoke push is decided in the revoke's
            // transaction.
            let revoked = try app.request(.post, "/v1/messages/\(messageID)/revoke", json: #"{"operator":"alice"}"#)
            #expect(revoked.status == 200, "\(revoked.text)")
            server.app.push.poke()
            PushFixtures.drain(server)
            #expect(gateway.requests.count == 2)
            let n = try #require(gateway.requests.last?.json?["notification"])
            #expect(n["type"] == .string("parley.revoke"))
            #expect(n["event_id"] == .string(messageID))
            #expect(n["room_id"] == .string("peer:alice"))
            #expect(n["content"]?["seq"] == .int(1))
            let keys = Set(n["devices"]?.arrayValue?.compactMap { $0["pushkey"]?.stringValue } ?? [])
            #expect(keys == ["key-android", "key-ios"])
            let revoke = try PushFixtures.attempts(app, "kind=revoke")
            #expect(revoke.count == 1 && revoke.first?["status"] == .string("sent"))
        }
    }

    @Test func aRevokeStopsAPushStillBeingRetried() throws {
        try PushFixtures.withScene(answering: { _ in .status(500) }) { server, app, gateway in
            try PushFixtures.device(app, "bob", key: "key-bob")
            try PushFixtures.configure(app, gateway)
            let message = try PushFixtures.send(app)
            PushFixtures.drain(server)
            let messageID = message["message_id"]?.stringValue ?? ""
            let rows = try server.app.services.pool.withConnection { db in
                try db.transaction { db in
                    try PushPlanner.revoke(appID: app.appID, messageID: messageID, push: nil, now: server.app.services.clock.now(), on: db)
                }
            }
            #expect(rows.isEmpty, "no revoke push for a push that was never sent")
            let attempt = try #require(try PushFixtures.attempts(app).first)
            #expect(attempt["status"] == .string("failed"))
            #expect(attempt["reason"] == .string("revoked"))
            try server.advanceClock(ms: 5000)
            PushFixtures.drain(server)
            #expect(gateway.requests.count == 1, "no further tries")
        }
    }

    @Test func callPushesGoToVoIPDevicesFirst() throws {
        try PushFixtures.withScene { server, app, gateway in
            try app.createUser("carol")
            try PushFixtures.device(app, "bob", platform: "ios", key: "key-bob-voip", voip: true)
            try PushFixtures.device(app, "bob", platform: "ios", key: "key-bob-apns")
            try PushFixtures.device(app, "carol", platform: "android", key: "key-carol")
            try PushFixtures.configure(app, gateway)
            try server.app.services.pool.withConnection { db in
                try db.transaction { db in
                    try PushPlanner.call(
                        kind: .call, appID: app.appID, callID: "call-1", actor: "alice", userIDs: ["alice", "bob", "carol"], push: nil,
                        now: server.app.services.clock.now(), on: db)
                }
            }
            server.app.push.poke()
            PushFixtures.drain(server)
            #expect(gateway.requests.count == 2)
            let bob = try #require(gateway.requests.first { $0.text.contains("key-bob") }?.json?["notification"])
            #expect(bob["devices"]?.arrayValue?.map { $0["pushkey"] } == [.string("key-bob-voip")], "the voip device only")
            #expect(bob["type"] == .string("parley.call"))
            #expect(bob["room_id"] == .string("call:call-1"))
            #expect(bob["event_id"] == .string("call-1"))
            #expect(bob["content"]?["call_id"] == .string("call-1"))
            #expect(bob["content"]?["title"] == .string("Alice"))
            #expect(bob["content"]?["message_type"] == .null)
            let carol = try #require(gateway.requests.first { $0.text.contains("key-carol") }?.json?["notification"])
            #expect(carol["devices"]?.arrayValue?.count == 1, "no voip device: the others")
            #expect(try PushFixtures.attempts(app, "call_id=call-1").count == 2)
        }
    }

    @Test func applicationPushesOnlyWhereTheRequestCarriesPush() throws {
        try PushFixtures.withScene { server, app, gateway in
            try app.createUser("carol")
            try PushFixtures.device(app, "alice", key: "key-alice")
            try PushFixtures.device(app, "bob", key: "key-bob")
            try PushFixtures.configure(app, gateway)
            var r = try app.request(.post, "/v1/users/alice/friend_applications", json: #"{"to":"bob","push":{"title":"Hi"}}"#)
            #expect(r.status == 201, "\(r.text)")
            let applicationID = r.json?["application_id"]?.stringValue ?? ""
            PushFixtures.drain(server)
            #expect(gateway.requests.count == 1)
            let n = try #require(gateway.requests.first?.json?["notification"])
            #expect(n["type"] == .string("parley.application"))
            #expect(n["room_id"] == .string("application:friend"))
            #expect(n["event_id"] == .string(applicationID))
            #expect(n["sender"] == .string("alice"))
            #expect(n["content"]?["title"] == .string("Hi"))
            #expect(n["devices"]?[0]?["pushkey"] == .string("key-bob"))
            // Accepted without push: nothing; an application without push: nothing.
            r = try app.request(.post, "/v1/users/bob/friend_applications/\(applicationID)/accept", json: "{}")
            #expect(r.status == 200, "\(r.text)")
            r = try app.request(.post, "/v1/users/carol/friend_applications", json: #"{"to":"bob"}"#)
            #expect(r.status == 201, "\(r.text)")
            PushFixtures.drain(server)
            #expect(gateway.requests.count == 1, "\(gateway.requests.map(\.text))")
            // A reject with push goes to the applicant.
            let carolApplication = r.json?["application_id"]?.stringValue ?? ""
            try PushFixtures.device(app, "carol", key: "key-carol")
            r = try app.request(.post, "/v1/users/bob/friend_applications/\(carolApplication)/reject", json: #"{"push":{}}"#)
            #expect(r.status == 200, "\(r.text)")
            PushFixtures.drain(server)
            #expect(gateway.requests.count == 2)
            let reject = try #require(gateway.requests.last?.json?["notification"])
            #expect(reject["sender"] == .string("bob"))
            #expect(reject["content"]?["title"] == .string("Bob"), "title defaults to the acting user's name")
            #expect(reject["devices"]?[0]?["pushkey"] == .string("key-carol"))
        }
    }

    @Test func aGroupApplicationAnswerWithPushGoesToTheApplicant() throws {
        try PushFixtures.withScene { server, app, gateway in
            let created = try app.request(
                .post, "/v1/groups", json: #"{"group_id":"club","name":"Club","operator":"alice","join_mode":"auth"}"#)
            #expect(created.status == 201, "\(created.text)")
            try PushFixtures.device(app, "bob", key: "key-bob")
            try PushFixtures.device(app, "alice", key: "key-alice")
            try PushFixtures.configure(app, gateway)
            let applied = try app.request(.post, "/v1/groups/club/join", json: #"{"user_id":"bob"}"#)
            #expect(applied.status == 202, "\(applied.text)")
            let id = applied.json?["application_id"]?.stringValue ?? ""
            let accepted = try app.request(.post, "/v1/group_applications/\(id)/accept", json: #"{"operator":"alice","push":{"content":"welcome"}}"#)
            #expect(accepted.status == 200, "\(accepted.text)")
            PushFixtures.drain(server)
            let pushes = gateway.requests.filter { $0.json?["notification"]?["type"] == .string("parley.application") }
            #expect(pushes.count == 1, "\(gateway.requests.map(\.text))")
            let n = try #require(pushes.first?.json?["notification"])
            #expect(n["room_id"] == .string("application:group"))
            #expect(n["event_id"] == .string(id))
            #expect(n["sender"] == .string("alice"))
            #expect(n["content"]?["body"] == .string("welcome"))
            #expect(n["devices"]?[0]?["pushkey"] == .string("key-bob"))
        }
    }

    @Test func aBroadcastIsPushedToEveryUserWithDevicesAndNoOpenStream() throws {
        try PushFixtures.withScene { server, app, gateway in
            try app.createUser("carol")
            try app.createUser("dave")
            try PushFixtures.device(app, "alice", key: "key-alice")
            try PushFixtures.device(app, "bob", key: "key-bob")
            try PushFixtures.device(app, "carol", platform: "web", key: "key-carol")
            try PushFixtures.configure(app, gateway)
            let stream = try LiveStreams.open(server, "/v1/users/carol/events?platform=web", bearer: try app.token(for: "carol"))
            defer { stream.close() }
            _ = try OnlineStatus.status(app, "carol", until: { $0["online_status"] == .string("online") })
            let r = try app.request(.post, "/v1/messages/broadcast", json: #"{"from":"alice","type":1,"body":{"text":"maintenance at 5"}}"#)
            #expect(r.status == 202, "\(r.text)")
            PushFixtures.drain(server)
            #expect(gateway.requests.count == 1, "bob only: alice sent it, carol is online, dave has no device")
            let n = try #require(gateway.requests.first?.json?["notification"])
            #expect(n["type"] == .string("parley.broadcast"))
            #expect(n["room_id"] == .string("broadcast"))
            #expect(n["event_id"] == r.json?["message_id"])
            #expect(n["content"]?["body"] == .string("maintenance at 5"))
            #expect(n["content"]?["message_type"] == .int(1))
            #expect(n["content"]?["seq"] == .null)
            let carol = try PushFixtures.attempts(app, "user_id=carol")
            #expect(carol.first?["reason"] == .string("online"))
        }
    }

    // MARK: - A big group

    @Test(.timeLimit(.minutes(3)))
    func aGroupMessageTo5000MembersIsOneRequestPerOfflineMemberWithDevices() throws {
        let server = try Self.server()
        defer { server.stop() }
        let app = try server.createApp(settings: #"{"max_group_members":10000}"#)
        let members = 5000
        // Users, devices (all but the last 100 members) and memberships in bulk (white box), then the group's
        // owner sends through the API.
        let now = server.app.services.clock.now()
        try app.createUser("owner", name: "Owner")
        let created = try app.request(.post, "/v1/groups", json: #"{"group_id":"big","name":"Big","operator":"owner"}"#)
        #expect(created.status == 201, "\(created.text)")
        try server.sql(
            """
            INSERT INTO users (app_id, user_id, name, created_at, updated_at)
            SELECT $1, 'm' || lpad(i::text, 5, '0'), 'Member ' || i, $2, $2 FROM generate_series(1, $3) i
            """, [app.appID, now, members])
        try server.sql(
            """
            INSERT INTO devices (app_id, user_id, device_id, platform, provider, push_key, push_app_id, created_at, updated_at)
            SELECT $1, 'm' || lpad(i::text, 5, '0'), 'dev' || i, 'android', 'fcm', 'key-' || i, 'com.example', $2, $2
            FROM generate_series(1, $3 - 100) i
            """, [app.appID, now, members])
        try server.sql(
            """
            INSERT INTO group_members (app_id, group_id, user_id, role, enter_type, joined_at, joined_event)
            SELECT $1, 'big', 'm' || lpad(i::text, 5, '0'), 3, 'joined', $2, 0 FROM generate_series(1, $3) i
            """, [app.appID, now, members])
        try server.sql("UPDATE groups SET member_count = member_count + $3 WHERE app_id = $1 AND group_id = $2", [app.appID, "big", members])
        // Three members with devices are online on their devices' platform.
        var streams: [HTTPClientStream] = []
        for user in ["m00001", "m02500", "m04900"] {
            streams.append(try LiveStreams.open(server, "/v1/users/\(user)/events?platform=android", bearer: try app.token(for: user)))
            _ = try OnlineStatus.status(app, user, until: { $0["online_status"] == .string("online") })
        }
        defer { for s in streams { s.close() } }
        let gateway = try PushFixtures.gateway()
        defer { gateway.stop() }
        try PushFixtures.configure(app, gateway)
        let r = try app.request(
            .post, "/v1/messages", json: #"{"from":"owner","conversation_type":"group","to":"big","type":1,"body":{"text":"all hands"}}"#)
        #expect(r.status == 201, "\(r.text)")
        #expect(server.app.push.drain(timeout: .seconds(120)))
        let requests = gateway.requests
        #expect(requests.count == members - 100 - 3, "one per offline member with a device")
        let keys = requests.compactMap { $0.json?["notification"]?["devices"]?[0]?["pushkey"]?.stringValue }
        #expect(Set(keys).count == keys.count, "no member twice")
        #expect(!keys.contains("key-1") && !keys.contains("key-2500") && !keys.contains("key-4900"), "not the online ones")
        #expect(requests.first?.json?["notification"]?["room_id"] == .string("group:big"))
        #expect(requests.first?.json?["notification"]?["content"]?["title"] == .string("Big"), "title defaults to the group's name")
        let online = try server.count(
            "SELECT count(*) FROM push_attempts WHERE app_id = $1 AND status = 'suppressed' AND reason = 'online'", [app.appID])
        #expect(online == 3)
    }

    @Test func twoNodesPushEachMessageOnce() throws {
        let nodeA = try TestServer.start(testClock: false) { $0.webhookAllowPrivate = true }
        defer { nodeA.stop() }
        let nodeB = try TestServer.start(testClock: false, database: nodeA.database) { $0.webhookAllowPrivate = true }
        defer { nodeB.stop() }
        let gateway = try PushFixtures.gateway { _ in TestReceiver.Answer(status: 200, body: Array(#"{"rejected":[]}"#.utf8), delayMillis: 5) }
        defer { gateway.stop() }
        let app = try PushFixtures.setUp(nodeA)
        try PushFixtures.device(app, "bob", key: "key-bob")
        try PushFixtures.configure(app, gateway)
        let count = 60
        for i in 0..<count {
            let r = try app.request(
                .post, "/v1/messages", json: #"{"from":"alice","conversation_type":"peer","to":"bob","type":1,"body":{"text":"n\#(i)"}}"#)
            #expect(r.status == 201)
            nodeB.app.push.poke()
        }
        _ = gateway.waitFor(count: count, timeout: .seconds(30))
        #expect(nodeA.app.push.drain())
        #expect(nodeB.app.push.drain())
        let ids = gateway.requests.compactMap { $0.json?["notification"]?["event_id"]?.stringValue }
        #expect(ids.count == count, "\(ids.count) requests for \(count) messages")
        #expect(Set(ids).count == count)
        #expect(try PushFixtures.attempts(app).count == count)
    }

    /// What this node's writer commits is planned from memory: none of its messages is read back from the log.
    @Test func theBridgeDoesNotReadBackWhatItsNodeWrote() throws {
        try PushFixtures.withScene { server, app, gateway in
            try PushFixtures.device(app, "bob", key: "key-bob")
            try PushFixtures.configure(app, gateway)
            PushFixtures.drain(server)
            let count = 30
            for i in 0..<count {
                let r = try app.request(
                    .post, "/v1/messages", json: #"{"from":"alice","conversation_type":"peer","to":"bob","type":1,"body":{"text":"n\#(i)"}}"#)
                #expect(r.status == 201)
            }
            PushFixtures.drain(server)
            #expect(gateway.requests.count == count)
            let taken = server.app.push.metrics.taken("message.sent")
            #expect(taken.fromLog == 0 && taken.handedOver == count, "\(taken)")
        }
    }

    /// Deleting an app while its pushes are planned and sent leaves the bridge idle, and the other apps pushed.
    @Test func deletingAnAppWhilePushingLeavesTheBridgeIdle() throws {
        let slow = try PushFixtures.gateway { _ in TestReceiver.Answer(status: 200, body: Array(#"{"rejected":[]}"#.utf8), delayMillis: 200) }
        defer { slow.stop() }
        try PushFixtures.withScene { server, app, gateway in
            let other = try PushFixtures.setUp(server)
            for a in [app, other] { try PushFixtures.device(a, "bob", key: "key-bob") }
            try PushFixtures.configure(app, slow)
            try PushFixtures.configure(other, gateway)
            for _ in 0..<5 { _ = try PushFixtures.send(app) }
            let r = try server.request(.delete, "/v1/apps/\(app.appID)", bearer: server.adminKey)
            #expect(r.status == 204, "\(r.text)")
            _ = try PushFixtures.send(other)
            PushFixtures.drain(server)
            #expect(gateway.requests.count == 1)
            #expect(try PushFixtures.attempts(other).count == 1)
        }
    }

    /// A node whose bridge stopped leaves its app to another node, which plans what the first one's writer committed
    /// from the log, once each.
    @Test func anotherNodeCatchesUpFromTheLog() throws {
        let nodeA = try TestServer.start(testClock: false) { $0.webhookAllowPrivate = true }
        defer { nodeA.stop() }
        let nodeB = try TestServer.start(testClock: false, database: nodeA.database) { $0.webhookAllowPrivate = true }
        defer { nodeB.stop() }
        let gateway = try PushFixtures.gateway()
        defer { gateway.stop() }
        let app = try PushFixtures.setUp(nodeA)
        try PushFixtures.device(app, "bob", key: "key-bob")
        try PushFixtures.configure(app, gateway)
        let before = try PushFixtures.send(app)
        #expect(nodeA.app.push.drain())
        nodeA.app.push.stop()
        var ids: [JSONValue] = []
        for _ in 0..<10 { ids.append(try PushFixtures.send(app)["message_id"] ?? .null) }
        nodeB.app.push.poke()
        _ = gateway.waitFor(count: 11, timeout: .seconds(30))
        #expect(nodeB.app.push.drain())
        let pushed = gateway.requests.compactMap { $0.json?["notification"]?["event_id"] }
        #expect(pushed.count == 11 && Set(pushed.compactMap(\.stringValue)) == Set(([before["message_id"] ?? .null] + ids).compactMap(\.stringValue)))
        #expect(nodeB.app.push.metrics.taken("message.sent").fromLog == 10)
        #expect(try PushFixtures.attempts(app).count == 11)
    }

    // MARK: - The dry run and the attempt log

    @Test func theDryRunPredictsTheRealSend() throws {
        try PushFixtures.withScene { server, app, gateway in
            try PushFixtures.device(app, "bob", platform: "android", key: "key-android")
            try PushFixtures.device(app, "bob", platform: "ios", key: "key-voip", voip: true)
            try PushFixtures.configure(app, gateway)
            let message = try PushFixtures.send(app)
            PushFixtures.drain(server)
            let messageID = message["message_id"]?.stringValue ?? ""
            let dry = try app.request(.post, "/v1/push/test", json: #"{"user_id":"bob","message_id":"\#(messageID)"}"#)
            #expect(dry.status == 200, "\(dry.text)")
            let decisions = dry.json?["decisions"]?.arrayValue ?? []
            #expect(decisions.count == 2)
            #expect(decisions.first { $0["platform"] == .string("android") }?["selected"] == .bool(true))
            #expect(decisions.first { $0["platform"] == .string("android") }?["reason"] == .null)
            #expect(decisions.first { $0["platform"] == .string("ios") }?["reason"] == .string("kind"))
            #expect(dry.json?["request"]?["url"] == .string(gateway.url + "/_matrix/push/v1/notify"))
            #expect(dry.json?["response"] == .null)
            // The body is the one the real send carried.
            let sent = try #require(gateway.requests.first?.json)
            #expect(dry.json?["request"]?["body"] == sent)
            #expect(gateway.requests.count == 1, "a dry run sends nothing")

            // An unsent message: no event id, no seq.
            let unsent = try app.request(
                .post, "/v1/push/test",
                json:
                    #"{"user_id":"bob","message":{"from":"alice","conversation_type":"peer","to":"bob","type":11,"body":{"url":"https://x.example/a.png","file_name":"a.png"}}}"#
            )
            #expect(unsent.status == 200, "\(unsent.text)")
            let n = unsent.json?["request"]?["body"]?["notification"]
            #expect(n?["event_id"] == .string(""))
            #expect(n?["content"]?["seq"] == .null)
            #expect(n?["content"]?["body"] == .string("[Image]"))

            // A real test push.
            let real = try app.request(.post, "/v1/push/test", json: #"{"user_id":"bob","message_id":"\#(messageID)","dry_run":false}"#)
            #expect(real.status == 200, "\(real.text)")
            #expect(real.json?["response"]?["status_code"] == .int(200))
            #expect(real.json?["response"]?["rejected"] == .array([]))
            #expect(gateway.requests.count == 2)
            #expect(gateway.requests.last?.json?["notification"]?["type"] == .string("parley.test"))
            let test = try PushFixtures.attempts(app, "kind=test")
            #expect(test.count == 1 && test.first?["status"] == .string("sent"))
            #expect(real.json?["attempt"]?["attempt_id"] == test.first?["attempt_id"])
            let metrics = try server.request(.get, "/metrics").text
            #expect(metrics.contains(#"parley_push_attempts_total{kind="test",status="sent"} 1"#))
            // The bridge never sends a test push a second time (it is never due for it).
            #expect(server.app.push.drain())
            #expect(gateway.requests.count == 2)
        }
    }

    @Test func testPushErrors() throws {
        let server = try Self.server()
        defer { server.stop() }
        let app = try PushFixtures.setUp(server)
        try app.createUser("carol")
        let message = try PushFixtures.send(app)
        let messageID = message["message_id"]?.stringValue ?? ""
        Self.expectProblem(try app.request(.post, "/v1/push/test", json: #"{"user_id":"nobody","message_id":"\#(messageID)"}"#), 404, .userNotFound)
        Self.expectProblem(try app.request(.post, "/v1/push/test", json: #"{"user_id":"bob","message_id":"m-missing"}"#), 404, .messageNotFound)
        Self.expectProblem(try app.request(.post, "/v1/push/test", json: #"{"user_id":"bob","call_id":"c-missing"}"#), 404, .callNotFound)
        Self.expectProblem(
            try app.request(.post, "/v1/push/test", json: #"{"user_id":"carol","message_id":"\#(messageID)"}"#), 422, .unsupportedOperation)
        Self.expectProblem(
            try app.request(.post, "/v1/push/test", json: #"{"user_id":"alice","message_id":"\#(messageID)"}"#), 422, .unsupportedOperation)
        Self.expectProblem(
            try app.request(.post, "/v1/push/test", json: #"{"user_id":"bob","message_id":"\#(messageID)","dry_run":false}"#), 422, .pushNotConfigured
        )
        Self.expectProblem(try app.request(.post, "/v1/push/test", json: #"{"user_id":"bob"}"#), 400, .invalidParams)
        Self.expectProblem(
            try app.request(.post, "/v1/push/test", json: #"{"user_id":"bob","message_id":"\#(messageID)","call_id":"c1"}"#), 400, .invalidParams)
        // A message the bridge would not push, and a send body `user_id` would not receive.
        let silent = try PushFixtures.send(app, extra: #","push":{"enable":false}"#)["message_id"]?.stringValue ?? ""
        Self.expectProblem(try app.request(.post, "/v1/push/test", json: #"{"user_id":"bob","message_id":"\#(silent)"}"#), 422, .unsupportedOperation)
        let unsent = #"{"from":"alice","conversation_type":"peer","to":"bob","type":1,"body":{"text":"x"}}"#
        Self.expectProblem(try app.request(.post, "/v1/push/test", json: #"{"user_id":"carol","message":\#(unsent)}"#), 422, .unsupportedOperation)
        let noFrom = try app.request(
            .post, "/v1/push/test", json: #"{"user_id":"bob","message":{"conversation_type":"peer","to":"bob","type":1,"body":{"text":"x"}}}"#)
        Self.expectProblem(noFrom, 400, .invalidParams)
        #expect(noFrom.json?["errors"]?[0]?["field"] == .string("body.message.from"), "\(noFrom.text)")
        Self.expectProblem(try app.request(.get, "/v1/push/attempts/pa_missing"), 404, .notFound)
        Self.expectProblem(try app.request(.get, "/v1/push/attempts?status=lost"), 400, .invalidParams)
        // Not configured, dry run: every device says so, and nothing would be sent.
        try PushFixtures.device(app, "bob", key: "key-bob")
        let dry = try app.request(.post, "/v1/push/test", json: #"{"user_id":"bob","message_id":"\#(messageID)"}"#)
        #expect(dry.json?["decisions"]?[0]?["reason"] == .string("not_configured"))
        #expect(dry.json?["request"] == .null)
    }

    @Test func theAttemptLogPagesFiltersAndExpires() throws {
        let server = try Self.server()
        defer { server.stop() }
        let app = try PushFixtures.setUp(server)
        let gateway = try PushFixtures.gateway()
        defer { gateway.stop() }
        try PushFixtures.device(app, "bob", key: "key-bob")
        try PushFixtures.configure(app, gateway)
        for _ in 0..<5 { _ = try PushFixtures.send(app) }
        PushFixtures.drain(server)
        var seen: [String] = []
        var cursor: String?
        repeat {
            let r = try app.request(.get, "/v1/push/attempts?limit=2\(cursor.map { "&cursor=" + $0 } ?? "")")
            #expect(r.status == 200, "\(r.text)")
            seen += r.json?["items"]?.arrayValue?.compactMap { $0["attempt_id"]?.stringValue } ?? []
            cursor = r.json?["next_cursor"]?.stringValue
        } while cursor != nil
        #expect(seen.count == 5)
        #expect(seen == seen.sorted(by: >), "newest first")
        let one = try app.request(.get, "/v1/push/attempts/\(seen[0])")
        #expect(one.status == 200 && one.json?["attempt_id"] == .string(seen[0]))
        #expect(try PushFixtures.attempts(app, "user_id=alice").isEmpty)
        #expect(try PushFixtures.attempts(app, "status=sent&kind=message").count == 5)
        #expect(try PushFixtures.attempts(app, "status=suppressed").isEmpty)
        // Another app sees none of them.
        let other = try server.createApp()
        #expect(try other.request(.get, "/v1/push/attempts/\(seen[0])").status == 404)
        // Kept 7 days.
        try server.advanceClock(ms: 7 * 86_400_000 + 1000)
        #expect(try PushFixtures.attempts(app).isEmpty)
        let stats = try app.request(.get, "/v1/stats").json
        #expect(stats?["push_sent_24h"] == .int(0))
    }

    @Test func readinessNeedsTheBridgeRunning() throws {
        let server = try Self.server()
        defer { server.stop() }
        #expect(try server.request(.get, "/readyz").status == 200)
        server.app.push.stop()
        let r = try server.request(.get, "/readyz")
        Self.expectProblem(r, 503, .unavailable)
        #expect(r.json?["detail"]?.stringValue?.contains("push") == true, "\(r.text)")
    }

    @Test func metricsCountPushes() throws {
        try PushFixtures.withScene { server, app, gateway in
            try PushFixtures.device(app, "bob", key: "key-bob")
            try PushFixtures.configure(app, gateway)
            _ = try PushFixtures.send(app)
            PushFixtures.drain(server)
            let text = try server.request(.get, "/metrics").text
            #expect(text.contains(#"parley_push_attempts_total{kind="message",status="sent"} 1"#), "\(text)")
            #expect(text.contains("parley_push_gateway_duration_seconds_count 1"))
            #expect(text.contains("parley_push_queue_depth 0"))
            #expect(try app.request(.get, "/v1/stats").json?["push_sent_24h"] == .int(1))
        }
    }
}
