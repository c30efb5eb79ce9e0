import ParleyAPI
import ParleyCore
import ParleyPostgres

/// SQL for blacklists (docs/social.md#blacklists). No rules here: callers check owners, limits and inputs.
enum BlacklistStore {
    /// One listed entry: the blocked user's public profile and when it was blocked.
    struct Entry: Sendable, Equatable {
        var userID: String
        var name: String
        var avatarURL: String
        var createdAt: Int64

        /// `{user_id, name, avatar_url, created_at}` (docs/social.md#blacklists).
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
    package static func count(appID: String, owner: String, on db: PostgresConnection) throws -> Int {
        let count = try db.query("SELECT count(*) FROM blacklist WHERE app_id = \(appID) AND user_id = \(owner)").decodeFirst(Int64.self)
        return Int(count ?? 0)
    }

    /// The ids among `blockedIDs` that are on `owner`'s list.
    static func present(appID: String, owner: String, blockedIDs: [String], on db: PostgresConnection) throws -> Set<String> {
        if blockedIDs.isEmpty { return [] }
        let ids = try db.query(
            "SELECT blocked_id FROM blacklist WHERE app_id = \(appID) AND user_id = \(owner) AND blocked_id = ANY(\(blockedIDs)::text[])"
        ).decode(String.self)
        return Set(ids)
    }

    /// Adds `blockedIDs` to `owner`'s list at `now`; ids already there are skipped.
    static func insert(appID: String, owner: String, blockedIDs: [String], now: Int64, on db: PostgresConnection) throws {
        if blockedIDs.isEmpty { return }
        try db.query(
            """
            INSERT INTO blacklist (app_id, user_id, blocked_id, created_at)
            SELECT \(appID), \(owner), b, \(now) FROM unnest(\(blockedIDs)::text[]) AS b
            ON CONFLICT (app_id, user_id, blocked_id) DO NOTHING
            """)
    }

    /// Removes `blockedIDs` from `owner`'s list and returns the ids that were on it.
    package static func delete(appID: String, owner: String, blockedIDs: [String], on db: PostgresConnection) throws -> Set<String> {
        if blockedIDs.isEmpty { return [] }
        let deleted = try db.query(
            """
            DELETE FROM blacklist WHERE app_id = \(appID) AND user_id = \(owner) AND blocked_id = ANY(\(blockedIDs)::text[])
            RETURNING blocked_id
            """
        ).decode(String.self)
        return Set(deleted)
    }

    /// Up to `limit` entries of `owner`'s list by `created_at` desc, then `blocked_id` desc, strictly after the
    /// position `after`. Soft-deleted blocked users are hidden (docs/users.md) but keep their entry.
    static func list(
        appID: String, owner: String, after: (createdAt: Int64, userID: String)?, limit: Int, on db: PostgresConnection
    ) throws -> [Entry] {
        var query: PostgresQuery = """
            SELECT b.blocked_id, u.name, u.avatar_url, b.created_at
            FROM blacklist b JOIN users u ON u.app_id = b.app_id AND u.user_id = b.blocked_id
            WHERE b.app_id = \(appID) AND b.user_id = \(owner) AND u.deleted_at IS NULL
            """
        if let after { query += " AND (b.created_at, b.blocked_id) < (\(after.createdAt), \(after.userID))" }
        query += " ORDER BY b.created_at DESC, b.blocked_id DESC LIMIT \(limit)"
        return try db.query(query).decode((String, String, String, Int64).self).map {
            Entry(userID: $0.0, name: $0.1, avatarURL: $0.2, createdAt: $0.3)
        }
    }
}
