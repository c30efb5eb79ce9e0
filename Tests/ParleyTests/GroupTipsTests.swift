import ParleyHTTP
import ParleyPostgres
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Tips messages of group actions (docs/groups.md#tips-messages) and the group conversation entries membership changes
/// write (docs/conversations.md, docs/messages.md#unread-read-state-and-mentions), end to end: history, the event log
/// and the entry rows.
@Suite("Group tips", .inProcess)
struct GroupTipsTests: GroupTestSupport {
    /// The user ids of a tips message's `targets`.
    static func targets(_ message: JSONValue?) -> [String] {
        message?["body"]?["targets"]?.arrayValue?.compactMap { $0["user_id"]?.stringValue } ?? []
    }

    /// `user`'s group entry: its `read_seq` while it follows the group, -1 otherwise (no entry or frozen).
    static func followingReadSeq(_ server: TestServer, _ app: TestApp, _ user: String, _ groupID: String) throws -> Int64 {
        try server.count(
            """
            SELECT read_seq FROM conversations
            WHERE app_id = $1 AND user_id = $2 AND conv_type = 'group' AND conv_id = $3 AND follows_group AND NOT deleted
            """,
            [app.appID, user, groupID])
    }

    /// `user`'s frozen group entry's `last_seq`, -1 when the entry is missing or still follows the group.
    static func frozenLastSeq(_ server: TestServer, _ app: TestApp, _ user: String, _ groupID: String) throws -> Int64 {
        try server.count(
            """
            SELECT last_seq FROM conversations
            WHERE app_id = $1 AND user_id = $2 AND conv_type = 'group' AND conv_id = $3 AND NOT follows_group
            """,
            [app.appID, user, groupID])
    }

    /// The seqs of the group's tips messages in `user`'s event log view (members at write time).
    static func seenTips(_ app: TestApp, _ user: String, _ groupID: String) throws -> [Int64] {
        try Self.events(app, "message.sent", user: user, group: groupID).compactMap { event -> Int64? in
            guard event["data"]?["message"]?["type"] == .int(32) else { return nil }
            return event["data"]?["message"]?["seq"]?.intValue
        }
    }

    @Test func membershipChangesWriteTipsAndEntries() throws {
        try withApp(testClock: true) { server, app in
            for id in ["o", "a", "b", "c", "d"] { try app.createUser(id, name: "N" + id) }

            // Create: event 1 at seq 1, from the owner, targets = the members that joined.
            let g = try Self.createGroup(app, "o", members: ["a", "b", "ghost"])
            var tips = try Self.tips(app, g)
            #expect(tips.count == 1)
            #expect(tips.first?["seq"] == .int(1))
            #expect(tips.first?["from"] == .string("o"))
            #expect(tips.first?["conversation_type"] == .string("group"))
            #expect(tips.first?["to"] == .string(g))
            #expect(tips.first?["body"]?["event"] == .int(1))
            #expect(tips.first?["body"]?["operator"]?["user_id"] == .string("o"))
            #expect(tips.first?["body"]?["operator"]?["name"] == .string("No"))
            #expect(tips.first?["body"]?["targets"]?.arrayValue?.first?["name"] == .string("Na"))
            #expect(Self.targets(tips.first) == ["a", "b"])
            #expect(tips.first?["body"]?["change"] == .null)
            for user in ["o", "a", "b"] { #expect(try Self.followingReadSeq(server, app, user, g) == 1) }

            // Join: event 3 by the joiner; its entry starts after its own join tips.
            let joined = try app.request(.post, "/v1/groups/\(g)/join", json: #"{"user_id":"c"}"#)
            #expect(joined.status == 200, "\(joined.text)")
            tips = try Self.tips(app, g)
            #expect(tips.last?["seq"] == .int(2))
            #expect(tips.last?["body"]?["event"] == .int(3))
            #expect(tips.last?["from"] == .string("c"))
            #expect(Self.targets(tips.last) == ["c"])
            #expect(try Self.followingReadSeq(server, app, "c", g) == 2)

            // Invite: event 4 by the inviting member.
            let invited = try app.request(.post, "/v1/groups/\(g)/members/invite", json: #"{"operator":"a","user_ids":["d"]}"#)
            #expect(Self.codes(invited) == [nil], "\(invited.text)")
            tips = try Self.tips(app, g)
            #expect(tips.last?["body"]?["event"] == .int(4))
            #expect(tips.last?["from"] == .string("a"))
            #expect(tips.last?["body"]?["operator"]?["user_id"] == .string("a"))
            #expect(Self.targets(tips.last) == ["d"])
            #expect(try Self.followingReadSeq(server, app, "d", g) == 3)

            // Kick: event 6 with the kicked users only; the kicked entry is frozen at the head before the kick tips.
            let kicked = try app.request(.post, "/v1/groups/\(g)/members/kick", json: #"{"operator":"o","user_ids":["b","ghost"]}"#)
            #expect(Self.codes(kicked) == [nil, ErrorCode.notGroupMember.code], "\(kicked.text)")
            tips = try Self.tips(app, g)
            #expect(tips.last?["seq"] == .int(4))
            #expect(tips.last?["body"]?["event"] == .int(6))
            #expect(Self.targets(tips.last) == ["b"])
            #expect(try Self.frozenLastSeq(server, app, "b", g) == 3)
            #expect(try Self.followingReadSeq(server, app, "b", g) == -1)
            // The kicked user saw every tips message up to its kick, not the kick's own.
            #expect(try Self.seenTips(app, "b", g) == [1, 2, 3])
            #expect(try Self.seenTips(app, "c", g) == [2, 3, 4])

            // A kick batch none of whose items succeeded writes no tips.
            let failed = try app.request(.post, "/v1/groups/\(g)/members/kick", json: #"{"operator":"o","user_ids":["b","o"]}"#)
            #expect(Self.codes(failed) == [ErrorCode.notGroupMember.code, ErrorCode.invalidParams.code], "\(failed.text)")
            #expect(try Self.tips(app, g).count == 4)

            // The owner leaves: one event 5 with the ownership change (type 10), no separate event 8.
            let left = try app.request(.post, "/v1/groups/\(g)/leave", json: #"{"user_id":"o"}"#)
            #expect(left.json?["new_owner_id"] == .string("a"), "\(left.text)")
            tips = try Self.tips(app, g)
            #expect(tips.count == 5)
            #expect(tips.last?["body"]?["event"] == .int(5))
            #expect(tips.last?["from"] == .string("o"))
            #expect(Self.targets(tips.last) == ["o"])
            #expect(tips.last?["body"]?["change"]?["type"] == .int(10))
            #expect(tips.last?["body"]?["change"]?["new_owner_id"] == .string("a"))
            #expect(try Self.frozenLastSeq(server, app, "o", g) == 4)

            // Every tips message is one message.sent event, after the membership event of its request.
            let sent = try Self.events(app, "message.sent", group: g)
            #expect(sent.map { $0["data"]?["message"]?["seq"]?.intValue } == [1, 2, 3, 4, 5])
            #expect(sent.allSatisfy { $0["data"]?["message"]?["type"] == .int(32) })
            let log = try app.events(query: "group_id=\(g)").compactMap { $0["type"]?.stringValue }
            #expect(
                log == [
                    "group.created", "message.sent", "group.member_joined", "message.sent", "group.member_joined", "message.sent",
                    "group.member_left", "message.sent", "group.member_left", "message.sent", "group.member_updated",
                ])

            // Re-joining revives the frozen entry at the current head.
            #expect(try app.request(.post, "/v1/groups/\(g)/join", json: #"{"user_id":"b"}"#).status == 200)
            #expect(try Self.followingReadSeq(server, app, "b", g) == 6)
        }
    }

    @Test func groupAndMemberChangesWriteTips() throws {
        try withApp(testClock: true) { server, app in
            for id in ["o", "a", "m"] { try app.createUser(id, name: "N" + id) }
            let g = try Self.createGroup(app, "o", members: ["a", "m"])

            // One group field: its own change type; several: type 1; group_data_flag bits 1 name, 2 notice, 4 avatar.
            #expect(try app.request(.patch, "/v1/groups/\(g)", json: #"{"operator":"o","name":"New"}"#).status == 200)
            var change = try Self.tips(app, g).last?["body"]?["change"]
            #expect(try Self.tips(app, g).last?["body"]?["event"] == .int(7))
            #expect(change?["type"] == .int(3))
            #expect(change?["group_data_flag"] == .int(1))
            #expect(change?["name"] == .string("New"))
            #expect(change?["notice"] == nil)
            #expect(try app.request(.patch, "/v1/groups/\(g)", json: #"{"operator":"o","notice":"n"}"#).status == 200)
            #expect(try Self.tips(app, g).last?["body"]?["change"]?["type"] == .int(2))
            let both = try app.request(.patch, "/v1/groups/\(g)", json: #"{"operator":"o","notice":"n2","avatar_url":"https://x.test/a.png"}"#)
            #expect(both.status == 200, "\(both.text)")
            change = try Self.tips(app, g).last?["body"]?["change"]
            #expect(change?["type"] == .int(1))
            #expect(change?["group_data_flag"] == .int(6))
            #expect(change?["notice"] == .string("n2"))
            #expect(change?["avatar_url"] == .string("https://x.test/a.png"))
            #expect(Self.targets(try Self.tips(app, g).last) == [])
            // Other fields write none.
            #expect(try app.request(.patch, "/v1/groups/\(g)", json: #"{"operator":"o","extended_data":"x","join_mode":"auth"}"#).status == 200)
            #expect(try Self.tips(app, g).count == 4)

            // Group mute: event 7, change type 5 with the mute object.
            let mute = try app.request(.put, "/v1/groups/\(g)/mute", json: #"{"operator":"o","mode":"normal","duration_s":60}"#)
            #expect(mute.status == 200, "\(mute.text)")
            var last = try Self.tips(app, g).last
            #expect(last?["body"]?["event"] == .int(7))
            #expect(last?["from"] == .string("o"))
            #expect(last?["body"]?["change"]?["type"] == .int(5))
            #expect(last?["body"]?["change"]?["mute"]?["mode"] == .string("normal"))

            // Role: event 8 type 11.
            let role = try app.request(.put, "/v1/groups/\(g)/members/a/role", json: #"{"operator":"o","role":2}"#)
            #expect(role.status == 200, "\(role.text)")
            last = try Self.tips(app, g).last
            #expect(last?["body"]?["event"] == .int(8))
            #expect(last?["body"]?["change"]?["type"] == .int(11))
            #expect(last?["body"]?["change"]?["role"] == .int(2))
            #expect(Self.targets(last) == ["a"])
            // A nickname change writes none.
            #expect(try app.request(.put, "/v1/groups/\(g)/members/m/nickname", json: #"{"operator":"o","nickname":"mm"}"#).status == 200)
            #expect(try Self.tips(app, g).count == 6)

            // Member mute by the app without operator: from the owner, operator null; event 8 type 12.
            let muted = try app.request(.post, "/v1/groups/\(g)/members/mute", json: #"{"user_ids":["m","zz"],"duration_s":60}"#)
            #expect(Self.codes(muted) == [nil, ErrorCode.notGroupMember.code], "\(muted.text)")
            let until = Self.results(muted)[0]["data"]?["muted_until"]
            last = try Self.tips(app, g).last
            #expect(last?["from"] == .string("o"))
            #expect(last?["body"]?["operator"] == .null)
            #expect(last?["body"]?["change"]?["type"] == .int(12))
            #expect(last?["body"]?["change"]?["muted_until"] == until)
            #expect(Self.targets(last) == ["m"])

            // Transfer: event 8 type 10.
            let transfer = try app.request(.post, "/v1/groups/\(g)/transfer_owner", json: #"{"operator":"o","to_user_id":"a"}"#)
            #expect(transfer.status == 200, "\(transfer.text)")
            last = try Self.tips(app, g).last
            #expect(last?["body"]?["event"] == .int(8))
            #expect(last?["body"]?["change"]?["type"] == .int(10))
            #expect(last?["body"]?["change"]?["new_owner_id"] == .string("a"))
            let head = try Self.tips(app, g).count
            #expect(head == 8)

            // Dismiss: event 2 to the members at dismissal, then group.dismissed; every entry is frozen at the head.
            #expect(try app.request(.post, "/v1/groups/\(g)/dismiss", json: #"{"operator":"a"}"#).status == 200)
            let log = try app.events(query: "group_id=\(g)")
            let types = log.compactMap { $0["type"]?.stringValue }
            #expect(types.suffix(2) == ["message.sent", "group.dismissed"])
            let dismissal = log.dropLast().last?["data"]?["message"]
            #expect(dismissal?["seq"] == .int(Int64(head + 1)))
            #expect(dismissal?["body"]?["event"] == .int(2))
            #expect(dismissal?["body"]?["change"] == .null)
            #expect(Self.targets(dismissal) == [])
            #expect(try Self.seenTips(app, "m", g).last == Int64(head + 1))
            for user in ["o", "a", "m"] { #expect(try Self.frozenLastSeq(server, app, user, g) == Int64(head + 1)) }
        }
    }

    @Test func bigGroupsWriteNoMembershipTips() throws {
        try withApp(testClock: true) { server, app in
            for id in ["o", "a", "j", "i"] { try app.createUser(id) }
            let g = try Self.createGroup(app, "o", members: ["a"], extra: #","big_group":true"#)
            #expect(try Self.tips(app, g).map { $0["body"]?["event"] } == [.int(1)])

            #expect(try app.request(.post, "/v1/groups/\(g)/join", json: #"{"user_id":"j"}"#).status == 200)
            #expect(Self.codes(try app.request(.post, "/v1/groups/\(g)/members/invite", json: #"{"user_ids":["i"]}"#)) == [nil])
            #expect(try app.request(.post, "/v1/groups/\(g)/leave", json: #"{"user_id":"a"}"#).status == 200)
            #expect(Self.codes(try app.request(.post, "/v1/groups/\(g)/members/kick", json: #"{"operator":"o","user_ids":["i"]}"#)) == [nil])
            #expect(try Self.tips(app, g).count == 1)
            // Entries still follow and freeze.
            #expect(try Self.followingReadSeq(server, app, "j", g) == 1)
            #expect(try Self.frozenLastSeq(server, app, "a", g) == 1)
            #expect(try Self.frozenLastSeq(server, app, "i", g) == 1)
            // Other actions still write theirs.
            #expect(try app.request(.patch, "/v1/groups/\(g)", json: #"{"name":"Big"}"#).status == 200)
            #expect(try Self.tips(app, g).last?["from"] == .string("o"))
            #expect(try Self.tips(app, g).count == 2)
        }
    }

    @Test func acceptedApplicationsWriteJoinAndInviteTips() throws {
        try withApp(testClock: true) { server, app in
            for id in ["o", "a", "j", "i"] { try app.createUser(id) }
            let g = try Self.createGroup(app, "o", members: ["a"], extra: #","join_mode":"auth","be_invite_mode":"auth""#)
            try Self.setRole(app, g, "a", 2)

            // A join application accepted by an admin: event 3 by the approver (seq 3, after create and the role).
            let applied = try app.request(.post, "/v1/groups/\(g)/join", json: #"{"user_id":"j"}"#)
            #expect(applied.status == 202, "\(applied.text)")
            #expect(try Self.tips(app, g).count == 2)
            let jid = applied.json?["application_id"]?.stringValue ?? ""
            #expect(try app.request(.post, "/v1/group_applications/\(jid)/accept", json: #"{"operator":"a"}"#).status == 200)
            var last = try Self.tips(app, g).last
            #expect(last?["body"]?["event"] == .int(3))
            #expect(last?["from"] == .string("a"))
            #expect(Self.targets(last) == ["j"])
            #expect(try Self.followingReadSeq(server, app, "j", g) == 3)

            // An invite application accepted by the invitee: event 4 by the inviter.
            let invited = try app.request(.post, "/v1/groups/\(g)/members/invite", json: #"{"operator":"a","user_ids":["i"]}"#)
            let iid = Self.results(invited).first?["data"]?["application_id"]?.stringValue ?? ""
            #expect(try Self.tips(app, g).count == 3)
            #expect(try Self.asUser(app, try app.token(for: "i"), .post, "/v1/group_applications/\(iid)/accept", json: "{}").status == 200)
            last = try Self.tips(app, g).last
            #expect(last?["body"]?["event"] == .int(4))
            #expect(last?["from"] == .string("a"))
            #expect(Self.targets(last) == ["i"])
            #expect(try Self.followingReadSeq(server, app, "i", g) == 4)
        }
    }
}
