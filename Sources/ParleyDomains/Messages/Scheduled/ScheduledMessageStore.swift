import ParleyAPI
import ParleyCore
import ParleyPostgres

/// SQL of the `scheduled_messages` table (docs/scheduled-messages.md). No rules here.
enum ScheduledMessageStore {
    private static let columns = """
        scheduled_id, user_id, as_user, batch, request::text, send_at, state, created_at, updated_at, sent_at, message_id, seq,
        results::text, problem::text
        """

    /// The database's clock in ms: leases are on it, so nodes whose clocks disagree (or a test clock) still agree on
    /// when a node that stopped mid-send has let go of its rows.
    private static let databaseNow = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"

    static func text(_ value: JSONValue) -> String { String(decoding: value.serialized(), as: UTF8.self) }

    private static func value(_ text: String?) -> JSONValue? {
        guard let text else { return nil }
        return try? JSONValue.parse(Array(text.utf8))
    }

    private static func scheduled(_ row: PostgresRow) throws -> ScheduledMessage {
        let (id, userID, asUser, batch, request, sendAt, state, createdAt, updatedAt, sentAt, messageID, seq, results, problem) =
            try row.decode(
                (String, String, Bool, Bool, String, Int64, String, Int64, Int64, Int64?, String?, Int64?, String?, String?).self)
        guard let state = ScheduledMessage.State(rawValue: state) else {
            throw APIError(.internalError, "scheduled message \(id) has state \(state)")
        }
        return ScheduledMessage(
            scheduledID: id, userID: userID, asUser: asUser, batch: batch, request: value(request)?.objectValue ?? [:], sendAt: sendAt,
            state: state, createdAt: createdAt, updatedAt: updatedAt, sentAt: sentAt, messageID: messageID, seq: seq,
            results: value(results), problem: value(problem))
    }

    /// Waits for the app's other schedulings (the per-app limit counts what is pending, then inserts).
    static func lockApp(appID: String, on db: PostgresConnection) throws {
        try db.query("SELECT pg_advisory_xact_lock(hashtext('scheduled_messages:' || \(appID)))")
    }

    /// Scheduled messages of the app not sent yet (scheduled or being sent).
    static func pendingCount(appID: String, on db: PostgresConnection) throws -> Int64 {
        try db.query(
            "SELECT count(*) FROM scheduled_messages WHERE app_id = \(appID) AND state IN ('scheduled', 'sending')"
        ).decodeFirst(Int64.self) ?? 0
    }

    static func insert(appID: String, _ s: ScheduledMessage, on db: PostgresConnection) throws {
        try db.query(
            """
            INSERT INTO scheduled_messages (app_id, scheduled_id, user_id, as_user, batch, request, send_at, state, created_at, updated_at)
            VALUES (\(appID), \(s.scheduledID), \(s.userID), \(s.asUser), \(s.batch), \(text(.object(s.request)))::jsonb, \(s.sendAt),
                    \(s.state.rawValue), \(s.createdAt), \(s.updatedAt))
            """)
    }

    static func fetch(appID: String, id: String, forUpdate: Bool = false, on db: PostgresConnection) throws -> ScheduledMessage? {
        try db.query(
            """
            SELECT \(unsafeSQL: columns) FROM scheduled_messages WHERE app_id = \(appID) AND scheduled_id = \(id)
            \(unsafeSQL: forUpdate ? "FOR UPDATE" : "")
            """
        ).first.map(scheduled)
    }

    /// `GET /v1/scheduled_messages`: newest first (created_at, then scheduled_id, descending), after `before`.
    /// `states`: the stored states the caller's state filter means.
    static func list(
        appID: String, userID: String?, states: [String]?, before: (Int64, String)?, limit: Int, on db: PostgresConnection
    ) throws -> [ScheduledMessage] {
        var query: PostgresQuery = "SELECT \(unsafeSQL: columns) FROM scheduled_messages WHERE app_id = \(appID)"
        if let userID { query += " AND user_id = \(userID)" }
        if let states { query += " AND state = ANY(\(states)::text[])" }
        if let (t, id) = before { query += " AND (created_at, scheduled_id) < (\(t), \(id))" }
        query += " ORDER BY created_at DESC, scheduled_id DESC LIMIT \(limit)"
        return try db.query(query).rows.map(scheduled)
    }

