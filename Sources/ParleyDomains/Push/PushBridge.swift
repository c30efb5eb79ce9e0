import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres
import ParleySync

/// The push bridge of a node (API.md §16): plans the event log into attempts (``PushPlanner``), leases pending attempts
/// with `FOR UPDATE SKIP LOCKED` (any number of nodes, never two tries of one attempt at once), sends them on its
/// sender threads through the webhooks' outbound transport, and records each outcome with the retry schedule,
/// rejected-key pruning (`device.removed`) and `failed`.
///
/// One bridge thread per node owns a dedicated connection and runs short transactions (record, plan one app's next
/// page, claim); it never holds a transaction across a gateway request, and never runs on an HTTP event loop.
///
/// Owner: `loop` (outcomes, pokes, drains; any thread); the in-flight count lives in the bridge thread.
package final class PushBridge: Sendable {
    /// How long a claim holds an attempt (real time): past any try's limit, so only a dead node's claim expires.
    static let leaseSeconds = 60
    /// Without a poke, new events (other nodes' writes) and due retries are looked for this often.
    static let pollMillis = 500
    /// Attempts in flight per node.
    static let maxInFlight = 64
    /// While tries are in flight the log is planned at most this often, so one planning transaction takes the events
    /// of several sends instead of one each.
    static let planEveryMillis: Int64 = 10

    /// A leased attempt with what its try needs.
    struct Claimed: Sendable {
        let attemptID: String
        let appID: String
        let kind: String
        let url: String
        let format: PushSettings.Format
        let body: [UInt8]
        /// The try this is (1, 2, …) and the most the app allows.
        let attempt: Int
        let maxAttempts: Int
        let timeoutMillis: Int
        let secret: String?
        let pushKeys: [String]
    }

    struct Outcome: Sendable {
        let claimed: Claimed
        let result: PushResult
    }

    /// The bridge thread's loop plumbing; the sender threads post their outcomes to it.
    private let loop = WorkerLoop<Outcome>()
    /// Batches this node's writer committed, not looked at yet (any thread; taken by the bridge thread).
    private let inbox = LockedValue<[CommittedEvents]>([])
    private let senders = OutboundCalls(maxThreads: PushBridge.maxInFlight)
    let transport: WebhookTransport
    let clock: ServerClock
    private let logger: Logger
    package let metrics = PushMetrics()
    /// Told of each app that got `device.removed` events to sequence.
    private let eventsWritten: @Sendable (_ appID: String) -> Void

    package init(
        transport: WebhookTransport, clock: ServerClock, logger: Logger, eventsWritten: @escaping @Sendable (_ appID: String) -> Void
    ) {
        self.transport = transport
        self.clock = clock
        self.logger = logger
        self.eventsWritten = eventsWritten
    }

    // MARK: - Any thread

    /// Events were stored or the clock moved: there may be something to plan or a retry due.
    package func poke() { loop.poke() }

    /// This node's message writer committed `events` (on its thread): counted as skipped when their app has push
    /// off, else planned.
    package func committed(_ events: CommittedEvents) {
        inbox.withLock { $0.append(events) }
        loop.poke()
    }

    /// Blocks until every event is planned and nothing due is pending, in flight or unrecorded (tests; never on an
    /// event loop or a pool worker). Returns false when that did not happen within `timeout`.
    @discardableResult
    package func drain(timeout: Duration = .seconds(30)) -> Bool { loop.drain(timeout: timeout) }

    /// The bridge thread runs (readiness).
    package func isRunning(within window: Duration) -> Bool { loop.isRunning(within: window) }

    /// Pending attempts of every app (`/metrics`).
    package static func queueDepth(on db: PostgresConnection) throws -> Int64 {
        try db.query("SELECT count(*) FROM push_attempts WHERE status = 'pending'").decodeFirst(Int64.self) ?? 0
    }

    /// `push_sent_24h` and `push_failed_24h` of `GET /v1/stats`: attempts created since `since`.
    package static func counts(appID: String, since: Int64, on db: PostgresConnection) throws -> (sent: Int64, failed: Int64) {
        try PushStore.counts(appID: appID, since: since, on: db)
    }

    // MARK: - Lifecycle

    package func start(database: PostgresConfiguration, pgLogger: PostgresLogger) {
        // The bridge's commits do not wait for the disk: a plan, lease or outcome lost in a crash is planned, leased or
        // tried again (a push may then arrive twice), while waiting for the disk at every round halves what it sends.
        var unsynced = database
        unsynced.addServerSetting("synchronous_commit", "off")
        let configuration = unsynced
        loop.start(name: "parley-push") { [self] in
            run(DedicatedConnection(configuration, applicationName: "parley-push", logger: pgLogger))
        }
    }

    /// Stops planning and claiming; tries in flight finish on their threads and their leases expire (another node
    /// or the next start tries them again).
    package func stop() { loop.stop() }

    // MARK: - The bridge thread

    private func run(_ connection: DedicatedConnection) {
        var db = connection
        var outage = OutageLog(logger: logger, what: "push bridge")
        var inFlight = 0
        var unrecorded: [Outcome] = []
        var busy = true
        var lastPlan: Int64 = 0
        // The last planning left work (more events, or pending attempts to lease).
        var planning = true
        while true {
            // Outcomes come back one by one: while several are in flight, gather them a moment, so that one round
            // records several and claims their successors together.
            let waitMillis = busy || !unrecorded.isEmpty ? 0 : planning ? Int(Self.planEveryMillis) : Self.pollMillis
            guard let round = loop.next(waitMillis: waitMillis, gatherMillis: inFlight > 1 ? 1 : 0) else { return }
            inFlight -= round.messages.count
            unrecorded += round.messages
            busy = false
            let committed = inbox.withLock { inbox -> [CommittedEvents] in
                defer { inbox = [] }
                return inbox
            }
            do {
                let connection = try db.get()
                if !committed.isEmpty { try countSkipped(committed, on: connection) }
                let started = EventLoop.monotonicMillis()
                if inFlight == 0 || started - lastPlan >= Self.planEveryMillis {
                    lastPlan = started
                    planning = try plan(on: connection)
                    busy = planning
                }
                // One transaction records the finished tries and leases their successors.
                let recorded = unrecorded
                let free = Self.maxInFlight - inFlight
                let (apps, claimed) = try connection.transaction { db in
                    (recorded.isEmpty ? [] : try Self.record(recorded, now: clock.now(), on: db), free > 0 ? try claim(limit: free, on: db) : [])
                }
                if !recorded.isEmpty {
                    metrics.recorded(recorded.map { ($0.claimed.kind, $0.result.status) })
                    unrecorded = []
                }
                for appID in apps { eventsWritten(appID) }
                for item in claimed {
                    inFlight += 1
                    senders.run { [self] in loop.post(Outcome(claimed: item, result: send(item))) }
                }
                busy = (busy || !claimed.isEmpty) && inFlight < Self.maxInFlight
                outage.succeeded()
            } catch {
                outage.failed(error)
                db.dropIfBroken()
                Wakeup.sleep(millis: 200)
            }
            if !busy && inFlight == 0 && unrecorded.isEmpty { loop.idle() }
        }
    }

    /// Counts the pushable messages of `batches` whose app has push off or no gateway (`parley_push_skipped_total`):
    /// nothing is planned for them.
    private func countSkipped(_ batches: [CommittedEvents], on db: PostgresConnection) throws {
        var configured: [String: Bool] = [:]
        var skipped = 0
        for batch in batches {
            if configured[batch.appID] == nil { configured[batch.appID] = try PushStore.settings(appID: batch.appID, on: db).configured }
            guard configured[batch.appID] == false else { continue }
            skipped += batch.events.count { $0.event.type == "message.sent" && PushSources.messageItem(sentEvent: $0.event.data) != nil }
        }
        metrics.skipped(skipped)
    }

    /// Plans one round for each app with push configured and unplanned events; true when anything was planned or
    /// remains. Apps without push configured are not read at all (their cursor moves when push is turned on).
    private func plan(on connection: PostgresConnection) throws -> Bool {
        let apps = try connection.query(
            """
            SELECT h.app_id FROM event_heads h JOIN apps a ON a.app_id = h.app_id LEFT JOIN push_cursors c ON c.app_id = h.app_id
            WHERE (h.head > coalesce(c.event_id, 0) OR c.user_after IS NOT NULL) AND \(sql: PushStore.configuredSQL("a.settings"))
            """
        ).decode(String.self)
        var busy = false
        for appID in apps {
            let planned: PushPlanner.Planned?
            do {
                planned = try connection.transaction { db in try PushPlanner.planNext(appID: appID, now: clock.now(), on: db) }
            } catch let error as PostgresError where error.isForeignKeyViolation {
                // The app was deleted while its first round was planned: nothing is left to plan for it.
                continue
            }
            guard let planned else { continue }
            metrics.planned(planned.statuses)
            busy = busy || planned.more || planned.pending > 0
        }
        return busy
    }

    /// Leases up to `limit` due pending attempts.
    private func claim(limit: Int, on db: PostgresConnection) throws -> [Claimed] {
        let now = clock.now()
        let rows = try db.query(
            """
            WITH due AS (
                SELECT attempt_id FROM push_attempts
                WHERE status = 'pending' AND next_attempt_at <= \(now) AND (leased_until IS NULL OR leased_until < clock_timestamp())
                ORDER BY next_attempt_at, attempt_id LIMIT \(limit)
                FOR UPDATE SKIP LOCKED
            )
            UPDATE push_attempts p SET leased_until = clock_timestamp() + make_interval(secs => \(Self.leaseSeconds))
            FROM due, apps a
            WHERE p.attempt_id = due.attempt_id AND a.app_id = p.app_id
            RETURNING p.attempt_id, p.app_id, p.url, p.format, p.body, p.tries, p.push_keys, (a.settings->'push')::text, p.kind
            """)
        return try rows.rows.map { row in
            let settings = PushSettings(push: (try? JSONValue.parse(try row[7].string))?.objectValue ?? JSONObject())
            return Claimed(
                attemptID: try row[0].string, appID: try row[1].string, kind: try row[8].string, url: try row[2].string,
                format: PushSettings.Format(rawValue: try row[3].string) ?? .matrix, body: try row[4].textBytes, attempt: try row[5].int + 1,
                maxAttempts: settings.maxAttempts, timeoutMillis: settings.timeoutMillis, secret: settings.secret,
                pushKeys: try row[6].stringArray)
        }
    }

    /// One try, on a sender thread (or a request's thread for `POST /v1/push/test`).
    func send(_ item: Claimed) -> PushResult {
        let now = clock.now()
        var headers = HTTPHeaders()
        headers.add("Content-Type", "application/json")
        headers.add("User-Agent", "Parley-Push/1")
        if item.format == .generic {
            let timestamp = now / 1000
            headers.add("webhook-id", item.attemptID)
            headers.add("webhook-timestamp", String(timestamp))
            headers.add(
                "webhook-signature",
                WebhookRequest.signature(id: item.attemptID, timestampSeconds: timestamp, body: item.body, secrets: item.secret.map { [$0] } ?? []))
        }
        let attempt = transport.post(body: item.body, to: item.url, headers: headers, timeoutMillis: item.timeoutMillis)
        metrics.tried(attempt)
        return PushResult(attempt: attempt, tryNumber: item.attempt, maxAttempts: item.maxAttempts, pushKeys: item.pushKeys, at: now)
    }

    /// Records finished tries in the caller's transaction: each attempt's status, then the rejected keys' devices
    /// deleted (`device.removed`, reason `rejected`) and the others' `last_push_at`. An attempt stopped meanwhile (a
    /// revoke) keeps its status. Returns the apps that got events.
    static func record(_ outcomes: [Outcome], now: Int64, on db: PostgresConnection) throws -> [String] {
        let results = outcomes.map(\.result)
        let changed = try db.query(
            """
            UPDATE push_attempts p
            SET status = u.status, reason = u.reason, gateway_status = u.code,
                rejected_push_keys = ARRAY(SELECT json_array_elements_text(u.rejected::json)), tries = p.tries + 1,
                next_attempt_at = u.next_at, leased_until = NULL, updated_at = u.at
            FROM unnest(\(outcomes.map(\.claimed.attemptID))::text[], \(results.map(\.status))::text[], \(results.map(\.reason))::text[],
                        \(results.map(\.statusCode))::int[], \(results.map(\.rejectedJSON))::text[], \(results.map(\.nextAttemptAt))::bigint[],
                        \(results.map(\.at))::bigint[])
                 AS u(attempt_id, status, reason, code, rejected, next_at, at)
            WHERE p.attempt_id = u.attempt_id AND p.status = 'pending'
            RETURNING p.app_id, p.user_id, p.device_ids, p.push_keys, p.rejected_push_keys, p.status
            """)
        var pushed: (apps: [String], users: [String], devices: [String]) = ([], [], [])
        var rejected: (apps: [String], users: [String], devices: [String]) = ([], [], [])
        for row in changed.rows {
            let status = try row[5].string
            guard status == "sent" || status == "rejected" else { continue }
            let (appID, userID) = (try row[0].string, try row[1].string)
            let refused = Set(try row[4].stringArray)
            for (device, key) in zip(try row[2].stringArray, try row[3].stringArray) {
                if refused.contains(key) {
                    rejected.apps.append(appID)
                    rejected.users.append(userID)
                    rejected.devices.append(device)
                } else {
                    pushed.apps.append(appID)
                    pushed.users.append(userID)
                    pushed.devices.append(device)
                }
            }
        }
        if !pushed.apps.isEmpty {
            try db.query(
                """
                UPDATE devices d SET last_push_at = \(now)
                FROM unnest(\(pushed.apps)::text[], \(pushed.users)::text[], \(pushed.devices)::text[]) AS u(app_id, user_id, device_id)
                WHERE d.app_id = u.app_id AND d.user_id = u.user_id AND d.device_id = u.device_id
                """)
        }
        guard !rejected.apps.isEmpty else { return [] }
        let removed = try db.query(
            """
            DELETE FROM devices d
            USING unnest(\(rejected.apps)::text[], \(rejected.users)::text[], \(rejected.devices)::text[]) AS u(app_id, user_id, device_id)
            WHERE d.app_id = u.app_id AND d.user_id = u.user_id AND d.device_id = u.device_id
            RETURNING d.app_id, d.user_id, d.device_id
            """
        ).rows.map { (appID: try $0[0].string, userID: try $0[1].string, deviceID: try $0[2].string) }
        let byApp = Dictionary(grouping: removed, by: \.appID)
        for (appID, devices) in byApp {
            try EventLog.append(
                devices.map { Device.removedEvent(userID: $0.userID, deviceID: $0.deviceID, reason: "rejected") }, appID: appID, now: now, on: db)
        }
        return byApp.keys.sorted()
    }
}

