import ParleyAPI
import ParleyCore
import ParleyPostgres

/// SQL for friend applications (docs/social.md#friends). No rules here: callers check owners, states and inputs.
enum FriendApplicationStore {
    /// The columns ``application(_:)`` decodes, in order.
    private static let columns =
        "application_id, from_id, to_id, wording, alias, attributes::text, state, created_at, updated_at, expires_at"
    /// ``columns`` of the table aliased `f`.
    private static let prefixedColumns =
        "f.application_id, f.from_id, f.to_id, f.wording, f.alias, f.attributes::text, f.state, f.created_at, f.updated_at, f.expires_at"

    /// The types of ``columns``, in order.
    private typealias Columns = (String, String, String, String, String, String, String, Int64, Int64, Int64)

    /// Decodes ``columns`` starting at column `start`.
    private static func application(_ row: PostgresRow, from start: Int) throws -> FriendApplication {
        let (applicationID, from, to, wording, alias, attributesText, state, createdAt, updatedAt, expiresAt) = try row.decode(
            Columns.self, at: start)
        let attributes = (try? JSONValue.parse(attributesText))?.objectValue ?? JSONObject()
        return FriendApplication(
            applicationID: applicationID, from: from, to: to, wording: wording, alias: alias, attributes: attributes,
            state: FriendApplication.State(rawValue: state) ?? .waiting, createdAt: createdAt, updatedAt: updatedAt, expiresAt: expiresAt)
    }

    private static func application(_ row: PostgresRow) throws -> FriendApplication { try application(row, from: 0) }

    private static func text(_ value: JSONValue?) -> String? {
        value.map { String(decoding: $0.serialized(), as: UTF8.self) }
    }

    /// One application; `forUpdate` locks its row until the transaction ends.
    package static func fetch(appID: String, applicationID: String, forUpdate: Bool = false, on db: PostgresConnection) throws
        -> FriendApplication?
    {
        var query: PostgresQuery =
            "SELECT \(unsafeSQL: columns) FROM friend_applications WHERE app_id = \(appID) AND application_id = \(applicationID)"
        if forUpdate { query += " FOR UPDATE" }
        return try db.query(query).first.map(application)
    }

    /// The waiting application `from` → `to` (at most one exists), locked until the transaction ends.
    static func waiting(appID: String, from: String, to: String, on db: PostgresConnection) throws -> FriendApplication? {
        try db.query(
            """
            SELECT \(unsafeSQL: columns) FROM friend_applications
            WHERE app_id = \(appID) AND from_id = \(from) AND to_id = \(to) AND state = 'waiting' FOR UPDATE
            """
        ).first.map(application)
    }

    /// Stores a new application with the send's push config.
    static func insert(appID: String, _ a: FriendApplication, push: JSONValue?, on db: PostgresConnection) throws {
        try db.query(
            """
            INSERT INTO friend_applications
                (app_id, application_id, from_id, to_id, wording, alias, attributes, push, state, created_at, updated_at, expires_at)
            VALUES (\(appID), \(a.applicationID), \(a.from), \(a.to), \(a.wording), \(a.alias), \(text(.object(a.attributes)))::jsonb,
                \(text(push))::jsonb, \(a.state.rawValue), \(a.createdAt), \(a.updatedAt), \(a.expiresAt))
            """)
    }

    /// Stores a repeated send: wording, alias, attributes, `updated_at`, and the push config when one was given.
    static func saveResend(appID: String, _ a: FriendApplication, push: JSONValue?, on db: PostgresConnection) throws {
        try db.query(
            """
            UPDATE friend_applications SET wording = \(a.wording), alias = \(a.alias), attributes = \(text(.object(a.attributes)))::jsonb,
                updated_at = \(a.updatedAt), push = COALESCE(\(text(push))::jsonb, push)
            WHERE app_id = \(appID) AND application_id = \(a.applicationID)
            """)
    }

    /// Stores an answer (accept or reject): the new state, `updated_at` and the answer's push config.
    static func saveAnswer(appID: String, _ a: FriendApplication, push: JSONValue?, on db: PostgresConnection) throws {
        try db.query(
            """
            UPDATE friend_applications SET state = \(a.state.rawValue), updated_at = \(a.updatedAt), response_push = \(text(push))::jsonb
            WHERE app_id = \(appID) AND application_id = \(a.applicationID)
            """)
    }

    /// Marks the waiting application `from` → `to` expired if it is overdue at `now`; returns it when this call did.
    static func expireOverdue(appID: String, from: String, to: String, now: Int64, on db: PostgresConnection) throws
        -> FriendApplication?
    {
        try db.query(
            """
            UPDATE friend_applications SET state = 'expired', updated_at = expires_at
            WHERE app_id = \(appID) AND from_id = \(from) AND to_id = \(to) AND state = 'waiting' AND expires_at <= \(now)
            RETURNING \(unsafeSQL: columns)
            """
        ).first.map(application)
    }

    /// Marks up to `limit` overdue waiting applications of every app expired and returns them with their app.
    ///
    /// Rows another transaction holds are skipped, and the UPDATE re-checks `state = 'waiting'`, so concurrent runs
    /// (the background sweep, a test-clock advance, other nodes) each expire — and report — an application once.
    static func expireDue(now: Int64, limit: Int, on db: PostgresConnection) throws -> [(appID: String, application: FriendApplication)] {
        let result = try db.query(
            """
            WITH due AS (
                SELECT app_id, application_id FROM friend_applications
                WHERE state = 'waiting' AND expires_at <= \(now)
                ORDER BY expires_at
                LIMIT \(limit)
                FOR UPDATE SKIP LOCKED
            )
            UPDATE friend_applications f SET state = 'expired', updated_at = f.expires_at
            FROM due
            WHERE f.app_id = due.app_id AND f.application_id = due.application_id AND f.state = 'waiting'
            RETURNING f.app_id, \(unsafeSQL: prefixedColumns)
            """)
        return try result.rows.map { row in (try row.decode(String.self, at: 0), try application(row, from: 1)) }
    }

    /// Up to `limit` of `userID`'s applications in `direction`, optionally in `state` as read at `now` (an overdue
    /// waiting one counts as `expired`), by `created_at` desc, then `application_id` desc, strictly after `after`.
    static func list(
        appID: String, userID: String, direction: FriendApplication.Direction, state: FriendApplication.State?, now: Int64,
        after: (createdAt: Int64, applicationID: String)?, limit: Int, on db: PostgresConnection
    ) throws -> [FriendApplication] {
        var query: PostgresQuery = "SELECT \(unsafeSQL: columns) FROM friend_applications WHERE app_id = \(appID)"
        switch direction {
        case .sent: query += " AND from_id = \(userID)"
        case .received: query += " AND to_id = \(userID)"
        case .all: query += " AND (from_id = \(userID) OR to_id = \(userID))"
        }
        if let state {
            query += " AND (CASE WHEN state = 'waiting' AND expires_at <= \(now) THEN 'expired' ELSE state END) = \(state.rawValue)"
        }
        if let after { query += " AND (created_at, application_id) < (\(after.createdAt), \(after.applicationID))" }
        query += " ORDER BY created_at DESC, application_id DESC LIMIT \(limit)"
        return try db.query(query).rows.map(application)
    }
}
