import Foundation
import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Calls through the HTTP API (docs/calls.md): create, act on and read a call; shared by the call suites.
enum Calls: GroupTestSupport {
    /// Creates a call from `caller` to `invitees`; returns the response.
    static func create(_ app: TestApp, _ caller: String, _ invitees: [String], extra: String = "") throws -> TestResponse {
        try app.request(.post, "/v1/calls", json: "{\"caller\":\"\(caller)\",\"invitees\":\(array(invitees))\(extra)}")
    }

    /// Creates a call and returns its id (the request must succeed).
    static func call(_ app: TestApp, _ caller: String, _ invitees: [String], extra: String = "") throws -> String {
        let r = try create(app, caller, invitees, extra: extra)
        #expect(r.status == 200, "\(r.text)")
        return r.json?["call"]?["call_id"]?.stringValue ?? ""
    }

    static func act(_ app: TestApp, _ callID: String, _ action: String, _ json: String) throws -> TestResponse {
        try app.request(.post, "/v1/calls/\(callID)/\(action)", json: json)
    }

    static func get(_ app: TestApp, _ callID: String) throws -> JSONValue? { try app.request(.get, "/v1/calls/\(callID)").json }

    /// Each user's state in the call, in the call's order.
    static func states(_ call: JSONValue?) -> [String] {
        (call?["users"]?.arrayValue ?? []).map { "\($0["user_id"]?.stringValue ?? ""):\($0["state"]?.stringValue ?? "")" }
    }
}

/// Live streams (SSE): open one, read its next event, the log head, and writes that cause events.
enum LiveStreams: ProblemAssertions {
    /// Opens an SSE stream on `server` with `credential` (Authorization header unless nil).
    static func open(
        _ server: TestServer, _ path: String, bearer: String?, lastEventID: String? = nil
    ) throws -> HTTPClientStream {
        var headers = HTTPHeaders()
        if let bearer { headers.add("Authorization", "Bearer \(bearer)") }
        if let lastEventID { headers.add("Last-Event-ID", lastEventID) }
        return try HTTPClient.openStream(url: "http://127.0.0.1:\(server.port)\(path)", headers: headers)
    }

    /// The next event frame. Blocks without an id (`retry:`, `: ping`) are skipped, and so are the
    /// `user.status_updated` events a user's own stream causes by opening (presence), unless asked for.
    static func nextEvent(
        _ stream: HTTPClientStream, timeout: Duration = .seconds(10), includingStatus: Bool = false
    ) throws -> SSEEvent? {
        while let block = try stream.nextEvent(timeout: timeout) {
            if block.id != nil, includingStatus || block.event != "user.status_updated" { return block }
        }
        return nil
    }

    static func head(_ app: TestApp) throws -> Int64 {
        let r = try app.request(.get, "/v1/events/log?limit=1")
        return Int64(r.json?["previous_event_id"]?.stringValue ?? "") ?? -1
    }

    /// Renames `user` `count` times: each write is one `user.updated` whose audience is the user.
    static func rename(_ app: TestApp, _ user: String, times count: Int, tag: String = "n") throws {
        for i in 0..<count {
            let r = try app.request(.patch, "/v1/users/\(user)", json: #"{"name":"\#(tag)\#(i)"}"#)
            #expect(r.status == 200, "\(r.text)")
        }
    }
}

/// Peer messages through the HTTP API: sends, history pages and walks, conversation entries, app settings.
enum PeerMessages: ProblemAssertions {
    /// A JSON string literal.
    static func q(_ s: String) -> String { JSONValue.string(s).description }

    /// `POST /v1/messages` with the app key: a text from `from` to `to` plus `extra` members.
    @discardableResult
    static func sendText(_ app: TestApp, _ from: String, _ to: String, _ text: String = "hi", extra: String = "") throws -> TestResponse {
        try send(app, from, to, type: 1, body: "{\"text\":\(q(text))}", extra: extra)
    }

    @discardableResult
    static func send(_ app: TestApp, _ from: String, _ to: String, type: Int, body: String, extra: String = "") throws -> TestResponse {
        let json =
            "{\"from\":\(q(from)),\"conversation_type\":\"peer\",\"to\":\(q(to)),\"type\":\(type),\"body\":\(body)"
            + (extra.isEmpty ? "" : "," + extra) + "}"
        return try app.request(.post, "/v1/messages", json: json)
    }

    /// The items of a user's peer history (one page).
    static func history(_ app: TestApp, _ user: String, _ peer: String, query: String = "") throws -> [JSONValue] {
        let r = try app.request(.get, "/v1/users/\(user)/conversations/peer/\(peer)/messages\(query)")
        #expect(r.status == 200, "\(r.text)")
        return r.json?["items"]?.arrayValue ?? []
    }

