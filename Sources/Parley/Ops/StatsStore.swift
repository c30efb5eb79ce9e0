import ParleyAPI
import ParleyCore
import ParleyDomains
import ParleyLive
import ParleyPostgres

/// SQL for the app statistics (`GET /v1/stats`, docs/api.md#getstats) and the event-log heads of `/metrics`. No rules
/// here.
enum StatsStore {
    /// The counts of one app, read in one statement.
    struct Counts {
        var usersTotal: Int64
        var usersOnline: Int64
        var groupsTotal: Int64
        var messagesStored: Int64
        var messagesSince: Int64
        /// User streams open on any node (app-level streams are not recorded in the database).
        var userStreams: Int64
        var eventLogHead: Int64
        var eventLogTrimPoint: Int64
        /// Webhook deliveries still to go (pending or failed), and those that died since `since`.
        var webhookPending: Int64
        var webhookDeadSince: Int64
        /// Rooms that exist (created and not destroyed).
        var roomsActive: Int64
    }

    /// The app's counts, messages since `since` (server-clock ms); nil when there is no such app.
    static func counts(appID: String, since: Int64, on db: PostgresConnection) throws -> Counts? {
        try db.query(
            """
            SELECT (SELECT count(*) FROM users WHERE app_id = \(appID) AND deleted_at IS NULL),
                   (SELECT count(*) FROM user_statuses WHERE app_id = \(appID) AND online_status = 'online'),
                   (SELECT count(*) FROM groups WHERE app_id = \(appID) AND dismissed_at IS NULL),
                   (SELECT count(*) FROM messages WHERE app_id = \(appID)),
                   (SELECT count(*) FROM messages WHERE app_id = \(appID) AND timestamp > \(since)),
                   (SELECT count(*) FROM user_streams WHERE app_id = \(appID)),
                   h.head, h.trim_point,
                   (SELECT count(*) FROM webhook_deliveries WHERE app_id = \(appID) AND status IN ('pending', 'failed')),
                   (SELECT count(*) FROM webhook_deliveries WHERE app_id = \(appID) AND status = 'dead' AND last_attempt_at > \(since)),
                   (SELECT count(*) FROM rooms WHERE app_id = \(appID))
            FROM event_heads h WHERE h.app_id = \(appID)
            """, prepared: false
        ).decodeFirst((Int64, Int64, Int64, Int64, Int64, Int64, Int64, Int64, Int64, Int64, Int64).self).map {
            Counts(
                usersTotal: $0.0, usersOnline: $0.1, groupsTotal: $0.2, messagesStored: $0.3, messagesSince: $0.4, userStreams: $0.5,
                eventLogHead: $0.6, eventLogTrimPoint: $0.7, webhookPending: $0.8, webhookDeadSince: $0.9, roomsActive: $0.10)
        }
    }

    /// Open webhook deliveries in every app, and the age of the oldest (server-clock ms; 0 without any).
    static func webhookQueue(now: Int64, on db: PostgresConnection) throws -> (depth: Int64, oldestMillis: Int64) {
        let row = try db.query(
            """
            SELECT count(*), coalesce(\(now) - min(created_at), 0) FROM webhook_deliveries
            WHERE status IN ('pending', 'failed') AND NOT paused
            """
        ).decodeFirst((Int64, Int64).self)
        return (row?.0 ?? 0, max(0, row?.1 ?? 0))
    }

    /// The newest event id of every app, by app id.
    static func eventHeads(on db: PostgresConnection) throws -> [(appID: String, head: Int64)] {
        try db.query("SELECT app_id, head FROM event_heads ORDER BY app_id", prepared: false).decode((String, Int64).self)
    }

    /// Each app's live files and stored bytes (one row per app that ever stored a file).
    static func fileUsage(on db: PostgresConnection) throws -> [(appID: String, files: Int64, bytes: Int64)] {
        try db.query("SELECT app_id, files, bytes FROM file_usage ORDER BY app_id", prepared: false).decode((String, Int64, Int64).self)
            .map { (appID: $0.0, files: $0.1, bytes: $0.2) }
    }
}

