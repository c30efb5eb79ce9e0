import Foundation
import ParleyHTTP
import ParleyPostgres
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains

/// Message search (docs/messages.md#search) end to end: substrings in Chinese, Japanese and emoji text, keywords, every
/// filter, paging in both orders, and what each user's view leaves out (docs/messages.md#history).
@Suite("Message search", .inProcess)
struct MessageSearchTests: GroupTestSupport {
    /// `GET /v1/messages/search` with `params` (values percent-encoded here), with the app key or `token`.
    static func search(_ app: TestApp, _ params: [(String, String)], token: String? = nil) throws -> TestResponse {
        let query = params.map { "\($0.0)=\($0.1.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")" }
        let path = "/v1/messages/search" + (query.isEmpty ? "" : "?" + query.joined(separator: "&"))
        if let token { return try asUser(app, token, .get, path) }
        return try app.request(.get, path)
    }

    /// The message ids of a successful search (one page).
    static func ids(_ app: TestApp, _ params: [(String, String)], token: String? = nil) throws -> [String] {
        let r = try search(app, params, token: token)
        #expect(r.status == 200, "\(r.text)")
        return (r.json?["items"]?.arrayValue ?? []).compactMap { $0["message_id"]?.stringValue }
    }

    /// Sends a message of `type` with `body` (JSON) and returns its id.
    static func send(_ app: TestApp, _ from: String, _ to: String, type: Int = 1, body: String, conversation: String = "peer") throws -> String {
        let r = try app.request(
            .post, "/v1/messages",
            json: "{\"from\":\"\(from)\",\"conversation_type\":\"\(conversation)\",\"to\":\"\(to)\",\"type\":\(type),\"body\":\(body)"
                // Room messages are stored only when asked to be.
                + (conversation == "room" ? ",\"storage\":true}" : "}"))
        #expect(r.status == 201, "\(r.text)")
        return r.json?["message_id"]?.stringValue ?? ""
    }

    static func text(_ app: TestApp, _ from: String, _ to: String, _ text: String, conversation: String = "peer") throws -> String {
        try send(app, from, to, body: "{\"text\":\(PeerMessages.q(text))}", conversation: conversation)
    }

    static func advance(_ app: TestApp, ms: Int) throws {
        let r = try app.server.request(.post, "/v1/test/clock/advance", bearer: app.server.adminKey, json: "{\"ms\":\(ms)}")
        #expect(r.status == 200, "\(r.text)")
    }

