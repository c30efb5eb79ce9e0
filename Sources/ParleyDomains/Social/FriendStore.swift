import ParleyAPI
import ParleyCore
import ParleyPostgres

/// SQL for friend lists (docs/social.md#friends). No rules here: callers check owners, limits and inputs.
enum FriendStore {
    /// The columns ``friend(_:)`` decodes, from `friends f` joined with the friend's `users u`.
    private static let select = """
        SELECT f.friend_id, u.name, u.avatar_url, f.alias, f.attributes::text, f.wording, f.created_at, f.updated_at
        FROM friends f JOIN users u ON u.app_id = f.app_id AND u.user_id = f.friend_id
        """

    private static func friend(_ row: PostgresRow) throws -> Friend {
        let (userID, name, avatarURL, alias, attributesText, wording, createdAt, updatedAt) = try row.decode(
            (String, String, String, String, String, String, Int64, Int64).self)
        let attributes = (try? JSONValue.parse(attributesText))?.objectValue ?? JSONObject()
        return Friend(
            userID: userID, name: name, avatarURL: avatarURL, alias: alias, attributes: attributes, wording: wording, createdAt: createdAt,
            updatedAt: updatedAt)
    }

    /// `owner`'s entry for `friendID`; `visibleOnly` hides a soft-deleted friend (soft-deleted users are hidden from
    /// reads).
    package static func fetch(appID: String, owner: String, friendID: String, visibleOnly: Bool = false, on db: PostgresConnection) throws
        -> Friend?
    {
        var query: PostgresQuery = "\(unsafeSQL: select) WHERE f.app_id = \(appID) AND f.user_id = \(owner) AND f.friend_id = \(friendID)"
        if visibleOnly { query += " AND u.deleted_at IS NULL" }
        return try db.query(query).first.map(friend)
    }

    /// How many entries `owner`'s list has.
    package static func count(appID: String, owner: String, on db: PostgresConnection) throws -> Int {
        let count = try db.query("SELECT count(*) FROM friends WHERE app_id = \(appID) AND user_id = \(owner)").decodeFirst(Int64.self)
        return Int(count ?? 0)
    }

    /// The ids among `friendIDs` that are on `owner`'s list.
    static func present(appID: String, owner: String, friendIDs: [String], on db: PostgresConnection) throws -> Set<String> {
        if friendIDs.isEmpty { return [] }
        let ids = try db.query(
            "SELECT friend_id FROM friends WHERE app_id = \(appID) AND user_id = \(owner) AND friend_id = ANY(\(friendIDs)::text[])"
        ).decode(String.self)
        return Set(ids)
    }

    /// The ids among `userIDs` whose own lists have `friendID` (the reverse direction of ``present``).
    static func listing(appID: String, friendID: String, userIDs: [String], on db: PostgresConnection) throws -> Set<String> {
        if userIDs.isEmpty { return [] }
        let ids = try db.query(
            "SELECT user_id FROM friends WHERE app_id = \(appID) AND friend_id = \(friendID) AND user_id = ANY(\(userIDs)::text[])"
        ).decode(String.self)
        return Set(ids)
    }

    /// Adds `friendID` to `owner`'s list at `now` unless it is there; returns whether a row was added.
    @discardableResult
    static func insert(
        appID: String, owner: String, friendID: String, alias: String, attributes: JSONObject, wording: String, now: Int64,
        on db: PostgresConnection
    ) throws -> Bool {
        let attributesText = String(decoding: JSONValue.object(attributes).serialized(), as: UTF8.self)
        let result = try db.query(
            """
            INSERT INTO friends (app_id, user_id, friend_id, alias, attributes, wording, created_at, updated_at)
            VALUES (\(appID), \(owner), \(friendID), \(alias), \(attributesText)::jsonb, \(wording), \(now), \(now))
            ON CONFLICT (app_id, user_id, friend_id) DO NOTHING
            """)
        return result.affectedRows == 1
    }

