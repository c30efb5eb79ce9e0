import Glibc
import ParleyHTTP
import ParleySync
import ParleyTesting
import Synchronization
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// A loopback HTTP/1.1 receiver for hook calls: records each request (head lines and body) and answers with a
/// programmable status, body and delay, then closes the connection. Plain HTTP, Content-Length bodies only.
final class HookReceiver: Sendable {
    struct Received: Sendable {
        var headers: [String: String]
        var body: [UInt8]
        var json: JSONValue? { try? JSONValue.parse(body) }
    }

    struct Answer: Sendable {
        var status = 200
        var body = #"{"action":"allow"}"#
        var delayMillis = 0
    }

    let port: Int
    private let listener: Int32
    private let state = LockedValue((answer: Answer(), received: [Received](), stopped: false))

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                bind(fd, sa, length) == 0 && listen(fd, 128) == 0 && getsockname(fd, sa, &length) == 0
            }
        }
        guard bound else { throw TestFailure("hook receiver: cannot listen") }
        listener = fd
        port = Int(UInt16(bigEndian: address.sin_port))
        let thread = BackgroundThread.start(name: "hook-receiver") { [self] in acceptLoop() }
        pthread_detach(thread)
    }

    deinit { stop() }

    var url: String { "http://127.0.0.1:\(port)/hook" }

    /// What the next calls get.
    func answer(status: Int = 200, _ body: String, delayMillis: Int = 0) {
        state.withLock { $0.answer = Answer(status: status, body: body, delayMillis: delayMillis) }
    }

    var received: [Received] { state.withLock { $0.received } }

    func stop() {
        let first = state.withLock { s -> Bool in
            defer { s.stopped = true }
            return !s.stopped
        }
        if first { shutdown(listener, Int32(SHUT_RDWR)) }
    }

    private func acceptLoop() {
        while true {
            let connection = accept(listener, nil, nil)
            if connection < 0 {
                if state.withLock({ $0.stopped }) { return }
                continue
            }
            pthread_detach(BackgroundThread.start(name: "hook-conn") { [self] in serve(connection) })
        }
    }

    private func serve(_ fd: Int32) {
        defer { close(fd) }
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 8192)
        var headEnd: Int?
        var contentLength = 0
        while true {
            if let end = headEnd, data.count >= end + contentLength { break }
            let n = read(fd, &buffer, buffer.count)
            if n <= 0 { return }
            data += buffer[0..<n]
            if headEnd == nil, let range = Self.find([13, 10, 13, 10], in: data) {
                headEnd = range
                for line in String(decoding: data[0..<range], as: UTF8.self).split(separator: "\r\n").dropFirst() {
                    let parts = line.split(separator: ":", maxSplits: 1)
                    if parts.count == 2, parts[0].lowercased() == "content-length" {
                        contentLength = Int(parts[1].trimmingCharacters(in: " ")) ?? 0
                    }
                }
            }
        }
        let end = headEnd ?? 0
        var headers: [String: String] = [:]
        for line in String(decoding: data[0..<end], as: UTF8.self).split(separator: "\r\n").dropFirst() {
            let parts = line.split(separator: ":", maxSplits: 1)
            if parts.count == 2 { headers[parts[0].lowercased()] = String(parts[1].trimmingCharacters(in: " ")) }
        }
        let answer = state.withLock { s -> Answer in
            s.received.append(Received(headers: headers, body: Array(data[end...].prefix(contentLength))))
            return s.answer
        }
        if answer.delayMillis > 0 { usleep(UInt32(answer.delayMillis) * 1000) }
        let body = Array(answer.body.utf8)
        let head = "HTTP/1.1 \(answer.status) X\r\nContent-Type: application/json\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        let bytes = Array(head.utf8) + body
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }

    private static func find(_ needle: [UInt8], in data: [UInt8]) -> Int? {
        guard data.count >= needle.count else { return nil }
        for i in 0...(data.count - needle.count) where Array(data[i..<(i + needle.count)]) == needle { return i + needle.count }
        return nil
    }
}

extension Substring {
    fileprivate func trimmingCharacters(in set: Character) -> Substring {
        var s = self
        while s.first == set { s.removeFirst() }
        while s.last == set { s.removeLast() }
        return s
    }
}