/// SQL of the per-minute activity figures (`stats_minutes`, `stats_samples`; docs/operations.md#activity-series): the
/// sampler's statements, each over every app at once, and the series read of one app. No rules here.
enum StatsMinutesStore {
    /// The gauges (max within a minute: a second sample of the same minute keeps the larger value).
    static let gauges = ["active_users", "streams_open", "webhook_backlog"]

    /// The advisory-lock class of the sampler (ASCII "STAT"); the object is 0.
    static let lockClass: Int32 = 0x5354_4154

    /// Claims the sampling of the interval for `node`, in the sampler's transaction: takes the sampler's transaction
    /// advisory lock without waiting (a node sampling right now keeps it), then records that `minute` (the start of
    /// `now`'s minute) was sampled, unless a node sampled less than `gapMillis` ago (this minute or the one before; a
    /// mark far in the future, from a clock that went back, does not count). True when this node is to sample.
    static func claim(minute: Int64, now: Int64, gapMillis: Int64, node: String, on db: PostgresConnection) throws -> Bool {
        guard try db.query("SELECT pg_try_advisory_xact_lock(\(Int(lockClass))::int, 0)").decodeFirst(Bool.self) ?? false else {
            return false
        }
        return try db.query(
            """
            INSERT INTO stats_samples AS s (minute, sampled_at, node)
            SELECT \(minute), \(now), \(node)
            WHERE NOT EXISTS (SELECT 1 FROM stats_samples WHERE minute >= \(minute - 60_000)
                                AND sampled_at > \(now - gapMillis) AND sampled_at <= \(now + 3_600_000))
            ON CONFLICT (minute) DO UPDATE SET sampled_at = excluded.sampled_at, node = excluded.node
            RETURNING minute
            """
        ).decodeFirst(Int64.self) != nil
    }

    /// The stream gauges of every app with an open user stream, as `minute`'s figures: users with a presence-counting
    /// stream (online) and user streams. One pass over `user_streams` (its rows are the open streams).
    static func sampleStreams(minute: Int64, on db: PostgresConnection) throws {
        try db.query(
            """
            INSERT INTO stats_minutes (app_id, minute, metric, value)
            SELECT s.app_id, \(minute), v.metric, v.value
            FROM (SELECT app_id, count(DISTINCT user_id) FILTER (WHERE counts_presence) AS users, count(*) AS streams
                  FROM user_streams GROUP BY app_id) s
            CROSS JOIN LATERAL (VALUES ('active_users', s.users::float8), ('streams_open', s.streams::float8)) v (metric, value)
            WHERE v.value > 0
            ON CONFLICT (app_id, minute, metric) DO UPDATE SET value = greatest(stats_minutes.value, excluded.value)
            """)
    }

    /// Every app's open webhook deliveries (pending or failed) as `minute`'s backlog, read through the partial index of
    /// open deliveries (`webhook_deliveries_open_key`).
    static func sampleWebhookBacklog(minute: Int64, on db: PostgresConnection) throws {
        try db.query(
            """
            INSERT INTO stats_minutes (app_id, minute, metric, value)
            SELECT app_id, \(minute), 'webhook_backlog', count(*) FROM webhook_deliveries
            WHERE status IN ('pending', 'failed') GROUP BY app_id
            ON CONFLICT (app_id, minute, metric) DO UPDATE SET value = greatest(stats_minutes.value, excluded.value)
            """)
    }

    /// Messages stored in every app per minute from `since` (a minute's start) on, through the time index of
    /// `messages`; each minute's count replaces the one stored (a later pass recounts a minute that was partial).
    /// The window statements are planned for their value (not prepared): a generic plan of `timestamp >= $1` guesses a
    /// third of the table and may scan all of it.
    static func countMessages(since: Int64, on db: PostgresConnection) throws {
        try db.query(
            """
            INSERT INTO stats_minutes (app_id, minute, metric, value)
            SELECT app_id, timestamp - timestamp % 60000, 'messages', count(*) FROM messages
            WHERE timestamp >= \(since) GROUP BY 1, 2
            ON CONFLICT (app_id, minute, metric) DO UPDATE SET value = excluded.value
            """, prepared: false)
    }

