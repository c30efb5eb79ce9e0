import Glibc
import ParleyHTTP
import ParleyPostgres
import ParleySync
import ParleyTesting
import Synchronization
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// The write path end to end (README.md#how-writes-are-ordered: per-conversation seqs are taken once per batch of
/// sends): the node's ``MessageWriter`` group-commits sends with ``MessageWrite`` and the ``EventSequencer`` numbers
/// their events after commit. Real HTTP against a real server and database, plus the batch statement called directly
/// where only that makes a mixed batch deterministic.
@Suite("Write path", .inProcess)
struct WritePathTests: GroupTestSupport {
    // MARK: - Helpers

    static func q(_ s: String) -> String { JSONValue.string(s).description }

    /// `POST /v1/messages` with the app key: a text in a peer or group conversation, with an optional `client_msg_id`.
    @discardableResult
    static func send(_ app: TestApp, _ from: String, _ to: String, _ text: String, group: Bool = false, key: String? = nil) throws
        -> TestResponse
    {
        let json =
            "{\"from\":\(q(from)),\"conversation_type\":\"\(group ? "group" : "peer")\",\"to\":\(q(to)),\"type\":1,"
            + "\"body\":{\"text\":\(q(text))}" + (key.map { ",\"client_msg_id\":\(q($0))" } ?? "") + "}"
        return try app.request(.post, "/v1/messages", json: json)
    }

