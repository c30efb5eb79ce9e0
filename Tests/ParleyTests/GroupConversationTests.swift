import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Group conversation entries on the read side (docs/conversations.md, docs/messages.md#unread-read-state-and-mentions)
/// end to end: entries that follow their group's head, unread counts and mentions, order, deletion, `disabled` entries
/// and PATCH.
@Suite("Group conversations", .inProcess)
struct GroupConversationTests: GroupTestSupport {
    typealias M = PeerMessages
    typealias C = ConversationsTests

    /// A text from `from` to group `groupID` with the app key (201 expected); returns its seq.
    @discardableResult
    static func send(_ app: TestApp, _ from: String, _ groupID: String, _ text: String = "hi", extra: String = "") throws -> Int64 {
        let r = try app.request(
            .post, "/v1/messages",
            json: "{\"from\":\"\(from)\",\"conversation_type\":\"group\",\"to\":\"\(groupID)\",\"type\":1,\"body\":{\"text\":\(M.q(text))}"
                + (extra.isEmpty ? "" : "," + extra) + "}")
        #expect(r.status == 201, "\(r.text)")
        return r.json?["seq"]?.intValue ?? -1
    }

    /// `user`'s group entry (nil when absent or deleted).
    static func entry(_ app: TestApp, _ user: String, _ groupID: String) throws -> JSONValue? {
        let r = try app.request(.get, "/v1/users/\(user)/conversations/group/\(groupID)")
        return r.status == 200 ? r.json : nil
    }

    static func read(_ app: TestApp, _ user: String, _ groupID: String, seq: Int64? = nil) throws -> TestResponse {
        try app.request(.post, "/v1/users/\(user)/conversations/group/\(groupID)/read", json: seq.map { "{\"seq\":\($0)}" } ?? "{}")
    }

    static func patch(_ app: TestApp, _ user: String, _ groupID: String, _ json: String) throws -> TestResponse {
        try app.request(.patch, "/v1/users/\(user)/conversations/group/\(groupID)", json: json)
    }

    /// The sum of `unread_count` over every listed entry of `user` matching `query`.
    static func listedUnread(_ app: TestApp, _ user: String, query: String = "") throws -> Int64 {
        try C.list(app, user, query: query).reduce(0) { $0 + ($1["unread_count"]?.intValue ?? 0) }
    }

    @Test func unreadCountsOrderAndTotalsFollowTheGroup() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["o", "a", "b", "p"] { try app.createUser(id, name: "N" + id) }
            let g = try Self.createGroup(app, "o", members: ["a", "b"], extra: #","name":"Team","avatar_url":"https://x.test/t.png""#)

            // Every member has an entry from the start, read up to the group's head (its creation tips included).
            let start = try #require(try Self.entry(app, "a", g))
            let head = try #require(start["last_seq"]?.intValue)
            #expect(start["read_seq"]?.intValue == head)
            #expect(start["unread_count"] == 0, "tips never count")
            #expect(start["name"] == "Team")
            #expect(start["avatar_url"] == "https://x.test/t.png")
            #expect(start["disabled"] == false)
            for user in ["o", "b"] { #expect(try Self.entry(app, user, g)?["read_seq"]?.intValue == head) }

            // Peer traffic first, then group messages by different members.
            for user in ["o", "a", "b"] {
                try server.advanceClock(ms: 5)
                try M.sendText(app, "p", user, "peer")
            }
            try server.advanceClock(ms: 5)
            let s1 = try Self.send(app, "a", g, "1")
            try server.advanceClock(ms: 5)
            let s2 = try Self.send(app, "b", g, "2")
            try server.advanceClock(ms: 5)
            let s3 = try Self.send(app, "o", g, "3")
            #expect([s1, s2, s3] == [head + 1, head + 2, head + 3])

            // Unread = messages of others after the member's read_seq (its own send moved it).
            #expect(try Self.entry(app, "o", g)?["unread_count"] == 0)
            #expect(try Self.entry(app, "a", g)?["unread_count"] == 2)
            #expect(try Self.entry(app, "b", g)?["unread_count"] == 1)
            #expect(try Self.entry(app, "a", g)?["read_seq"]?.intValue == s1)

            // The group message moved the group entry to the top for every member.
            for user in ["o", "a", "b"] {
                let items = try C.list(app, user)
                #expect(C.ids(items) == [g, "p"], "\(user)")
                let top = items[0]
                #expect(top["type"] == "group")
                #expect(top["last_seq"]?.intValue == s3)
                #expect(top["last_message"]?["body"]?["text"] == "3")
                #expect(top["order_key"] == top["last_message"]?["timestamp"])
                #expect(top["disabled"] == false)
            }
            #expect(C.ids(try C.list(app, "p")) == ["b", "a", "o"], "the non-member has no group entry")

            // Cursor walk visits each entry once in order.
            var walked: [String] = []
            var cursor: String?
            repeat {
                let r = try app.request(.get, "/v1/users/a/conversations?limit=1" + (cursor.map { "&cursor=\($0)" } ?? ""))
                walked += C.ids(r.json?["items"]?.arrayValue ?? [])
                cursor = r.json?["next_cursor"]?.stringValue
            } while cursor != nil
            #expect(walked == [g, "p"])

            // Totals equal the sum over the list, with and without filters.
            for query in ["", "?types=group", "?types=peer"] {
                #expect(try C.unread(app, "a", query: query) == (try Self.listedUnread(app, "a", query: query)), "\(query)")
            }
            #expect(try C.unread(app, "a") == 3)
            #expect(try C.unread(app, "a", query: "?types=group") == 2)
            #expect(C.ids(try C.list(app, "o", query: "?unread_only=true")) == ["p"], "o has read its group")
            #expect(C.ids(try C.list(app, "a", query: "?unread_only=true&types=group")) == [g])

            // Reading with a lower seq changes nothing and writes no event.
            let before = try C.unread(app, "a")
            let low = try Self.read(app, "a", g, seq: s1 - 1)
            #expect(low.status == 200, "\(low.text)")
            #expect(low.json?["read_seq"]?.intValue == s1)
            #expect(low.json?["unread_count"] == 2)
            #expect(try C.unread(app, "a") == before)
            #expect(try M.events(app, "conversation.read", audience: "a").isEmpty)

            // Reading up to s2 leaves o's message unread; conversation.read goes to the reader only.
            let mid = try Self.read(app, "a", g, seq: s2)
            #expect(mid.json?["read_seq"]?.intValue == s2)
            #expect(mid.json?["unread_count"] == 1)
            let reads = try M.events(app, "conversation.read", audience: "a")
            #expect(reads.count == 1)
            #expect(reads.first?["data"]?["conversation_type"] == "group")
            #expect(reads.first?["data"]?["conversation_id"] == .string(g))
            #expect(reads.first?["data"]?["read_seq"]?.intValue == s2)
            for other in ["o", "b"] { #expect(try M.events(app, "conversation.read", audience: other).isEmpty, "\(other)") }

            // Reading past the head stops at the head.
            let high = try Self.read(app, "a", g, seq: s3 + 100)
            #expect(high.json?["read_seq"]?.intValue == s3)
            #expect(high.json?["unread_count"] == 0)

            // read_all moves every entry with unread messages, the group one included.
            let all = try app.request(.post, "/v1/users/b/conversations/read_all", json: "{}")
            #expect(all.json?["conversations"] == 2)
            #expect(try Self.entry(app, "b", g)?["read_seq"]?.intValue == s3)
            #expect(try C.unread(app, "b") == 0)

            // A unknown group has no entry.
            Self.expectProblem(try app.request(.get, "/v1/users/a/conversations/group/nosuch"), 404, .conversationNotFound)
            Self.expectProblem(try Self.read(app, "p", g), 404, .conversationNotFound)
        }
    }

    @Test func mentionsGiveItemsUntilReadPastThem() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["o", "a", "b"] { try app.createUser(id) }
            let g = try Self.createGroup(app, "o", members: ["a", "b"])

            let me = try Self.send(app, "o", g, "hey a", extra: #""mentions":{"user_ids":["a","stranger"]}"#)
            let everyone = try Self.send(app, "o", g, "all", extra: #""mentions":{"user_ids":["a"],"all":true}"#)
            try Self.send(app, "o", g, "quiet", extra: #""mentions":{"user_ids":["b"]},"notify_mentioned":false"#)

            let a = try #require(try Self.entry(app, "a", g))
            #expect(a["mention"]?["me"] == true)
            #expect(a["mention"]?["all"] == true)
            let aItems = a["mention"]?["items"]?.arrayValue ?? []
            #expect(aItems.map { $0["seq"]?.intValue } == [me, everyone])
            #expect(aItems.map { $0["type"]?.stringValue } == ["me", "all_and_me"])
            #expect(aItems.first?["from"] == "o")

            let b = try #require(try Self.entry(app, "b", g))
            #expect(b["mention"]?["me"] == false, "notify_mentioned: false writes no mention")
            #expect(b["mention"]?["all"] == true)
            #expect((b["mention"]?["items"]?.arrayValue ?? []).map { $0["type"]?.stringValue } == ["all"])

            // The sender has no mention items for its own messages.
            #expect(try Self.entry(app, "o", g)?["mention"]?["items"] == [])

            // Reading past a mention drops it; reading everything drops them all.
            let partly = try Self.read(app, "a", g, seq: me)
            #expect((partly.json?["mention"]?["items"]?.arrayValue ?? []).map { $0["type"]?.stringValue } == ["all_and_me"])
            #expect(partly.json?["mention"]?["me"] == true)
            let done = try Self.read(app, "a", g)
            #expect(done.json?["mention"] == .object(["me": false, "all": false, "items": []]))
        }
    }

    @Test func kickedMembersKeepADisabledFrozenEntry() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["o", "a", "b", "p"] { try app.createUser(id) }
            let g = try Self.createGroup(app, "o", members: ["a", "b"])
            try server.advanceClock(ms: 5)
            let seen = try Self.send(app, "b", g, "last one a sees")
            try server.advanceClock(ms: 5)

            let kick = try app.request(.post, "/v1/groups/\(g)/members/kick", json: #"{"user_ids":["a"]}"#)
            #expect(Self.codes(kick) == [nil], "\(kick.text)")
            let frozen = try #require(try Self.entry(app, "a", g))
            #expect(frozen["disabled"] == true)
            #expect(frozen["last_seq"]?.intValue == seen)
            #expect(frozen["last_message"]?["body"]?["text"] == "last one a sees")
            #expect(frozen["unread_count"] == 1)
            #expect(frozen["alias"] == "")
            #expect(try Self.entry(app, "b", g)?["disabled"] == false)

            // Later group messages change neither the entry nor its place.
            try server.advanceClock(ms: 5)
            try M.sendText(app, "p", "a", "peer")
            try server.advanceClock(ms: 5)
            let later = try Self.send(app, "b", g, "after the kick")
            let after = try #require(try Self.entry(app, "a", g))
            #expect(after["last_seq"] == frozen["last_seq"])
            #expect(after["order_key"] == frozen["order_key"])
            #expect(after["unread_count"] == 1)
            #expect(C.ids(try C.list(app, "a")) == ["p", g], "the frozen entry does not move up")
            #expect(try C.unread(app, "a") == 2)
            #expect(try Self.entry(app, "b", g)?["last_seq"]?.intValue == later)
            #expect(try Self.entry(app, "o", g)?["unread_count"] == 1, "the kick's tips are o's own (it speaks for the app): read")

            // A disabled entry can still be read, patched (alias is ignored: a is no longer a member) and deleted.
            let read = try Self.read(app, "a", g)
            #expect(read.json?["read_seq"]?.intValue == seen)
            #expect(read.json?["unread_count"] == 0)
            let pinned = try Self.patch(app, "a", g, #"{"pinned":true,"alias":"gone"}"#)
            #expect(pinned.status == 200, "\(pinned.text)")
            #expect(pinned.json?["pinned"] == true)
            #expect(pinned.json?["alias"] == "")
            #expect(pinned.json?["disabled"] == true)
            let updated = try M.events(app, "conversation.updated", audience: "a")
            #expect(updated.last?["data"]?["changed"] == ["pinned"])
            #expect(try app.request(.delete, "/v1/users/a/conversations/group/\(g)").status == 204)
            #expect(try Self.entry(app, "a", g) == nil)
            try Self.send(app, "b", g, "still gone")
            #expect(try Self.entry(app, "a", g) == nil, "a non-member's deleted entry does not come back")
        }
    }

    @Test func dismissalDisablesEveryEntry() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["o", "a"] { try app.createUser(id) }
            let g = try Self.createGroup(app, "o", members: ["a"])
            let last = try Self.send(app, "o", g, "bye")
            let r = try app.request(.post, "/v1/groups/\(g)/dismiss", json: "{}")
            #expect(r.status == 200 || r.status == 204, "\(r.text)")
            for user in ["o", "a"] {
                let entry = try #require(try Self.entry(app, user, g))
                #expect(entry["disabled"] == true, "\(user)")
                #expect((entry["last_seq"]?.intValue ?? 0) >= last, "\(user)")
            }
            #expect(try Self.entry(app, "a", g)?["unread_count"] == 1)
            #expect(try Self.read(app, "a", g).json?["unread_count"] == 0)
        }
    }

    @Test func deletedEntriesReappearOnTheNextGroupMessage() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["o", "a", "b"] { try app.createUser(id) }
            let g = try Self.createGroup(app, "o", members: ["a", "b"])
            let first = try Self.send(app, "b", g, "one")
            try Self.send(app, "o", g, "two", extra: #""mentions":{"user_ids":["a"]}"#)
            let deleteHead = try #require(try Self.entry(app, "a", g)?["last_seq"]?.intValue)
            #expect(try Self.entry(app, "a", g)?["unread_count"] == 2)

            #expect(try app.request(.delete, "/v1/users/a/conversations/group/\(g)?delete_messages=true").status == 204)
            #expect(try Self.entry(app, "a", g) == nil)
            #expect(!C.ids(try C.list(app, "a")).contains(g))
            #expect(try C.unread(app, "a") == 0)
            Self.expectProblem(try app.request(.delete, "/v1/users/a/conversations/group/\(g)"), 404, .conversationNotFound)
            Self.expectProblem(try Self.read(app, "a", g), 404, .conversationNotFound)
            let deleted = try M.events(app, "conversation.deleted", audience: "a")
            #expect(
                deleted.first?["data"]
                    == .object(["user_id": "a", "conversation_type": "group", "conversation_id": .string(g), "delete_messages": true]))
            #expect(first < deleteHead)

            // The next group message brings it back with only that message unread and no old mentions.
            let next = try Self.send(app, "b", g, "three")
            let back = try #require(try Self.entry(app, "a", g))
            #expect(back["unread_count"] == 1)
            #expect(back["last_seq"]?.intValue == next)
            #expect(back["read_seq"]?.intValue == deleteHead)
            #expect(back["cleared_seq"]?.intValue == deleteHead)
            #expect(back["mention"]?["items"] == [])
            #expect(C.ids(try C.list(app, "a")) == [g])
            #expect(try C.unread(app, "a") == 1)

            // Deleting without delete_messages keeps cleared_seq; the entry's own send brings it back read.
            #expect(try app.request(.delete, "/v1/users/a/conversations/group/\(g)").status == 204)
            let own = try Self.send(app, "a", g, "mine")
            let mine = try #require(try Self.entry(app, "a", g))
            #expect(mine["unread_count"] == 0)
            #expect(mine["read_seq"]?.intValue == own)
            #expect(mine["cleared_seq"]?.intValue == deleteHead)
        }
    }

    @Test func patchSetsTheGroupAliasAndNeedsMembership() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["o", "a", "x"] { try app.createUser(id) }
            let g = try Self.createGroup(app, "o", members: ["a"], extra: #","name":"Team""#)

            let r = try Self.patch(app, "a", g, #"{"alias":"My team","pinned":true}"#)
            #expect(r.status == 200, "\(r.text)")
            #expect(r.json?["alias"] == "My team")
            #expect(r.json?["name"] == "Team")
            #expect(r.json?["pinned"] == true)
            let events = try M.events(app, "conversation.updated", audience: "a")
            #expect(events.count == 1)
            let changed = Set((events.first?["data"]?["changed"]?.arrayValue ?? []).compactMap(\.stringValue))
            #expect(changed == ["alias", "pinned"])
            #expect(events.first?["data"]?["conversation"]?["alias"] == "My team")
            #expect(try Self.entry(app, "a", g)?["alias"] == "My team")
            #expect(try Self.entry(app, "o", g)?["alias"] == "", "the alias is a's own")

            // The same value changes nothing and writes no event; a user token may patch its own entry.
            #expect(try Self.patch(app, "a", g, #"{"alias":"My team"}"#).status == 200)
            #expect(try M.events(app, "conversation.updated", audience: "a").count == 1)
            let own = try Self.asUser(app, try app.token(for: "a"), .patch, "/v1/users/a/conversations/group/\(g)", json: #"{"alias":""}"#)
            #expect(own.status == 200, "\(own.text)")
            #expect(own.json?["alias"] == "")

            // Marks apply to group entries like peer ones; a non-member has no entry to mark.
            let marks = try app.request(
                .post, "/v1/users/a/conversations/marks",
                json: "{\"mark\":3,\"enable\":true,\"conversations\":[{\"type\":\"group\",\"id\":\"\(g)\"}]}")
            #expect(Self.codes(marks) == [nil], "\(marks.text)")
            #expect(try Self.entry(app, "a", g)?["marks"] == [3])
            #expect(C.ids(try C.list(app, "a", query: "?marks=3")) == [g])
            let none = try app.request(
                .post, "/v1/users/x/conversations/marks",
                json: "{\"mark\":3,\"enable\":true,\"conversations\":[{\"type\":\"group\",\"id\":\"\(g)\"}]}")
            #expect(Self.codes(none) == [ErrorCode.conversationNotFound.code])

            // Validation: alias on a peer entry, too long an alias.
            Self.expectInvalid(try app.request(.patch, "/v1/users/a/conversations/peer/o", json: #"{"alias":"x"}"#), field: "body.alias")
            Self.expectInvalid(
                try Self.patch(app, "a", g, "{\"alias\":\"\(String(repeating: "n", count: 65))\"}"), field: "body.alias")

            // No entry and not a member (or no such group): 403 not_group_member, nothing created.
            Self.expectProblem(try Self.patch(app, "x", g, #"{"pinned":true}"#), 403, .notGroupMember)
            Self.expectProblem(try Self.patch(app, "x", "nosuch", #"{"pinned":true}"#), 403, .notGroupMember)
            #expect(try Self.entry(app, "x", g) == nil)

            // A member without an entry gets one that follows the group, read up to its head.
            try server.sql("DELETE FROM conversations WHERE app_id = $1 AND user_id = 'a' AND conv_type = 'group'", [app.appID])
            let head = try Self.send(app, "o", g, "while a had no entry")
            let created = try Self.patch(app, "a", g, #"{"notification_status":"do_not_disturb"}"#)
            #expect(created.status == 200, "\(created.text)")
            #expect(created.json?["read_seq"]?.intValue == head)
            #expect(created.json?["last_seq"]?.intValue == head)
            #expect(created.json?["unread_count"] == 0)
            #expect(created.json?["disabled"] == false)
            let next = try Self.send(app, "o", g, "after")
            #expect(try Self.entry(app, "a", g)?["last_seq"]?.intValue == next)
            #expect(try Self.entry(app, "a", g)?["unread_count"] == 1)
            #expect(try C.unread(app, "a", query: "?exclude_dnd=true") == 0)
        }
    }

    /// `muted_until` of a group entry is the owner's member mute, 0 once it expires.
    @Test func groupEntriesShowTheMembersMute() throws {
        try withApp(testClock: true) { server, app in
            for u in ["o", "m"] { try app.createUser(u) }
            let g = try Self.createGroup(app, "o", members: ["m"])
            #expect(try Self.entry(app, "m", g)?["muted_until"]?.intValue == 0)
            let mute = try app.request(.post, "/v1/groups/\(g)/members/mute", json: #"{"user_ids":["m"],"duration_s":60}"#)
            #expect(mute.status == 200, "\(mute.text)")
            #expect((try Self.entry(app, "m", g)?["muted_until"]?.intValue ?? 0) > 0)
            #expect(try Self.entry(app, "o", g)?["muted_until"]?.intValue == 0)
            try server.advanceClock(ms: 61_000)
            #expect(try Self.entry(app, "m", g)?["muted_until"]?.intValue == 0)
        }
    }
}
