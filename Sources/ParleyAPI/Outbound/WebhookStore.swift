import ParleyCore
import ParleyPostgres

/// SQL for webhook endpoints (docs/webhooks.md#endpoints). No rules here: ``WebhookService`` checks inputs and
/// conflicts.
package enum WebhookStore {
    package static let columns = """
        webhook_id, url, event_types, secret, previous_secret, previous_secret_until, enabled, disabled_reason, description,
        timeout_ms, fail_open, disable_after_failures, disable_after_s, consecutive_failures, created_at, updated_at
        """

    /// A row of ``columns``.
    package static func webhook(_ row: PostgresRow) throws -> Webhook {
        let (
            webhookID, url, eventTypes, secret, previousSecret, previousSecretUntil, enabled, disabledReason, description,
            timeoutMillis, failOpen, disableAfterFailures, disableAfterSeconds, consecutiveFailures, createdAt, updatedAt
        ) = try row.decode((String, String, [String], String, String?, Int64?, Bool, String?, String, Int, Bool, Int, Int, Int, Int64, Int64).self)
        return Webhook(
            webhookID: webhookID, url: url, eventTypes: eventTypes, secret: secret, previousSecret: previousSecret,
            previousSecretUntil: previousSecretUntil, enabled: enabled, disabledReason: disabledReason, description: description,
            timeoutMillis: timeoutMillis, failOpen: failOpen, disableAfterFailures: disableAfterFailures,
            disableAfterSeconds: disableAfterSeconds, consecutiveFailures: consecutiveFailures, createdAt: createdAt, updatedAt: updatedAt)
    }

    package static func count(appID: String, on db: PostgresConnection) throws -> Int {
        try db.query("SELECT count(*) FROM webhooks WHERE app_id = \(appID)").decodeFirst(Int.self) ?? 0
    }

    package static func fetch(appID: String, webhookID: String, forUpdate: Bool = false, on db: PostgresConnection) throws -> Webhook? {
        try db.query(
            """
            SELECT \(unsafeSQL: columns) FROM webhooks WHERE app_id = \(appID) AND webhook_id = \(webhookID) \(unsafeSQL: forUpdate ? "FOR UPDATE" : "")
            """, prepared: false
        ).first.map(webhook)
    }

    /// The enabled endpoint serving the before-event `type`, if any (at most one per type,
    /// docs/webhooks.md#before-event-hooks).
    package static func beforeHook(appID: String, type: String, on db: PostgresConnection) throws -> Webhook? {
        try db.query(
            """
            SELECT \(unsafeSQL: columns) FROM webhooks
            WHERE app_id = \(appID) AND webhook_id = (SELECT webhook_id FROM webhook_before_hooks WHERE app_id = \(appID) AND hook_type = \(type))
              AND enabled
            """
        ).first.map(webhook)
    }

    /// The app's endpoints by `created_at`, then `webhook_id`, after the cursor position.
    package static func list(appID: String, after: (Int64, String)?, limit: Int, on db: PostgresConnection) throws -> [Webhook] {
        try db.query(
            """
            SELECT \(unsafeSQL: columns) FROM webhooks
            WHERE app_id = \(appID) AND (\(after?.0)::bigint IS NULL OR (created_at, webhook_id) > (\(after?.0), \(after?.1)))
            ORDER BY created_at, webhook_id LIMIT \(limit)
            """
        ).rows.map(webhook)
    }

    package static func insert(appID: String, _ w: Webhook, on db: PostgresConnection) throws {
        try db.query(
            """
            INSERT INTO webhooks (app_id, webhook_id, url, event_types, secret, enabled, disabled_reason, description, timeout_ms,
                                  fail_open, disable_after_failures, disable_after_s, consecutive_failures, created_at, updated_at)
            VALUES (\(appID), \(w.webhookID), \(w.url), \(w.eventTypes), \(w.secret), \(w.enabled), \(w.disabledReason),
                    \(w.description), \(w.timeoutMillis), \(w.failOpen), \(w.disableAfterFailures), \(w.disableAfterSeconds), 0, \(w.createdAt),
                    \(w.updatedAt))
            """)
    }

    /// Writes every mutable field of `w` over its row.
    package static func update(appID: String, _ w: Webhook, on db: PostgresConnection) throws {
        try db.query(
            """
            UPDATE webhooks SET url = \(w.url), event_types = \(w.eventTypes), secret = \(w.secret), previous_secret = \(w.previousSecret),
                   previous_secret_until = \(w.previousSecretUntil), enabled = \(w.enabled), disabled_reason = \(w.disabledReason),
                   description = \(w.description), timeout_ms = \(w.timeoutMillis), fail_open = \(w.failOpen),
                   disable_after_failures = \(w.disableAfterFailures), disable_after_s = \(w.disableAfterSeconds),
                   consecutive_failures = \(w.consecutiveFailures),
                   first_failure_at = CASE WHEN \(w.consecutiveFailures) = 0 THEN NULL ELSE first_failure_at END, updated_at = \(w.updatedAt)
            WHERE app_id = \(appID) AND webhook_id = \(w.webhookID)
            """)
    }

    package static func delete(appID: String, webhookID: String, on db: PostgresConnection) throws -> Bool {
        !(try db.query("DELETE FROM webhooks WHERE app_id = \(appID) AND webhook_id = \(webhookID) RETURNING 1").rows.isEmpty)
    }

    /// Makes the before-hook claims of `w` what its `beforeTypes` say; returns the types another enabled endpoint
    /// already serves (nothing is claimed then: the caller answers 409 `7000504` and rolls back).
    package static func claimBeforeHooks(appID: String, _ w: Webhook, on db: PostgresConnection) throws -> [String] {
        try db.query("DELETE FROM webhook_before_hooks WHERE app_id = \(appID) AND webhook_id = \(w.webhookID)")
        let types = w.beforeTypes
        if types.isEmpty { return [] }
        let claimed = try db.query(
            """
            INSERT INTO webhook_before_hooks (app_id, hook_type, webhook_id)
            SELECT \(appID), t, \(w.webhookID) FROM unnest(\(types)::text[]) t
            ON CONFLICT DO NOTHING RETURNING hook_type
            """
        ).decode(String.self)
        return types.filter { !claimed.contains($0) }
    }

    /// Pauses (endpoint disabled) or resumes (re-enabled) the endpoint's open deliveries (docs/webhooks.md#retries): a
    /// resumed delivery is attempted at max(its `next_attempt_at`, now).
    package static func setDeliveriesPaused(_ paused: Bool, appID: String, webhookID: String, now: Int64, on db: PostgresConnection) throws {
        try db.query(
            """
            UPDATE webhook_deliveries SET paused = \(paused), next_attempt_at = CASE WHEN \(paused) THEN next_attempt_at ELSE greatest(next_attempt_at, \(now)) END
            WHERE app_id = \(appID) AND webhook_id = \(webhookID) AND status IN ('pending', 'failed') AND paused <> \(paused)
            """)
    }
}
