import ParleyPostgres

/// SQL for friend applications (API.md §7). No rules here: callers check owners, states and inputs.
enum FriendApplicationStore {
    /// The columns ``application(_:)`` decodes, in order.
    private static let columns =
        "application_id, from_id, to_id, wording, alias, attributes::text, state, created_at, updated_at, expires_at"
    /// ``columns`` of the table aliased `f`.
    private static let prefixedColumns =
        "f.application_id, f.from_id, f.to_id, f.wording, f.alias, f.attributes::text, f.state, f.created_at, f.updated_at, f.expires_at"

    /// Decodes ``columns`` starting at column `start`.
    private static func application(_ row: PostgresRow, from start: Int) throws -> FriendApplication {
        let attributes = (try? JSONValue.parse(try row[start + 5].string))?.objectValue ?? JSONObject()
        let state = FriendApplication.State(rawValue: try row[start + 6].string) ?? .waiting
        return FriendApplication(
            applicationID: try row[start].string, from: try row[start + 1].string, to: try row[start + 2].string,
            wording: try row[start + 3].string, alias: try row[start + 4].string, attributes: attributes, state: state,
            createdAt: try row[start + 7].int64, updatedAt: try row[start + 8].int64, expiresAt: try row[start + 9].int64)
    }

    private static func application(_ row: PostgresRow) throws -> FriendApplication { try application(row, from: 0) }

    private static func text(_ value: JSONValue?) -> String? {
        value.map { String(decoding: $0.serialized(), as: UTF8.self) }
    }

    /// One application; `forUpdate` locks its row until the transaction ends.
    static func fetch(appID: String, applicationID: String, forUpdate: Bool = false, on db: PostgresConnection) throws
        -> FriendApplication?
    {
        let sql =
            "SELECT \(columns) FROM friend_applications WHERE app_id = $1 AND application_id = $2" + (forUpdate ? " FOR UPDATE" : "")
        return try db.query(sql: sql, [appID, applicationID], prepared: true).first.map(application)
    }

    /// The waiting application `from` → `to` (at most one exists), locked until the transaction ends.
    static func waiting(appID: String, from: String, to: String, on db: PostgresConnection) throws -> FriendApplication? {
        try db.query(
            sql:
                "SELECT \(columns) FROM friend_applications WHERE app_id = $1 AND from_id = $2 AND to_id = $3 AND state = 'waiting' FOR UPDATE",
            [appID, from, to], prepared: true
        ).first.map(application)
    }

    /// Stores a new application with the send's push config.
    static func insert(appID: String, _ a: FriendApplication, push: JSONValue?, on db: PostgresConnection) throws {
        _ = try db.query(
            sql:
                """
                INSERT INTO friend_applications
                    (app_id, application_id, from_id, to_id, wording, alias, attributes, push, state, created_at, updated_at, expires_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8::jsonb, $9, $10, $11, $12)
                """,
            [
                appID, a.applicationID, a.from, a.to, a.wording, a.alias, text(.object(a.attributes)), text(push), a.state.rawValue,
                a.createdAt, a.updatedAt, a.expiresAt,
            ], prepared: true)
    }

    /// Stores a repeated send: wording, alias, attributes, `updated_at`, and the push config when one was given.
    static func saveResend(appID: String, _ a: FriendApplication, push: JSONValue?, on db: PostgresConnection) throws {
        _ = try db.query(
            sql:
                """
                UPDATE friend_applications SET wording = $3, alias = $4, attributes = $5::jsonb, updated_at = $6,
                    push = COALESCE($7::jsonb, push)
                WHERE app_id = $1 AND application_id = $2
                """,
            [appID, a.applicationID, a.wording, a.alias, text(.object(a.attributes)), a.updatedAt, text(push)], prepared: true)
    }

    /// Stores an answer (accept or reject): the new state, `updated_at` and the answer's push config.
    static func saveAnswer(appID: String, _ a: FriendApplication, push: JSONValue?, on db: PostgresConnection) throws {
        _ = try db.query(
            sql:
                "UPDATE friend_applications SET state = $3, updated_at = $4, response_push = $5::jsonb WHERE app_id = $1 AND application_id = $2",
            [appID, a.applicationID, a.state.rawValue, a.updatedAt, text(push)], prepared: true)
    }

    /// Marks the waiting application `from` → `to` expired if it is overdue at `now`; returns it when this call did.
    static func expireOverdue(appID: String, from: String, to: String, now: Int64, on db: PostgresConnection) throws
        -> FriendApplication?
    {
        try db.query(
            sql:
                """
                UPDATE friend_applications SET state = 'expired', updated_at = expires_at
                WHERE app_id = $1 AND from_id = $2 AND to_id = $3 AND state = 'waiting' AND expires_at <= $4
                RETURNING \(columns)
                """,
            [appID, from, to, now], prepared: true
        ).first.map(application)
    }

    /// Marks up to `limit` overdue waiting applications of every app expired and returns them with their app.
    ///
    /// Rows another transaction holds are skipped, and the UPDATE re-checks `state = 'waiting'`, so concurrent runs
    /// (the background sweep, a test-clock advance, other nodes) each expire — and report — an application once.
    static func expireDue(now: Int64, limit: Int, on db: PostgresConnection) throws -> [(appID: String, application: FriendApplication)] {
        let result = try db.query(
            sql:
                """
                WITH due AS (
                    SELECT app_id, application_id FROM friend_applications
                    WHERE state = 'waiting' AND expires_at <= $1
                    ORDER BY expires_at
                    LIMIT $2
                    FOR UPDATE SKIP LOCKED
                )
                UPDATE friend_applications f SET state = 'expired', updated_at = f.expires_at
                FROM due
                WHERE f.app_id = due.app_id AND f.application_id = due.application_id AND f.state = 'waiting'
                RETURNING f.app_id, \(prefixedColumns)
                """,
            [now, limit], prepared: true)
        return try result.rows.map { row in (try row[0].string, try application(row, from: 1)) }
    }

    /// Up to `limit` of `userID`'s applications in `direction`, optionally in `state` as read at `now` (an overdue
    /// waiting one counts as `expired`), by `created_at` desc, then `application_id` desc, strictly after `after`.
    static func list(
        appID: String, userID: String, direction: FriendApplication.Direction, state: FriendApplication.State?, now: Int64,
        after: (createdAt: Int64, applicationID: String)?, limit: Int, on db: PostgresConnection
    ) throws -> [FriendApplication] {
        var parameters: [(any PostgresEncodable)?] = [appID, userID, limit]
        var sql = "SELECT \(columns) FROM friend_applications WHERE app_id = $1"
        switch direction {
        case .sent: sql += " AND from_id = $2"
        case .received: sql += " AND to_id = $2"
        case .all: sql += " AND (from_id = $2 OR to_id = $2)"
        }
        if let state {
            parameters += [state.rawValue, now]
            sql += " AND (CASE WHEN state = 'waiting' AND expires_at <= $5 THEN 'expired' ELSE state END) = $4"
        }
        if let after {
            parameters += [after.createdAt, after.applicationID]
            let n = parameters.count
            sql += " AND (created_at, application_id) < ($\(n - 1), $\(n))"
        }
        sql += " ORDER BY created_at DESC, application_id DESC LIMIT $3"
        return try db.query(sql: sql, parameters, prepared: true).rows.map(application)
    }
}
