import ParleyAPI
import ParleyCore
import ParleyPostgres

/// SQL for users (docs/users.md). No rules here: callers check permissions and inputs.
package enum UserStore {
    /// What token verification needs to know about a user.
    package struct AuthState {
        package let deletedAt: Int64?
        package let tokenGeneration: Int64
        package let bannedUntil: Int64
    }

    package static func authState(appID: String, userID: String, on db: PostgresConnection) throws -> AuthState? {
        let result = try db.query("SELECT deleted_at, token_generation, banned_until FROM users WHERE app_id = \(appID) AND user_id = \(userID)")
        guard let (deletedAt, tokenGeneration, bannedUntil) = try result.decodeFirst((Int64?, Int64, Int64).self) else { return nil }
        return AuthState(deletedAt: deletedAt, tokenGeneration: tokenGeneration, bannedUntil: bannedUntil)
    }

    /// Whether a `*_until` value (0 = not set, -1 = permanent, else ms) is in force at `now`.
    package static func isActive(until: Int64, now: Int64) -> Bool { until == -1 || until > now }

    // MARK: - Rows

    /// The columns ``user(_:)`` decodes, in order.
    static let columns =
        "user_id, name, avatar_url, extended_data, created_at, updated_at, muted_until, banned_until, ban_reason, deleted_at, token_generation"

    static func user(_ row: PostgresRow) throws -> User {
        let (userID, name, avatarURL, extendedData, createdAt, updatedAt, mutedUntil, bannedUntil, banReason, deletedAt, tokenGeneration) =
            try row.decode((String, String, String, String, Int64, Int64, Int64, Int64, String, Int64?, Int64).self)
        return User(
            userID: userID, name: name, avatarURL: avatarURL, extendedData: extendedData, createdAt: createdAt, updatedAt: updatedAt,
            mutedUntil: mutedUntil, bannedUntil: bannedUntil, banReason: banReason, deletedAt: deletedAt, tokenGeneration: tokenGeneration)
    }

    // MARK: - Reads

    /// The SELECTs of ``fetch(appID:userID:forUpdate:on:)``, built once: GET /v1/users/{id} is the hottest read
    /// (bench/users.sh).
    private static let fetchSQL = (
        plain: "SELECT \(columns) FROM users WHERE app_id = $1 AND user_id = $2",
        forUpdate: "SELECT \(columns) FROM users WHERE app_id = $1 AND user_id = $2 FOR UPDATE"
    )

    /// One user, soft-deleted or not; `forUpdate` locks the row until the transaction ends.
    package static func fetch(appID: String, userID: String, forUpdate: Bool = false, on db: PostgresConnection) throws -> User? {
        // Numbered parameters over text built once: GET user is a hot read.
        try db.query(PostgresQuery(sql: forUpdate ? fetchSQL.forUpdate : fetchSQL.plain, binds: [appID, userID])).first.map(user)
    }

    /// The users among `userIDs` that exist (soft-deleted included), in `user_id` order; `forUpdate` locks them in
    /// that order, so concurrent batch writers never deadlock on each other.
    static func fetchMany(appID: String, userIDs: [String], forUpdate: Bool = false, on db: PostgresConnection) throws -> [User] {
        if userIDs.isEmpty { return [] }
        return try db.query(
            """
            SELECT \(unsafeSQL: columns) FROM users WHERE app_id = \(appID) AND user_id = ANY(\(userIDs)::text[]) ORDER BY user_id
            \(unsafeSQL: forUpdate ? "FOR UPDATE" : "")
            """
        ).rows.map(user)
    }

    /// Which users `GET /v1/users` lists (docs/users.md).
    enum ListState: String, CaseIterable, Sendable {
        case active, deleted, banned, muted, all

        /// The SQL condition at server time `now` (ms).
        func condition(now: Int64) -> PostgresQuery {
            switch self {
            case .active: "deleted_at IS NULL"
            case .deleted: "deleted_at IS NOT NULL"
            case .banned: "deleted_at IS NULL AND (banned_until = -1 OR banned_until > \(now))"
            case .muted: "deleted_at IS NULL AND (muted_until = -1 OR muted_until > \(now))"
            case .all: "TRUE"
            }
        }
    }

    /// Up to `limit` users in `user_id` order after `after`, filtered by `state` at `now` and by `query`
    /// (already lowercased: a prefix of the lowercased `user_id` or a substring of the lowercased `name`).
    ///
    /// Each filter shape gets its own statement text (built from fixed fragments, values always parameters), so
    /// every prepared plan walks the primary key from the cursor instead of filtering inside a generic plan.
    static func list(
        appID: String, state: ListState, query: String?, after: String?, now: Int64, limit: Int, on db: PostgresConnection
    ) throws -> [User] {
        do {
            return try list(appID: appID, state: state, query: query, after: after, now: now, limit: limit, unicode: true, on: db)
        } catch let error as PostgresError where error.sqlState == "42704" && query != nil {
            // A server built without ICU has no "und-x-icu" collation: fall back to lower() of the database locale.
            return try list(appID: appID, state: state, query: query, after: after, now: now, limit: limit, unicode: false, on: db)
        }
    }

    /// `unicode`: lowercase names with ICU's root locale, because lower() under the "C" locale of the embedded
    /// cluster folds ASCII letters only (list filters compare after Unicode lowercasing).
    private static func list(
        appID: String, state: ListState, query: String?, after: String?, now: Int64, limit: Int, unicode: Bool,
        on db: PostgresConnection
    ) throws -> [User] {
        var sql: PostgresQuery = "SELECT \(unsafeSQL: columns) FROM users WHERE app_id = \(appID) AND \(state.condition(now: now))"
        if let after { sql += " AND user_id > \(after)" }
        if let query {
            let name = unicode ? #"lower(name COLLATE "und-x-icu")"# : "lower(name)"
            sql += " AND (starts_with(lower(user_id), \(query)) OR strpos(\(unsafeSQL: name), \(query)) > 0)"
        }
        sql += " ORDER BY user_id LIMIT \(limit)"
        return try db.query(sql).rows.map(user)
    }

    // MARK: - Writes

    /// Inserts `user`; false when the user_id is taken (live or soft-deleted).
    static func insert(appID: String, user u: User, on db: PostgresConnection) throws -> Bool {
        try insertMany(appID: appID, users: [u], on: db).count == 1
    }

    /// Inserts the users whose ids are free and returns the ids that were inserted.
    static func insertMany(appID: String, users: [User], on db: PostgresConnection) throws -> Set<String> {
        if users.isEmpty { return [] }
        let result = try db.query(
            """
            INSERT INTO users (app_id, user_id, name, avatar_url, extended_data, created_at, updated_at, token_generation)
            SELECT \(appID), u.user_id, u.name, u.avatar_url, u.extended_data, u.created_at, u.created_at, u.token_generation
            FROM unnest(\(users.map(\.userID))::text[], \(users.map(\.name))::text[], \(users.map(\.avatarURL))::text[], \(users.map(\.extendedData))::text[], \(users.map(\.createdAt))::bigint[], \(users.map(\.tokenGeneration))::bigint[])
                 AS u(user_id, name, avatar_url, extended_data, created_at, token_generation)
            ON CONFLICT (app_id, user_id) DO NOTHING
            RETURNING user_id
            """)
        return Set(try result.decode(String.self))
    }

    /// Writes every mutable field of `user` back to its row.
    static func save(appID: String, user: User, on db: PostgresConnection) throws {
        try saveMany(appID: appID, users: [user], on: db)
    }

    /// Writes every mutable field of each user back to its row, in one statement.
    static func saveMany(appID: String, users: [User], on db: PostgresConnection) throws {
        if users.isEmpty { return }
        _ = try db.query(
            """
            UPDATE users SET name = u.name, avatar_url = u.avatar_url, extended_data = u.extended_data,
                   updated_at = u.updated_at, muted_until = u.muted_until, banned_until = u.banned_until,
                   ban_reason = u.ban_reason, deleted_at = NULLIF(u.deleted_at, -1), token_generation = u.token_generation
            FROM unnest(\(users.map(\.userID))::text[], \(users.map(\.name))::text[], \(users.map(\.avatarURL))::text[], \(users.map(\.extendedData))::text[], \(users.map(\.updatedAt))::bigint[], \(users.map(\.mutedUntil))::bigint[], \(users.map(\.bannedUntil))::bigint[],
                        \(users.map(\.banReason))::text[], \(// -1 never occurs as a deletion time; it stands for NULL in the array.
                users.map { $0.deletedAt ?? -1 })::bigint[], \(users.map(\.tokenGeneration))::bigint[])
                 AS u(user_id, name, avatar_url, extended_data, updated_at, muted_until, banned_until, ban_reason,
                      deleted_at, token_generation)
            WHERE users.app_id = \(appID) AND users.user_id = u.user_id
            """)
    }

    /// Removes the user's row (hard delete); false when there was none.
    package static func delete(appID: String, userID: String, on db: PostgresConnection) throws -> Bool {
        try db.query("DELETE FROM users WHERE app_id = \(appID) AND user_id = \(userID)").affectedRows > 0
    }
}
