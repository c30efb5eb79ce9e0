import ParleyAPI
import ParleyCore
import ParleyPostgres

/// Purges stored messages older than each app's `history_retention_days` (docs/users.md#apps-and-settings; 0 = keep
/// forever), at least hourly. Sequences are untouched, so numbering continues after a purge and seqs are never reused
/// (docs/messages.md#sequence-numbers); `client_msg_id` keys stay, so a retried send of a purged message answers with
/// its tombstone (docs/messages.md#deduplication-with-client_msg_id). The combine snapshots of purged type-100 messages
/// go with them. Writes no events.
///
/// Deletes in batches of `batchSize`, one transaction each, so a first purge of a large history never holds one
/// long transaction; concurrent runs only delete the same rows once.
package enum HistoryRetention {
    static let batchSize = 5_000

    package static let kind = TimerKind(name: "history_retention", everyMillis: 3_600_000) { services, now in
        let apps = try services.pool.withConnection { db in
            try db.query(
                """
                SELECT app_id, (settings->>'history_retention_days')::bigint FROM apps
                WHERE coalesce((settings->>'history_retention_days')::bigint, 0) > 0 ORDER BY app_id
                """, prepared: false
            ).decode((String, Int64).self).map { (appID: $0.0, days: $0.1) }
        }
        var purged = 0
        for app in apps {
            let horizon = now - app.days * 86_400_000
            while true {
                let count = try services.pool.withConnection { db in
                    try db.query(
                        """
                        WITH gone AS (
                            DELETE FROM messages m
                            WHERE m.ctid = ANY(ARRAY(SELECT ctid FROM messages WHERE app_id = \(app.appID) AND timestamp < \(horizon) LIMIT \(batchSize)))
                            RETURNING m.type, m.body
                        ), snapshots AS (
                            DELETE FROM message_combines c USING gone
                            WHERE gone.type = 100 AND c.app_id = \(app.appID) AND c.combine_id = gone.body::json->>'combine_id'
                        )
                        SELECT count(*) FROM gone
                        """
                    ).decodeFirst(Int64.self) ?? 0
                }
                purged += Int(count)
                if count < batchSize { break }
            }
        }
        return purged
    }
}
