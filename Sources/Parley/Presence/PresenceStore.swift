import ParleyPostgres

/// SQL for presence (API.md §5): status rows and status subscriptions. No rules here: callers check users, limits
/// and inputs, and read statuses through ``UserStatus/asOf(_:)``.
enum PresenceStore {
    /// The status columns ``status(_:from:)`` decodes, in order, qualified by the alias `s`.
    static let columns = """
        s.online_status, s.online_platforms, s.last_online_status_updated_at, s.custom_status, \
        s.custom_status_expires_at, s.last_custom_status_updated_at
        """

    /// The status of `userID` from the columns at `offset` (all NULL when a LEFT JOIN found no row: the defaults).
    static func status(userID: String, _ row: PostgresRow, from offset: Int) throws -> UserStatus {
        if row[offset].isNull { return UserStatus(userID: userID) }
        return UserStatus(
            userID: userID, onlineStatus: try row[offset].string, onlinePlatforms: try row[offset + 1].stringArray,
            lastOnlineStatusUpdatedAt: try row[offset + 2].int64, customStatus: try row[offset + 3].string,
            customStatusExpiresAt: try row[offset + 4].int64, lastCustomStatusUpdatedAt: try row[offset + 5].int64)
    }

    // MARK: - Statuses

    /// The stored statuses of the users among `userIDs` that exist and are not soft-deleted, by user id (a user
    /// without a status row gets the defaults).
    static func statuses(appID: String, userIDs: [String], on db: PostgresConnection) throws -> [String: UserStatus] {
        if userIDs.isEmpty { return [:] }
        let result = try db.query(
            sql:
                """
                SELECT u.user_id, \(columns)
                FROM users u LEFT JOIN user_statuses s ON s.app_id = u.app_id AND s.user_id = u.user_id
                WHERE u.app_id = $1 AND u.user_id = ANY($2::text[]) AND u.deleted_at IS NULL
                """,
            [appID, userIDs], prepared: true)
        var out: [String: UserStatus] = [:]
        for row in result.rows {
            let userID = try row[0].string
            out[userID] = try status(userID: userID, row, from: 1)
        }
        return out
    }

    /// Sets the custom part of `userID`'s status (creating its row with offline defaults) and returns the whole
    /// stored status. The online part is left as the streams last wrote it.
    static func setCustom(
        appID: String, userID: String, customStatus: String, expiresAt: Int64, now: Int64, on db: PostgresConnection
    ) throws -> UserStatus {
        let result = try db.query(
            sql:
                """
                INSERT INTO user_statuses AS s (app_id, user_id, custom_status, custom_status_expires_at, last_custom_status_updated_at)
                VALUES ($1, $2, $3, $4, $5)
                ON CONFLICT (app_id, user_id) DO UPDATE
                SET custom_status = EXCLUDED.custom_status, custom_status_expires_at = EXCLUDED.custom_status_expires_at,
                    last_custom_status_updated_at = EXCLUDED.last_custom_status_updated_at
                RETURNING \(columns)
                """,
            [appID, userID, customStatus, expiresAt, now], prepared: true)
        guard let row = result.first else { throw APIError(.internalError, "status of \(userID) not written") }
        return try status(userID: userID, row, from: 0)
    }

    /// Sets the online part of `userID`'s status (creating its row) and returns the whole stored status; only the
    /// live streams call it (``StreamPresence``).
    static func setOnline(
        appID: String, userID: String, onlineStatus: String, platforms: [String], now: Int64, on db: PostgresConnection
    ) throws -> UserStatus {
        let result = try db.query(
            sql:
                """
                INSERT INTO user_statuses AS s (app_id, user_id, online_status, online_platforms, last_online_status_updated_at)
                VALUES ($1, $2, $3, $4, $5)
                ON CONFLICT (app_id, user_id) DO UPDATE
                SET online_status = EXCLUDED.online_status, online_platforms = EXCLUDED.online_platforms,
                    last_online_status_updated_at = EXCLUDED.last_online_status_updated_at
                RETURNING \(columns)
                """,
            [appID, userID, onlineStatus, platforms, now], prepared: true)
        guard let row = result.first else { throw APIError(.internalError, "status of \(userID) not written") }
        return try status(userID: userID, row, from: 0)
    }

