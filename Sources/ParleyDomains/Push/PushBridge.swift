import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres
import ParleySync

/// The push bridge of a node (docs/push.md): plans each app's events into attempts (``PushPlanner``), sends them on its
/// sender threads through the webhooks' outbound transport, and records each attempt once its try ends, with the
/// retry schedule, rejected-key pruning (`device.removed`) and `failed`.
///
/// What this node's message writer commits is handed over in memory (``committed(_:)``) and planned from there: the
/// log is read only for the events between those batches (other writers of this node, other nodes) and for apps
/// nobody handed over (after a restart, another node's sends). An app is planned by one node at a time: the one whose
/// bridge connection holds the app's session advisory lock (``PushLane``); another node's batches of that app are
/// dropped, and the owner reads them from the log. Apps without push configured are never read: their batches are
/// only counted (`parley_push_skipped_total`).
///
/// A fresh attempt is written once, when its first try ends (sent, rejected, failed, or pending with its retry
/// time), in the round's one recording transaction, which also moves the app's cursor over the planned steps whose
/// attempts are all recorded: a crash re-plans (and may push twice) what was sent but not recorded. Retries, and the
/// attempts other domains insert as `pending` (calls, revokes), are leased from the table with `FOR UPDATE SKIP
/// LOCKED` (any number of nodes, never two tries of one attempt at once) and recorded by updating their row.
///
/// One bridge thread per node owns a dedicated connection; it never holds a transaction across a gateway request, and
/// never runs on an HTTP event loop. Sender threads send a chunk of requests each, one after the other on a keep-alive
/// connection, and hand the chunk's outcomes back at once: as many chunks as the gateway's recent latency needs to keep
/// a round's requests within a few milliseconds.
///
/// Owner: `loop` (outcomes, pokes, drains) and `inbox` (handed-over batches), any thread; the lanes, the in-flight
/// count and the unrecorded attempts live in the bridge thread.
package final class PushBridge: CommitObserver {
    /// How long a claim holds an attempt (real time): past any try's limit, so only a dead node's claim expires.
    static let leaseSeconds = 60
    /// Without a poke, other nodes' events and due retries are looked for this often.
    static let pollMillis = 500
    /// Attempts in flight per node.
    static let maxInFlight = 512
    /// A gap between handed-over batches is read from the log once it is this old (a batch of the other writer
    /// thread in flight closes it sooner).
    static let gapMillis: Int64 = 5
    /// A lane with nothing to do is let go (its lock released) after this long.
    static let idleLaneMillis: Int64 = 10_000
    /// An app another node plans is asked for again after this long.
    static let elsewhereMillis: Int64 = 1_000
    /// Events taken into one planning step.
    static let eventsPerStep = 200
    /// While tries are in flight, planning waits this long after the previous planning, and recording after the
    /// previous record (ms): the statements then take several writer batches' events and chunks' outcomes at once.
    static let planEveryMillis: Int64 = 5
    static let recordEveryMillis: Int64 = 10
    /// A chunk of requests one sender thread sends in a row should take about this long at the gateway's recent
    /// latency (fewer, longer chunks mean fewer thread hand-offs; a slow gateway gets one thread per request).
    static let chunkMillis = 5.0
    /// The advisory-lock class of apps' planning (ASCII "PUSH"); the object is `hashtext(app_id)`.
    static let lockClass: Int32 = 0x5055_5348

    /// An attempt being tried, with what its try needs.
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

    /// Where an attempt being tried comes from.
    enum Origin: Sendable {
        /// A row leased from the table (a retry, a call or revoke push): its outcome updates the row.
        case leased
        /// Planned by this node and not written yet: its outcome inserts `row`, and finishes step `step` of its lane.
        case fresh(row: PushAttemptRow, step: Int)
    }

    struct Outcome: Sendable {
        let claimed: Claimed
        let result: PushResult
        var origin: Origin = .leased
    }

    /// What this node's writer and sequencer handed over since the bridge thread last looked.
    private struct Inbox {
        var batches: [CommittedEvents] = []
        /// Apps whose log got events from another writer of this node.
        var sequenced: Set<String> = []
        /// Apps whose batches need not wake the bridge (push off, or planned by another node): taken every poll.
        var quiet: Set<String> = []
        /// Someone asked for a look at every app's log and the due retries now (``poke()``, ``drain(timeout:)``).
        var pollNow = false
    }

    /// The bridge thread's loop plumbing; the sender threads post their chunks' outcomes to it.
    private let loop = WorkerLoop<[Outcome]>()
    private let inbox = LockedValue(Inbox())
    private let senders = OutboundCalls(maxThreads: 64)
    /// The gateways' recent request latency, ms (a moving average; sizes the chunks).
    private let gatewayMillis = LockedValue<Double>(1)
    let transport: WebhookTransport
    let clock: ServerClock
    private let apps: AppDirectory
    private let logger: Logger
    package let metrics = PushMetrics()
    /// Told of each app that got `device.removed` events to sequence.
    private let eventsWritten: @Sendable (_ appID: String) -> Void

    package init(
        transport: WebhookTransport, clock: ServerClock, apps: AppDirectory, logger: Logger,
        eventsWritten: @escaping @Sendable (_ appID: String) -> Void
    ) {
        self.transport = transport
        self.clock = clock
        self.apps = apps
        self.logger = logger
        self.eventsWritten = eventsWritten
    }

    // MARK: - Any thread

    /// The clock moved, or another node may have written: look at the log, the due retries and every app's state now.
    package func poke() {
        inbox.withLock { $0.pollNow = true }
        loop.poke()
    }

    /// This node's message writer committed `events` (called on its thread, right after the commit).
    package func committed(_ events: CommittedEvents) {
        let wake = inbox.withLock { inbox -> Bool in
            inbox.batches.append(events)
            return !inbox.quiet.contains(events.appID)
        }
        if wake { loop.poke() }
    }

    /// Another writer of this node (the sequencer) put events of `appID` in the log: pushable ones among them are
    /// read from there, and the attempts it inserted (calls, revokes) are leased.
    package func stored(appID: String) {
        inbox.withLock { _ = $0.sequenced.insert(appID) }
        loop.poke()
    }

    /// Blocks until every event is planned and nothing due is pending, in flight or unrecorded (tests; never on an
    /// event loop or a pool worker). Returns false when that did not happen within `timeout`.
    @discardableResult
    package func drain(timeout: Duration = .seconds(30)) -> Bool {
        inbox.withLock { $0.pollNow = true }
        return loop.drain(timeout: timeout)
    }

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
        // The bridge's commits do not wait for the disk: an attempt or cursor lost in a crash is planned and tried
        // again (a push may then arrive twice), while waiting for the disk at every round halves what it sends.
        var unsynced = database
        unsynced.addServerSetting("synchronous_commit", "off")
        let configuration = unsynced
        loop.start(name: "parley-push") { [self] in
            run(DedicatedConnection(configuration, applicationName: "parley-push", logger: pgLogger))
        }
    }

    /// Stops planning and claiming; tries in flight finish on their threads and are not recorded (their events are
    /// planned again by the next owner of their app; their leases expire).
    package func stop() { loop.stop() }

    // MARK: - The bridge thread

    /// The bridge thread's state between rounds.
    private struct Work {
        var lanes: [String: PushLane] = [:]
        /// Apps another node plans, and when to ask again (monotonic ms).
        var elsewhere: [String: Int64] = [:]
        var inFlight = 0
        /// Tries that ended and fresh attempts that need no try (suppressed), not recorded yet.
        var leasedDone: [Outcome] = []
        var freshDone: [PushAttemptRow] = []
        var freshApps: [String] = []
        var lastPoll: Int64 = 0
        /// The earliest retry this node scheduled (server clock).
        var nextRetry: Int64?
        /// The connection the lanes' locks were taken on.
        var connection: ObjectIdentifier?
    }

    private func run(_ connection: DedicatedConnection) {
        var db = connection
        var outage = OutageLog(logger: logger, what: "push bridge")
        var work = Work()
        var busy = true
        var lastPlan: Int64 = 0
        var lastRecord: Int64 = 0
        while true {
            let now0 = EventLoop.monotonicMillis()
            let unrecorded = !work.leasedDone.isEmpty || !work.freshDone.isEmpty
            let deferred = work.lanes.values.contains { !$0.ready.isEmpty }
            let waitMillis =
                busy
                ? 0
                : deferred || unrecorded
                    ? Int(max(1, min(Self.planEveryMillis - (now0 - lastPlan), Self.recordEveryMillis - (now0 - lastRecord))))
                    : work.inFlight > 0 || work.lanes.values.contains { !$0.held.isEmpty } ? Int(Self.gapMillis) : Self.pollMillis
            guard let round = loop.next(waitMillis: waitMillis, gatherMillis: work.inFlight > 1 ? 1 : 0) else { return }
            let now = EventLoop.monotonicMillis()
            let (batches, sequenced, pollNow) = inbox.withLock { inbox -> ([CommittedEvents], Set<String>, Bool) in
                defer {
                    inbox.batches = []
                    inbox.sequenced = []
                    inbox.pollNow = false
                }
                return (inbox.batches, inbox.sequenced, inbox.pollNow)
            }
            for outcome in round.messages.joined() { finish(outcome, &work, now: now) }
            busy = false
            do {
                let db = try db.get()
                if work.connection != ObjectIdentifier(db) {
                    // A new session holds none of the old one's locks: every lane starts again from its cursor.
                    work.lanes = [:]
                    work.elsewhere = [:]
                    work.connection = ObjectIdentifier(db)
                }
                try take(batches, sequenced: sequenced, &work, now: now, on: db)
                let polled = pollNow || now - work.lastPoll >= Int64(Self.pollMillis)
                if polled {
                    work.lastPoll = now
                    try poll(&work, now: now, on: db)
                }
                // Under load, planning and recording wait a few milliseconds, so that one statement takes the events of
                // several writer batches and the outcomes of several chunks; alone, they go at once.
                var fresh: [Outcome.Fresh] = []
                var budget = Self.maxInFlight - work.inFlight
                if work.inFlight == 0 || now - lastPlan >= Self.planEveryMillis || polled {
                    lastPlan = now
                    for appID in work.lanes.keys.sorted() {
                        if try !(settings(appID, on: db)?.configured ?? false) { try letGo(appID, &work, on: db) }
                    }
                    for appID in work.lanes.keys.sorted() where budget > 0 {
                        guard var lane = work.lanes[appID] else { continue }
                        let planned = try plan(&lane, budget: budget, &work, now: now, on: db)
                        work.lanes[appID] = lane
                        budget -= planned.count
                        fresh += planned
                    }
                }
                var dispatch: [Claimed] = []
                let serverNow = clock.now()
                let retryDue = work.nextRetry.map { $0 <= serverNow } ?? false
                if budget > 0 && (polled || !sequenced.isEmpty || retryDue) {
                    let claimed = try db.transaction { db in try claim(limit: budget, on: db) }
                    if claimed.count == budget { busy = true }
                    if retryDue { work.nextRetry = nil }
                    dispatch += claimed
                }
                // The tries go out before this round's records are written.
                send(fresh: fresh, leased: dispatch, &work)
                let goingIdle = work.inFlight == 0 && !work.lanes.values.contains { !$0.ready.isEmpty }
                if goingIdle || now - lastRecord >= Self.recordEveryMillis {
                    lastRecord = now
                    try record(&work, on: db)
                }
                try releaseIdle(&work, now: now, on: db)
                busy = busy || work.lanes.values.contains { $0.wantsLog && $0.held.isEmpty && $0.ready.count < Self.eventsPerStep }
                busy = busy && work.inFlight < Self.maxInFlight
                outage.succeeded()
            } catch {
                outage.failed(error)
                db.dropIfBroken()
                Wakeup.sleep(millis: 200)
                busy = true
            }
            let settled = work.lanes.values.allSatisfy { !$0.hasWork && $0.steps.isEmpty && $0.unwritten == nil }
            if !busy && work.inFlight == 0 && work.leasedDone.isEmpty && work.freshDone.isEmpty && settled
                && inbox.withLock({ $0.batches.isEmpty && $0.sequenced.isEmpty && !$0.pollNow })
            {
                loop.idle()
            }
        }
    }

    /// A try ended: its attempt joins the next record, and its lane's step counts it.
    private func finish(_ outcome: Outcome, _ work: inout Work, now: Int64) {
        work.inFlight -= 1
        switch outcome.origin {
        case .leased:
            work.leasedDone.append(outcome)
        case .fresh(var row, let step):
            let result = outcome.result
            row.status = result.status
            row.reason = result.reason
            row.gatewayStatus = result.statusCode
            row.rejectedPushKeys = result.rejectedKeys
            row.tries = 1
            row.updatedAt = result.at
            row.nextAttemptAt = result.nextAttemptAt
            // The body is kept for the retries only (every try sends the same bytes).
            if result.status != "pending" {
                row.url = nil
                row.format = nil
                row.body = nil
            } else if let at = result.nextAttemptAt {
                work.nextRetry = min(work.nextRetry ?? at, at)
            }
            work.freshDone.append(row)
            work.freshApps.append(outcome.claimed.appID)
            work.lanes[outcome.claimed.appID]?.finished(step: step, now: now)
        }
    }

    /// The push settings of `appID` as this node sees them (the app directory: at once for a change made here, within
    /// its few seconds for one made on another node); nil for an app that no longer exists.
    private func settings(_ appID: String, on db: PostgresConnection) throws -> PushSettings? {
        try apps.app(appID, db: db).map { PushSettings($0.settings) }
    }

    /// Hands the batches this node's writer committed to their apps' lanes, counts those of apps without push, and
    /// marks the apps another writer of this node wrote to.
    private func take(_ batches: [CommittedEvents], sequenced: Set<String>, _ work: inout Work, now: Int64, on db: PostgresConnection) throws {
        var byApp: [String: [CommittedEvents]] = [:]
        for batch in batches { byApp[batch.appID, default: []].append(batch) }
        for appID in Set(byApp.keys).union(sequenced).sorted() {
            let appBatches = byApp[appID] ?? []
            guard let settings = try settings(appID, on: db), settings.configured else {
                metrics.skipped(appBatches.reduce(0) { $0 + Self.pushableMessages($1) })
                inbox.withLock { _ = $0.quiet.insert(appID) }
                if work.lanes[appID] != nil { try letGo(appID, &work, on: db) }
                continue
            }
            if work.lanes[appID] == nil {
                guard try acquire(appID, &work, now: now, on: db) else { continue }
            }
            for batch in appBatches {
                work.lanes[appID]?.receive(
                    batch.events.map { PushLogEvent(id: $0.id, type: $0.event.type, data: $0.event.data, fromLog: false) }, now: now)
            }
            if sequenced.contains(appID) { work.lanes[appID]?.wantsLog = true }
        }
    }

    /// The pushable messages among a batch's events (`parley_push_skipped_total`).
    private static func pushableMessages(_ batch: CommittedEvents) -> Int {
        batch.events.count { $0.event.type == "message.sent" && $0.event.roomID == nil && PushSources.isPushable(sentEvent: $0.event.data) }
    }

    /// Takes `appID`'s planning for this node (its advisory lock) and starts its lane at the app's cursor; false when
    /// another node plans it (asked again after ``elsewhereMillis``).
    private func acquire(_ appID: String, _ work: inout Work, now: Int64, on db: PostgresConnection) throws -> Bool {
        if let retry = work.elsewhere[appID], retry > now { return false }
        guard try PushStore.tryLock(appID: appID, lockClass: Self.lockClass, on: db) else {
            work.elsewhere[appID] = now + Self.elsewhereMillis
            inbox.withLock { _ = $0.quiet.insert(appID) }
            return false
        }
        work.elsewhere[appID] = nil
        inbox.withLock { _ = $0.quiet.remove(appID) }
        guard let cursor = try PushStore.cursor(appID: appID, on: db) else {
            // The app was deleted meanwhile.
            try PushStore.unlock(appID: appID, lockClass: Self.lockClass, on: db)
            return false
        }
        var lane = PushLane(appID: appID, cursor: cursor, now: now)
        lane.wantsLog = true
        work.lanes[appID] = lane
        return true
    }

    /// Stops planning `appID` on this node (push turned off, or idle): its tries in flight are still recorded.
    private func letGo(_ appID: String, _ work: inout Work, on db: PostgresConnection) throws {
        work.lanes[appID] = nil
        try PushStore.unlock(appID: appID, lockClass: Self.lockClass, on: db)
    }

    /// Lets go of the lanes that had nothing to do for ``idleLaneMillis``.
    private func releaseIdle(_ work: inout Work, now: Int64, on db: PostgresConnection) throws {
        for (appID, lane) in work.lanes where lane.isSettled && now - lane.lastActive >= Self.idleLaneMillis {
            try letGo(appID, &work, on: db)
        }
    }

    /// Looks at every app with push configured whose log is past its cursor: this node takes the ones nobody plans,
    /// and its lanes read the log when they stay behind the head (another node's or writer's events).
    private func poll(_ work: inout Work, now: Int64, on db: PostgresConnection) throws {
        for (appID, head) in try PushStore.behind(on: db) {
            if var lane = work.lanes[appID] {
                if lane.known < head {
                    // Behind the head two polls in a row: nobody handed those events over.
                    if let polled = lane.polledHead, lane.known < polled { lane.wantsLog = true }
                    lane.polledHead = head
                    work.lanes[appID] = lane
                }
            } else {
                _ = try acquire(appID, &work, now: now, on: db)
            }
        }
    }

    /// Plans what the lane has ready, reading the log first where it has to; returns the attempts to send.
    private func plan(_ lane: inout PushLane, budget: Int, _ work: inout Work, now: Int64, on db: PostgresConnection) throws
        -> [Outcome.Fresh]
    {
        if let range = lane.logRange(now: now, gapMillis: Self.gapMillis), lane.ready.count < Self.eventsPerStep {
            let read = try PushStore.log(appID: lane.appID, after: range.after, upTo: range.upTo, limit: Self.eventsPerStep, on: db)
            lane.take(log: read.events, through: read.through, reachedHead: range.upTo == nil && read.through >= read.head)
        } else {
            lane.noteGap(now: now)
        }
        guard !lane.ready.isEmpty, let settings = try settings(lane.appID, on: db) else { return [] }
        let step = try PushPlanner.planReady(&lane, budget: budget, settings: settings, now: clock.now(), on: db)
        metrics.took(step.taken)
        let id = lane.stepPlanned(open: step.pending.count)
        for row in step.suppressed {
            work.freshDone.append(row)
            work.freshApps.append(lane.appID)
        }
        return step.pending.map { Outcome.Fresh(row: $0, step: id, appID: lane.appID, settings: settings) }
    }

    /// One transaction records every try that ended and every fresh attempt, then moves the lanes' cursors over the
    /// steps now fully recorded.
    private func record(_ work: inout Work, on db: PostgresConnection) throws {
        var cursors: [(appID: String, cursor: PushPosition)] = []
        for appID in work.lanes.keys.sorted() {
            guard let cursor = work.lanes[appID]?.cursorToWrite() else { continue }
            if cursor == work.lanes[appID]?.durable { work.lanes[appID]?.wrote(cursor) } else { cursors.append((appID, cursor)) }
        }
        guard !work.leasedDone.isEmpty || !work.freshDone.isEmpty || !cursors.isEmpty else { return }
        let (leased, fresh, freshApps) = (work.leasedDone, work.freshDone, work.freshApps)
        let now = clock.now()
        let finished = Array(zip(freshApps, fresh))
        let rejected = finished.filter { !$0.1.rejectedPushKeys.isEmpty }.map {
            PushStore.Tried(
                appID: $0.0, userID: $0.1.userID, deviceIDs: $0.1.deviceIDs, pushKeys: $0.1.pushKeys, rejectedKeys: $0.1.rejectedPushKeys,
                status: $0.1.status)
        }
        let apps: [String]
        do {
            apps = try write(leased: leased, finished: finished, rejected: rejected, cursors: cursors, now: now, on: db)
        } catch let error as PostgresError where error.isForeignKeyViolation {
            // An app was deleted meanwhile (its attempts and cursor went with it): record the others.
            let existing = Set(try PushStore.existingApps(Array(Set(freshApps + cursors.map(\.appID))), on: db))
            apps = try write(
                leased: leased, finished: finished.filter { existing.contains($0.0) }, rejected: rejected.filter { existing.contains($0.appID) },
                cursors: cursors.filter { existing.contains($0.appID) }, now: now, on: db)
        }
        metrics.recorded(leased.map { ($0.claimed.kind, $0.result.status) } + fresh.map { ($0.kind, $0.status) })
        work.leasedDone = []
        work.freshDone = []
        work.freshApps = []
        for (appID, cursor) in cursors { work.lanes[appID]?.wrote(cursor) }
        for appID in Set(apps).sorted() { eventsWritten(appID) }
    }

    /// The statements of ``record(_:on:)``: one on its own in the common round, else one transaction.
    private func write(
        leased: [Outcome], finished: [(String, PushAttemptRow)], rejected: [PushStore.Tried], cursors: [(appID: String, cursor: PushPosition)],
        now: Int64, on db: PostgresConnection
    ) throws -> [String] {
        let apps: [String]
        if leased.isEmpty && rejected.isEmpty {
            // The common round: one statement, committed on its own.
            try PushStore.recordFinished(finished.map { ($0.0, $0.1) }, cursors: cursors, now: now, on: db)
            apps = []
        } else {
            apps = try db.transaction { db -> [String] in
                var apps = leased.isEmpty ? [] : try Self.record(leased, now: now, on: db)
                try PushStore.recordFinished(finished.map { ($0.0, $0.1) }, cursors: cursors, now: now, on: db)
                apps += try PushStore.deviceEffects(of: rejected, rejectedOnly: true, now: now, on: db)
                return apps
            }
        }
        return apps
    }

    /// Hands the round's tries to the sender threads, in chunks sized by the gateways' recent latency.
    private func send(fresh: [Outcome.Fresh], leased: [Claimed], _ work: inout Work) {
        let tries: [(Claimed, Origin)] =
            fresh.map { f in
                (
                    Claimed(
                        attemptID: f.row.attemptID, appID: f.appID, kind: f.row.kind, url: f.row.url ?? "", format: f.settings.format,
                        body: Array((f.row.body ?? "").utf8), attempt: 1, maxAttempts: f.settings.maxAttempts,
                        timeoutMillis: f.settings.timeoutMillis, secret: f.settings.secret, pushKeys: f.row.pushKeys),
                    Origin.fresh(row: f.row, step: f.step)
                )
            } + leased.map { ($0, Origin.leased) }
        guard !tries.isEmpty else { return }
        work.inFlight += tries.count
        let latency = gatewayMillis.withLock { $0 }
        let chunks = min(tries.count, max(1, Int((Double(tries.count) * latency / Self.chunkMillis).rounded(.up))), 64)
        let size = (tries.count + chunks - 1) / chunks
        var start = 0
        while start < tries.count {
            let chunk = Array(tries[start..<min(start + size, tries.count)])
            start += size
            senders.run { [self] in
                let outcomes = chunk.map { claimed, origin in Outcome(claimed: claimed, result: send(claimed), origin: origin) }
                loop.post(outcomes)
            }
        }
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
        return try rows.decode((String, String, String, String, PostgresTextBytes, Int, [String], String?, String).self).map {
            (attemptID, appID, url, format, body, tries, pushKeys, push, kind) in
            let settings = PushSettings(push: push.flatMap { (try? JSONValue.parse($0))?.objectValue } ?? JSONObject())
            return Claimed(
                attemptID: attemptID, appID: appID, kind: kind, url: url, format: PushSettings.Format(rawValue: format) ?? .matrix,
                body: body.bytes, attempt: tries + 1, maxAttempts: settings.maxAttempts, timeoutMillis: settings.timeoutMillis,
                secret: settings.secret, pushKeys: pushKeys)
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
        gatewayMillis.withLock { $0 = 0.9 * $0 + 0.1 * Double(max(attempt.durationMillis, 0)) }
        return PushResult(attempt: attempt, tryNumber: item.attempt, maxAttempts: item.maxAttempts, pushKeys: item.pushKeys, at: now)
    }

    /// Records finished tries of leased attempts in the caller's transaction: each attempt's status, then the
    /// rejected keys' devices deleted (`device.removed`, reason `rejected`) and the others' `last_push_at`. An attempt
    /// stopped meanwhile (a revoke) keeps its status. Returns the apps that got events.
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
        let tried = try changed.decode((String, String, [String], [String], [String], String).self).map {
            PushStore.Tried(appID: $0.0, userID: $0.1, deviceIDs: $0.2, pushKeys: $0.3, rejectedKeys: $0.4, status: $0.5)
        }
        return try PushStore.deviceEffects(of: tried, now: now, on: db)
    }
}