    /// Walks a history list with cursors; returns every item in walk order.
    static func walk(_ app: TestApp, _ user: String, _ peer: String, query: String) throws -> [JSONValue] {
        var all: [JSONValue] = []
        var cursor: String?
        repeat {
            let sep = query.isEmpty ? "?" : "&"
            let path =
                "/v1/users/\(user)/conversations/peer/\(peer)/messages\(query)"
                + (cursor.map { "\(sep)cursor=\($0)" } ?? "")
            let r = try app.request(.get, path)
            #expect(r.status == 200, "\(r.text)")
            all += r.json?["items"]?.arrayValue ?? []
            cursor = r.json?["next_cursor"]?.stringValue
        } while cursor != nil
        return all
    }

    static func seqs(_ items: [JSONValue]) -> [Int64] { items.compactMap { $0["seq"]?.intValue } }

    static func events(_ app: TestApp, _ type: String, audience user: String? = nil) throws -> [JSONValue] {
        try app.events(query: "types=\(type)" + (user.map { "&user_id=\($0)" } ?? ""))
    }

    /// The user's conversation entry with `peer` (nil when absent or deleted).
    static func conversation(_ app: TestApp, _ user: String, _ peer: String) throws -> JSONValue? {
        let r = try app.request(.get, "/v1/users/\(user)/conversations/peer/\(peer)")
        return r.status == 200 ? r.json : nil
    }