/// Before-event hooks (API.md §15.3) end to end: a real server calling a loopback receiver.
@Suite("Before-event hooks", .inProcess)
struct BeforeHookTests: ProblemAssertions {
    /// A server that may call loopback hooks, an app with users a and b, a receiver, and an endpoint serving `types`.
    struct Fixture {
        let server: TestServer
        let app: TestApp
        let receiver: HookReceiver
        let webhookID: String

        init(_ types: [String] = ["message.before_send"], failOpen: Bool = true, timeoutMillis: Int = 300, users: [String] = ["a", "b"]) throws {
            server = try TestServer.start(configure: { $0.webhookAllowPrivate = true })
            app = try server.createApp(settings: #"{"rate_limit_app_rps":100000}"#)
            for user in users { try app.createUser(user) }
            receiver = try HookReceiver()
            let list = types.map { "\"\($0)\"" }.joined(separator: ",")
            let r = try app.request(
                .post, "/v1/webhooks",
                json: #"{"url":"\#(receiver.url)","event_types":[\#(list)],"timeout_ms":\#(timeoutMillis),"fail_open":\#(failOpen)}"#)
            guard r.status == 201, let id = r.json?["webhook_id"]?.stringValue else {
                throw TestFailure("creating the webhook failed: \(r.status) \(r.text)")
            }
            webhookID = id
        }

        func send(_ text: String = "hi", from: String = "a", to: String = "b", extra: String = "") throws -> TestResponse {
            try MessagesTests.sendText(app, from, to, text, extra: extra)
        }

        func history(_ user: String = "b", _ peer: String = "a") throws -> [JSONValue] { try MessagesTests.history(app, user, peer) }

        /// The endpoint's `before` deliveries, newest first (after the dispatcher wrote its log).
        func beforeDeliveries() throws -> [JSONValue] {
            _ = server.app.services.webhooks.dispatcher.drain()
            let r = try app.request(.get, "/v1/webhooks/\(webhookID)/deliveries?kind=before")
            #expect(r.status == 200, "\(r.text)")
            return r.json?["items"]?.arrayValue ?? []
        }
    }

    // MARK: - message.before_send

    @Test func allowCallsTheHookWithTheProposedMessage() throws {
        let f = try Fixture()
        let r = try f.send("hello")
        #expect(r.status == 201, "\(r.text)")
        let calls = f.receiver.received
        try #require(calls.count == 1)
        let call = calls[0]
        let body = try #require(call.json)
        #expect(body["id"]?.stringValue == call.headers["webhook-id"])
        #expect(body["type"]?.stringValue == "message.before_send")
        #expect(body["app_id"]?.stringValue == f.app.appID)
        #expect(body["created_at"]?.intValue != nil)
        let message = try #require(body["data"]?["message"]?.objectValue)
        #expect(message["body"]?["text"]?.stringValue == "hello")
        #expect(message["from"]?.stringValue == "a")
        #expect(message["to"]?.stringValue == "b")
        #expect(message["message_id"] == nil && message["seq"] == nil && message["timestamp"] == nil)
        #expect(call.headers["webhook-signature"]?.hasPrefix("v1,") == true)
        #expect(try f.history().count == 1)
        let deliveries = try f.beforeDeliveries()
        try #require(deliveries.count == 1)
        #expect(deliveries[0]["kind"]?.stringValue == "before")
        #expect(deliveries[0]["decision"]?.stringValue == "allow")
        #expect(deliveries[0]["hook_call_id"]?.stringValue == call.headers["webhook-id"])
    }

    @Test func rejectStoresNothing() throws {
        let f = try Fixture()
        f.receiver.answer(#"{"action":"reject","code":42,"reason":"no thanks"}"#)
        let r = try f.send()
        Self.expectProblem(r, 403, 7_000_501)
        #expect(r.json?["hook_code"]?.intValue == 42)
        #expect(r.json?["detail"]?.stringValue == "no thanks")
        #expect(try f.history().isEmpty)
        #expect(try f.history("a", "b").isEmpty)
        #expect(try f.beforeDeliveries().first?["decision"]?.stringValue == "reject")
    }

    @Test func modifyStoresThePatchedMessage() throws {
        let f = try Fixture()
        f.receiver.answer(#"{"action":"modify","patch":{"body":{"text":"patched"},"extended_data":"x","from":"z"}}"#)
        let r = try f.send("original")
        #expect(r.status == 201, "\(r.text)")
        #expect(r.json?["body"]?["text"]?.stringValue == "patched")
        #expect(r.json?["extended_data"]?.stringValue == "x")
        #expect(r.json?["from"]?.stringValue == "a")
        let items = try f.history()
        #expect(items.map { $0["body"]?["text"]?.stringValue } == ["patched"])
        #expect(try f.beforeDeliveries().first?["decision"]?.stringValue == "modify")
    }

    @Test func invalidPatchIs422() throws {
        let f = try Fixture()
        // A text over the limit (413 without a hook) and a bad member type (400 without a hook) are both 422.
        f.receiver.answer(#"{"action":"modify","patch":{"extended_data":42}}"#)
        Self.expectProblem(try f.send(), 422, 7_000_503)
        f.receiver.answer(#"{"action":"modify","patch":{"body":{"text":"\#(String(repeating: "x", count: 20_000))"}}}"#)
        Self.expectProblem(try f.send(), 422, 7_000_503)
        #expect(try f.history().isEmpty)
    }

    @Test func dropIsAFakeSuccess() throws {
        let f = try Fixture()
        f.receiver.answer(#"{"action":"drop"}"#)
        let r = try f.send("secret")
        #expect(r.status == 201, "\(r.text)")
        #expect(r.json?["seq"]?.intValue == 1)
        #expect(try f.history().isEmpty)
        #expect(try f.history("a", "b").count == 1)
        let stored = try f.app.request(.get, "/v1/messages/\(r.json?["message_id"]?.stringValue ?? "")")
        #expect(stored.json?["suppressed"]?.stringValue == "hook_drop")
        #expect(try MessagesTests.events(f.app, "message.sent", audience: "b").isEmpty)
        #expect(try f.beforeDeliveries().first?["decision"]?.stringValue == "drop")
    }

    @Test func timeoutFailsOpenOrClosed() throws {
        let open = try Fixture()
        open.receiver.answer(#"{"action":"reject"}"#, delayMillis: 600)
        #expect(try open.send().status == 201)
        #expect(try open.beforeDeliveries().first?["decision"]?.stringValue == "timeout")

        let closed = try Fixture(failOpen: false)
        closed.receiver.answer(#"{"action":"allow"}"#, delayMillis: 600)
        let r = try closed.send()
        Self.expectProblem(r, 503, 7_000_502)
        #expect(r.headers["Retry-After"] == "1")
        #expect(try closed.history().isEmpty)
        closed.receiver.answer(status: 500, "{}")
        Self.expectProblem(try closed.send(), 503, 7_000_502)
    }

    @Test func skippedSendsDoNotCallTheHook() throws {
        let f = try Fixture()
        f.receiver.answer(#"{"action":"reject"}"#)
        #expect(try f.send(extra: #""skip_hooks":true"#).status == 201)
        let token = try f.app.token(for: "a")
        let userSend = try f.server.request(
            .post, "/v1/messages", bearer: token, json: #"{"conversation_type":"peer","to":"b","type":1,"body":{"text":"x"},"skip_hooks":true}"#)
        Self.expectProblem(userSend, 403, 7_000_002)
        let batch = try f.app.request(
            .post, "/v1/messages/batch", json: #"{"from":"a","to_user_ids":["b"],"type":1,"body":{"text":"batch"}}"#)
        #expect(batch.status == 200, "\(batch.text)")
        #expect(f.receiver.received.isEmpty)

        // A client_msg_id duplicate answers from the stored message without asking the hook.
        f.receiver.answer(#"{"action":"allow"}"#)
        #expect(try f.send("dup", extra: #""client_msg_id":"c1""#).status == 201)
        #expect(f.receiver.received.count == 1)
        let again = try f.send("dup", extra: #""client_msg_id":"c1""#)
        #expect(again.status == 200)
        #expect(again.headers["Parley-Duplicate"] == "true")
        #expect(f.receiver.received.count == 1)
    }

    @Test func hookWaitsDoNotHoldPoolWorkers() throws {
        let f = try Fixture(timeoutMillis: 2_000)
        f.receiver.answer(#"{"action":"allow"}"#, delayMillis: 300)
        let statuses = Mutex<[Int]>([])
        let start = ContinuousClock.now
        let threads = (0..<32).map { i in
            BackgroundThread(name: "sender") {
                let status = (try? f.send("m\(i)").status) ?? 0
                statuses.withLock { $0.append(status) }
            }
        }
        for thread in threads { thread.join() }
        let elapsed = ContinuousClock.now - start
        #expect(statuses.withLock { $0 }.allSatisfy { $0 == 201 })
        #expect(f.receiver.received.count == 32)
        #expect(elapsed < .milliseconds(2_500), "32 sends with a 300 ms hook took \(elapsed)")
    }

    // MARK: - group.before_create

    @Test func groupCreateHook() throws {
        let f = try Fixture(["group.before_create"])
        f.receiver.answer(#"{"action":"modify","patch":{"name":"patched","attributes":{"k":"v"},"owner_id":"b"}}"#)
        let r = try f.app.request(.post, "/v1/groups", json: #"{"operator":"a","group_id":"g1","name":"orig","members":["b"]}"#)
        #expect(r.status == 201, "\(r.text)")
        #expect(r.json?["group"]?["name"]?.stringValue == "patched")
        #expect(r.json?["group"]?["owner_id"]?.stringValue == "a")
        let data = try #require(f.receiver.received.first?.json?["data"])
        #expect(data["group"]?["name"]?.stringValue == "orig")
        #expect(data["group"]?["group_id"]?.stringValue == "g1")
        #expect(data["operator"]?.stringValue == "a")
        #expect(data["member_ids"]?.arrayValue?.compactMap(\.stringValue) == ["b"])

        f.receiver.answer(#"{"action":"modify","patch":{"name":"\#(String(repeating: "n", count: 60))"}}"#)
        Self.expectProblem(try f.app.request(.post, "/v1/groups", json: #"{"operator":"a","group_id":"g2"}"#), 422, 7_000_503)
        f.receiver.answer(#"{"action":"drop","code":7}"#)
        let dropped = try f.app.request(.post, "/v1/groups", json: #"{"operator":"a","group_id":"g3"}"#)
        Self.expectProblem(dropped, 403, 7_000_501)
        #expect(dropped.json?["hook_code"]?.intValue == 7)
        #expect(try f.app.request(.get, "/v1/groups/g3").status == 404)
        #expect(try f.app.request(.post, "/v1/groups", json: #"{"operator":"a","group_id":"g4","skip_hooks":true}"#).status == 201)
        #expect(f.receiver.received.count == 3)
    }

    // MARK: - friend.before_add

    @Test func friendAddHook() throws {
        let f = try Fixture(["friend.before_add"], users: ["a", "b", "c"])
        f.receiver.answer(#"{"action":"modify","patch":{"alias":"bee","wording":"patched"}}"#)
        let added = try f.app.request(.post, "/v1/users/a/friends", json: #"{"friend_id":"b","wording":"hello"}"#)
        #expect(added.status == 201, "\(added.text)")
        #expect(added.json?["alias"]?.stringValue == "bee")
        #expect(added.json?["wording"]?.stringValue == "patched")
        let data = try #require(f.receiver.received.first?.json?["data"])
        #expect(data["user_id"]?.stringValue == "a")
        #expect(data["friend_id"]?.stringValue == "b")
        #expect(data["via"]?.stringValue == "direct")
        #expect(data["wording"]?.stringValue == "hello")

        f.receiver.answer(#"{"action":"reject","reason":"spam"}"#)
        let rejected = try f.app.request(.post, "/v1/users/a/friend_applications", json: #"{"to":"c","wording":"hi"}"#)
        Self.expectProblem(rejected, 403, 7_000_501)
        #expect(f.receiver.received.last?.json?["data"]?["via"]?.stringValue == "application")
        #expect(try f.app.request(.get, "/v1/users/c/friend_applications").json?["items"]?.arrayValue?.isEmpty == true)
        f.receiver.answer(#"{"action":"modify","patch":{"alias":42}}"#)
        Self.expectProblem(try f.app.request(.post, "/v1/users/a/friends", json: #"{"friend_id":"c"}"#), 422, 7_000_503)
    }
}
