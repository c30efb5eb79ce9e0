import ParleyPostgres

/// SQL for blacklists (API.md §8). No rules here: callers check owners, limits and inputs.
enum BlacklistStore {
    /// One listed entry: the blocked user's public profile and when it was blocked.
    struct Entry: Sendable, Equatable {
        var userID: String
        var name: String
        var avatarURL: String
        var createdAt: Int64

        /// `{user_id, name, avatar_url, created_at}` (API.md §8).
        var json: [UInt8] {
            var o = JSONObjectWriter(capacity: 96 + name.utf8.count + avatarURL.utf8.count)
            o["user_id"] = userID
            o["name"] = name
            o["avatar_url"] = avatarURL
            o["created_at"] = createdAt
            return o.finish()
        }
    }

    /// How many entries `owner`'s list has.
    static func count(appID: String, owner: String, on db: PostgresConnection) throws -> Int {
        let result = try db.query(
            sql:
                "SELECT count(*) FROM blacklist WHERE app_id = $1 AND user_id = $2", [appID, owner], prepared: true)
        return Int(try result.first?[0].int64 ?? 0)
    }

    /// The ids among `blockedIDs` that are on `owner`'s list.
    static func present(appID: String, owner: String, blockedIDs: [String], on db: PostgresConnection) throws -> Set<String> {
        if blockedIDs.isEmpty { return [] }
        let result = try db.query(
            sql:
                "SELECT blocked_id FROM blacklist WHERE app_id = $1 AND user_id = $2 AND blocked_id = ANY($3::text[])",
            [appID, owner, blockedIDs], prepared: true)
        return Set(try result.rows.map { try $0[0].string })
    }

    /// Adds `blockedIDs` to `owner`'s list at `now`; ids already there are skipped.
    static func insert(appID: String, owner: String, blockedIDs: [String], now: Int64, on db: PostgresConnection) throws {
        if blockedIDs.isEmpty { return }
        _ = try db.query(
            sql:
                """
                INSERT INTO blacklist (app_id, user_id, blocked_id, created_at)
                SELECT $1, $2, b, $4 FROM unnest($3::text[]) AS b
                ON CONFLICT (app_id, user_id, blocked_id) DO NOTHING
                """,
            [appID, owner, blockedIDs, now], prepared: true)
    }

    /// Removes `blockedIDs` from `owner`'s list and returns the ids that were on it.
    static func delete(appID: String, owner: String, blockedIDs: [String], on db: PostgresConnection) throws -> Set<String> {
        if blockedIDs.isEmpty { return [] }
        let result = try db.query(
            sql:
                "DELETE FROM blacklist WHERE app_id = $1 AND user_id = $2 AND blocked_id = ANY($3::text[]) RETURNING blocked_id",
            [appID, owner, blockedIDs], prepared: true)
        return Set(try result.rows.map { try $0[0].string })
    }

    /// Up to `limit` entries of `owner`'s list by `created_at` desc, then `blocked_id` desc, strictly after the
    /// position `after`. Soft-deleted blocked users are hidden (API.md §4) but keep their entry.
    static func list(
        appID: String, owner: String, after: (createdAt: Int64, userID: String)?, limit: Int, on db: PostgresConnection
    ) throws -> [Entry] {
        let select = """
            SELECT b.blocked_id, u.name, u.avatar_url, b.created_at
            FROM blacklist b JOIN users u ON u.app_id = b.app_id AND u.user_id = b.blocked_id
            WHERE b.app_id = $1 AND b.user_id = $2 AND u.deleted_at IS NULL
            """
        let order = " ORDER BY b.created_at DESC, b.blocked_id DESC LIMIT $3"
        let result =
            if let after {
                try db.query(
                    sql:
                        select + " AND (b.created_at, b.blocked_id) < ($4, $5)" + order,
                    [appID, owner, limit, after.createdAt, after.userID], prepared: true)
            } else {
                try db.query(sql: select + order, [appID, owner, limit], prepared: true)
            }
        return try result.rows.map {
            Entry(userID: try $0[0].string, name: try $0[1].string, avatarURL: try $0[2].string, createdAt: try $0[3].int64)
        }
    }
}