    /// Runs `body(i)` for every `i` in `0..<count`, each on its own thread, all at once, and returns when all are
    /// done. (`DispatchQueue.concurrentPerform` runs only as many at a time as there are CPUs.)
    static func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
        let threads = (0..<count).map { i in BackgroundThread(name: "wp-\(i)") { body(i) } }
        for thread in threads { thread.join() }
    }

    /// One answered send of a concurrent run.
    struct Answer: Sendable {
        var worker: Int
        var index: Int
        var status: Int
        var seq: Int64?
        var messageID: String?
        var text: String
    }

    /// `workers` threads each send `each` texts one after another; `route(worker, i)` says who sends where.
    static func sendConcurrently(
        _ app: TestApp, workers: Int, each: Int, group: Bool = false,
        route: @escaping @Sendable (Int, Int) -> (from: String, to: String)
    ) -> [Answer] {
        let answers = LockedValue<[Answer]>([])
        onThreads(workers) { worker in
            var mine: [Answer] = []
            for i in 0..<each {
                let (from, to) = route(worker, i)
                do {
                    let r = try send(app, from, to, "w\(worker)-\(i)", group: group)
                    let json = r.json
                    mine.append(
                        Answer(
                            worker: worker, index: i, status: r.status, seq: json?["seq"]?.intValue,
                            messageID: json?["message_id"]?.stringValue, text: r.text))
                } catch {
                    mine.append(Answer(worker: worker, index: i, status: 0, text: "\(error)"))
                }
            }
            answers.withLock { $0 += mine }
        }
        return answers.withLock { $0 }
    }

    /// The first column of `sql`'s rows (white box: what is stored).
    static func column(_ server: TestServer, _ sql: String, _ parameters: [(any PostgresEncodable)?] = []) throws -> [String?] {
        try server.app.services.pool.withConnection { db in
            try db.query(sql: sql, parameters).rows.map { $0[0].isNull ? nil : try $0[0].string }
        }
    }

    /// Every event of the app's log after `after` matching `query`, page by page (a page holds ≤ 100).
    static func log(_ app: TestApp, after: String = "earliest", query: String = "") throws -> [JSONValue] {
        var all: [JSONValue] = []
        var position = after
        for _ in 0..<1_000 {
            let page = try app.events(after: position, query: query)
            guard let last = page.last?["id"]?.stringValue else { return all }
            all += page
            position = last
        }
        throw TestFailure("the event log did not end after 1000 pages")
    }

    static func ids(_ events: [JSONValue]) -> [Int64] { events.compactMap { Int64($0["id"]?.stringValue ?? "") } }

    static func isStrictlyIncreasing(_ values: [Int64]) -> Bool { zip(values, values.dropFirst()).allSatisfy { $0 < $1 } }

    /// Checks one conversation after a concurrent run: every send answered 201; stored seqs exactly 1…`total` (no
    /// gap, no duplicate) with timestamps that never decrease; every answer is the stored message with its seq; each
    /// worker's seqs increase (it sent one after another); and the conversation's `message.sent` events, in log
    /// order, carry seqs 1…`total` in order.
    static func expectGapFree(
        _ server: TestServer, _ app: TestApp, convType: String, convID: String, total: Int, answers: [Answer],
        isThisConversation: (JSONValue) -> Bool
    ) throws {
        let failed = answers.filter { $0.status != 201 }
        #expect(failed.isEmpty, "\(failed.count) sends not answered 201, e.g. \(failed.prefix(3).map { "\($0.status) \($0.text)" })")

        let stored = try server.app.services.pool.withConnection { db in
            try db.query(
                sql:
                    "SELECT seq, message_id, timestamp FROM messages WHERE app_id = $1 AND conv_type = $2 AND conv_id = $3 ORDER BY seq",
                [app.appID, convType, convID]
            ).rows.map { (seq: try $0[0].int64, id: try $0[1].string, timestamp: try $0[2].int64) }
        }
        #expect(stored.count == total)
        #expect(stored.map(\.seq) == (1...Int64(total)).map { $0 }, "stored seqs are exactly 1…\(total)")
        #expect(Set(stored.map(\.id)).count == stored.count)
        let stamps = stored.map(\.timestamp)
        #expect(stamps == stamps.sorted(), "timestamps never decrease with seq")

        let storedSeq = Dictionary(stored.map { ($0.id, $0.seq) }, uniquingKeysWith: { a, _ in a })
        let answered = answers.filter { $0.status == 201 }
        #expect(answered.allSatisfy { answer in answer.messageID.flatMap { storedSeq[$0] } == answer.seq }, "each answer is the stored message")
        #expect(Set(answered.compactMap(\.seq)).count == answered.count, "no two answers share a seq")
        for worker in Set(answers.map(\.worker)) {
            let seqs = answered.filter { $0.worker == worker }.sorted { $0.index < $1.index }.compactMap(\.seq)
            #expect(isStrictlyIncreasing(seqs), "worker \(worker)'s sends got increasing seqs")
        }

        let sent = try log(app, query: "types=message.sent").filter(isThisConversation)
        let eventSeqs = sent.compactMap { $0["data"]?["message"]?["seq"]?.intValue }
        #expect(eventSeqs == (1...Int64(total)).map { $0 }, "message.sent events are in seq order, one per message")
        #expect(sent.compactMap { $0["data"]?["message"]?["message_id"]?.stringValue } == stored.map(\.id))
    }

    // MARK: - 1. Concurrent senders, one conversation

    /// 32 concurrent senders × 100 messages, all u1 → u2: seqs exactly 1…3200, every send 201, events in seq order.
    /// A send of an app key runs on the event loop that read it; one that needs the database first (a `reply_to` to
    /// look up, a user token, an `Idempotency-Key`) runs again on a worker. Either way it takes one token of the app's
    /// rate limit: the event loop's token is given back when the request moves on.
    @Test func sendsMovedToAWorkerTakeOneRateLimitToken() throws {
        try withApp(settings: #"{"rate_limit_app_rps": 2}"#) { server, app in
            try app.createUser("a")
            try app.createUser("b")
            let reply = #"{"from":"a","conversation_type":"peer","to":"b","type":1,"body":{"text":"re"},"reply_to":"m-nowhere"}"#
            let plain = #"{"from":"a","conversation_type":"peer","to":"b","type":1,"body":{"text":"hi"}}"#
            for body in [reply, plain] {
                // A full bucket holds twice the rate: 4 tokens, refilled 2 a second.
                // Deliberate: the rate limiter refills by real time.
                Wakeup.sleep(millis: 2_500)
                var statuses: [Int] = []
                var remaining: [String] = []
                for _ in 0..<5 {
                    let r = try app.request(.post, "/v1/messages", json: body)
                    statuses.append(r.status)
                    remaining.append(r.headers["RateLimit-Remaining"] ?? "-")
                }
                let expected = body == reply ? 404 : 201
                #expect(statuses == [expected, expected, expected, expected, 429], "\(body): \(statuses)")
                #expect(remaining.prefix(4) == ["3", "2", "1", "0"], "\(body): \(remaining)")
            }
        }
    }

    @Test func thirtyTwoSendersIntoOnePeerPairGetSeqsOneTo3200() throws {
        try withApp(unthrottled: true) { server, app in
            try app.createUser("u1")
            try app.createUser("u2")
            let answers = Self.sendConcurrently(app, workers: 32, each: 100) { _, _ in ("u1", "u2") }
            #expect(answers.count == 3_200)
            try Self.expectGapFree(
                server, app, convType: "peer", convID: MessageStore.peerThread("u1", "u2"), total: 3_200, answers: answers,
                isThisConversation: { _ in true })
            // The history API agrees, walked in pages.
            #expect(PeerMessages.seqs(try PeerMessages.walk(app, "u2", "u1", query: "?direction=forward&limit=100")) == Array(1...3_200))
        }
    }

    /// The same in both directions of the pair (u1 ↔ u2): one sequence for the pair.
    @Test func thirtyTwoSendersInBothDirectionsOfOnePairShareOneSequence() throws {
        try withApp(unthrottled: true) { server, app in
            try app.createUser("u1")
            try app.createUser("u2")
            let answers = Self.sendConcurrently(app, workers: 32, each: 100) { worker, i in
                (worker + i) % 2 == 0 ? ("u1", "u2") : ("u2", "u1")
            }
            #expect(answers.count == 3_200)
            try Self.expectGapFree(
                server, app, convType: "peer", convID: MessageStore.peerThread("u1", "u2"), total: 3_200, answers: answers,
                isThisConversation: { _ in true })
            #expect(PeerMessages.seqs(try PeerMessages.walk(app, "u1", "u2", query: "?direction=forward&limit=100")) == Array(1...3_200))
        }
    }

    /// 32 members × 100 messages into one group: the group's seqs are 1…N with no gap (N counts the tips message of
    /// its creation), every send 201, and its `message.sent` events are in seq order.
    @Test func thirtyTwoMembersIntoOneGroupGetOneGapFreeSequence() throws {
        try withApp(unthrottled: true) { server, app in
            let members = (0..<32).map { "s\($0)" }
            for user in members { try app.createUser(user) }
            let g = try Self.createGroup(app, members[0], members: Array(members.dropFirst()))
            let before = try GroupHistory.history(app, g, limit: 100).count
            let answers = Self.sendConcurrently(app, workers: 32, each: 100, group: true) { worker, _ in (members[worker], g) }
            #expect(answers.count == 3_200)
            try Self.expectGapFree(
                server, app, convType: "group", convID: g, total: before + 3_200, answers: answers,
                isThisConversation: { $0["data"]?["message"]?["to"]?.stringValue == g })
            let history = try GroupHistory.history(app, g, limit: 100)
            #expect(history.compactMap { $0["seq"]?.intValue } == (1...Int64(before + 3_200)).map { $0 })
        }
    }

    // MARK: - 2. Per-item outcomes inside one batch

    /// A text send built the way ``MessageService/item(for:settings:on:)`` builds it (the request-level validation
    /// and the app's settings are already applied).
    static func textItem(
        appID: String, settings: AppSettings, now: Int64, from: String, to: String, text: String, group: Bool = false,
        key: String? = nil
    ) -> MessageWrite.Item {
        let conversationType: ConversationType = group ? .group : .peer
        let body = MessageBody(type: .text, json: ["text": .string(text)])
        let message = Message(
            messageID: IdentifierKind.generateSortableID(prefix: "m", timestampMs: now), clientMsgID: key, type: body.type.rawValue,
            conversationType: conversationType, from: from, to: to, seq: 0, timestamp: now, body: body.json.serialized(),
            extendedData: "", mentionIDs: [], mentionAll: false, reply: nil, rootMessageID: nil, replyCount: 0, priority: 2,
            needReceipt: false, noUnread: false, onlineOnly: false, repeatCount: 1, push: nil, suppressed: nil, deleted: false)
        return MessageWrite.Item(
            appID: appID, now: now, message: message, threadID: MessageStore.thread(conversationType, from, to),
            contentHash: key == nil
                ? "" : SendRequest.contentHash(conversationType: conversationType, to: to, body: body, extendedData: ""),
            checks: .all, blacklistError: settings.string("blacklist_feedback") == "error",
            friendOnly: settings.bool("friend_only_c2c"))
    }

    /// One batch (one transaction, one `MessageWrite.write`, as the writer runs it) mixing good items with items that
    /// fail their checks, across two apps: each item gets its own outcome, the good ones consecutive seqs in item
    /// order, and nothing is written for the failed ones.
    @Test func aBatchWithFailingItemsCommitsTheOthersWithPerItemOutcomes() throws {
        try withApp(settings: #"{"blacklist_feedback":"error"}"#, unthrottled: true) { server, strict in
            let silent = try server.createApp()
            for user in ["a", "b", "x", "r", "m", "o", "p", "n"] { try strict.createUser(user) }
            for user in ["x", "r"] { try silent.createUser(user) }
            #expect(try strict.request(.post, "/v1/users/r/blacklist", json: #"{"user_ids":["x"]}"#).status == 200)
            #expect(try silent.request(.post, "/v1/users/r/blacklist", json: #"{"user_ids":["x"]}"#).status == 200)
            #expect(try strict.request(.post, "/v1/users/m/mute", json: #"{"duration_s":-1}"#).status == 200)
            let g = try Self.createGroup(strict, "o", members: ["p"])
            // Two keyed messages the batch's repeats refer to: seqs 1 and 2 of a–b.
            let keyedA = try Self.send(strict, "a", "b", "orig-A", key: "dupA")
            let keyedB = try Self.send(strict, "a", "b", "orig-B", key: "dupB")
            #expect(keyedA.status == 201 && keyedB.status == 201)
            let groupBefore = try GroupHistory.history(strict, g, limit: 100).count
            let head = try LiveStreams.head(strict)

            let services = server.app.services
            let now = services.clock.now()
            let (strictSettings, silentSettings) = try services.pool.withConnection { db in
                (
                    try #require(try AppStore.fetchRecord(appID: strict.appID, on: db)).settings,
                    try #require(try AppStore.fetchRecord(appID: silent.appID, on: db)).settings
                )
            }
            func item(_ from: String, _ to: String, _ text: String, group: Bool = false, key: String? = nil) -> MessageWrite.Item {
                Self.textItem(appID: strict.appID, settings: strictSettings, now: now, from: from, to: to, text: text, group: group, key: key)
            }
            let items = [
                item("a", "b", "good-0", key: "fresh"),
                item("x", "r", "blocked"),
                item("b", "a", "good-1"),
                item("m", "b", "muted"),
                item("o", g, "group-0", group: true),
                item("n", g, "not-a-member", group: true),
                item("a", "b", "changed", key: "dupA"),
                item("a", "b", "orig-B", key: "dupB"),
                item("a", "b", "good-2"),
                Self.textItem(appID: silent.appID, settings: silentSettings, now: now, from: "x", to: "r", text: "silently-blocked"),
                item("p", g, "group-1", group: true),
            ]
            let written = try services.pool.transaction { db in
                let written = try MessageWrite.write(items, on: db)
                try MessageWrite.appendEvents(items, written, on: db)
                return written
            }
            services.sequencer.publishAndWait(strict.appID)
            services.sequencer.publishAndWait(silent.appID)

            let outcomes: [MessageWrite.Outcome] = [
                .sent, .blocked, .sent, .muted, .sent, .notMember, .conflict, .duplicate, .sent, .sent, .sent,
            ]
            #expect(written.map(\.outcome) == outcomes)
            #expect([0, 2, 8].map { written[$0].message.seq } == [3, 4, 5], "a–b continues after 1 and 2, in item order")
            #expect([4, 10].map { written[$0].message.seq } == [Int64(groupBefore) + 1, Int64(groupBefore) + 2])
            #expect(written[9].message.seq == 1)
            #expect(written[9].message.suppressed == "blacklist", "silent feedback: sent, suppressed")
            #expect(written.enumerated().filter { $0.offset != 9 }.allSatisfy { $0.element.message.suppressed == nil })
            #expect(written[7].original?.messageID == keyedB.json?["message_id"]?.stringValue)
            #expect(written[7].original?.seq == 2)
            #expect(written.enumerated().filter { $0.offset != 7 }.allSatisfy { $0.element.original == nil })

            // Nothing was written for the failed items (nor for the duplicate): no message, no key, no event, no seq.
            let failedIDs = [1, 3, 5, 6, 7].map { items[$0].message.messageID }
            #expect(try Self.column(server, "SELECT message_id FROM messages WHERE message_id = ANY($1)", [failedIDs]).isEmpty)
            #expect(try Self.column(server, "SELECT message_id FROM message_keys WHERE message_id = ANY($1)", [failedIDs]).isEmpty)
            #expect(
                try Self.column(
                    server, "SELECT sender FROM messages WHERE app_id = $1 AND sender IN ('x', 'm', 'n')", [strict.appID]
                ).isEmpty)
            // The conflicting item left the key it collided with as it was.
            let origA = Self.textItem(appID: strict.appID, settings: strictSettings, now: now, from: "a", to: "b", text: "orig-A", key: "dupA")
            #expect(origA.contentHash != items[6].contentHash)
            #expect(
                try Self.column(
                    server, "SELECT message_id || ' ' || content_hash FROM message_keys WHERE app_id = $1 AND client_msg_id = 'dupA'",
                    [strict.appID]) == ["\(keyedA.json?["message_id"]?.stringValue ?? "?") \(origA.contentHash)"])
            #expect(
                try Self.column(
                    server, "SELECT last_seq::text FROM conversation_seqs WHERE app_id = $1 AND conv_type = 'peer' ORDER BY conv_id",
                    [strict.appID]) == ["5"], "only a–b has a head, and no seq went to a failed item")
            #expect(
                try Self.column(server, "SELECT user_id FROM conversations WHERE app_id = $1 AND conv_id = 'x'", [strict.appID]).isEmpty,
                "no conversation entry for the blocked sender's pair")
            #expect(try Self.column(server, "SELECT app_id FROM pending_events WHERE app_id = ANY($1)", [[strict.appID, silent.appID]]).isEmpty)

            // The events are the sent items', in item order.
            let sentIDs = [0, 2, 4, 8, 10].map { items[$0].message.messageID }
            let logged = try Self.log(strict, after: String(head), query: "types=message.sent")
            #expect(logged.compactMap { $0["data"]?["message"]?["message_id"]?.stringValue } == sentIDs)
            let silentLog = try Self.log(silent, query: "types=message.sent")
            #expect(silentLog.compactMap { $0["data"]?["message"]?["suppressed"]?.stringValue } == ["blacklist"])
            #expect(try silent.request(.get, "/v1/messages/\(items[9].message.messageID)").json?["suppressed"] == "blacklist")
            // The stored good items read back through HTTP with the seqs the batch answered.
            for index in [0, 2, 8] {
                let r = try strict.request(.get, "/v1/messages/\(items[index].message.messageID)")
                #expect(r.json?["seq"]?.intValue == written[index].message.seq)
            }
        }
    }

    /// `POST /v1/messages/batch` where one recipient has blocked the sender (feedback `error`): the others are sent,
    /// that one fails with 20007 and nothing is stored for it.
    @Test func aBatchSendWithOneBlockingRecipientSendsTheOthers() throws {
        try withApp(settings: #"{"blacklist_feedback":"error"}"#, unthrottled: true) { server, app in
            for user in ["a", "b", "c", "d", "e"] { try app.createUser(user) }
            #expect(try app.request(.post, "/v1/users/d/blacklist", json: #"{"user_ids":["a"]}"#).status == 200)
            let r = try app.request(
                .post, "/v1/messages/batch", json: #"{"from":"a","to_user_ids":["b","c","d","e"],"type":1,"body":{"text":"hi all"}}"#)
            #expect(r.status == 200, "\(r.text)")
            #expect(Self.codes(r) == [nil, nil, ErrorCode.blockedByRecipient.code, nil])
            let results = Self.results(r)
            #expect(results.map { $0["id"]?.stringValue } == ["b", "c", "d", "e"])
            #expect([0, 1, 3].map { results[$0]["data"]?["seq"]?.intValue } == [1, 1, 1])
            #expect(try Self.column(server, "SELECT recipient FROM messages WHERE app_id = $1 ORDER BY recipient", [app.appID]) == ["b", "c", "e"])
            let sent = try Self.log(app, query: "types=message.sent")
            #expect(sent.compactMap { $0["data"]?["message"]?["to"]?.stringValue }.sorted() == ["b", "c", "e"])
        }
    }

    // MARK: - 3. Retried client_msg_id

    /// ~20 concurrent identical sends with one `client_msg_id` land in one or consecutive batches (a repeat inside a
    /// batch waits for the next): exactly one 201, the rest 200 `Parley-Duplicate: true` with the same message, one
    /// stored message and one event; a later retry is a duplicate too.
    @Test func concurrentRetriesOfOneClientMsgIDGiveOneMessage() throws {
        try withApp(unthrottled: true) { server, app in
            try app.createUser("a")
            try app.createUser("b")
            let answers = LockedValue<[TestResponse?]>([])
            Self.onThreads(20) { _ in
                let r = try? Self.send(app, "a", "b", "same", key: "retry-key")
                answers.withLock { $0.append(r) }
            }
            let all = answers.withLock { $0 }.compactMap { $0 }
            #expect(all.count == 20)
            let created = all.filter { $0.status == 201 }
            let duplicates = all.filter { $0.status == 200 }
            #expect(created.count == 1, "\(all.map(\.status))")
            #expect(duplicates.count == 19)
            #expect(created.allSatisfy { $0.headers["Parley-Duplicate"] == nil })
            #expect(duplicates.allSatisfy { $0.headers["Parley-Duplicate"] == "true" })
            let id = try #require(created.first?.json?["message_id"]?.stringValue)
            #expect(all.allSatisfy { $0.json?["message_id"]?.stringValue == id })
            #expect(all.allSatisfy { $0.json?["seq"] == 1 })
            #expect(try Self.column(server, "SELECT message_id FROM messages WHERE app_id = $1", [app.appID]) == [id])
            #expect(try Self.column(server, "SELECT message_id FROM message_keys WHERE app_id = $1", [app.appID]) == [id])
            #expect(try Self.log(app, query: "types=message.sent").count == 1)

            let later = try Self.send(app, "a", "b", "same", key: "retry-key")
            #expect(later.status == 200)
            #expect(later.headers["Parley-Duplicate"] == "true")
            #expect(later.json?["message_id"]?.stringValue == id)
            #expect(try Self.log(app, query: "types=message.sent").count == 1)
            #expect(try Self.send(app, "a", "b", "next").json?["seq"] == 2, "no seq was spent on the duplicates")
        }
    }

    // MARK: - 4. SSE readers across concurrent writers

    /// The ids one SSE session delivers, read until `stop` says so (checked between blocks; heartbeats keep it
    /// checking) or until `limit` ids; throws past `deadline`.
    static func read(
        _ stream: HTTPClientStream, into ids: inout [Int64], limit: Int = .max, deadline: ContinuousClock.Instant,
        stop: ([Int64]) throws -> Bool
    ) throws {
        while ids.count < limit, !(try stop(ids)) {
            guard ContinuousClock.now < deadline else { throw TestFailure("the stream did not reach the log head in time") }
            guard let block = try stream.nextEvent(timeout: .seconds(10)) else { throw TestFailure("the server ended the stream") }
            if let id = block.id { ids.append(Int64(id) ?? -1) }
        }
    }

    /// Four concurrent writers of one app (two peer senders, group joins/sends/leaves, user creations with friend
    /// adds): an app stream read throughout, and one that disconnects mid-way and resumes with `Last-Event-ID`, each
    /// see ids strictly increasing, and what each received is exactly the log's ids, no gap, no duplicate.
    @Test func sseReadersSeeIncreasingIdsAndMissNothingOnResume() throws {
        try withApp(configure: { $0.sseHeartbeatMillis = 200 }, unthrottled: true) { server, app in
            for user in ["a", "b", "c", "d", "o"] + (0..<14).map({ "j\($0)" }) { try app.createUser(user) }
            let g = try Self.createGroup(app, "o")
            let start = try LiveStreams.head(app)
            let deadline = ContinuousClock.now + .seconds(120)

            // The continuous reader, on its own thread; it stops at the final head once the writers are done.
            let finalHead = LockedValue<Int64?>(nil)
            let continuous = LockedValue<(ids: [Int64], error: String?)>(([], nil))
            let openedContinuous = try LiveStreams.open(server, "/v1/events", bearer: app.key, lastEventID: String(start))
            #expect(openedContinuous.headers["Parley-Last-Event-ID"] == String(start))
            let stream = UncheckedBox(openedContinuous)
            let reader = BackgroundThread(name: "wp-reader") {
                var ids: [Int64] = []
                do {
                    try Self.read(stream.value, into: &ids, deadline: deadline) { ids in
                        guard let head = finalHead.withLock({ $0 }) else { return false }
                        return (ids.last ?? start) >= head
                    }
                } catch {
                    continuous.withLock { $0.error = "\(error)" }
                }
                stream.value.close()
                continuous.withLock { $0.ids = ids }
            }

            // The writers: 40 requests each.
            let statuses = LockedValue<[String]>([])
            let finished = Atomic<Int>(0)
            let writers = (0..<4).map { writer in
                BackgroundThread(name: "wp-writer-\(writer)") {
                    var failures: [String] = []
                    func expect(_ r: TestResponse?, _ what: String) {
                        if let r, (200..<300).contains(r.status) { return }
                        failures.append("\(what): \(r?.status ?? 0) \(r?.text ?? "")")
                    }
                    for i in 0..<40 {
                        switch writer {
                        case 0: expect(try? Self.send(app, i % 2 == 0 ? "a" : "b", i % 2 == 0 ? "b" : "a", "ab-\(i)"), "a–b send")
                        case 1: expect(try? Self.send(app, "c", "d", "cd-\(i)"), "c→d send")
                        case 2:
                            let user = "j\(i / 3)"
                            switch i % 3 {
                            case 0: expect(try? app.request(.post, "/v1/groups/\(g)/join", json: "{\"user_id\":\"\(user)\"}"), "join")
                            case 1: expect(try? Self.send(app, user, g, "g-\(i)", group: true), "group send")
                            default: expect(try? app.request(.post, "/v1/groups/\(g)/leave", json: "{\"user_id\":\"\(user)\"}"), "leave")
                            }
                        default:
                            if i % 2 == 0 {
                                expect(try? app.request(.post, "/v1/users", json: "{\"user_id\":\"n\(i / 2)\",\"name\":\"\"}"), "create user")
                            } else {
                                expect(try? app.request(.post, "/v1/users/n\(i / 2)/friends", json: #"{"friend_id":"a"}"#), "friend add")
                            }
                        }
                    }
                    statuses.withLock { $0 += failures }
                    finished.add(1, ordering: .acquiringAndReleasing)
                }
            }

            // The resuming reader: 40 ids, disconnect, resume from the last one while the writers go on.
            var received: [Int64] = []
            let first = try LiveStreams.open(server, "/v1/events", bearer: app.key, lastEventID: String(start))
            try Self.read(first, into: &received, limit: 40, deadline: deadline) { _ in false }
            first.close()
            let resumeFrom = try #require(received.last)
            let firstSession = received.count
            let resumed = try LiveStreams.open(server, "/v1/events", bearer: app.key, lastEventID: String(resumeFrom))
            defer { resumed.close() }
            #expect(resumed.headers["Parley-Last-Event-ID"] == String(resumeFrom))
            try Self.read(resumed, into: &received, deadline: deadline) { received in
                if finalHead.withLock({ $0 }) == nil, finished.load(ordering: .acquiring) == writers.count {
                    // Every write was answered, so its events are in the log: this is the final head.
                    let head = try LiveStreams.head(app)
                    finalHead.withLock { $0 = head }
                }
                guard let head = finalHead.withLock({ $0 }) else { return false }
                return (received.last ?? start) >= head
            }
            for writer in writers { writer.join() }
            reader.join()

            #expect(statuses.withLock { $0 }.isEmpty, "\(statuses.withLock { $0 }.prefix(5))")
            let head = try #require(finalHead.withLock { $0 })
            let logged = Self.ids(try Self.log(app, after: String(start)))
            #expect(logged == Array((start + 1)...head), "the log's ids are contiguous")
            #expect(resumeFrom < head, "the reader disconnected mid-way (\(firstSession) of \(logged.count) events)")
            #expect(Self.isStrictlyIncreasing(received), "the resuming reader's ids never go backwards")
            #expect(received == logged, "the resuming reader got every event exactly once")
            let (ids, error) = continuous.withLock { $0 }
            #expect(error == nil, "\(error ?? "")")
            #expect(Self.isStrictlyIncreasing(ids), "the continuous reader's ids never go backwards")
            #expect(ids == logged, "the continuous reader got every event exactly once")
        }
    }

    // MARK: - 5. A batch whose connection dies

    /// The pid of the server's writer backend while it waits on a lock, if it does.
    static func writerWaitingOnALock(_ observer: PostgresConnection) throws -> Int32? {
        let rows = try observer.query(
            sql:
                """
                SELECT pid FROM pg_stat_activity
                WHERE datname = current_database() AND application_name LIKE 'parley-writer%' AND wait_event_type = 'Lock'
                """)
        return try rows.first.map { Int32(try $0[0].int) }
    }

    /// The writer's connection is terminated while its batch waits on the pair's seq head (locked by the test): none
    /// of the sends is acknowledged (503 7000010 with Retry-After), nothing of them is stored, and retrying them (same
    /// `client_msg_id`) sends each exactly once with gap-free seqs; a second retry answers duplicates.
    @Test func aBatchWhoseConnectionIsTerminatedAcknowledgesNothingAndRetriesSendOnce() throws {
        try withApp(unthrottled: true) { server, app in
            try app.createUser("a")
            try app.createUser("b")
            #expect(try Self.send(app, "a", "b", "first").status == 201, "creates the pair's seq head")
            let observer = try PostgresConnection(server.database)
            let locker = try PostgresConnection(server.database)
            try locker.simpleQuery("BEGIN")
            let locked = try locker.query(
                sql:
                    "SELECT last_seq FROM conversation_seqs WHERE app_id = $1 AND conv_type = 'peer' AND conv_id = $2 FOR UPDATE",
                [app.appID, MessageStore.peerThread("a", "b")])
            #expect(try locked.first?[0].int64 == 1)

            let keys = (0..<8).map { "cut-\($0)" }
            @Sendable func sendAll() -> [TestResponse?] {
                let answers = LockedValue<[TestResponse?]>(Array(repeating: nil, count: keys.count))
                Self.onThreads(keys.count) { i in
                    let r = try? Self.send(app, i % 2 == 0 ? "a" : "b", i % 2 == 0 ? "b" : "a", "text-\(i)", key: keys[i])
                    answers.withLock { $0[i] = r }
                }
                return answers.withLock { $0 }
            }
            let answered = Atomic<Int>(0)
            let firstAnswers = LockedValue<[TestResponse?]>([])
            let senders = BackgroundThread(name: "wp-cut") {
                let answers = sendAll()
                firstAnswers.withLock { $0 = answers }
                answered.store(1, ordering: .releasing)
            }
            // Every batch that reaches the locked head is cut: terminate the writer's backend each time it waits there,
            // until every send is answered. The first time, the sends get a moment to queue behind the blocked batch, so
            // the next batch carries several of them (batching only; the checks hold however they group).
            var terminated: [Int32] = []
            try eventually(timeout: .seconds(25), every: .milliseconds(5)) {
                if answered.load(ordering: .acquiring) != 0 { return true }
                guard let pid = try Self.writerWaitingOnALock(observer), !terminated.contains(pid) else { return false }
                // Deliberate: the first time, a moment for the other sends to queue behind the blocked batch.
                if terminated.isEmpty { usleep(300_000) }
                #expect(try observer.query(sql: "SELECT pg_terminate_backend($1)", [pid]).first?[0].bool == true)
                terminated.append(pid)
                return false
            }
            try locker.simpleQuery("ROLLBACK")
            senders.join()
            #expect(!terminated.isEmpty, "the writer was seen waiting on the lock")

            let cut = firstAnswers.withLock { $0 }
            #expect(cut.count == keys.count)
            for (i, r) in cut.enumerated() {
                guard let r else {
                    Issue.record("send \(i) got no answer")
                    continue
                }
                Self.expectProblem(r, 503, .unavailable, "send \(i)")
                #expect(r.headers["Retry-After"] != nil, "send \(i) says when to retry")
            }
            // Nothing of them was written.
            #expect(try Self.column(server, "SELECT message_id FROM messages WHERE app_id = $1", [app.appID]).count == 1)
            #expect(try Self.column(server, "SELECT client_msg_id FROM message_keys WHERE app_id = $1", [app.appID]).isEmpty)
            #expect(try Self.column(server, "SELECT type FROM pending_events WHERE app_id = $1", [app.appID]).isEmpty)
            #expect(try Self.log(app, query: "types=message.sent").count == 1)
            #expect(
                try Self.column(server, "SELECT last_seq::text FROM conversation_seqs WHERE app_id = $1", [app.appID]) == ["1"],
                "no seq was spent")

            // The retries send each message exactly once, gap-free after the first one.
            let retried = sendAll()
            #expect(retried.map { $0?.status } == Array(repeating: 201, count: keys.count), "\(retried.map { $0?.text ?? "" })")
            #expect(retried.compactMap { $0?.json?["seq"]?.intValue }.sorted() == Array(2...Int64(keys.count + 1)))
            let seqs = try Self.column(server, "SELECT seq::text FROM messages WHERE app_id = $1 ORDER BY seq", [app.appID])
            #expect(seqs == (1...(keys.count + 1)).map { String($0) })
            #expect(try Self.column(server, "SELECT client_msg_id FROM message_keys WHERE app_id = $1", [app.appID]).count == keys.count)
            #expect(try Self.log(app, query: "types=message.sent").count == keys.count + 1)

            // A second retry answers duplicates of the same messages.
            let again = sendAll()
            #expect(again.map { $0?.status } == Array(repeating: 200, count: keys.count))
            #expect(again.allSatisfy { $0?.headers["Parley-Duplicate"] == "true" })
            #expect(again.map { $0?.json?["message_id"] } == retried.map { $0?.json?["message_id"] })
        }
    }

    /// pending_events has no foreign key to apps (Migrations/0021): deleting an app clears its pending events, and the
    /// sequencer's sweep drops those a writer committed while its app was being deleted.
    @Test func pendingEventsOfADeletedAppAreDropped() throws {
        try withApp(unthrottled: true) { server, app in
            try app.createUser("u1")
            try server.app.services.pool.withConnection { db in
                _ = try db.query(
                    sql: """
                        INSERT INTO pending_events (app_id, type, created_at, data, order_key)
                        VALUES ('app_deleted_meanwhile', 'user.created', 0, '{}', 'u1')
                        """)
            }
            #expect(try server.request(.delete, "/v1/apps/\(app.appID)", bearer: server.adminKey).status == 204)
            let ids: [String] = ["app_deleted_meanwhile", app.appID]
            let pending = "SELECT app_id FROM pending_events WHERE app_id = ANY($1)"
            #expect(try eventually { try Self.column(server, pending, [ids]).isEmpty })
        }
    }
}

/// Hands a non-Sendable value to one other thread that alone uses it from then on.
private final class UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
