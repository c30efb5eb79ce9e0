import Dispatch
import Glibc
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

/// Scheduled messages (docs/scheduled-messages.md) end to end: scheduling with `send_at` on a send and a batch send,
/// the routes and their problems, sending at (never before) `send_at` on the test clock with the rules in force then,
/// a cancelled message never sent, the per-app limit, a restart in between, a node that stopped mid-send, and two nodes
/// on one database sending each message once.
@Suite("Scheduled messages", .inProcess)
struct ScheduledMessagesTests: GroupTestSupport {
    // MARK: - Helpers

    static func q(_ s: String) -> String { JSONValue.string(s).description }

    /// The server clock (ms).
    static func now(_ server: TestServer) throws -> Int64 {
        try server.request(.get, "/v1/test/clock", bearer: server.adminKey).json?["now"]?.intValue ?? 0
    }

    /// The real clock (ms): the server clock of a server without the test clock.
    static func wallMillis() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }

    /// `POST /v1/messages`: a text from `from` to peer `to` sent at `sendAt`.
    static func schedule(_ app: TestApp, _ from: String, _ to: String, at sendAt: Int64, text: String = "later", extra: String = "")
        throws -> TestResponse
    {
        try app.request(
            .post, "/v1/messages",
            json: "{\"from\":\(q(from)),\"conversation_type\":\"peer\",\"to\":\(q(to)),\"type\":1,\"body\":{\"text\":\(q(text))},"
                + "\"send_at\":\(sendAt)\(extra)}")
    }

    /// Schedules (202 expected) and returns the scheduled id.
    static func scheduled(_ app: TestApp, _ from: String, _ to: String, at sendAt: Int64, text: String = "later") throws -> String {
        let r = try schedule(app, from, to, at: sendAt, text: text)
        guard r.status == 202, let id = r.json?["scheduled_id"]?.stringValue else { throw TestFailure("not scheduled: \(r.status) \(r.text)") }
        return id
    }

    static func get(_ app: TestApp, _ id: String) throws -> JSONValue? {
        let r = try app.request(.get, "/v1/scheduled_messages/\(id)")
        return r.status == 200 ? r.json : nil
    }

    static func history(_ app: TestApp, _ user: String, _ peer: String) throws -> [JSONValue] {
        try PeerMessages.history(app, user, peer, query: "?limit=100")
    }

    // MARK: - Scheduling and the routes

    @Test func schedulingAnswers202AndWritesNothingUntilSendAt() throws {
        try withApp(testClock: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let now = try Self.now(server)
            let r = try Self.schedule(app, "a", "b", at: now + 60_000, text: "hello later")
            #expect(r.status == 202, "\(r.text)")
            #expect(Set(r.json?.objectValue?.keys ?? []) == ["scheduled_id", "send_at", "state"])
            #expect(r.json?["send_at"] == .int(now + 60_000) && r.json?["state"] == "scheduled")
            let id = try #require(r.json?["scheduled_id"]?.stringValue)
            #expect(try Self.history(app, "a", "b").isEmpty, "nothing is written to the conversation yet")

            let s = try #require(try Self.get(app, id))
            #expect(s["state"] == "scheduled" && s["user_id"] == "a" && s["batch"] == .bool(false))
            #expect(s["message_id"] == .null && s["seq"] == .null && s["problem"] == .null && s["sent_at"] == .null)
            #expect(s["request"]?["body"]?["text"] == "hello later")
            #expect(s["request"]?["client_msg_id"] == .string("s:" + id))

            // Not early: 59 s later nothing is sent.
            try server.advanceClock(ms: 59_000)
            #expect(try Self.history(app, "a", "b").isEmpty)
            #expect(try Self.get(app, id)?["state"] == "scheduled")
            // Due: sent before the advance answers, once, at or after send_at.
            try server.advanceClock(ms: 1_500)
            let sent = try #require(try Self.get(app, id))
            #expect(sent["state"] == "sent", "\(sent)")
            let messages = try Self.history(app, "b", "a")
            #expect(messages.count == 1)
            #expect(messages.first?["message_id"] == sent["message_id"] && messages.first?["seq"] == sent["seq"])
            #expect(messages.first?["body"]?["text"] == "hello later")
            #expect((messages.first?["timestamp"]?.intValue ?? 0) >= now + 60_000, "never earlier than send_at")
            #expect((sent["sent_at"]?.intValue ?? 0) >= now + 60_000)
            // Later sweeps send nothing more.
            try server.advanceClock(ms: 60_000)
            #expect(try Self.history(app, "b", "a").count == 1)

            // PATCH and DELETE of a sent message: 409.
            Self.expectProblem(try app.request(.delete, "/v1/scheduled_messages/\(id)"), 409, .scheduledNotPending)
            Self.expectProblem(
                try app.request(.patch, "/v1/scheduled_messages/\(id)", json: "{\"send_at\":\(try Self.now(server) + 60_000)}"), 409,
                .scheduledNotPending)
        }
    }

    @Test func badRequestsAreRefusedAtSchedulingTime() throws {
        try withApp(testClock: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let now = try Self.now(server)
            for bad in [now + 9_000, now - 1, now + 366 * 86_400_000 + 60_000] {
                let r = try Self.schedule(app, "a", "b", at: bad)
                Self.expectProblem(r, 400, .invalidParams)
                #expect(r.json?["errors"]?.arrayValue?.contains { $0["field"] == "body.send_at" } == true, "\(r.text)")
            }
            let text = try app.request(
                .post, "/v1/messages", json: "{\"from\":\"a\",\"conversation_type\":\"peer\",\"to\":\"b\",\"type\":1,\"send_at\":\"soon\"}")
            Self.expectProblem(text, 400, .invalidParams)
            // The send's own validation runs now: a malformed body is 400 at once, an option that does not apply 422.
            let noBody = try app.request(
                .post, "/v1/messages", json: "{\"from\":\"a\",\"conversation_type\":\"peer\",\"to\":\"b\",\"type\":1,\"send_at\":\(now + 60_000)}")
            Self.expectProblem(noBody, 400, .invalidParams)
            Self.expectProblem(try Self.schedule(app, "a", "b", at: now + 60_000, extra: ",\"storage\":true"), 422, .unsupportedOperation)
            // Existence is checked when it is sent: an unknown recipient is accepted now.
            #expect(try Self.schedule(app, "a", "nobody", at: now + 60_000).status == 202)
            // Batch: the request-level checks of a batch send.
            let noRecipients = try app.request(
                .post, "/v1/messages/batch",
                json: "{\"from\":\"a\",\"to_user_ids\":[],\"type\":1,\"body\":{\"text\":\"x\"},\"send_at\":\(now + 60_000)}")
            Self.expectProblem(noRecipients, 400, .invalidParams)

            // Unknown ids, bad filters.
            Self.expectProblem(try app.request(.get, "/v1/scheduled_messages/sch_nope"), 404, .notFound)
            Self.expectProblem(try app.request(.patch, "/v1/scheduled_messages/sch_nope", json: "{}"), 404, .notFound)
            Self.expectProblem(try app.request(.delete, "/v1/scheduled_messages/sch_nope"), 404, .notFound)
            Self.expectProblem(try app.request(.get, "/v1/scheduled_messages?state=waiting"), 400, .invalidParams)
            Self.expectProblem(try app.request(.get, "/v1/scheduled_messages?limit=0"), 400, .invalidParams)
            Self.expectProblem(try app.request(.get, "/v1/scheduled_messages?cursor=nope"), 400, .invalidCursor)
        }
    }

    @Test func listPatchCancelAndUserTokens() throws {
        try withApp(testClock: true) { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }
            let now = try Self.now(server)
            let first = try Self.scheduled(app, "a", "b", at: now + 30_000, text: "one")
            let second = try Self.scheduled(app, "a", "c", at: now + 40_000, text: "two")
            let third = try Self.scheduled(app, "b", "c", at: now + 50_000, text: "three")

            // The list: newest first, filters, cursors.
            var r = try app.request(.get, "/v1/scheduled_messages")
            #expect(r.status == 200)
            #expect(r.json?["items"]?.arrayValue?.compactMap { $0["scheduled_id"]?.stringValue } == [third, second, first])
            r = try app.request(.get, "/v1/scheduled_messages?user_id=a&limit=1")
            #expect(r.json?["items"]?.arrayValue?.compactMap { $0["scheduled_id"]?.stringValue } == [second])
            let cursor = try #require(r.json?["next_cursor"]?.stringValue)
            r = try app.request(.get, "/v1/scheduled_messages?user_id=a&limit=1&cursor=\(cursor)")
            #expect(r.json?["items"]?.arrayValue?.compactMap { $0["scheduled_id"]?.stringValue } == [first])
            #expect(r.json?["next_cursor"] == .null)

            // PATCH: send_at and body while scheduled; validated as a send.
            r = try app.request(.patch, "/v1/scheduled_messages/\(first)", json: "{\"send_at\":\(now + 20_000),\"body\":{\"text\":\"uno\"}}")
            #expect(r.status == 200, "\(r.text)")
            #expect(r.json?["send_at"] == .int(now + 20_000) && r.json?["request"]?["body"]?["text"] == "uno")
            Self.expectProblem(try app.request(.patch, "/v1/scheduled_messages/\(first)", json: "{\"body\":{\"nope\":1}}"), 400, .invalidParams)
            Self.expectProblem(try app.request(.patch, "/v1/scheduled_messages/\(first)", json: "{\"send_at\":\(now)}"), 400, .invalidParams)

            // DELETE cancels: 204, never sent; a second DELETE or a PATCH is 409.
            #expect(try app.request(.delete, "/v1/scheduled_messages/\(second)").status == 204)
            #expect(try Self.get(app, second)?["state"] == "cancelled")
            Self.expectProblem(try app.request(.delete, "/v1/scheduled_messages/\(second)"), 409, .scheduledNotPending)
            Self.expectProblem(try app.request(.patch, "/v1/scheduled_messages/\(second)", json: "{}"), 409, .scheduledNotPending)
            r = try app.request(.get, "/v1/scheduled_messages?state=cancelled")
            #expect(r.json?["items"]?.arrayValue?.compactMap { $0["scheduled_id"]?.stringValue } == [second])

            // A user token schedules its own messages and sees only those; the list is the app's.
            let token = try app.token(for: "c")
            let mine = try server.request(
                .post, "/v1/messages", bearer: token,
                json: "{\"conversation_type\":\"peer\",\"to\":\"a\",\"type\":1,\"body\":{\"text\":\"from c\"},\"send_at\":\(now + 25_000)}")
            #expect(mine.status == 202, "\(mine.text)")
            let mineID = try #require(mine.json?["scheduled_id"]?.stringValue)
            #expect(try server.request(.get, "/v1/scheduled_messages/\(mineID)", bearer: token).json?["user_id"] == "c")
            Self.expectProblem(try server.request(.get, "/v1/scheduled_messages/\(first)", bearer: token), 404, .notFound)
            Self.expectProblem(try server.request(.delete, "/v1/scheduled_messages/\(first)", bearer: token), 404, .notFound)
            Self.expectProblem(try server.request(.get, "/v1/scheduled_messages", bearer: token), 403, .forbidden)
            Self.expectProblem(
                try server.request(
                    .post, "/v1/messages", bearer: token,
                    json:
                        "{\"from\":\"a\",\"conversation_type\":\"peer\",\"to\":\"b\",\"type\":1,\"body\":{\"text\":\"x\"},\"send_at\":\(now + 25_000)}"
                ),
                403, .forbidden)

            try server.advanceClock(ms: 60_000)
            #expect(try Self.get(app, first)?["state"] == "sent")
            #expect(try Self.get(app, third)?["state"] == "sent")
            #expect(try Self.get(app, mineID)?["state"] == "sent")
            #expect(try Self.get(app, second)?["state"] == "cancelled")
            #expect(try Self.history(app, "a", "b").compactMap { $0["body"]?["text"]?.stringValue } == ["uno"])
            #expect(try Self.history(app, "a", "c").compactMap { $0["body"]?["text"]?.stringValue } == ["from c"], "the cancelled one never")
            r = try app.request(.get, "/v1/scheduled_messages?state=sent")
            #expect(r.json?["items"]?.arrayValue?.count == 3)
        }
    }

    // MARK: - The rules in force at send_at

    @Test func theRulesInForceAtSendAtDecide() throws {
        try withApp(testClock: true) { server, app in
            for id in ["a", "b", "m"] { try app.createUser(id) }
            let now = try Self.now(server)
            let muted = try Self.scheduled(app, "a", "b", at: now + 20_000)
            let group = try Self.createGroup(app, "m", members: ["a"])
            let toGroup = try app.request(
                .post, "/v1/messages",
                json:
                    "{\"from\":\"a\",\"conversation_type\":\"group\",\"to\":\(Self.q(group)),\"type\":1,\"body\":{\"text\":\"g\"},\"send_at\":\(now + 20_000)}"
            )
            let groupID = try #require(toGroup.json?["scheduled_id"]?.stringValue)
            let unknown = try Self.scheduled(app, "a", "ghost", at: now + 20_000)
            let batch = try app.request(
                .post, "/v1/messages/batch",
                json: "{\"from\":\"m\",\"to_user_ids\":[\"a\",\"b\",\"ghost\"],\"type\":1,\"body\":{\"text\":\"all\"},\"send_at\":\(now + 20_000)}")
            #expect(batch.status == 202, "\(batch.text)")
            let batchID = try #require(batch.json?["scheduled_id"]?.stringValue)

            // Between scheduling and send_at: a is muted, the group is dismissed.
            #expect(try app.request(.post, "/v1/users/a/mute", json: "{\"duration_s\":3600}").status == 200)
            #expect(try app.request(.post, "/v1/groups/\(group)/dismiss", json: "{\"operator\":\"m\"}").status == 200)
            try server.advanceClock(ms: 21_000)

            let m = try #require(try Self.get(app, muted))
            #expect(m["state"] == "failed" && m["problem"]?["code"] == .int(Int64(ErrorCode.senderMuted.code)), "\(m)")
            #expect(m["problem"]?["status"] == .int(403) && m["problem"]?["type"] == .string("urn:parley:error:6000231"))
            #expect(m["problem"]?["request_id"] == nil && m["message_id"] == .null)
            let g = try #require(try Self.get(app, groupID))
            #expect(g["state"] == "failed", "\(g)")
            #expect([Int64(ErrorCode.groupDismissed.code), Int64(ErrorCode.senderMuted.code)].contains(g["problem"]?["code"]?.intValue ?? 0))
            let u = try #require(try Self.get(app, unknown))
            #expect(u["state"] == "failed" && u["problem"]?["code"] == .int(Int64(ErrorCode.targetNotFound.code)), "\(u)")
            #expect(try Self.history(app, "a", "b").isEmpty)

            // The batch: sent, with the batch answer per recipient.
            let b = try #require(try Self.get(app, batchID))
            #expect(b["state"] == "sent" && b["batch"] == .bool(true), "\(b)")
            let results = b["results"]?.arrayValue ?? []
            #expect(results.count == 3)
            #expect(results.first?["ok"] == .bool(true) && results.first?["data"]?["message_id"]?.stringValue != nil)
            #expect(results.last?["ok"] == .bool(false) && results.last?["error"]?["code"] == .int(Int64(ErrorCode.targetNotFound.code)))
            #expect(try Self.history(app, "b", "m").count == 1)
        }
    }

    @Test func aBeforeSendHookIsCalledAtSendAtAndItsRejectionFailsTheMessage() throws {
        let server = try TestServer.start(testClock: true, configure: { $0.webhookAllowPrivate = true })
        defer { server.stop() }
        let app = try server.createApp()
        for id in ["a", "b"] { try app.createUser(id) }
        let calls = Mutex(0)
        let receiver = try TestReceiver { _ in
            calls.withLock { $0 += 1 }
            return TestReceiver.Answer(
                status: 200, body: Array(#"{"action":"reject","code":42,"reason":"not now"}"#.utf8),
                headers: [("Content-Type", "application/json")], delayMillis: 0)
        }
        defer { receiver.stop() }
        let hook = try app.request(
            .post, "/v1/webhooks",
            json: #"{"url":"\#(receiver.url)/hook","event_types":["message.before_send"],"timeout_ms":2000,"fail_open":true}"#)
        #expect(hook.status == 201, "\(hook.text)")
        let now = try Self.now(server)
        let id = try Self.scheduled(app, "a", "b", at: now + 20_000)
        #expect(calls.withLock { $0 } == 0, "the hook is not called at scheduling time")
        try server.advanceClock(ms: 21_000)
        let s = try #require(try Self.get(app, id))
        #expect(s["state"] == "failed" && s["problem"]?["code"] == .int(Int64(ErrorCode.rejectedByHook.code)), "\(s)")
        #expect(s["problem"]?["detail"] == "not now" && s["problem"]?["hook_code"] == .int(42))
        #expect(calls.withLock { $0 } == 1)
        #expect(try Self.history(app, "a", "b").isEmpty)
    }

    // MARK: - The per-app limit

    @Test func atMostTenThousandWaitPerApp() throws {
        try withApp(testClock: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let now = try Self.now(server)
            // White box: 9,999 waiting rows, written at once.
            try server.sql(
                """
                INSERT INTO scheduled_messages (app_id, scheduled_id, user_id, as_user, batch, request, send_at, state, created_at, updated_at)
                SELECT $1, 'sch_fill' || i, 'a', false, false, '{}'::jsonb, $2, 'scheduled', $3, $3 FROM generate_series(1, 9999) AS i
                """, [app.appID, now + 86_400_000, now])
            // The 10,000th is accepted (a batch counts one), the next is refused.
            let batch = try app.request(
                .post, "/v1/messages/batch",
                json: "{\"from\":\"a\",\"to_user_ids\":[\"b\"],\"type\":1,\"body\":{\"text\":\"x\"},\"send_at\":\(now + 60_000)}")
            #expect(batch.status == 202, "\(batch.text)")
            Self.expectProblem(try Self.schedule(app, "a", "b", at: now + 60_000), 422, .scheduledLimit)
            // Cancelling one makes room again.
            #expect(try app.request(.delete, "/v1/scheduled_messages/sch_fill1").status == 204)
            #expect(try Self.schedule(app, "a", "b", at: now + 60_000).status == 202)
            Self.expectProblem(try Self.schedule(app, "a", "b", at: now + 60_000), 422, .scheduledLimit)
            // The backlog gauge counts them (every app's).
            let metrics = try server.request(.get, "/metrics").text
            #expect(metrics.contains("parley_scheduled_messages_backlog "))
            #expect(metrics.contains("parley_scheduled_message_lateness_seconds_count "))
        }
    }

    // MARK: - Restarts and nodes

    @Test func aMessageDueWhileTheServerWasDownIsSentOnceAfterTheRestart() throws {
        let db = try TestDatabase.shared().makeDatabase()
        let first = try TestServer.start(testClock: true, database: db)
        let app = try first.createApp()
        for id in ["a", "b"] { try app.createUser(id) }
        let now = try Self.now(first)
        let id = try Self.scheduled(app, "a", "b", at: now + 20_000, text: "after restart")
        let cancelled = try Self.scheduled(app, "a", "b", at: now + 20_000, text: "cancelled")
        #expect(try app.request(.delete, "/v1/scheduled_messages/\(cancelled)").status == 204)
        first.stop()

        try withTestServer(testClock: true, database: db) { second in
            let app2 = TestApp(server: second, appID: app.appID, key: app.key)
            #expect(try Self.get(app2, id)?["state"] == "scheduled")
            try second.advanceClock(ms: 25_000)
            #expect(try Self.get(app2, id)?["state"] == "sent")
            #expect(try Self.history(app2, "a", "b").compactMap { $0["body"]?["text"]?.stringValue } == ["after restart"])
            #expect(try Self.get(app2, cancelled)?["state"] == "cancelled")
        }
    }

    @Test func aSendLeftUnrecordedByAStoppedNodeIsNotRepeated() throws {
        try withApp(testClock: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let now = try Self.now(server)
            let id = try Self.scheduled(app, "a", "b", at: now + 20_000, text: "once")
            // A node sent it (its client_msg_id) and stopped before recording it: the row is left `sending`, lease over.
            let sent = try PeerMessages.sendText(app, "a", "b", "once", extra: "\"client_msg_id\":\"s:\(id)\"")
            #expect(sent.status == 201)
            try server.sql(
                "UPDATE scheduled_messages SET state = 'sending', lease_until = 0 WHERE app_id = $1 AND scheduled_id = $2", [app.appID, id])
            // PATCH/DELETE of one being sent: 409.
            Self.expectProblem(try app.request(.delete, "/v1/scheduled_messages/\(id)"), 409, .scheduledNotPending)
            try server.advanceClock(ms: 25_000)
            let s = try #require(try Self.get(app, id))
            #expect(s["state"] == "sent" && s["message_id"] == sent.json?["message_id"], "\(s)")
            #expect(try Self.history(app, "a", "b").count == 1, "the message exists once")
        }
    }

    @Test func twoNodesSendEachMessageOnce() throws {
        try withTestServer { first in
            let second = try TestServer.start(database: first.database)
            defer { second.stop() }
            let app1 = try first.createApp(settings: "{\"rate_limit_app_rps\":100000}")
            let app2 = TestApp(server: second, appID: app1.appID, key: app1.key)
            for id in ["a", "b"] { try app1.createUser(id) }
            let count = 200
            let now = Self.wallMillis()
            // Real time: both nodes' background sweeps race for the same rows (scheduling them all takes a while on a
            // loaded machine, and each must still be 10 s ahead).
            let sendAt = now + 20_000
            var ids: [String] = []
            for i in 0..<count { ids.append(try Self.scheduled(i % 2 == 0 ? app1 : app2, "a", "b", at: sendAt, text: "m\(i)")) }
            let allSent = try eventually(timeout: .seconds(60), every: .milliseconds(250)) {
                try app1.request(.get, "/v1/scheduled_messages?state=scheduled&limit=1").json?["items"]?.arrayValue?.isEmpty == true
            }
            #expect(allSent)
            var texts: [String] = []
            var cursor: String?
            repeat {
                let r = try app1.request(.get, "/v1/users/a/conversations/peer/b/messages?limit=100" + (cursor.map { "&cursor=\($0)" } ?? ""))
                for m in r.json?["items"]?.arrayValue ?? [] {
                    texts.append(m["body"]?["text"]?.stringValue ?? "")
                    #expect((m["timestamp"]?.intValue ?? 0) >= sendAt, "never early")
                }
                cursor = r.json?["next_cursor"]?.stringValue
            } while cursor != nil
            #expect(texts.count == count && Set(texts).count == count, "each sent once: \(texts.count)")
            for id in ids.prefix(10) { #expect(try Self.get(app1, id)?["state"] == "sent") }
        }
    }
}
