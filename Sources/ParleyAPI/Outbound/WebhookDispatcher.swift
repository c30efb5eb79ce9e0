import Dispatch
import ParleyCore
import ParleyHTTP
import ParleyPostgres
import ParleySync

/// Delivers the outbox (API.md §15.2): leases due deliveries with `FOR UPDATE SKIP LOCKED` (any number of nodes,
/// never two attempts of one delivery at once), sends them on its sender threads, and records each outcome with the
/// retry schedule, the `dead` rule, the ordering rule and auto-disable.
///
/// One dispatcher thread per node owns a dedicated connection: it records finished attempts and claims new ones
/// in short transactions, and never holds a transaction across an attempt. Attempts run on `senders` (bounded: in
/// all by `maxInFlight`, per endpoint by `maxInFlightPerEndpoint`), never on an HTTP event loop or a pool worker.
///
/// Owner: `loop` (outcomes, pokes, drains; any thread); the in-flight counts live in the dispatcher thread.
package final class WebhookDispatcher: Sendable {
    /// After failed attempt n (1…10) the next is scheduled this far out, times a random factor in [0.8, 1.2] (§15.2).
    package static let retrySchedule: [Int64] = [5, 30, 120, 600, 1800, 3600, 7200, 14_400, 28_800, 28_800].map { $0 * 1000 }
    /// The 11th failure makes a delivery `dead`.
    package static let maxAttempts = 11
    /// An after-event attempt's time limit (§15.2).
    static let attemptTimeoutMillis = 10_000
    /// How long a claim holds a delivery (real time): past the attempt's limit, so only a dead node's claim expires.
    static let leaseSeconds = 60
    /// A round (record and claim) slower than this means the planner's statistics lag the table.
    static let slowRoundMillis: Int64 = 20
    /// Without a poke, due deliveries (retries, other nodes' events) are looked for this often.
    static let pollMillis = 1000

    /// A leased delivery, with what its attempt needs.
    struct Claimed: Sendable {
        let id: Int64
        let appID: String
        let webhookID: String
        let request: WebhookRequest
        let url: String
        let secrets: [String]
        let singleAttempt: Bool
        var endpoint: String { appID + "\u{0}" + webhookID }
    }

    /// A finished attempt, waiting to be recorded.
    struct Outcome: Sendable {
        let claimed: Claimed
        let attempt: WebhookAttempt
        let at: Int64
    }

    /// What the sender threads and the hook callers report to the dispatcher thread.
    enum Report: Sendable {
        case outcome(Outcome)
        /// A finished hook call or ping, to add to the log.
        case logged(DeliveryLogEntry)
    }

    /// The dispatcher thread's loop plumbing.
    private let loop = WorkerLoop<Report>()
    private let senders: OutboundCalls
    private let transport: WebhookTransport
    private let clock: ServerClock
    private let logger: Logger
    package let metrics: WebhookMetrics
    private let maxInFlight: Int
    private let maxInFlightPerEndpoint: Int
    /// Told of each app that got a `webhook.disabled` event to sequence, and of each app whose cached record (its
    /// before-hook types) changed.
    private let eventsWritten: @Sendable (_ appID: String) -> Void
    private let appChanged: @Sendable (_ appID: String) -> Void

    package init(
        transport: WebhookTransport, clock: ServerClock, logger: Logger, metrics: WebhookMetrics, maxInFlight: Int = 64,
        maxInFlightPerEndpoint: Int = 16, eventsWritten: @escaping @Sendable (_ appID: String) -> Void,
        appChanged: @escaping @Sendable (_ appID: String) -> Void
    ) {
        self.transport = transport
        self.clock = clock
        self.logger = logger
        self.metrics = metrics
        self.maxInFlight = maxInFlight
        self.maxInFlightPerEndpoint = maxInFlightPerEndpoint
        self.eventsWritten = eventsWritten
        self.appChanged = appChanged
        senders = OutboundCalls(maxThreads: maxInFlight)
    }

    // MARK: - Any thread

    /// New deliveries may be due (events were stored, the clock moved, an endpoint was re-enabled).
    package func poke() { loop.poke() }

    /// Blocks until nothing is due, in flight or unrecorded (tests; never on an event loop or a pool worker).
    /// Returns false when that did not happen within `timeout`.
    @discardableResult
    package func drain(timeout: Duration = .seconds(30)) -> Bool { loop.drain(timeout: timeout) }

    /// The dispatcher thread runs (readiness).
    package func isRunning(within window: Duration) -> Bool { loop.isRunning(within: window) }

    /// Adds a finished hook call or ping to the delivery log, with others of the moment (on the dispatcher thread).
    package func log(_ entry: DeliveryLogEntry) {
        metrics.attempted(entry.attempt)
        loop.post(.logged(entry))
    }

    // MARK: - Lifecycle

    package func start(database: PostgresConfiguration, pgLogger: PostgresLogger) {
        loop.start(name: "parley-webhooks") { [self] in
            run(DedicatedConnection(database, applicationName: "parley-webhooks", logger: pgLogger))
        }
    }

    /// Stops claiming; attempts in flight finish on their threads and their leases expire (another node or the next
    /// start attempts them again: at-least-once).
    package func stop() { loop.stop() }

    // MARK: - The dispatcher thread

    private func run(_ connection: DedicatedConnection) {
        var db = connection
        var outage = OutageLog(logger: logger, what: "webhook delivery")
        var inFlight: [String: Int] = [:]
        var total = 0
        var unrecorded: [Outcome] = []
        var unlogged: [DeliveryLogEntry] = []
        var poked = true
        var lastAnalyze: Int64 = 0
        while true {
            // Outcomes come back one by one: while others are in flight, gather them a moment, so that one round
            // (one transaction) records several and claims their successors together.
            let waitMillis = !poked && unrecorded.isEmpty && unlogged.isEmpty ? Self.pollMillis : 0
            guard let round = loop.next(waitMillis: waitMillis, gatherMillis: !poked && total > 1 ? 1 : 0) else { return }
            for report in round.messages {
                switch report {
                case .outcome(let outcome):
                    total -= 1
                    inFlight[outcome.claimed.endpoint, default: 1] -= 1
                    if inFlight[outcome.claimed.endpoint] == 0 { inFlight[outcome.claimed.endpoint] = nil }
                    unrecorded.append(outcome)
                case .logged(let entry):
                    unlogged.append(entry)
                }
            }
            var claimedAny = false
            do {
                let connection = try db.get()
                let roundStarted = EventLoop.monotonicMillis()
                let free = maxInFlight - total
                let (recorded, logged) = (unrecorded, unlogged)
                // One transaction per round: the finished attempts and hook calls recorded, the next deliveries
                // leased. Its commit does not wait for the disk: delivery is at least once, so a record lost in a
                // crash is an attempt made again (receivers dedupe on `webhook-id`), and a lost lease frees its row.
                let (claimed, disabled) = try connection.transaction { db in
                    try db.query("SELECT set_config('synchronous_commit', 'off', true), set_config('enable_seqscan', 'off', true)")
                    if !logged.isEmpty { try DeliveryStore.insertFinished(logged, on: db) }
                    let disabled = recorded.isEmpty ? [] : try record(recorded, on: db)
                    return (free > 0 ? try claim(limit: free, inFlight: inFlight, on: db) : [], disabled)
                }
                metrics.recorded(logged.map { $0.succeeded ? "succeeded" : "dead" } + recorded.map { Self.status(after: $0) })
                (unrecorded, unlogged) = ([], [])
                for appID in disabled {
                    logger.warning("app=\(appID) msg=\"webhook endpoint disabled after consecutive failures\"")
                    appChanged(appID)
                    eventsWritten(appID)
                }
                // A backlog grows from nothing to tens of thousands of rows in seconds, faster than autovacuum's
                // statistics follow (it looks once a minute); planned for an empty table, the claim then scans every
                // open delivery (~100 ms a round instead of ~1 ms). A slow round refreshes them, at most every 10 s.
                let now = EventLoop.monotonicMillis()
                if now - roundStarted > Self.slowRoundMillis, now - lastAnalyze > 10_000 {
                    lastAnalyze = now
                    try connection.query("ANALYZE webhook_deliveries")
                }
                claimedAny = !claimed.isEmpty
                for item in claimed {
                    total += 1
                    inFlight[item.endpoint, default: 0] += 1
                    senders.run { [self] in attempt(item) }
                }
                outage.succeeded()
            } catch {
                outage.failed(error)
                db.dropIfBroken()
                Wakeup.sleep(millis: 200)
            }
            // More may be due while there is room; otherwise the next outcome, poke or poll wakes the loop. Stored
            // events poke it even in apps without endpoints: an empty claim is cheap, and at most one per 2 ms.
            poked = claimedAny && total < maxInFlight
            if !claimedAny { Wakeup.sleep(millis: 2) }
            if !claimedAny && total == 0 && unrecorded.isEmpty && unlogged.isEmpty { loop.idle() }
        }
    }

    /// One attempt, on a sender thread; its outcome goes back to the dispatcher thread.
    private func attempt(_ item: Claimed) {
        let now = clock.now()
        let result = transport.send(item.request, to: item.url, secrets: item.secrets, now: now, timeoutMillis: Self.attemptTimeoutMillis)
        metrics.attempted(result)
        loop.post(.outcome(Outcome(claimed: item, attempt: result, at: now)))
    }

    /// Leases up to `limit` due deliveries, each the earliest open one of its endpoint and ordering key (§15.2), and
    /// no more per endpoint than its free slots (`inFlight`: this node's attempts in flight per endpoint).
    ///
    /// The candidates are chosen without locks (a window function caps each endpoint), then locked with `SKIP LOCKED`
    /// and re-checked, so nodes claiming at once take different rows and a row is leased only when it will be sent.
    private func claim(limit: Int, inFlight: [String: Int], on db: PostgresConnection) throws -> [Claimed] {
        let now = clock.now()
        let busy = inFlight.map { (endpoint: Self.endpoint($0.key), count: $0.value) }
        // Endpoints with no free slot are left out of the scan, so it stops after the rows it can use.
        let full = busy.filter { $0.count >= maxInFlightPerEndpoint }.map(\.endpoint)
        let rows = try db.query(
            """
            WITH scanned AS (
                SELECT d.id, d.app_id, d.webhook_id, d.next_attempt_at FROM webhook_deliveries d
                WHERE d.status IN ('pending', 'failed') AND NOT d.paused AND d.next_attempt_at <= \(now)
                  AND (d.leased_until IS NULL OR d.leased_until < clock_timestamp())
                  AND NOT EXISTS (
                      SELECT 1 FROM webhook_deliveries p
                      WHERE p.app_id = d.app_id AND p.webhook_id = d.webhook_id AND p.order_key = d.order_key
                        AND p.event_id < d.event_id AND p.status IN ('pending', 'failed'))
                  AND (d.app_id, d.webhook_id) NOT IN (SELECT * FROM unnest(\(full.map(\.appID))::text[], \(full.map(\.webhookID))::text[]))
                ORDER BY d.next_attempt_at, d.id
                LIMIT \(limit * 2)
            ), ranked AS (
                SELECT s.id, s.next_attempt_at,
                       row_number() OVER (PARTITION BY s.app_id, s.webhook_id ORDER BY s.next_attempt_at, s.id) AS rank,
                       \(maxInFlightPerEndpoint) - coalesce(f.n, 0) AS room
                FROM scanned s
                LEFT JOIN unnest(\(busy.map(\.endpoint.appID))::text[], \(busy.map(\.endpoint.webhookID))::text[], \(busy.map(\.count))::int[])
                     AS f(app_id, webhook_id, n) ON f.app_id = s.app_id AND f.webhook_id = s.webhook_id
            ), due AS (
                SELECT d.id FROM webhook_deliveries d
                WHERE d.id IN (SELECT id FROM ranked WHERE rank <= room ORDER BY next_attempt_at, id LIMIT \(limit))
                  AND d.status IN ('pending', 'failed') AND NOT d.paused
                  AND (d.leased_until IS NULL OR d.leased_until < clock_timestamp())
                FOR UPDATE SKIP LOCKED
            )
            UPDATE webhook_deliveries d SET leased_until = clock_timestamp() + make_interval(secs => \(Self.leaseSeconds))
            FROM due, webhooks w
            WHERE d.id = due.id AND w.app_id = d.app_id AND w.webhook_id = d.webhook_id AND w.enabled
            RETURNING d.id, d.app_id, d.webhook_id, d.event_id, d.event_type, d.body, d.attempts, d.single_attempt, w.url, w.secret,
                      w.previous_secret, w.previous_secret_until
            """)
        return try rows.rows.map { row in
            var secrets = [try row[9].string]
            if !row[10].isNull, !row[11].isNull, try row[11].int64 > now { secrets.append(try row[10].string) }
            return Claimed(
                id: try row[0].int64, appID: try row[1].string, webhookID: try row[2].string,
                request: WebhookRequest(
                    id: String(try row[3].int64), eventType: try row[4].string, body: try row[5].textBytes, attempt: try row[6].int + 1),
                url: try row[8].string, secrets: secrets, singleAttempt: try row[7].bool)
        }
    }

    /// The status an attempt leaves its delivery in: succeeded; dead after the 11th failure or a retried dead one's
    /// failure; else failed (to be retried).
    private static func status(after outcome: Outcome) -> String {
        if outcome.attempt.succeeded { return "succeeded" }
        return outcome.claimed.singleAttempt || outcome.claimed.request.attempt >= maxAttempts ? "dead" : "failed"
    }

    /// Records finished attempts in the caller's transaction: each delivery's new status and next time, then each
    /// endpoint's consecutive failures in completion order, disabling an endpoint that reaches its limit (with
    /// `webhook.disabled`). Returns the apps where an endpoint was disabled.
    private func record(_ outcomes: [Outcome], on db: PostgresConnection) throws -> [String] {
        let statuses = outcomes.map(Self.status(after:))
        let nextAttempts = zip(outcomes, statuses).map { outcome, status -> Int64? in
            status == "failed" ? outcome.at + Self.retryDelay(afterFailedAttempt: outcome.claimed.request.attempt) : nil
        }
        var disabled: Set<String> = []
        try db.query(
            """
            UPDATE webhook_deliveries d
            SET status = u.status, attempts = d.attempts + 1, next_attempt_at = u.next_at, last_attempt_at = u.at,
                last_status_code = u.code, last_error = u.error, response_excerpt = u.excerpt, duration_ms = u.duration,
                attempt_log = d.attempt_log || jsonb_build_array(u.entry::jsonb), single_attempt = false, leased_until = NULL
            FROM unnest(\(outcomes.map(\.claimed.id))::bigint[], \(statuses)::text[], \(nextAttempts)::bigint[], \(outcomes.map(\.at))::bigint[],
                        \(outcomes.map(\.attempt.statusCode))::int[], \(outcomes.map(\.attempt.error))::text[],
                        \(outcomes.map(\.attempt.responseExcerpt))::text[], \(outcomes.map(\.attempt.durationMillis))::int[],
                        \(outcomes.map { DeliveryStore.attemptLogEntry($0.attempt, at: $0.at) })::text[])
                 AS u(id, status, next_at, at, code, error, excerpt, duration, entry)
            WHERE d.id = u.id
            """)
        // Per endpoint: reset on a success, add the failures after the last one.
        var counts: [String: (reset: Bool, failures: Int, appID: String, webhookID: String)] = [:]
        for outcome in outcomes {
            let key = outcome.claimed.endpoint
            var entry = counts[key] ?? (false, 0, outcome.claimed.appID, outcome.claimed.webhookID)
            if outcome.attempt.succeeded {
                entry.reset = true
                entry.failures = 0
            } else {
                entry.failures += 1
            }
            counts[key] = entry
        }
        for entry in counts.values {
            if entry.reset && entry.failures == 0 {
                try db.query(
                    """
                    UPDATE webhooks SET consecutive_failures = 0
                    WHERE app_id = \(entry.appID) AND webhook_id = \(entry.webhookID) AND consecutive_failures <> 0
                    """)
                continue
            }
            let now = clock.now()
            let disabledNow =
                try db.query(
                    """
                    UPDATE webhooks
                    SET consecutive_failures = CASE WHEN \(entry.reset) THEN 0 ELSE consecutive_failures END + \(entry.failures),
                        enabled = enabled AND CASE WHEN \(entry.reset) THEN 0 ELSE consecutive_failures END + \(entry.failures) < disable_after_failures,
                        disabled_reason = CASE WHEN enabled AND CASE WHEN \(entry.reset) THEN 0 ELSE consecutive_failures END + \(entry.failures) >= disable_after_failures
                                               THEN 'consecutive_failures' ELSE disabled_reason END,
                        updated_at = CASE WHEN enabled AND CASE WHEN \(entry.reset) THEN 0 ELSE consecutive_failures END + \(entry.failures) >= disable_after_failures
                                          THEN \(now) ELSE updated_at END
                    WHERE app_id = \(entry.appID) AND webhook_id = \(entry.webhookID)
                    RETURNING NOT enabled AND disabled_reason = 'consecutive_failures' AND updated_at = \(now)
                    """
                ).first.map { try $0[0].bool } ?? false
            guard disabledNow else { continue }
            try WebhookStore.setDeliveriesPaused(true, appID: entry.appID, webhookID: entry.webhookID, now: now, on: db)
            try db.query("DELETE FROM webhook_before_hooks WHERE app_id = \(entry.appID) AND webhook_id = \(entry.webhookID)")
            try EventLog.append(
                [WebhookEvents.disabled(webhookID: entry.webhookID, reason: "consecutive_failures")], appID: entry.appID, now: now, on: db)
            disabled.insert(entry.appID)
        }
        return disabled.sorted()
    }

    /// The app and webhook of an in-flight count's key (``Claimed/endpoint``).
    private static func endpoint(_ key: String) -> (appID: String, webhookID: String) {
        let parts = key.split(separator: "\u{0}", maxSplits: 1, omittingEmptySubsequences: false)
        return (String(parts[0]), parts.count > 1 ? String(parts[1]) : "")
    }

    /// The delay before the attempt after failed attempt `n` (1…10), with its jitter.
    package static func retryDelay(afterFailedAttempt n: Int) -> Int64 {
        let base = retrySchedule[min(max(n, 1), retrySchedule.count) - 1]
        return Int64(Double(base) * Double.random(in: 0.8...1.2))
    }
}

