import ParleyCore
import ParleyPostgres

/// One webhook request and its attempts (docs/webhooks.md#how-deliveries-are-made): an after-event delivery from the
/// outbox, a before-event hook call, or a ping.
package struct Delivery: Sendable {
    package enum Kind: String, Sendable, CaseIterable { case after, before, ping }
    package enum Status: String, Sendable, CaseIterable { case pending, succeeded, failed, dead }

    package var deliveryID: String
    package var webhookID: String
    package var kind: Kind
    /// After: the event's id; ping: its `ping_…` id.
    package var eventID: String?
    /// Before: the hook call's id.
    package var hookCallID: String?
    package var eventType: String
    package var status: Status
    package var attempts: Int
    package var nextAttemptAt: Int64?
    package var lastAttemptAt: Int64?
    package var lastStatusCode: Int?
    package var lastError: String?
    package var responseExcerpt: String?
    package var durationMillis: Int?
    package var decision: String?
    package var createdAt: Int64
    /// `[{at, status_code, error, duration_ms}]` as stored (the single-delivery view only).
    package var attemptLog: [UInt8]?

    /// The Delivery view; with the attempts list when it was read (`GET …/deliveries/{id}`).
    package func json() -> [UInt8] {
        var o = JSONObjectWriter()
        o["delivery_id"] = deliveryID
        o["webhook_id"] = webhookID
        o["kind"] = kind.rawValue
        o["event_id"] = eventID
        o["hook_call_id"] = hookCallID
        o["event_type"] = eventType
        o["status"] = status.rawValue
        o["next_attempt_at"] = nextAttemptAt
        o["last_attempt_at"] = lastAttemptAt
        o["last_status_code"] = lastStatusCode
        o["last_error"] = lastError
        o["response_excerpt"] = responseExcerpt
        o["duration_ms"] = durationMillis
        o["decision"] = decision
        o["created_at"] = createdAt
        if let attemptLog { o.raw("attempts", attemptLog) } else { o["attempts"] = attempts }
        return o.finish()
    }
}

