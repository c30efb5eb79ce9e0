import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres
import ParleySync

/// Sends scheduled messages when they are due (docs/scheduled-messages.md#sending), through the send routes' own
/// handlers (``MessageRoutes``): the rules, hooks, blocklists and message writer of a send made at that moment.
///
/// The timer kind (``kind``, every sweep: four times a second, and on every test-clock advance) claims due rows in
/// batches of ``batchSize`` (`FOR UPDATE SKIP LOCKED`, so nodes share them), hands each batch's sends to the node's
/// message writer, claims the next batch while the writer commits that one, and records each outcome when its answer
/// is in. A node that stops between a send and its record leaves the row `sending`; when the lease runs out another
/// sweep sends it again with the same `client_msg_id`, which the send path answers as a duplicate of the message
/// already written, so the message exists once.
///
/// Owner: the node's message writer and blocklists (fixed), and `lateness` (this node's record of how late its sends
/// were, for `/metrics`).
package final class ScheduledSending: Sendable {
    let writer: MessageWriter
    let blocklists: BlocklistCache
    private let lateness = LockedValue(Lateness())

    static let batchSize = 500
    /// How long a claimed row stays with its node (database clock) before another may send it again.
    static let leaseMillis: Int64 = 60_000
    /// Claims after which a send refused for a transient reason (429, 5xx) ends `failed`.
    static let maxAttempts: Int64 = 5
    /// The longest a sweep waits for one batch's answers; rows still unanswered stay `sending` until their lease ends.
    static let answerWaitMillis: Int64 = 55_000

    init(writer: MessageWriter, blocklists: BlocklistCache) {
        self.writer = writer
        self.blocklists = blocklists
    }

    // MARK: - The node's sender

    /// The timer kinds are fixed when the node's services are made, before its message writer exists: the kind finds
    /// the node's sender here, by its services (several nodes share a process in tests). An entry goes when its services
    /// have gone (the next binding drops it).
    private struct Binding: @unchecked Sendable {
        weak var services: Services?
        let sending: ScheduledSending
    }
    private static let bindings = LockedValue<[ObjectIdentifier: Binding]>([:])

    static func bind(_ sending: ScheduledSending, to services: Services) {
        bindings.withLock { bindings in
            bindings = bindings.filter { $0.value.services != nil }
            bindings[ObjectIdentifier(services)] = Binding(services: services, sending: sending)
        }
    }

    static func bound(to services: Services) -> ScheduledSending? {
        bindings.withLock { bindings in
            guard let binding = bindings[ObjectIdentifier(services)], binding.services === services else { return nil }
            return binding.sending
        }
    }

    /// The timer kind (App/TimerKinds.swift): every sweep, so a message goes out within a quarter of a second of due.
    package static let kind = TimerKind(name: "scheduled_messages", everyMillis: 0) { services, now in
        guard let sending = bound(to: services) else { return 0 }
        return try sending.fire(services: services, now: now)
    }

    // MARK: - Sending

    /// Sends everything due at `now`; returns how many rows it claimed.
    func fire(services: Services, now: Int64) throws -> Int {
        var fired = 0
        var previous: InFlight?
        // A stopping node claims nothing more: its writer refuses new sends.
        while !services.stopping.isSet {
            let claimed = try services.pool.withConnection { db in
                try ScheduledMessageStore.claim(now: now, limit: Self.batchSize, leaseMillis: Self.leaseMillis, on: db)
            }
            if claimed.isEmpty { break }
            fired += claimed.count
            let flight = try start(claimed, services: services)
            // The previous batch was committing meanwhile.
            if let previous { try record(previous, services: services) }
            previous = flight
            if claimed.count < Self.batchSize { break }
        }
        if let previous { try record(previous, services: services) }
        return fired
    }

    /// The answers of one batch of sends as they come in.
    private final class InFlight: Sendable {
        let rows: [ScheduledMessageStore.Claimed]
        /// Each row's answer and the server time it came (nil until it did).
        let answers: LockedValue<(answers: [(Response, Int64)?], left: Int)>
        let done = Wakeup()

        init(_ rows: [ScheduledMessageStore.Claimed]) {
            self.rows = rows
            answers = LockedValue((answers: Array(repeating: nil, count: rows.count), left: rows.count))
        }

        func answered(_ index: Int, _ response: Response, at time: Int64) {
            let last = answers.withLock { a -> Bool in
                a.answers[index] = (response, time)
                a.left -= 1
                return a.left == 0
            }
            if last { done.signal() }
        }

        /// Waits until every row is answered or `millis` passed; returns the answers so far.
        func wait(millis: Int64) -> [(Response, Int64)?] {
            let deadline = EventLoop.monotonicMillis() + millis
            while true {
                let (answers, left) = self.answers.withLock { ($0.answers, $0.left) }
                let remaining = deadline - EventLoop.monotonicMillis()
                if left == 0 || remaining <= 0 { return answers }
                done.wait(timeoutMillis: Int(min(remaining, 1000)))
            }
        }
    }

    /// Runs the send handler of each claimed row on one connection; their answers come in as the writer commits them.
    private func start(_ rows: [ScheduledMessageStore.Claimed], services: Services) throws -> InFlight {
        let flight = InFlight(rows)
        try services.pool.withConnection { db in
            for (index, row) in rows.enumerated() {
                let path = row.batch ? "/v1/messages/batch" : "/v1/messages"
                let body = Array(row.request.utf8)
                var headers = HTTPHeaders()
                headers.add("Content-Type", "application/json")
                let request = Request(
                    head: HTTPRequestHead(method: .post, target: path, headers: headers, keepAlive: false, contentLength: body.count),
                    body: body, routeTemplate: path, requestID: "scheduled-" + row.scheduledID, receivedAtMillis: EventLoop.monotonicMillis())
                let response: Response
                do {
                    guard let app = try services.apps.app(row.appID, db: db) else {
                        throw APIError(.notFound, "app \(row.appID) does not exist")
                    }
                    let credential: Credential = row.asUser ? .user(appID: row.appID, userID: row.userID) : .adminAsApp(appID: row.appID)
                    let ctx = APIContext.deferred(
                        request: request, credential: credential, app: app, now: services.clock.now(), services: services, db: db)
                    response =
                        row.batch
                        ? try MessageRoutes.batchSend(ctx, writer: writer, blocklists: blocklists)
                        : try MessageRoutes.send(ctx, writer: writer, blocklists: blocklists)
                } catch let error as PostgresError where error.isConnectionFailure {
                    throw error
                } catch {
                    response = ProblemRendering.handlerError(error, request: request, logger: services.logger)
                }
                response.settle { flight.answered(index, $0, at: services.clock.now()) }
            }
        }
        return flight
    }

    /// Waits for a batch's answers and records them: sent (`{message_id, seq}`, or a batch's `results`), failed (the
    /// problem), or back to `scheduled` after a transient refusal (429, 5xx) until ``maxAttempts``.
    private func record(_ flight: InFlight, services: Services) throws {
        let answers = flight.wait(millis: Self.answerWaitMillis)
        var outcomes: [ScheduledMessageStore.Outcome] = []
        var late: [Int64] = []
        for (row, answer) in zip(flight.rows, answers) {
            guard let (response, answeredAt) = answer else { continue }
            let json = response.bodyBytes.flatMap { try? JSONValue.parse($0) }
            var data = JSONObject()
            let state: String
            if response.status == 200 || response.status == 201 {
                state = "sent"
                if row.batch {
                    data["results"] = json?["results"] ?? .array([])
                } else {
                    data["message_id"] = json?["message_id"] ?? .null
                    data["seq"] = json?["seq"] ?? .null
                }
                late.append((json?["timestamp"]?.intValue ?? answeredAt) - row.sendAt)
            } else {
                // Every refusal of the send path is a problem body; anything else is recorded as an internal error.
                var problem =
                    json?.objectValue
                    ?? [
                        "type": .string("urn:parley:error:\(ErrorCode.internalError.code)"), "title": .string(ErrorCode.internalError.name),
                        "status": .int(Int64(response.status)), "detail": .string("the send answered \(response.status)"),
                        "code": .int(Int64(ErrorCode.internalError.code)),
                    ]
                problem["request_id"] = nil
                let transient = response.status == 429 || response.status >= 500
                state = transient && row.attempts < Self.maxAttempts ? "scheduled" : "failed"
                data["problem"] = .object(problem)
            }
            outcomes.append(ScheduledMessageStore.Outcome(appID: row.appID, scheduledID: row.scheduledID, state: state, data: data))
        }
        let now = services.clock.now()
        try services.pool.withConnection { db in try ScheduledMessageStore.finish(outcomes, now: now, on: db) }
        lateness.withLock { $0.record(late) }
    }

    // MARK: - Metrics

    /// How late this node's scheduled sends were: the message's `timestamp` (a batch: its answer) minus `send_at`.
    private struct Lateness {
        static let bounds: [Double] = [0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60]
        var buckets = [Int](repeating: 0, count: bounds.count)
        var count = 0
        var sum = 0.0

        mutating func record(_ millis: [Int64]) {
            for ms in millis {
                let seconds = Double(max(0, ms)) / 1000
                if let bucket = Self.bounds.firstIndex(where: { seconds <= $0 }) { buckets[bucket] += 1 }
                count += 1
                sum += seconds
            }
        }
    }

    /// The scheduled messages' part of `/metrics`: the backlog of every app (read from the database; every node reports
    /// the same) and this node's lateness.
    func metrics(services: Services) -> String {
        var text = ""
        if let backlog = try? services.pool.withConnection({ db in try ScheduledMessageStore.backlog(now: services.clock.now(), on: db) }) {
            text += Metrics.metric(
                "parley_scheduled_messages_backlog", "gauge", "Scheduled messages of every app not sent yet.", backlog.pending)
            text += Metrics.metric(
                "parley_scheduled_messages_due", "gauge", "Scheduled messages of every app whose send_at has passed, not sent yet.",
                backlog.due)
        }
        let l = lateness.withLock { $0 }
        text += Metrics.histogram(
            "parley_scheduled_message_lateness_seconds", "How long after send_at this node sent scheduled messages.",
            bounds: Lateness.bounds, buckets: Metrics.cumulative(l.buckets), count: l.count, sum: l.sum)
        return text
    }

    /// ``metrics(services:)`` of the node whose services these are (empty before its routes are built).
    package static func metrics(services: Services) -> String {
        bound(to: services)?.metrics(services: services) ?? ""
    }
}
