import ParleyAPI
import ParleyCore
import ParleyPostgres

/// Drops push attempts after 7 days (docs/push.md#the-attempt-log), every ten minutes; pending ones finish within
/// seconds, so age alone decides.
package enum PushRetention {
    static let keptMillis: Int64 = 7 * 86_400_000

    package static let kind = TimerKind(name: "push_retention", everyMillis: 600_000) { services, now in
        try services.pool.withConnection { db in try deleteExpired(now: now, on: db) }
    }

    static func deleteExpired(now: Int64, on db: PostgresConnection) throws -> Int {
        try db.query("DELETE FROM push_attempts WHERE created_at < \(now - keptMillis) AND status <> 'pending'").affectedRows
    }
}
