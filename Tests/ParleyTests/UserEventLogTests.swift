import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// The per-user event log (`GET /v1/users/{user_id}/events/log`, docs/events.md#polling-the-log) and the two renderings
/// of event data (docs/events.md#two-views-of-the-same-event) end to end: the user's audience, the credentials, the
/// polling rules, and what the app view and each user's view carry, in the logs and on live streams.
@Suite("User event log")
struct UserEventLogTests: GroupTestSupport {
    /// `GET /v1/users/{user}/events/log?<query>` with the app key, or with `token`.
    static func log(_ app: TestApp, _ user: String, _ query: String = "after=earliest&limit=100", token: String? = nil) throws -> TestResponse {
        let path = "/v1/users/\(user)/events/log" + (query.isEmpty ? "" : "?" + query)
        if let token { return try asUser(app, token, .get, path) }
        return try app.request(.get, path)
    }

    /// The items of a successful log read.
    static func items(_ r: TestResponse, sourceLocation: SourceLocation = #_sourceLocation) -> [JSONValue] {
        #expect(r.status == 200, "\(r.text)", sourceLocation: sourceLocation)
        return r.json?["items"]?.arrayValue ?? []
    }

    /// The messages of the `type` events (default `message.sent`) in `user`'s log, read with the app key; without the
    /// tips messages (type 32) of group actions.
    static func messages(_ app: TestApp, _ user: String, type: String = "message.sent") throws -> [JSONValue] {
        sent(items(try log(app, user, "after=earliest&limit=100&types=\(type)")))
    }

    /// The messages of the `type` events in the app log (app view), without tips messages.
    static func appMessages(_ app: TestApp, type: String = "message.sent") throws -> [JSONValue] {
        sent(try app.events(query: "types=\(type)"))
    }

    /// The `data.message` of `events`, but tips messages.
    static func sent(_ events: [JSONValue]) -> [JSONValue] {
        events.compactMap { $0["data"]?["message"] }.filter { $0["type"] != .int(32) }
    }

    /// Sends a text message (with a `push` config) and returns its id.
    @discardableResult
    static func send(_ app: TestApp, _ from: String, to: String, conversation: String = "peer", text: String = "hello") throws -> String {
        let r = try app.request(
            .post, "/v1/messages",
            json:
                #"{"from":"\#(from)","conversation_type":"\#(conversation)","to":"\#(to)","type":1,"body":{"text":"\#(text)"},"push":{"title":"Ping"}}"#
        )
        #expect(r.status == 201, "\(r.text)")
        return r.json?["message_id"]?.stringValue ?? ""
    }

    static func ids(_ messages: [JSONValue]) -> [String] { messages.compactMap { $0["message_id"]?.stringValue } }

