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

/// Removing a user's messages (docs/jobs.md#removing-a-users-messages) end to end: the request's problems, dry runs,
/// delete for everyone (tombstones, `message.deleted` per conversation per 500), hide (the sender still sees them,
/// nobody's unread counts them), the scope and the time bounds, the moderation log, and a removal of 10,000 messages
/// while the conversation keeps sending.
@Suite("Bulk removal", .inProcess)
struct BulkRemovalTests: GroupTestSupport {
    static let base = JobsTests.base

    static func count(_ server: TestServer, _ app: TestApp, _ condition: String) throws -> Int64 {
        try server.count("SELECT count(*) FROM messages WHERE app_id = $1 AND \(condition)", [app.appID])
    }

    /// Runs a removal to its end and returns the finished Job.
    static func run(_ app: TestApp, _ json: String) throws -> JSONValue {
        let job = try JobsTests.removal(app, json)
        return try JobsTests.awaitState(app, try #require(job["job_id"]?.stringValue), "succeeded")
    }

    static func range(_ user: String, _ from: Int64, _ to: Int64, mode: String = "delete", dryRun: Bool = true, scope: String = "") -> String {
        "{\"user_id\":\"\(user)\",\"from\":\(from),\"to\":\(to),\"mode\":\"\(mode)\",\"dry_run\":\(dryRun)\(scope)}"
    }

    // MARK: - The request

    @Test func refusedRequestsCreateNoJob() throws {
        try withApp { server, app in
            try app.createUser("alice")
            let post = { (json: String) in try app.request(.post, "/v1/moderation/remove_messages", json: json) }
            Self.expectProblem(try post(Self.range("nobody", 0, 10)), 404, .userNotFound)
            for (json, field) in [
                (Self.range("alice", 10, 10), "to"), (Self.range("alice", 10, 9), "to"),
                ("{\"from\":0,\"to\":10,\"mode\":\"delete\"}", "user_id"), ("{\"user_id\":\"alice\",\"to\":10,\"mode\":\"delete\"}", "from"),
                ("{\"user_id\":\"alice\",\"from\":0,\"mode\":\"delete\"}", "to"), ("{\"user_id\":\"alice\",\"from\":0,\"to\":10}", "mode"),
                (Self.range("alice", 0, 10, mode: "erase"), "mode"), (Self.range("alice", -1, 10), "from"),
                (Self.range("alice", 0, 10, scope: ",\"conversation_type\":\"peer\""), "conversation_id"),
                (Self.range("alice", 0, 10, scope: ",\"conversation_id\":\"bob\""), "conversation_type"),
                (Self.range("alice", 0, 10, scope: ",\"conversation_type\":\"channel\",\"conversation_id\":\"bob\""), "conversation_type"),
                ("{\"user_id\":\"alice\",\"from\":0,\"to\":10,\"mode\":\"hide\",\"dry_run\":\"no\"}", "dry_run"),
            ] {
                let r = try post(json)
                Self.expectProblem(r, 400, .invalidParams, json)
                #expect(Self.fields(r).contains("body." + field), "\(json): \(Self.fields(r))")
            }
            #expect(try app.request(.get, "/v1/jobs").json?["items"] == .array([]))
            // App key only.
            let token = try app.token(for: "alice")
            #expect(try server.request(.post, "/v1/moderation/remove_messages", bearer: token, json: Self.range("alice", 0, 10)).status == 403)
        }
    }

    // MARK: - Dry run

    @Test func dryRunCountsAndSamplesWithoutChangingAnything() throws {
        try withApp { server, app in
            for id in ["alice", "bob"] { try app.createUser(id) }
            try JobsTests.importTexts(app, from: "alice", to: "bob", count: 40, start: Self.base)
            let job = try JobsTests.removal(app, "{\"user_id\":\"alice\",\"from\":\(Self.base + 5),\"to\":\(Self.base + 35),\"mode\":\"delete\"}")
            #expect(job["progress"]?["total"] == .int(30))
            let done = try JobsTests.awaitState(app, try #require(job["job_id"]?.stringValue), "succeeded")
            let result = try #require(done["result"])
            #expect(result["matched"] == .int(30) && result["changed"] == .int(0) && result["held"] == .int(0))
            let sample = result["sample_message_ids"]?.arrayValue?.compactMap(\.stringValue) ?? []
            let expected = try server.app.services.pool.withConnection { db in
                try db.query(
                    sql: "SELECT message_id FROM messages WHERE app_id = $1 AND timestamp >= $2 ORDER BY timestamp, message_id LIMIT 20",
                    [app.appID, Self.base + 5]
                ).rows.map { try $0.decode(String.self, at: 0) }
            }
            #expect(sample == expected)
            #expect(try Self.count(server, app, "deleted OR suppressed IS NOT NULL") == 0)
            #expect(try JobsTests.allEvents(app, "message.deleted").isEmpty)
            #expect(try server.count("SELECT count(*) FROM moderation_actions WHERE app_id = $1", [app.appID]) == 0)
        }
    }

    // MARK: - Delete for everyone

    @Test func deleteForEveryoneInBatchesOfFiveHundred() throws {
        try withApp { server, app in
            for id in ["alice", "bob", "carol"] { try app.createUser(id) }
            try JobsTests.importTexts(app, from: "alice", to: "bob", count: 1100, start: Self.base)
            try JobsTests.importTexts(app, from: "alice", to: "carol", count: 10, start: Self.base + 5000)
            try JobsTests.importTexts(app, from: "bob", to: "alice", count: 5, start: Self.base + 10)

            let done = try Self.run(app, JobsTests.removeAll("alice"))
            #expect(done["result"]?["matched"] == .int(1110))
            #expect(done["result"]?["changed"] == .int(1110))
            #expect(done["progress"] == .object(["done": 1110, "total": 1110]))
            #expect(try Self.count(server, app, "sender = 'alice' AND deleted AND body IS NULL") == 1110)
            #expect(try Self.count(server, app, "sender = 'bob' AND deleted") == 0)

            // One message.deleted per conversation per step of 500, as a delete for everyone by the app writes it.
            let events = try JobsTests.allEvents(app, "message.deleted")
            let sizes = events.map { ($0["data"]?["to"]?.stringValue ?? "", $0["data"]?["message_ids"]?.arrayValue?.count ?? 0) }
            #expect(sizes.filter { $0.0 == "bob" }.map(\.1) == [500, 500, 100], "\(sizes)")
            #expect(sizes.filter { $0.0 == "carol" }.map(\.1) == [10], "\(sizes)")
            #expect(events.allSatisfy { $0["data"]?["scope"] == .string("everyone") && $0["data"]?["operator"] == .null })
            // Both sides' streams get it (the conversation's audience).
            #expect(try app.events(query: "types=message.deleted&user_id=bob").count == 3)

            // The recipient's history shows tombstones; the other side's own messages stay.
            let history = try PeerMessages.history(app, "bob", "alice", query: "?limit=100")
            let mine = history.filter { $0["from"] == .string("alice") }
            #expect(!mine.isEmpty && mine.allSatisfy { $0["deleted"] == .bool(true) && $0["body"] == .null })
            #expect(history.filter { $0["from"] == .string("bob") }.allSatisfy { $0["deleted"] == .bool(false) })

            // The moderation log: one entry, written by the job.
            let logged = try server.app.services.pool.withConnection { db in
                try db.query(
                    sql: "SELECT action, target_type, target_id, params::text, moderator, source FROM moderation_actions WHERE app_id = $1",
                    [app.appID]
                ).rows.map { try $0.decode((String, String, String, String, String?, String).self) }
            }
            #expect(logged.count == 1)
            let entry = try #require(logged.first)
            #expect(entry.0 == "remove_messages" && entry.1 == "user" && entry.2 == "alice" && entry.4 == nil && entry.5 == "job")
            let params = try JSONValue.parse(Array(entry.3.utf8))
            #expect(params["user_id"] == .string("alice") && params["mode"] == .string("delete") && params["dry_run"] == .bool(false))

            // Again: nothing left to match.
            let again = try Self.run(app, JobsTests.removeAll("alice"))
            #expect(again["result"]?["matched"] == .int(0) && again["result"]?["changed"] == .int(0))
        }
    }

    /// The files only the removed messages named are deleted with them, as a delete for everyone deletes them
    /// (`delete_files_with_messages`); a file another message still names stays.
    @Test func filesOnlyTheRemovedMessagesNamedGoWithThem() throws {
        try withApp(transport: .sockets) { server, app in
            for user in ["alice", "bob", "carol"] { try app.createUser(user) }
            let only = try Files.uploaded(app, FilesTests.randomBytes(2000), name: "only.pdf")
            let shared = try Files.uploaded(app, FilesTests.randomBytes(2000), name: "shared.pdf")
            for (to, fileID) in [("bob", only), ("bob", shared), ("carol", shared)] {
                let r = try app.request(
                    .post, "/v1/messages",
                    json: #"{"from":"alice","conversation_type":"peer","to":"\#(to)","type":12,"body":{"file_id":"\#(fileID)"}}"#)
                #expect(r.status == 201, "\(r.text)")
            }
            let done = try Self.run(
                app, Self.range("alice", 0, 9_000_000_000_000, dryRun: false, scope: ",\"conversation_type\":\"peer\",\"conversation_id\":\"bob\""))
            #expect(done["result"]?["changed"] == .int(2))
            Self.expectProblem(try app.request(.get, "/v1/files/\(only)/meta"), 404, .fileNotFound)
            #expect(try app.request(.get, "/v1/files/\(shared)/meta").status == 200, "carol's message still names it")
        }
    }

    // MARK: - Hide

    @Test func hideLeavesTheSenderItsMessagesAndTheRecipientNothing() throws {
        try withApp { server, app in
            for id in ["alice", "bob"] { try app.createUser(id) }
            try PeerMessages.sendText(app, "bob", "alice", "hello alice")
            for i in 0..<3 { #expect(try PeerMessages.sendText(app, "alice", "bob", "spam \(i)").status == 201) }
            #expect(try PeerMessages.conversation(app, "bob", "alice")?["unread_count"] == .int(3))

            let done = try Self.run(app, JobsTests.removeAll("alice", mode: "hide"))
            #expect(done["result"]?["matched"] == .int(3) && done["result"]?["changed"] == .int(3))

            // The recipient: no unread, none of them in its history or as its conversation's last message.
            let bobs = try #require(try PeerMessages.conversation(app, "bob", "alice"))
            #expect(bobs["unread_count"] == .int(0))
            #expect(bobs["last_message"]?["from"] == .string("bob"))
            #expect(try PeerMessages.history(app, "bob", "alice").compactMap { $0["from"]?.stringValue } == ["bob"])
            // The sender: everything as before.
            #expect(try PeerMessages.history(app, "alice", "bob").count == 4)
            #expect(try PeerMessages.conversation(app, "alice", "bob")?["last_message"]?["body"]?["text"] == .string("spam 2"))
            #expect(try Self.count(server, app, "suppressed = 'moderation' AND NOT deleted") == 3)
            // A shadow hide tells nobody.
            #expect(try JobsTests.allEvents(app, "message.deleted").isEmpty)
            // New messages from the sender are delivered as usual.
            #expect(try PeerMessages.sendText(app, "alice", "bob", "later").status == 201)
            #expect(try PeerMessages.conversation(app, "bob", "alice")?["unread_count"] == .int(1))

            // Hiding again changes nothing.
            let again = try Self.run(app, JobsTests.removeAll("alice", mode: "hide"))
            #expect(again["result"]?["matched"] == .int(4) && again["result"]?["changed"] == .int(1))
        }
    }

    // MARK: - Scope and time bounds

    @Test func scopeAndTimeBounds() throws {
        try withApp { server, app in
            for id in ["alice", "bob", "carol"] { try app.createUser(id) }
            try JobsTests.importTexts(app, from: "alice", to: "bob", count: 3, start: Self.base + 1000, tag: "b1")
            try JobsTests.importTexts(app, from: "alice", to: "bob", count: 1, start: Self.base + 2000, tag: "b2")
            try JobsTests.importTexts(app, from: "alice", to: "bob", count: 1, start: Self.base + 3000, tag: "b3")
            try JobsTests.importTexts(app, from: "alice", to: "carol", count: 1, start: Self.base + 2000, tag: "c")
            let group = try Self.createGroup(app, "alice", members: ["bob"])
            let sent = try app.request(
                .post, "/v1/messages",
                json: "{\"from\":\"alice\",\"conversation_type\":\"group\",\"to\":\"\(group)\",\"type\":1,\"body\":{\"text\":\"g\"}}")
            #expect(sent.status == 201)

            func matched(_ from: Int64, _ to: Int64, _ scope: String = "") throws -> Int64? {
                try Self.run(app, Self.range("alice", Self.base + from, Self.base + to, scope: scope))["result"]?["matched"]?.intValue
            }
            let bob = ",\"conversation_type\":\"peer\",\"conversation_id\":\"bob\""
            #expect(try matched(2000, 3000) == 2)  // from inclusive, to exclusive
            #expect(try matched(2000, 3000, bob) == 1)
            #expect(try matched(1000, 3001, bob) == 5)
            #expect(try matched(1001, 3000, bob) == 3)
            #expect(try matched(2001, 2999) == 0)
            // The group's creation tips (type 32, from its creator) are the group's notices, not the user's messages.
            #expect(try matched(0, 9_000_000_000_000 - Self.base, ",\"conversation_type\":\"group\",\"conversation_id\":\"\(group)\"") == 1)
            #expect(try matched(0, 9_000_000_000_000 - Self.base, ",\"conversation_type\":\"peer\",\"conversation_id\":\"carol\"") == 1)

            // A real removal touches exactly what it matched.
            let done = try Self.run(app, Self.range("alice", Self.base + 2000, Self.base + 3000, dryRun: false, scope: bob))
            #expect(done["result"]?["changed"] == .int(1))
            #expect(try Self.count(server, app, "deleted") == 1)
            #expect(try Self.count(server, app, "deleted AND timestamp = \(Self.base + 2000) AND recipient = 'bob'") == 1)
        }
    }

    // MARK: - Senders keep sending

    /// 10,000 messages removed while the other side keeps sending into the same conversation: every send succeeds
    /// and none waits long (bench/bulk-removal.sh measures it properly, on a release build).
    @Test func removingTenThousandWhileTheConversationSends() throws {
        try withApp(unthrottled: true) { server, app in
            for id in ["alice", "bob"] { try app.createUser(id) }
            try JobsTests.importTexts(app, from: "alice", to: "bob", count: 10_000, start: Self.base)

            func send() throws -> (Int, Double) {
                let start = ContinuousClock.now
                let status = try PeerMessages.sendText(app, "bob", "alice", "still here").status
                let took = ContinuousClock.now - start
                return (status, Double(took.components.seconds) + Double(took.components.attoseconds) / 1e18)
            }
            func p(_ values: [Double], _ q: Double) -> Double {
                let sorted = values.sorted()
                return sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * q))]
            }
            var quiet: [Double] = []
            for _ in 0..<200 { quiet.append(try send().1) }

            let job = try JobsTests.removal(app, JobsTests.removeAll("alice"))
            let jobID = try #require(job["job_id"]?.stringValue)
            let started = ContinuousClock.now
            var during: [Double] = []
            var statuses: [Int] = []
            var state = "queued"
            while state != "succeeded" && during.count < 20_000 {
                let (status, took) = try send()
                statuses.append(status)
                during.append(took)
                if during.count % 20 == 0 { state = try JobsTests.job(app, jobID)?["state"]?.stringValue ?? "" }
                if state == "failed" || state == "cancelled" { break }
            }
            let finished = try JobsTests.awaitState(app, jobID, "succeeded")
            let took = ContinuousClock.now - started
            #expect(finished["result"]?["changed"] == .int(10_000))
            #expect(statuses.allSatisfy { $0 == 201 })
            print(
                "BulkRemovalTests: 10,000 removed in \(took); \(during.count) sends meanwhile, p50 \(p(during, 0.5) * 1000) ms, "
                    + "p99 \(p(during, 0.99) * 1000) ms; alone p50 \(p(quiet, 0.5) * 1000) ms, p99 \(p(quiet, 0.99) * 1000) ms")
            #expect(p(during, 0.99) < 1.0, "p99 of the sends during the removal: \(p(during, 0.99)) s")
            #expect(try Self.count(server, app, "sender = 'bob' AND NOT deleted") == Int64(200 + during.count))
        }
    }
}