    /// Reverts up to `limit` custom statuses due at `now`, in any app, to `""` (as of their expiry) and returns them
    /// with their apps. Claims rows with `SKIP LOCKED` and re-checks the due condition in the UPDATE, so concurrent
    /// runs (and a concurrent set) never revert, and so never announce, the same status twice.
    static func expireDueCustom(now: Int64, limit: Int, on db: PostgresConnection) throws -> [(appID: String, status: UserStatus)] {
        let result = try db.query(
            sql:
                """
                WITH due AS (
                    SELECT app_id, user_id FROM user_statuses
                    WHERE custom_status <> '' AND custom_status_expires_at <= $1
                    ORDER BY custom_status_expires_at
                    LIMIT $2
                    FOR UPDATE SKIP LOCKED
                )
                UPDATE user_statuses s
                SET custom_status = '', custom_status_expires_at = 0, last_custom_status_updated_at = s.custom_status_expires_at
                FROM due
                WHERE s.app_id = due.app_id AND s.user_id = due.user_id
                  AND s.custom_status <> '' AND s.custom_status_expires_at <= $1
                RETURNING s.app_id, s.user_id, \(columns)
                """,
            [now, limit], prepared: true)
        return try result.rows.map { row in
            (try row[0].string, try status(userID: try row[1].string, row, from: 2))
        }
    }

    // MARK: - Subscriptions

    /// One subscription of a subscriber: the target and when the subscription ends.
    struct Subscription: Sendable, Equatable {
        var targetID: String
        var expiresAt: Int64
    }

    /// The unexpired subscribers of each of `targetIDs` at `now`, by target, each list in subscriber order.
    static func subscribers(appID: String, targetIDs: [String], now: Int64, on db: PostgresConnection) throws -> [String: [String]] {
        if targetIDs.isEmpty { return [:] }
        let result = try db.query(
            sql:
                """
                SELECT target_id, subscriber_id FROM status_subscriptions
                WHERE app_id = $1 AND target_id = ANY($2::text[]) AND expires_at > $3
                ORDER BY target_id, subscriber_id
                """,
            [appID, targetIDs, now], prepared: true)
        var out: [String: [String]] = [:]
        for row in result.rows { out[try row[0].string, default: []].append(try row[1].string) }
        return out
    }

    /// How many unexpired subscriptions `subscriberID` holds at `now`.
    static func count(appID: String, subscriberID: String, now: Int64, on db: PostgresConnection) throws -> Int {
        let result = try db.query(
            sql:
                "SELECT count(*) FROM status_subscriptions WHERE app_id = $1 AND subscriber_id = $2 AND expires_at > $3",
            [appID, subscriberID, now], prepared: true)
        return Int(try result.first?[0].int64 ?? 0)
    }

    /// The ids among `targetIDs` that `subscriberID` holds an unexpired subscription to at `now`.
    static func subscribed(
        appID: String, subscriberID: String, targetIDs: [String], now: Int64, on db: PostgresConnection
    ) throws -> Set<String> {
        if targetIDs.isEmpty { return [] }
        let result = try db.query(
            sql:
                """
                SELECT target_id FROM status_subscriptions
                WHERE app_id = $1 AND subscriber_id = $2 AND target_id = ANY($3::text[]) AND expires_at > $4
                """,
            [appID, subscriberID, targetIDs, now], prepared: true)
        return Set(try result.rows.map { try $0[0].string })
    }