extension PushBridge.Outcome {
    /// A fresh attempt planned this round, to be sent.
    struct Fresh: Sendable {
        let row: PushAttemptRow
        let step: Int
        let appID: String
        let settings: PushSettings
    }
}

/// What one try of an attempt came to (docs/push.md#how-the-bridge-sends): `sent` / `rejected` on a 2xx answer (with
/// its `rejected` keys), `pending` again after a network error, timeout or 5xx while tries remain (after 1 s, 2 s, 4 s
/// …), else `failed`.
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

/// The push part of `/metrics`: attempts by kind and outcome and the gateway's latency (docs/push.md,
/// docs/operations.md#health-readiness-and-metrics); the queue's depth is read from the database when scraped.
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
        /// Pushable-type events the bridge read from the log, and those handed over in memory, by type (not exported:
        /// the tests check that what this node writes is not read back).
        var fromLog: [String: Int] = [:]
        var handedOver: [String: Int] = [:]
    }

    private let state = LockedValue(State())

    /// Events the bridge took from the log (`fromLog`) or from its node's writer.
    func took(_ events: [PushLogEvent]) {
        guard !events.isEmpty else { return }
        state.withLock { s in
            for event in events where PushPlanner.pushableEventTypes.contains(event.type) {
                if event.fromLog { s.fromLog[event.type, default: 0] += 1 } else { s.handedOver[event.type, default: 0] += 1 }
            }
        }
    }

    /// How many events of `type` the bridge took from the log and from its node's writer (tests).
    package func taken(_ type: String) -> (fromLog: Int, handedOver: Int) {
        state.withLock { ($0.fromLog[type, default: 0], $0.handedOver[type, default: 0]) }
    }

    /// `count` pushable items were not planned because their app has push off or no gateway.
    func skipped(_ count: Int) {
        guard count > 0 else { return }
        state.withLock { $0.skipped += count }
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
