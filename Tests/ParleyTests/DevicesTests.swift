import Dispatch
import ParleyHTTP
import ParleyTesting
import Synchronization
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Offline push rule and devices (docs/users.md#devices-and-the-offline-push-rule) end to end: real HTTP against a real
/// server and database.
@Suite("Devices", .inProcess)
struct DevicesTests: ProblemAssertions {
    // MARK: - Helpers

    static let apnsKey = String(repeating: "ab", count: 32)

    /// A registration body; `extra` is appended inside the object (e.g. `,"device_id":"d1"`).
    static func body(
        provider: String = "fcm", key: String = "key-1", app: String = "com.example.app", platform: String = "android",
        _ extra: String = ""
    ) -> String {
        "{\"platform\":\"\(platform)\",\"provider\":\"\(provider)\",\"push_key\":\"\(key)\",\"app_id\":\"\(app)\"\(extra)}"
    }

    static func events(_ app: TestApp, _ type: String, audience user: String? = nil) throws -> [JSONValue] {
        try app.events(query: "types=\(type)" + (user.map { "&user_id=\($0)" } ?? ""))
    }

    static func deviceIDs(_ app: TestApp, _ user: String) throws -> [String] {
        let r = try app.request(.get, "/v1/users/\(user)/devices")
        #expect(r.status == 200, "\(r.text)")
        return r.json?["items"]?.arrayValue?.compactMap { $0["device_id"]?.stringValue } ?? []
    }

    static let deviceKeys: Set<String> = [
        "device_id", "user_id", "platform", "provider", "push_key", "app_id", "voip", "apptype", "lang", "created_at",
        "updated_at", "last_push_at",
    ]

    // MARK: - Registration

    @Test func registerThenUpdateBySameDeviceIDOrSameKey() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("u1")

            let r = try app.request(.post, "/v1/users/u1/devices", json: Self.body(#","device_id":"d1","lang":"en""#))
            #expect(r.status == 201, "\(r.text)")
            let d = r.json
            #expect(Set(d?.objectValue?.keys ?? []) == Self.deviceKeys)
            #expect(d?["device_id"] == .string("d1"))
            #expect(d?["user_id"] == .string("u1"))
            #expect(d?["platform"] == .string("android"))
            #expect(d?["provider"] == .string("fcm"))
            #expect(d?["push_key"] == .string("key-1"))
            #expect(d?["app_id"] == .string("com.example.app"))
            #expect(d?["voip"] == .bool(false))
            #expect(d?["apptype"] == .int(1))
            #expect(d?["lang"] == .string("en"))
            #expect(d?["last_push_at"] == .null)
            let createdAt = d?["created_at"]?.intValue ?? 0
            #expect(d?["updated_at"]?.intValue == createdAt)

            try server.advanceClock(ms: 1000)
            // Same device_id with a new key: updated in place, 200.
            let same = try app.request(.post, "/v1/users/u1/devices", json: Self.body(key: "key-2", #","device_id":"d1","voip":true,"apptype":7"#))
            #expect(same.status == 200, "\(same.text)")
            #expect(same.json?["push_key"] == .string("key-2"))
            #expect(same.json?["voip"] == .bool(true))
            #expect(same.json?["apptype"] == .int(7))
            #expect(same.json?["created_at"]?.intValue == createdAt)
            #expect((same.json?["updated_at"]?.intValue ?? 0) >= createdAt + 1000)

            // Same provider + app_id + push_key without a device_id: that device is updated, 200.
            let byKey = try app.request(.post, "/v1/users/u1/devices", json: Self.body(key: "key-2", platform: "ios"))
            #expect(byKey.status == 200, "\(byKey.text)")
            #expect(byKey.json?["device_id"] == .string("d1"))
            #expect(byKey.json?["platform"] == .string("ios"))
            #expect(try Self.deviceIDs(app, "u1") == ["d1"])

            // A different app_id is a different key: a new device with a generated id.
            let other = try app.request(.post, "/v1/users/u1/devices", json: Self.body(key: "key-2", app: "com.example.other"))
            #expect(other.status == 201)
            let generated = other.json?["device_id"]?.stringValue ?? ""
            #expect(!generated.isEmpty && generated.utf8.count <= 32)
            #expect(try Self.deviceIDs(app, "u1") == ["d1", generated])

            let registered = try Self.events(app, "device.registered", audience: "u1")
            #expect(registered.count == 4)
            #expect(registered.first?["data"]?["device"]?["device_id"] == .string("d1"))
            #expect(registered.last?["data"]?["device"]?["device_id"] == .string(generated))
        }
    }

    @Test func keyMovesBetweenUsers() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("u1")
            try app.createUser("u2")
            #expect(try app.request(.post, "/v1/users/u1/devices", json: Self.body(#","device_id":"d1""#)).status == 201)

            let moved = try app.request(.post, "/v1/users/u2/devices", json: Self.body(#","device_id":"d2""#))
            #expect(moved.status == 201, "\(moved.text)")
            #expect(moved.json?["user_id"] == .string("u2"))
            #expect(try Self.deviceIDs(app, "u1").isEmpty)
            #expect(try Self.deviceIDs(app, "u2") == ["d2"])

            let removed = try Self.events(app, "device.removed", audience: "u1")
            #expect(removed.count == 1)
            #expect(removed.first?["data"]?["user_id"] == .string("u1"))
            #expect(removed.first?["data"]?["device_id"] == .string("d1"))
            #expect(removed.first?["data"]?["reason"] == .string("moved"))
            #expect(try Self.events(app, "device.removed", audience: "u2").isEmpty)
            let registered = try Self.events(app, "device.registered", audience: "u2")
            #expect(registered.count == 1)
            #expect(registered.first?["data"]?["device"]?["user_id"] == .string("u2"))

            // And back again onto an existing device of u1 with another key.
            #expect(try app.request(.post, "/v1/users/u1/devices", json: Self.body(key: "other", #","device_id":"d9""#)).status == 201)
            let back = try app.request(.post, "/v1/users/u1/devices", json: Self.body(#","device_id":"d9""#))
            #expect(back.status == 200, "\(back.text)")
            #expect(back.json?["push_key"] == .string("key-1"))
            #expect(try Self.deviceIDs(app, "u2").isEmpty)
            #expect(try Self.events(app, "device.removed", audience: "u2").first?["data"]?["reason"] == .string("moved"))
        }
    }

    @Test func twentyFirstDeviceEvictsLeastRecentlyUpdated() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("u1")
            for i in 0..<20 {
                let r = try app.request(.post, "/v1/users/u1/devices", json: Self.body(key: "k\(i)", ",\"device_id\":\"d\(i)\""))
                #expect(r.status == 201, "\(r.text)")
                try server.advanceClock(ms: 10)
            }
            // d0 is refreshed, so d1 becomes the least recently updated.
            #expect(try app.request(.post, "/v1/users/u1/devices", json: Self.body(key: "k0", #","device_id":"d0""#)).status == 200)
            try server.advanceClock(ms: 10)
            let r = try app.request(.post, "/v1/users/u1/devices", json: Self.body(key: "k20", #","device_id":"d20""#))
            #expect(r.status == 201)
            let ids = try Self.deviceIDs(app, "u1")
            #expect(ids.count == 20)
            #expect(!ids.contains("d1"))
            #expect(ids.first == "d0" && ids.last == "d20")
            let removed = try Self.events(app, "device.removed", audience: "u1")
            #expect(removed.count == 1)
            #expect(removed.first?["data"]?["device_id"] == .string("d1"))
            #expect(removed.first?["data"]?["reason"] == .string("evicted"))
        }
    }

    @Test func concurrentRegistrationsKeepTheCapAndOneOwnerPerKey() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("u1")
            try app.createUser("u2")
            let statuses = Mutex<[Int]>([])
            DispatchQueue.concurrentPerform(iterations: 30) { i in
                let status = (try? app.request(.post, "/v1/users/u1/devices", json: Self.body(key: "k\(i)")).status) ?? 0
                statuses.withLock { $0.append(status) }
            }
            #expect(statuses.withLock { $0 }.allSatisfy { $0 == 201 })
            #expect(try Self.deviceIDs(app, "u1").count == 20)
            #expect(try Self.events(app, "device.removed", audience: "u1").count == 10)

            // The same key registered concurrently for both users ends with exactly one of them.
            let moves = Mutex<[Int]>([])
            DispatchQueue.concurrentPerform(iterations: 10) { i in
                let user = i % 2 == 0 ? "u1" : "u2"
                let status = (try? app.request(.post, "/v1/users/\(user)/devices", json: Self.body(key: "shared")).status) ?? 0
                moves.withLock { $0.append(status) }
            }
            #expect(moves.withLock { $0 }.allSatisfy { $0 == 200 || $0 == 201 })
            let holders = try ["u1", "u2"].map { user in
                try app.request(.get, "/v1/users/\(user)/devices").json?["items"]?.arrayValue?
                    .filter { $0["push_key"] == .string("shared") }.count ?? 0
            }
            #expect(holders.reduce(0, +) == 1)
            #expect(try Self.deviceIDs(app, "u1").count <= 20)
        }
    }

    @Test func validationAndAPNsKeyFormat() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("u1")

            let ok = try app.request(.post, "/v1/users/u1/devices", json: Self.body(provider: "apns", key: Self.apnsKey, platform: "ios"))
            #expect(ok.status == 201, "\(ok.text)")
            for key in ["abc", String(repeating: "g", count: 64), String(repeating: "a", count: 201)] {
                let r = try app.request(.post, "/v1/users/u1/devices", json: Self.body(provider: "apns", key: key, platform: "ios"))
                Self.expectProblem(r, 422, .pushKeyInvalid, key)
            }
            // Other providers take any key.
            #expect(try app.request(.post, "/v1/users/u1/devices", json: Self.body(provider: "webpush", key: "abc")).status == 201)

            let cases: [(String, String)] = [
                (Self.body(platform: "symbian"), "body.platform"),
                (Self.body(provider: "pigeon"), "body.provider"),
                (Self.body(#","apptype":0"#), "body.apptype"),
                (Self.body(#","apptype":101"#), "body.apptype"),
                (Self.body(#","apptype":"1""#), "body.apptype"),
                (Self.body(#","voip":"yes""#), "body.voip"),
                (Self.body(key: ""), "body.push_key"),
                (Self.body(app: ""), "body.app_id"),
                (Self.body(app: String(repeating: "a", count: 256)), "body.app_id"),
                (Self.body(key: String(repeating: "a", count: 4097)), "body.push_key"),
                (Self.body(#","lang":"abcdefghijklmnopq""#), "body.lang"),
                (Self.body(#","device_id":"""#), "body.device_id"),
                (Self.body(",\"device_id\":\"\(String(repeating: "d", count: 65))\""), "body.device_id"),
                (Self.body(#","device_id":"a\u0001b""#), "body.device_id"),
                (#"{"provider":"fcm","push_key":"k","app_id":"a"}"#, "body.platform"),
            ]
            for (json, field) in cases {
                Self.expectInvalid(try app.request(.post, "/v1/users/u1/devices", json: json), field: field, json)
            }
            // 400 comes before 404; 404 before the push-key check.
            Self.expectInvalid(try app.request(.post, "/v1/users/nobody/devices", json: Self.body(platform: "x")), field: "body.platform")
            Self.expectProblem(
                try app.request(.post, "/v1/users/nobody/devices", json: Self.body(provider: "apns", key: "zz")), 404, .userNotFound)
            try app.createUser("gone")
            #expect(try app.request(.delete, "/v1/users/gone").status == 204)
            Self.expectProblem(try app.request(.post, "/v1/users/gone/devices", json: Self.body()), 404, .userNotFound)
            Self.expectProblem(try app.request(.get, "/v1/users/gone/devices"), 404, .userNotFound)
            Self.expectProblem(try app.request(.get, "/v1/users/gone/push_rule"), 404, .userNotFound)
            #expect(try Self.events(app, "device.registered").count == 2)
        }
    }

    // MARK: - List and delete

    @Test func listOrderAndDelete() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("u1")
            #expect(try Self.deviceIDs(app, "u1").isEmpty)
            let empty = try app.request(.get, "/v1/users/u1/devices")
            #expect(empty.json?["next_cursor"] == .null)

            #expect(try app.request(.post, "/v1/users/u1/devices", json: Self.body(key: "k1", #","device_id":"zz""#)).status == 201)
            try server.advanceClock(ms: 5)
            #expect(try app.request(.post, "/v1/users/u1/devices", json: Self.body(key: "k2", #","device_id":"bb""#)).status == 201)
            #expect(try app.request(.post, "/v1/users/u1/devices", json: Self.body(key: "k3", #","device_id":"aa""#)).status == 201)
            let ids = try Self.deviceIDs(app, "u1")
            #expect(ids.first == "zz")
            #expect(Set(ids) == ["zz", "aa", "bb"])
            // Updating does not change the order (created_at).
            #expect(try app.request(.post, "/v1/users/u1/devices", json: Self.body(key: "k1b", #","device_id":"zz""#)).status == 200)
            #expect(try Self.deviceIDs(app, "u1") == ids)

            // An id with reserved URL characters, percent-encoded in the path.
            #expect(try app.request(.post, "/v1/users/u1/devices", json: Self.body(key: "k4", #","device_id":"a/b c#d""#)).status == 201)
            #expect(try app.request(.delete, "/v1/users/u1/devices/a%2Fb%20c%23d").status == 204)
            #expect(try app.request(.delete, "/v1/users/u1/devices/zz").status == 204)
            #expect(Set(try Self.deviceIDs(app, "u1")) == ["aa", "bb"])
            Self.expectProblem(try app.request(.delete, "/v1/users/u1/devices/zz"), 404, .notFound)
            Self.expectProblem(try app.request(.delete, "/v1/users/nobody/devices/zz"), 404, .userNotFound)

            let removed = try Self.events(app, "device.removed", audience: "u1")
            #expect(removed.map { $0["data"]?["device_id"]?.stringValue ?? "" } == ["a/b c#d", "zz"])
            #expect(removed.allSatisfy { $0["data"]?["reason"] == .string("deleted") && $0["data"]?["user_id"] == .string("u1") })
        }
    }

    @Test func userTokensActOnlyForThemselves() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("u1")
            try app.createUser("u2")
            let token = try app.token(for: "u1")

            let mine = try server.request(.post, "/v1/users/u1/devices", bearer: token, json: Self.body(#","device_id":"d1""#))
            #expect(mine.status == 201, "\(mine.text)")
            #expect(try server.request(.get, "/v1/users/u1/devices", bearer: token).status == 200)
            #expect(try server.request(.get, "/v1/users/u1/push_rule", bearer: token).status == 200)
            #expect(try server.request(.put, "/v1/users/u1/push_rule", bearer: token, json: "{}").status == 200)

            let requests: [(HTTPMethod, String, String?)] = [
                (.post, "/v1/users/u2/devices", Self.body(key: "k2")),
                (.get, "/v1/users/u2/devices", nil),
                (.delete, "/v1/users/u2/devices/d1", nil),
                (.get, "/v1/users/u2/push_rule", nil),
                (.put, "/v1/users/u2/push_rule", "{}"),
            ]
            for (method, path, json) in requests {
                Self.expectProblem(try server.request(method, path, bearer: token, json: json), 403, .forbidden, path)
            }
            #expect(try server.request(.delete, "/v1/users/u1/devices/d1", bearer: token).status == 204)
        }
    }

    @Test func hardDeletingTheUserRemovesItsDevicesAndRule() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("u1")
            #expect(try app.request(.post, "/v1/users/u1/devices", json: Self.body(#","device_id":"d1""#)).status == 201)
            #expect(try app.request(.put, "/v1/users/u1/push_rule", json: #"{"online_platforms":["win"]}"#).status == 200)
            #expect(try app.request(.delete, "/v1/users/u1?mode=hard").status == 204)
            try app.createUser("u1")
            #expect(try Self.deviceIDs(app, "u1").isEmpty)
            let rule = try app.request(.get, "/v1/users/u1/push_rule")
            #expect(rule.json?["online_platforms"] == .array([]))
            // The key is free again: registering it for another user moves nothing.
            try app.createUser("u2")
            #expect(try app.request(.post, "/v1/users/u2/devices", json: Self.body()).status == 201)
            #expect(try Self.events(app, "device.removed").isEmpty)
        }
    }

    // MARK: - Push rule

    @Test func pushRuleGetPutAndValidation() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("u1")

            let initial = try app.request(.get, "/v1/users/u1/push_rule")
            #expect(initial.status == 200)
            #expect(initial.json?["online_platforms"] == .array([]))
            #expect(initial.json?["not_to_receive_offline_push_platforms"] == .array([]))

            let put = try app.request(
                .put, "/v1/users/u1/push_rule",
                json: #"{"online_platforms":["macos","win"],"not_to_receive_offline_push_platforms":["ios","android"]}"#)
            #expect(put.status == 200, "\(put.text)")
            // Kept in ZIM number order.
            #expect(put.json?["online_platforms"] == .array([.string("win"), .string("macos")]))
            #expect(put.json?["not_to_receive_offline_push_platforms"] == .array([.string("ios"), .string("android")]))
            let read = try app.request(.get, "/v1/users/u1/push_rule")
            #expect(read.body == put.body)

            let events = try Self.events(app, "user.push_rule_updated", audience: "u1")
            #expect(events.count == 1)
            #expect(events.first?["data"]?["user_id"] == .string("u1"))
            #expect(events.first?["data"]?["rule"]?["online_platforms"] == .array([.string("win"), .string("macos")]))

            let all = Device.Platform.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ",")
            #expect(try app.request(.put, "/v1/users/u1/push_rule", json: "{\"online_platforms\":[\(all)]}").status == 200)

            let cases: [(String, String)] = [
                (#"{"online_platforms":["win","win"]}"#, "body.online_platforms[1]"),
                (#"{"online_platforms":["beos"]}"#, "body.online_platforms[0]"),
                (#"{"not_to_receive_offline_push_platforms":["ios",3]}"#, "body.not_to_receive_offline_push_platforms[1]"),
                (#"{"not_to_receive_offline_push_platforms":"ios"}"#, "body.not_to_receive_offline_push_platforms"),
                ("{\"online_platforms\":[\(all),\"win\"]}", "body.online_platforms"),
            ]
            for (json, field) in cases {
                Self.expectInvalid(try app.request(.put, "/v1/users/u1/push_rule", json: json), field: field, json)
            }
            #expect(try Self.events(app, "user.push_rule_updated").count == 2)
            Self.expectProblem(try app.request(.put, "/v1/users/nobody/push_rule", json: "{}"), 404, .userNotFound)
            Self.expectProblem(try app.request(.get, "/v1/users/nobody/push_rule"), 404, .userNotFound)
        }
    }
}