    @Test func substringsInChineseJapaneseAndEmojiTextAndEverySearchableField() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let weather = try Self.text(app, "a", "b", "今天天气很好🎉")
            let japanese = try Self.text(app, "b", "a", "東京タワーに行きました")
            let latin = try Self.text(app, "a", "b", "Hello Wörld ÄBC")
            let image = try Self.send(app, "a", "b", type: 11, body: #"{"url":"https://x.test/h.png","file_name":"Holiday.PNG"}"#)
            let custom = try Self.send(app, "a", "b", type: 200, body: #"{"data":"payload","sub_type":3,"searched_content":"Gizmo"}"#)
            let multiple = try Self.send(
                app, "a", "b", type: 10,
                body:
                    #"{"items":[{"type":1,"body":{"text":"album caption"}},{"type":12,"body":{"url":"https://x.test/r.pdf","file_name":"Report.pdf"}}]}"#
            )
            let combined = try Self.send(
                app, "a", "b", type: 100, body: "{\"title\":\"Trip notes\",\"summary\":\"The summary\",\"message_ids\":[\"\(latin)\"]}")

            #expect(try Self.ids(app, [("q", "天气")]) == [weather])
            #expect(try Self.ids(app, [("q", "🎉")]) == [weather])
            #expect(try Self.ids(app, [("q", "好")]) == [weather], "a one-character keyword")
            #expect(try Self.ids(app, [("q", "タワー")]) == [japanese])
            #expect(try Self.ids(app, [("q", "天気")]).isEmpty, "天気 is not 天气")
            // Case-insensitive on both sides, beyond ASCII; every keyword must match.
            #expect(try Self.ids(app, [("q", "hello")]) == [latin])
            #expect(try Self.ids(app, [("q", "WÖRLD äbc")]) == [latin])
            #expect(try Self.ids(app, [("q", "hello 天气")]).isEmpty)
            #expect(try Self.ids(app, [("q", "h")]).contains(latin), "a one-byte keyword")
            // Keywords do not match across two fields of one message (they are joined by a space).
            #expect(try Self.ids(app, [("q", "notesthe")]).isEmpty)
            #expect(try Self.ids(app, [("q", "holiday.png")]) == [image])
            #expect(try Self.ids(app, [("q", "gizmo")]) == [custom])
            #expect(try Self.ids(app, [("q", "payload")]).isEmpty, "custom data is not searched")
            #expect(try Self.ids(app, [("q", "caption")]) == [multiple])
            #expect(try Self.ids(app, [("q", "report")]) == [multiple])
            #expect(try Self.ids(app, [("q", "trip")]) == [combined])
            #expect(try Self.ids(app, [("q", "summary")]) == [combined])
            // No q: everything, newest first; the same with an empty q.
            let everything = [combined, multiple, custom, image, latin, japanese, weather]
            #expect(try Self.ids(app, []) == everything)
            #expect(try Self.ids(app, [("q", "")]) == everything)
            Self.expectProblem(try Self.search(app, [("q", "a b c d e f")]), 400, .invalidParams)

            // An edit changes what is found; a revoke and a delete for everyone take the message out.
            let edit = try app.request(.patch, "/v1/messages/\(latin)", json: #"{"body":{"text":"Goodbye"}}"#)
            #expect(edit.status == 200, "\(edit.text)")
            #expect(try Self.ids(app, [("q", "hello")]).isEmpty)
            #expect(try Self.ids(app, [("q", "goodbye")]) == [latin])
            #expect(try MessageActions.revoke(app, latin).status == 200)
            #expect(try Self.ids(app, [("q", "goodbye")]).isEmpty)
            let deleted = try app.request(.post, "/v1/messages/delete", json: "{\"scope\":\"everyone\",\"message_ids\":[\"\(weather)\"]}")
            #expect(deleted.status == 200, "\(deleted.text)")
            #expect(try Self.ids(app, [("q", "天气")]).isEmpty)
            #expect(try Self.ids(app, []) == [combined, multiple, custom, image, japanese])
        }
    }

    @Test func filtersNarrowTheSearch() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }
            let first = try Self.text(app, "a", "b", "apple one")
            try Self.advance(app, ms: 1000)
            let second = try Self.text(app, "b", "a", "apple two")
            let third = try Self.text(app, "a", "c", "apple three")
            let custom3 = try Self.send(app, "c", "a", type: 200, body: #"{"data":"d","sub_type":3,"searched_content":"apple custom"}"#)
            let custom4 = try Self.send(app, "c", "a", type: 200, body: #"{"data":"d","sub_type":4,"searched_content":"apple custom"}"#)
            let group = try Self.createGroup(app, "a", members: ["b"])
            let inGroup = try Self.text(app, "b", group, "apple group", conversation: "group")
            let secondTime = try #require(try app.request(.get, "/v1/messages/\(second)").json?["timestamp"]?.intValue)

            #expect(try Self.ids(app, [("q", "apple")]) == [inGroup, custom4, custom3, third, second, first])
            // A conversation as user a sees it: the peer conversation with b is named by b.
            #expect(
                try Self.ids(app, [("q", "apple"), ("user_id", "a"), ("conversation_type", "peer"), ("conversation_id", "b")]) == [second, first])
            #expect(
                try Self.ids(app, [("q", "apple"), ("user_id", "b"), ("conversation_type", "peer"), ("conversation_id", "a")]) == [second, first])
            #expect(try Self.ids(app, [("q", "apple"), ("conversation_type", "group"), ("conversation_id", group)]) == [inGroup])
            #expect(try Self.ids(app, [("q", "apple"), ("conversation_type", "group")]) == [inGroup])
            #expect(try Self.ids(app, [("q", "apple"), ("types", "200")]) == [custom4, custom3])
            #expect(try Self.ids(app, [("q", "apple"), ("sub_types", "4")]) == [inGroup, custom4, third, second, first])
            #expect(try Self.ids(app, [("q", "apple"), ("types", "200"), ("sub_types", "3,5")]) == [custom3])
            #expect(try Self.ids(app, [("q", "apple"), ("senders", "b,c")]) == [inGroup, custom4, custom3, second])
            #expect(try Self.ids(app, [("q", "apple"), ("end_at", String(secondTime))]) == [first])
            #expect(try Self.ids(app, [("q", "apple"), ("start_at", String(secondTime)), ("senders", "b")]) == [inGroup, second])
            #expect(try Self.ids(app, [("q", "apple"), ("order", "asc"), ("limit", "2")]) == [first, second])

