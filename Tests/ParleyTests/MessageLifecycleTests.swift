import Foundation
import ParleyHTTP
import ParleySync
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains

/// Revoke, edit and delete (docs/messages.md#revoke-edit-delete) end to end: the permission ladders on the test clock,
/// the revoke record's shape, unread and mentions before and after, delete for self vs everyone, reply trees through
/// revoke and delete.
@Suite("Message lifecycle", .inProcess)
struct MessageLifecycleTests: GroupTestSupport {

    static func unread(_ app: TestApp, _ user: String, _ peer: String) throws -> Int64? {
        try PeerMessages.conversation(app, user, peer)?["unread_count"]?.intValue
    }

    @Test func revokeBySenderMakesATypeThirtyOneRecordInPlace() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let sent = try MessageActions.send(app, "a", "b", "secret text", extra: #""mentions":{"user_ids":["b"]}"#)
            let id = sent["message_id"]?.stringValue ?? ""
            #expect(try Self.unread(app, "b", "a") == 1)
            let tokenA = try app.token(for: "a")
            let r = try Self.asUser(app, tokenA, .post, "/v1/messages/\(id)/revoke", json: #"{"revoke_extended_data":"oops"}"#)
            #expect(r.status == 200, "\(r.text)")
            let m = r.json
            #expect(m?["message_id"]?.stringValue == id)
            #expect(m?["type"] == .int(31))
            #expect(m?["seq"] == sent["seq"])
            #expect(m?["from"] == .string("a"))
            #expect(m?["timestamp"] == sent["timestamp"])
            #expect(m?["body"]?["revoke_type"] == .int(0))
            #expect(m?["body"]?["revoke_status"] == .int(0))
            #expect(m?["body"]?["operator_id"] == .string("a"))
            #expect(m?["body"]?["revoke_extended_data"] == .string("oops"))
            #expect(m?["body"]?["original_type"] == .int(1))
            #expect(m?["body"]?["original_text"] == .string("secret text"), "the sender sees its original text")
            #expect(m?["body"]?["revoked_at"]?.intValue != nil)
            #expect(m?["mentions"]?["user_ids"] == .array([]))
            // The recipient sees the record without the original text; the app sees it.
            let asB = try Self.asUser(app, try app.token(for: "b"), .get, "/v1/messages/\(id)").json
            #expect(asB?["type"] == .int(31))
            #expect(asB?["body"]?["original_text"] == nil)
            #expect(try MessageActions.get(app, id)?["body"]?["original_text"] == .string("secret text"))
            // In both histories, at the same seq; no unread, no mention left.
            #expect(PeerMessages.seqs(try PeerMessages.history(app, "b", "a")) == [sent["seq"]?.intValue ?? 0])
            #expect(try PeerMessages.history(app, "b", "a").first?["type"] == .int(31))
            #expect(try Self.unread(app, "b", "a") == 0)
            #expect(try PeerMessages.conversation(app, "b", "a")?["mention"]?["items"] == .array([]))
            // One message.revoked to both users; a second revoke is 409.
            let events = try app.events(query: "types=message.revoked")
            #expect(events.count == 1)
            #expect(events.first?["data"]?["message"]?["type"] == .int(31))
            // The app log carries the app view (docs/events.md#two-views-of-the-same-event): the original text too
            // (UserEventLogTests: each user's view).
            #expect(events.first?["data"]?["message"]?["body"]?["original_text"] == .string("secret text"))
            // The event is rendered before the statement that changes the row and writes it: it is the row as stored.
            #expect(events.first?["data"]?["message"] == (try MessageActions.get(app, id)))
            #expect(try app.events(query: "types=message.revoked&user_id=b").count == 1)
            Self.expectProblem(try MessageActions.revoke(app, id), 409, .alreadyRevoked)
            Self.expectProblem(try MessageActions.revoke(app, "nope"), 404, .messageNotFound)
        }
    }

