import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Targeted group messages end to end (docs/messages.md#targeted-group-messages): a group message sent with
/// `visible_to` is seen only by the listed members and its sender, through every read path; the others never learn it
/// existed.
@Suite("Targeted messages", .inProcess)
struct TargetedMessagesTests: GroupTestSupport {
    /// Sends a text from `from` to group `groupID` with the app key.
    static func send(_ app: TestApp, _ from: String, _ groupID: String, _ text: String, extra: String = "") throws -> TestResponse {
        try app.request(
            .post, "/v1/messages",
            json: #"{"from":"\#(from)","conversation_type":"group","to":"\#(groupID)","type":1,"body":{"text":"\#(text)"}\#(extra)}"#)
    }

    /// The ids of the messages in `user`'s history of group `groupID`.
    static func historyIDs(_ app: TestApp, _ user: String, _ groupID: String) throws -> [String] {
        let r = try app.request(.get, "/v1/users/\(user)/conversations/group/\(groupID)/messages?limit=100")
        #expect(r.status == 200, "\(r.text)")
        return r.json?["items"]?.arrayValue?.compactMap { $0["message_id"]?.stringValue } ?? []
    }

    /// `user`'s conversation entry of group `groupID`.
    static func entry(_ app: TestApp, _ user: String, _ groupID: String) throws -> JSONValue {
        let r = try app.request(.get, "/v1/users/\(user)/conversations/group/\(groupID)")
        #expect(r.status == 200, "\(r.text)")
        return r.json ?? .null
    }

    /// The ids of the messages a search for `q` finds as `user` sees them.
    static func searchIDs(_ app: TestApp, _ user: String?, _ q: String) throws -> [String] {
        let r = try app.request(.get, "/v1/messages/search?q=\(q)\(user.map { "&user_id=\($0)" } ?? "")")
        #expect(r.status == 200, "\(r.text)")
        return r.json?["items"]?.arrayValue?.compactMap { $0["message_id"]?.stringValue } ?? []
    }

    /// The message ids of the `message.sent` events in `user`'s event log.
    static func loggedSends(_ app: TestApp, _ user: String) throws -> [JSONValue] {
        let r = try app.request(.get, "/v1/users/\(user)/events/log?after=earliest&limit=100&types=message.sent")
        #expect(r.status == 200, "\(r.text)")
        return r.json?["items"]?.arrayValue ?? []
    }

    /// The `data` of the next `message.sent` event of `stream`, skipping other types.
    static func nextSent(_ stream: HTTPClientStream) throws -> JSONValue? {
        while let event = try LiveStreams.nextEvent(stream, timeout: .seconds(30)) {
            if event.event == "message.sent" { return try JSONValue.parse(Array(event.data.utf8))["data"] }
        }
        return nil
    }

    @Test func aTargetedMessageReachesOnlyTheListedMembersAndTheSender() throws {
        // Sockets: the export streams from a worker of its own.
        try withApp(transport: .sockets) { server, app in
            for u in ["o", "a", "b"] { try app.createUser(u) }
            let g = try Self.createGroup(app, "o", members: ["a", "b"])
            let before = try Self.entry(app, "b", g)
            let streamA = try LiveStreams.open(server, "/v1/users/a/events", bearer: try app.token(for: "a"))
            defer { streamA.close() }
            let streamB = try LiveStreams.open(server, "/v1/users/b/events", bearer: try app.token(for: "b"))
            defer { streamB.close() }

            let sent = try Self.send(app, "o", g, "secretword", extra: #","visible_to":["a"]"#)
            #expect(sent.status == 201, "\(sent.text)")
            #expect(sent.json?["visible_to"] == .array([.string("a")]))
            let secret = try #require(sent.json?["message_id"]?.stringValue)
            let secretSeq = try #require(sent.json?["seq"]?.intValue)

            // History: the listed member and the sender see it; the other member's history has no item at its seq.
            #expect(try Self.historyIDs(app, "a", g).contains(secret))
            #expect(try Self.historyIDs(app, "o", g).contains(secret))
            #expect(try !Self.historyIDs(app, "b", g).contains(secret))
            let tokenB = try app.token(for: "b")
            let groupHistoryB = try Self.asUser(app, tokenB, .get, "/v1/groups/\(g)/messages")
            #expect(groupHistoryB.json?["items"]?.arrayValue?.contains { $0["message_id"]?.stringValue == secret } == false)
            #expect(
                try app.request(.get, "/v1/groups/\(g)/messages").json?["items"]?.arrayValue?.contains {
                    $0["message_id"]?.stringValue == secret
                } == true, "the app reads everything stored")

            // One message: 404 as if it did not exist for b; 200 for a and o.
            Self.expectProblem(try Self.asUser(app, tokenB, .get, "/v1/messages/\(secret)"), 404, .messageNotFound)
            #expect(try Self.asUser(app, try app.token(for: "a"), .get, "/v1/messages/\(secret)").status == 200)
            #expect(try Self.asUser(app, try app.token(for: "o"), .get, "/v1/messages/\(secret)").status == 200)

            // Unread counts and the conversation's last message.
            let entryA = try Self.entry(app, "a", g)
            #expect(entryA["unread_count"]?.intValue == 1)
            #expect(entryA["last_message"]?["message_id"]?.stringValue == secret)
            let entryB = try Self.entry(app, "b", g)
            #expect(entryB["unread_count"]?.intValue == 0)
            #expect(entryB["last_message"] == before["last_message"], "b's last message is unchanged")
            #expect(entryB["mention"] == before["mention"])

            // Search.
            #expect(try Self.searchIDs(app, "a", "secretword") == [secret])
            #expect(try Self.searchIDs(app, "o", "secretword") == [secret])
            #expect(try Self.searchIDs(app, "b", "secretword").isEmpty)
            #expect(try Self.searchIDs(app, nil, "secretword") == [secret], "the app searches every stored message")
            #expect(try Self.asUser(app, tokenB, .get, "/v1/messages/search?q=secretword").json?["items"]?.arrayValue?.isEmpty == true)

            // Then an untargeted message, which everyone gets.
            let open = try Self.send(app, "o", g, "openword")
            #expect(open.status == 201, "\(open.text)")
            let openID = try #require(open.json?["message_id"]?.stringValue)
            #expect((open.json?["seq"]?.intValue ?? 0) == secretSeq + 1, "the targeted message took its seq in the group")
            #expect(open.json?["visible_to"] == nil, "only targeted messages carry visible_to")
            #expect(try Self.entry(app, "b", g)["unread_count"]?.intValue == 1)
            #expect(try Self.entry(app, "a", g)["unread_count"]?.intValue == 2)

            // Live streams: a gets the targeted message (with is_targeted) first; b's first message.sent is the open one.
            let firstA = try #require(try Self.nextSent(streamA))
            #expect(firstA["message"]?["message_id"]?.stringValue == secret)
            #expect(firstA["is_targeted"] == .bool(true))
            let firstB = try #require(try Self.nextSent(streamB))
            #expect(firstB["message"]?["message_id"]?.stringValue == openID)
            #expect(firstB["is_targeted"] == nil)

            // The event log as each user, and the app's.
            let loggedB = try Self.loggedSends(app, "b").compactMap { $0["data"]?["message"]?["message_id"]?.stringValue }
            #expect(!loggedB.contains(secret) && loggedB.contains(openID))
            let loggedA = try Self.loggedSends(app, "a")
            #expect(loggedA.contains { $0["data"]?["message"]?["message_id"]?.stringValue == secret && $0["data"]?["is_targeted"] == .bool(true) })
            let appLog = try app.events(query: "types=message.sent")
            #expect(appLog.contains { $0["data"]?["message"]?["message_id"]?.stringValue == secret && $0["data"]?["is_targeted"] == .bool(true) })

            // Replies, reactions and receipts by b: 404 as for a message it cannot see.
            Self.expectProblem(try Self.send(app, "b", g, "re", extra: #","reply_to":"\#(secret)""#), 404, .messageNotFound)
            Self.expectProblem(
                try app.request(.post, "/v1/messages/\(secret)/reactions", json: #"{"user_id":"b","reaction_type":"like"}"#), 404,
                .messageNotFound)
            #expect(
                try app.request(.post, "/v1/messages/\(secret)/reactions", json: #"{"user_id":"a","reaction_type":"like"}"#).status == 201)
            let receipt = try app.request(.post, "/v1/users/b/receipts/read", json: #"{"message_ids":["\#(secret)"]}"#)
            #expect(Self.codes(receipt) == [7000210], "\(receipt.text)")
            // a's reply is fine, and without a visible_to of its own it stays within the secret's audience (o and a).
            let reply = try Self.send(app, "a", g, "re", extra: #","reply_to":"\#(secret)""#)
            #expect(reply.status == 201, "\(reply.text)")
            #expect(reply.json?["visible_to"] == .array([.string("o")]))
            let replyID = try #require(reply.json?["message_id"]?.stringValue)
            #expect(try Self.historyIDs(app, "o", g).contains(replyID))
            #expect(try !Self.historyIDs(app, "b", g).contains(replyID))
            Self.expectProblem(
                try Self.send(app, "a", g, "re", extra: #","reply_to":"\#(secret)","mentions":{"all":true}"#), 422, .unsupportedOperation)
            #expect(try Self.send(app, "a", g, "re", extra: #","reply_to":"\#(secret)","visible_to":["o"]"#).status == 201)

            // The app's export keeps it with visible_to.
            let export = try app.request(.get, "/v1/messages/export?conversation_type=group&conversation_id=\(g)")
            #expect(export.status == 200)
            let lines = try export.body.split(separator: 0x0A).map { try JSONValue.parse(Array($0)) }
            let exported = try #require(lines.first { $0["message_id"]?.stringValue == secret })
            #expect(exported["visible_to"] == .array([.string("a")]))

            // Imported back (under a new key), it stays targeted: b's history still does not show it.
            var line = try #require(exported.objectValue)
            line["client_msg_id"] = .string("reimported")
            line["message_id"] = .string("reimported")
            let imported = try MessageTransferTests.importLines(app, JSONValue.object(line).description + "\n")
            #expect(imported.status == 200, "\(imported.text)")
            let importedID = try #require(imported.json?["results"]?[0]?["data"]?["message_id"]?.stringValue, "\(imported.text)")
            #expect(try Self.historyIDs(app, "a", g).contains(importedID))
            #expect(try !Self.historyIDs(app, "b", g).contains(importedID))
        }
    }

    @Test func onlyListedMembersWithDevicesArePushed() throws {
        try PushFixtures.withScene { server, app, gateway in
            try app.createUser("carol", name: "Carol")
            let created = try app.request(.post, "/v1/groups", json: #"{"group_id":"g","operator":"alice","members":["bob","carol"]}"#)
            #expect(created.status == 201, "\(created.text)")
            try PushFixtures.device(app, "bob", key: "key-bob")
            try PushFixtures.device(app, "carol", key: "key-carol")
            try PushFixtures.configure(app, gateway)
            _ = try PushFixtures.send(app, to: "g", type: "group", extra: #","visible_to":["carol"]"#)
            PushFixtures.drain(server)
            let keys = gateway.requests.flatMap { $0.json?["notification"]?["devices"]?.arrayValue ?? [] }.compactMap {
                $0["pushkey"]?.stringValue
            }
            #expect(keys == ["key-carol"], "only the listed member is pushed")
        }
    }

    @Test func visibleToIsValidated() throws {
        try withApp { server, app in
            for u in ["o", "a", "b", "x"] { try app.createUser(u) }
            let g = try Self.createGroup(app, "o", members: ["a", "b"])
            Self.expectInvalid(try Self.send(app, "o", g, "t", extra: #","visible_to":[]"#), field: "body.visible_to")
            Self.expectInvalid(try Self.send(app, "o", g, "t", extra: #","visible_to":["a","a"]"#), field: "body.visible_to[1]")
            Self.expectInvalid(try Self.send(app, "o", g, "t", extra: #","visible_to":["a",""]"#), field: "body.visible_to[1]")
            Self.expectInvalid(try Self.send(app, "o", g, "t", extra: #","visible_to":"a""#), field: "body.visible_to")
            let many = Self.array((0...100).map { "u\($0)" })
            Self.expectInvalid(try Self.send(app, "o", g, "t", extra: #","visible_to":\#(many)"#), field: "body.visible_to")
            // Not a member (x), or no such user (nobody): each named.
            let notMembers = try Self.send(app, "o", g, "t", extra: #","visible_to":["a","x","nobody"]"#)
            Self.expectInvalid(notMembers, field: "body.visible_to[1]")
            #expect(Self.fields(notMembers) == ["body.visible_to[1]", "body.visible_to[2]"])
            // @all cannot be targeted; peer and room sends take no visible_to.
            Self.expectProblem(
                try Self.send(app, "o", g, "t", extra: #","visible_to":["a"],"mentions":{"all":true}"#), 422, .unsupportedOperation)
            Self.expectProblem(
                try app.request(
                    .post, "/v1/messages",
                    json: #"{"from":"o","conversation_type":"peer","to":"a","type":1,"body":{"text":"t"},"visible_to":["a"]}"#), 422,
                .unsupportedOperation)
            #expect(try app.request(.post, "/v1/rooms", json: #"{"room_id":"r1","creator":"o"}"#).status == 201)
            Self.expectProblem(
                try app.request(
                    .post, "/v1/messages",
                    json: #"{"from":"o","conversation_type":"room","to":"r1","type":1,"body":{"text":"t"},"visible_to":["a"]}"#), 422,
                .unsupportedOperation)
            // An unknown group is the send's own 404, a dismissed one its 409.
            Self.expectProblem(try Self.send(app, "o", "nogroup", "t", extra: #","visible_to":["a"]"#), 404, .targetNotFound)
            // null is absent; a mention of one listed member is fine, and the sender may list itself.
            #expect(try Self.send(app, "o", g, "t", extra: #","visible_to":null"#).status == 201)
            let ok = try Self.send(app, "o", g, "t", extra: #","visible_to":["o","a"],"mentions":{"user_ids":["a"]}"#)
            #expect(ok.status == 201, "\(ok.text)")
            #expect(try Self.entry(app, "a", g)["mention"]?["items"]?.arrayValue?.count == 1)
            #expect(try Self.entry(app, "b", g)["mention"]?["items"]?.arrayValue?.isEmpty != false)
        }
    }

    @Test func aDeletedEntryReappearsOnlyForTheListedMembers() throws {
        try withApp { server, app in
            for u in ["o", "a", "b"] { try app.createUser(u) }
            let g = try Self.createGroup(app, "o", members: ["a", "b"])
            #expect(try Self.send(app, "o", g, "first").status == 201)
            for u in ["a", "b"] {
                #expect(try app.request(.delete, "/v1/users/\(u)/conversations/group/\(g)").status == 204)
            }
            let sent = try Self.send(app, "o", g, "t", extra: #","visible_to":["a"],"need_receipt":true"#)
            #expect(sent.status == 201, "\(sent.text)")
            #expect(try app.request(.get, "/v1/users/a/conversations/group/\(g)").status == 200)
            Self.expectProblem(try app.request(.get, "/v1/users/b/conversations/group/\(g)"), 404, .conversationNotFound)
            // The receipt counts the listed members only.
            let id = try #require(sent.json?["message_id"]?.stringValue)
            let receipt = try app.request(.get, "/v1/messages/\(id)/receipt")
            #expect(receipt.json?["unread_count"]?.intValue == 1, "\(receipt.text)")
            let unread = try app.request(.get, "/v1/messages/\(id)/receipt/members?state=unread")
            #expect(unread.json?["items"]?.arrayValue?.compactMap { $0["user_id"]?.stringValue } == ["a"], "\(unread.text)")
        }
    }

    @Test func pinningATargetedMessageTellsOnlyItsAudience() throws {
        try withApp { server, app in
            for u in ["o", "a", "b"] { try app.createUser(u) }
            let g = try Self.createGroup(app, "o", members: ["a", "b"])
            let before = try Self.historyIDs(app, "b", g)
            let sent = try Self.send(app, "a", g, "t", extra: #","visible_to":["o"]"#)
            let id = try #require(sent.json?["message_id"]?.stringValue, "\(sent.text)")
            let pin = try app.request(.post, "/v1/messages/\(id)/pin", json: #"{"operator":"o"}"#)
            #expect(pin.status == 200, "\(pin.text)")
            // The tips of the pin (type 32) reaches the pinned message's audience only.
            let tipsOf = { (user: String) throws -> [JSONValue] in
                try app.request(.get, "/v1/users/\(user)/conversations/group/\(g)/messages?limit=100").json?["items"]?.arrayValue?.filter {
                    $0["body"]?["change"]?["message_id"]?.stringValue == id
                } ?? []
            }
            #expect(try tipsOf("a").count == 1)
            #expect(try tipsOf("o").count == 1)
            #expect(try tipsOf("b").isEmpty)
            #expect(try Self.historyIDs(app, "b", g) == before, "b's history is unchanged")
            let pinsB = try app.request(.get, "/v1/users/b/conversations/group/\(g)/pins")
            #expect(pinsB.json?["items"]?.arrayValue?.isEmpty == true, "\(pinsB.text)")
            let pinsA = try app.request(.get, "/v1/users/a/conversations/group/\(g)/pins")
            #expect(pinsA.json?["items"]?.arrayValue?.count == 1, "\(pinsA.text)")
            #expect(try Self.entry(app, "b", g)["unread_count"]?.intValue == 0)
        }
    }
}
