import ParleyPostgres

/// SQL for friend lists (API.md §7). No rules here: callers check owners, limits and inputs.
enum FriendStore {
    /// The columns ``friend(_:)`` decodes, from `friends f` joined with the friend's `users u`.
    private static let select = """
        SELECT f.friend_id, u.name, u.avatar_url, f.alias, f.attributes::text, f.wording, f.created_at, f.updated_at
        FROM friends f JOIN users u ON u.app_id = f.app_id AND u.user_id = f.friend_id
        """

    private static func friend(_ row: PostgresRow) throws -> Friend {
        let attributes = (try? JSONValue.parse(try row[4].string))?.objectValue ?? JSONObject()
        return Friend(
            userID: try row[0].string, name: try row[1].string, avatarURL: try row[2].string, alias: try row[3].string,
            attributes: attributes, wording: try row[5].string, createdAt: try row[6].int64, updatedAt: try row[7].int64)
    }

    /// `owner`'s entry for `friendID`; `visibleOnly` hides a soft-deleted friend (API.md §4: hidden from reads).
    static func fetch(appID: String, owner: String, friendID: String, visibleOnly: Bool = false, on db: PostgresConnection) throws
        -> Friend?
    {
        let sql =
            select + " WHERE f.app_id = $1 AND f.user_id = $2 AND f.friend_id = $3"
            + (visibleOnly ? " AND u.deleted_at IS NULL" : "")
        return try db.query(sql: sql, [appID, owner, friendID], prepared: true).first.map(friend)
    }

    /// How many entries `owner`'s list has.
    static func count(appID: String, owner: String, on db: PostgresConnection) throws -> Int {
        let result = try db.query(sql: "SELECT count(*) FROM friends WHERE app_id = $1 AND user_id = $2", [appID, owner], prepared: true)
        return Int(try result.first?[0].int64 ?? 0)
    }

    /// The ids among `friendIDs` that are on `owner`'s list.
    static func present(appID: String, owner: String, friendIDs: [String], on db: PostgresConnection) throws -> Set<String> {
        if friendIDs.isEmpty { return [] }
        let result = try db.query(
            sql:
                "SELECT friend_id FROM friends WHERE app_id = $1 AND user_id = $2 AND friend_id = ANY($3::text[])",
            [appID, owner, friendIDs], prepared: true)
        return Set(try result.rows.map { try $0[0].string })
    }

    /// The ids among `userIDs` whose own lists have `friendID` (the reverse direction of ``present``).
    static func listing(appID: String, friendID: String, userIDs: [String], on db: PostgresConnection) throws -> Set<String> {
        if userIDs.isEmpty { return [] }
        let result = try db.query(
            sql:
                "SELECT user_id FROM friends WHERE app_id = $1 AND friend_id = $2 AND user_id = ANY($3::text[])",
            [appID, friendID, userIDs], prepared: true)
        return Set(try result.rows.map { try $0[0].string })
    }

    /// Adds `friendID` to `owner`'s list at `now` unless it is there; returns whether a row was added.
    @discardableResult
    static func insert(
        appID: String, owner: String, friendID: String, alias: String, attributes: JSONObject, wording: String, now: Int64,
        on db: PostgresConnection
    ) throws -> Bool {
        let result = try db.query(
            sql:
                """
                INSERT INTO friends (app_id, user_id, friend_id, alias, attributes, wording, created_at, updated_at)
                VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $7)
                ON CONFLICT (app_id, user_id, friend_id) DO NOTHING
                """,
            [appID, owner, friendID, alias, String(decoding: JSONValue.object(attributes).serialized(), as: UTF8.self), wording, now],
            prepared: true)
        return result.affectedRows == 1
    }

    /// Stores `friend`'s alias, attributes and `updated_at` in `owner`'s list.
    static func save(appID: String, owner: String, friend: Friend, on db: PostgresConnection) throws {
        _ = try db.query(
            sql:
                "UPDATE friends SET alias = $4, attributes = $5::jsonb, updated_at = $6 WHERE app_id = $1 AND user_id = $2 AND friend_id = $3",
            [
                appID, owner, friend.userID, friend.alias,
                String(decoding: JSONValue.object(friend.attributes).serialized(), as: UTF8.self), friend.updatedAt,
            ], prepared: true)
    }

    /// Removes `friendIDs` from `owner`'s list and returns the ids that were on it.
    static func delete(appID: String, owner: String, friendIDs: [String], on db: PostgresConnection) throws -> Set<String> {
        if friendIDs.isEmpty { return [] }
        let result = try db.query(
            sql:
                "DELETE FROM friends WHERE app_id = $1 AND user_id = $2 AND friend_id = ANY($3::text[]) RETURNING friend_id",
            [appID, owner, friendIDs], prepared: true)
        return Set(try result.rows.map { try $0[0].string })
    }

    /// Removes `friendID` from the lists of `userIDs` (the reverse entries of a `both` delete).
    static func deleteReverse(appID: String, friendID: String, userIDs: [String], on db: PostgresConnection) throws {
        if userIDs.isEmpty { return }
        _ = try db.query(
            sql:
                "DELETE FROM friends WHERE app_id = $1 AND friend_id = $2 AND user_id = ANY($3::text[])",
            [appID, friendID, userIDs], prepared: true)
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
    /// folds ASCII letters only (API.md §1.5 asks for Unicode lowercasing).
    private static func list(
        appID: String, owner: String, keywords: [String], matchAlias: Bool, after: (createdAt: Int64, userID: String)?, limit: Int,
        unicode: Bool, on db: PostgresConnection
    ) throws -> [Friend] {
        var parameters: [(any PostgresEncodable)?] = [appID, owner, limit]
        var sql = select + " WHERE f.app_id = $1 AND f.user_id = $2 AND u.deleted_at IS NULL"
        if let after {
            parameters += [after.createdAt, after.userID]
            sql += " AND (f.created_at, f.friend_id) < ($4, $5)"
        }
        if !keywords.isEmpty {
            parameters.append(keywords)
            let p = "$\(parameters.count)::text[]"
            func lower(_ column: String) -> String { unicode ? #"lower(\#(column) COLLATE "und-x-icu")"# : "lower(\(column))" }
            var fields = [lower("f.friend_id"), lower("u.name")]
            if matchAlias { fields.append(lower("f.alias")) }
            let any = fields.map { "strpos(\($0), k) > 0" }.joined(separator: " OR ")
            // Every keyword must match one of the fields.
            sql += " AND NOT EXISTS (SELECT 1 FROM unnest(\(p)) AS k WHERE NOT (\(any)))"
        }
        sql += " ORDER BY f.created_at DESC, f.friend_id DESC LIMIT $3"
        return try db.query(sql: sql, parameters, prepared: true).rows.map(friend)
    }
}
