import ParleyAPI
import ParleyCore
import ParleyPostgres

/// Drops finished webhook deliveries after 7 days (docs/webhooks.md#endpoints), every ten minutes. Open deliveries are
/// kept however old: a paused endpoint's deliveries do not age (docs/webhooks.md#how-deliveries-are-made), and others
/// end `dead` within about a day.
package enum WebhookRetention {
    package static let kind = TimerKind(name: "webhook_retention", everyMillis: 600_000) { services, now in
        try services.pool.withConnection { db in try DeliveryStore.deleteExpired(now: now, on: db) }
    }
}