    /// Stores `friend`'s alias, attributes and `updated_at` in `owner`'s list.
    static func save(appID: String, owner: String, friend: Friend, on db: PostgresConnection) throws {
        let attributesText = String(decoding: JSONValue.object(friend.attributes).serialized(), as: UTF8.self)
        try db.query(
            """
            UPDATE friends SET alias = \(friend.alias), attributes = \(attributesText)::jsonb, updated_at = \(friend.updatedAt)
            WHERE app_id = \(appID) AND user_id = \(owner) AND friend_id = \(friend.userID)
            """)
    }

    /// Removes `friendIDs` from `owner`'s list and returns the ids that were on it.
    package static func delete(appID: String, owner: String, friendIDs: [String], on db: PostgresConnection) throws -> Set<String> {
        if friendIDs.isEmpty { return [] }
        let deleted = try db.query(
            """
            DELETE FROM friends WHERE app_id = \(appID) AND user_id = \(owner) AND friend_id = ANY(\(friendIDs)::text[])
            RETURNING friend_id
            """
        ).decode(String.self)
        return Set(deleted)
    }

    /// Removes `friendID` from the lists of `userIDs` (the reverse entries of a `both` delete).
    static func deleteReverse(appID: String, friendID: String, userIDs: [String], on db: PostgresConnection) throws {
        if userIDs.isEmpty { return }
        try db.query("DELETE FROM friends WHERE app_id = \(appID) AND friend_id = \(friendID) AND user_id = ANY(\(userIDs)::text[])")
    }

    /// Up to `limit` visible entries of `owner`'s list by `created_at` desc, then `friend_id` desc, strictly after
    /// `after`, each matching every keyword of `keywords` (already lowercased) as a substring of the friend's
    /// lowercased `user_id` or `name`, or of the alias when `matchAlias`.
    static func list(
        appID: String, owner: String, keywords: [String], matchAlias: Bool, after: (createdAt: Int64, userID: String)?, limit: Int,
        on db: PostgresConnection
    ) throws -> [Friend] {
        do {
            return try list(
                appID: appID, owner: owner, keywords: keywords, matchAlias: matchAlias, after: after, limit: limit, unicode: true, on: db)
        } catch let error as PostgresError where error.sqlState == "42704" && !keywords.isEmpty {
            // A server built without ICU has no "und-x-icu" collation: fall back to lower() of the database locale.
            return try list(
                appID: appID, owner: owner, keywords: keywords, matchAlias: matchAlias, after: after, limit: limit, unicode: false, on: db)
        }
    }

    /// `unicode`: lowercase with ICU's root locale, because lower() under the "C" locale of the embedded cluster
    /// folds ASCII letters only (list filters compare after Unicode lowercasing).
    private static func list(
        appID: String, owner: String, keywords: [String], matchAlias: Bool, after: (createdAt: Int64, userID: String)?, limit: Int,
        unicode: Bool, on db: PostgresConnection
    ) throws -> [Friend] {
        var query: PostgresQuery = "\(unsafeSQL: select) WHERE f.app_id = \(appID) AND f.user_id = \(owner) AND u.deleted_at IS NULL"
        if let after { query += " AND (f.created_at, f.friend_id) < (\(after.createdAt), \(after.userID))" }
        if !keywords.isEmpty {
            func lower(_ column: String) -> String { unicode ? #"lower(\#(column) COLLATE "und-x-icu")"# : "lower(\(column))" }
            var fields = [lower("f.friend_id"), lower("u.name")]
            if matchAlias { fields.append(lower("f.alias")) }
            let any = fields.map { "strpos(\($0), k) > 0" }.joined(separator: " OR ")
            // Every keyword must match one of the fields.
            query += " AND NOT EXISTS (SELECT 1 FROM unnest(\(keywords)::text[]) AS k WHERE NOT (\(unsafeSQL: any)))"
        }
        query += " ORDER BY f.created_at DESC, f.friend_id DESC LIMIT \(limit)"
        return try db.query(query).rows.map(friend)
    }
}