/// The `webhook.*` events of the catalogue (API.md §18).
package enum WebhookEvents {
    package static func disabled(webhookID: String, reason: String) -> NewEvent {
        var data = JSONObjectWriter()
        data["webhook_id"] = webhookID
        data["reason"] = reason
        return NewEvent(type: "webhook.disabled", data: data.finish(), orderKey: "app")
    }
}

/// The webhook part of `/metrics`: attempts by outcome and their latency (API.md §15.2, §17); the queue's depth and
/// oldest pending age are read from the database when scraped (``DeliveryStore``).
///
/// Owner: `state` behind its lock; recorded by the sender threads and the dispatcher thread.
package final class WebhookMetrics: Sendable {
    private struct State {
        var statuses: [String: Int] = [:]
        var buckets = [Int](repeating: 0, count: Metrics.buckets.count)
        var count = 0
        var sum = 0.0
    }

    private let state = LockedValue(State())

    package init() {}

    func attempted(_ attempt: WebhookAttempt) {
        let seconds = Double(attempt.durationMillis) / 1000
        state.withLock { s in
            s.count += 1
            s.sum += seconds
            for (i, bound) in Metrics.buckets.enumerated() where seconds <= bound { s.buckets[i] += 1 }
        }
    }

    /// Counts deliveries that reached a status with an attempt (after-event deliveries, hook calls and pings).
    package func recorded(_ statuses: [String]) {
        state.withLock { s in for status in statuses { s.statuses[status, default: 0] += 1 } }
    }

    package func render(queueDepth: Int, oldestPendingSeconds: Double) -> String {
        let s = state.withLock { $0 }
        var out = Metrics.family(
            "parley_webhook_deliveries_total", "counter", "Webhook delivery attempts recorded, by the status they left the delivery in.")
        for status in ["pending", "succeeded", "failed", "dead"] {
            out += "parley_webhook_deliveries_total{status=\"\(status)\"} \(s.statuses[status, default: 0])\n"
        }
        out += Metrics.histogram(
            "parley_webhook_attempt_duration_seconds", "Webhook and hook request latency.", buckets: s.buckets, count: s.count, sum: s.sum)
        out += Metrics.metric("parley_webhook_queue_depth", "gauge", "Open (pending or failed) webhook deliveries.", queueDepth)
        out += Metrics.metric(
            "parley_webhook_oldest_pending_seconds", "gauge", "Age of the oldest open webhook delivery (server clock).", oldestPendingSeconds)
        return out
    }
}
