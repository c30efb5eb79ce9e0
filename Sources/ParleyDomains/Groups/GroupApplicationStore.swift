import ParleyAPI
import ParleyCore
import ParleyPostgres

/// SQL for group applications (docs/groups.md#applications). No rules here: callers check roles, states and inputs.
enum GroupApplicationStore {
    private static let columns = """
        a.application_id, a.type, a.state, a.group_id, a.user_id, a.inviter_id, a.wording, a.operated_by, a.created_at,
        a.updated_at, a.expires_at
        """

    /// The types of ``columns``, in order.
    private typealias Columns = (String, String, String, String, String, String?, String, String?, Int64, Int64, Int64)

    /// Decodes ``columns`` starting at column `start`.
    private static func application(_ row: PostgresRow, from start: Int = 0) throws -> GroupApplication {
        let (applicationID, type, state, groupID, userID, inviterID, wording, operatedBy, createdAt, updatedAt, expiresAt) =
            try row.decode(Columns.self, at: start)
        return GroupApplication(
            applicationID: applicationID, type: GroupApplication.Kind(rawValue: type) ?? .join,
            state: GroupApplication.State(rawValue: state) ?? .waiting, groupID: groupID, userID: userID, inviterID: inviterID,
            wording: wording, operatedBy: operatedBy, createdAt: createdAt, updatedAt: updatedAt, expiresAt: expiresAt)
    }

    /// One application; `forUpdate` locks its row until the transaction ends.
    package static func fetch(appID: String, applicationID: String, forUpdate: Bool = false, on db: PostgresConnection) throws
        -> GroupApplication?
    {
        var query: PostgresQuery =
            "SELECT \(unsafeSQL: columns) FROM group_applications a WHERE a.app_id = \(appID) AND a.application_id = \(applicationID)"
        if forUpdate { query += " FOR UPDATE" }
        return try db.query(query).first.map { try application($0) }
    }

    /// The waiting application of `type` for `userID` in the group, if any (the caller holds the group lock).
    static func waiting(appID: String, groupID: String, userID: String, type: GroupApplication.Kind, on db: PostgresConnection) throws
        -> GroupApplication?
    {
        try db.query(
            """
            SELECT \(unsafeSQL: columns) FROM group_applications a
            WHERE a.app_id = \(appID) AND a.group_id = \(groupID) AND a.user_id = \(userID) AND a.type = \(type.rawValue)
                AND a.state = 'waiting'
            """
        ).first.map { try application($0) }
    }

    static func insert(appID: String, _ a: GroupApplication, on db: PostgresConnection) throws {
        try db.query(
            """
            INSERT INTO group_applications (app_id, application_id, type, state, group_id, user_id, inviter_id, wording,
                created_at, updated_at, expires_at)
            VALUES (\(appID), \(a.applicationID), \(a.type.rawValue), \(a.state.rawValue), \(a.groupID), \(a.userID), \(a.inviterID),
                \(a.wording), \(a.createdAt), \(a.updatedAt), \(a.expiresAt))
            """)
    }

    /// Saves state, wording, operator and `updated_at`; `push` (an answer's PushConfig) is kept when given.
    static func save(appID: String, _ a: GroupApplication, push: JSONValue? = nil, on db: PostgresConnection) throws {
        let pushText = push.map { String(decoding: $0.serialized(), as: UTF8.self) }
        try db.query(
            """
            UPDATE group_applications SET state = \(a.state.rawValue), wording = \(a.wording), operated_by = \(a.operatedBy),
                updated_at = \(a.updatedAt), expires_at = \(a.expiresAt), response_push = COALESCE(\(pushText)::jsonb, response_push)
            WHERE app_id = \(appID) AND application_id = \(a.applicationID)
            """)
    }

    /// Marks one overdue waiting application expired (as the timer would) and returns it when this call did.
    static func expireOverdue(appID: String, applicationID: String, now: Int64, on db: PostgresConnection) throws -> GroupApplication? {
        try db.query(
            """
            UPDATE group_applications a SET state = 'expired', updated_at = a.expires_at
            WHERE a.app_id = \(appID) AND a.application_id = \(applicationID) AND a.state = 'waiting' AND a.expires_at <= \(now)
            RETURNING \(unsafeSQL: columns)
            """
        ).first.map { try application($0) }
    }

    /// Marks up to `limit` overdue waiting applications of every app expired and returns them with their app.
    /// Rows another transaction holds are skipped and the UPDATE re-checks the state, so concurrent runs each
    /// expire (and report) an application once.
    static func expireDue(now: Int64, limit: Int, on db: PostgresConnection) throws -> [(appID: String, application: GroupApplication)] {
        try db.query(
            """
            WITH due AS (
                SELECT app_id, application_id FROM group_applications
                WHERE state = 'waiting' AND expires_at <= \(now)
                ORDER BY expires_at LIMIT \(limit)
                FOR UPDATE SKIP LOCKED
            )
            UPDATE group_applications a SET state = 'expired', updated_at = a.expires_at
            FROM due
            WHERE a.app_id = due.app_id AND a.application_id = due.application_id AND a.state = 'waiting'
            RETURNING a.app_id, \(unsafeSQL: columns)
            """
        ).rows.map { row in (try row.decode(String.self, at: 0), try application(row, from: 1)) }
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
        var query: PostgresQuery = "SELECT \(unsafeSQL: columns) FROM group_applications a WHERE a.app_id = \(appID)"
        switch scope {
        case .group(let groupID): query += " AND a.group_id = \(groupID)"
        case .user(let userID): query += " AND (a.user_id = \(userID) OR a.inviter_id = \(userID))"
        }
        if let type { query += " AND a.type = \(type.rawValue)" }
        if let state {
            query += " AND (CASE WHEN a.state = 'waiting' AND a.expires_at <= \(now) THEN 'expired' ELSE a.state END) = \(state.rawValue)"
        }
        if let after { query += " AND (a.created_at, a.application_id) < (\(after.createdAt), \(after.applicationID))" }
        query += " ORDER BY a.created_at DESC, a.application_id DESC LIMIT \(limit)"
        return try db.query(query).rows.map { try application($0) }
    }
}
