import ParleyAPI
import ParleyCore
import ParleyPostgres

/// SQL of retention (Migrations/0032_retention.sql): policies, holds, the run log and the purge's batches. No rules
/// here.
enum RetentionStore {
    private static func text(_ json: JSONObject) -> String { String(decoding: JSONValue.object(json).serialized(), as: UTF8.self) }

    private static func scope(type: String, target: String, json: String) -> RetentionScope? {
        guard let kind = RetentionScope.Kind(rawValue: type), case .object(let object)? = try? JSONValue.parse(json) else { return nil }
        return RetentionScope(type: kind, target: target, json: object)
    }

    // MARK: - Policies

    /// Creates the policy of `policy.scope` or replaces the one there (keeping its id and `created_at`); returns the
    /// stored policy and whether it is new.
    static func upsertPolicy(appID: String, _ policy: RetentionPolicy, on db: PostgresConnection) throws -> (RetentionPolicy, created: Bool) {
        guard
            let row = try db.query(
                """
                INSERT INTO retention_policies (app_id, policy_id, scope_type, conv_id, scope, max_age_days, purge_files, created_at, updated_at)
                VALUES (\(appID), \(policy.policyID), \(policy.scope.type.rawValue), \(policy.scope.target), \(text(policy.scope.json))::jsonb,
                        \(policy.maxAgeDays), \(policy.purgeFiles), \(policy.createdAt), \(policy.updatedAt))
                ON CONFLICT (app_id, scope_type, conv_id) DO UPDATE
                    SET scope = EXCLUDED.scope, max_age_days = EXCLUDED.max_age_days, purge_files = EXCLUDED.purge_files,
                        updated_at = EXCLUDED.updated_at
                RETURNING policy_id, created_at, xmax = 0
                """
            ).decode((String, Int64, Bool).self).first
        else { throw APIError.internalError }
        var stored = policy
        (stored.policyID, stored.createdAt) = (row.0, row.1)
        return (stored, row.2)
    }

    /// Every policy of the app, oldest first, after `(created_at, policy_id)` `after`.
    static func policies(appID: String, after: (Int64, String)?, limit: Int, on db: PostgresConnection) throws -> [RetentionPolicy] {
        var query: PostgresQuery = """
            SELECT policy_id, scope_type, conv_id, scope::text, max_age_days::bigint, purge_files, created_at, updated_at
            FROM retention_policies WHERE app_id = \(appID)
            """
        if let (at, id) = after { query += " AND (created_at, policy_id) > (\(at), \(id))" }
        query += " ORDER BY created_at, policy_id LIMIT \(limit)"
        return try db.query(query).decode((String, String, String, String, Int64, Bool, Int64, Int64).self).compactMap { row in
            scope(type: row.1, target: row.2, json: row.3).map {
                RetentionPolicy(policyID: row.0, scope: $0, maxAgeDays: row.4, purgeFiles: row.5, createdAt: row.6, updatedAt: row.7)
            }
        }
    }

    static func deletePolicy(appID: String, policyID: String, on db: PostgresConnection) throws -> Bool {
        try db.query("DELETE FROM retention_policies WHERE app_id = \(appID) AND policy_id = \(policyID)").affectedRows > 0
    }

    /// The apps the purge visits: those with a policy or a `history_retention_days`.
    static func appsWithRetention(on db: PostgresConnection) throws -> [String] {
        try db.query(
            """
            SELECT app_id FROM apps WHERE coalesce((settings->>'history_retention_days')::bigint, 0) > 0
            UNION SELECT DISTINCT app_id FROM retention_policies ORDER BY 1
            """, prepared: false
        ).decode(String.self)
    }

    // MARK: - Holds

    static func insertHold(appID: String, _ hold: LegalHold, on db: PostgresConnection) throws {
        try db.query(
            """
            INSERT INTO legal_holds (app_id, hold_id, scope_type, target, scope, reason, created_at)
            VALUES (\(appID), \(hold.holdID), \(hold.scope.type.rawValue), \(hold.scope.target), \(text(hold.scope.json))::jsonb, \(hold.reason),
                    \(hold.createdAt))
            """)
    }