            for bad: [(String, String)] in [
                [("start_at", "10"), ("end_at", "10")], [("start_at", "10"), ("end_at", "9")], [("senders", "a,b,c,d,e,f")],
                [("sub_types", "201")], [("types", "x")], [("order", "newest")], [("conversation_type", "channel")],
                [("conversation_id", "b")], [("conversation_type", "peer"), ("conversation_id", "b")], [("limit", "0")],
                [("limit", "101")], [("cursor", "nonsense")],
            ] {
                let r = try Self.search(app, bad)
                #expect(r.status == 400, "\(bad): \(r.text)")
            }
            Self.expectProblem(try Self.search(app, [("start_at", "10"), ("end_at", "10")]), 400, .invalidParams)
            Self.expectProblem(try Self.search(app, [("cursor", "nonsense")]), 400, .invalidCursor)
        }
    }

    /// Walks every page of a search with `limit` and returns the ids in page order.
    static func walk(_ app: TestApp, _ params: [(String, String)], limit: Int) throws -> [String] {
        var out: [String] = []
        var cursor: String?
        repeat {
            var page = params + [("limit", String(limit))]
            if let cursor { page.append(("cursor", cursor)) }
            let r = try search(app, page)
            #expect(r.status == 200, "\(r.text)")
            out += (r.json?["items"]?.arrayValue ?? []).compactMap { $0["message_id"]?.stringValue }
            cursor = r.json?["next_cursor"]?.stringValue
        } while cursor != nil && out.count < 100
        return out
    }

    @Test func pagesInBothOrdersWithTiesOnTimestamp() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            let users = ["a", "b", "c", "d", "e", "f"]
            for id in users { try app.createUser(id) }
            // One batch: five messages with the same timestamp and seq (each opens its own conversation), ordered by id.
            let batch = try app.request(
                .post, "/v1/messages/batch", json: #"{"from":"a","to_user_ids":["b","c","d","e","f"],"type":1,"body":{"text":"tied"}}"#)
            #expect(batch.status == 200, "\(batch.text)")
            let toB = try #require(Self.results(batch).first?["data"]?["message_id"]?.stringValue)
            // Then three more in one conversation, so seq breaks some ties too.
            var later: [String] = []
            for _ in 0..<3 { later.append(try Self.text(app, "b", "a", "tied later")) }
            let all = try Self.ids(app, [("q", "tied"), ("limit", "100")])
            #expect(all.count == 8)
            let stamps = try all.map { try app.request(.get, "/v1/messages/\($0)").json?["timestamp"]?.intValue ?? 0 }
            #expect(Set(stamps.suffix(5)).count == 1, "the batch shares one timestamp")
            let batchIDs = Array(all.suffix(5))
            #expect(batchIDs == batchIDs.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }.reversed())
            for limit in [1, 2, 3] {
                #expect(try Self.walk(app, [("q", "tied")], limit: limit) == all, "desc, limit \(limit)")
                #expect(try Self.walk(app, [("q", "tied"), ("order", "asc")], limit: limit) == all.reversed(), "asc, limit \(limit)")
                // Within one conversation the order is the conversation's seq.
                let conversation = [("user_id", "a"), ("conversation_type", "peer"), ("conversation_id", "b")]
                let inConversation = try Self.walk(app, conversation, limit: limit)
                #expect(inConversation == later.reversed() + [toB], "limit \(limit)")
                #expect(try Self.walk(app, conversation + [("order", "asc")], limit: limit) == inConversation.reversed())
            }
            // A cursor belongs to its own search.
            let page = try Self.search(app, [("q", "tied"), ("limit", "1")])
            let cursor = try #require(page.json?["next_cursor"]?.stringValue)
            Self.expectProblem(try Self.search(app, [("q", "tied later"), ("limit", "1"), ("cursor", cursor)]), 400, .invalidCursor)
        }
    }

    @Test func aUserSearchesOnlyItsOwnHistory() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["o", "m", "n", "x"] { try app.createUser(id) }
            let group = try Self.createGroup(app, "o", members: ["m"])
            let inGroup = try Self.text(app, "o", group, "secret plan", conversation: "group")
            let peer = try Self.text(app, "o", "x", "secret peer")
            // The group's tips (creation, joins) are never results.
            #expect(try Self.ids(app, [("user_id", "m")]) == [inGroup])
            #expect(try Self.ids(app, []) == [peer, inGroup])

            #expect(try Self.ids(app, [("q", "secret"), ("user_id", "m")]) == [inGroup])
            #expect(try Self.ids(app, [("q", "secret"), ("user_id", "n")]).isEmpty, "not a member, not a participant")
            #expect(try Self.ids(app, [("q", "secret"), ("user_id", "x")]) == [peer])
            #expect(try Self.ids(app, [("q", "secret"), ("user_id", "o")]) == [peer, inGroup])
            Self.expectProblem(
                try Self.search(app, [("q", "secret"), ("user_id", "n"), ("conversation_type", "group"), ("conversation_id", group)]), 403,
                .notGroupMember)
            Self.expectProblem(
                try Self.search(app, [("user_id", "n"), ("conversation_type", "group"), ("conversation_id", "nope")]), 404, .groupNotFound)
            Self.expectProblem(try Self.search(app, [("user_id", "ghost")]), 404, .userNotFound)

            // A user token: its own view, and no one else's.
            let tokenM = try app.token(for: "m")
            #expect(try Self.ids(app, [("q", "secret")], token: tokenM) == [inGroup])
            #expect(try Self.ids(app, [("q", "secret"), ("user_id", "m")], token: tokenM) == [inGroup])
            Self.expectProblem(try Self.search(app, [("q", "secret"), ("user_id", "o")], token: tokenM), 403, .forbidden)

            // A member who left sees nothing of the group any more.
            #expect(try app.request(.post, "/v1/groups/\(group)/leave", json: #"{"user_id":"m"}"#).status == 200)
            #expect(try Self.ids(app, [("q", "secret"), ("user_id", "m")]).isEmpty)
            Self.expectProblem(
                try Self.search(app, [("user_id", "m"), ("conversation_type", "group"), ("conversation_id", group)]), 403, .notGroupMember)

            // A dismissed group: gone from its members' searches, 409 when named; the app still finds its messages.
            #expect(try app.request(.post, "/v1/groups/\(group)/dismiss", json: #"{"operator":"o"}"#).status == 200)
            #expect(try Self.ids(app, [("q", "secret"), ("user_id", "o")]) == [peer])
            Self.expectProblem(
                try Self.search(app, [("user_id", "o"), ("conversation_type", "group"), ("conversation_id", group)]), 409, .groupDismissed)
            #expect(try Self.ids(app, [("q", "secret plan")]) == [inGroup])

            // Rooms: current members, the room's current life.
            try RoomFixtures.createRoom(app, "r1", members: ["o", "m"])
            let inRoom = try Self.text(app, "o", "r1", "secret room", conversation: "room")
            #expect(try Self.ids(app, [("q", "room"), ("user_id", "m")]) == [inRoom])
            #expect(try Self.ids(app, [("q", "room"), ("user_id", "n")]).isEmpty)
            Self.expectProblem(
                try Self.search(app, [("user_id", "n"), ("conversation_type", "room"), ("conversation_id", "r1")]), 403, .notInRoom)
            try RoomFixtures.leave(app, "r1", "m")
            #expect(try Self.ids(app, [("q", "room"), ("user_id", "m")]).isEmpty)
        }
    }

    @Test func deletionsClearedHistoryAndSuppressionFollowEachView() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let kept = try Self.text(app, "a", "b", "note kept")
            let hidden = try Self.text(app, "a", "b", "note hidden")
            // Deleted for b only: a (and the app) still find it.
            let delete = try app.request(.post, "/v1/messages/delete", json: "{\"scope\":\"self\",\"user_id\":\"b\",\"message_ids\":[\"\(hidden)\"]}")
            #expect(delete.status == 200, "\(delete.text)")
            #expect(try Self.ids(app, [("q", "note"), ("user_id", "b")]) == [kept])
            #expect(try Self.ids(app, [("q", "note"), ("user_id", "a")]) == [hidden, kept])
            #expect(try Self.ids(app, [("q", "note")]) == [hidden, kept])

            // Suppressed (b blacklisted a): the app and the sender see it, b does not; only the app sees `suppressed`.
            #expect(try app.request(.post, "/v1/users/b/blacklist", json: #"{"user_ids":["a"]}"#).status == 200)
            let silent = try Self.text(app, "a", "b", "note silent")
            let asApp = try Self.search(app, [("q", "silent")])
            #expect(asApp.json?["items"]?[0]?["suppressed"] == .string("blacklist"))
            #expect(try Self.ids(app, [("q", "silent"), ("user_id", "a")]) == [silent])
            #expect(try Self.ids(app, [("q", "silent"), ("user_id", "b")]).isEmpty)
            let asA = try Self.search(app, [("q", "silent")], token: try app.token(for: "a"))
            #expect(asA.json?["items"]?[0]?["message_id"] == .string(silent))
            #expect(asA.json?["items"]?[0]?["suppressed"] == nil)

            // Clearing the conversation's history (cleared_seq) takes everything up to it out of b's view only.
            let cleared = try app.request(.delete, "/v1/users/b/conversations/peer/a?delete_messages=true")
            #expect(cleared.status == 204, "\(cleared.text)")
            #expect(try Self.ids(app, [("q", "note"), ("user_id", "b")]).isEmpty)
            #expect(try Self.ids(app, [("q", "note"), ("user_id", "a")]) == [silent, hidden, kept])
            #expect(try Self.ids(app, [("q", "note"), ("user_id", "b"), ("conversation_type", "peer"), ("conversation_id", "a")]).isEmpty)
        }
    }

    /// The searchable text is written by each writer (Migrations/0022): a send, an edit (the new text only), and it goes
    /// with a revoke, a delete for everyone and the hard delete of the sender.
    @Test func everyWriterKeepsTheSearchableTextTrue() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }
            let edited = try Self.text(app, "a", "b", "draft wording")
            let revoked = try Self.text(app, "a", "b", "revoked wording")
            let deleted = try Self.text(app, "a", "b", "deleted wording")
            let byGone = try Self.text(app, "c", "b", "wording of c")
            #expect(try app.request(.patch, "/v1/messages/\(edited)", json: #"{"body":{"text":"final phrasing"}}"#).status == 200)
            #expect(try app.request(.post, "/v1/messages/\(revoked)/revoke", json: "{}").status == 200)
            let delete = try app.request(.post, "/v1/messages/delete", json: "{\"scope\":\"everyone\",\"message_ids\":[\"\(deleted)\"]}")
            #expect(delete.status == 200, "\(delete.text)")
            #expect(try app.request(.delete, "/v1/users/c?mode=hard").status == 204)
            #expect(try Self.ids(app, [("q", "phrasing")]) == [edited])
            #expect(try Self.ids(app, [("q", "draft")]).isEmpty)
            let stored = try server.app.services.pool.withConnection { db in
                try db.query(
                    sql: "SELECT message_id, search_text FROM messages WHERE app_id = $1 AND message_id = ANY($2)",
                    [app.appID, [edited, revoked, deleted, byGone]]
                ).rows.map { (try $0[0].string, $0[1].isNull ? nil : try $0[1].string) }
            }
            let text = Dictionary(uniqueKeysWithValues: stored)
            #expect(text[edited] == .some("final phrasing"))
            #expect(text.count == 4)
            for id in [revoked, deleted, byGone] { #expect(text[id] == .some(nil), "\(id)") }
        }
    }
}
