import ParleyAPI
import ParleyCore
import ParleyDomains
import ParleyLive
import ParleyPostgres

/// What `GET /v1/stats` and `/metrics` read from the database (docs/operations.md), gathered from the stores of
/// each domain so the routes only render.
enum StatsService {
    /// The counts of `GET /v1/stats` for one app.
    struct AppStats {
        var counts: StatsStore.Counts
        var callsActive: Int64
        var pushSent: Int64
        var pushFailed: Int64
        var files: (files: Int64, bytes: Int64)
    }

    /// The app's statistics over the last day before `now`; 404 `not_found` when the app does not exist.
    static func appStats(appID: String, now: Int64, on db: PostgresConnection) throws -> AppStats {
        let since = now - 86_400_000
        guard let counts = try StatsStore.counts(appID: appID, since: since, on: db) else {
            throw APIError(.notFound, "app \(appID) does not exist")
        }
        let push = try PushBridge.counts(appID: appID, since: since, on: db)
        return AppStats(
            counts: counts, callsActive: try CallStore.activeCount(appID: appID, on: db), pushSent: push.sent, pushFailed: push.failed,
            files: try FileService(db: db, appID: appID, now: now).usage())
    }

    /// The database gauges of `/metrics`, each nil when its read failed (the rest of the page still renders).
    struct Gauges {
        var webhookQueue: (depth: Int64, oldestMillis: Int64)?
        var pushQueueDepth: Int64?
        var eventHeads: [(appID: String, head: Int64)]?
        var fileUsage: [(appID: String, files: Int64, bytes: Int64)]?
    }

    /// The gauges, each read on a pool connection of its own.
    static func gauges(pool: PostgresPool, now: Int64) -> Gauges {
        Gauges(
            webhookQueue: try? pool.withConnection { db in try StatsStore.webhookQueue(now: now, on: db) },
            pushQueueDepth: try? pool.withConnection { db in try PushBridge.queueDepth(on: db) },
            eventHeads: try? pool.withConnection { db in try StatsStore.eventHeads(on: db) },
            fileUsage: try? pool.withConnection { db in try StatsStore.fileUsage(on: db) })
    }
}

/// `GET /v1/stats/series` (docs/operations.md#activity-series): one app's per-minute figures as buckets of a minute
/// (`1h`) or an hour (`7d`), aligned to the minute or hour (UTC), the last being the current (partial) one.
enum StatsSeries {
    /// A range of the series: how many buckets and how long each is.
    struct Range {
        let name: String
        let buckets: Int64
        let stepMillis: Int64
    }

    static let ranges = [Range(name: "1h", buckets: 60, stepMillis: 60_000), Range(name: "7d", buckets: 168, stepMillis: 3_600_000)]
    /// Every metric, in the order of the answer.
    static let metrics = [
        "messages", "active_users", "streams_open", "webhook_backlog", "webhook_latency_ms", "push_sent", "push_failed", "http_4xx",
        "http_5xx",
    ]
    /// The counts: a bucket holds the sum of its minutes (the others: their max).
    static let counts: Set<String> = ["messages", "push_sent", "push_failed", "http_4xx", "http_5xx"]

    /// The series of `appID` over `range` ending with the bucket holding `now`, for `metrics`: each metric's values
    /// oldest first, nil for a bucket the sampler never ran in (and, for `webhook_latency_ms`, one without a delivery).
    static func series(
        appID: String, range: Range, metrics wanted: [String], now: Int64, on db: PostgresConnection
    ) throws -> (from: Int64, to: Int64, series: [(metric: String, values: [Double?])]) {
        let to = now - now % range.stepMillis + range.stepMillis
        let from = to - range.buckets * range.stepMillis
        let rows = try StatsMinutesStore.buckets(appID: appID, from: from, to: to, stepMillis: range.stepMillis, on: db)
        let sampled = Set(try StatsMinutesStore.sampledBuckets(from: from, to: to, stepMillis: range.stepMillis, on: db))
        var found: [String: [Int64: Double]] = [:]
        for row in rows where row.bucket >= 0 && row.bucket < range.buckets {
            found[row.metric, default: [:]][row.bucket] = counts.contains(row.metric) ? row.sum : row.max
        }
        let series = wanted.map { metric in
            let values = (0..<range.buckets).map { bucket -> Double? in
                if let value = found[metric]?[bucket] { return value }
                // Sampled without a row: nothing happened (0), except a latency without a delivery, which has none.
                return sampled.contains(bucket) && metric != "webhook_latency_ms" ? 0 : nil
            }
            return (metric: metric, values: values)
        }
        return (from, to, series)
    }
}
