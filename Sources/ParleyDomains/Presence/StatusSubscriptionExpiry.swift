import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The expiry of status subscriptions (docs/users.md#presence): an expired subscription is removed silently (no event).
///
/// Reads and the subscription limit already ignore expired rows; this timer only reclaims them. It owns nothing:
/// each batch is one transaction that claims its rows atomically.
package enum StatusSubscriptionExpiry {
    /// Subscriptions deleted per transaction, so one sweep never holds a huge batch of row locks.
    static let batchSize = 1000

    package static let kind = TimerKind(name: "status_subscription_expiry") { services, now in
        var fired = 0
        while true {
            let count = try services.pool.transaction { db in
                try PresenceStore.deleteExpired(now: now, limit: batchSize, on: db)
            }
            fired += count
            if count < batchSize { return fired }
        }
    }
}
