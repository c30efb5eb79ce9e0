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

/// Message reactions (docs/messages.md#reactions-pins-and-replies) end to end: real HTTP against a real server and
/// database.
@Suite("Message reactions", .inProcess)
struct MessageReactionsTests: GroupTestSupport {
    // MARK: - Helpers

    /// A stored peer text from `from` to `to`; its message id.
    static func peerMessage(_ app: TestApp, _ from: String, _ to: String, extra: String = "") throws -> String {
        let r = try PeerMessages.sendText(app, from, to, extra: extra)
        guard r.status == 201, let id = r.json?["message_id"]?.stringValue else { throw TestFailure("send failed: \(r.status) \(r.text)") }
        return id
    }

    /// `POST …/reactions` with the app key for `userID`.
    @discardableResult
    static func react(_ app: TestApp, _ messageID: String, _ userID: String, _ type: String) throws -> TestResponse {
        try app.request(.post, "/v1/messages/\(messageID)/reactions", json: #"{"user_id":"\#(userID)","reaction_type":\#(PeerMessages.q(type))}"#)
    }

    /// `DELETE …/reactions/{type}?user_id=` with the app key.
    @discardableResult
    static func unreact(_ app: TestApp, _ messageID: String, _ userID: String, _ type: String) throws -> TestResponse {
        try app.request(.delete, "/v1/messages/\(messageID)/reactions/\(percentEncoded(type))?user_id=\(userID)")
    }

    static func percentEncoded(_ s: String) -> String {
        s.utf8.map { b in
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x5F
                ? String(UnicodeScalar(b)) : "%" + String(b, radix: 16, uppercase: true).leftPadded(2)
        }.joined()
    }

    /// The message's stored reaction summary as the app reads it (`GET /v1/messages/{id}`).
    static func summary(_ app: TestApp, _ messageID: String) throws -> [JSONValue] {
        let r = try app.request(.get, "/v1/messages/\(messageID)")
        #expect(r.status == 200, "\(r.text)")
        return r.json?["reactions"]?.arrayValue ?? []
    }

    /// `[(reaction_type, count, user_ids)]` of a summary.
    static func shape(_ reactions: [JSONValue]) -> [String] {
        reactions.map { r in
            let ids = r["user_ids"]?.arrayValue?.compactMap(\.stringValue).joined(separator: ",") ?? ""
            return "\(r["reaction_type"]?.stringValue ?? "?"):\(r["count"]?.intValue ?? -1):\(ids)"
        }
    }

    static func reactionEvents(_ app: TestApp, user: String? = nil) throws -> [JSONValue] {
        var all: [JSONValue] = []
        var after = "earliest"
        while true {
            var query = "types=message.reactions_updated"
            if let user { query += "&user_id=\(user)" }
            let r = try app.request(.get, "/v1/events/log?after=\(after)&limit=100&\(query)")
            guard r.status == 200 else { throw TestFailure("event log: \(r.status) \(r.text)") }
            all += r.json?["items"]?.arrayValue ?? []
            guard let next = r.json?["next_cursor"]?.stringValue else { return all }
            after = next
        }
    }

    // MARK: - Add, remove, list

    @Test func addRemoveAndListAnswerWithTheirCodes() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for user in ["u1", "u2", "u3"] { try app.createUser(user, name: "name-\(user)") }
            let m = try Self.peerMessage(app, "u1", "u2")
            let u2 = try app.token(for: "u2")

            // Validation and the acting user.
            Self.expectInvalid(try app.request(.post, "/v1/messages/\(m)/reactions", json: #"{"reaction_type":"like"}"#), field: "body.user_id")
            Self.expectInvalid(try Self.react(app, m, "u1", ""), field: "body.reaction_type")
            Self.expectInvalid(try Self.react(app, m, "u1", String(repeating: "x", count: 33)), field: "body.reaction_type")
            Self.expectProblem(
                try Self.asUser(app, u2, .post, "/v1/messages/\(m)/reactions", json: #"{"user_id":"u1","reaction_type":"like"}"#), 403, .forbidden)

            // A user token's answer carries self_included; the app's does not.
            let first = try Self.asUser(app, u2, .post, "/v1/messages/\(m)/reactions", json: #"{"reaction_type":"like"}"#)
            #expect(first.status == 201, "\(first.text)")
            #expect(first.json?["message_id"]?.stringValue == m)
            #expect(
                first.json?["reactions"]
                    == (try JSONValue.parse(Array(#"[{"reaction_type":"like","count":1,"user_ids":["u2"],"self_included":true}]"#.utf8))))
            let second = try Self.react(app, m, "u1", "like")
            #expect(second.status == 201, "\(second.text)")
            #expect(second.json?["reactions"] == (try JSONValue.parse(Array(#"[{"reaction_type":"like","count":2,"user_ids":["u2","u1"]}]"#.utf8))))
            let thumbs = "👍"
            let third = try Self.asUser(app, u2, .post, "/v1/messages/\(m)/reactions", json: #"{"reaction_type":"\#(thumbs)"}"#)
            #expect(third.status == 201, "\(third.text)")
            #expect(third.json?["reactions"]?.arrayValue?.map { $0["self_included"] } == [.bool(true), .bool(true)])
            let u1View = try Self.asUser(app, try app.token(for: "u1"), .post, "/v1/messages/\(m)/reactions", json: #"{"reaction_type":"x"}"#)
            #expect(u1View.json?["reactions"]?.arrayValue?.map { $0["self_included"] } == [.bool(true), .bool(false), .bool(true)])

            // Conflicts and the message's own 404s.
            Self.expectProblem(try Self.react(app, m, "u1", "like"), 409, .reactionExists)
            Self.expectProblem(try Self.react(app, m, "u3", "like"), 404, .messageNotFound, "not a participant")
            Self.expectProblem(try Self.react(app, m, "ghost", "like"), 404, .messageNotFound, "unknown user")
            Self.expectProblem(try Self.react(app, "m0000000000000000000000", "u1", "like"), 404, .messageNotFound, "unknown message")
            #expect(Self.shape(try Self.summary(app, m)) == ["like:2:u2,u1", "\(thumbs):1:u2", "x:1:u1"])
            // GET /v1/messages/{id}: self_included for a user token only.
            let viewed = try Self.asUser(app, u2, .get, "/v1/messages/\(m)")
            #expect(viewed.json?["reactions"]?.arrayValue?.map { $0["self_included"] } == [.bool(true), .bool(true), .bool(false)])
            #expect(try Self.summary(app, m).allSatisfy { $0["self_included"] == nil })
            // History pages too: a user token's page carries self_included, the app's view of that user's history does not.
            let page = try Self.asUser(app, u2, .get, "/v1/users/u2/conversations/peer/u1/messages")
            #expect(page.json?["items"]?[0]?["reactions"]?.arrayValue?.map { $0["self_included"] } == [.bool(true), .bool(true), .bool(false)])
            let appPage = try app.request(.get, "/v1/users/u2/conversations/peer/u1/messages")
            #expect(appPage.json?["items"]?[0]?["reactions"] == .array(try Self.summary(app, m)))

            // The users of one type, paged by reaction time then user id, with the total.
            let page1 = try app.request(.get, "/v1/messages/\(m)/reactions/like/users?limit=1")
            #expect(page1.status == 200, "\(page1.text)")
            #expect(page1.json?["items"]?.arrayValue?.map { $0["user_id"]?.stringValue } == ["u2"])
            #expect(page1.json?["items"]?[0]?["name"]?.stringValue == "name-u2")
            #expect(page1.json?["items"]?[0]?["reacted_at"]?.intValue != nil)
            #expect(page1.json?["total_count"]?.intValue == 2)
            let cursor = try #require(page1.json?["next_cursor"]?.stringValue)
            let page2 = try Self.asUser(app, u2, .get, "/v1/messages/\(m)/reactions/like/users?limit=1&cursor=\(cursor)")
            #expect(page2.json?["items"]?.arrayValue?.map { $0["user_id"]?.stringValue } == ["u1"])
            #expect(page2.json?["next_cursor"] == .null)
            Self.expectProblem(try app.request(.get, "/v1/messages/\(m)/reactions/like/users?cursor=junk"), 400, .invalidCursor)
            let encoded = try app.request(.get, "/v1/messages/\(m)/reactions/\(Self.percentEncoded(thumbs))/users")
            #expect(encoded.json?["items"]?.arrayValue?.map { $0["user_id"]?.stringValue } == ["u2"])
            let nobody = try app.request(.get, "/v1/messages/\(m)/reactions/nobody/users")
            #expect(nobody.status == 200)
            #expect(nobody.json?["items"]?.arrayValue?.isEmpty == true)
            #expect(nobody.json?["total_count"]?.intValue == 0)
            #expect(nobody.json?["next_cursor"] == .null)
            let u3 = try app.token(for: "u3")
            Self.expectProblem(try Self.asUser(app, u3, .get, "/v1/messages/\(m)/reactions/like/users"), 404, .messageNotFound)

            // Removing.
            Self.expectProblem(try app.request(.delete, "/v1/messages/\(m)/reactions/like"), 400, .invalidParams, "user_id is required")
            Self.expectInvalid(try app.request(.delete, "/v1/messages/\(m)/reactions/like?user_id=a%20b"), field: "user_id")
            Self.expectInvalid(
                try app.request(.delete, "/v1/messages/\(m)/reactions/\(String(repeating: "x", count: 33))?user_id=u1"), field: "reaction_type")
            Self.expectProblem(try Self.asUser(app, u2, .delete, "/v1/messages/\(m)/reactions/like?user_id=u1"), 403, .forbidden)
            Self.expectProblem(try Self.unreact(app, m, "u3", "like"), 404, .messageNotFound)
            #expect(try Self.unreact(app, m, "u1", "like").status == 204)
            Self.expectProblem(try Self.unreact(app, m, "u1", "like"), 404, .reactionNotFound)
            #expect(try Self.asUser(app, u2, .delete, "/v1/messages/\(m)/reactions/\(Self.percentEncoded(thumbs))").status == 204)
            #expect(Self.shape(try Self.summary(app, m)) == ["like:1:u2", "x:1:u1"])
            #expect(try Self.asUser(app, u2, .delete, "/v1/messages/\(m)/reactions/like").status == 204)
            #expect(try Self.unreact(app, m, "u1", "x").status == 204)
            #expect(try Self.summary(app, m).isEmpty)

            // One event per change, to both peers and nobody else, carrying the summary it made.
            let events = try Self.reactionEvents(app)
            #expect(events.count == 8)
            #expect(try Self.reactionEvents(app, user: "u1").count == 8)
            #expect(try Self.reactionEvents(app, user: "u2").count == 8)
            #expect(try Self.reactionEvents(app, user: "u3").isEmpty)
            let data = try #require(events.first?["data"])
            #expect(data["message_id"]?.stringValue == m)
            #expect(data["conversation_type"]?.stringValue == "peer")
            #expect(data["to"]?.stringValue == "u2")
            #expect(data["reactions"] == (try JSONValue.parse(Array(#"[{"reaction_type":"like","count":1,"user_ids":["u2"]}]"#.utf8))))
            #expect(events.last?["data"]?["reactions"] == .array([]))
        }
    }

    @Test func summaryOrdersTypesByEarliestReactionAndKeepsTenUsers() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            try app.createUser("s")
            try app.createUser("r")
            let users = (10..<22).map { "u\($0)" }
            for user in users { try app.createUser(user) }
            let g = try Self.createGroup(app, "s", members: ["r"] + users)
            let sent = try app.request(
                .post, "/v1/messages", json: #"{"from":"s","conversation_type":"group","to":"\#(g)","type":1,"body":{"text":"hi"}}"#)
            let m = try #require(sent.json?["message_id"]?.stringValue)
            #expect(try Self.react(app, m, "s", "b").status == 201)
            try server.advanceClock(ms: 10)
            for user in users.reversed() {
                #expect(try Self.react(app, m, user, "a").status == 201)
                try server.advanceClock(ms: 1)
            }
            #expect(try Self.react(app, m, "r", "c").status == 201)
            let reversed = Array(users.reversed())
            #expect(Self.shape(try Self.summary(app, m)) == ["b:1:s", "a:12:" + reversed.prefix(10).joined(separator: ","), "c:1:r"])
            // The earliest reactor of a type leaving moves the type to its next-earliest reactor's time.
            #expect(try Self.unreact(app, m, "s", "b").status == 204)
            #expect(try Self.unreact(app, m, reversed[0], "a").status == 204)
            #expect(Self.shape(try Self.summary(app, m)) == ["a:11:" + reversed.dropFirst().prefix(10).joined(separator: ","), "c:1:r"])
            // Equal times: by reaction_type bytes ("Z" < "b" < "é").
            #expect(try Self.react(app, m, "s", "é").status == 201)
            #expect(try Self.react(app, m, "s", "b").status == 201)
            #expect(try Self.react(app, m, "s", "Z").status == 201)
            // (The clock moves between requests: equal times are made by hand, in the reactions and their per-type counts,
            // then any change rebuilds the summary.)
            try server.sql(
                "UPDATE message_reactions SET reacted_at = 1e15 WHERE app_id = $1 AND message_id = $2 AND reaction_type IN ('é', 'b', 'Z')",
                [app.appID, m])
            try server.sql(
                "UPDATE message_reaction_types SET first_at = 1e15 WHERE app_id = $1 AND message_id = $2 AND reaction_type IN ('é', 'b', 'Z')",
                [app.appID, m])
            #expect(try Self.react(app, m, "r", "a").status == 201)
            let order = Self.shape(try Self.summary(app, m)).map { String($0.prefix(while: { $0 != ":" })) }
            #expect(order == ["a", "c", "Z", "b", "é"], "\(order)")
            // Users with equal times: by user id.
            try server.sql(
                "UPDATE message_reactions SET reacted_at = 5 WHERE app_id = $1 AND message_id = $2 AND reaction_type = 'a'", [app.appID, m])
            let ties = try app.request(.get, "/v1/messages/\(m)/reactions/a/users?limit=100")
            let tied = ties.json?["items"]?.arrayValue?.compactMap { $0["user_id"]?.stringValue } ?? []
            #expect(tied.count == 12)
            #expect(tied == tied.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) })
            // History pages carry the same summary as the single message.
            let history = try app.request(.get, "/v1/groups/\(g)/messages?limit=100").json?["items"]?.arrayValue ?? []
            let item = history.first { $0["message_id"]?.stringValue == m }
            #expect(Self.shape(item?["reactions"]?.arrayValue ?? []) == Self.shape(try Self.summary(app, m)))
        }
    }

    @Test func fiftyTypesAtMost() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for user in ["s", "r"] { try app.createUser(user) }
            let m = try Self.peerMessage(app, "s", "r")
            for i in 0..<50 { #expect(try Self.react(app, m, "s", "t\(i)").status == 201) }
            Self.expectProblem(try Self.react(app, m, "r", "t50"), 422, .reactionTypeLimit)
            #expect(try Self.react(app, m, "r", "t7").status == 201, "an existing type is not a new one")
            #expect(try Self.unreact(app, m, "s", "t0").status == 204)
            #expect(try Self.react(app, m, "r", "t50").status == 201)
            #expect(try Self.summary(app, m).count == 50)
        }
    }

    @Test func unstoredRevokedTipsAndDeletedMessagesTakeNoReactions() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for user in ["s", "r"] { try app.createUser(user) }
            let unstored = try Self.peerMessage(app, "s", "r", extra: #""online_only":true"#)
            // Unstored messages: 422 for reaction calls (docs/messages.md#sending).
            Self.expectProblem(try Self.react(app, unstored, "s", "like"), 422, .unsupportedOperation, "unstored")
            Self.expectProblem(try Self.unreact(app, unstored, "s", "like"), 422, .unsupportedOperation, "unstored")
            let revoked = try Self.peerMessage(app, "s", "r")
            #expect(try Self.react(app, revoked, "r", "like").status == 201)
            try server.sql("UPDATE messages SET type = 31 WHERE app_id = $1 AND message_id = $2", [app.appID, revoked])
            Self.expectProblem(try Self.react(app, revoked, "s", "like"), 422, .unsupportedOperation, "revoked")
            Self.expectProblem(try Self.unreact(app, revoked, "r", "like"), 404, .reactionNotFound, "revoke dropped the reactions")
            let revokedUsers = try app.request(.get, "/v1/messages/\(revoked)/reactions/like/users")
            #expect(revokedUsers.status == 200)
            #expect(revokedUsers.json?["total_count"]?.intValue == 0)
            // A real revoke drops the reactions and writes no message.reactions_updated.
            let real = try Self.peerMessage(app, "s", "r")
            #expect(try Self.react(app, real, "r", "like").status == 201)
            let before = try Self.reactionEvents(app).count
            let revoke = try app.request(.post, "/v1/messages/\(real)/revoke", json: "{}")
            #expect(revoke.status == 200, "\(revoke.text)")
            #expect(try Self.summary(app, real).isEmpty)
            #expect(try Self.reactionEvents(app).count == before)
            Self.expectProblem(try Self.react(app, real, "r", "like"), 422, .unsupportedOperation, "revoked")
            Self.expectProblem(try Self.unreact(app, real, "r", "like"), 404, .reactionNotFound, "revoked")
            let tips = try Self.peerMessage(app, "s", "r")
            try server.sql("UPDATE messages SET type = 32 WHERE app_id = $1 AND message_id = $2", [app.appID, tips])
            Self.expectProblem(try Self.react(app, tips, "s", "like"), 422, .unsupportedOperation, "tips")
            let deleted = try Self.peerMessage(app, "s", "r")
            #expect(try Self.react(app, deleted, "r", "like").status == 201)
            try server.sql("UPDATE messages SET deleted = true, body = NULL WHERE app_id = $1 AND message_id = $2", [app.appID, deleted])
            Self.expectProblem(try Self.react(app, deleted, "s", "like"), 404, .messageNotFound, "tombstone")
            Self.expectProblem(try Self.unreact(app, deleted, "r", "like"), 404, .messageNotFound, "tombstone")
            let hidden = try Self.peerMessage(app, "s", "r")
            try server.sql(
                """
                INSERT INTO message_hidden (app_id, user_id, conv_type, conv_id, seq, message_id)
                SELECT app_id, 'r', conv_type, conv_id, seq, message_id FROM messages WHERE app_id = $1 AND message_id = $2
                """, [app.appID, hidden])
            Self.expectProblem(try Self.react(app, hidden, "r", "like"), 404, .messageNotFound, "deleted for that user")
            #expect(try Self.react(app, hidden, "s", "like").status == 201)
        }
    }

    @Test func groupAndRoomMessagesReachTheirMembersOnly() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for user in ["o", "m", "x"] { try app.createUser(user) }
            let g = try Self.createGroup(app, "o", members: ["m"])
            let sent = try app.request(
                .post, "/v1/messages", json: #"{"from":"o","conversation_type":"group","to":"\#(g)","type":1,"body":{"text":"hi"}}"#)
            let gm = try #require(sent.json?["message_id"]?.stringValue)
            let x = try app.token(for: "x")
            Self.expectProblem(
                try Self.asUser(app, x, .post, "/v1/messages/\(gm)/reactions", json: #"{"reaction_type":"like"}"#), 404, .messageNotFound,
                "non-member")
            Self.expectProblem(try Self.react(app, gm, "x", "like"), 404, .messageNotFound, "non-member named by the app")
            Self.expectProblem(try Self.asUser(app, x, .get, "/v1/messages/\(gm)/reactions/like/users"), 404, .messageNotFound)
            let mine = try Self.asUser(app, try app.token(for: "m"), .post, "/v1/messages/\(gm)/reactions", json: #"{"reaction_type":"like"}"#)
            #expect(mine.status == 201, "\(mine.text)")
            #expect(try Self.reactionEvents(app, user: "o").count == 1)
            #expect(try Self.reactionEvents(app, user: "m").count == 1)
            #expect(try Self.reactionEvents(app, user: "x").isEmpty)
            let event = try #require(try Self.reactionEvents(app).first)
            #expect(event["data"]?["conversation_type"]?.stringValue == "group")
            #expect(event["data"]?["to"]?.stringValue == g)

            // A stored room message: members react; the event goes to the room.
            for user in ["o", "m"] { #expect(try app.request(.post, "/v1/rooms/r1/enter", json: #"{"user_id":"\#(user)"}"#).status == 200) }
            let roomSent = try RoomFixtures.send(app, "o", "r1", extra: #","storage":true"#)
            let rm = try #require(roomSent.json?["message_id"]?.stringValue)
            Self.expectProblem(try Self.react(app, rm, "x", "like"), 404, .messageNotFound, "not in the room")
            #expect(try Self.react(app, rm, "m", "like").status == 201)
            let roomEvents = try Self.reactionEvents(app).filter { $0["data"]?["conversation_type"]?.stringValue == "room" }
            #expect(roomEvents.count == 1)
            #expect(roomEvents.first?["data"]?["to"]?.stringValue == "r1")
            #expect(try Self.reactionEvents(app, user: "m").count == 2)
            #expect(try Self.reactionEvents(app, user: "x").isEmpty)
            let unstoredRoom = try RoomFixtures.send(app, "o", "r1")
            let urm = try #require(unstoredRoom.json?["message_id"]?.stringValue)
            Self.expectProblem(try Self.react(app, urm, "m", "like"), 422, .unsupportedOperation, "unstored room message")
        }
    }

    @Test func concurrentReactionsCountExactlyAndWriteOneEventEach() throws {
        try withApp(testClock: true, settings: #"{"rate_limit_app_rps":100000}"#) { server, app in
            try app.createUser("s")
            let users = (0..<32).map { "c\($0)" }
            for user in users { try app.createUser(user) }
            let g = try Self.createGroup(app, "s", members: users)
            let sent = try app.request(
                .post, "/v1/messages", json: #"{"from":"s","conversation_type":"group","to":"\#(g)","type":1,"body":{"text":"hi"}}"#)
            let m = try #require(sent.json?["message_id"]?.stringValue)
            let created = Atomic<Int>(0)
            DispatchQueue.concurrentPerform(iterations: users.count) { i in
                let type = i % 2 == 0 ? "even" : "odd"
                if let r = try? Self.react(app, m, users[i], type), r.status == 201 { created.add(1, ordering: .relaxed) }
            }
            #expect(created.load(ordering: .relaxed) == 32)
            let summary = try Self.summary(app, m)
            #expect(summary.map { $0["count"]?.intValue } == [16, 16])
            #expect(summary.allSatisfy { $0["user_ids"]?.arrayValue?.count == 10 })
            let events = try Self.reactionEvents(app)
            #expect(events.count == 32)
            // Each change made its own summary: the totals the events carry are 1 … 32, in the log's order (the changes are
            // serialised by the message's row lock, and their events are written in that order).
            let totals = events.map { e in (e["data"]?["reactions"]?.arrayValue ?? []).reduce(Int64(0)) { $0 + ($1["count"]?.intValue ?? 0) } }
            #expect(totals == (1...32).map(Int64.init))
            #expect(try server.count("SELECT count(*) FROM message_reactions WHERE app_id = $1 AND message_id = $2", [app.appID, m]) == 32)
            // The per-type counts the summary is built from agree with the rows.
            let counted = "SELECT coalesce(sum(count), 0) FROM message_reaction_types WHERE app_id = $1 AND message_id = $2"
            #expect(try server.count(counted, [app.appID, m]) == 32)

            // And all at once away again.
            let removed = Atomic<Int>(0)
            DispatchQueue.concurrentPerform(iterations: users.count) { i in
                let type = i % 2 == 0 ? "even" : "odd"
                if let r = try? Self.unreact(app, m, users[i], type), r.status == 204 { removed.add(1, ordering: .relaxed) }
            }
            #expect(removed.load(ordering: .relaxed) == 32)
            #expect(try Self.summary(app, m).isEmpty)
            #expect(try Self.reactionEvents(app).count == 64)
            #expect(try server.count(counted, [app.appID, m]) == 0)
        }
    }

    // MARK: - The contract

    @Test func answersAndEventsMatchTheDocument() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for user in ["s", "r", "x"] { try app.createUser(user, name: "N") }
            let m = try Self.peerMessage(app, "s", "r")
            let c = try ContractChecker(server: server, app: app)
            let add = "/v1/messages/{message_id}/reactions"
            let one = "/v1/messages/{message_id}/reactions/{reaction_type}"
            let users = "/v1/messages/{message_id}/reactions/{reaction_type}/users"
            c.call(.post, add, m, json: #"{"user_id":"s","reaction_type":"like"}"#, status: 201)
            c.call(.post, add, m, as: .user("r"), json: #"{"reaction_type":"like"}"#, status: 201)
            c.call(.post, add, m, json: #"{"user_id":"s","reaction_type":"like"}"#, status: 409)
            c.call(.post, add, m, json: #"{"user_id":"x","reaction_type":"like"}"#, status: 404)
            c.call(.post, add, m, json: #"{"user_id":"s","reaction_type":""}"#, status: 400)
            c.call(.get, users, m, "like", query: "limit=1", status: 200)
            c.call(.get, users, m, "like", as: .user("s"), status: 200)
            c.call(.get, users, m, "like", as: .user("x"), status: 404)
            c.call(.delete, one, m, "like", query: "user_id=s", status: 204)
            c.call(.delete, one, m, "like", query: "user_id=s", status: 404)
            try server.sql("UPDATE messages SET type = 31 WHERE app_id = $1 AND message_id = $2", [app.appID, m])
            c.call(.post, add, m, json: #"{"user_id":"s","reaction_type":"like"}"#, status: 422)
            for event in try Self.reactionEvents(app) {
                #expect(c.checkEventPayload(event))
            }
        }
    }
}

extension String {
    fileprivate func leftPadded(_ width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}
