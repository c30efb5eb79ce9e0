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

/// Message pins and the replies list (docs/messages.md#reactions-pins-and-replies), end to end: pin and unpin with
/// `message.pin_updated` and the tips message (event 9, docs/groups.md#tips-messages), permissions, the 20-pin limit, a
/// conversation's pins and a reply tree.
@Suite("Message pins and replies", .inProcess)
struct MessagePinsTests: GroupTestSupport {
    /// Sends a text as `from` to `to` (peer or group) with the app key; returns its message id.
    @discardableResult
    static func text(_ app: TestApp, _ from: String, _ to: String, group: Bool = false, _ text: String = "hi", extra: String = "") throws
        -> String
    {
        let json =
            #"{"from":"\#(from)","conversation_type":"\#(group ? "group" : "peer")","to":"\#(to)","type":1,"body":{"text":"\#(text)"}"#
            + (extra.isEmpty ? "" : "," + extra) + "}"
        let r = try app.request(.post, "/v1/messages", json: json)
        guard r.status == 201, let id = r.json?["message_id"]?.stringValue else { throw TestFailure("send failed: \(r.status) \(r.text)") }
        return id
    }

    /// Pins or unpins `messageID` with the app key (`operator` named when given).
    @discardableResult
    static func pin(_ app: TestApp, _ messageID: String, _ op: String?, unpin: Bool = false) throws -> TestResponse {
        try app.request(.post, "/v1/messages/\(messageID)/\(unpin ? "unpin" : "pin")", json: op.map { #"{"operator":"\#($0)"}"# } ?? "{}")
    }

    /// The tips messages (type 32) of `user`'s peer history with `peer`, oldest first.
    static func peerTips(_ app: TestApp, _ user: String, _ peer: String) throws -> [JSONValue] {
        let r = try app.request(.get, "/v1/users/\(user)/conversations/peer/\(peer)/messages?direction=forward&limit=100")
        #expect(r.status == 200, "\(r.text)")
        return (r.json?["items"]?.arrayValue ?? []).filter { $0["type"] == .int(32) }
    }

    /// The types of the app's events about message pins in log order: `pin:<message_id>` and `tips:<message_id>`.
    static func pinTrail(_ app: TestApp) throws -> [String] {
        try app.events().compactMap { event -> String? in
            let data = event["data"]
            if event["type"] == .string("message.pin_updated") { return "pin:" + (data?["message_id"]?.stringValue ?? "") }
            if event["type"] == .string("message.sent"), data?["message"]?["type"] == .int(32),
                data?["message"]?["body"]?["event"] == .int(9)
            {
                return "tips:" + (data?["message"]?["body"]?["change"]?["message_id"]?.stringValue ?? "")
            }
            return nil
        }
    }

    @Test func peerPinAndUnpinWriteTheEventAndTips() throws {
        try withApp { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id, name: "N" + id) }
            let m = try Self.text(app, "a", "b")
            let tokenB = try app.token(for: "b")

            // The other participant pins with its token.
            let pinned = try Self.asUser(app, tokenB, .post, "/v1/messages/\(m)/pin", json: "{}")
            #expect(pinned.status == 200, "\(pinned.text)")
            #expect(pinned.json?["message_id"] == .string(m))
            #expect(pinned.json?["pinned"]?["by"] == .string("b"))
            #expect(pinned.json?["pinned"]?["at"]?.intValue != nil)
            #expect(try app.request(.get, "/v1/messages/\(m)").json?["pinned"]?["by"] == .string("b"))

            var tips = try Self.peerTips(app, "a", "b")
            #expect(tips.count == 1)
            #expect(tips.first?["seq"] == .int(2))
            #expect(tips.first?["conversation_type"] == .string("peer"))
            #expect(tips.first?["from"] == .string("b"))
            #expect(tips.first?["to"] == .string("a"))
            #expect(tips.first?["body"]?["event"] == .int(9))
            #expect(tips.first?["body"]?["operator"]?["user_id"] == .string("b"))
            #expect(tips.first?["body"]?["operator"]?["name"] == .string("Nb"))
            #expect(tips.first?["body"]?["targets"] == .array([]))
            #expect(tips.first?["body"]?["change"]?["type"] == .int(20))
            #expect(tips.first?["body"]?["change"]?["message_id"] == .string(m))
            #expect(tips.first?["body"]?["change"]?["is_pinned"] == .bool(true))
            #expect(try Self.peerTips(app, "b", "a").count == 1)

            // message.pin_updated comes before the tips, to both peers.
            #expect(try Self.pinTrail(app) == ["pin:\(m)", "tips:\(m)"])
            let event = try Self.events(app, "message.pin_updated", user: "a").first
            #expect(event?["data"]?["message_id"] == .string(m))
            #expect(event?["data"]?["conversation_type"] == .string("peer"))
            #expect(event?["data"]?["to"] == .string("b"))
            #expect(event?["data"]?["pinned"]?["by"] == .string("b"))
            #expect(event?["data"]?["operator"] == .string("b"))
            #expect(try Self.events(app, "message.pin_updated", user: "b").count == 1)
            #expect(try Self.events(app, "message.pin_updated", user: "c").isEmpty)

            // Pinning it again is a no-op: 200, no event, no tips.
            let again = try Self.pin(app, m, "a")
            #expect(again.status == 200, "\(again.text)")
            #expect(again.json?["pinned"]?["by"] == .string("b"))
            #expect(try Self.pinTrail(app).count == 2)

            // The sender unpins with the app key naming it.
            let unpinned = try Self.pin(app, m, "a", unpin: true)
            #expect(unpinned.status == 200, "\(unpinned.text)")
            #expect(unpinned.json?["pinned"] == .null)
            tips = try Self.peerTips(app, "a", "b")
            #expect(tips.count == 2)
            #expect(tips.last?["from"] == .string("a"))
            #expect(tips.last?["to"] == .string("b"))
            #expect(tips.last?["body"]?["change"]?["is_pinned"] == .bool(false))
            #expect(try Self.pinTrail(app) == ["pin:\(m)", "tips:\(m)", "pin:\(m)", "tips:\(m)"])
            let unpinEvent = try Self.events(app, "message.pin_updated").last
            #expect(unpinEvent?["data"]?["pinned"] == .null)
            #expect(unpinEvent?["data"]?["operator"] == .string("a"))

            // Unpinning an unpinned message is a no-op.
            #expect(try Self.pin(app, m, "b", unpin: true).status == 200)
            #expect(try Self.pinTrail(app).count == 4)

            // The app without operator: pinned.by null; the tips is from the pinned message's sender, operator null.
            let byApp = try Self.pin(app, m, nil)
            #expect(byApp.status == 200, "\(byApp.text)")
            #expect(byApp.json?["pinned"]?["by"] == .null)
            #expect(byApp.json?["pinned"]?["at"]?.intValue != nil)
            tips = try Self.peerTips(app, "a", "b")
            #expect(tips.last?["from"] == .string("a"))
            #expect(tips.last?["body"]?["operator"] == .null)
            #expect(try Self.events(app, "message.pin_updated").last?["data"]?["operator"] == .null)

            // A user outside the conversation does not see the message; a token acts only for its user.
            let tokenC = try app.token(for: "c")
            Self.expectProblem(try Self.asUser(app, tokenC, .post, "/v1/messages/\(m)/unpin", json: "{}"), 404, .messageNotFound)
            Self.expectProblem(try Self.pin(app, m, "c", unpin: true), 404, .messageNotFound)
            Self.expectProblem(
                try Self.asUser(app, tokenB, .post, "/v1/messages/\(m)/unpin", json: #"{"operator":"a"}"#), 403, .forbidden)
            Self.expectProblem(try Self.pin(app, "m-unknown", nil), 404, .messageNotFound)
            Self.expectProblem(try Self.pin(app, m, "not a user"), 400, .invalidParams)
        }
    }

    @Test func groupPinPermissions() throws {
        try withApp { server, app in
            for id in ["o", "ad", "m", "x"] { try app.createUser(id) }
            let g = try Self.createGroup(app, "o", members: ["ad", "m"])
            try Self.setRole(app, g, "ad", 2)
            let msg = try Self.text(app, "m", g, group: true)

            // A member (role 3), even the sender, may not pin; nor may a custom role.
            let tokenM = try app.token(for: "m")
            Self.expectProblem(try Self.asUser(app, tokenM, .post, "/v1/messages/\(msg)/pin", json: "{}"), 403, .messagePermissionDenied)
            Self.expectProblem(try Self.pin(app, msg, "m"), 403, .messagePermissionDenied)
            try Self.setRole(app, g, "m", 7)
            let before = try Self.tips(app, g).count
            Self.expectProblem(try Self.pin(app, msg, "m"), 403, .messagePermissionDenied)
            // A non-member does not see the message.
            Self.expectProblem(try Self.pin(app, msg, "x"), 404, .messageNotFound)
            #expect(try Self.tips(app, g).count == before)

            // An admin pins; the owner unpins.
            let byAdmin = try Self.asUser(app, try app.token(for: "ad"), .post, "/v1/messages/\(msg)/pin", json: "{}")
            #expect(byAdmin.status == 200, "\(byAdmin.text)")
            #expect(byAdmin.json?["pinned"]?["by"] == .string("ad"))
            var tips = try Self.tips(app, g)
            #expect(tips.count == before + 1)
            #expect(tips.last?["from"] == .string("ad"))
            #expect(tips.last?["to"] == .string(g))
            #expect(tips.last?["body"]?["event"] == .int(9))
            #expect(tips.last?["body"]?["change"]?["is_pinned"] == .bool(true))
            let event = try Self.events(app, "message.pin_updated", user: "m").last
            #expect(event?["data"]?["conversation_type"] == .string("group"))
            #expect(event?["data"]?["to"] == .string(g))
            #expect(try Self.events(app, "message.pin_updated", user: "x").isEmpty)

            let byOwner = try Self.pin(app, msg, "o", unpin: true)
            #expect(byOwner.status == 200, "\(byOwner.text)")
            #expect(byOwner.json?["pinned"] == .null)
            #expect(try Self.pinTrail(app) == ["pin:\(msg)", "tips:\(msg)", "pin:\(msg)", "tips:\(msg)"])

            // The app alone: pinned.by null, the tips from the owner with operator null.
            let byApp = try Self.pin(app, msg, nil)
            #expect(byApp.status == 200, "\(byApp.text)")
            #expect(byApp.json?["pinned"]?["by"] == .null)
            tips = try Self.tips(app, g)
            #expect(tips.last?["from"] == .string("o"))
            #expect(tips.last?["body"]?["operator"] == .null)

            // A dismissed group: 409.
            #expect(try app.request(.post, "/v1/groups/\(g)/dismiss", json: #"{"operator":"o"}"#).status == 200)
            Self.expectProblem(try Self.pin(app, msg, nil, unpin: true), 409, .groupDismissed)
        }
    }

    @Test func twentyPinsPerConversation() throws {
        try withApp { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }
            var ids: [String] = []
            for i in 0..<21 { ids.append(try Self.text(app, i % 2 == 0 ? "a" : "b", i % 2 == 0 ? "b" : "a", "t\(i)")) }
            for id in ids.prefix(20) { #expect(try Self.pin(app, id, nil).status == 200) }
            Self.expectProblem(try Self.pin(app, ids[20], "a"), 422, .pinLimit)
            // Another conversation has its own 20.
            let other = try Self.text(app, "a", "c")
            #expect(try Self.pin(app, other, "c").status == 200)
            // Unpinning frees a slot.
            #expect(try Self.pin(app, ids[0], "b", unpin: true).status == 200)
            #expect(try Self.pin(app, ids[20], "a").status == 200)
            Self.expectProblem(try Self.pin(app, ids[0], "a"), 422, .pinLimit)
            let pins = try app.request(.get, "/v1/users/a/conversations/peer/b/pins")
            #expect(pins.json?["items"]?.arrayValue?.count == 20, "\(pins.text)")
        }
    }

    @Test func concurrentPinsKeepTheLimit() throws {
        try withApp { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            var ids: [String] = []
            for i in 0..<26 { ids.append(try Self.text(app, "a", "b", "t\(i)")) }
            for id in ids.prefix(18) { #expect(try Self.pin(app, id, nil).status == 200) }
            // Eight pins at once for the last two slots: two succeed, six are over the limit, and each success has its tips.
            let pinned = Atomic<Int>(0)
            let refused = Atomic<Int>(0)
            let racing = Array(ids.suffix(8))
            DispatchQueue.concurrentPerform(iterations: racing.count) { i in
                let r = try? Self.pin(app, racing[i], i % 2 == 0 ? "a" : "b")
                if r?.status == 200 { pinned.add(1, ordering: .relaxed) }
                if r?.code == ErrorCode.pinLimit.code { refused.add(1, ordering: .relaxed) }
            }
            #expect(pinned.load(ordering: .relaxed) == 2)
            #expect(refused.load(ordering: .relaxed) == 6)
            #expect(
                try server.count("SELECT count(*) FROM messages WHERE app_id = $1 AND pinned_at IS NOT NULL", [app.appID]) == 20)
            #expect(try Self.peerTips(app, "a", "b").count == 20)
            #expect(try Self.pinTrail(app).count == 40)
        }
    }

    @Test func unpinnableMessages() throws {
        try withApp { server, app in
            for id in ["o", "a", "b"] { try app.createUser(id) }
            let g = try Self.createGroup(app, "o", members: ["a"])
            // A tips message (the group's creation, seq 1).
            let tips = try #require(try Self.tips(app, g).first?["message_id"]?.stringValue)
            Self.expectProblem(try Self.pin(app, tips, nil), 422, .unsupportedOperation)
            Self.expectProblem(try Self.pin(app, tips, "o", unpin: true), 422, .unsupportedOperation)
            // A revoked message (type 31).
            let revoked = try Self.text(app, "a", "b")
            try server.sql("UPDATE messages SET type = 31 WHERE app_id = $1 AND message_id = $2", [app.appID, revoked])
            Self.expectProblem(try Self.pin(app, revoked, "a"), 422, .unsupportedOperation)
            // A stored room message.
            try RoomFixtures.createRoom(app, "r1", members: ["a"])
            let room = try app.request(
                .post, "/v1/messages", json: #"{"from":"a","conversation_type":"room","to":"r1","type":1,"body":{"text":"x"},"storage":true}"#)
            let roomMessage = try #require(room.json?["message_id"]?.stringValue, "\(room.text)")
            Self.expectProblem(try Self.pin(app, roomMessage, nil), 422, .unsupportedOperation)
            // A tombstone (deleted for everyone) is not found for a mutating call.
            let deleted = try Self.text(app, "a", "b")
            try server.sql("UPDATE messages SET deleted = true, body = NULL WHERE app_id = $1 AND message_id = $2", [app.appID, deleted])
            Self.expectProblem(try Self.pin(app, deleted, nil), 404, .messageNotFound)
            #expect(try Self.pinTrail(app).isEmpty)
        }
    }

    @Test func conversationPinsOrderAndAccess() throws {
        try withApp(testClock: true) { server, app in
            for id in ["a", "b", "c", "x"] { try app.createUser(id) }
            let m1 = try Self.text(app, "a", "b", "1")
            let m2 = try Self.text(app, "b", "a", "2")
            let m3 = try Self.text(app, "a", "b", "3")
            try Self.text(app, "a", "b", "4")
            // Pinned at distinct times: m2, then m1 and m3 together.
            #expect(try Self.pin(app, m2, "a").status == 200)
            try server.advanceClock(ms: 1000)
            #expect(try Self.pin(app, m1, "b").status == 200)
            #expect(try Self.pin(app, m3, nil).status == 200)

            func ids(_ r: TestResponse) -> [String] { r.json?["items"]?.arrayValue?.compactMap { $0["message_id"]?.stringValue } ?? [] }
            let pins = try app.request(.get, "/v1/users/a/conversations/peer/b/pins")
            #expect(pins.status == 200, "\(pins.text)")
            #expect(ids(pins) == [m3, m1, m2])
            #expect(pins.json?["items"]?.arrayValue?.first?["pinned"]?["by"] == .null)
            let tokenB = try app.token(for: "b")
            #expect(ids(try Self.asUser(app, tokenB, .get, "/v1/users/b/conversations/peer/a/pins")) == [m3, m1, m2])
            Self.expectProblem(try Self.asUser(app, tokenB, .get, "/v1/users/a/conversations/peer/b/pins"), 403, .forbidden)
            // Another pair has none.
            let none = try app.request(.get, "/v1/users/a/conversations/peer/c/pins")
            #expect(none.status == 200 && none.json?["items"] == .array([]), "\(none.text)")
            Self.expectProblem(try app.request(.get, "/v1/users/a/conversations/room/b/pins"), 400, .invalidParams)

            // Group: members only, and not once dismissed.
            let g = try Self.createGroup(app, "a", members: ["b"])
            let gm = try Self.text(app, "b", g, group: true)
            #expect(try Self.pin(app, gm, "a").status == 200)
            #expect(ids(try app.request(.get, "/v1/users/b/conversations/group/\(g)/pins")) == [gm])
            Self.expectProblem(try app.request(.get, "/v1/users/x/conversations/group/\(g)/pins"), 403, .notGroupMember)
            Self.expectProblem(try app.request(.get, "/v1/users/x/conversations/group/g-missing/pins"), 404, .groupNotFound)
            #expect(try app.request(.post, "/v1/groups/\(g)/dismiss", json: #"{"operator":"a"}"#).status == 200)
            Self.expectProblem(try app.request(.get, "/v1/users/b/conversations/group/\(g)/pins"), 409, .groupDismissed)
        }
    }

    @Test func repliesOfATree() throws {
        try withApp { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }
            let root = try Self.text(app, "a", "b", "root")
            let r1 = try Self.text(app, "b", "a", "r1", extra: #""reply_to":"\#(root)""#)
            let r2 = try Self.text(app, "a", "b", "r2", extra: #""reply_to":"\#(r1)""#)
            try Self.text(app, "a", "b", "unrelated")
            let r3 = try Self.text(app, "b", "a", "r3", extra: #""reply_to":"\#(root)""#)
            let r4 = try Self.text(app, "a", "b", "r4", extra: #""reply_to":"\#(r2)""#)

            func ids(_ r: TestResponse) -> [String] { r.json?["items"]?.arrayValue?.compactMap { $0["message_id"]?.stringValue } ?? [] }
            let all = try app.request(.get, "/v1/messages/\(root)/replies")
            #expect(all.status == 200, "\(all.text)")
            #expect(ids(all) == [r1, r2, r3, r4])
            #expect(all.json?["next_cursor"] == .null)
            #expect(all.json?["root"]?["message_id"] == .string(root))
            #expect(all.json?["root"]?["state"] == .string("normal"))
            #expect(all.json?["root"]?["reply_count"] == .int(4))
            #expect(all.json?["root"]?["message"]?["message_id"] == .string(root))
            #expect(all.json?["items"]?.arrayValue?.allSatisfy { $0["root_message_id"] == .string(root) } == true)

            // From a reply deep in the tree: the same tree, with a user token of a participant.
            let fromReply = try Self.asUser(app, try app.token(for: "b"), .get, "/v1/messages/\(r4)/replies")
            #expect(ids(fromReply) == [r1, r2, r3, r4], "\(fromReply.text)")
            #expect(fromReply.json?["root"]?["message_id"] == .string(root))

            // Pages of 3 then 1.
            let first = try app.request(.get, "/v1/messages/\(root)/replies?limit=3")
            #expect(ids(first) == [r1, r2, r3])
            let cursor = try #require(first.json?["next_cursor"]?.stringValue)
            let second = try app.request(.get, "/v1/messages/\(root)/replies?limit=3&cursor=\(cursor)")
            #expect(ids(second) == [r4])
            #expect(second.json?["next_cursor"] == .null)

            // A tombstone reply no longer counts, nor is listed.
            try server.sql("UPDATE messages SET deleted = true, body = NULL WHERE app_id = $1 AND message_id = $2", [app.appID, r2])
            #expect(ids(try app.request(.get, "/v1/messages/\(root)/replies")) == [r1, r3, r4])
            // A message with no replies lists none.
            let lone = try Self.text(app, "a", "b", "lone")
            let empty = try app.request(.get, "/v1/messages/\(lone)/replies")
            #expect(empty.json?["items"] == .array([]) && empty.json?["root"]?["reply_count"] == .int(0), "\(empty.text)")

            // Not found: unknown, or not visible to the caller.
            Self.expectProblem(try app.request(.get, "/v1/messages/m-unknown/replies"), 404, .messageNotFound)
            Self.expectProblem(try Self.asUser(app, try app.token(for: "c"), .get, "/v1/messages/\(root)/replies"), 404, .messageNotFound)
        }
    }
}