    @Test func theUserLogHoldsThePeerAndGroupMessagesOfItsAudienceAtWriteTime() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b", "c", "d"] { try app.createUser(id) }
            let peer = try Self.send(app, "a", to: "b")
            let group = try Self.createGroup(app, "a", members: ["b"])
            let before = try Self.send(app, "a", to: group, conversation: "group", text: "before d")
            let invited = try app.request(.post, "/v1/groups/\(group)/members/invite", json: #"{"user_ids":["d"]}"#)
            #expect(invited.status == 200, "\(invited.text)")
            let after = try Self.send(app, "b", to: group, conversation: "group", text: "after d")

            #expect(Self.ids(try Self.messages(app, "a")) == [peer, before, after], "the sender and a member")
            #expect(Self.ids(try Self.messages(app, "b")) == [peer, before, after], "the recipient and a member")
            #expect(Self.ids(try Self.messages(app, "c")).isEmpty, "a third user gets none of them")
            #expect(Self.ids(try Self.messages(app, "d")) == [after], "a later joiner gets only what was written after it joined")
            // The same audience as the app log's user_id filter.
            let filtered = try app.events(query: "types=message.sent&user_id=d").compactMap { $0["id"]?.stringValue }
            #expect(Self.items(try Self.log(app, "d", "after=earliest&types=message.sent")).compactMap { $0["id"]?.stringValue } == filtered)
            // The group's own events reach its members at write time too: d sees its join, not the group's creation.
            let groupEvents = Self.items(try Self.log(app, "d", "after=earliest&types=group.*")).compactMap { $0["type"]?.stringValue }
            #expect(groupEvents == ["group.member_joined"])
        }
    }

    @Test func theAppKeyAndTheUsersOwnTokenReadTheSameAndOtherCredentialsAreRefused() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            try Self.send(app, "a", to: "b")
            try Self.send(app, "b", to: "a")
            let tokenA = try app.token(for: "a")
            let byApp = try Self.log(app, "a")
            let byToken = try Self.log(app, "a", token: tokenA)
            #expect(Self.items(byApp).count >= 2)
            #expect(byApp.json == byToken.json, "the user view whichever credential reads it")
            #expect(byApp.json?["next_cursor"] == byApp.json?["items"]?[Self.items(byApp).count - 1]?["id"])

            Self.expectProblem(try Self.log(app, "b", token: tokenA), 403, .forbidden, "another user's log")
            Self.expectProblem(try Self.log(app, "nobody"), 404, .userNotFound)
            for bad in ["-1", "abc", "%2B5", "1.5", "99999999"] {
                Self.expectProblem(try Self.log(app, "a", "after=\(bad)"), 400, .invalidLastEventId, "after=\(bad)")
            }
            Self.expectProblem(try Self.log(app, "a", "limit=0"), 400, .invalidParams)
            Self.expectProblem(try Self.log(app, "a", "limit=101"), 400, .invalidParams)
        }
    }

    @Test func afterDefaultsToTheHeadAndTypesAndCursorsPage() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            try LiveStreams.rename(app, "a", times: 5)
            try Self.send(app, "a", to: "b")
            try LiveStreams.rename(app, "b", times: 2)

            let head = try LiveStreams.head(app)
            let atHead = try Self.log(app, "a", "")
            #expect(Self.items(atHead).isEmpty)
            #expect(atHead.json?["next_cursor"] == .null)
            #expect(atHead.json?["previous_event_id"] == .string(String(head)), "no after: the head")

            var after = "earliest"
            var pages: [[String]] = []
            var previous: [String] = []
            while true {
                let r = try Self.log(app, "a", "after=\(after)&limit=2&types=user.updated")
                previous.append(r.json?["previous_event_id"]?.stringValue ?? "")
                let page = Self.items(r)
                #expect(page.allSatisfy { $0["type"] == .string("user.updated") && $0["data"]?["user"]?["user_id"] == .string("a") })
                guard let next = r.json?["next_cursor"]?.stringValue else {
                    #expect(page.isEmpty)
                    break
                }
                #expect(next == page.last?["id"]?.stringValue)
                pages.append(page.compactMap { $0["id"]?.stringValue })
                after = next
            }
            #expect(pages.map(\.count) == [2, 2, 1])
            #expect(previous.first == "0", "earliest: the trim point")
            let expected = try app.events(query: "types=user.updated&user_id=a").compactMap { $0["id"]?.stringValue }
            #expect(pages.flatMap { $0 } == expected)
            // Prefix patterns and lists, as on the app log.
            let types = Self.items(try Self.log(app, "a", "after=earliest&types=message.*,user.updated")).compactMap { $0["type"]?.stringValue }
            #expect(types == Array(repeating: "user.updated", count: 5) + ["message.sent"])
        }
    }

    @Test func aSuppressedMessagesEventCarriesSuppressedOnlyInTheAppView() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            #expect(try app.request(.post, "/v1/users/b/blacklist", json: #"{"user_ids":["a"]}"#).status == 200)
            let id = try Self.send(app, "a", to: "b")

            let appView = try #require(try Self.appMessages(app).first)
            #expect(appView["message_id"] == .string(id))
            #expect(appView["suppressed"] == .string("blacklist"))
            #expect(appView["push"]?["title"] == .string("Ping"))
            let senderView = try #require(try Self.messages(app, "a").first)
            #expect(senderView["message_id"] == .string(id))
            #expect(senderView.objectValue?.contains("suppressed") == false, "a user never sees suppressed")
            #expect(senderView["push"]?["title"] == .string("Ping"), "the sender sees its push")
            #expect(try Self.messages(app, "b").isEmpty, "the blocking recipient gets nothing")
            // The sender's view is what its token reads over REST.
            let rest = try Self.asUser(app, try app.token(for: "a"), .get, "/v1/messages/\(id)")
            #expect(rest.json == senderView)
        }
    }

    /// A revoked type-1 message: `original_text` in the app view and the sender's view only; `push` likewise; and the
    /// conversation whose last message it is, in each owner's view.
    @Test func aRevokesOriginalTextAndPushAreForTheAppAndTheSenderOnly() throws {
        try withApp(testClock: true, settings: #"{"sensitive_words":["darn"],"sensitive_word_action":"mask"}"#, unthrottled: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let id = try Self.send(app, "a", to: "b", text: "oh darn it")
            #expect(try app.request(.post, "/v1/messages/\(id)/revoke", json: "{}").status == 200)

            let appView = try #require(try Self.appMessages(app, type: "message.revoked").first)
            #expect(appView["type"] == .int(31))
            #expect(appView["body"]?["original_text"] == .string("oh **** it"))
            #expect(appView["push"]?["title"] == .string("Ping"))
            #expect(appView["suppressed"] == .null)
            let senderView = try #require(try Self.messages(app, "a", type: "message.revoked").first)
            #expect(senderView["body"]?["original_text"] == .string("oh **** it"))
            #expect(senderView["push"]?["title"] == .string("Ping"))
            #expect(senderView.objectValue?.contains("suppressed") == false)
            let recipientView = try #require(try Self.messages(app, "b", type: "message.revoked").first)
            #expect(recipientView["body"]?.objectValue?.contains("original_text") == false)
            #expect(recipientView["body"]?["revoke_status"] == appView["body"]?["revoke_status"])
            #expect(recipientView.objectValue?.contains("push") == false)
            #expect(recipientView.objectValue?.contains("suppressed") == false)
            // Each view is exactly what the user's token reads over REST.
            let tokenB = try app.token(for: "b")
            #expect(try Self.asUser(app, tokenB, .get, "/v1/messages/\(id)").json == recipientView)
            #expect(try Self.asUser(app, try app.token(for: "a"), .get, "/v1/messages/\(id)").json == senderView)
            // The send's event too: push for the sender only.
            #expect(try Self.messages(app, "a").first?["push"]?["title"] == .string("Ping"))
            #expect(try Self.messages(app, "b").first?.objectValue?.contains("push") == false)

            // conversation.updated carries the revoke record as last_message, in the owner's view.
            for owner in ["a", "b"] {
                let other = owner == "a" ? "b" : "a"
                let r = try app.request(.patch, "/v1/users/\(owner)/conversations/peer/\(other)", json: #"{"pinned":true}"#)
                #expect(r.status == 200, "\(r.text)")
            }
            let appConversations = try app.events(query: "types=conversation.updated").compactMap { $0["data"]?["conversation"]?["last_message"] }
            #expect(appConversations.count == 2)
            #expect(appConversations.allSatisfy { $0["body"]?["original_text"] == .string("oh **** it") })
            let lastFor = { (user: String) throws -> JSONValue? in
                Self.items(try Self.log(app, user, "after=earliest&types=conversation.updated")).first?["data"]?["conversation"]?["last_message"]
            }
            #expect(try lastFor("a")?["body"]?["original_text"] == .string("oh **** it"))
            #expect(try lastFor("b")?["body"]?.objectValue?.contains("original_text") == false)
            #expect(try lastFor("b")?.objectValue?.contains("push") == false)
            let conversationB = try Self.asUser(app, tokenB, .get, "/v1/users/b/conversations/peer/a")
            #expect(conversationB.json?["last_message"] == (try lastFor("b")))
        }
    }

    @Test func deletedAtIsForTheAppViewAndSelfIncludedIsInNoView() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            try LiveStreams.rename(app, "a", times: 1)
            let id = try Self.send(app, "a", to: "b")
            let reacted = try Self.asUser(app, try app.token(for: "b"), .post, "/v1/messages/\(id)/reactions", json: #"{"reaction_type":"like"}"#)
            #expect(reacted.status == 201, "\(reacted.text)")
            #expect(reacted.json?["reactions"]?[0]?["self_included"] == .bool(true), "the REST answer to a token has it")

            let appUser = try #require(try app.events(query: "types=user.updated").first?["data"]?["user"])
            #expect(appUser.objectValue?.contains("deleted_at") == true)
            let ownUser = try #require(Self.items(try Self.log(app, "a", "after=earliest&types=user.updated")).first?["data"]?["user"])
            #expect(ownUser.objectValue?.contains("deleted_at") == false)
            #expect(ownUser["name"] == appUser["name"])

            let reactionEvents =
                try app.events(query: "types=message.reactions_updated") + Self.items(try Self.log(app, "a", "after=earliest&types=message.*"))
                + Self.items(try Self.log(app, "b", "after=earliest&types=message.*"))
            #expect(reactionEvents.contains { $0["type"] == .string("message.reactions_updated") })
            for event in reactionEvents {
                #expect(!event.description.contains("self_included"), "\(event)")
            }
        }
    }

    /// The live streams carry the same renderings: an app stream the app view, each user stream its user's view
    /// (whichever credential opened it), equal to that user's log.
    @Test func liveStreamsCarryTheAppViewAndEachUsersView() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }
            let group = try Self.createGroup(app, "a", members: ["b", "c"])
            let start = try LiveStreams.head(app)
            let types = "types=message.sent,message.revoked"
            let appStream = try LiveStreams.open(server, "/v1/events?\(types)", bearer: app.key)
            defer { appStream.close() }
            let streamA = try LiveStreams.open(server, "/v1/users/a/events?\(types)", bearer: try app.token(for: "a"))
            defer { streamA.close() }
            let streamB = try LiveStreams.open(server, "/v1/users/b/events?\(types)", bearer: try app.token(for: "b"))
            defer { streamB.close() }
            let streamBByApp = try LiveStreams.open(server, "/v1/users/b/events?\(types)", bearer: app.key)
            defer { streamBByApp.close() }
            let streamC = try LiveStreams.open(server, "/v1/users/c/events?\(types)", bearer: try app.token(for: "c"))
            defer { streamC.close() }

            let id = try Self.send(app, "a", to: group, conversation: "group", text: "secret")
            #expect(try app.request(.post, "/v1/messages/\(id)/revoke", json: "{}").status == 200)

            /// The two events' `data.message` as a stream delivered them (the group's tips messages skipped).
            func received(_ stream: HTTPClientStream) throws -> [JSONValue] {
                var messages: [JSONValue] = []
                while messages.count < 2 {
                    let event = try #require(try LiveStreams.nextEvent(stream))
                    messages += Self.sent([try JSONValue.parse(event.data)])
                }
                return messages
            }
            let onApp = try received(appStream)
            let onA = try received(streamA)
            let onB = try received(streamB)
            let onBByApp = try received(streamBByApp)
            let onC = try received(streamC)
            #expect(onApp[1]["body"]?["original_text"] == .string("secret"))
            #expect(onApp.allSatisfy { $0["push"]?["title"] == .string("Ping") && $0["suppressed"] == .null })
            #expect(onA[1]["body"]?["original_text"] == .string("secret"))
            #expect(onA.allSatisfy { $0["push"]?["title"] == .string("Ping") && $0.objectValue?.contains("suppressed") == false })
            for view in onB + onC {
                #expect(view["body"]?.objectValue?.contains("original_text") != true)
                #expect(view.objectValue?.contains("push") == false)
                #expect(view.objectValue?.contains("suppressed") == false)
            }
            #expect(onBByApp == onB, "the user view whichever credential opened the stream")
            #expect(onB == onC, "every non-sender member gets the same frames")
            // Each stream equals its log.
            let logged = { (user: String) throws -> [JSONValue] in
                Self.sent(Self.items(try Self.log(app, user, "after=\(start)&\(types)")))
            }
            #expect(try logged("a") == onA)
            #expect(try logged("b") == onB)
            #expect(Self.sent(try app.events(after: String(start), query: types)) == onApp)
        }
    }
}

