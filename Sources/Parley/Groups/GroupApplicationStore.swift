import ParleyPostgres

/// SQL for group applications (API.md §9.4). No rules here: callers check roles, states and inputs.
enum GroupApplicationStore {
    private static let columns = """
        a.application_id, a.type, a.state, a.group_id, a.user_id, a.inviter_id, a.wording, a.operated_by, a.created_at,
        a.updated_at, a.expires_at
        """

    private static func application(_ row: PostgresRow, from s: Int = 0) throws -> GroupApplication {
        GroupApplication(
            applicationID: try row[s].string, type: GroupApplication.Kind(rawValue: try row[s + 1].string) ?? .join,
            state: GroupApplication.State(rawValue: try row[s + 2].string) ?? .waiting, groupID: try row[s + 3].string,
            userID: try row[s + 4].string, inviterID: row[s + 5].isNull ? nil : try row[s + 5].string, wording: try row[s + 6].string,
            operatedBy: row[s + 7].isNull ? nil : try row[s + 7].string, createdAt: try row[s + 8].int64,
            updatedAt: try row[s + 9].int64, expiresAt: try row[s + 10].int64)
    }

    /// One application; `forUpdate` locks its row until the transaction ends.
    static func fetch(appID: String, applicationID: String, forUpdate: Bool = false, on db: PostgresConnection) throws
        -> GroupApplication?
    {
        try db.query(
            sql:
                "SELECT \(columns) FROM group_applications a WHERE a.app_id = $1 AND a.application_id = $2" + (forUpdate ? " FOR UPDATE" : ""),
            [appID, applicationID], prepared: true
        ).first.map { try application($0) }
    }

    /// The waiting application of `type` for `userID` in the group, if any (the caller holds the group lock).
    static func waiting(appID: String, groupID: String, userID: String, type: GroupApplication.Kind, on db: PostgresConnection) throws
        -> GroupApplication?
    {
        try db.query(
            sql:
                """
                SELECT \(columns) FROM group_applications a
                WHERE a.app_id = $1 AND a.group_id = $2 AND a.user_id = $3 AND a.type = $4 AND a.state = 'waiting'
                """,
            [appID, groupID, userID, type.rawValue], prepared: true
        ).first.map { try application($0) }
    }

    static func insert(appID: String, _ a: GroupApplication, on db: PostgresConnection) throws {
        _ = try db.query(
            sql:
                """
                INSERT INTO group_applications (app_id, application_id, type, state, group_id, user_id, inviter_id, wording,
                    created_at, updated_at, expires_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
                """,
            [
                appID, a.applicationID, a.type.rawValue, a.state.rawValue, a.groupID, a.userID, a.inviterID, a.wording, a.createdAt,
                a.updatedAt, a.expiresAt,
            ], prepared: true)
    }

    /// Saves state, wording, operator and `updated_at`; `push` (an answer's PushConfig) is kept when given.
    static func save(appID: String, _ a: GroupApplication, push: JSONValue? = nil, on db: PostgresConnection) throws {
        _ = try db.query(
            sql:
                """
                UPDATE group_applications SET state = $3, wording = $4, operated_by = $5, updated_at = $6, expires_at = $7,
                    response_push = COALESCE($8::jsonb, response_push)
                WHERE app_id = $1 AND application_id = $2
                """,
            [
                appID, a.applicationID, a.state.rawValue, a.wording, a.operatedBy, a.updatedAt, a.expiresAt,
                push.map { String(decoding: $0.serialized(), as: UTF8.self) },
            ], prepared: true)
    }

    /// Marks one overdue waiting application expired (as the timer would) and returns it when this call did.
    static func expireOverdue(appID: String, applicationID: String, now: Int64, on db: PostgresConnection) throws -> GroupApplication? {
        try db.query(
            sql:
                """
                UPDATE group_applications a SET state = 'expired', updated_at = a.expires_at
                WHERE a.app_id = $1 AND a.application_id = $2 AND a.state = 'waiting' AND a.expires_at <= $3
                RETURNING \(columns)
                """,
            [appID, applicationID, now], prepared: true
        ).first.map { try application($0) }
    }

    /// Marks up to `limit` overdue waiting applications of every app expired and returns them with their app.
    /// Rows another transaction holds are skipped and the UPDATE re-checks the state, so concurrent runs each
    /// expire (and report) an application once.
    static func expireDue(now: Int64, limit: Int, on db: PostgresConnection) throws -> [(appID: String, application: GroupApplication)] {
        try db.query(
            sql:
                """
                WITH due AS (
                    SELECT app_id, application_id FROM group_applications
                    WHERE state = 'waiting' AND expires_at <= $1
                    ORDER BY expires_at LIMIT $2
                    FOR UPDATE SKIP LOCKED
                )
                UPDATE group_applications a SET state = 'expired', updated_at = a.expires_at
                FROM due
                WHERE a.app_id = due.app_id AND a.application_id = due.application_id AND a.state = 'waiting'
                RETURNING a.app_id, \(columns)
                """,
            [now, limit], prepared: true
        ).rows.map { row in (try row[0].string, try application(row, from: 1)) }
    }

    /// Who a list is about: one group's applications, or those where a user is applicant, invitee or inviter.
    enum Scope {
        case group(String)
        case user(String)
    }

    /// Up to `limit` applications of `scope` by `created_at` desc, then `application_id` desc, strictly after
    /// `after`, optionally of one type and of one state as read at `now` (an overdue waiting one is `expired`).
    static func list(
        appID: String, scope: Scope, type: GroupApplication.Kind?, state: GroupApplication.State?, now: Int64,
        after: (createdAt: Int64, applicationID: String)?, limit: Int, on db: PostgresConnection
    ) throws -> [GroupApplication] {
        var parameters: [(any PostgresEncodable)?] = [appID, limit]
        var sql = "SELECT \(columns) FROM group_applications a WHERE a.app_id = $1"
        switch scope {
        case .group(let groupID):
            parameters.append(groupID)
            sql += " AND a.group_id = $3"
        case .user(let userID):
            parameters.append(userID)
            sql += " AND (a.user_id = $3 OR a.inviter_id = $3)"
        }
        if let type {
            parameters.append(type.rawValue)
            sql += " AND a.type = $\(parameters.count)"
        }
        if let state {
            parameters += [state.rawValue, now]
            let n = parameters.count
            sql += " AND (CASE WHEN a.state = 'waiting' AND a.expires_at <= $\(n) THEN 'expired' ELSE a.state END) = $\(n - 1)"
        }
        if let after {
            parameters += [after.createdAt, after.applicationID]
            let n = parameters.count
            sql += " AND (a.created_at, a.application_id) < ($\(n - 1), $\(n))"
        }
        sql += " ORDER BY a.created_at DESC, a.application_id DESC LIMIT $2"
        return try db.query(sql: sql, parameters, prepared: true).rows.map { try application($0) }
    }
}
