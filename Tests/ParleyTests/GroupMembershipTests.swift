import Dispatch
import ParleyHTTP
import ParleyPostgres
import ParleyTesting
import Synchronization
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Membership rules (docs/groups.md#lifecycle-and-membership, docs/groups.md#big-groups): owner continuity, dismissal
/// by the last leaver, concurrent joins, big groups and walking a 2,000-member list.
@Suite("Group membership", .inProcess)
struct GroupMembershipTests: GroupTestSupport {
    @Test func joinAndOwnerContinuity() throws {
        try withApp(testClock: true) { server, app in
            for id in ["o", "x1", "x2", "x3", "y"] { try app.createUser(id) }
            let g = try Self.createGroup(app, "o")
            for id in ["x1", "x2", "x3"] {
                let j = try app.request(.post, "/v1/groups/\(g)/join", json: "{\"user_id\":\"\(id)\"}")
                #expect(j.status == 200, "\(j.text)")
                #expect(j.json?["enter_type"] == .string("joined"))
                #expect(j.json?["operated_by"] == .null)
                try server.advanceClock(ms: 10)
            }
            Self.expectProblem(try app.request(.post, "/v1/groups/\(g)/join", json: #"{"user_id":"x1"}"#), 409, .alreadyGroupMember)
            Self.expectProblem(try app.request(.post, "/v1/groups/\(g)/join", json: #"{"user_id":"ghost"}"#), 404, .userNotFound)
            Self.expectProblem(try app.request(.post, "/v1/groups/nope/join", json: #"{"user_id":"y"}"#), 404, .groupNotFound)
            let joined = try Self.events(app, "group.member_joined")
            #expect(joined.count == 3)
            #expect(joined.first?["data"]?["via"] == .string("join"))
            // x3 and x2 become admins: x2 joined earlier, so it is the successor even though x1 joined first.
            try Self.setRole(app, g, "x3", 2)
            try Self.setRole(app, g, "x2", 2)
            let leave = try app.request(.post, "/v1/groups/\(g)/leave", json: #"{"user_id":"o"}"#)
            #expect(leave.status == 200, "\(leave.text)")
            #expect(leave.json?["new_owner_id"] == .string("x2"))
            #expect(try Self.group(app, g)?["owner_id"] == .string("x2"))
            #expect(try Self.member(app, g, "x2")?["role"] == .int(1))
            let left = try Self.events(app, "group.member_left").last
            #expect(left?["data"]?["reason"] == .string("left"))
            #expect(left?["data"]?["new_owner_id"] == .string("x2"))
            let updated = try Self.events(app, "group.member_updated").last
            #expect(updated?["data"]?["members"]?[0]?["user_id"] == .string("x2"))
            #expect(updated?["data"]?["changed"] == .array([.string("role")]))

            // No admin left: the earliest member (x1) takes over; a user token leaves for itself.
            try Self.setRole(app, g, "x3", 3)
            let t2 = try app.token(for: "x2")
            let l2 = try Self.asUser(app, t2, .post, "/v1/groups/\(g)/leave", json: "{}")
            #expect(l2.json?["new_owner_id"] == .string("x1"), "\(l2.text)")
            // A non-owner leaving moves nothing.
            #expect(try app.request(.post, "/v1/groups/\(g)/leave", json: #"{"user_id":"x3"}"#).json?["new_owner_id"] == .null)
            // The last member leaving dismisses the group.
            #expect(try app.request(.post, "/v1/groups/\(g)/leave", json: #"{"user_id":"x1"}"#).status == 200)
            let after = try Self.group(app, g)
            #expect(after?["dismissed_at"]?.intValue != nil)
            #expect(after?["member_count"] == .int(0))
            #expect(try Self.events(app, "group.dismissed").count == 1)
        }
    }

    @Test func hardDeleteAppliesOwnerContinuity() throws {
        try withApp(testClock: true) { server, app in
            for id in ["o", "m1", "m2", "solo"] { try app.createUser(id) }
            let g = try Self.createGroup(app, "o", members: ["m1", "m2"])
            let lonely = try Self.createGroup(app, "solo")
            #expect(try app.request(.delete, "/v1/users/o?mode=hard").status == 204)
            let group = try Self.group(app, g)
            #expect(group?["owner_id"] == .string("m1"))
            #expect(group?["member_count"] == .int(2))
            let left = try Self.events(app, "group.member_left").last
            #expect(left?["data"]?["reason"] == .string("deleted"))
            #expect(left?["data"]?["operator"] == .null)
            #expect(left?["data"]?["new_owner_id"] == .string("m1"))
            #expect(try app.request(.delete, "/v1/users/solo?mode=hard").status == 204)
            #expect(try Self.group(app, lonely)?["dismissed_at"]?.intValue != nil)
            // The app itself may kick the owner; continuity applies there too.
            let kick = try app.request(.post, "/v1/groups/\(g)/members/kick", json: #"{"user_ids":["m1"]}"#)
            #expect(Self.codes(kick) == [nil])
            #expect(try Self.group(app, g)?["owner_id"] == .string("m2"))
        }
    }

    @Test func concurrentJoinsNeverExceedMaxMembers() throws {
        try withApp(testClock: true, poolSize: 8) { server, app in
            try app.createUser("o")
            let joiners = (0..<12).map { "j\($0)" }
            for id in joiners { try app.createUser(id) }
            let g = try Self.createGroup(app, "o", extra: #","max_members":5"#)
            let statuses = Mutex<[Int]>([])
            DispatchQueue.concurrentPerform(iterations: joiners.count) { i in
                let r = try? app.request(.post, "/v1/groups/\(g)/join", json: "{\"user_id\":\"\(joiners[i])\"}")
                statuses.withLock { $0.append(r?.status ?? -1) }
                if let r, r.status != 200 { Self.expectProblem(r, 422, .groupFull) }
            }
            let all = statuses.withLock { $0 }
            #expect(all.filter { $0 == 200 }.count == 4)
            #expect(all.filter { $0 == 422 }.count == 8)
            #expect(try Self.group(app, g)?["member_count"] == .int(5))
            let listed = try app.request(.get, "/v1/groups/\(g)/members?limit=100")
            #expect(listed.json?["items"]?.arrayValue?.count == 5)
        }
    }

    @Test func bigGroupRules() throws {
        try withApp(testClock: true, settings: #"{"big_group_threshold":4}"#) { server, app in
            for id in ["o", "a", "m", "j1", "j2"] { try app.createUser(id) }
            let g = try Self.createGroup(app, "o", members: ["a", "m"])
            try Self.setRole(app, g, "a", 2)
            #expect(try Self.group(app, g)?["is_big_group"] == .bool(false))
            // Not big yet: every member hears of a join.
            #expect(try app.request(.post, "/v1/groups/\(g)/join", json: #"{"user_id":"j1"}"#).status == 200)
            #expect(try Self.events(app, "group.member_joined", user: "m").count == 1)
            #expect(try Self.group(app, g)?["is_big_group"] == .bool(false))
            // Big: joins and leaves reach only the affected users, the owner and the admins.
            #expect(try app.request(.post, "/v1/groups/\(g)/join", json: #"{"user_id":"j2"}"#).status == 200)
            #expect(try Self.group(app, g)?["is_big_group"] == .bool(true))
            #expect(try Self.events(app, "group.member_joined", user: "m").count == 1)
            #expect(try Self.events(app, "group.member_joined", user: "a").count == 2)
            #expect(try Self.events(app, "group.member_joined", user: "j2").count == 1)
            #expect(try app.request(.post, "/v1/groups/\(g)/leave", json: #"{"user_id":"j1"}"#).status == 200)
            #expect(try Self.events(app, "group.member_left", user: "m").isEmpty)
            #expect(try Self.events(app, "group.member_left", user: "j1").count == 1)
            #expect(try Self.events(app, "group.member_left", user: "o").count == 1)
            // It never reverts, and member_count stays exact.
            let group = try Self.group(app, g)
            #expect(group?["is_big_group"] == .bool(true))
            #expect(group?["member_count"] == .int(4))
            // Ordinary members may not list the members; admins and the app may.
            Self.expectProblem(try Self.asUser(app, try app.token(for: "m"), .get, "/v1/groups/\(g)/members"), 403, .bigGroupRestricted)
            #expect(try Self.asUser(app, try app.token(for: "a"), .get, "/v1/groups/\(g)/members").status == 200)
            #expect(try app.request(.get, "/v1/groups/\(g)/members").status == 200)
            // Created big.
            let big = try Self.createGroup(app, "o", extra: #","big_group":true"#)
            #expect(try Self.group(app, big)?["is_big_group"] == .bool(true))
        }
    }

    @Test func walkTwoThousandMembersByCursor() throws {
        try withApp(testClock: true) { server, app in
            let ids = (0..<1999).map { "u" + String(String($0 + 10000).dropFirst()) }
            for chunk in stride(from: 0, to: ids.count, by: 100) {
                let users = ids[chunk..<min(chunk + 100, ids.count)].map { "{\"user_id\":\"\($0)\",\"name\":\"N\($0)\"}" }
                let r = try app.request(.post, "/v1/users/import", json: "{\"users\":[\(users.joined(separator: ","))]}")
                #expect(r.status == 200)
            }
            try app.createUser("owner")
            let g = try Self.createGroup(app, "owner")
            for chunk in stride(from: 0, to: ids.count, by: 100) {
                let batch = Array(ids[chunk..<min(chunk + 100, ids.count)])
                let r = try app.request(.post, "/v1/groups/\(g)/members/invite", json: "{\"user_ids\":\(Self.array(batch))}")
                #expect(Self.codes(r).allSatisfy { $0 == nil }, "\(r.text.prefix(300))")
            }
            let group = try Self.group(app, g)
            #expect(group?["member_count"] == .int(2000))
            #expect(group?["is_big_group"] == .bool(true))
            // Full: one more → 422 per item.
            try app.createUser("late")
            #expect(
                Self.codes(try app.request(.post, "/v1/groups/\(g)/members/invite", json: #"{"user_ids":["late"]}"#)) == [ErrorCode.groupFull.code])
            Self.expectProblem(try app.request(.post, "/v1/groups/\(g)/join", json: #"{"user_id":"late"}"#), 422, .groupFull)

            var seen: [String] = []
            var cursor: String?
            var pages = 0
            repeat {
                let r = try app.request(.get, "/v1/groups/\(g)/members?limit=100" + (cursor.map { "&cursor=\($0)" } ?? ""))
                #expect(r.status == 200, "\(r.text.prefix(300))")
                seen += r.json?["items"]?.arrayValue?.compactMap { $0["user_id"]?.stringValue } ?? []
                cursor = r.json?["next_cursor"]?.stringValue
                pages += 1
            } while cursor != nil && pages < 50
            #expect(seen.count == 2000)
            #expect(Set(seen).count == 2000)
            #expect(seen.first == "owner")
            // Filters: role and keywords.
            let owners = try app.request(.get, "/v1/groups/\(g)/members?role=1")
            #expect(owners.json?["items"]?.arrayValue?.compactMap { $0["user_id"]?.stringValue } == ["owner"])
            let q = try app.request(.get, "/v1/groups/\(g)/members?q=nu1234")
            #expect(q.json?["items"]?.arrayValue?.compactMap { $0["user_id"]?.stringValue } == ["u1234"])
        }
    }
}