/// The user view made from the app view (``EventUserView``) without a server: for every viewer it is byte for byte the
/// Message JSON a token of that user gets from the REST reads (`Message.json(.user(_:))`).
@Suite("User view of event data")
struct EventUserViewTests {
    static func message(suppressed: String? = nil, revoked: Bool = false) -> Message {
        var m = Message.tombstone(
            messageID: "m1", clientMsgID: "c\"1", conversationType: .peer, from: "u1", to: "u2", seq: 7, timestamp: 1_700)
        m.deleted = false
        m.type = revoked ? 31 : 1
        m.body = Array((revoked ? #"{"revoke_type":0,"revoke_status":1,"original_type":1}"# : #"{"text":"hi ✓"}"#).utf8)
        m.originalText = revoked ? "hi ✓" : nil
        m.push = Array(#"{"enable":true,"title":"t"}"#.utf8)
        m.suppressed = suppressed
        return m
    }

    @Test(arguments: [(nil, false), ("blacklist", false), (nil, true)])
    func theUserViewOfAMessageIsWhatItsTokenReads(suppressed: String?, revoked: Bool) throws {
        let m = Self.message(suppressed: suppressed, revoked: revoked)
        for user in ["u1", "u2"] {
            #expect(try EventUserView.message(m.json(.app), for: user) == m.json(.user(user)), "\(user)")
        }
        var data = JSONObjectWriter()
        data.raw("message", m.json(.app))
        let view = try EventUserView(type: "message.revoked", appData: data.finish())
        #expect(view.sender == "u1")
        for user in ["u1", "u2"] {
            let rendered = try #require(view.data(for: user))
            #expect(try JSONValue.parse(rendered)["message"] == (try JSONValue.parse(m.json(.user(user)))))
        }
    }

    @Test func typesWithoutViewerDependentFieldsKeepTheAppViewBytes() throws {
        #expect(!EventUserView.differs("message.reactions_updated"))
        #expect(!EventUserView.differs("group.member_joined"))
        let view = try EventUserView(type: "friend.added", appData: Array(#"{"user_id":"a"}"#.utf8))
        #expect(view.data(for: "a") == nil)
        #expect(view.sender == nil)
    }
}