    /// Every hold of the app, oldest first, after `(created_at, hold_id)` `after`.
    static func holds(appID: String, after: (Int64, String)?, limit: Int, on db: PostgresConnection) throws -> [LegalHold] {
        var query: PostgresQuery =
            "SELECT hold_id, scope_type, target, scope::text, reason, created_at FROM legal_holds WHERE app_id = \(appID)"
        if let (at, id) = after { query += " AND (created_at, hold_id) > (\(at), \(id))" }
        query += " ORDER BY created_at, hold_id LIMIT \(limit)"
        return try db.query(query).decode((String, String, String, String, String, Int64).self).compactMap { row in
            scope(type: row.1, target: row.2, json: row.3).map { LegalHold(holdID: row.0, scope: $0, reason: row.4, createdAt: row.5) }
        }
    }

    static func deleteHold(appID: String, holdID: String, on db: PostgresConnection) throws -> Bool {
        try db.query("DELETE FROM legal_holds WHERE app_id = \(appID) AND hold_id = \(holdID)").affectedRows > 0
    }

    /// Whether a hold covers the message of conversation `(convType, convID)` sent by `sender`.
    static func isHeld(appID: String, convType: String, convID: String, sender: String, on db: PostgresConnection) throws -> Bool {
        try db.query("SELECT parley_message_held(\(appID), \(convType), \(convID), \(sender))").decodeFirst(Bool.self) ?? false
    }

    /// Those of `messageIDs` a hold covers.
    static func held(appID: String, messageIDs: [String], on db: PostgresConnection) throws -> Set<String> {
        if messageIDs.isEmpty { return [] }
        return Set(
            try db.query(
                """
                SELECT m.message_id FROM messages m
                WHERE m.app_id = \(appID) AND m.message_id = ANY(\(messageIDs)::text[])
                  AND parley_message_held(m.app_id, m.conv_type, m.conv_id, m.sender)
                """
            ).decode(String.self))
    }

    // MARK: - Runs

    static func insertRun(appID: String, _ run: RetentionRun, on db: PostgresConnection) throws {
        try db.query(
            "INSERT INTO retention_runs (app_id, run_id, started_at, dry_run) VALUES (\(appID), \(run.runID), \(run.startedAt), \(run.dryRun))")
    }

    static func finishRun(appID: String, _ run: RetentionRun, on db: PostgresConnection) throws {
        try db.query(
            """
            UPDATE retention_runs SET finished_at = \(run.finishedAt), policies = \(String(decoding: JSONValue.array(run.policies.map(JSONValue.string)).serialized(), as: UTF8.self))::jsonb,
                messages_purged = \(run.messagesPurged), files_purged = \(run.filesPurged), held_skipped = \(run.heldSkipped), error = \(run.error)
            WHERE app_id = \(appID) AND run_id = \(run.runID)
            """)
    }

    /// Runs newest first, before `(started_at, run_id)` `before`.
    static func runs(appID: String, before: (Int64, String)?, limit: Int, on db: PostgresConnection) throws -> [RetentionRun] {
        var query: PostgresQuery = """
            SELECT run_id, started_at, finished_at, dry_run, policies::text, messages_purged, files_purged, held_skipped, error
            FROM retention_runs WHERE app_id = \(appID)
            """
        if let (at, id) = before { query += " AND (started_at, run_id) < (\(at), \(id))" }
        query += " ORDER BY started_at DESC, run_id DESC LIMIT \(limit)"
        return try db.query(query).decode((String, Int64, Int64?, Bool, String, Int64, Int64, Int64, String?).self).map { row in
            var run = RetentionRun(runID: row.0, startedAt: row.1, dryRun: row.3)
            run.finishedAt = row.2
            run.policies = ((try? JSONValue.parse(row.4))?.arrayValue ?? []).compactMap(\.stringValue)
            (run.messagesPurged, run.filesPurged, run.heldSkipped, run.error) = (row.5, row.6, row.7, row.8)
            return run
        }
    }

    /// Marks runs that never finished (their node stopped) and started before `before` as failed with `error`.
    static func failStale(appID: String, before: Int64, error: String, now: Int64, on db: PostgresConnection) throws {
        try db.query(
            """
            UPDATE retention_runs SET finished_at = \(now), error = \(error)
            WHERE app_id = \(appID) AND finished_at IS NULL AND started_at < \(before)
            """)
    }

