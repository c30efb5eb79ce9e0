import ParleyAPI
import ParleyCore
import ParleyPostgres

/// Drops finished webhook deliveries after 7 days (API.md §15.1), every ten minutes. Open deliveries are kept
/// however old: a paused endpoint's deliveries do not age (§15.2), and others end `dead` within about a day.
package enum WebhookRetention {
    package static let kind = TimerKind(name: "webhook_retention", everyMillis: 600_000) { services, now in
        try services.pool.withConnection { db in try DeliveryStore.deleteExpired(now: now, on: db) }
    }
}