    static func patchSettings(_ app: TestApp, _ json: String) throws {
        let r = try app.request(.patch, "/v1/settings", json: json)
        #expect(r.status == 200, "\(r.text)")
    }
}

/// Push set-ups: a gateway receiver, the app pointed at it, devices, sends, and the attempt log.
enum PushFixtures: ProblemAssertions {
    /// A gateway answering `{"rejected": []}` (or what `answer` says).
    static func gateway(
        _ answer: @escaping @Sendable (TestReceiver.Received) -> TestReceiver.Answer = { _ in .status(200, body: #"{"rejected":[]}"#) }
    )
        throws -> TestReceiver
    {
        try TestReceiver(handler: answer)
    }

    /// Points the app at `gateway` with extra `push` settings (JSON members).
    static func configure(_ app: TestApp, _ gateway: TestReceiver, _ extra: String = "") throws {
        let r = try app.request(
            .patch, "/v1/settings", json: #"{"push":{"enabled":true,"gateway_url":"\#(gateway.url)"\#(extra.isEmpty ? "" : "," + extra)}}"#)
        #expect(r.status == 200, "\(r.text)")
    }

    /// Registers a device; returns it.
    @discardableResult
    static func device(
        _ app: TestApp, _ userID: String, platform: String = "android", key: String, voip: Bool = false, extra: String = ""
    ) throws -> JSONValue {
        let r = try app.request(
            .post, "/v1/users/\(userID)/devices",
            json: #"{"platform":"\#(platform)","provider":"fcm","push_key":"\#(key)","app_id":"com.example","voip":\#(voip)\#(extra)}"#)
        #expect(r.status == 201, "\(r.text)")
        return r.json ?? .null
    }

    static func send(_ app: TestApp, from: String = "alice", to: String = "bob", type: String = "peer", extra: String = "") throws -> JSONValue {
        let r = try app.request(
            .post, "/v1/messages",
            json: #"{"from":"\#(from)","conversation_type":"\#(type)","to":"\#(to)","type":1,"body":{"text":"hello there"}\#(extra)}"#)
        #expect(r.status == 201, "\(r.text)")
        return r.json ?? .null
    }

    static func drain(_ server: TestServer) {
        #expect(server.app.push.drain(), "the push bridge did not settle")
    }

    /// The app's attempts, newest first (query: filters).
    static func attempts(_ app: TestApp, _ query: String = "") throws -> [JSONValue] {
        let r = try app.request(.get, "/v1/push/attempts?limit=100\(query.isEmpty ? "" : "&" + query)")
        #expect(r.status == 200, "\(r.text)")
        return r.json?["items"]?.arrayValue ?? []
    }

    /// Runs `body` with a server, an app with users alice (sender) and bob, and a gateway answering as `answer`
    /// says (the app is not pointed at it yet); stops the gateway and the server after.
    static func withScene(
        answering answer: @escaping @Sendable (TestReceiver.Received) -> TestReceiver.Answer = { _ in
            .status(200, body: #"{"rejected":[]}"#)
        },
        _ body: (TestServer, TestApp, TestReceiver) throws -> Void
    ) throws {
        try withTestServer(testClock: true, configure: { $0.webhookAllowPrivate = true }) { server in
            let app = try setUp(server)
            let receiver = try Self.gateway(answer)
            defer { receiver.stop() }
            try body(server, app, receiver)
        }
    }

    /// A fresh app with users alice (sender) and bob.
    static func setUp(_ server: TestServer) throws -> TestApp {
        let app = try server.createApp()
        try app.createUser("alice", name: "Alice")
        try app.createUser("bob", name: "Bob")
        return app
    }
}

/// A user's online status as the API reports it, polled until it settles.
enum OnlineStatus: ProblemAssertions {
    /// Polls `user`'s status until `done` holds (the hub records streams asynchronously), for up to 5 s.
    static func status(_ app: TestApp, _ user: String, until done: (JSONValue) -> Bool) throws -> JSONValue {
        var last = JSONValue.null
        try eventually(every: .milliseconds(50)) {
            last = try app.request(.get, "/v1/users/\(user)/status").json ?? .null
            return done(last)
        }
        return last
    }

    static func platforms(_ status: JSONValue) -> [String] {
        status["online_platforms"]?.arrayValue?.compactMap(\.stringValue) ?? []
    }
}

/// Sends, revokes and reads of single messages, shared by the message suites.
enum MessageActions: GroupTestSupport {
    static func send(_ app: TestApp, _ from: String, _ to: String, _ text: String = "hi", extra: String = "") throws -> JSONValue {
        let r = try PeerMessages.sendText(app, from, to, text, extra: extra)
        #expect(r.status == 201, "\(r.text)")
        return r.json ?? .null
    }

    static func sendGroup(_ app: TestApp, _ from: String, _ group: String, _ text: String = "hi", extra: String = "") throws -> JSONValue {
        let r = try app.request(
            .post, "/v1/messages",
            json: "{\"from\":\"\(from)\",\"conversation_type\":\"group\",\"to\":\"\(group)\",\"type\":1,\"body\":{\"text\":\"\(text)\"}\(extra)}")
        #expect(r.status == 201, "\(r.text)")
        return r.json ?? .null
    }

    static func revoke(_ app: TestApp, _ id: String, _ json: String = "{}") throws -> TestResponse {
        try app.request(.post, "/v1/messages/\(id)/revoke", json: json)
    }

    static func get(_ app: TestApp, _ id: String) throws -> JSONValue? { try app.request(.get, "/v1/messages/\(id)").json }
}

/// Rooms set up directly and room messages sent through the API, shared by the room suites.
enum RoomFixtures: GroupTestSupport {
    /// Creates room `roomID` (with `first_seq` = the room id's current seq head, as a (re)creation does) and its members.
    static func createRoom(_ app: TestApp, _ roomID: String, members: [String]) throws {
        try app.server.sql(
            """
            INSERT INTO rooms (app_id, room_id, created_at, member_count, first_seq)
            VALUES ($1, $2, 0, $3, coalesce((SELECT last_seq FROM conversation_seqs
                                            WHERE app_id = $1 AND conv_type = 'room' AND conv_id = $2), 0))
            """, [app.appID, roomID, members.count])
        for user in members { try enter(app, roomID, user) }
    }

    static func enter(_ app: TestApp, _ roomID: String, _ userID: String) throws {
        try app.server.sql(
            "INSERT INTO room_members (app_id, room_id, user_id, entered_at) VALUES ($1, $2, $3, 0)", [app.appID, roomID, userID])
    }

    static func leave(_ app: TestApp, _ roomID: String, _ userID: String) throws {
        try app.server.sql("DELETE FROM room_members WHERE app_id = $1 AND room_id = $2 AND user_id = $3", [app.appID, roomID, userID])
    }

    /// Sends a room message from `from` with the app key; `extra` is appended to the JSON object.
    @discardableResult
    static func send(_ app: TestApp, _ from: String, _ roomID: String, _ text: String = "hi", type: Int = 1, extra: String = "") throws
        -> TestResponse
    {
        try app.request(
            .post, "/v1/messages",
            json: #"{"from":"\#(from)","conversation_type":"room","to":"\#(roomID)","type":\#(type),"body":{"text":"\#(text)"}\#(extra)}"#)
    }
}

/// A group's stored messages, walked page by page.
enum GroupHistory: GroupTestSupport {
    /// Every stored message of the group, walked page by page: oldest first, or newest first (`forward` false).
    static func history(_ app: TestApp, _ groupID: String, forward: Bool = true, limit: Int = 7) throws -> [JSONValue] {
        var all: [JSONValue] = []
        var cursor: String?
        let direction = forward ? "forward" : "backward"
        repeat {
            let r = try app.request(
                .get, "/v1/groups/\(groupID)/messages?direction=\(direction)&limit=\(limit)" + (cursor.map { "&cursor=\($0)" } ?? ""))
            #expect(r.status == 200, "\(r.text)")
            all += items(r)
            cursor = r.json?["next_cursor"]?.stringValue
        } while cursor != nil
        return all
    }

    static func items(_ r: TestResponse) -> [JSONValue] { r.json?["items"]?.arrayValue ?? [] }
}
