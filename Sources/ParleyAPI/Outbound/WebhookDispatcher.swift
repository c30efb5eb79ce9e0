import Dispatch
import ParleyCore
import ParleyHTTP
import ParleyPostgres
import ParleySync

/// Delivers after-event webhooks (docs/webhooks.md) from the event log, which is the outbox: each endpoint has a cursor
/// (Migrations/0035) held by one node's dispatcher, which takes the events after it (from memory for this node's own
/// sends, ``committed(_:)``; from the log for the rest), attempts them on its sender threads and writes each delivery
/// once, with its first attempt, moving the cursor in the same statement. A crash before that write sends the events
/// after the cursor again (at least once; receivers dedupe on `webhook-id`); nothing is lost.
///
/// What cannot be attempted now (its ordering key waits on an open delivery, too many wait in memory, a retry) is a
/// `pending` or `failed` row, leased from the table with `FOR UPDATE SKIP LOCKED` (any number of nodes, never two
/// attempts of one delivery at once), attempted and recorded with the retry schedule, the `dead` rule, the ordering
/// rule and auto-disable. An app without endpoints costs nothing per event: its events are not even handed over.
///
/// One dispatcher thread per node owns a dedicated connection (commits that do not wait for the disk: a record lost in
/// a crash is an attempt made again). Attempts run on `senders` (bounded: in all by `maxInFlight`, per endpoint by
/// `maxInFlightPerEndpoint`), a chunk of events of distinct keys per thread, one request after another on a
/// keep-alive connection; never on an HTTP event loop or a pool worker.
///
/// Owner: `loop` (reports, pokes, drains; any thread) and `heldApps` (its lock); the cursors, queues and in-flight
/// counts live in the dispatcher thread.
package final class WebhookDispatcher: CommitObserver {
    /// After failed attempt n (1…10) the next is scheduled this far out, times a random factor in [0.8, 1.2]
    /// (docs/webhooks.md#retries).
    package static let retrySchedule: [Int64] = [5, 30, 120, 600, 1800, 3600, 7200, 14_400, 28_800, 28_800].map { $0 * 1000 }
    /// The 11th failure makes a delivery `dead`.
    package static let maxAttempts = 11
    /// An after-event attempt's time limit (docs/webhooks.md#retries).
    static let attemptTimeoutMillis = 10_000
    /// How long a claim holds a delivery (real time): past the attempt's limit, so only a dead node's claim expires.
    static let leaseSeconds = 60
    /// How long a node holds an endpoint's cursor without renewing it (real time): a node that died lets go this long
    /// after its last renewal.
    static let holdSeconds = 10
    /// A claim slower than this means the planner's statistics lag the table.
    static let slowClaimMillis: Int64 = 20
    /// Without a report, due deliveries (retries, other nodes' events) are looked for, and held cursors renewed, this
    /// often.
    static let pollMillis = 1000
    /// Events sent one after another by one sender thread (a chunk); more wait for the next free thread.
    static let maxPerChunk = 32
    /// Events read from the log per endpoint and round.
    static let readLimit = 512

    /// A leased delivery row, with what its attempt needs.
    struct Claimed: Sendable {
        let id: Int64
        let appID: String
        let webhookID: String
        let orderKey: String?
        let request: WebhookRequest
        let url: String
        let secrets: [String]
        let singleAttempt: Bool
        var endpoint: String { appID + "\u{0}" + webhookID }
    }

    /// A finished attempt of a leased row, waiting to be recorded.
    struct Outcome: Sendable {
        let claimed: Claimed
        let attempt: WebhookAttempt
        let at: Int64
    }

    /// A chunk of first attempts came back: each attempted event with its attempt, and the events left unattempted
    /// behind a failure of their key.
    struct ChunkOutcome: Sendable {
        let appID: String
        let webhookID: String
        let keys: Set<String>
        let attempts: [(event: TakenEvent, attempt: WebhookAttempt, at: Int64)]
        let unattempted: [TakenEvent]
        var endpoint: String { appID + "\u{0}" + webhookID }
    }

    /// What the sender threads, the hook callers, the writers and the routes report to the dispatcher thread.
    enum Report: Sendable {
        case outcome(Outcome)
        case chunk(ChunkOutcome)
        /// Events this node just committed, in an app whose endpoints it holds.
        case committed(CommittedEvents)
        /// Events were stored in an app whose endpoints it holds (read them from the log).
        case stored(appID: String)
        /// An endpoint changed on this node: read the endpoints again before taking more events.
        case changed
        /// A `webhook.disabled` event this thread wrote has its id.
        case sequenced
    }

    /// The dispatcher thread's loop plumbing.
    private let loop = WorkerLoop<Report>()
    /// The apps whose endpoints this node holds: the only ones whose committed events are handed over.
    private let heldApps = LockedValue<Set<String>>([])
    /// This process's name in `webhook_cursors.holder`.
    private let holder = "node_" + Crypto.base64URLEncode(Crypto.randomBytes(12))
    private let senders: OutboundCalls
    private let transport: WebhookTransport
    private let clock: ServerClock
    private let logger: Logger
    package let metrics: WebhookMetrics
    private let maxInFlight: Int
    private let maxInFlightPerEndpoint: Int
    /// Told of each app that got a `webhook.disabled` event to sequence (calling `done` once it is), and of each app
    /// whose cached record (its before-hook types) changed.
    private let eventsWritten: @Sendable (_ appID: String, _ done: @escaping @Sendable () -> Void) -> Void
    private let appChanged: @Sendable (_ appID: String) -> Void

    package init(
        transport: WebhookTransport, clock: ServerClock, logger: Logger, metrics: WebhookMetrics, maxInFlight: Int = 64,
        maxInFlightPerEndpoint: Int = 16,
        eventsWritten: @escaping @Sendable (_ appID: String, _ done: @escaping @Sendable () -> Void) -> Void,
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

    /// New deliveries may be due (the clock moved, an endpoint was re-enabled, a delivery retried).
    package func poke() { loop.poke() }

    /// A transaction of this node committed `events` (the message writer's batches): handed over in memory when this
    /// node holds an endpoint of the app; otherwise dropped here, at the cost of one lookup.
    package func committed(_ events: CommittedEvents) {
        guard heldApps.withLock({ $0.contains(events.appID) }) else { return }
        loop.post(.committed(events))
    }

    /// Events of `appID` were stored (the sequencer): read from the log when this node holds an endpoint of the app.
    package func stored(appID: String) {
        guard heldApps.withLock({ $0.contains(appID) }) else { return }
        loop.post(.stored(appID: appID))
    }

    /// An endpoint was created, changed or deleted through this node: the dispatcher reads the endpoints again before it
    /// takes any event committed after this call.
    package func endpointsChanged() { loop.post(.changed) }

    /// Blocks until nothing is due, in flight or unrecorded (tests; never on an event loop or a pool worker).
    /// Returns false when that did not happen within `timeout`.
    @discardableResult
    package func drain(timeout: Duration = .seconds(30)) -> Bool { loop.drain(timeout: timeout) }

    /// The dispatcher thread runs (readiness).
    package func isRunning(within window: Duration) -> Bool { loop.isRunning(within: window) }

    /// Adds a finished hook call or ping to the delivery log, with others of the moment (on the dispatcher thread). It
    /// does not wake the dispatcher: a hook call per send would wake it once per send; the entries wait for its next
    /// round (at most a poll interval), or wake it once ``maxQuietLogEntries`` wait.
    package func log(_ entry: DeliveryLogEntry) {
        metrics.attempted(entry.attempt)
        let waiting = quietLog.withLock { log -> Int in
            log.append(entry)
            return log.count
        }
        if waiting == Self.maxQuietLogEntries { loop.poke() }
    }

    /// Finished hook calls and pings not yet taken by the dispatcher thread.
    private let quietLog = LockedValue<[DeliveryLogEntry]>([])
    static let maxQuietLogEntries = 256

    // MARK: - Lifecycle

    package func start(database: PostgresConfiguration, pgLogger: PostgresLogger) {
        // Its commits do not wait for the disk (see the type's comment), and its statements must use their indexes
        // whatever the statistics say about a table that grew from nothing in seconds.
        var configuration = database
        configuration.addServerSetting("synchronous_commit", "off")
        configuration.addServerSetting("enable_seqscan", "off")
        loop.start(name: "parley-webhooks") { [self, configuration] in
            run(DedicatedConnection(configuration, applicationName: "parley-webhooks", logger: pgLogger))
        }
    }

    /// Stops taking events and claiming, and lets go of the cursors; attempts in flight finish on their threads, and
    /// what they delivered is delivered again by the next holder (at least once).
    package func stop() { loop.stop() }

    // MARK: - The dispatcher thread

    /// What the dispatcher thread keeps between rounds.
    private struct State {
        var queues: [String: WebhookEndpointQueue] = [:]
        /// Endpoints whose next events are read from the log (a gap in what memory handed over, a poke, a new hold).
        var needsRead: Set<String> = []
        /// Attempts (rows) and chunks in flight, per endpoint and in all.
        var inFlight: [String: Int] = [:]
        var total = 0
        var unrecorded: [Outcome] = []
        var unlogged: [DeliveryLogEntry] = []
        /// New deliveries to write (first attempts and `pending` rows), kept until a write commits.
        var toWrite: [WebhookCursors.NewDelivery] = []
        /// Endpoints whose `consecutive_failures` is known to be 0 (a success needs no write).
        var knownZero: Set<String> = []
        var refreshNow = true
        var nextRefresh: Int64 = 0
        var claimDue = true
        /// When each endpoint's cursor was last written (a move over events it does not select waits up to a poll).
        var cursorWritten: [String: Int64] = [:]
        /// The last claim took longer than ``slowClaimMillis``.
        var slowClaim = false
    }

    private func run(_ connection: DedicatedConnection) {
        var db = connection
        var outage = OutageLog(logger: logger, what: "webhook delivery")
        var state = State()
        var lastAnalyze: Int64 = 0
        while true {
            let now = EventLoop.monotonicMillis()
            let busy =
                state.refreshNow || state.claimDue || !state.needsRead.isEmpty || !state.unrecorded.isEmpty || !state.unlogged.isEmpty
                || !state.toWrite.isEmpty
            let waitMillis = busy ? 0 : Int(max(1, min(Int64(Self.pollMillis), state.nextRefresh - now)))
            // Outcomes come back one by one: while others are in flight, gather them a moment, so that one write
            // records several.
            guard let round = loop.next(waitMillis: waitMillis, gatherMillis: state.total > 1 ? 1 : 0) else {
                if let connection = try? db.get() { try? WebhookCursors.release(holder: holder, on: connection) }
                return
            }
            var committed: [CommittedEvents] = []
            state.unlogged += quietLog.withLock { log in
                defer { log = [] }
                return log
            }
            for report in round.messages {
                switch report {
                case .outcome(let outcome):
                    finishedInFlight(outcome.claimed.endpoint, &state)
                    state.unrecorded.append(outcome)
                case .chunk(let chunk):
                    finishedInFlight(chunk.endpoint, &state)
                    took(chunk, &state)
                case .committed(let events): committed.append(events)
                case .stored(let appID):
                    for key in state.queues.keys where state.queues[key]?.appID == appID { state.needsRead.insert(key) }
                case .changed: state.refreshNow = true
                case .sequenced: state.total -= 1
                }
            }
            if round.poked {
                state.refreshNow = true
                state.claimDue = true
                state.needsRead.formUnion(state.queues.keys)
            }
            if EventLoop.monotonicMillis() >= state.nextRefresh {
                state.refreshNow = true
                state.claimDue = true
            }
            var claimedAny = false
            do {
                let connection = try db.get()
                if state.refreshNow { try refresh(&state, on: connection) }
                for events in committed { take(events, &state) }
                try read(&state, on: connection)
                startChunks(&state)
                let claimed = try write(&state, on: connection)
                claimedAny = !claimed.isEmpty
                for item in claimed {
                    state.total += 1
                    state.inFlight[item.endpoint, default: 0] += 1
                    senders.run { [self] in attempt(item) }
                }
                // A backlog grows from nothing to tens of thousands of rows in seconds, faster than autovacuum's
                // statistics follow (it looks once a minute); planned for an empty table, the claim then scans every
                // open delivery (~100 ms a round instead of ~1 ms). A slow claim refreshes them, at most every 10 s.
                let now = EventLoop.monotonicMillis()
                if state.slowClaim, now - lastAnalyze > 10_000 {
                    lastAnalyze = now
                    try connection.query("ANALYZE webhook_deliveries")
                }
                outage.succeeded()
            } catch {
                outage.failed(error)
                db.dropIfBroken()
                Wakeup.sleep(millis: 200)
                continue
            }
            // More may be due while there is room; otherwise the next report, poke or poll wakes the loop.
            state.claimDue = claimedAny && state.total < maxInFlight
            let settled = state.total == 0 && state.queues.values.allSatisfy { $0.isSettled } && state.toWrite.isEmpty
            if !claimedAny && settled && state.needsRead.isEmpty && state.unrecorded.isEmpty && state.unlogged.isEmpty {
                loop.idle()
            }
        }
    }

    private func finishedInFlight(_ endpoint: String, _ state: inout State) {
        state.total -= 1
        state.inFlight[endpoint, default: 1] -= 1
        if state.inFlight[endpoint] == 0 { state.inFlight[endpoint] = nil }
    }

    /// Renews and takes cursors, reads the endpoints' settings and open keys again; lets go of endpoints no longer held
    /// (disabled, deleted, taken by another node), writing what waited for them as `pending` rows.
    private func refresh(_ state: inout State, on db: PostgresConnection) throws {
        let held = try WebhookCursors.hold(holder: holder, leaseSeconds: Self.holdSeconds, on: db)
        let heldKeys = Set(held.map { $0.appID + "\u{0}" + $0.webhookID })
        for key in state.queues.keys where !heldKeys.contains(key) {
            guard var queue = state.queues.removeValue(forKey: key) else { continue }
            state.toWrite += queue.takeAllWaiting().map { pendingRow(queue, $0) }
            state.needsRead.remove(key)
        }
        var open = try WebhookCursors.openKeys(held.map { ($0.appID, $0.webhookID) }, on: db)
        // Open rows this thread has yet to write count as the table's.
        for delivery in state.toWrite where delivery.status != "succeeded" {
            open[delivery.appID + "\u{0}" + delivery.webhookID, default: [:]][delivery.event.orderKey, default: 0] += 1
        }
        for endpoint in held {
            let key = endpoint.appID + "\u{0}" + endpoint.webhookID
            if var queue = state.queues[key] {
                queue.config = endpoint.config
                queue.openKeys = open[key] ?? [:]
                state.queues[key] = queue
            } else {
                var queue = WebhookEndpointQueue(
                    appID: endpoint.appID, webhookID: endpoint.webhookID, config: endpoint.config, cursor: endpoint.cursor)
                queue.openKeys = open[key] ?? [:]
                state.queues[key] = queue
                state.needsRead.insert(key)
            }
        }
        heldApps.withLock { $0 = Set(held.map { $0.appID }) }
        state.knownZero = []
        state.refreshNow = false
        state.nextRefresh = EventLoop.monotonicMillis() + Int64(Self.pollMillis)
    }

    /// Events this node committed: taken from memory by each endpoint of the app that has taken every event before
    /// them; an endpoint that would skip one reads the log instead. Ids are dense today, so "every event before them"
    /// is "the first follows the endpoint's newest"; were ids to leave gaps, each batch would be read from the log
    /// (correct, and slower) until the hand-over says which id precedes it.
    private func take(_ committed: CommittedEvents, _ state: inout State) {
        guard let first = committed.events.first, let last = committed.events.last else { return }
        let contiguous = last.id - first.id == Int64(committed.events.count - 1)
        var events: [TakenEvent]?
        for key in state.queues.keys where state.queues[key]?.appID == committed.appID && !state.needsRead.contains(key) {
            guard var queue = state.queues[key], last.id > queue.taken else { continue }
            guard contiguous, first.id <= queue.taken + 1 else {
                state.needsRead.insert(key)
                continue
            }
            let rendered =
                events
                ?? committed.events.map {
                    TakenEvent(
                        id: $0.id, type: $0.event.type, orderKey: $0.event.orderKey, createdAt: $0.createdAt,
                        body: TakenEvent.body(id: $0.id, type: $0.event.type, appID: committed.appID, createdAt: $0.createdAt, data: $0.event.data))
                }
            events = rendered
            state.toWrite += queue.take(rendered).map { pendingRow(queue, $0) }
            state.queues[key] = queue
        }
    }

    /// Reads the log after each endpoint that needs it (one query per app and round, up to ``readLimit`` events).
    private func read(_ state: inout State, on db: PostgresConnection) throws {
        let byApp = Dictionary(grouping: state.needsRead.compactMap { state.queues[$0] }, by: { $0.appID })
        for (appID, queues) in byApp {
            let after = queues.map { $0.taken }.min() ?? 0
            let patterns = Array(Set(queues.flatMap { $0.config.eventTypes }))
            let rows = try WebhookCursors.read(appID: appID, after: after, patterns: patterns, limit: Self.readLimit, on: db)
            for var queue in queues {
                state.toWrite += queue.take(rows.lazy.map { $0.event }).map { pendingRow(queue, $0) }
                state.queues[queue.endpoint] = queue
                if rows.count < Self.readLimit { state.needsRead.remove(queue.endpoint) }
            }
        }
    }

    /// Starts the first attempts that may go now, a chunk per free sender thread of each endpoint.
    private func startChunks(_ state: inout State) {
        for key in state.queues.keys {
            let slots = min(maxInFlightPerEndpoint - state.inFlight[key, default: 0], maxInFlight - state.total)
            guard slots > 0, var queue = state.queues[key] else { continue }
            let chunks = queue.nextChunks(slots: slots, maxPerChunk: Self.maxPerChunk)
            state.queues[key] = queue
            for chunk in chunks {
                state.total += 1
                state.inFlight[key, default: 0] += 1
                let (appID, webhookID, config) = (queue.appID, queue.webhookID, queue.config)
                senders.run { [self] in attempt(chunk, appID: appID, webhookID: webhookID, config: config) }
            }
        }
    }

    /// A chunk's first attempts become rows to write (`succeeded` or `failed`), with the events left behind a failure
    /// as `pending` rows.
    private func took(_ chunk: ChunkOutcome, _ state: inout State) {
        var failed: Set<String> = []
        for (event, attempt, at) in chunk.attempts {
            let status = attempt.succeeded ? "succeeded" : "failed"
            if !attempt.succeeded { failed.insert(event.orderKey) }
            state.toWrite.append(
                .init(
                    appID: chunk.appID, webhookID: chunk.webhookID, event: event, status: status, attempt: attempt, at: at,
                    nextAttemptAt: status == "failed" ? at + Self.retryDelay(afterFailedAttempt: 1) : nil))
        }
        if var queue = state.queues[chunk.endpoint] {
            state.toWrite += queue.finished(keys: chunk.keys, failedKeys: failed, unattempted: chunk.unattempted).map { pendingRow(queue, $0) }
            state.queues[chunk.endpoint] = queue
        } else {
            // No longer held: its attempts are written all the same (the next holder skips their rows).
            state.toWrite += chunk.unattempted.map {
                .init(
                    appID: chunk.appID, webhookID: chunk.webhookID, event: $0, status: "pending", attempt: nil, at: $0.createdAt,
                    nextAttemptAt: $0.createdAt)
            }
        }
    }

    private func pendingRow(_ queue: WebhookEndpointQueue, _ event: TakenEvent) -> WebhookCursors.NewDelivery {
        .init(
            appID: queue.appID, webhookID: queue.webhookID, event: event, status: "pending", attempt: nil, at: event.createdAt,
            nextAttemptAt: event.createdAt)
    }

    /// One round's writes: the new deliveries with their cursors' moves, and, when there is more, in one transaction,
    /// hook calls and pings, the leased rows' outcomes, failure counts and the next leases. Returns the rows leased.
    private func write(_ state: inout State, on db: PostgresConnection) throws -> [Claimed] {
        let now = EventLoop.monotonicMillis()
        var idsByEndpoint: [String: Set<Int64>] = [:]
        for delivery in state.toWrite { idsByEndpoint[delivery.appID + "\u{0}" + delivery.webhookID, default: []].insert(delivery.event.id) }
        var moves: [(appID: String, webhookID: String, eventID: Int64)] = []
        for (key, queue) in state.queues {
            let ids = idsByEndpoint[key] ?? []
            let cursor = queue.cursor(afterWriting: ids)
            // A move over events the endpoint does not select only (nothing to write) waits up to a poll interval.
            guard cursor > queue.cursor, !ids.isEmpty || now - state.cursorWritten[key, default: 0] >= Int64(Self.pollMillis) else { continue }
            moves.append((queue.appID, queue.webhookID, cursor))
        }
        let fresh = state.toWrite.filter { $0.attempt != nil }
        let counts =
            fresh.map { (appID: $0.appID, webhookID: $0.webhookID, succeeded: $0.attempt?.succeeded ?? false) }
            + state.unrecorded.map { (appID: $0.claimed.appID, webhookID: $0.claimed.webhookID, succeeded: $0.attempt.succeeded) }
        let countsNeeded = counts.contains { !$0.succeeded || !state.knownZero.contains($0.appID + "\u{0}" + $0.webhookID) }
        let openRowsWritten = state.toWrite.contains { $0.status != "succeeded" }
        let transactional = !state.unrecorded.isEmpty || !state.unlogged.isEmpty || countsNeeded || state.claimDue
        guard transactional || !state.toWrite.isEmpty || !moves.isEmpty else { return [] }
        let (recorded, logged, toWrite) = (state.unrecorded, state.unlogged, state.toWrite)
        let free = maxInFlight - state.total
        let claimDue = state.claimDue || openRowsWritten || !recorded.isEmpty
        var disabled: [String] = []
        var claimed: [Claimed] = []
        var slowClaim = false
        if transactional {
            (claimed, disabled) = try db.transaction { db in
                if !logged.isEmpty { try DeliveryStore.insertFinished(logged, on: db) }
                try WebhookCursors.write(toWrite, moving: moves, holder: holder, on: db)
                if !recorded.isEmpty { try record(recorded, on: db) }
                let disabled = countsNeeded ? try countFailures(counts, knownZero: &state.knownZero, on: db) : []
                guard claimDue && free > 0 else { return ([], disabled) }
                let started = EventLoop.monotonicMillis()
                let claimed = try claim(limit: free, inFlight: state.inFlight, on: db)
                slowClaim = EventLoop.monotonicMillis() - started > Self.slowClaimMillis
                return (claimed, disabled)
            }
        } else {
            try WebhookCursors.write(toWrite, moving: moves, holder: holder, on: db)
        }
        metrics.recorded(
            logged.map { $0.succeeded ? "succeeded" : "dead" } + recorded.map { Self.status(after: $0) } + fresh.map { $0.status })
        for move in moves { state.cursorWritten[move.appID + "\u{0}" + move.webhookID] = now }
        for (key, ids) in idsByEndpoint { state.queues[key]?.wrote(ids) }
        for key in state.queues.keys where idsByEndpoint[key] == nil { state.queues[key]?.wrote([]) }
        for outcome in recorded where Self.status(after: outcome) != "failed" {
            if let key = outcome.claimed.orderKey { state.queues[outcome.claimed.endpoint]?.rowClosed(key: key) }
        }
        (state.unrecorded, state.unlogged, state.toWrite) = ([], [], [])
        state.slowClaim = slowClaim
        if openRowsWritten { state.claimDue = true }
        for appID in disabled {
            logger.warning("app=\(appID) msg=\"webhook endpoint disabled after consecutive failures\"")
            appChanged(appID)
            // Counted in flight until sequenced: a drain returns once the event is in the log.
            state.total += 1
            eventsWritten(appID) { [loop] in loop.post(.sequenced) }
            state.refreshNow = true
        }
        return claimed
    }

    /// A chunk of first attempts, on a sender thread, one after another; an event whose key failed earlier in the
    /// chunk is not attempted. The outcomes go back to the dispatcher thread together.
    private func attempt(_ chunk: [TakenEvent], appID: String, webhookID: String, config: WebhookEndpointQueue.Config) {
        var attempts: [(event: TakenEvent, attempt: WebhookAttempt, at: Int64)] = []
        var unattempted: [TakenEvent] = []
        var failed: Set<String> = []
        for event in chunk {
            if failed.contains(event.orderKey) {
                unattempted.append(event)
                continue
            }
            let now = clock.now()
            let result = transport.send(
                WebhookRequest(id: String(event.id), eventType: event.type, body: event.body, attempt: 1), to: config.url,
                secrets: config.secrets(at: now), now: now, timeoutMillis: Self.attemptTimeoutMillis)
            metrics.attempted(result)
            attempts.append((event, result, now))
            if !result.succeeded { failed.insert(event.orderKey) }
        }
        loop.post(
            .chunk(
                ChunkOutcome(
                    appID: appID, webhookID: webhookID, keys: Set(chunk.map { $0.orderKey }), attempts: attempts, unattempted: unattempted)))
    }

    /// One attempt of a leased row, on a sender thread; its outcome goes back to the dispatcher thread.
    private func attempt(_ item: Claimed) {
        let now = clock.now()
        let result = transport.send(item.request, to: item.url, secrets: item.secrets, now: now, timeoutMillis: Self.attemptTimeoutMillis)
        metrics.attempted(result)
        loop.post(.outcome(Outcome(claimed: item, attempt: result, at: now)))
    }

    /// Leases up to `limit` due deliveries, each the earliest open one of its endpoint and ordering key
    /// (docs/webhooks.md#ordering), and no more per endpoint than its free slots (`inFlight`: this node's attempts in
    /// flight per endpoint).
    ///
    /// The candidates are chosen without locks (a window function caps each endpoint), then locked with `SKIP LOCKED`
    /// and re-checked, so nodes claiming at once take different rows and a row is leased only when it will be sent.
    private func claim(limit: Int, inFlight: [String: Int], on db: PostgresConnection) throws -> [Claimed] {
        let now = clock.now()
        let busy = inFlight.map { (endpoint: Self.endpoint($0.key), count: $0.value) }
        // Endpoints with no free slot are left out of the scan, so it stops after the rows it can use.
        let full = busy.filter { $0.count >= maxInFlightPerEndpoint }.map { $0.endpoint }
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
                  AND (d.app_id, d.webhook_id) NOT IN (SELECT * FROM unnest(\(full.map { $0.appID })::text[], \(full.map { $0.webhookID })::text[]))
                ORDER BY d.next_attempt_at, d.id
                LIMIT \(limit * 2)
            ), ranked AS (
                SELECT s.id, s.next_attempt_at,
                       row_number() OVER (PARTITION BY s.app_id, s.webhook_id ORDER BY s.next_attempt_at, s.id) AS rank,
                       \(maxInFlightPerEndpoint) - coalesce(f.n, 0) AS room
                FROM scanned s
                LEFT JOIN unnest(\(busy.map { $0.endpoint.appID })::text[], \(busy.map { $0.endpoint.webhookID })::text[], \(busy.map { $0.count })::int[])
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
                      w.previous_secret, w.previous_secret_until, d.order_key
            """)
        return try rows.decode(
            (Int64, String, String, Int64, String, PostgresTextBytes, Int, Bool, String, String, String?, Int64?, String?).self
        ).map { (id, appID, webhookID, eventID, eventType, body, attempts, singleAttempt, url, secret, previous, previousUntil, orderKey) in
            var secrets = [secret]
            if let previous, let previousUntil, previousUntil > now { secrets.append(previous) }
            return Claimed(
                id: id, appID: appID, webhookID: webhookID, orderKey: orderKey,
                request: WebhookRequest(id: String(eventID), eventType: eventType, body: body.bytes, attempt: attempts + 1),
                url: url, secrets: secrets, singleAttempt: singleAttempt)
        }
    }

    /// The status an attempt leaves its delivery in: succeeded; dead after the 11th failure or a retried dead one's
    /// failure; else failed (to be retried).
    private static func status(after outcome: Outcome) -> String {
        if outcome.attempt.succeeded { return "succeeded" }
        return outcome.claimed.singleAttempt || outcome.claimed.request.attempt >= maxAttempts ? "dead" : "failed"
    }

    /// Records finished attempts of leased rows in the caller's transaction: each delivery's new status and next time.
    private func record(_ outcomes: [Outcome], on db: PostgresConnection) throws {
        let statuses = outcomes.map(Self.status(after:))
        let nextAttempts = zip(outcomes, statuses).map { outcome, status -> Int64? in
            status == "failed" ? outcome.at + Self.retryDelay(afterFailedAttempt: outcome.claimed.request.attempt) : nil
        }
        try db.query(
            """
            UPDATE webhook_deliveries d
            SET status = u.status, attempts = d.attempts + 1, next_attempt_at = u.next_at, last_attempt_at = u.at,
                last_status_code = u.code, last_error = u.error, response_excerpt = u.excerpt, duration_ms = u.duration,
                attempt_log = d.attempt_log || jsonb_build_array(u.entry::jsonb), single_attempt = false, leased_until = NULL
            FROM unnest(\(outcomes.map { $0.claimed.id })::bigint[], \(statuses)::text[], \(nextAttempts)::bigint[], \(outcomes.map { $0.at })::bigint[],
                        \(outcomes.map { $0.attempt.statusCode })::int[], \(outcomes.map { $0.attempt.error })::text[],
                        \(outcomes.map { $0.attempt.responseExcerpt })::text[], \(outcomes.map { $0.attempt.durationMillis })::int[],
                        \(outcomes.map { DeliveryStore.attemptLogEntry($0.attempt, at: $0.at) })::text[])
                 AS u(id, status, next_at, at, code, error, excerpt, duration, entry)
            WHERE d.id = u.id
            """)
    }

    /// Applies attempts' outcomes, in completion order, to each endpoint's consecutive failures in the caller's
    /// transaction: a success resets the count, failures add up, and an endpoint that reaches its limit is disabled
    /// (with `webhook.disabled`; its open deliveries and its cursor pause). `knownZero` holds the endpoints whose count
    /// is 0: a success there writes nothing. Returns the apps where an endpoint was disabled.
    private func countFailures(
        _ outcomes: [(appID: String, webhookID: String, succeeded: Bool)], knownZero: inout Set<String>, on db: PostgresConnection
    ) throws -> [String] {
        var disabled: Set<String> = []
        // Per endpoint: reset on a success, add the failures after the last one.
        var counts: [String: (reset: Bool, failures: Int, appID: String, webhookID: String)] = [:]
        for outcome in outcomes {
            let key = outcome.appID + "\u{0}" + outcome.webhookID
            var entry = counts[key] ?? (false, 0, outcome.appID, outcome.webhookID)
            if outcome.succeeded {
                entry.reset = true
                entry.failures = 0
            } else {
                entry.failures += 1
            }
            counts[key] = entry
        }
        for (key, entry) in counts {
            if entry.reset && entry.failures == 0 {
                if knownZero.contains(key) { continue }
                try db.query(
                    """
                    UPDATE webhooks SET consecutive_failures = 0, first_failure_at = NULL
                    WHERE app_id = \(entry.appID) AND webhook_id = \(entry.webhookID) AND consecutive_failures <> 0
                    """)
                knownZero.insert(key)
                continue
            }
            knownZero.remove(key)
            let now = clock.now()
            // The streak began now when this batch reset it or the count was 0; the endpoint is disabled once the
            // count reaches its limit and the streak is at least `disable_after_s` old (docs/webhooks.md#retries). The
            // row is locked and read first, so the new count builds on the latest one.
            let disabledNow =
                try db.query(
                    """
                    UPDATE webhooks w
                    SET consecutive_failures = s.failures, first_failure_at = s.began,
                        enabled = w.enabled AND NOT s.disable,
                        disabled_reason = CASE WHEN w.enabled AND s.disable THEN 'consecutive_failures' ELSE w.disabled_reason END,
                        updated_at = CASE WHEN w.enabled AND s.disable THEN \(now) ELSE w.updated_at END
                    FROM (SELECT failures, began,
                                 failures >= disable_after_failures AND began <= \(now) - disable_after_s::bigint * 1000 AS disable
                          FROM (SELECT disable_after_failures, disable_after_s,
                                       CASE WHEN \(entry.reset) THEN 0 ELSE consecutive_failures END + \(entry.failures) AS failures,
                                       CASE WHEN \(entry.reset) OR consecutive_failures = 0 THEN \(now) ELSE coalesce(first_failure_at, \(now)) END
                                           AS began
                                FROM webhooks WHERE app_id = \(entry.appID) AND webhook_id = \(entry.webhookID) FOR UPDATE) current) s
                    WHERE w.app_id = \(entry.appID) AND w.webhook_id = \(entry.webhookID)
                    RETURNING NOT w.enabled AND w.disabled_reason = 'consecutive_failures' AND w.updated_at = \(now)
                    """
                ).decodeFirst(Bool.self) ?? false
            guard disabledNow else { continue }
            try WebhookStore.setDeliveriesPaused(true, appID: entry.appID, webhookID: entry.webhookID, now: now, on: db)
            try WebhookCursors.pause(appID: entry.appID, webhookID: entry.webhookID, on: db)
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

/// The `webhook.*` events of the catalogue (docs/events.md#the-event-object).
package enum WebhookEvents {
    package static func disabled(webhookID: String, reason: String) -> NewEvent {
        var data = JSONObjectWriter()
        data["webhook_id"] = webhookID
        data["reason"] = reason
        return NewEvent(type: "webhook.disabled", data: data.finish(), orderKey: "app")
    }
}

/// The webhook part of `/metrics`: attempts by outcome and their latency (docs/webhooks.md#retries,
/// docs/operations.md#health-readiness-and-metrics); the queue's depth and oldest pending age are read from the
/// database when scraped (``DeliveryStore``).
///
/// Owner: `state` behind its lock; recorded by the sender threads and the dispatcher thread.
package final class WebhookMetrics: Sendable {
    private struct State {
        var statuses: [String: Int] = [:]
        var buckets = [Int](repeating: 0, count: Metrics.buckets.count)
        var count = 0
        var sum = 0.0
        /// Before-event hook calls by "hook type decision".
        var hookCalls: [String: Int] = [:]
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

    /// Counts a before-event hook call by its hook type and what it decided: the hook's `allow`, `modify`, `reject` or
    /// `drop`, `fail_open` (no valid answer, and the hook allows then), or `error` (no valid answer: refused with 503).
    func hookCalled(_ hook: String, decision: String) {
        state.withLock { s in s.hookCalls[hook + " " + decision, default: 0] += 1 }
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
        out += Metrics.metric("parley_webhook_backlog", "gauge", "Open (pending or failed) webhook deliveries.", queueDepth)
        // The earlier name of the backlog, kept for dashboards that read it.
        out += Metrics.metric(
            "parley_webhook_queue_depth", "gauge", "Open (pending or failed) webhook deliveries (parley_webhook_backlog).", queueDepth)
        out += Metrics.family("parley_hook_calls_total", "counter", "Before-event hook calls this node made, by hook type and decision.")
        for (key, count) in s.hookCalls.sorted(by: { $0.key < $1.key }) {
            let parts = key.split(separator: " ", maxSplits: 1)
            out += "parley_hook_calls_total{hook=\"\(Metrics.escape(String(parts[0])))\",decision=\"\(parts[1])\"} \(count)\n"
        }
        out += Metrics.metric(
            "parley_webhook_oldest_pending_seconds", "gauge", "Age of the oldest open webhook delivery (server clock).", oldestPendingSeconds)
        return out
    }
}