/// What one try of an attempt came to (API.md §16.2): `sent` / `rejected` on a 2xx answer (with its `rejected` keys),
/// `pending` again after a network error, timeout or 5xx while tries remain (after 1 s, 2 s, 4 s …), else `failed`.
struct PushResult: Sendable {
    let attempt: WebhookAttempt
    let status: String
    let reason: String?
    let rejectedKeys: [String]
    let nextAttemptAt: Int64?
    let at: Int64

    var statusCode: Int? { attempt.statusCode }
    var rejectedJSON: String { String(decoding: JSONValue.array(rejectedKeys.map(JSONValue.string)).serialized(), as: UTF8.self) }

    init(attempt: WebhookAttempt, tryNumber: Int, maxAttempts: Int, pushKeys: [String], at: Int64) {
        self.attempt = attempt
        self.at = at
        if attempt.succeeded {
            // A body that is not JSON or has no `rejected` array counts as `{"rejected": []}`.
            let named = (try? JSONValue.parse(attempt.responseBody))?["rejected"]?.arrayValue?.compactMap(\.stringValue) ?? []
            let candidates = Set(pushKeys)
            rejectedKeys = Array(Set(named).intersection(candidates)).sorted()
            status = !candidates.isEmpty && rejectedKeys.count == candidates.count ? "rejected" : "sent"
            reason = nil
            nextAttemptAt = nil
            return
        }
        rejectedKeys = []
        let retryable = attempt.statusCode.map { $0 >= 500 } ?? true
        if retryable && tryNumber < maxAttempts {
            status = "pending"
            reason = attempt.error
            nextAttemptAt = at + 1000 << Int64(min(tryNumber - 1, 20))
        } else {
            status = "failed"
            reason = attempt.error ?? "HTTP \(attempt.statusCode ?? 0)"
            nextAttemptAt = nil
        }
    }
}

