import ParleyCore
import ParleyPostgres

/// SQL for the endpoints' cursors over the event log (Migrations/0035) and the deliveries written from them. No rules
/// here: ``WebhookDispatcher`` decides what to attempt and write, ``WebhookService`` when a cursor moves for an
/// endpoint change.
package enum WebhookCursors {
    /// An endpoint whose cursor a node holds, with what its attempts need.
    struct Held {
        let appID: String
        let webhookID: String
        let cursor: Int64
        let config: WebhookEndpointQueue.Config
    }

    /// The Event JSON of a row of `events` in the app view, as SQL: the layout of ``TakenEvent/body(id:type:appID:createdAt:data:)``
    /// and of the event log's reads, byte for byte.
    static let eventBody = """
        '{"id":"' || e.id || '","type":' || to_json(e.type) || ',"app_id":' || to_json(e.app_id)
            || ',"created_at":' || e.created_at || ',"data":' || e.data || '}'
        """

    /// The newest event id of the app the transaction sees (0 when none): events are visible strictly in id order, so
    /// every event with an id up to it is visible too.
    package static func head(appID: String, on db: PostgresConnection) throws -> Int64 {
        try db.query("SELECT coalesce(max(id), 0) FROM events WHERE app_id = \(appID)").decodeFirst(Int64.self) ?? 0
    }

    /// A new endpoint's cursor: it starts after the newest event, so it gets the events committed after it exists.
    package static func create(appID: String, webhookID: String, enabled: Bool, on db: PostgresConnection) throws {
        let head = try head(appID: appID, on: db)
        try db.query(
            """
            INSERT INTO webhook_cursors (app_id, webhook_id, event_id, paused_at) VALUES (\(appID), \(webhookID), \(head), \(enabled ? nil : head as Int64?))
            """)
    }

    /// The endpoint was disabled: its deliveries end with the events committed so far.
    package static func pause(appID: String, webhookID: String, on db: PostgresConnection) throws {
        let head = try head(appID: appID, on: db)
        try db.query(
            """
            UPDATE webhook_cursors SET paused_at = \(head) WHERE app_id = \(appID) AND webhook_id = \(webhookID) AND paused_at IS NULL
            """)
    }

    /// The endpoint was enabled again: the events committed while it was enabled that the dispatcher had not written
    /// yet get their deliveries as `pending` rows (in event order, so the ordering rule holds them as before), and the
    /// cursor moves to the newest event: nothing is delivered for what was written while it was disabled.
    package static func resume(appID: String, webhookID: String, now: Int64, on db: PostgresConnection) throws {
        guard
            let (cursor, paused) = try db.query(
                "SELECT event_id, paused_at FROM webhook_cursors WHERE app_id = \(appID) AND webhook_id = \(webhookID) FOR UPDATE"
            ).decodeFirst((Int64, Int64?).self),
            let pausedAt = paused
        else { return }
        if pausedAt > cursor {
            try db.query(
                """
                INSERT INTO webhook_deliveries (app_id, webhook_id, kind, event_id, event_type, order_key, body, status, next_attempt_at,
                                                created_at)
                SELECT e.app_id, w.webhook_id, 'after', e.id, e.type, e.order_key, \(unsafeSQL: eventBody), 'pending', \(now), e.created_at
                FROM events e JOIN webhooks w ON w.app_id = e.app_id AND w.webhook_id = \(webhookID)
                WHERE e.app_id = \(appID) AND e.id > \(cursor) AND e.id <= \(pausedAt) AND parley_webhook_selects(w.event_types, e.type)
                ORDER BY e.id
                ON CONFLICT (app_id, webhook_id, event_id) WHERE kind = 'after' DO NOTHING
                """)
        }
        let head = try head(appID: appID, on: db)
        try db.query(
            """
            UPDATE webhook_cursors SET event_id = greatest(event_id, \(head)), paused_at = NULL
            WHERE app_id = \(appID) AND webhook_id = \(webhookID)
            """)
    }

    /// Where the endpoint's deliveries are written up to: its cursor, and the event it paused at while disabled.
    package static func position(appID: String, webhookID: String, on db: PostgresConnection) throws -> (cursor: Int64, pausedAt: Int64?)? {
        try db.query("SELECT event_id, paused_at FROM webhook_cursors WHERE app_id = \(appID) AND webhook_id = \(webhookID)")
            .decodeFirst((Int64, Int64?).self).map { (cursor: $0.0, pausedAt: $0.1) }
    }

    /// `POST /v1/webhooks/{id}/recover`: writes, in event order, a `pending` delivery (paused while the endpoint is
    /// disabled) of each event with an id in (`afterID`, `throughID`] and created at or after `fromTime` that the
    /// endpoint selects and has no delivery of. Returns how many it wrote.
    package static func recover(
        appID: String, webhookID: String, afterID: Int64, fromTime: Int64, throughID: Int64, now: Int64, on db: PostgresConnection
    ) throws -> Int {
        try db.query(
            """
            INSERT INTO webhook_deliveries (app_id, webhook_id, kind, event_id, event_type, order_key, body, status, next_attempt_at,
                                            paused, created_at)
            SELECT e.app_id, w.webhook_id, 'after', e.id, e.type, e.order_key, \(unsafeSQL: eventBody), 'pending', \(now), NOT w.enabled, \(now)
            FROM events e JOIN webhooks w ON w.app_id = e.app_id AND w.webhook_id = \(webhookID)
            WHERE e.app_id = \(appID) AND e.id > \(afterID) AND e.id <= \(throughID) AND e.created_at >= \(fromTime)
              AND parley_webhook_selects(w.event_types, e.type)
            ORDER BY e.id
            ON CONFLICT (app_id, webhook_id, event_id) WHERE kind = 'after' DO NOTHING
            RETURNING 1
            """
        ).rows.count
    }

    /// Renews `holder`'s hold on its endpoints and takes those nobody holds (or whose holder stopped renewing): every
    /// enabled endpoint with an after-event type. Returns what `holder` holds now.
    static func hold(holder: String, leaseSeconds: Int, on db: PostgresConnection) throws -> [Held] {
        let beforeTypes = Array(WebhookEventTypes.beforeTypes)
        return try db.query(
            """
            UPDATE webhook_cursors c SET holder = \(holder), held_until = clock_timestamp() + make_interval(secs => \(leaseSeconds))
            FROM webhooks w
            WHERE w.app_id = c.app_id AND w.webhook_id = c.webhook_id AND w.enabled AND NOT (w.event_types <@ \(beforeTypes)::text[])
              AND (c.holder = \(holder) OR c.held_until IS NULL OR c.held_until < clock_timestamp())
            RETURNING c.app_id, c.webhook_id, c.event_id, w.url, w.event_types, w.secret, w.previous_secret, w.previous_secret_until
            """
        ).decode((String, String, Int64, String, [String], String, String?, Int64?).self).map {
            (appID, webhookID, cursor, url, eventTypes, secret, previousSecret, previousSecretUntil) in
            Held(
                appID: appID, webhookID: webhookID, cursor: cursor,
                config: .init(
                    url: url, eventTypes: eventTypes, secret: secret, previousSecret: previousSecret,
                    previousSecretUntil: previousSecretUntil))
        }
    }

    /// Lets go of every endpoint `holder` holds (a node stopping): another node takes them at its next renewal.
    static func release(holder: String, on db: PostgresConnection) throws {
        try db.query("UPDATE webhook_cursors SET holder = NULL, held_until = NULL WHERE holder = \(holder)")
    }

    /// Moves cursors forward (never back), only those `holder` still holds.
    static func advance(_ cursors: [(appID: String, webhookID: String, eventID: Int64)], holder: String, on db: PostgresConnection) throws {
        if cursors.isEmpty { return }
        try db.query(
            """
            UPDATE webhook_cursors c SET event_id = u.event_id
            FROM unnest(\(cursors.map { $0.appID })::text[], \(cursors.map { $0.webhookID })::text[], \(cursors.map { $0.eventID })::bigint[])
                 AS u(app_id, webhook_id, event_id)
            WHERE c.app_id = u.app_id AND c.webhook_id = u.webhook_id AND c.holder = \(holder) AND c.event_id < u.event_id
            """)
    }

    /// The open (`pending` or `failed`) deliveries per ordering key of the given endpoints.
    static func openKeys(_ endpoints: [(appID: String, webhookID: String)], on db: PostgresConnection) throws
        -> [String: [String: Int]]
    {
        if endpoints.isEmpty { return [:] }
        var result: [String: [String: Int]] = [:]
        for row in try db.query(
            """
            SELECT d.app_id, d.webhook_id, d.order_key, count(*) FROM webhook_deliveries d
            WHERE (d.app_id, d.webhook_id) IN (SELECT * FROM unnest(\(endpoints.map { $0.appID })::text[], \(endpoints.map { $0.webhookID })::text[]))
              AND d.status IN ('pending', 'failed') AND d.order_key IS NOT NULL
            GROUP BY d.app_id, d.webhook_id, d.order_key
            """
        ).decode((String, String, String, Int).self) {
            result[row.0 + "\u{0}" + row.1, default: [:]][row.2] = row.3
        }
        return result
    }

    /// Up to `limit` events of the app after `after`, in id order, with their webhook body when `patterns` select
    /// them (nil otherwise: only their id matters then).
    static func read(appID: String, after: Int64, patterns: [String], limit: Int, on db: PostgresConnection) throws
        -> [(event: TakenEvent, selected: Bool)]
    {
        try db.query(
            """
            SELECT e.id, e.type, e.order_key, e.created_at,
                   CASE WHEN parley_webhook_selects(\(patterns)::text[], e.type) THEN \(unsafeSQL: eventBody) END
            FROM events e WHERE e.app_id = \(appID) AND e.id > \(after)
            ORDER BY e.id LIMIT \(limit)
            """
        ).decode((Int64, String, String, Int64, PostgresTextBytes?).self).map { (id, type, orderKey, createdAt, body) in
            (TakenEvent(id: id, type: type, orderKey: orderKey, createdAt: createdAt, body: body?.bytes ?? []), body != nil)
        }
    }

    /// One after-event delivery to write with its first attempt (`attempt` nil: written `pending`, not attempted).
    struct NewDelivery {
        let appID: String
        let webhookID: String
        let event: TakenEvent
        let status: String
        let attempt: WebhookAttempt?
        let at: Int64
        let nextAttemptAt: Int64?
    }

    /// Writes new after-event deliveries once each (a replayed event's row is kept as it is) and moves cursors forward
    /// (never back, only those `holder` still holds), in one statement. An open delivery of an endpoint disabled
    /// meanwhile is written paused; one of an endpoint deleted meanwhile is not written.
    static func write(
        _ deliveries: [NewDelivery], moving cursors: [(appID: String, webhookID: String, eventID: Int64)], holder: String,
        on db: PostgresConnection
    ) throws {
        if deliveries.isEmpty && cursors.isEmpty { return }
        let entries: [String?] = deliveries.map { d in d.attempt.map { DeliveryStore.attemptLogEntry($0, at: d.at) } }
        try db.query(
            """
            WITH moved AS (
                UPDATE webhook_cursors c SET event_id = m.event_id
                FROM unnest(\(cursors.map { $0.appID })::text[], \(cursors.map { $0.webhookID })::text[], \(cursors.map { $0.eventID })::bigint[])
                     AS m(app_id, webhook_id, event_id)
                WHERE c.app_id = m.app_id AND c.webhook_id = m.webhook_id AND c.holder = \(holder) AND c.event_id < m.event_id
            )
            INSERT INTO webhook_deliveries (app_id, webhook_id, kind, event_id, event_type, order_key, body, status, attempts, attempt_log,
                                            next_attempt_at, last_attempt_at, last_status_code, last_error, response_excerpt, duration_ms,
                                            created_at, paused)
            SELECT u.app_id, u.webhook_id, 'after', u.event_id, u.event_type, u.order_key, u.body, u.status,
                   CASE WHEN u.entry IS NULL THEN 0 ELSE 1 END,
                   CASE WHEN u.entry IS NULL THEN '[]'::jsonb ELSE jsonb_build_array(u.entry::jsonb) END,
                   u.next_at, u.at, u.code, u.error, u.excerpt, u.duration, u.created_at,
                   NOT w.enabled AND u.status IN ('pending', 'failed')
            FROM unnest(\(deliveries.map { $0.appID })::text[], \(deliveries.map { $0.webhookID })::text[], \(deliveries.map { $0.event.id })::bigint[],
                        \(deliveries.map { $0.event.type })::text[], \(deliveries.map { $0.event.orderKey })::text[],
                        \(deliveries.map { String(decoding: $0.event.body, as: UTF8.self) })::text[], \(deliveries.map { $0.status })::text[],
                        \(entries)::text[], \(deliveries.map { $0.nextAttemptAt })::bigint[], \(deliveries.map { $0.attempt == nil ? nil : $0.at })::bigint[],
                        \(deliveries.map { $0.attempt?.statusCode })::int[], \(deliveries.map { $0.attempt?.error })::text[],
                        \(deliveries.map { $0.attempt?.responseExcerpt })::text[], \(deliveries.map { $0.attempt?.durationMillis })::int[],
                        \(deliveries.map { $0.event.createdAt })::bigint[])
                 AS u(app_id, webhook_id, event_id, event_type, order_key, body, status, entry, next_at, at, code, error, excerpt, duration,
                      created_at)
            JOIN webhooks w ON w.app_id = u.app_id AND w.webhook_id = u.webhook_id
            ON CONFLICT (app_id, webhook_id, event_id) WHERE kind = 'after' DO NOTHING
            """)
    }
}