    /// Push attempts created in every app per minute from `since` on that were sent, and that failed, through
    /// `push_attempts_created`; replaces the stored counts.
    static func countPush(since: Int64, on db: PostgresConnection) throws {
        try db.query(
            """
            INSERT INTO stats_minutes (app_id, minute, metric, value)
            SELECT p.app_id, p.minute, v.metric, v.value
            FROM (SELECT app_id, created_at - created_at % 60000 AS minute, count(*) FILTER (WHERE status = 'sent') AS sent,
                         count(*) FILTER (WHERE status = 'failed') AS failed
                  FROM push_attempts WHERE created_at >= \(since) GROUP BY 1, 2) p
            CROSS JOIN LATERAL (VALUES ('push_sent', p.sent::float8), ('push_failed', p.failed::float8)) v (metric, value)
            WHERE v.value > 0
            ON CONFLICT (app_id, minute, metric) DO UPDATE SET value = excluded.value
            """, prepared: false)
    }

    /// The 95th percentile of the time from queueing to success (ms) of every app's webhook deliveries created per
    /// minute from `since` on that have succeeded, through `webhook_deliveries_finished`; replaces the stored value.
    static func webhookLatency(since: Int64, on db: PostgresConnection) throws {
        try db.query(
            """
            INSERT INTO stats_minutes (app_id, minute, metric, value)
            SELECT app_id, created_at - created_at % 60000, 'webhook_latency_ms',
                   percentile_cont(0.95) WITHIN GROUP (ORDER BY greatest(0, last_attempt_at + coalesce(duration_ms, 0) - created_at))
            FROM webhook_deliveries
            WHERE status = 'succeeded' AND created_at >= \(since) AND last_attempt_at IS NOT NULL GROUP BY 1, 2
            ON CONFLICT (app_id, minute, metric) DO UPDATE SET value = excluded.value
            """, prepared: false)
    }

    /// Adds counts to the figures (a node's HTTP error counts): each (app, minute, metric) gets `value` more. Counts of
    /// an app deleted meanwhile are dropped.
    static func add(_ counts: [(appID: String, minute: Int64, metric: String, value: Int64)], on db: PostgresConnection) throws {
        try db.query(
            """
            INSERT INTO stats_minutes (app_id, minute, metric, value)
            SELECT c.app_id, c.minute, c.metric, c.value
            FROM unnest(\(counts.map(\.appID))::text[], \(counts.map(\.minute))::bigint[], \(counts.map(\.metric))::text[],
                        \(counts.map { Double($0.value) })::float8[]) AS c (app_id, minute, metric, value)
            WHERE EXISTS (SELECT 1 FROM apps a WHERE a.app_id = c.app_id)
            ON CONFLICT (app_id, minute, metric) DO UPDATE SET value = stats_minutes.value + excluded.value
            """, prepared: false)
    }

    /// Deletes the figures and sample marks of minutes before `before` (the trim of 7 days), through
    /// `stats_minutes_minute`; returns how many figures went.
    static func trim(before: Int64, on db: PostgresConnection) throws -> Int {
        try db.query("DELETE FROM stats_samples WHERE minute < \(before)")
        return try db.query("DELETE FROM stats_minutes WHERE minute < \(before)").affectedRows
    }

    /// One app's figures in [`from`, `to`) by bucket of `stepMillis` (0 is the bucket starting at `from`) and metric:
    /// the sum and the max of the bucket's minutes. At most buckets × metrics rows.
    static func buckets(
        appID: String, from: Int64, to: Int64, stepMillis: Int64, on db: PostgresConnection
    ) throws -> [(bucket: Int64, metric: String, sum: Double, max: Double)] {
        try db.query(
            """
            SELECT (minute - \(from)) / \(stepMillis), metric, sum(value), max(value) FROM stats_minutes
            WHERE app_id = \(appID) AND minute >= \(from) AND minute < \(to)
            GROUP BY 1, 2
            """
        ).decode((Int64, String, Double, Double).self).map { (bucket: $0.0, metric: $0.1, sum: $0.2, max: $0.3) }
    }

    /// The buckets of [`from`, `to`) that hold a minute the sampler ran in.
    static func sampledBuckets(from: Int64, to: Int64, stepMillis: Int64, on db: PostgresConnection) throws -> [Int64] {
        try db.query(
            """
            SELECT DISTINCT (minute - \(from)) / \(stepMillis) FROM stats_samples WHERE minute >= \(from) AND minute < \(to)
            """
        ).decode(Int64.self)
    }
}