/// The push part of `/metrics`: attempts by kind and outcome and the gateway's latency (API.md §16, §17); the queue's
/// depth is read from the database when scraped.
///
/// Owner: `state` behind its lock; recorded by the bridge thread and the sender threads.
package final class PushMetrics: Sendable {
    private struct State {
        var attempts: [String: Int] = [:]
        var buckets = [Int](repeating: 0, count: Metrics.buckets.count)
        var count = 0
        var sum = 0.0
        /// Pushable items of apps without push configured.
        var skipped = 0
    }

    private let state = LockedValue(State())

    /// `count` pushable items were not planned because their app has push off or no gateway.
    func skipped(_ count: Int) {
        guard count > 0 else { return }
        state.withLock { $0.skipped += count }
    }

    /// Attempts written by the planner, by `kind|status` (pending ones are counted again when they finish).
    func planned(_ statuses: [String: Int]) {
        state.withLock { s in for (key, n) in statuses where !key.hasSuffix("|pending") { s.attempts[key, default: 0] += n } }
    }

    /// Finished tries by the status they left their attempt in.
    func recorded(_ outcomes: [(kind: String, status: String)]) {
        state.withLock { s in
            for outcome in outcomes where outcome.status != "pending" { s.attempts[outcome.kind + "|" + outcome.status, default: 0] += 1 }
        }
    }

    func tried(_ attempt: WebhookAttempt) {
        let seconds = Double(attempt.durationMillis) / 1000
        state.withLock { s in
            s.count += 1
            s.sum += seconds
            for (i, bound) in Metrics.buckets.enumerated() where seconds <= bound { s.buckets[i] += 1 }
        }
    }

    package func render(queueDepth: Int64) -> String {
        let s = state.withLock { $0 }
        var out = Metrics.family("parley_push_attempts_total", "counter", "Push attempts by kind and the final status they reached.")
        for kind in PushItem.Kind.allCases.map(\.rawValue) {
            for status in ["sent", "rejected", "failed", "suppressed"] {
                out += "parley_push_attempts_total{kind=\"\(kind)\",status=\"\(status)\"} \(s.attempts[kind + "|" + status, default: 0])\n"
            }
        }
        out += Metrics.histogram(
            "parley_push_gateway_duration_seconds", "Push gateway request latency.", buckets: s.buckets, count: s.count, sum: s.sum)
        out += Metrics.metric("parley_push_queue_depth", "gauge", "Pending push attempts.", Int(queueDepth))
        out += Metrics.metric(
            "parley_push_skipped_total", "counter", "Pushable messages this node stored for apps without push configured (not planned).",
            s.skipped)
        return out
    }
}