    static func update(appID: String, _ s: ScheduledMessage, on db: PostgresConnection) throws {
        try db.query(
            """
            UPDATE scheduled_messages SET request = \(text(.object(s.request)))::jsonb, send_at = \(s.sendAt), state = \(s.state.rawValue),
                updated_at = \(s.updatedAt)
            WHERE app_id = \(appID) AND scheduled_id = \(s.scheduledID)
            """)
    }

    /// A due row as the sweep claimed it.
    struct Claimed: Sendable {
        let appID: String
        let scheduledID: String
        let userID: String
        let asUser: Bool
        let batch: Bool
        let request: String
        let sendAt: Int64
        let attempts: Int64
    }

    /// Claims up to `limit` rows of any app that are due at `now` (server clock), or that a node left `sending` past its
    /// lease, skipping rows another node is claiming: they become `sending` for `leaseMillis` of the database's clock.
    static func claim(now: Int64, limit: Int, leaseMillis: Int64, on db: PostgresConnection) throws -> [Claimed] {
        try db.query(
            """
            WITH due AS (
                SELECT app_id, scheduled_id FROM scheduled_messages WHERE state = 'scheduled' AND send_at <= \(now)
                ORDER BY send_at LIMIT \(limit) FOR UPDATE SKIP LOCKED
            ), stale AS (
                SELECT app_id, scheduled_id FROM scheduled_messages WHERE state = 'sending' AND lease_until < \(unsafeSQL: databaseNow)
                LIMIT \(limit) FOR UPDATE SKIP LOCKED
            ), claimed AS (SELECT * FROM due UNION ALL SELECT * FROM stale)
            UPDATE scheduled_messages s SET state = 'sending', attempts = s.attempts + 1,
                lease_until = \(unsafeSQL: databaseNow) + \(leaseMillis)
            FROM claimed c WHERE s.app_id = c.app_id AND s.scheduled_id = c.scheduled_id
            RETURNING s.app_id, s.scheduled_id, s.user_id, s.as_user, s.batch, s.request::text, s.send_at, s.attempts::bigint
            """
        ).rows.map { row in
            let (appID, id, userID, asUser, batch, request, sendAt, attempts) = try row.decode(
                (String, String, String, Bool, Bool, String, Int64, Int64).self)
            return Claimed(
                appID: appID, scheduledID: id, userID: userID, asUser: asUser, batch: batch, request: request, sendAt: sendAt,
                attempts: attempts)
        }
    }

    /// What a send of a claimed row ended as.
    struct Outcome: Sendable {
        let appID: String
        let scheduledID: String
        /// `sent`, `failed`, or `scheduled` (a transient refusal: the next sweep tries again).
        let state: String
        /// `{message_id, seq}`, `{results}` or `{problem}`.
        let data: JSONObject
    }

    /// Records the outcomes of claimed rows at `now`, in one statement. A row no longer `sending` is left alone.
    static func finish(_ outcomes: [Outcome], now: Int64, on db: PostgresConnection) throws {
        guard !outcomes.isEmpty else { return }
        try db.query(
            """
            UPDATE scheduled_messages s
            SET state = v.state, updated_at = \(now), lease_until = NULL,
                sent_at = CASE WHEN v.state = 'sent' THEN \(now)::bigint END,
                message_id = v.data->>'message_id', seq = (v.data->>'seq')::bigint,
                results = v.data->'results', problem = v.data->'problem'
            FROM (SELECT a, i, st, d::jsonb AS data, st AS state
                  FROM unnest(\(outcomes.map(\.appID))::text[], \(outcomes.map(\.scheduledID))::text[], \(outcomes.map(\.state))::text[],
                              \(outcomes.map { text(.object($0.data)) })::text[]) AS x(a, i, st, d)) v
            WHERE s.app_id = v.a AND s.scheduled_id = v.i AND s.state = 'sending'
            """)
    }

    /// The rows not sent yet of every app, and how many of them are due at `now`, for `/metrics`.
    static func backlog(now: Int64, on db: PostgresConnection) throws -> (pending: Int64, due: Int64) {
        let row = try db.query(
            """
            SELECT count(*), count(*) FILTER (WHERE send_at <= \(now)) FROM scheduled_messages WHERE state IN ('scheduled', 'sending')
            """
        ).decodeFirst((Int64, Int64).self)
        return row ?? (0, 0)
    }
}
