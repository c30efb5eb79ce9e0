import ParleyAPI
import ParleyCore
import ParleyPostgres

/// Writes the per-minute activity figures of every app (`stats_minutes`, docs/operations.md#activity-series) that
/// `GET /v1/stats/series` reads.
///
/// A timer kind (``TimerKind``) running on every node every `PARLEY_STATS_SAMPLE_MS` (60 s):
/// - each node adds its own HTTP error counts (``AppErrorTally``) with an upsert that adds: only it knows them;
/// - one node per interval samples: in the pass's transaction it takes the sampler's advisory lock without waiting
///   (as the push bridge owns an app's planning: ``PushStore``), so a node finding it held skips the pass, and then
///   claims the interval: it marks the minute in `stats_samples` unless a mark of this minute or the one before is
///   less than most of an interval old. The lock serialises the claims, the marks say who sampled last. The pass reads every app at once, a fixed handful of statements whatever the
///   number of apps: the stream and backlog gauges, and the counts of the previous and the current minute (messages,
///   push, webhook latency), recounted in full so a minute first sampled while partial ends complete. A pass is
///   idempotent, so a pass repeated (a test-clock advance, a clock skew between nodes) writes the same figures.
///   Then it deletes the figures older than 7 days.
struct StatsSampler {
    /// How long figures are kept (the `7d` range).
    static let keepMillis: Int64 = 7 * 86_400_000

    let everyMillis: Int64
    /// This node, as recorded in `stats_samples.node`.
    let node: String

    init(everyMillis: Int64, node: String = String(UInt64.random(in: 0...UInt64.max), radix: 36)) {
        self.everyMillis = everyMillis
        self.node = node
    }

    var kind: TimerKind {
        let sampler = self
        return TimerKind(name: "stats_sampler", everyMillis: everyMillis) { services, now in
            let added = try Self.flushErrors(services: services)
            return added + (try sampler.pass(services: services, now: now) ? 1 : 0)
        }
    }

    /// Adds this node's HTTP error counts to the figures; on failure they are kept for the next interval. Returns how
    /// many figures it added to.
    @discardableResult
    static func flushErrors(services: Services) throws -> Int {
        let taken = services.appErrors.take()
        if taken.isEmpty { return 0 }
        do {
            try services.pool.withConnection { db in
                // In key order, so two nodes adding to the same rows lock them in the same order.
                let counts = taken.map { (appID: $0.key.appID, minute: $0.key.minute, metric: $0.key.metric, value: $0.value) }
                    .sorted { ($0.appID, $0.minute, $0.metric) < ($1.appID, $1.minute, $1.metric) }
                try StatsMinutesStore.add(counts, on: db)
            }
        } catch {
            services.appErrors.giveBack(taken)
            throw error
        }
        return taken.count
    }

    /// One sampling at `now` when this node claims it; false when another node sampled this interval.
    @discardableResult
    func pass(services: Services, now: Int64) throws -> Bool {
        let minute = now - now % 60_000
        // Most of an interval: a pass whose tick came a little early still samples; two nodes cannot both claim one
        // interval (the lock lets one claim at a time, and the next finds the first's mark).
        let gap = max(1, everyMillis * 9 / 10)
        return try services.pool.transaction { db in
            guard try StatsMinutesStore.claim(minute: minute, now: now, gapMillis: gap, node: node, on: db) else { return false }
            try Self.sample(minute: minute, on: db)
            _ = try StatsMinutesStore.trim(before: minute - Self.keepMillis, on: db)
            return true
        }
    }

    /// The figures of `minute` (gauges) and of the minute before and this one (counts), for every app.
    static func sample(minute: Int64, on db: PostgresConnection) throws {
        try StatsMinutesStore.sampleStreams(minute: minute, on: db)
        try StatsMinutesStore.sampleWebhookBacklog(minute: minute, on: db)
        let since = minute - 60_000
        try StatsMinutesStore.countMessages(since: since, on: db)
        try StatsMinutesStore.countPush(since: since, on: db)
        try StatsMinutesStore.webhookLatency(since: since, on: db)
    }
}
