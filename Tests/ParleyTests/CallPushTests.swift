import Foundation
import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains

/// Call pushes (docs/calls.md#how-a-call-ends, docs/push.md#what-is-pushed-to-whom) end to end over HTTP against a
/// loopback gateway: `call` on create and invite-more to the new invitees (their `voip` devices when they have any),
/// `call_cancel` on cancel to the invitees it cancelled and on quit or end with `push` to the others pending or
/// accepted before, nothing on answers and timers, and the dry run of `POST /v1/push/test` with `call_id`.
@Suite("Call pushes", .inProcess)
struct CallPushTests: GroupTestSupport {
    /// A server with the test clock, an app whose push bridge points at a fresh gateway, and `users` (id → name).
    static func withScene(_ users: [(String, String)], _ body: (TestServer, TestApp, TestReceiver) throws -> Void) throws {
        try PushFixtures.withScene { server, app, gateway in
            for (id, name) in users where id != "alice" && id != "bob" { try app.createUser(id, name: name) }
            try PushFixtures.configure(app, gateway)
            try body(server, app, gateway)
        }
    }

    /// The notifications the gateway received of `type` (`parley.call`, `parley.call_cancel` …) for `callID`.
    static func notifications(_ gateway: TestReceiver, _ type: String, callID: String) -> [JSONValue] {
        gateway.requests.compactMap { $0.json?["notification"] }.filter {
            $0["type"] == .string(type) && $0["event_id"] == .string(callID)
        }
    }

    /// The push keys a notification went to.
    static func keys(_ notification: JSONValue) -> Set<String> {
        Set((notification["devices"]?.arrayValue ?? []).compactMap { $0["pushkey"]?.stringValue })
    }

    /// The notification whose devices include `key` (nil when none).
    static func notification(_ notifications: [JSONValue], to key: String) -> JSONValue? {
        notifications.first { keys($0).contains(key) }
    }

    /// The attempts of `callID` (optionally of one `kind`), grouped by user.
    static func attempts(_ app: TestApp, _ callID: String, kind: String? = nil) throws -> [String: [JSONValue]] {
        let items = try PushFixtures.attempts(app, "call_id=\(callID)" + (kind.map { "&kind=" + $0 } ?? ""))
        return Dictionary(grouping: items) { $0["user_id"]?.stringValue ?? "" }
    }

    /// Opens a presence-counting user stream of `user` on `platform` and waits until the user is online on it.
    static func online(_ server: TestServer, _ app: TestApp, _ user: String, on platform: String) throws -> HTTPClientStream {
        let stream = try LiveStreams.open(server, "/v1/users/\(user)/events?platform=\(platform)", bearer: try app.token(for: user))
        let status = try OnlineStatus.status(app, user) { OnlineStatus.platforms($0).contains(platform) }
        #expect(OnlineStatus.platforms(status).contains(platform), "\(user) online on \(platform): \(status)")
        return stream
    }

    /// Checks the gateway request fields (docs/push.md#how-the-bridge-sends) every call notification of `callID` by
    /// `sender` carries.
    static func expectCallNotification(
        _ n: JSONValue?, type: String, callID: String, sender: String, title: String, body: String = "",
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let kind = type.replacingOccurrences(of: "parley.", with: "")
        #expect(n?["type"] == .string(type), "\(String(describing: n))", sourceLocation: sourceLocation)
        #expect(n?["event_id"] == .string(callID), "event_id is the call_id", sourceLocation: sourceLocation)
        #expect(n?["room_id"] == .string("call:" + callID), sourceLocation: sourceLocation)
        #expect(n?["sender"] == .string(sender), "sender is the caller or operator", sourceLocation: sourceLocation)
        #expect(n?["content"]?["kind"] == .string(kind), sourceLocation: sourceLocation)
        #expect(n?["content"]?["title"] == .string(title), sourceLocation: sourceLocation)
        #expect(n?["content"]?["body"] == .string(body), sourceLocation: sourceLocation)
        #expect(n?["content"]?["call_id"] == .string(callID), sourceLocation: sourceLocation)
        #expect(n?["content"]?["message_type"] == .null, "message_type only for message, revoke, broadcast", sourceLocation: sourceLocation)
        #expect(n?["content"]?["seq"] == .null, "seq only for message and revoke", sourceLocation: sourceLocation)
    }

    // MARK: - Invitations