    /// Concurrent revokes are written a batch per transaction (MessageRevokes): each still gets its own answer (a
    /// refused one leaves the others of its batch), and each revoked message exactly one `message.revoked`.
    @Test func concurrentRevokesEachGetTheirOwnAnswer() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let ids = try (0..<40).map { i in try MessageActions.send(app, "a", "b", "text \(i)")["message_id"]?.stringValue ?? "" }
            let tokenB = try app.token(for: "b")
            // 0..<30 by the app; 30..<35 by b, who did not send them (403); 35..<40 twice by the app (one 200, one 409);
            // and five unknown ids (404).
            var calls: [(path: String, token: String?)] = ids.prefix(30).map { ("/v1/messages/\($0)/revoke", nil) }
            calls += ids[30..<35].map { ("/v1/messages/\($0)/revoke", tokenB) }
            calls += ids[35...].flatMap { id in [("/v1/messages/\(id)/revoke", nil), ("/v1/messages/\(id)/revoke", nil)] }
            calls += (0..<5).map { ("/v1/messages/m\($0)nosuch/revoke", nil) }
            let answers = LockedValue<[Int: (Int, Int?)]>([:])
            let work = calls
            WritePathTests.onThreads(work.count) { i in
                let call = work[i]
                let r =
                    call.token.map { try? Self.asUser(app, $0, .post, call.path, json: "{}") } ?? (try? app.request(.post, call.path, json: "{}"))
                answers.withLock { $0[i] = (r?.status ?? 0, r?.code) }
            }
            let got = answers.withLock { $0 }
            for i in 0..<30 { #expect(got[i]?.0 == 200, "revoke \(i)") }
            for i in 30..<35 {
                #expect(got[i]?.0 == 403 && got[i]?.1 == ErrorCode.messagePermissionDenied.code, "revoke \(i) by b: \(String(describing: got[i]))")
            }
            for pair in 0..<5 {
                let statuses = [got[35 + 2 * pair]?.0, got[36 + 2 * pair]?.0].compactMap { $0 }.sorted()
                #expect(statuses == [200, 409], "twice \(pair): \(statuses)")
            }
            for i in 45..<50 { #expect(got[i]?.0 == 404 && got[i]?.1 == ErrorCode.messageNotFound.code, "unknown \(i)") }
            let revoked = try app.events(query: "types=message.revoked").compactMap { $0["data"]?["message"]?["message_id"]?.stringValue }
            #expect(revoked.sorted() == (Array(ids.prefix(30)) + Array(ids[35...])).sorted())
            for id in ids[30..<35] { #expect(try MessageActions.get(app, id)?["type"] == .int(1)) }
        }
    }

    @Test func theRevokePermissionLadder() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["o", "adm", "m1", "m2", "x"] { try app.createUser(id) }
            let group = try Self.createGroup(app, "o", members: ["adm", "m1", "m2"])
            try Self.setRole(app, group, "adm", 2)
            let fromMember = try MessageActions.sendGroup(app, "m1", group)["message_id"]?.stringValue ?? ""
            let fromMember2 = try MessageActions.sendGroup(app, "m1", group)["message_id"]?.stringValue ?? ""
            let fromOwner = try MessageActions.sendGroup(app, "o", group)["message_id"]?.stringValue ?? ""
            let fromAdmin = try MessageActions.sendGroup(app, "adm", group)["message_id"]?.stringValue ?? ""
            let peer = try MessageActions.send(app, "m1", "m2")["message_id"]?.stringValue ?? ""
            // Another member: 403 6000285; a non-member: 404 (it cannot see the message).
            Self.expectProblem(try MessageActions.revoke(app, fromMember, #"{"operator":"m2"}"#), 403, .messagePermissionDenied)
            Self.expectProblem(try MessageActions.revoke(app, fromMember, #"{"operator":"x"}"#), 404, .messageNotFound)
            // Past the window the sender gets 6000278.
            try server.advanceClock(ms: 121_000)
            Self.expectProblem(try MessageActions.revoke(app, fromMember, #"{"operator":"m1"}"#), 403, .revokeWindowExpired)
            Self.expectProblem(try MessageActions.revoke(app, peer, #"{"operator":"m1"}"#), 403, .revokeWindowExpired)
            // An admin over a member (3), not over the owner; the owner over anyone (4); the app (2).
            #expect(try MessageActions.revoke(app, fromMember, #"{"operator":"adm"}"#).json?["body"]?["revoke_status"] == .int(3))
            Self.expectProblem(try MessageActions.revoke(app, fromOwner, #"{"operator":"adm"}"#), 403, .messagePermissionDenied)
            #expect(try MessageActions.revoke(app, fromAdmin, #"{"operator":"o"}"#).json?["body"]?["revoke_status"] == .int(4))
            let byApp = try MessageActions.revoke(app, fromOwner)
            #expect(byApp.json?["body"]?["revoke_status"] == .int(2))
            #expect(byApp.json?["body"]?["operator_id"] == .null)
            #expect(try MessageActions.revoke(app, peer, #"{"operator":"m2","skip_checks":true}"#).json?["body"]?["revoke_status"] == .int(2))
            // A window of 0: never by the sender.
            try PeerMessages.patchSettings(app, #"{"revoke_window_s":0}"#)
            let fresh = try MessageActions.sendGroup(app, "m1", group)["message_id"]?.stringValue ?? ""
            Self.expectProblem(try MessageActions.revoke(app, fresh, #"{"operator":"m1"}"#), 403, .revokeWindowExpired)
            _ = fromMember2
        }
    }

    @Test func editWithHistoryAndItsRules() throws {
        try withApp(testClock: true, settings: #"{"sensitive_words":["darn"],"sensitive_word_action":"reject"}"#, unthrottled: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let id = try MessageActions.send(app, "a", "b", "first", extra: #""extended_data":"x1""#)["message_id"]?.stringValue ?? ""
            let edited = try app.request(.patch, "/v1/messages/\(id)", json: #"{"operator":"a","body":{"text":"second"}}"#)
            #expect(edited.status == 200, "\(edited.text)")
            #expect(edited.json?["body"]?["text"] == .string("second"))
            #expect(edited.json?["edit_count"] == .int(1))
            #expect(edited.json?["editor_id"] == .string("a"))
            #expect(edited.json?["edited_at"]?.intValue != nil)
            #expect(edited.json?["extended_data"] == .string("x1"))
            _ = try app.request(.patch, "/v1/messages/\(id)", json: #"{"body":{"text":"third"},"extended_data":"x3"}"#)
            let edits = try app.request(.get, "/v1/messages/\(id)/edits").json?["items"]?.arrayValue ?? []
            #expect(edits.compactMap { $0["version"]?.intValue } == [1, 2, 3])
            #expect(edits.compactMap { $0["body"]?["text"]?.stringValue } == ["first", "second", "third"])
            #expect(edits.last?["editor_id"] == .null, "the app edited last")
            #expect(edits.first?["editor_id"] == .string("a"))
            let page = try app.request(.get, "/v1/messages/\(id)/edits?limit=2").json
            #expect(page?["items"]?.arrayValue?.count == 2)
            let cursor = page?["next_cursor"]?.stringValue ?? ""
            #expect(try app.request(.get, "/v1/messages/\(id)/edits?limit=2&cursor=\(cursor)").json?["items"]?[0]?["version"] == .int(3))
            #expect(try app.events(query: "types=message.edited").count == 2)
            // Rules: another user 6000285, a sensitive word 80001, a bad body 400, another type 6000013.
            Self.expectProblem(
                try app.request(.patch, "/v1/messages/\(id)", json: #"{"operator":"b","body":{"text":"no"}}"#), 403, .messagePermissionDenied)
            Self.expectProblem(try app.request(.patch, "/v1/messages/\(id)", json: #"{"operator":"a","body":{"text":"darn"}}"#), 422, .sensitiveWord)
            Self.expectInvalid(try app.request(.patch, "/v1/messages/\(id)", json: #"{"operator":"a","body":{"text":""}}"#), field: "body.text")
            let image =
                try PeerMessages.send(app, "a", "b", type: 11, body: #"{"url":"https://x.example/i.png","file_name":"i.png"}"#).json?["message_id"]?
                .stringValue ?? ""
            Self.expectProblem(
                try app.request(.patch, "/v1/messages/\(image)", json: #"{"operator":"a","body":{"text":"x"}}"#), 422, .unsupportedOperation)
            // A never-edited message lists itself as version 1.
            #expect(try app.request(.get, "/v1/messages/\(image)/edits").json?["items"]?.arrayValue?.count == 1)
            // Past the window 6000286; revoked 6000279.
            try server.advanceClock(ms: 86_400_000)
            Self.expectProblem(
                try app.request(.patch, "/v1/messages/\(id)", json: #"{"operator":"a","body":{"text":"late"}}"#), 403, .editWindowExpired)
            #expect(try MessageActions.revoke(app, id).status == 200)
            Self.expectProblem(try app.request(.patch, "/v1/messages/\(id)", json: #"{"body":{"text":"x"}}"#), 409, .alreadyRevoked)
        }
    }

    @Test func deleteForSelfAndForEveryone() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b", "o", "m"] { try app.createUser(id) }
            let one = try MessageActions.send(app, "a", "b", "one")["message_id"]?.stringValue ?? ""
            let two = try MessageActions.send(app, "a", "b", "two")["message_id"]?.stringValue ?? ""
            #expect(try Self.unread(app, "b", "a") == 2)
            // Self: hidden from b only (history, GET, unread); a still sees it.
            let mine = try app.request(
                .post, "/v1/messages/delete", json: "{\"scope\":\"self\",\"user_id\":\"b\",\"message_ids\":[\"\(one)\",\"nope\"]}")
            #expect(mine.status == 200, "\(mine.text)")
            #expect(Self.codes(mine) == [nil, ErrorCode.messageNotFound.code])
            #expect(PeerMessages.seqs(try PeerMessages.history(app, "b", "a")) == [2])
            #expect(PeerMessages.seqs(try PeerMessages.history(app, "a", "b")) == [2, 1])
            #expect(try Self.unread(app, "b", "a") == 1)
            Self.expectProblem(try Self.asUser(app, try app.token(for: "b"), .get, "/v1/messages/\(one)"), 404, .messageNotFound)
            let selfEvents = try app.events(query: "types=message.deleted")
            #expect(selfEvents.count == 1)
            #expect(selfEvents.first?["data"]?["scope"] == .string("self"))
            #expect(try app.events(query: "types=message.deleted&user_id=a").isEmpty)
            // Everyone: only the app (or group owner/admin); the sender of a peer message gets 6000285.
            let denied = try app.request(
                .post, "/v1/messages/delete", json: "{\"scope\":\"everyone\",\"operator\":\"a\",\"message_ids\":[\"\(two)\"]}")
            #expect(Self.codes(denied) == [ErrorCode.messagePermissionDenied.code])
            let gone = try app.request(.post, "/v1/messages/delete", json: "{\"scope\":\"everyone\",\"message_ids\":[\"\(two)\"]}")
            #expect(Self.codes(gone) == [nil])
            let tomb = try PeerMessages.history(app, "a", "b").first
            #expect(tomb?["deleted"] == .bool(true))
            #expect(tomb?["body"] == .null)
            #expect(tomb?["seq"] == .int(2))
            #expect(try Self.unread(app, "b", "a") == 0)
            let everyone = try app.events(query: "types=message.deleted").last
            #expect(everyone?["data"]?["scope"] == .string("everyone"))
            #expect(everyone?["data"]?["message_ids"] == .array([.string(two)]))
            Self.expectProblem(try MessageActions.revoke(app, two), 404, .messageNotFound)
            // A group owner deletes any group message; a member deletes none.
            let group = try Self.createGroup(app, "o", members: ["m"])
            let g1 = try MessageActions.sendGroup(app, "o", group)["message_id"]?.stringValue ?? ""
            let g2 = try MessageActions.sendGroup(app, "m", group)["message_id"]?.stringValue ?? ""
            let byMember = try app.request(
                .post, "/v1/messages/delete", json: "{\"scope\":\"everyone\",\"operator\":\"m\",\"message_ids\":[\"\(g1)\",\"\(g2)\"]}")
            #expect(Self.codes(byMember) == [ErrorCode.messagePermissionDenied.code, ErrorCode.messagePermissionDenied.code])
            let byOwner = try app.request(
                .post, "/v1/messages/delete", json: "{\"scope\":\"everyone\",\"operator\":\"o\",\"message_ids\":[\"\(g1)\",\"\(g2)\"]}")
            #expect(Self.codes(byOwner) == [nil, nil])
            let groupEvent = try app.events(query: "types=message.deleted&group_id=\(group)")
            #expect(groupEvent.count == 1, "one event per conversation")
            #expect(groupEvent.first?["data"]?["message_ids"] == .array([.string(g1), .string(g2)]))
            Self.expectInvalid(try app.request(.post, "/v1/messages/delete", json: #"{"scope":"all","message_ids":["x"]}"#), field: "body.scope")
        }
    }

    /// Stored or not (docs/messages.md#sending): revoke, edit, pin and reaction calls naming an unstored message answer
    /// 422 `6000013` for `event_retention_hours` after its send, and 404 `7000210` afterwards; `GET /v1/messages/{id}`
    /// never finds it.
    @Test func unstoredMessagesAreToldFromUnknownOnesUntilTheEventRetentionPasses() throws {
        try withApp(testClock: true, settings: #"{"event_retention_hours":1}"#, unthrottled: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let sent = try MessageActions.send(app, "a", "b", "now or never", extra: #""online_only":true"#)
            #expect(sent["stored"] == .bool(false))
            let id = try #require(sent["message_id"]?.stringValue)
            func changes() throws -> [TestResponse] {
                [
                    try MessageActions.revoke(app, id),
                    try app.request(.patch, "/v1/messages/\(id)", json: #"{"body":{"text":"edited"}}"#),
                    try app.request(.post, "/v1/messages/\(id)/pin", json: "{}"),
                    try app.request(.post, "/v1/messages/\(id)/unpin", json: "{}"),
                    try app.request(.post, "/v1/messages/\(id)/reactions", json: #"{"user_id":"b","reaction_type":"like"}"#),
                    try app.request(.delete, "/v1/messages/\(id)/reactions/like?user_id=b"),
                    try app.request(.get, "/v1/messages/\(id)/reactions/like/users"),
                ]
            }
            for r in try changes() { Self.expectProblem(r, 422, .unsupportedOperation) }
            // Reading it finds no message.
            Self.expectProblem(try app.request(.get, "/v1/messages/\(id)"), 404, .messageNotFound)
            // An id of the same shape that was never sent long ago, and a stored-message id that is unknown: 404.
            Self.expectProblem(try MessageActions.revoke(app, "u00000001" + String(id.dropFirst(9))), 404, .messageNotFound)
            Self.expectProblem(try MessageActions.revoke(app, "m" + String(id.dropFirst())), 404, .messageNotFound)
            try server.advanceClock(ms: 3_600_000)
            for r in try changes() { Self.expectProblem(r, 404, .messageNotFound) }
        }
    }

    /// A combine message gone for everyone (deleted or revoked) takes its snapshots with it: they are the content of
    /// its body, which a tombstone and a revoke record no longer carry.
    @Test func combineSnapshotsGoWithTheirMessage() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let inner = try MessageActions.send(app, "a", "b", "inside")["message_id"]?.stringValue ?? ""
            func combine() throws -> String {
                let r = try app.request(
                    .post, "/v1/messages",
                    json: #"{"from":"a","conversation_type":"peer","to":"b","type":100,"body":{"title":"t","message_ids":["\#(inner)"]}}"#)
                #expect(r.status == 201, "\(r.text)")
                return r.json?["message_id"]?.stringValue ?? ""
            }
            let snapshots = "SELECT count(*) FROM message_combines WHERE app_id = $1"
            let deleted = try combine()
            let revoked = try combine()
            #expect(try server.count(snapshots, [app.appID]) == 2)
            let gone = try app.request(.post, "/v1/messages/delete", json: "{\"scope\":\"everyone\",\"message_ids\":[\"\(deleted)\"]}")
            #expect(Self.codes(gone) == [nil])
            #expect(try server.count(snapshots, [app.appID]) == 1)
            // The tombstone keeps its type and lists no snapshots.
            let listed = try app.request(.get, "/v1/messages/\(deleted)/combined")
            #expect(listed.status == 200, "\(listed.text)")
            #expect(listed.json?["items"] == .array([]))
            #expect(try MessageActions.revoke(app, revoked).status == 200)
            #expect(try server.count(snapshots, [app.appID]) == 0)
            // The combined message itself is untouched.
            #expect(try MessageActions.get(app, inner)?["type"] == .int(1))
        }
    }

    /// `last_message` is the highest-seq message visible to the user: a delete for self moves that user's, nobody
    /// else's; `include_hidden` (app key) brings the hidden messages back into that user's history
    /// (docs/messages.md#history).
    @Test func deleteForSelfMovesOnlyThatUsersLastMessage() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let ids = try ["one", "two", "three"].map { try MessageActions.send(app, "a", "b", $0)["message_id"]?.stringValue ?? "" }
            func last(_ user: String, _ peer: String) throws -> JSONValue? {
                let r = try app.request(.get, "/v1/users/\(user)/conversations/peer/\(peer)")
                #expect(r.status == 200, "\(r.text)")
                return r.json
            }
            let hide = try app.request(.post, "/v1/messages/delete", json: "{\"scope\":\"self\",\"user_id\":\"b\",\"message_ids\":[\"\(ids[2])\"]}")
            #expect(Self.codes(hide) == [nil])
            #expect(try last("b", "a")?["last_message"]?["message_id"] == .string(ids[1]))
            #expect(try last("b", "a")?["last_seq"] == .int(3))
            #expect(try last("a", "b")?["last_message"]?["message_id"] == .string(ids[2]))
            #expect(PeerMessages.seqs(try PeerMessages.history(app, "b", "a")) == [2, 1])
            #expect(PeerMessages.seqs(try PeerMessages.history(app, "b", "a", query: "?include_hidden=true")) == [3, 2, 1])
            // Everything hidden: no last message for b; a's stays.
            let rest = try app.request(
                .post, "/v1/messages/delete", json: "{\"scope\":\"self\",\"user_id\":\"b\",\"message_ids\":[\"\(ids[0])\",\"\(ids[1])\"]}")
            #expect(Self.codes(rest) == [nil, nil])
            #expect(try last("b", "a")?["last_message"] == .null)
            #expect(try last("a", "b")?["last_message"]?["message_id"] == .string(ids[2]))
            #expect(try Self.unread(app, "b", "a") == 0)
        }
    }

    @Test func replyTreesThroughRevokeAndDelete() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let root = try MessageActions.send(app, "a", "b", "root")["message_id"]?.stringValue ?? ""
            let replyA = try MessageActions.send(app, "b", "a", "reply A", extra: "\"reply_to\":\"\(root)\"")["message_id"]?.stringValue ?? ""
            let replyB = try MessageActions.send(app, "a", "b", "reply B", extra: "\"reply_to\":\"\(replyA)\"")["message_id"]?.stringValue ?? ""
            #expect(try MessageActions.get(app, root)?["reply_count"] == .int(2))
            #expect(try MessageActions.get(app, replyB)?["root_message_id"] == .string(root))
            #expect(try MessageActions.revoke(app, replyA).status == 200)
            let b = try MessageActions.get(app, replyB)
            #expect(b?["reply"]?["state"] == .string("deleted"))
            #expect(b?["reply"]?["snapshot"] == .null)
            #expect(b?["reply"]?["message_id"] == .string(replyA))
            #expect(try MessageActions.get(app, root)?["reply_count"] == .int(1))
            let counts = try app.events(query: "types=message.reply_count_updated").compactMap { $0["data"]?["reply_count"]?.intValue }
            #expect(counts == [1, 2, 1])
            // The revoke's events: message.revoked, then the root's count.
            let order = try app.events(query: "types=message.revoked,message.reply_count_updated").compactMap { $0["type"]?.stringValue }
            #expect(order.suffix(2) == ["message.revoked", "message.reply_count_updated"])
            let deleted = try app.request(.post, "/v1/messages/delete", json: "{\"scope\":\"everyone\",\"message_ids\":[\"\(replyB)\"]}")
            #expect(Self.codes(deleted) == [nil])
            #expect(try MessageActions.get(app, root)?["reply_count"] == .int(0))
            // A revoked root keeps its replies' trees, with their reply state switched.
            #expect(try MessageActions.revoke(app, root).status == 200)
            #expect(try MessageActions.get(app, replyA)?["reply"]?["state"] == .string("deleted"))
        }
    }

    @Test func roomMessagesAndTipsFollowTheRulesToo() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            #expect(try app.request(.post, "/v1/rooms", json: #"{"room_id":"r","creator":"a"}"#).status == 201)
            let r = try app.request(
                .post, "/v1/messages",
                json: #"{"from":"a","conversation_type":"room","to":"r","type":1,"body":{"text":"x"},"storage":true,"cache":true}"#)
            let id = r.json?["message_id"]?.stringValue ?? ""
            Self.expectProblem(try MessageActions.revoke(app, id, #"{"operator":"b"}"#), 404, .messageNotFound)
            #expect(try MessageActions.revoke(app, id, #"{"operator":"a"}"#).json?["type"] == .int(31))
            // The recent cache shows the revoke record too, its text to the sender only.
            #expect(try app.request(.post, "/v1/rooms/r/enter", json: #"{"user_id":"b"}"#).status == 200)
            let cachedForB = try Self.asUser(app, try app.token(for: "b"), .get, "/v1/rooms/r/messages/recent").json?["items"]?[0]
            #expect(cachedForB?["type"] == .int(31))
            #expect(cachedForB?["body"]?["original_text"] == nil)
            let cachedForA = try Self.asUser(app, try app.token(for: "a"), .get, "/v1/rooms/r/messages/recent").json?["items"]?[0]
            #expect(cachedForA?["body"]?["original_text"] == .string("x"))
            #expect(try app.events(query: "types=message.revoked&room_id=r").count == 1)
            let group = try Self.createGroup(app, "a", members: ["b"])
            let tips = try app.request(.get, "/v1/groups/\(group)/messages").json?["items"]?[0]?["message_id"]?.stringValue ?? ""
            Self.expectProblem(try MessageActions.revoke(app, tips), 422, .unsupportedOperation)
        }
    }
}
