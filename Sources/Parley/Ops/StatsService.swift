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