    /// Subscribes `subscriberID` to `targetIDs` until `expiresAt`; an existing (even expired) subscription gets the
    /// new `expires_at`.
    static func upsert(
        appID: String, subscriberID: String, targetIDs: [String], expiresAt: Int64, now: Int64, on db: PostgresConnection
    ) throws {
        if targetIDs.isEmpty { return }
        _ = try db.query(
            sql:
                """
                INSERT INTO status_subscriptions (app_id, subscriber_id, target_id, created_at, expires_at)
                SELECT $1, $2, t, $4, $5 FROM unnest($3::text[]) AS t
                ON CONFLICT (app_id, subscriber_id, target_id) DO UPDATE SET expires_at = EXCLUDED.expires_at
                """,
            [appID, subscriberID, targetIDs, now, expiresAt], prepared: true)
    }

    /// Removes `subscriberID`'s subscriptions to `targetIDs` (expired ones too) and returns the targets whose
    /// subscription was still unexpired at `now`.
    static func delete(
        appID: String, subscriberID: String, targetIDs: [String], now: Int64, on db: PostgresConnection
    ) throws -> Set<String> {
        if targetIDs.isEmpty { return [] }
        let result = try db.query(
            sql:
                """
                DELETE FROM status_subscriptions
                WHERE app_id = $1 AND subscriber_id = $2 AND target_id = ANY($3::text[])
                RETURNING target_id, expires_at
                """,
            [appID, subscriberID, targetIDs], prepared: true)
        var out: Set<String> = []
        for row in result.rows {
            if try row[1].int64 > now { out.insert(try row[0].string) }
        }
        return out
    }

    /// Up to `limit` of `subscriberID`'s unexpired subscriptions at `now` with their targets' stored statuses, by
    /// target id asc, strictly after `afterTargetID`, optionally only to `targetIDs`. Soft-deleted targets are
    /// hidden (API.md §4) but keep their subscription.
    static func list(
        appID: String, subscriberID: String, targetIDs: [String]?, afterTargetID: String?, limit: Int, now: Int64,
        on db: PostgresConnection
    ) throws -> [(subscription: Subscription, status: UserStatus)] {
        var parameters: [(any PostgresEncodable)?] = [appID, subscriberID, now, limit]
        var sql = """
            SELECT b.target_id, b.expires_at, \(columns)
            FROM status_subscriptions b
            JOIN users u ON u.app_id = b.app_id AND u.user_id = b.target_id
            LEFT JOIN user_statuses s ON s.app_id = b.app_id AND s.user_id = b.target_id
            WHERE b.app_id = $1 AND b.subscriber_id = $2 AND b.expires_at > $3 AND u.deleted_at IS NULL
            """
        if let targetIDs {
            parameters.append(targetIDs)
            sql += " AND b.target_id = ANY($\(parameters.count)::text[])"
        }
        if let afterTargetID {
            parameters.append(afterTargetID)
            sql += " AND b.target_id > $\(parameters.count)"
        }
        sql += " ORDER BY b.target_id LIMIT $4"
        return try db.query(sql: sql, parameters, prepared: true).rows.map { row in
            let targetID = try row[0].string
            return (Subscription(targetID: targetID, expiresAt: try row[1].int64), try status(userID: targetID, row, from: 2))
        }
    }

    /// Deletes up to `limit` subscriptions due at `now` in any app and returns how many. Expired subscriptions go
    /// silently (API.md §5); `SKIP LOCKED` plus the re-checked condition keep concurrent runs and re-subscribes safe.
    static func deleteExpired(now: Int64, limit: Int, on db: PostgresConnection) throws -> Int {
        let result = try db.query(
            sql:
                """
                WITH due AS (
                    SELECT app_id, subscriber_id, target_id FROM status_subscriptions
                    WHERE expires_at <= $1
                    ORDER BY expires_at
                    LIMIT $2
                    FOR UPDATE SKIP LOCKED
                )
                DELETE FROM status_subscriptions b USING due
                WHERE b.app_id = due.app_id AND b.subscriber_id = due.subscriber_id AND b.target_id = due.target_id
                  AND b.expires_at <= $1
                RETURNING b.target_id
                """,
            [now, limit], prepared: true)
        return result.rowCount
    }
}
