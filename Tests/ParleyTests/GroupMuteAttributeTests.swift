import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Group mute, member mute (docs/groups.md#mute) and group attributes (docs/groups.md#attributes).
@Suite("Group mute and attributes", .inProcess)
struct GroupMuteAttributeTests: GroupTestSupport {
    @Test func groupMuteModesAndExpiry() throws {
        try withApp(testClock: true) { server, app in
            for id in ["o", "a", "m", "c"] { try app.createUser(id) }
            let g = try Self.createGroup(app, "o", members: ["a", "m", "c"])
            try Self.setRole(app, g, "a", 2)
            try Self.setRole(app, g, "c", 7)
            func muted() -> [String] { ["o", "a", "m", "c"].filter { Self.muteCheck(server, app, g, $0) == ErrorCode.senderMuted.code } }
            #expect(muted() == [])

            let normal = try app.request(.put, "/v1/groups/\(g)/mute", json: #"{"operator":"a","mode":"normal","duration_s":60}"#)
            #expect(normal.status == 200, "\(normal.text)")
            #expect(normal.json?["mute"]?["mode"] == .string("normal"))
            #expect(normal.json?["mute"]?["expires_at"]?.intValue ?? 0 > 0)
            #expect(muted() == ["m", "c"])
            let event = try Self.events(app, "group.mute_updated").last
            #expect(event?["data"]?["mute"]?["mode"] == .string("normal"))
            #expect(event?["data"]?["operator"] == .string("a"))

            #expect(try app.request(.put, "/v1/groups/\(g)/mute", json: #"{"mode":"all","duration_s":-1}"#).status == 200)
            #expect(muted() == ["a", "m", "c"])
            let custom = try app.request(.put, "/v1/groups/\(g)/mute", json: #"{"mode":"custom","duration_s":60,"roles":[7]}"#)
            #expect(custom.json?["mute"]?["roles"] == .array([.int(7)]))
            #expect(muted() == ["c"])
            // Expiry by time: no timer, reads compare with the clock.
            try server.advanceClock(ms: 60_001)
            #expect(muted() == [])
            #expect(try Self.group(app, g)?["mute"]?["mode"] == .string("none"))
            #expect(try app.request(.put, "/v1/groups/\(g)/mute", json: #"{"mode":"none"}"#).status == 200)

            Self.expectInvalid(try app.request(.put, "/v1/groups/\(g)/mute", json: #"{"mode":"all","duration_s":0}"#), field: "body.duration_s")
            Self.expectInvalid(try app.request(.put, "/v1/groups/\(g)/mute", json: #"{"mode":"all","duration_s":604801}"#), field: "body.duration_s")
            Self.expectInvalid(try app.request(.put, "/v1/groups/\(g)/mute", json: #"{"mode":"custom","duration_s":60}"#), field: "body.roles")
            Self.expectInvalid(
                try app.request(.put, "/v1/groups/\(g)/mute", json: #"{"mode":"custom","duration_s":60,"roles":[1]}"#), field: "body.roles[0]")
            Self.expectInvalid(try app.request(.put, "/v1/groups/\(g)/mute", json: #"{"mode":"loud"}"#), field: "body.mode")
            Self.expectProblem(
                try app.request(.put, "/v1/groups/\(g)/mute", json: #"{"operator":"m","mode":"all","duration_s":-1}"#), 403, .groupPermissionDenied)
            // A user who is not a member; one who does not exist fails earlier (existence is checked before policy).
            try app.createUser("outsider")
            #expect(Self.muteCheck(server, app, g, "outsider") == ErrorCode.notGroupMember.code)
            #expect(Self.muteCheck(server, app, g, "nobody") == ErrorCode.userNotFound.code)
            #expect(Self.muteCheck(server, app, "nogroup", "m") == ErrorCode.targetNotFound.code)
        }
    }

    @Test func memberMuteWithExpiry() throws {
        try withApp(testClock: true) { server, app in
            for id in ["o", "a", "m", "m2", "x"] { try app.createUser(id) }
            let g = try Self.createGroup(app, "o", members: ["a", "m", "m2"])
            try Self.setRole(app, g, "a", 2)

            let r = try app.request(.post, "/v1/groups/\(g)/members/mute", json: #"{"operator":"a","user_ids":["m","o","x","m2"],"duration_s":60}"#)
            #expect(r.status == 200, "\(r.text)")
            #expect(Self.codes(r) == [nil, ErrorCode.groupPermissionDenied.code, ErrorCode.notGroupMember.code, nil])
            let until = Self.results(r)[0]["data"]?["muted_until"]?.intValue ?? 0
            #expect(until > 0)
            #expect(Self.results(r)[0]["data"]?["user_id"] == .string("m"))
            let updated = try Self.events(app, "group.member_updated").last
            #expect(updated?["data"]?["changed"] == .array([.string("muted_until")]))
            #expect(updated?["data"]?["members"]?.arrayValue?.count == 2)
            #expect(try Self.member(app, g, "m")?["muted_until"]?.intValue == until)
            #expect(Self.muteCheck(server, app, g, "m") == ErrorCode.senderMuted.code)
            #expect(Self.muteCheck(server, app, g, "a") == nil)
            let list = try Self.asUser(app, try app.token(for: "m2"), .get, "/v1/groups/\(g)/muted_members")
            #expect(list.json?["items"]?.arrayValue?.compactMap { $0["user_id"]?.stringValue } == ["m", "m2"], "\(list.text)")
            let page = try app.request(.get, "/v1/groups/\(g)/muted_members?limit=1")
            let next = page.json?["next_cursor"]?.stringValue ?? ""
            #expect(try app.request(.get, "/v1/groups/\(g)/muted_members?limit=1&cursor=\(next)").json?["items"]?[0]?["user_id"] == .string("m2"))

            // Unmute m2; m's mute runs out on the clock.
            #expect(Self.codes(try app.request(.post, "/v1/groups/\(g)/members/mute", json: #"{"user_ids":["m2"],"duration_s":0}"#)) == [nil])
            try server.advanceClock(ms: 60_001)
            #expect(try Self.member(app, g, "m")?["muted_until"] == .int(0))
            #expect(Self.muteCheck(server, app, g, "m") == nil)
            #expect(try app.request(.get, "/v1/groups/\(g)/muted_members").json?["items"]?.arrayValue?.isEmpty == true)
            // Permanent mute, request-level errors.
            let forever = try app.request(.post, "/v1/groups/\(g)/members/mute", json: #"{"operator":"o","user_ids":["a"],"duration_s":-1}"#)
            #expect(Self.results(forever)[0]["data"]?["muted_until"] == .int(-1))
            Self.expectProblem(
                try app.request(.post, "/v1/groups/\(g)/members/mute", json: #"{"operator":"m","user_ids":["m2"],"duration_s":60}"#), 403,
                .groupPermissionDenied)
            Self.expectInvalid(
                try app.request(.post, "/v1/groups/\(g)/members/mute", json: #"{"user_ids":["m2"],"duration_s":604801}"#), field: "body.duration_s")
            Self.expectInvalid(try app.request(.post, "/v1/groups/\(g)/members/mute", json: #"{"user_ids":["m2"]}"#), field: "body.duration_s")
        }
    }

    @Test func attributeLimitsPerKeyInRequestOrder() throws {
        try withApp(testClock: true) { server, app in
            for id in ["o", "m", "x"] { try app.createUser(id) }
            let g = try Self.createGroup(
                app, "o", members: ["m"], extra: #","attributes":{"k1":"v","k2":"v","k3":"v","k4":"v","k5":"v","k6":"v","k7":"v","k8":"v"}"#)

            let key17 = String(repeating: "k", count: 17)
            let r = try app.request(
                .post, "/v1/groups/\(g)/attributes",
                json: "{\"operator\":\"m\",\"attributes\":{\"k9\":\"v\",\"\(key17)\":\"v\",\"k10\":\"v\",\"k11\":\"v\",\"k1\":\"new\",\"\":\"v\"}}")
            #expect(r.status == 200, "\(r.text)")
            #expect(Self.results(r).map { $0["id"]?.stringValue } == ["k9", key17, "k10", "k11", "k1", ""])
            #expect(
                Self.codes(r) == [
                    nil, ErrorCode.groupAttributeKeyTooLong.code, nil, ErrorCode.groupAttributeCountExceeded.code, nil,
                    ErrorCode.groupAttributeCountExceeded.code,
                ])
            let event = try Self.events(app, "group.attributes_updated").last
            #expect(event?["data"]?["action"] == .string("set"))
            #expect(event?["data"]?["attributes"]?.objectValue?.keys == ["k9", "k10", "k1"])
            #expect(event?["data"]?["operator"] == .string("m"))

            // Value and total limits (10 keys now: free two).
            let del = try app.request(.post, "/v1/groups/\(g)/attributes/delete", json: #"{"keys":["k9","k10","nope","k9"]}"#)
            #expect(Self.codes(del) == [nil, nil, ErrorCode.groupAttributeNotFound.code, ErrorCode.invalidParams.code])
            #expect(
                try Self.events(app, "group.attributes_updated").last?["data"]?["attributes"] == .object(["k9": .string(""), "k10": .string("")]))
            let big = String(repeating: "x", count: 1000)
            let values = (1...5).map { "\"k\($0)\":\"\(big)\"" }.joined(separator: ",")
            let r2 = try app.request(
                .post, "/v1/groups/\(g)/attributes",
                json: "{\"attributes\":{\"k6\":\"\(String(repeating: "y", count: 1025))\",\(values),\"k7\":\"\(big)\"}}")
            #expect(
                Self.codes(r2) == [ErrorCode.groupAttributeValueTooLong.code, nil, nil, nil, nil, nil, ErrorCode.groupAttributesTotalExceeded.code],
                "\(r2.text)")

            // Reads: app or members; `keys` filters.
            let read = try Self.asUser(app, try app.token(for: "m"), .get, "/v1/groups/\(g)/attributes?keys=k8,k1")
            #expect(read.json?["attributes"]?.objectValue?.keys.sorted() == ["k1", "k8"], "\(read.text)")
            #expect(try app.request(.get, "/v1/groups/\(g)/attributes").json?["attributes"]?.objectValue?.count == 8)
            Self.expectProblem(try Self.asUser(app, try app.token(for: "x"), .get, "/v1/groups/\(g)/attributes"), 403, .notGroupMember)
            let eleven = (1...11).map { "\"z\($0)\":\"v\"" }.joined(separator: ",")
            Self.expectInvalid(try app.request(.post, "/v1/groups/\(g)/attributes", json: "{\"attributes\":{\(eleven)}}"), field: "body.attributes")
            Self.expectInvalid(try app.request(.post, "/v1/groups/\(g)/attributes", json: #"{"attributes":{}}"#), field: "body.attributes")
            Self.expectProblem(
                try app.request(.post, "/v1/groups/\(g)/attributes", json: #"{"operator":"x","attributes":{"a":"b"}}"#), 403, .notGroupMember)
        }
    }
}
