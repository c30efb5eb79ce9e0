import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Conversation entries, read state, unread counts and mentions (docs/conversations.md,
/// docs/messages.md#unread-read-state-and-mentions) end to end.
@Suite("Conversations", .inProcess)
struct ConversationsTests: ProblemAssertions {
    typealias M = PeerMessages

    static func list(_ app: TestApp, _ user: String, query: String = "") throws -> [JSONValue] {
        let r = try app.request(.get, "/v1/users/\(user)/conversations\(query)")
        #expect(r.status == 200, "\(r.text)")
        return r.json?["items"]?.arrayValue ?? []
    }

    static func ids(_ items: [JSONValue]) -> [String] { items.compactMap { $0["id"]?.stringValue } }

    static func unread(_ app: TestApp, _ user: String, query: String = "") throws -> Int64? {
        let r = try app.request(.get, "/v1/users/\(user)/unread_count\(query)")
        #expect(r.status == 200, "\(r.text)")
        return r.json?["unread_count"]?.intValue
    }

    static func read(_ app: TestApp, _ user: String, _ peer: String, seq: Int? = nil) throws -> TestResponse {
        try app.request(.post, "/v1/users/\(user)/conversations/peer/\(peer)/read", json: seq.map { "{\"seq\":\($0)}" } ?? "{}")
    }

    @Test func listIsOrderedByLatestMessageAndDeletedEntriesReappear() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b", "c", "d"] { try app.createUser(id, name: "N" + id) }
            try M.sendText(app, "b", "a", "1")
            try server.advanceClock(ms: 5)
            try M.sendText(app, "a", "c", "2")
            try server.advanceClock(ms: 5)
            try M.sendText(app, "d", "a", "3")
            #expect(Self.ids(try Self.list(app, "a")) == ["d", "c", "b"])
            try server.advanceClock(ms: 5)
            try M.sendText(app, "a", "b", "4")
            let items = try Self.list(app, "a")
            #expect(Self.ids(items) == ["b", "d", "c"], "a new message moves its conversation to the top")
            #expect(Self.ids(try Self.list(app, "b")) == ["a"])
            let entry = items[0]
            #expect(entry["type"] == "peer")
            #expect(entry["name"] == "Nb")
            #expect(entry["last_seq"] == 2)
            #expect(entry["read_seq"] == 2)
            #expect(entry["unread_count"] == 0, "own messages are never unread")
            #expect(entry["last_message"]?["body"]?["text"] == "4")
            #expect(entry["order_key"] == entry["last_message"]?["timestamp"])
            #expect(entry["mention"] == .object(["me": false, "all": false, "items": []]))
            #expect(entry["marks"] == [])
            #expect(entry["cleared_seq"] == 0)

            // Walk with cursors: each entry once.
            var walked: [String] = []
            var cursor: String?
            repeat {
                let r = try app.request(.get, "/v1/users/a/conversations?limit=1" + (cursor.map { "&cursor=\($0)" } ?? ""))
                walked += Self.ids(r.json?["items"]?.arrayValue ?? [])
                cursor = r.json?["next_cursor"]?.stringValue
            } while cursor != nil
            #expect(walked == ["b", "d", "c"])

            // b deletes its entry; it disappears until a sends again, then shows only the new message as unread.
            #expect(try M.conversation(app, "b", "a")?["unread_count"] == 1)
            #expect(try app.request(.delete, "/v1/users/b/conversations/peer/a").status == 204)
            #expect(Self.ids(try Self.list(app, "b")).isEmpty)
            Self.expectProblem(try app.request(.get, "/v1/users/b/conversations/peer/a"), 404, .conversationNotFound)
            Self.expectProblem(try app.request(.delete, "/v1/users/b/conversations/peer/a"), 404, .conversationNotFound)
            let deleted = try M.events(app, "conversation.deleted", audience: "b")
            #expect(
                deleted.first?["data"] == .object(["user_id": "b", "conversation_type": "peer", "conversation_id": "a", "delete_messages": false]))
            #expect(Self.seqs(try M.history(app, "b", "a")) == [2, 1], "history stays without delete_messages")
            try M.sendText(app, "a", "b", "5")
            let back = try M.conversation(app, "b", "a")
            #expect(back?["unread_count"] == 1)
            #expect(Self.ids(try Self.list(app, "b")) == ["a"])

            // delete_messages clears the user's history up to last_seq.
            #expect(try app.request(.delete, "/v1/users/b/conversations/peer/a?delete_messages=true").status == 204)
            #expect(try M.history(app, "b", "a").isEmpty)
            #expect(Self.seqs(try M.history(app, "a", "b")) == [3, 2, 1])
            try M.sendText(app, "a", "b", "6")
            #expect(Self.seqs(try M.history(app, "b", "a")) == [4])
            #expect(try M.conversation(app, "b", "a")?["cleared_seq"] == 3)
        }
    }

    static func seqs(_ items: [JSONValue]) -> [Int64] { M.seqs(items) }

    @Test func unreadCountsOnlyCountableMessagesAndReadNeverGoesBack() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            try app.createUser("a")
            try app.createUser("b")
            try M.sendText(app, "a", "b", "1")
            try M.sendText(app, "a", "b", "2", extra: "\"no_unread\":true")
            try M.sendText(app, "a", "b", "3")
            try M.send(app, "a", "b", type: 2, body: "{\"data\":\"aGk=\"}")
            try M.sendText(app, "a", "b", "4")
            #expect(try M.conversation(app, "b", "a")?["unread_count"] == 3)
            #expect(try M.conversation(app, "b", "a")?["last_seq"] == 4)

            let r = try Self.read(app, "b", "a", seq: 3)
            #expect(r.status == 200, "\(r.text)")
            #expect(r.json?["read_seq"] == 3)
            #expect(r.json?["unread_count"] == 1)
            var reads = try M.events(app, "conversation.read", audience: "a")
            #expect(reads.count == 1, "the C2C read receipt reaches the other participant")
            #expect(reads.first?["data"]?["read_seq"] == 3)
            #expect(reads.first?["data"]?["user_id"] == "b")
            #expect(reads.first?["data"]?["conversation_id"] == "a")

            // A lower seq changes nothing and writes no event; a seq past last_seq stops at last_seq.
            #expect(try Self.read(app, "b", "a", seq: 1).json?["read_seq"] == 3)
            #expect(try M.events(app, "conversation.read").count == 1)
            #expect(try Self.read(app, "b", "a", seq: 99).json?["read_seq"] == 4)
            #expect(try M.conversation(app, "b", "a")?["unread_count"] == 0)
            reads = try M.events(app, "conversation.read")
            #expect(reads.count == 2)

            // Replying moves the sender's read position: own messages never count.
            try M.sendText(app, "a", "b", "5")
            try M.sendText(app, "b", "a", "6")
            #expect(try M.conversation(app, "b", "a")?["unread_count"] == 0)
            #expect(try M.conversation(app, "a", "b")?["unread_count"] == 1)
            Self.expectProblem(try Self.read(app, "a", "nobody"), 404, .conversationNotFound)

            // read_all reports the entries that advanced.
            let all = try app.request(.post, "/v1/users/a/conversations/read_all", json: "{}")
            #expect(all.json?["conversations"] == 1)
            #expect(try app.request(.post, "/v1/users/a/conversations/read_all").json?["conversations"] == 0)
            // An unknown user is 404, as its list and unread count are (not 0 conversations, not a batch of misses).
            Self.expectProblem(try app.request(.post, "/v1/users/nobody/conversations/read_all"), 404, .userNotFound)
            Self.expectProblem(
                try app.request(
                    .post, "/v1/users/nobody/conversations/marks", json: #"{"mark":3,"enable":true,"conversations":[{"type":"peer","id":"a"}]}"#),
                404, .userNotFound)
            #expect(try M.conversation(app, "a", "b")?["unread_count"] == 0)
        }
    }

    @Test func mentionsGiveItemsUntilReadPastThem() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }
            try M.sendText(app, "a", "b", "hey", extra: "\"mentions\":{\"user_ids\":[\"b\",\"c\"]}")
            let plain = try M.sendText(app, "a", "b", "x")
            #expect(plain.json?["mentions"] == .object(["user_ids": [], "all": false]))
            let both = try M.sendText(app, "a", "b", "all", extra: "\"mentions\":{\"user_ids\":[\"b\"],\"all\":true}")
            #expect(both.json?["mentions"]?["user_ids"] == ["b"], "non-participants are ignored")
            try M.sendText(app, "a", "b", "quiet", extra: "\"mentions\":{\"all\":true},\"notify_mentioned\":false")
            let mention = try M.conversation(app, "b", "a")?["mention"]
            #expect(mention?["me"] == true)
            #expect(mention?["all"] == true)
            let items = mention?["items"]?.arrayValue ?? []
            #expect(items.map { $0["seq"] } == [1, 3])
            #expect(items.map { $0["type"] } == ["me", "all_and_me"])
            #expect(items.first?["from"] == "a")
            #expect(try M.conversation(app, "a", "b")?["mention"]?["items"] == [], "the sender gets no mention item")
            #expect(try Self.read(app, "b", "a", seq: 2).json?["mention"]?["items"]?.arrayValue?.count == 1)
            let after = try Self.read(app, "b", "a").json?["mention"]
            #expect(after == .object(["me": false, "all": false, "items": []]))
        }
    }

    @Test func patchMarksFiltersAndTotalUnread() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b", "c", "d"] { try app.createUser(id) }
            try M.sendText(app, "b", "a")
            try M.sendText(app, "c", "a")
            try M.sendText(app, "c", "a")
            try M.sendText(app, "d", "a")

            // PATCH: pin, do-not-disturb and draft; one conversation.updated listing what changed.
            let p = try app.request(
                .patch, "/v1/users/a/conversations/peer/c", json: "{\"pinned\":true,\"notification_status\":\"do_not_disturb\",\"draft\":\"wip\"}")
            #expect(p.status == 200, "\(p.text)")
            #expect(p.json?["pinned"] == true)
            #expect(p.json?["notification_status"] == "do_not_disturb")
            #expect(p.json?["draft"] == "wip")
            #expect((p.json?["draft_updated_at"]?.intValue ?? 0) > 0)
            let updated = try M.events(app, "conversation.updated", audience: "a")
            #expect(updated.count == 1)
            #expect(
                Set(updated.first?["data"]?["changed"]?.arrayValue?.compactMap(\.stringValue) ?? []) == ["pinned", "notification_status", "draft"])
            #expect(try app.request(.patch, "/v1/users/a/conversations/peer/c", json: "{\"pinned\":true}").status == 200)
            #expect(try M.events(app, "conversation.updated").count == 1, "no change, no event")
            Self.expectInvalid(try app.request(.patch, "/v1/users/a/conversations/peer/c", json: "{\"alias\":\"x\"}"), field: "body.alias")
            Self.expectProblem(try app.request(.patch, "/v1/users/a/conversations/peer/ghost", json: "{\"pinned\":true}"), 404, .targetNotFound)
            // PATCH creates an absent entry.
            let created = try app.request(.patch, "/v1/users/b/conversations/peer/d", json: "{\"draft\":\"hello\"}")
            #expect(created.status == 200, "\(created.text)")
            #expect(created.json?["last_message"] == .null)

            // Marks: batch with per-item results.
            let marks = try app.request(
                .post, "/v1/users/a/conversations/marks",
                json:
                    "{\"mark\":3,\"enable\":true,\"conversations\":[{\"type\":\"peer\",\"id\":\"b\"},{\"type\":\"peer\",\"id\":\"zz\"},{\"type\":\"peer\",\"id\":\"b\"}]}"
            )
            #expect(marks.status == 200, "\(marks.text)")
            let results = marks.json?["results"]?.arrayValue ?? []
            #expect(results.map { $0["id"] } == ["peer:b", "peer:zz", "peer:b"])
            #expect(
                results.map { $0["ok"] == true ? nil : $0["error"]?["code"]?.intValue.map(Int.init) } == [
                    nil, ErrorCode.conversationNotFound.code, ErrorCode.invalidParams.code,
                ])
            #expect(try M.conversation(app, "a", "b")?["marks"] == [3])
            #expect(try M.events(app, "conversation.updated", audience: "a").count == 2)

            // Filters, and the total equals the sum over the listed entries with the same filters.
            for (filter, expected) in [
                ("", ["d", "c", "b"]), ("?marks=-1", ["b"]), ("?marks=0", ["d", "c"]), ("?marks=3", ["b"]), ("?marks=0,3", ["d", "c", "b"]),
                ("?pinned=true", ["c"]), ("?pinned=false", ["d", "b"]), ("?types=group", []),
            ] {
                let items = try Self.list(app, "a", query: filter)
                #expect(Set(Self.ids(items)) == Set(expected), "filter \(filter)")
                let sum = items.reduce(Int64(0)) { $0 + ($1["unread_count"]?.intValue ?? 0) }
                // The total takes the same filters except `pinned`, which only the list has.
                if !filter.contains("pinned") { #expect(try Self.unread(app, "a", query: filter) == sum, "total \(filter)") }
            }
            #expect(try Self.unread(app, "a") == 4)
            #expect(try Self.unread(app, "a", query: "?exclude_dnd=true") == 2)
            #expect(Self.ids(try Self.list(app, "a", query: "?unread_only=true")).count == 3)
            _ = try Self.read(app, "a", "b")
            #expect(Set(Self.ids(try Self.list(app, "a", query: "?unread_only=true"))) == ["c", "d"])
            Self.expectInvalid(try app.request(.get, "/v1/users/a/conversations?marks=21"), field: "marks")
            Self.expectInvalid(try app.request(.get, "/v1/users/a/conversations?types=room"), field: "types")

            // A user token acts only on its own entries.
            let token = try app.token(for: "b")
            #expect(try server.request(.get, "/v1/users/b/conversations", bearer: token).status == 200)
            Self.expectProblem(try server.request(.get, "/v1/users/a/conversations", bearer: token), 403, .forbidden)
        }
    }
}