    // MARK: - Purge

    /// The messages one rule of a purge covers (alias `m`): `conversation` one conversation, else `convType` every
    /// conversation of a type but those in `except` ("type:conv_id"), else every message but those of `exceptTypes`
    /// and `except`; older than `horizon`.
    struct Selection: Sendable {
        var convType: String?
        var convID: String?
        var exceptTypes: [String] = []
        var except: [String] = []
        var horizon: Int64
    }

    private static func matching(appID: String, _ s: Selection) -> PostgresQuery {
        var query: PostgresQuery = "m.app_id = \(appID) AND m.timestamp < \(s.horizon)"
        if let type = s.convType { query += " AND m.conv_type = \(type)" }
        if let id = s.convID { query += " AND m.conv_id = \(id)" }
        if !s.exceptTypes.isEmpty { query += " AND m.conv_type <> ALL(\(s.exceptTypes)::text[])" }
        if !s.except.isEmpty { query += " AND (m.conv_type || ':' || m.conv_id) <> ALL(\(s.except)::text[])" }
        return query
    }

    private static let held: PostgresQuery = "parley_message_held(m.app_id, m.conv_type, m.conv_id, m.sender)"

    /// Deletes up to `limit` messages of `selection` no hold covers, in one statement (its own transaction unless the
    /// caller opened one), with the combine snapshots of purged type-100 messages; their `message_files` rows go by
    /// the foreign key. Returns how many went and the files they named.
    static func purgeBatch(appID: String, _ selection: Selection, limit: Int, on db: PostgresConnection) throws -> (
        count: Int64, fileIDs: [String]
    ) {
        let query: PostgresQuery =
            """
            WITH gone AS (
                DELETE FROM messages d
                WHERE d.ctid = ANY(ARRAY(SELECT m.ctid FROM messages m WHERE
            """ + " " + matching(appID: appID, selection) + " AND NOT " + held
                + """
                 LIMIT \(limit)))
                    RETURNING d.message_id, d.type, d.body
                ), snapshots AS (
                    DELETE FROM message_combines c USING gone
                    WHERE gone.type = 100 AND c.app_id = \(appID) AND c.combine_id = gone.body::json->>'combine_id'
                )
                SELECT (SELECT count(*) FROM gone),
                       ARRAY(SELECT DISTINCT f.file_id FROM message_files f JOIN gone ON f.message_id = gone.message_id WHERE f.app_id = \(appID))
                """
        guard let row = try db.query(query).decode((Int64, [String]).self).first else { return (0, []) }
        return (row.0, row.1)
    }

    /// How many messages of `selection` a hold covers (`held: true`) or not, and the distinct files those not held
    /// name: what a purge of it skips / would purge.
    static func count(appID: String, _ selection: Selection, held isHeld: Bool, on db: PostgresConnection) throws -> (
        messages: Int64, files: Int64
    ) {
        let query: PostgresQuery =
            "WITH s AS (SELECT m.message_id FROM messages m WHERE " + matching(appID: appID, selection) + (isHeld ? " AND " : " AND NOT ") + held
                + """
                )
                SELECT (SELECT count(*) FROM s),
                       (SELECT count(DISTINCT f.file_id) FROM message_files f JOIN s ON f.message_id = s.message_id WHERE f.app_id = \(appID))
                """
        guard let row = try db.query(query).decode((Int64, Int64).self).first else { return (0, 0) }
        return (row.0, row.1)
    }
}

extension RetentionStore {
    /// The app's `history_retention_days` and `delete_files_with_messages` (defaults 0 and true,
    /// docs/users.md#apps-and-settings).
    static func historyRetention(appID: String, on db: PostgresConnection) throws -> (days: Int64, deleteFiles: Bool)? {
        try db.query(
            """
            SELECT coalesce((settings->>'history_retention_days')::bigint, 0), coalesce((settings->>'delete_files_with_messages')::boolean, true)
            FROM apps WHERE app_id = \(appID)
            """
        ).decode((Int64, Bool).self).first.map { (days: $0.0, deleteFiles: $0.1) }
    }
}
