import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Room messages end to end (docs/rooms.md#messages-in-rooms, docs/messages.md#sending, docs/messages.md#history,
/// docs/errors.md#rate-limits): stored, unstored and cached room sends, the room seq, the room history and recent
/// cache, membership and visibility.
///
/// Rooms and members are made with white-box SQL on the tables of Migrations/0015 (`TestServer.sql`), so these tests
/// do not depend on the Rooms domain's routes.
@Suite("Room messages", .inProcess)
struct RoomMessagesTests: GroupTestSupport {

    /// Destroys the room as the Rooms domain does: the row goes (members, cache by cascade); messages stay.
    static func destroy(_ app: TestApp, _ roomID: String) throws {
        try app.server.sql("DELETE FROM rooms WHERE app_id = $1 AND room_id = $2", [app.appID, roomID])
    }

    static func items(_ r: TestResponse) -> [JSONValue] { r.json?["items"]?.arrayValue ?? [] }

    static func seqs(_ r: TestResponse) -> [Int64?] { items(r).map { $0["seq"]?.intValue } }

    static func texts(_ r: TestResponse) -> [String] { items(r).map { $0["body"]?["text"]?.stringValue ?? "" } }

    @Test func storedUnstoredAndCachedRoomMessages() throws {
        try withApp { server, app in
            for u in ["u1", "u2"] { try app.createUser(u) }
            try RoomFixtures.createRoom(app, "r1", members: ["u1", "u2"])
            let sentBefore = try app.events(query: "types=message.sent").count

            // Not stored without `storage`: seq null, stored false.
            let plain = try RoomFixtures.send(app, "u1", "r1", "plain")
            #expect(plain.status == 201, "\(plain.text)")
            #expect(plain.json?["seq"] == .null)
            #expect(plain.json?["stored"]?.boolValue == false)
            #expect(plain.json?["conversation_type"]?.stringValue == "room")
            #expect(plain.json?["to"]?.stringValue == "r1")

            // Stored: seqs 1, 2, 3 gap-free, interleaved with unstored ones (barrage, command with storage, online_only).
            var stored: [Int64] = []
            for i in 1...3 {
                let r = try RoomFixtures.send(app, i == 2 ? "u2" : "u1", "r1", "s\(i)", extra: #","storage":true"#)
                #expect(r.status == 201, "\(r.text)")
                #expect(r.json?["stored"]?.boolValue == true)
                stored.append(r.json?["seq"]?.intValue ?? -1)
                let barrage = try RoomFixtures.send(app, "u2", "r1", "b\(i)", type: 20)
                #expect(barrage.status == 201, "\(barrage.text)")
                #expect(barrage.json?["seq"] == .null)
            }
            #expect(stored == [1, 2, 3])
            let command = try app.request(
                .post, "/v1/messages",
                json: #"{"from":"u1","conversation_type":"room","to":"r1","type":2,"body":{"data":"eA=="},"storage":true}"#)
            #expect(command.status == 201, "\(command.text)")
            #expect(command.json?["seq"] == .null)
            let online = try RoomFixtures.send(app, "u1", "r1", "online", extra: #","storage":true,"online_only":true"#)
            #expect(online.json?["seq"] == .null)
            #expect(try RoomFixtures.send(app, "u1", "r1", "s4", extra: #","storage":true"#).json?["seq"]?.intValue == 4)

            // Every send wrote a message.sent event (stored or not).
            #expect(try app.events(query: "types=message.sent").count == sentBefore + 10)

            // The history holds the stored ones only, for the app and for a member's token, both directions.
            let backward = try app.request(.get, "/v1/rooms/r1/messages")
            #expect(backward.status == 200, "\(backward.text)")
            #expect(Self.seqs(backward) == [4, 3, 2, 1])
            #expect(Self.texts(backward) == ["s4", "s3", "s2", "s1"])
            let forward = try Self.asUser(app, try app.token(for: "u2"), .get, "/v1/rooms/r1/messages?direction=forward&limit=2")
            #expect(forward.status == 200, "\(forward.text)")
            #expect(Self.seqs(forward) == [1, 2])
            let cursor = try #require(forward.json?["next_cursor"]?.stringValue)
            let next = try Self.asUser(app, try app.token(for: "u2"), .get, "/v1/rooms/r1/messages?direction=forward&limit=2&cursor=\(cursor)")
            #expect(Self.seqs(next) == [3, 4])
            #expect(Self.seqs(try app.request(.get, "/v1/rooms/r1/messages?after_seq=2")) == [3, 4])

            // Nothing cached yet; `cache` keeps stored and unstored messages alike, newest first.
            #expect(Self.items(try app.request(.get, "/v1/rooms/r1/messages/recent")).isEmpty)
            try RoomFixtures.send(app, "u1", "r1", "c1", extra: #","cache":true"#)
            try RoomFixtures.send(app, "u2", "r1", "c2", extra: #","cache":true,"storage":true,"push":{"enable":false}"#)
            try RoomFixtures.send(app, "u2", "r1", "c3", type: 20, extra: #","cache":true"#)
            let recent = try Self.asUser(app, try app.token(for: "u1"), .get, "/v1/rooms/r1/messages/recent")
            #expect(recent.status == 200, "\(recent.text)")
            #expect(Self.texts(recent) == ["c3", "c2", "c1"])
            #expect(Self.seqs(recent) == [nil, 5, nil])
            // A user sees no `suppressed` and only its own messages' `push`; the app sees both.
            #expect(Self.items(recent).allSatisfy { $0["suppressed"] == nil })
            #expect(Self.items(recent)[1]["push"] == nil)
            #expect(Self.items(recent)[2]["push"] != nil)
            let appRecent = try app.request(.get, "/v1/rooms/r1/messages/recent")
            #expect(Self.items(appRecent).allSatisfy { $0["suppressed"] == .null && $0["push"] != nil })

            // A client_msg_id repeat of an unstored room message answers as a duplicate.
            let first = try RoomFixtures.send(app, "u1", "r1", "d", extra: #","client_msg_id":"k1""#)
            let again = try RoomFixtures.send(app, "u1", "r1", "d", extra: #","client_msg_id":"k1""#)
            #expect(again.status == 200, "\(again.text)")
            #expect(again.headers["Parley-Duplicate"] == "true")
            #expect(again.json?["message_id"] == first.json?["message_id"])
            #expect(again.json?["seq"] == .null)
        }
    }

    @Test func existenceMembershipAndAccess() throws {
        try withApp { server, app in
            for u in ["u1", "u2", "x"] { try app.createUser(u) }
            try RoomFixtures.createRoom(app, "r1", members: ["u1", "u2"])

            // Sends: unknown room 404 6000204 (also with skip_checks), a non-member 403 6000321 unless skip_checks.
            Self.expectProblem(try RoomFixtures.send(app, "u1", "nosuchroom"), 404, .targetNotFound)
            Self.expectProblem(try RoomFixtures.send(app, "u1", "nosuchroom", extra: #","skip_checks":true"#), 404, .targetNotFound)
            Self.expectProblem(try RoomFixtures.send(app, "x", "r1", extra: #","storage":true"#), 403, .notInRoom)
            Self.expectProblem(try RoomFixtures.send(app, "nobody", "r1"), 404, .userNotFound)
            #expect(try RoomFixtures.send(app, "x", "r1", extra: #","skip_checks":true"#).status == 201)
            // A member's own token sends; the sender's global mute applies first.
            let token = try app.token(for: "u2")
            let own = try Self.asUser(
                app, token, .post, "/v1/messages", json: #"{"conversation_type":"room","to":"r1","type":1,"body":{"text":"t"},"storage":true}"#)
            #expect(own.status == 201, "\(own.text)")
            #expect(own.json?["seq"]?.intValue == 1)
            try app.server.sql("UPDATE users SET muted_until = -1 WHERE app_id = $1 AND user_id = 'u1'", [app.appID])
            Self.expectProblem(try RoomFixtures.send(app, "u1", "r1"), 403, .senderMuted)

            // Reads: unknown room 404 6000322; a non-member token 403 6000321; a member token and the app 200.
            let xToken = try app.token(for: "x")
            for path in ["/v1/rooms/nosuchroom/messages", "/v1/rooms/nosuchroom/messages/recent"] {
                Self.expectProblem(try app.request(.get, path), 404, .roomNotFound)
            }
            for path in ["/v1/rooms/r1/messages", "/v1/rooms/r1/messages/recent"] {
                Self.expectProblem(try Self.asUser(app, xToken, .get, path), 403, .notInRoom)
                #expect(try Self.asUser(app, token, .get, path).status == 200)
                #expect(try app.request(.get, path).status == 200)
            }
            Self.expectProblem(try app.request(.get, "/v1/rooms/r1/messages?direction=sideways"), 400, .invalidParams)
        }
    }

    /// Which options and types fit which target (422 `6000013` otherwise, docs/messages.md#sending): barrage, `storage`
    /// and `cache` for rooms only, `repeat_count` and `need_receipt` by target, `priority` 1–3, mentions ignored in
    /// rooms.
    @Test func roomOnlyOptionsAreValidated() throws {
        try withApp { server, app in
            for u in ["u1", "u2"] { try app.createUser(u) }
            try RoomFixtures.createRoom(app, "r1", members: ["u1", "u2"])
            let g = try Self.createGroup(app, "u1", members: ["u2"])
            func peer(_ extra: String, type: Int = 1) throws -> TestResponse {
                try app.request(
                    .post, "/v1/messages", json: #"{"from":"u1","conversation_type":"peer","to":"u2","type":\#(type),"body":{"text":"x"}\#(extra)}"#)
            }
            func group(_ extra: String, type: Int = 1) throws -> TestResponse {
                try app.request(
                    .post, "/v1/messages",
                    json: #"{"from":"u1","conversation_type":"group","to":"\#(g)","type":\#(type),"body":{"text":"x"}\#(extra)}"#)
            }
            // Barrage only in rooms; storage and cache only for rooms; never barrage with storage.
            Self.expectProblem(try peer("", type: 20), 422, .unsupportedOperation)
            Self.expectProblem(try group("", type: 20), 422, .unsupportedOperation)
            Self.expectProblem(try peer(#","storage":true"#), 422, .unsupportedOperation)
            Self.expectProblem(try peer(#","cache":true"#), 422, .unsupportedOperation)
            Self.expectProblem(try group(#","storage":true"#), 422, .unsupportedOperation)
            Self.expectProblem(try group(#","cache":true"#), 422, .unsupportedOperation)
            #expect(try peer(#","storage":false,"cache":false"#).status == 201)
            Self.expectProblem(try RoomFixtures.send(app, "u1", "r1", type: 20, extra: #","storage":true"#), 422, .unsupportedOperation)
            // repeat_count: 1–1000, other than 1 for group and room messages only.
            Self.expectProblem(try peer(#","repeat_count":5"#), 422, .unsupportedOperation)
            #expect(try group(#","repeat_count":5"#).status == 201)
            let repeated = try RoomFixtures.send(app, "u1", "r1", type: 20, extra: #","repeat_count":1000"#)
            #expect(repeated.status == 201, "\(repeated.text)")
            #expect(repeated.json?["repeat_count"]?.intValue == 1000)
            Self.expectProblem(try RoomFixtures.send(app, "u1", "r1", extra: #","repeat_count":1001"#), 400, .invalidParams)
            Self.expectProblem(try RoomFixtures.send(app, "u1", "r1", extra: #","repeat_count":0"#), 400, .invalidParams)
            // need_receipt: stored peer and group messages only.
            Self.expectProblem(try RoomFixtures.send(app, "u1", "r1", extra: #","storage":true,"need_receipt":true"#), 422, .unsupportedOperation)
            // Priority 1–3; mentions are ignored in rooms.
            Self.expectProblem(try RoomFixtures.send(app, "u1", "r1", extra: #","priority":4"#), 400, .invalidParams)
            let mentioned = try RoomFixtures.send(app, "u1", "r1", extra: #","storage":true,"priority":1,"mentions":{"user_ids":["u2"],"all":true}"#)
            #expect(mentioned.status == 201, "\(mentioned.text)")
            #expect(mentioned.json?["mentions"]?["user_ids"]?.arrayValue?.isEmpty == true)
            #expect(mentioned.json?["mentions"]?["all"]?.boolValue == false)
            #expect(mentioned.json?["priority"]?.intValue == 1)
            // Custom (200) is a room type too.
            let custom = try app.request(
                .post, "/v1/messages", json: #"{"from":"u1","conversation_type":"room","to":"r1","type":200,"body":{"data":"x","sub_type":1}}"#)
            #expect(custom.status == 201, "\(custom.text)")
        }
    }

    /// The recent cache answers the 50 newest cached messages, newest first (docs/messages.md#history).
    @Test func recentCacheKeepsTheFiftyNewest() throws {
        try withApp { server, app in
            try app.createUser("u1")
            try RoomFixtures.createRoom(app, "r1", members: ["u1"])
            for i in 1...55 {
                let r = try RoomFixtures.send(app, "u1", "r1", "m\(i)", type: i % 2 == 0 ? 20 : 1, extra: #","cache":true"#)
                #expect(r.status == 201, "\(r.text)")
            }
            try RoomFixtures.send(app, "u1", "r1", "uncached")
            let recent = try app.request(.get, "/v1/rooms/r1/messages/recent")
            #expect(recent.status == 200, "\(recent.text)")
            #expect(Self.texts(recent) == (6...55).reversed().map { "m\($0)" })
            // The write trims the cache as it goes.
            let rows = try app.server.count("SELECT count(*) FROM room_recent_messages WHERE app_id = $1 AND room_id = 'r1'", [app.appID])
            #expect(rows <= 55 && rows >= 50)
            // Destroying the room clears the cache (cascade); a new room with the id starts empty.
            try Self.destroy(app, "r1")
            try RoomFixtures.createRoom(app, "r1", members: ["u1"])
            #expect(Self.items(try app.request(.get, "/v1/rooms/r1/messages/recent")).isEmpty)
        }
    }

    /// Destruction and history (docs/rooms.md#lifecycle, docs/messages.md#history): a room id used again continues its
    /// seq; its history and GET show the current life to members, and the app still reads older stored messages.
    @Test func visibilityAndRecreatedRooms() throws {
        try withApp { server, app in
            for u in ["u1", "u2", "x"] { try app.createUser(u) }
            try RoomFixtures.createRoom(app, "r1", members: ["u1", "u2"])
            let old = try RoomFixtures.send(app, "u1", "r1", "old", extra: #","storage":true"#)
            let oldID = try #require(old.json?["message_id"]?.stringValue)
            let unstored = try #require(try RoomFixtures.send(app, "u1", "r1", "gone").json?["message_id"]?.stringValue)

            let u2 = try app.token(for: "u2")
            let x = try app.token(for: "x")
            #expect(try Self.asUser(app, u2, .get, "/v1/messages/\(oldID)").status == 200)
            Self.expectProblem(try Self.asUser(app, x, .get, "/v1/messages/\(oldID)"), 404, .messageNotFound)
            Self.expectProblem(try app.request(.get, "/v1/messages/\(unstored)"), 404, .messageNotFound)
            // A member who left no longer sees it.
            try RoomFixtures.leave(app, "r1", "u2")
            Self.expectProblem(try Self.asUser(app, u2, .get, "/v1/messages/\(oldID)"), 404, .messageNotFound)

            // Replies stay in the room: a room message replies to a room message; another conversation's is not found.
            let reply = try RoomFixtures.send(app, "u1", "r1", "re", extra: #","storage":true,"reply_to":"\#(oldID)""#)
            #expect(reply.status == 201, "\(reply.text)")
            #expect(reply.json?["root_message_id"]?.stringValue == oldID)
            let peer = try app.request(
                .post, "/v1/messages", json: #"{"from":"u1","conversation_type":"peer","to":"u2","type":1,"body":{"text":"p"}}"#)
            let peerID = try #require(peer.json?["message_id"]?.stringValue)
            Self.expectProblem(try RoomFixtures.send(app, "u1", "r1", extra: #","storage":true,"reply_to":"\#(peerID)""#), 404, .messageNotFound)
            #expect(try app.request(.get, "/v1/messages/\(oldID)").json?["reply_count"]?.intValue == 1)

            // Destroyed: the app still reads the stored message; the id used again continues the seq (3 after 1, 2).
            try Self.destroy(app, "r1")
            #expect(try app.request(.get, "/v1/messages/\(oldID)").status == 200)
            try RoomFixtures.createRoom(app, "r1", members: ["u1", "u2"])
            let fresh = try RoomFixtures.send(app, "u2", "r1", "new", extra: #","storage":true"#)
            #expect(fresh.json?["seq"]?.intValue == 3)
            #expect(Self.seqs(try app.request(.get, "/v1/rooms/r1/messages")) == [3])
            #expect(Self.seqs(try Self.asUser(app, u2, .get, "/v1/rooms/r1/messages?direction=forward")) == [3])
            // A member of the new room does not read the old room's messages; the app does.
            Self.expectProblem(try Self.asUser(app, u2, .get, "/v1/messages/\(oldID)"), 404, .messageNotFound)
            #expect(try app.request(.get, "/v1/messages/\(oldID)").status == 200)
            let freshID = try #require(fresh.json?["message_id"]?.stringValue)
            #expect(try Self.asUser(app, u2, .get, "/v1/messages/\(freshID)").status == 200)
        }
    }

    /// Overload (docs/errors.md#rate-limits) end to end, with the overload forced (threshold -1): priority-1 room sends
    /// get 429 6000005 with `Retry-After: 1` before anything is checked or written; other priorities and conversations
    /// still go through.
    @Test func overloadedServerRefusesPriorityOneRoomSends() throws {
        let server = try TestServer.start { $0.sendOverloadThreshold = -1 }
        defer { server.stop() }
        let app = try server.createApp()
        for u in ["u1", "u2"] { try app.createUser(u) }
        try RoomFixtures.createRoom(app, "r1", members: ["u1"])
        let shed = try RoomFixtures.send(app, "u1", "r1", extra: #","priority":1,"storage":true"#)
        Self.expectProblem(shed, 429, .rateLimited)
        #expect(shed.headers["Retry-After"] == "1")
        #expect(try RoomFixtures.send(app, "u1", "r1", extra: #","priority":2,"storage":true"#).json?["seq"]?.intValue == 1)
        let peer = try app.request(
            .post, "/v1/messages", json: #"{"from":"u1","conversation_type":"peer","to":"u2","type":1,"body":{"text":"p"},"priority":1}"#)
        #expect(peer.status == 201, "\(peer.text)")
        #expect(Self.items(try app.request(.get, "/v1/rooms/r1/messages")).count == 1)
    }

    /// The overload decision (docs/errors.md#rate-limits) sheds priority-1 room sends only, and only above the
    /// threshold.
    @Test func overloadShedsLowPriorityRoomSendsFirst() {
        let t = MessageWriter.defaultOverloadThreshold
        #expect(t >= MessageWriter.maxBatch)
        #expect(MessageWriter.sheds(conversationType: .room, priority: 1, outstanding: t + 1, threshold: t))
        #expect(!MessageWriter.sheds(conversationType: .room, priority: 1, outstanding: t, threshold: t))
        #expect(!MessageWriter.sheds(conversationType: .room, priority: 2, outstanding: t * 10, threshold: t))
        #expect(!MessageWriter.sheds(conversationType: .group, priority: 1, outstanding: t * 10, threshold: t))
        #expect(!MessageWriter.sheds(conversationType: .peer, priority: 1, outstanding: t * 10, threshold: t))
    }
}
