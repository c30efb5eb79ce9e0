import ParleyHTTP
import ParleyPostgres
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Join and invite applications (docs/groups.md#applications) with their expiry on the test clock.
@Suite("Group applications", .inProcess)
struct GroupApplicationTests: GroupTestSupport {
    @Test func joinApplicationAcceptRejectAndLists() throws {
        try withApp(testClock: true) { server, app in
            for id in ["o", "a", "m", "j", "k", "f"] { try app.createUser(id) }
            let g = try Self.createGroup(app, "o", members: ["a", "m"], extra: #","join_mode":"auth""#)
            try Self.setRole(app, g, "a", 2)
            let tj = try app.token(for: "j")

            let applied = try Self.asUser(app, tj, .post, "/v1/groups/\(g)/join", json: #"{"wording":"let me in"}"#)
            #expect(applied.status == 202, "\(applied.text)")
            #expect(applied.json?["type"] == .string("join"))
            #expect(applied.json?["state"] == .string("waiting"))
            #expect(applied.json?["user_id"] == .string("j"))
            #expect(applied.json?["inviter_id"] == .null)
            let id = applied.json?["application_id"]?.stringValue ?? ""
            let again = try Self.asUser(app, tj, .post, "/v1/groups/\(g)/join", json: #"{"wording":"please"}"#)
            #expect(again.status == 202)
            #expect(again.json?["application_id"]?.stringValue == id)
            #expect(again.json?["wording"] == .string("please"))
            let created = try Self.events(app, "group.application_created")
            #expect(created.count == 1)
            for user in ["j", "o", "a"] { #expect(try Self.events(app, "group.application_created", user: user).count == 1) }
            #expect(try Self.events(app, "group.application_created", user: "m").isEmpty)

            // Lists: the group's (owner/admin only) and the user's.
            let listed = try app.request(.get, "/v1/groups/\(g)/applications?type=join&state=waiting")
            #expect(listed.json?["items"]?.arrayValue?.compactMap { $0["application_id"]?.stringValue } == [id])
            #expect(try Self.asUser(app, try app.token(for: "a"), .get, "/v1/groups/\(g)/applications").status == 200)
            Self.expectProblem(try Self.asUser(app, try app.token(for: "m"), .get, "/v1/groups/\(g)/applications"), 403, .groupPermissionDenied)
            Self.expectProblem(try Self.asUser(app, tj, .get, "/v1/groups/\(g)/applications"), 403, .notGroupMember)
            let mine = try Self.asUser(app, tj, .get, "/v1/users/j/group_applications")
            #expect(mine.json?["items"]?.arrayValue?.count == 1)
            #expect(try app.request(.get, "/v1/users/j/group_applications?state=accepted").json?["items"]?.arrayValue?.isEmpty == true)

            // A member may not answer; the applicant neither; an admin accepts.
            Self.expectProblem(try app.request(.post, "/v1/group_applications/\(id)/accept", json: #"{"operator":"m"}"#), 403, .groupPermissionDenied)
            Self.expectProblem(try Self.asUser(app, tj, .post, "/v1/group_applications/\(id)/accept", json: "{}"), 403, .notGroupMember)
            Self.expectProblem(try app.request(.post, "/v1/group_applications/nope/accept", json: #"{"operator":"o"}"#), 404, .notFound)
            Self.expectInvalid(
                try app.request(.post, "/v1/group_applications/\(id)/accept", json: #"{"operator":"a","push":{"badge_increment":100}}"#),
                field: "body.push.badge_increment")
            let accepted = try app.request(
                .post, "/v1/group_applications/\(id)/accept", json: #"{"operator":"a","push":{"title":"welcome"}}"#)
            #expect(accepted.status == 200, "\(accepted.text)")
            #expect(accepted.json?["state"] == .string("accepted"))
            #expect(accepted.json?["operated_by"] == .string("a"))
            let member = try Self.member(app, g, "j")
            #expect(member?["enter_type"] == .string("join_apply"))
            #expect(member?["operated_by"] == .string("a"))
            #expect(try Self.events(app, "group.member_joined").last?["data"]?["via"] == .string("application"))
            #expect(try Self.events(app, "group.application_updated").count == 1)
            Self.expectProblem(try app.request(.post, "/v1/group_applications/\(id)/accept", json: #"{"operator":"o"}"#), 409, .applicationNotWaiting)

            // Reject.
            let k = try app.request(.post, "/v1/groups/\(g)/join", json: #"{"user_id":"k"}"#)
            let kid = k.json?["application_id"]?.stringValue ?? ""
            let rejected = try app.request(.post, "/v1/group_applications/\(kid)/reject", json: #"{"operator":"o"}"#)
            #expect(rejected.json?["state"] == .string("rejected"), "\(rejected.text)")
            Self.expectProblem(
                try app.request(.post, "/v1/group_applications/\(kid)/accept", json: #"{"operator":"o"}"#), 409, .applicationNotWaiting)
            #expect(try Self.member(app, g, "k") == nil)

            // skip_checks joins directly; forbid refuses.
            let skip = try app.request(.post, "/v1/groups/\(g)/join", json: #"{"user_id":"k","skip_checks":true}"#)
            #expect(skip.status == 200, "\(skip.text)")
            #expect(try app.request(.patch, "/v1/groups/\(g)", json: #"{"join_mode":"forbid"}"#).status == 200)
            Self.expectProblem(try app.request(.post, "/v1/groups/\(g)/join", json: #"{"user_id":"f"}"#), 403, .groupJoinForbidden)
        }
    }

    @Test func inviteApplicationsAndExpiry() throws {
        try withApp(testClock: true, settings: #"{"application_expiry_s":60}"#) { server, app in
            for id in ["o", "m", "i1", "i2", "i3", "j"] { try app.createUser(id) }
            let g = try Self.createGroup(app, "o", members: ["m"], extra: #","be_invite_mode":"auth""#)

            // A user inviter gets pending applications; the app invites directly.
            let invite = try app.request(.post, "/v1/groups/\(g)/members/invite", json: #"{"operator":"m","user_ids":["i1","i2","o","zz"]}"#)
            #expect(invite.status == 200, "\(invite.text)")
            #expect(Self.codes(invite) == [nil, nil, ErrorCode.alreadyGroupMember.code, ErrorCode.userNotFound.code])
            let first = Self.results(invite)[0]["data"]
            #expect(first?["state"] == .string("pending"))
            let i1 = first?["application_id"]?.stringValue ?? ""
            let i2 = Self.results(invite)[1]["data"]?["application_id"]?.stringValue ?? ""
            #expect(try Self.events(app, "group.application_created", user: "m").count == 2)
            #expect(try Self.events(app, "group.application_created", user: "o").isEmpty)
            let direct = try app.request(.post, "/v1/groups/\(g)/members/invite", json: #"{"user_ids":["i3"]}"#)
            #expect(Self.results(direct)[0]["data"]?["state"] == .string("joined"))
            #expect(Self.results(direct)[0]["data"]?["application_id"] == .null)
            #expect(try app.request(.get, "/v1/users/m/group_applications?type=invite").json?["items"]?.arrayValue?.count == 2)

            // Only the invitee answers.
            Self.expectProblem(try app.request(.post, "/v1/group_applications/\(i1)/accept", json: #"{"operator":"o"}"#), 403, .groupPermissionDenied)
            let accepted = try Self.asUser(app, try app.token(for: "i1"), .post, "/v1/group_applications/\(i1)/accept", json: "{}")
            #expect(accepted.status == 200, "\(accepted.text)")
            let member = try Self.member(app, g, "i1")
            #expect(member?["enter_type"] == .string("invite_apply"))
            #expect(member?["operated_by"] == .string("m"))

            // A join application and i2's invite expire after application_expiry_s.
            #expect(try app.request(.patch, "/v1/groups/\(g)", json: #"{"join_mode":"auth"}"#).status == 200)
            let join = try app.request(.post, "/v1/groups/\(g)/join", json: #"{"user_id":"j"}"#)
            let jid = join.json?["application_id"]?.stringValue ?? ""
            #expect(join.json?["expires_at"]?.intValue == (join.json?["created_at"]?.intValue ?? 0) + 60_000)
            try server.advanceClock(ms: 60_001)
            let expired = try Self.events(app, "group.application_updated")
            #expect(expired.filter { $0["data"]?["application"]?["state"] == .string("expired") }.count == 2)
            #expect(try Self.events(app, "group.application_updated", user: "o").count == 1)
            let listed = try app.request(.get, "/v1/groups/\(g)/applications?state=expired")
            #expect(Set(listed.json?["items"]?.arrayValue?.compactMap { $0["application_id"]?.stringValue } ?? []) == [jid, i2])
            Self.expectProblem(try app.request(.post, "/v1/group_applications/\(jid)/accept", json: #"{"operator":"o"}"#), 409, .applicationExpired)
            Self.expectProblem(try app.request(.post, "/v1/group_applications/\(i2)/reject", json: #"{"operator":"i2"}"#), 409, .applicationExpired)
            // A new join after expiry makes a new application.
            let again = try app.request(.post, "/v1/groups/\(g)/join", json: #"{"user_id":"j"}"#)
            #expect(again.status == 202)
            #expect(again.json?["application_id"]?.stringValue != jid)
        }
    }

    @Test func expiredBeforeTheTimerReadsExpired() throws {
        try withApp(testClock: true, settings: #"{"application_expiry_s":60}"#) { server, app in
            for id in ["o", "j"] { try app.createUser(id) }
            let g = try Self.createGroup(app, "o", extra: #","join_mode":"auth""#)
            let join = try app.request(.post, "/v1/groups/\(g)/join", json: #"{"user_id":"j"}"#)
            let jid = join.json?["application_id"]?.stringValue ?? ""
            // Move the clock without firing timers by writing the due time into the past (white box).
            try server.app.services.pool.withConnection { db in
                _ = try db.query(sql: "UPDATE group_applications SET expires_at = 1 WHERE application_id = $1", [jid])
            }
            let listed = try app.request(.get, "/v1/users/j/group_applications")
            #expect(listed.json?["items"]?[0]?["state"] == .string("expired"))
            Self.expectProblem(try app.request(.post, "/v1/group_applications/\(jid)/accept", json: #"{"operator":"o"}"#), 409, .applicationExpired)
        }
    }
}
