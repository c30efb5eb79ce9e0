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
