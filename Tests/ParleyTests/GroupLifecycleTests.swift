import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Group lifecycle and the membership reads (docs/groups.md#lifecycle-and-membership) end to end.
@Suite("Group lifecycle", .inProcess)
struct GroupLifecycleTests: GroupTestSupport {
    @Test func createReadUpdateAndList() throws {
        try withApp(testClock: true) { server, app in
            for id in ["o", "m1", "m2", "a"] { try app.createUser(id, name: "N" + id) }

            let r = try app.request(
                .post, "/v1/groups",
                json: """
                    {"group_id":"g1","name":"Team Alpha","notice":"hi","operator":"o","members":["m1","m2","o","ghost","m1","bad/id"],
                     "attributes":{"k":"v"},"join_mode":"auth"}
                    """)
            #expect(r.status == 201, "\(r.text)")
            let group = r.json?["group"]
            #expect(group?["group_id"] == .string("g1"))
            #expect(group?["owner_id"] == .string("o"))
            #expect(group?["member_count"] == .int(3))
            #expect(group?["max_members"] == .int(2000))
            #expect(group?["join_mode"] == .string("auth"))
            #expect(group?["invite_mode"] == .string("any"))
            #expect(group?["be_invite_mode"] == .string("none"))
            #expect(group?["is_big_group"] == .bool(false))
            #expect(group?["dismissed_at"] == .null)
            #expect(group?["mute"]?["mode"] == .string("none"))
            #expect(
                Self.codes(r) == [
                    nil, nil, ErrorCode.alreadyGroupMember.code, ErrorCode.userNotFound.code, ErrorCode.invalidParams.code,
                    ErrorCode.invalidParams.code,
                ])
            #expect(Self.results(r).map { $0["index"]?.intValue } == [0, 1, 2, 3, 4, 5])
            let m1 = Self.results(r)[0]["data"]
            #expect(m1?["role"] == .int(3))
            #expect(m1?["enter_type"] == .string("invited"))
            #expect(m1?["operated_by"] == .string("o"))
            #expect(m1?["name"] == .string("Nm1"))

            let created = try Self.events(app, "group.created")
            #expect(created.count == 1)
            #expect(created.first?["data"]?["operator"] == .string("o"))
            #expect(created.first?["data"]?["member_ids"]?.arrayValue?.count == 3)
            #expect(try Self.events(app, "group.created", user: "m2").count == 1)
            #expect(try Self.events(app, "group.created", user: "a").isEmpty)

            // The owner has role 1 and enter_type created.
            #expect(try Self.member(app, "g1", "o")?["role"] == .int(1))
            #expect(try Self.member(app, "g1", "o")?["enter_type"] == .string("created"))
            let count = try app.request(.get, "/v1/groups/g1/member_count")
            #expect(count.json?["member_count"] == .int(3))

            // Generated ids: 20 chars.
            let generated = try Self.createGroup(app, "a")
            #expect(generated.utf8.count == 20)

            // Errors of create.
            Self.expectProblem(try app.request(.post, "/v1/groups", json: #"{"group_id":"g1","operator":"o"}"#), 409, .groupAlreadyExists)
            Self.expectProblem(try app.request(.post, "/v1/groups", json: #"{"operator":"o","max_members":2001}"#), 422, .groupFull)
            Self.expectProblem(
                try app.request(.post, "/v1/groups", json: #"{"operator":"o","max_members":2,"members":["m1","m2"]}"#), 422, .groupFull)
            Self.expectProblem(
                try app.request(.post, "/v1/groups", json: #"{"operator":"o","attributes":{"kkkkkkkkkkkkkkkkk":"v"}}"#), 422,
                .groupAttributeKeyTooLong)
            let eleven = (1...11).map { "\"k\($0)\":\"v\"" }.joined(separator: ",")
            Self.expectProblem(
                try app.request(.post, "/v1/groups", json: "{\"operator\":\"o\",\"attributes\":{\(eleven)}}"), 422, .groupAttributeCountExceeded)
            Self.expectProblem(try app.request(.post, "/v1/groups", json: #"{"operator":"nobody"}"#), 404, .userNotFound)
            Self.expectInvalid(try app.request(.post, "/v1/groups", json: ##"{"group_id":"#g","operator":"o"}"##), field: "body.group_id")
            Self.expectInvalid(try app.request(.post, "/v1/groups", json: #"{"name":"x"}"#), field: "body.operator")
            Self.expectInvalid(
                try app.request(.post, "/v1/groups", json: "{\"operator\":\"o\",\"name\":\"\(String(repeating: "n", count: 51))\"}"),
                field: "body.name")
            let token = try app.token(for: "o")
            Self.expectProblem(try Self.asUser(app, token, .post, "/v1/groups", json: #"{"operator":"m1"}"#), 403, .forbidden)
            let own = try Self.asUser(app, token, .post, "/v1/groups", json: #"{"group_id":"g2","name":"Team Beta"}"#)
            #expect(own.status == 201, "\(own.text)")
            #expect(own.json?["group"]?["owner_id"] == .string("o"))

            // GET with a user token of a non-member (U·r); 404.
            let ta = try app.token(for: "a")
            #expect(try Self.asUser(app, ta, .get, "/v1/groups/g1").status == 200)
            Self.expectProblem(try app.request(.get, "/v1/groups/nope"), 404, .groupNotFound)
            Self.expectProblem(try app.request(.get, "/v1/groups/nope/member_count"), 404, .groupNotFound)

            // PATCH by the owner: changed fields only; nothing changed → no event.
            let p = try app.request(.patch, "/v1/groups/g1", json: #"{"operator":"o","name":"Team A","notice":"hi","max_members":10}"#)
            #expect(p.status == 200, "\(p.text)")
            #expect(p.json?["name"] == .string("Team A"))
            #expect(p.json?["max_members"] == .int(10))
            let updated = try Self.events(app, "group.updated")
            #expect(updated.count == 1)
            #expect(Set(updated.first?["data"]?["changed"]?.arrayValue?.compactMap(\.stringValue) ?? []) == ["name", "max_members"])
            #expect(try app.request(.patch, "/v1/groups/g1", json: #"{"operator":"o","name":"Team A"}"#).status == 200)
            #expect(try Self.events(app, "group.updated").count == 1)
            Self.expectProblem(try app.request(.patch, "/v1/groups/g1", json: #"{"operator":"o","max_members":2}"#), 422, .groupFull)
            Self.expectProblem(try app.request(.patch, "/v1/groups/g1", json: #"{"operator":"a","name":"x"}"#), 403, .notGroupMember)
            Self.expectInvalid(try app.request(.patch, "/v1/groups/g1", json: #"{"join_mode":"open"}"#), field: "body.join_mode")

            // GET /v1/groups: q on the name, created_at desc.
            let listed = try app.request(.get, "/v1/groups?q=team")
            #expect(listed.json?["items"]?.arrayValue?.compactMap { $0["group_id"]?.stringValue } == ["g2", "g1"])
            let one = try app.request(.get, "/v1/groups?q=BETA%20team")
            #expect(one.json?["items"]?.arrayValue?.compactMap { $0["group_id"]?.stringValue } == ["g2"])
            Self.expectProblem(try app.request(.get, "/v1/groups?cursor=bogus"), 400, .invalidCursor)
            Self.expectProblem(try Self.asUser(app, ta, .get, "/v1/groups"), 403, .forbidden)

            // The user's groups, joined_at desc.
            let mine = try app.request(.get, "/v1/users/o/groups")
            #expect(mine.status == 200, "\(mine.text)")
            let items = mine.json?["items"]?.arrayValue ?? []
            #expect(items.compactMap { $0["group"]?["group_id"]?.stringValue }.sorted() == ["g1", "g2"])
            #expect(items.first?["role"] == .int(1))
            #expect(items.first?["notification_status"] == .string("notify"))
            #expect(items.first?["alias"] == .string(""))
            Self.expectProblem(try Self.asUser(app, ta, .get, "/v1/users/o/groups"), 403, .forbidden)
        }
    }

    @Test func dismissedGroupRejectsMutationsButAnswersGet() throws {
        try withApp(testClock: true) { server, app in
            for id in ["o", "m", "x"] { try app.createUser(id) }
            let g = try Self.createGroup(app, "o", members: ["m"])
            Self.expectProblem(try app.request(.post, "/v1/groups/\(g)/dismiss", json: #"{"operator":"m"}"#), 403, .groupPermissionDenied)
            let d = try app.request(.post, "/v1/groups/\(g)/dismiss", json: #"{"operator":"o"}"#)
            #expect(d.status == 200, "\(d.text)")
            #expect(d.json?["dismissed_at"]?.intValue != nil)
            let dismissed = try Self.events(app, "group.dismissed")
            #expect(dismissed.count == 1)
            #expect(dismissed.first?["data"]?["operator"] == .string("o"))
            #expect(try Self.events(app, "group.dismissed", user: "m").count == 1)

            let get = try app.request(.get, "/v1/groups/\(g)")
            #expect(get.status == 200)
            #expect(get.json?["dismissed_at"]?.intValue != nil)

            let mutations: [(HTTPMethod, String, String)] = [
                (.patch, "/v1/groups/\(g)", #"{"operator":"o","name":"x"}"#),
                (.post, "/v1/groups/\(g)/dismiss", #"{"operator":"o"}"#),
                (.post, "/v1/groups/\(g)/join", #"{"user_id":"x"}"#),
                (.post, "/v1/groups/\(g)/leave", #"{"user_id":"m"}"#),
                (.post, "/v1/groups/\(g)/members/invite", #"{"operator":"o","user_ids":["x"]}"#),
                (.post, "/v1/groups/\(g)/members/kick", #"{"operator":"o","user_ids":["m"]}"#),
                (.post, "/v1/groups/\(g)/transfer_owner", #"{"operator":"o","to_user_id":"m"}"#),
                (.put, "/v1/groups/\(g)/members/m/role", #"{"operator":"o","role":2}"#),
                (.put, "/v1/groups/\(g)/members/m/nickname", #"{"operator":"o","nickname":"n"}"#),
                (.put, "/v1/groups/\(g)/mute", #"{"operator":"o","mode":"all","duration_s":-1}"#),
                (.post, "/v1/groups/\(g)/members/mute", #"{"operator":"o","user_ids":["m"],"duration_s":60}"#),
                (.post, "/v1/groups/\(g)/attributes", #"{"operator":"o","attributes":{"k":"v"}}"#),
                (.post, "/v1/groups/\(g)/attributes/delete", #"{"operator":"o","keys":["k"]}"#),
            ]
            for (method, path, body) in mutations {
                Self.expectProblem(try app.request(method, path, json: body), 409, .groupDismissed, "\(method) \(path)")
            }
            #expect(Self.muteCheck(server, app, g, "m") == ErrorCode.groupDismissed.code)
            // Dismissed groups are listed only on request, and their id stays taken.
            #expect(try app.request(.get, "/v1/groups").json?["items"]?.arrayValue?.isEmpty == true)
            #expect(try app.request(.get, "/v1/groups?include_dismissed=true").json?["items"]?.arrayValue?.count == 1)
            Self.expectProblem(try app.request(.post, "/v1/groups", json: "{\"group_id\":\"\(g)\",\"operator\":\"o\"}"), 409, .groupAlreadyExists)
        }
    }

    @Test func memberChangesTransferRoleNickname() throws {
        try withApp(testClock: true) { server, app in
            for id in ["o", "a", "m", "x"] { try app.createUser(id) }
            let g = try Self.createGroup(app, "o", members: ["a", "m"])

            let role = try app.request(.put, "/v1/groups/\(g)/members/a/role", json: #"{"operator":"o","role":2}"#)
            #expect(role.status == 200, "\(role.text)")
            #expect(role.json?["role"] == .int(2))
            let roleEvents = try Self.events(app, "group.member_updated")
            #expect(roleEvents.last?["data"]?["changed"] == .array([.string("role")]))
            Self.expectInvalid(try app.request(.put, "/v1/groups/\(g)/members/a/role", json: #"{"operator":"o","role":1}"#), field: "body.role")
            Self.expectProblem(try app.request(.put, "/v1/groups/\(g)/members/x/role", json: #"{"operator":"o","role":3}"#), 403, .notGroupMember)

            let nick = try app.request(.put, "/v1/groups/\(g)/members/m/nickname", json: #"{"operator":"m","nickname":"Em"}"#)
            #expect(nick.status == 200, "\(nick.text)")
            #expect(nick.json?["nickname"] == .string("Em"))
            #expect(try Self.events(app, "group.member_updated").last?["data"]?["changed"] == .array([.string("nickname")]))

            let t = try app.request(.post, "/v1/groups/\(g)/transfer_owner", json: #"{"operator":"o","to_user_id":"m"}"#)
            #expect(t.status == 200, "\(t.text)")
            #expect(t.json?["owner_id"] == .string("m"))
            #expect(try Self.member(app, g, "o")?["role"] == .int(3))
            #expect(try Self.member(app, g, "m")?["role"] == .int(1))
            let transfer = try Self.events(app, "group.member_updated").last
            #expect(transfer?["data"]?["members"]?.arrayValue?.count == 2)
            Self.expectProblem(
                try app.request(.post, "/v1/groups/\(g)/transfer_owner", json: #"{"operator":"m","to_user_id":"x"}"#), 403, .notGroupMember)
            Self.expectProblem(try app.request(.get, "/v1/groups/\(g)/members/x"), 403, .notGroupMember)
            let tx = try app.token(for: "x")
            Self.expectProblem(try Self.asUser(app, tx, .get, "/v1/groups/\(g)/members"), 403, .notGroupMember)
            Self.expectProblem(try Self.asUser(app, tx, .post, "/v1/groups/\(g)/leave", json: "{}"), 403, .notGroupMember)
            Self.expectProblem(
                try Self.asUser(app, tx, .post, "/v1/groups/\(g)/members/kick", json: #"{"operator":"m","user_ids":["o"]}"#), 403, .forbidden)
            Self.expectProblem(
                try Self.asUser(app, tx, .post, "/v1/groups/\(g)/join", json: #"{"skip_checks":true}"#), 403, .forbidden)

            // Kick: self and non-members fail per item; the event names the kicked users.
            let kick = try app.request(.post, "/v1/groups/\(g)/members/kick", json: #"{"operator":"m","user_ids":["o","m","x","o"]}"#)
            #expect(kick.status == 200, "\(kick.text)")
            #expect(Self.codes(kick) == [nil, ErrorCode.invalidParams.code, ErrorCode.notGroupMember.code, ErrorCode.invalidParams.code])
            let left = try Self.events(app, "group.member_left").last
            #expect(left?["data"]?["reason"] == .string("kicked"))
            #expect(left?["data"]?["user_ids"] == .array([.string("o")]))
            #expect(try Self.events(app, "group.member_left", user: "o").count == 1)
            Self.expectInvalid(
                try app.request(
                    .post, "/v1/groups/\(g)/members/kick",
                    json: "{\"operator\":\"m\",\"user_ids\":\(Self.array((0..<101).map { "u\($0)" }))}"), field: "body.user_ids")
        }
    }
}