    @Test func theCreatePushesEachInviteeItsVoIPDevicesOrElseItsOthers() throws {
        let users = [
            ("alice", "Alice"), ("bob", "Bob"), ("carol", "Carol"), ("dave", "Dave"), ("erin", "Erin"), ("frank", "Frank"),
            ("gina", "Gina"), ("henry", "Henry"),
        ]
        try Self.withScene(users) { server, app, gateway in
            // The caller's own devices never get its call.
            try PushFixtures.device(app, "alice", platform: "ios", key: "key-alice-voip", voip: true)
            try PushFixtures.device(app, "alice", platform: "android", key: "key-alice-android")
            // bob, offline: a voip device and an android one; his conversation with alice is do_not_disturb (calls are
            // not affected, step 2 of docs/push.md#what-is-pushed-to-whom).
            let bobVoIP = try PushFixtures.device(app, "bob", platform: "ios", key: "key-bob-voip", voip: true)
            try PushFixtures.device(app, "bob", platform: "android", key: "key-bob-android")
            _ = try PushFixtures.send(app, extra: #","push":{"enable":false}"#)
            let dnd = try app.request(.patch, "/v1/users/bob/conversations/peer/alice", json: #"{"notification_status":"do_not_disturb"}"#)
            #expect(dnd.status == 200, "\(dnd.text)")
            // carol: no voip device, two others.
            try PushFixtures.device(app, "carol", platform: "android", key: "key-carol-android")
            try PushFixtures.device(app, "carol", platform: "web", key: "key-carol-web")
            // dave: online on ios, with a voip device on ios and on android, and a plain android device.
            let daveVoIPiOS = try PushFixtures.device(app, "dave", platform: "ios", key: "key-dave-voip-ios", voip: true)
            let daveVoIPAndroid = try PushFixtures.device(app, "dave", platform: "android", key: "key-dave-voip-android", voip: true)
            let daveAndroid = try PushFixtures.device(app, "dave", platform: "android", key: "key-dave-android")
            let daveStream = try Self.online(server, app, "dave", on: "ios")
            defer { daveStream.close() }
            // erin: a voip device on ios, online on web only: she still gets it.
            let erinVoIP = try PushFixtures.device(app, "erin", platform: "ios", key: "key-erin-voip", voip: true)
            let erinStream = try Self.online(server, app, "erin", on: "web")
            defer { erinStream.close() }
            // frank: no device at all (no attempt record).
            // gina: a voip device on ios, muted by her push rule while she is online on web.
            try PushFixtures.device(app, "gina", platform: "ios", key: "key-gina-voip", voip: true)
            let rule = try app.request(
                .put, "/v1/users/gina/push_rule", json: #"{"online_platforms":["web"],"not_to_receive_offline_push_platforms":["ios"]}"#)
            #expect(rule.status == 200, "\(rule.text)")
            let ginaStream = try Self.online(server, app, "gina", on: "web")
            defer { ginaStream.close() }
            // henry: only a voip device on ios, online on ios.
            try PushFixtures.device(app, "henry", platform: "ios", key: "key-henry-voip", voip: true)
            let henryStream = try Self.online(server, app, "henry", on: "ios")
            defer { henryStream.close() }

            let r = try Calls.create(app, "alice", ["bob", "carol", "dave", "erin", "frank", "gina", "henry"])
            #expect(r.status == 200, "\(r.text)")
            #expect(Self.codes(r) == [nil, nil, nil, nil, nil, nil, nil])
            let callID = try #require(r.json?["call"]?["call_id"]?.stringValue)
            #expect(
                Calls.states(r.json?["call"]) == [
                    "alice:accepted", "bob:inviting", "carol:inviting", "dave:received", "erin:received", "frank:inviting", "gina:received",
                    "henry:received",
                ])
            PushFixtures.drain(server)

            let calls = Self.notifications(gateway, "parley.call", callID: callID)
            #expect(calls.count == 4, "bob, carol, dave and erin: \(calls.map(Self.keys))")
            #expect(gateway.requests.count == calls.count, "nothing else was pushed")
            #expect(!calls.flatMap { Array(Self.keys($0)) }.contains { $0.hasPrefix("key-alice") }, "never the caller")

            let bob = Self.notification(calls, to: "key-bob-voip")
            #expect(bob.map(Self.keys) == ["key-bob-voip"], "the voip device only")
            Self.expectCallNotification(bob, type: "parley.call", callID: callID, sender: "alice", title: "Alice")
            #expect(bob?["sender_display_name"] == .string("Alice"))
            #expect(bob?["devices"]?[0]?["data"]?["voip"] == .bool(true))
            #expect(bob?["devices"]?[0]?["data"]?["device_id"] == bobVoIP["device_id"])

            let carol = Self.notification(calls, to: "key-carol-android")
            #expect(carol.map(Self.keys) == ["key-carol-android", "key-carol-web"], "no voip device: all the others")
            Self.expectCallNotification(carol, type: "parley.call", callID: callID, sender: "alice", title: "Alice")

            let dave = Self.notification(calls, to: "key-dave-voip-android")
            #expect(
                dave.map(Self.keys) == ["key-dave-voip-android"], "the voip device on ios is online-suppressed, the plain one is not a voip device")
            let erin = Self.notification(calls, to: "key-erin-voip")
            #expect(erin.map(Self.keys) == ["key-erin-voip"], "online on another platform still gets it")

            // The attempt log of the call.
            let attempts = try Self.attempts(app, callID)
            #expect(Set(attempts.keys) == ["bob", "carol", "dave", "erin", "gina", "henry"], "not alice (the caller), not frank (no device)")
            #expect(attempts.values.allSatisfy { $0.count == 1 })
            let all = attempts.values.flatMap { $0 }
            #expect(all.allSatisfy { $0["kind"] == .string("call") && $0["call_id"] == .string(callID) && $0["message_id"] == .null })
            #expect(try Self.attempts(app, callID, kind: "call").values.flatMap { $0 }.count == 6)
            #expect(try Self.attempts(app, callID, kind: "call_cancel").isEmpty)
            func attempt(_ user: String) -> JSONValue? { attempts[user]?.first }
            #expect(attempt("bob")?["status"] == .string("sent"))
            #expect(attempt("bob")?["device_ids"] == .array([bobVoIP["device_id"] ?? .null]))
            #expect(attempt("carol")?["status"] == .string("sent"))
            #expect(attempt("carol")?["device_ids"]?.arrayValue?.count == 2)
            #expect(attempt("dave")?["status"] == .string("sent"))
            #expect(attempt("dave")?["device_ids"] == .array([daveVoIPAndroid["device_id"] ?? .null]))
            #expect(attempt("erin")?["status"] == .string("sent"))
            #expect(attempt("erin")?["device_ids"] == .array([erinVoIP["device_id"] ?? .null]))
            #expect(attempt("gina")?["status"] == .string("suppressed"))
            #expect(attempt("gina")?["reason"] == .string("push_rule"))
            #expect(attempt("henry")?["status"] == .string("suppressed"))
            #expect(attempt("henry")?["reason"] == .string("online"))

            // dave's decision device by device (the dry run reads the same state).
            let dry = try app.request(.post, "/v1/push/test", json: #"{"user_id":"dave","call_id":"\#(callID)"}"#)
            #expect(dry.status == 200, "\(dry.text)")
            let decisions = dry.json?["decisions"]?.arrayValue ?? []
            func reason(_ device: JSONValue) -> JSONValue? { decisions.first { $0["device_id"] == device["device_id"] }?["reason"] }
            #expect(decisions.count == 3)
            #expect(reason(daveVoIPiOS) == .string("online"))
            #expect(reason(daveVoIPAndroid) == .null)
            #expect(reason(daveAndroid) == .string("kind"))
        }
    }

    @Test func aStreamThatDoesNotCountPresenceDoesNotSuppressTheCallPush() throws {
        try Self.withScene([("alice", "Alice"), ("bob", "Bob")]) { server, app, gateway in
            try PushFixtures.device(app, "bob", platform: "ios", key: "key-bob-voip", voip: true)
            // An app-key stream of bob without `presence=true` on ios: bob is not online
            // (docs/events.md#live-streams-server-sent-events), so not on ios either.
            let watcher = try LiveStreams.open(server, "/v1/users/bob/events?platform=ios", bearer: app.key)
            defer { watcher.close() }
            var rows: Int64 = 0
            try eventually(every: .milliseconds(50)) {
                rows = try server.count("SELECT count(*) FROM user_streams WHERE app_id = $1 AND user_id = 'bob'", [app.appID])
                return rows > 0
            }
            #expect(rows == 1, "the watcher stream is open")
            #expect(try app.request(.get, "/v1/users/bob/status").json?["online_status"] == .string("offline"))

            let r = try Calls.create(app, "alice", ["bob"])
            #expect(r.status == 200, "\(r.text)")
            #expect(Calls.states(r.json?["call"]) == ["alice:accepted", "bob:inviting"], "bob is not online: not received")
            let callID = try #require(r.json?["call"]?["call_id"]?.stringValue)
            PushFixtures.drain(server)
            let attempt = try Self.attempts(app, callID)["bob"]?.first
            #expect(attempt?["status"] == .string("sent"), "\(String(describing: attempt))")
            #expect(attempt?["reason"] == .null)
            #expect(Self.notifications(gateway, "parley.call", callID: callID).count == 1)
        }
    }

    @Test func theCreatesPushOptions() throws {
        try Self.withScene([("alice", "Alice"), ("bob", "Bob")]) { server, app, gateway in
            let bobDevice = try PushFixtures.device(app, "bob", platform: "android", key: "key-bob")

            // `enable: false`: no attempt at all.
            let silent = try Calls.call(app, "alice", ["bob"], extra: #","push":{"enable":false}"#)
            PushFixtures.drain(server)
            #expect(try Self.attempts(app, silent).isEmpty)
            #expect(gateway.requests.isEmpty)

            // A custom title, content and the rest of the PushConfig reach the gateway.
            let push = #"""
                {"title":"Incoming","content":"Video call from Alice","payload":"call://room/7","sound":"ring.caf","resources_id":"calls",
                 "voip":{"handle_type":"phone_number","handle_value":"+15550100","has_video":true}}
                """#
            let custom = try Calls.call(app, "alice", ["bob"], extra: #","push":"# + push)
            PushFixtures.drain(server)
            let calls = Self.notifications(gateway, "parley.call", callID: custom)
            #expect(calls.count == 1)
            let n = calls.first
            Self.expectCallNotification(n, type: "parley.call", callID: custom, sender: "alice", title: "Incoming", body: "Video call from Alice")
            #expect(n?["content"]?["payload"] == .string("call://room/7"))
            #expect(n?["content"]?["sound"] == .string("ring.caf"))
            #expect(n?["content"]?["resources_id"] == .string("calls"))
            #expect(
                n?["content"]?["voip"]
                    == .object(["handle_type": .string("phone_number"), "handle_value": .string("+15550100"), "has_video": .bool(true)]))
            #expect(n?["devices"]?[0]?["tweaks"]?["sound"] == .string("ring.caf"))
            #expect(try Self.attempts(app, custom)["bob"]?.first?["status"] == .string("sent"))

            // The generic format carries the same in its own shape.
            try PushFixtures.configure(app, gateway, #""format":"generic""#)
            let generic = try Calls.call(app, "alice", ["bob"], extra: #","push":{"title":"Ring","content":"Pick up"}"#)
            PushFixtures.drain(server)
            let request = try #require(gateway.requests.last)
            #expect(request.path == "/")
            let body = try #require(request.json)
            #expect(body["kind"] == .string("call"))
            #expect(body["user_id"] == .string("bob"))
            #expect(body["app_id"] == .string(app.appID))
            #expect(request.header("webhook-id") == body["push_id"]?.stringValue)
            let notification = body["notification"]
            #expect(notification?["title"] == .string("Ring"))
            #expect(notification?["body"] == .string("Pick up"))
            #expect(notification?["call_id"] == .string(generic))
            #expect(notification?["message_id"] == .null && notification?["conversation_type"] == .null, "\(String(describing: notification))")
            #expect(body["devices"]?[0]?["device_id"] == bobDevice["device_id"])
            #expect(try Self.attempts(app, generic)["bob"]?.first?["attempt_id"] == body["push_id"])
        }
    }

    @Test func inviteMorePushesOnlyTheNewInvitees() throws {
        let users = [
            ("alice", "Alice"), ("bob", "Bob"), ("carol", "Carol"), ("dave", "Dave"), ("erin", "Erin"), ("frank", "Frank"), ("gina", "Gina"),
        ]
        try Self.withScene(users) { server, app, gateway in
            for (user, _) in users { try PushFixtures.device(app, user, platform: "android", key: "key-\(user)") }
            // erin does not take calls from bob.
            let blocked = try app.request(.post, "/v1/users/erin/blacklist", json: #"{"user_ids":["bob"]}"#)
            #expect(blocked.status == 200, "\(blocked.text)")

            let callID = try Calls.call(app, "alice", ["bob", "carol", "frank"], extra: #","mode":"advanced""#)
            #expect(try Calls.act(app, callID, "accept", #"{"user_id":"bob"}"#).status == 200)
            #expect(try Calls.act(app, callID, "reject", #"{"user_id":"carol"}"#).status == 200)
            PushFixtures.drain(server)
            #expect(Self.notifications(gateway, "parley.call", callID: callID).count == 3, "the create's: bob, carol, frank")
            let before = gateway.requests.count

            // carol is invited again (after rejecting), dave for the first time; alice (accepted), frank (pending), erin
            // (blacklist) and an unknown user fail.
            let more = try Calls.act(
                app, callID, "invite", #"{"operator":"bob","invitees":["carol","dave","alice","frank","erin","zz"],"push":{"title":"Join us"}}"#)
            #expect(more.status == 200, "\(more.text)")
            #expect(
                Self.codes(more) == [
                    nil, nil, ErrorCode.alreadyInCall.code, ErrorCode.alreadyInCall.code, ErrorCode.blockedByRecipient.code,
                    ErrorCode.inviteeNotFound.code,
                ])
            PushFixtures.drain(server)
            let pushed = gateway.requests.dropFirst(before).compactMap { $0.json?["notification"] }
            #expect(pushed.map(Self.keys).reduce(into: Set<String>()) { $0.formUnion($1) } == ["key-carol", "key-dave"])
            #expect(pushed.count == 2)
            for n in pushed { Self.expectCallNotification(n, type: "parley.call", callID: callID, sender: "bob", title: "Join us") }
            var attempts = try Self.attempts(app, callID, kind: "call")
            #expect(attempts.mapValues(\.count) == ["bob": 1, "carol": 2, "frank": 1, "dave": 1])

            // Without `push` it pushes with the defaults (title: the operator's name); with `enable: false` nothing.
            #expect(try Calls.act(app, callID, "invite", #"{"operator":"alice","invitees":["erin"]}"#).status == 200)
            #expect(try Calls.act(app, callID, "invite", #"{"operator":"alice","invitees":["gina"],"push":{"enable":false}}"#).status == 200)
            PushFixtures.drain(server)
            let erin = Self.notification(Self.notifications(gateway, "parley.call", callID: callID), to: "key-erin")
            Self.expectCallNotification(erin, type: "parley.call", callID: callID, sender: "alice", title: "Alice")
            attempts = try Self.attempts(app, callID, kind: "call")
            #expect(attempts.mapValues(\.count) == ["bob": 1, "carol": 2, "frank": 1, "dave": 1, "erin": 1], "nothing for gina")
            #expect(try Self.attempts(app, callID, kind: "call_cancel").isEmpty)
            #expect(
                Calls.states(try Calls.get(app, callID)) == [
                    "alice:accepted", "bob:accepted", "carol:inviting", "frank:inviting", "dave:inviting", "erin:inviting", "gina:inviting",
                ])
        }
    }

    // MARK: - Cancellations

    @Test func cancelPushesTheInviteesItCancelled() throws {
        let users = [("alice", "Alice"), ("bob", "Bob"), ("carol", "Carol"), ("dave", "Dave"), ("erin", "Erin")]
        try Self.withScene(users) { server, app, gateway in
            for (user, _) in users { try PushFixtures.device(app, user, platform: "android", key: "key-\(user)") }
            let callID = try Calls.call(app, "alice", ["bob", "carol", "dave"])
            #expect(try Calls.act(app, callID, "accept", #"{"user_id":"dave"}"#).status == 200)

            // bob is cancelled, dave (accepted) is not.
            let first = try Calls.act(app, callID, "cancel", #"{"operator":"alice","invitees":["bob","dave"]}"#)
            #expect(first.status == 200, "\(first.text)")
            #expect(Self.codes(first) == [nil, ErrorCode.callStateConflict.code])
            PushFixtures.drain(server)
            var cancels = Self.notifications(gateway, "parley.call_cancel", callID: callID)
            #expect(cancels.map(Self.keys) == [["key-bob"]])
            Self.expectCallNotification(cancels.first, type: "parley.call_cancel", callID: callID, sender: "alice", title: "Alice")

            // The rest (carol) by default, with a custom title; the call ends (resolved).
            let rest = try Calls.act(app, callID, "cancel", #"{"operator":"alice","push":{"title":"Never mind","content":"Later"}}"#)
            #expect(rest.status == 200, "\(rest.text)")
            #expect(rest.json?["call"]?["end_reason"] == .string("resolved"))
            PushFixtures.drain(server)
            cancels = Self.notifications(gateway, "parley.call_cancel", callID: callID)
            let carol = Self.notification(cancels, to: "key-carol")
            #expect(cancels.count == 2)
            #expect(carol.map(Self.keys) == ["key-carol"])
            Self.expectCallNotification(carol, type: "parley.call_cancel", callID: callID, sender: "alice", title: "Never mind", body: "Later")
            let attempts = try Self.attempts(app, callID, kind: "call_cancel")
            #expect(attempts.mapValues(\.count) == ["bob": 1, "carol": 1], "never dave (accepted) nor alice (the operator)")
            #expect(attempts.values.flatMap { $0 }.allSatisfy { $0["status"] == .string("sent") && $0["call_id"] == .string(callID) })

            // `enable: false` on the cancel: no attempt.
            let quiet = try Calls.call(app, "alice", ["erin"])
            #expect(try Calls.act(app, quiet, "cancel", #"{"operator":"alice","push":{"enable":false}}"#).status == 200)
            PushFixtures.drain(server)
            #expect(try Self.attempts(app, quiet, kind: "call_cancel").isEmpty)
            #expect(try Self.attempts(app, quiet, kind: "call").count == 1)
        }
    }

    @Test func quitPushesTheOthersOnlyWithPush() throws {
        let users = [("alice", "Alice"), ("bob", "Bob"), ("carol", "Carol"), ("dave", "Dave"), ("erin", "Erin")]
        try Self.withScene(users) { server, app, gateway in
            for (user, _) in users { try PushFixtures.device(app, user, platform: "android", key: "key-\(user)") }
            let callID = try Calls.call(app, "alice", ["bob", "carol", "dave", "erin"], extra: #","mode":"advanced""#)
            #expect(try Calls.act(app, callID, "accept", #"{"user_id":"bob"}"#).status == 200)
            #expect(try Calls.act(app, callID, "accept", #"{"user_id":"erin"}"#).status == 200)
            #expect(try Calls.act(app, callID, "reject", #"{"user_id":"dave"}"#).status == 200)
            PushFixtures.drain(server)
            #expect(try Self.attempts(app, callID, kind: "call_cancel").isEmpty, "answers never push")

            // Without `push`: nothing.
            #expect(try Calls.act(app, callID, "quit", #"{"user_id":"alice"}"#).status == 200)
            PushFixtures.drain(server)
            #expect(try Self.attempts(app, callID, kind: "call_cancel").isEmpty)

            // With `push`: carol (pending) and erin (accepted); not bob (the quitter), alice (quit), dave (rejected).
            let quit = try Calls.act(app, callID, "quit", #"{"user_id":"bob","push":{"title":"Bob left"}}"#)
            #expect(quit.status == 200, "\(quit.text)")
            #expect(Calls.states(quit.json) == ["alice:quit", "bob:quit", "carol:inviting", "dave:rejected", "erin:accepted"])
            PushFixtures.drain(server)
            let cancels = Self.notifications(gateway, "parley.call_cancel", callID: callID)
            #expect(cancels.count == 2)
            #expect(cancels.map(Self.keys).reduce(into: Set<String>()) { $0.formUnion($1) } == ["key-carol", "key-erin"])
            for n in cancels { Self.expectCallNotification(n, type: "parley.call_cancel", callID: callID, sender: "bob", title: "Bob left") }

            // With `push` and `enable: false`: nothing.
            let last = try Calls.act(app, callID, "quit", #"{"user_id":"erin","push":{"enable":false}}"#)
            #expect(last.status == 200, "\(last.text)")
            PushFixtures.drain(server)
            #expect(try Self.attempts(app, callID, kind: "call_cancel").mapValues(\.count) == ["carol": 1, "erin": 1])

            // A quit with an empty `push` object pushes with the defaults (title: the quitter's name).
            let other = try Calls.call(app, "carol", ["dave"], extra: #","mode":"advanced""#)
            #expect(try Calls.act(app, other, "quit", #"{"user_id":"carol","push":{}}"#).status == 200)
            PushFixtures.drain(server)
            let dave = Self.notifications(gateway, "parley.call_cancel", callID: other)
            #expect(dave.map(Self.keys) == [["key-dave"]])
            Self.expectCallNotification(dave.first, type: "parley.call_cancel", callID: other, sender: "carol", title: "Carol")
        }
    }

    @Test func endPushesEveryOtherPendingOrAcceptedUserOnlyWithPush() throws {
        let users = [("alice", "Alice"), ("bob", "Bob"), ("carol", "Carol"), ("dave", "Dave"), ("frank", "Frank")]
        try Self.withScene(users) { server, app, gateway in
            for (user, _) in users { try PushFixtures.device(app, user, platform: "android", key: "key-\(user)") }
            let callID = try Calls.call(app, "alice", ["bob", "carol", "dave"], extra: #","mode":"advanced""#)
            #expect(try Calls.act(app, callID, "accept", #"{"user_id":"bob"}"#).status == 200)
            #expect(try Calls.act(app, callID, "reject", #"{"user_id":"dave"}"#).status == 200)
            // frank joins uninvited: accepted, so he gets the end's push too.
            #expect(try Calls.act(app, callID, "join", #"{"user_id":"frank"}"#).status == 200)

            let ended = try Calls.act(app, callID, "end", #"{"operator":"alice","push":{}}"#)
            #expect(ended.status == 200, "\(ended.text)")
            #expect(Calls.states(ended.json) == ["alice:ended", "bob:ended", "carol:cancelled", "dave:rejected", "frank:ended"])
            PushFixtures.drain(server)
            let cancels = Self.notifications(gateway, "parley.call_cancel", callID: callID)
            #expect(cancels.count == 3)
            #expect(
                cancels.map(Self.keys).reduce(into: Set<String>()) { $0.formUnion($1) } == ["key-bob", "key-carol", "key-frank"],
                "not alice (the operator), not dave (rejected)")
            for n in cancels { Self.expectCallNotification(n, type: "parley.call_cancel", callID: callID, sender: "alice", title: "Alice") }
            #expect(try Self.attempts(app, callID, kind: "call_cancel").mapValues(\.count) == ["bob": 1, "carol": 1, "frank": 1])

            // Without `push`: nothing, for the pending and the accepted alike.
            let quiet = try Calls.call(app, "alice", ["bob", "carol"], extra: #","mode":"advanced""#)
            #expect(try Calls.act(app, quiet, "accept", #"{"user_id":"bob"}"#).status == 200)
            let end = try Calls.act(app, quiet, "end", #"{"operator":"bob"}"#)
            #expect(end.status == 200, "\(end.text)")
            #expect(Calls.states(end.json) == ["alice:ended", "bob:ended", "carol:cancelled"])
            PushFixtures.drain(server)
            #expect(try Self.attempts(app, quiet, kind: "call_cancel").isEmpty)
            #expect(Self.notifications(gateway, "parley.call_cancel", callID: quiet).isEmpty)
        }
    }

    @Test func answersAndTimersNeverPush() throws {
        let users = [("alice", "Alice"), ("bob", "Bob"), ("carol", "Carol"), ("dave", "Dave")]
        try Self.withScene(users) { server, app, gateway in
            for (user, _) in users { try PushFixtures.device(app, user, platform: "android", key: "key-\(user)") }
            let callID = try Calls.call(app, "alice", ["bob", "carol", "dave"], extra: #","timeout_s":10,"not_received_check":true"#)
            PushFixtures.drain(server)
            #expect(gateway.requests.count == 3)
            // The not-received check, an accept, a reject and a timeout.
            try server.advanceClock(ms: 6000)
            #expect(
                Calls.states(try Calls.get(app, callID)) == [
                    "alice:accepted", "bob:not_yet_received", "carol:not_yet_received", "dave:not_yet_received",
                ])
            #expect(try Calls.act(app, callID, "accept", #"{"user_id":"bob"}"#).status == 200)
            #expect(try Calls.act(app, callID, "reject", #"{"user_id":"carol"}"#).status == 200)
            try server.advanceClock(ms: 5000)
            let call = try Calls.get(app, callID)
            #expect(Calls.states(call) == ["alice:accepted", "bob:accepted", "carol:rejected", "dave:timeout"])
            #expect(call?["end_reason"] == .string("resolved"))
            PushFixtures.drain(server)
            #expect(gateway.requests.count == 3, "only the invitations")
            #expect(try Self.attempts(app, callID).values.flatMap { $0 }.allSatisfy { $0["kind"] == .string("call") })
            #expect(try Self.attempts(app, callID, kind: "call_cancel").isEmpty)
        }
    }

    // MARK: - The dry run

    @Test func theDryRunOfACallPredictsItsInvitationPush() throws {
        let users = [("alice", "Alice"), ("bob", "Bob"), ("carol", "Carol"), ("dave", "Dave")]
        try Self.withScene(users) { server, app, gateway in
            let voip = try PushFixtures.device(app, "bob", platform: "ios", key: "key-bob-voip", voip: true)
            let android = try PushFixtures.device(app, "bob", platform: "android", key: "key-bob-android")
            try PushFixtures.device(app, "carol", platform: "android", key: "key-carol")
            try PushFixtures.device(app, "alice", platform: "android", key: "key-alice")
            let callID = try Calls.call(app, "alice", ["bob", "carol"])
            PushFixtures.drain(server)
            #expect(gateway.requests.count == 2)

            let dry = try app.request(.post, "/v1/push/test", json: #"{"user_id":"bob","call_id":"\#(callID)"}"#)
            #expect(dry.status == 200, "\(dry.text)")
            let decisions = dry.json?["decisions"]?.arrayValue ?? []
            #expect(decisions.count == 2)
            let onVoIP = decisions.first { $0["device_id"] == voip["device_id"] }
            #expect(onVoIP?["selected"] == .bool(true))
            #expect(onVoIP?["reason"] == .null)
            #expect(onVoIP?["platform"] == .string("ios"))
            #expect(onVoIP?["provider"] == .string("fcm"))
            let onAndroid = decisions.first { $0["device_id"] == android["device_id"] }
            #expect(onAndroid?["selected"] == .bool(false))
            #expect(onAndroid?["reason"] == .string("kind"), "a call goes to the voip devices only")
            #expect(dry.json?["request"]?["url"] == .string(gateway.url + "/_matrix/push/v1/notify"))
            #expect(dry.json?["response"] == .null)
            let sent = Self.notification(Self.notifications(gateway, "parley.call", callID: callID), to: "key-bob-voip")
            #expect(dry.json?["request"]?["body"]?["notification"] == sent, "the body the invitation push carried")
            Self.expectCallNotification(
                dry.json?["request"]?["body"]?["notification"], type: "parley.call", callID: callID, sender: "alice", title: "Alice")

            let carol = try app.request(.post, "/v1/push/test", json: #"{"user_id":"carol","call_id":"\#(callID)"}"#)
            #expect(carol.status == 200, "\(carol.text)")
            #expect(carol.json?["decisions"]?.arrayValue?.map { $0["selected"] } == [.bool(true)], "no voip device: the others")
            #expect(gateway.requests.count == 2, "a dry run sends nothing")
            #expect(try Self.attempts(app, callID).values.flatMap { $0 }.count == 2, "and logs nothing")

            Self.expectProblem(try app.request(.post, "/v1/push/test", json: #"{"user_id":"bob","call_id":"call_missing"}"#), 404, .callNotFound)
            Self.expectProblem(
                try app.request(.post, "/v1/push/test", json: #"{"user_id":"alice","call_id":"\#(callID)"}"#), 422, .unsupportedOperation)
            Self.expectProblem(
                try app.request(.post, "/v1/push/test", json: #"{"user_id":"dave","call_id":"\#(callID)"}"#), 422, .unsupportedOperation)
            Self.expectProblem(try app.request(.post, "/v1/push/test", json: #"{"user_id":"nobody","call_id":"\#(callID)"}"#), 404, .userNotFound)
        }
    }

    @Test func aRealTestPushOfACallGoesWhereItsInvitationWent() throws {
        try Self.withScene([("alice", "Alice"), ("bob", "Bob")]) { server, app, gateway in
            let voip = try PushFixtures.device(app, "bob", platform: "ios", key: "key-bob-voip", voip: true)
            try PushFixtures.device(app, "bob", platform: "android", key: "key-bob-android")
            let callID = try Calls.call(app, "alice", ["bob"])
            PushFixtures.drain(server)
            let dry = try app.request(.post, "/v1/push/test", json: #"{"user_id":"bob","call_id":"\#(callID)"}"#)
            let real = try app.request(.post, "/v1/push/test", json: #"{"user_id":"bob","call_id":"\#(callID)","dry_run":false}"#)
            #expect(real.status == 200, "\(real.text)")
            #expect(real.json?["decisions"] == dry.json?["decisions"], "the real test push is decided as the dry run: \(real.text)")
            let test = try #require(gateway.requests.last?.json?["notification"])
            #expect(test["type"] == .string("parley.test"))
            #expect(Self.keys(test) == ["key-bob-voip"], "the call's voip device, not the others")
            #expect(test["event_id"] == .string(callID))
            #expect(test["room_id"] == .string("call:" + callID), "the call's room_id, as in the dry run (not a peer conversation)")
            #expect(real.json?["attempt"]?["kind"] == .string("test"))
            #expect(real.json?["attempt"]?["device_ids"] == .array([voip["device_id"] ?? .null]))
        }
    }
}