/// SQL for the delivery log (docs/webhooks.md#endpoints, docs/webhooks.md#how-deliveries-are-made).
package enum DeliveryStore {
    /// How long finished deliveries are kept: 7 days (docs/webhooks.md#retries).
    package static let keptMillis: Int64 = 7 * 24 * 3_600_000

    package static let columns = """
        delivery_id, webhook_id, kind, event_id, ref_id, event_type, status, attempts, next_attempt_at, last_attempt_at,
        last_status_code, last_error, response_excerpt, duration_ms, decision, created_at
        """

    /// A row of ``columns`` (and `attempt_log` `withLog`), read by column name.
    package static func delivery(_ row: PostgresRow, withLog: Bool = false) throws -> Delivery {
        let kind = Delivery.Kind(rawValue: try row.decode(String.self, named: "kind")) ?? .after
        let ref = try row.decode(String?.self, named: "ref_id")
        return Delivery(
            deliveryID: try row.decode(named: "delivery_id"), webhookID: try row.decode(named: "webhook_id"), kind: kind,
            eventID: kind == .after ? try row.decode(Int64?.self, named: "event_id").map { String($0) } : (kind == .ping ? ref : nil),
            hookCallID: kind == .before ? ref : nil, eventType: try row.decode(named: "event_type"),
            status: Delivery.Status(rawValue: try row.decode(String.self, named: "status")) ?? .pending,
            attempts: try row.decode(Int.self, named: "attempts"), nextAttemptAt: try row.decode(Int64?.self, named: "next_attempt_at"),
            lastAttemptAt: try row.decode(Int64?.self, named: "last_attempt_at"),
            lastStatusCode: try row.decode(Int?.self, named: "last_status_code"),
            lastError: try row.decode(String?.self, named: "last_error"),
            responseExcerpt: try row.decode(String?.self, named: "response_excerpt"),
            durationMillis: try row.decode(Int?.self, named: "duration_ms"), decision: try row.decode(String?.self, named: "decision"),
            createdAt: try row.decode(Int64.self, named: "created_at"),
            attemptLog: withLog ? try row.decode(PostgresTextBytes.self, named: "attempt_log").bytes : nil)
    }

    /// An endpoint's deliveries by `created_at` desc, then `delivery_id` desc (the order of `id`: the index's), after the
    /// cursor position.
    package static func list(
        appID: String, webhookID: String, filter: DeliveryFilter, before: (Int64, String)?, limit: Int, on db: PostgresConnection
    ) throws -> [Delivery] {
        // One always-present bound in the index's own columns (none: past the newest row), so a generic plan starts
        // the index scan at the cursor: with `$1 IS NULL OR …` it filtered every newer row (35 ms at 60,000 deep).
        let bound =
            before.map { (createdAt: $0.0, id: rowID(ofDeliveryID: $0.1) ?? Int64.min) } ?? (createdAt: Int64.max, id: Int64.max)
        return try db.query(
            """
            SELECT \(unsafeSQL: columns) FROM webhook_deliveries
            WHERE app_id = \(appID) AND webhook_id = \(webhookID)
              AND (\(filter.status?.rawValue)::text IS NULL OR status = \(filter.status?.rawValue))
              AND (\(filter.kind?.rawValue)::text IS NULL OR kind = \(filter.kind?.rawValue))
              AND (\(filter.eventType)::text IS NULL OR event_type = \(filter.eventType))
              AND (created_at, id) < (\(bound.createdAt), \(bound.id))
            ORDER BY created_at DESC, id DESC LIMIT \(limit)
            """
        ).rows.map { try delivery($0) }
    }

    /// The row id a `delivery_id` was made from (`dlv_` + 16 hex digits, Migrations/0013).
    static func rowID(ofDeliveryID deliveryID: String) -> Int64? {
        guard deliveryID.hasPrefix("dlv_") else { return nil }
        return Int64(deliveryID.dropFirst(4), radix: 16)
    }

    package static func fetch(appID: String, webhookID: String, deliveryID: String, on db: PostgresConnection) throws -> Delivery? {
        try db.query(
            """
            SELECT \(unsafeSQL: columns), attempt_log::text FROM webhook_deliveries
            WHERE app_id = \(appID) AND webhook_id = \(webhookID) AND delivery_id = \(deliveryID)
            """
        ).first.map { try delivery($0, withLog: true) }
    }

    /// Re-queues an after delivery that is not pending (`retryWebhookDelivery`, docs/webhooks.md#retries): `pending`
    /// now; a dead one gets one attempt. Nil when there is no such delivery; the unchanged delivery when it cannot be
    /// retried.
    package static func retry(appID: String, webhookID: String, deliveryID: String, now: Int64, on db: PostgresConnection) throws
        -> (delivery: Delivery, retried: Bool)?
    {
        let updated = try db.query(
            """
            UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = \(now), single_attempt = (status = 'dead'),
                   leased_until = NULL
            WHERE app_id = \(appID) AND webhook_id = \(webhookID) AND delivery_id = \(deliveryID) AND kind = 'after' AND status <> 'pending'
            RETURNING \(unsafeSQL: columns)
            """
        ).first.map { try delivery($0) }
        if let updated { return (updated, true) }
        return try fetch(appID: appID, webhookID: webhookID, deliveryID: deliveryID, on: db).map { ($0, false) }
    }

    /// Adds finished one-attempt deliveries (hook calls and pings) to the log: `succeeded` or `dead`
    /// (docs/webhooks.md#before-event-hooks).
    package static func insertFinished(_ entries: [DeliveryLogEntry], on db: PostgresConnection) throws {
        try db.query(
            """
            INSERT INTO webhook_deliveries (app_id, webhook_id, kind, ref_id, event_type, body, status, attempts, attempt_log,
                                            last_attempt_at, last_status_code, last_error, response_excerpt, duration_ms, decision, created_at)
            SELECT e.app_id, e.webhook_id, e.kind, e.ref_id, e.event_type, e.body, e.status, 1, jsonb_build_array(e.entry::jsonb), e.at,
                   e.code, e.error, e.excerpt, e.duration, e.decision, e.at
            FROM unnest(\(entries.map(\.appID))::text[], \(entries.map(\.webhookID))::text[], \(entries.map(\.kind.rawValue))::text[],
                        \(entries.map(\.refID))::text[], \(entries.map(\.eventType))::text[],
                        \(entries.map { String(decoding: $0.body, as: UTF8.self) })::text[], \(entries.map { $0.succeeded ? "succeeded" : "dead" })::text[],
                        \(entries.map { attemptLogEntry($0.attempt, at: $0.at) })::text[], \(entries.map(\.at))::bigint[],
                        \(entries.map(\.attempt.statusCode))::int[], \(entries.map(\.attempt.error))::text[],
                        \(entries.map(\.attempt.responseExcerpt))::text[], \(entries.map(\.attempt.durationMillis))::int[],
                        \(entries.map(\.decision))::text[])
                 AS e(app_id, webhook_id, kind, ref_id, event_type, body, status, entry, at, code, error, excerpt, duration, decision)
            -- The endpoint may have been deleted since the call.
            WHERE EXISTS (SELECT 1 FROM webhooks w WHERE w.app_id = e.app_id AND w.webhook_id = e.webhook_id)
            """)
    }

    /// One entry of `attempts` (docs/webhooks.md#endpoints): `{at, status_code, error, duration_ms}`.
    package static func attemptLogEntry(_ attempt: WebhookAttempt, at now: Int64) -> String {
        var o = JSONObjectWriter()
        o["at"] = now
        o["status_code"] = attempt.statusCode
        o["error"] = attempt.error
        o["duration_ms"] = attempt.durationMillis
        return String(decoding: o.finish(), as: UTF8.self)
    }

    /// Deletes finished deliveries older than 7 days (paused ones are open, so they do not age). Returns how many.
    package static func deleteExpired(now: Int64, on db: PostgresConnection) throws -> Int {
        try db.query(
            """
            DELETE FROM webhook_deliveries WHERE status IN ('succeeded', 'dead') AND created_at < \(now - keptMillis)
              AND coalesce(last_attempt_at, created_at) < \(now - keptMillis)
            """
        ).affectedRows
    }
}

/// The filters of an endpoint's delivery list (`GET /v1/webhooks/{webhook_id}/deliveries`, docs/webhooks.md#endpoints).
package struct DeliveryFilter {
    var status: Delivery.Status?
    var kind: Delivery.Kind?
    var eventType: String?

    package init(status: Delivery.Status?, kind: Delivery.Kind?, eventType: String?) {
        self.status = status
        self.kind = kind
        self.eventType = eventType
    }
}
