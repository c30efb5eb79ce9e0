import ParleyAPI
import ParleyCore
import ParleyPostgres

/// SQL for presence (docs/users.md#presence): status rows and status subscriptions. No rules here: callers check users,
/// limits and inputs, and read statuses through ``UserStatus/asOf(_:)``.
package enum PresenceStore {
    /// The status columns ``status(_:from:)`` decodes, in order, qualified by the alias `s`.
    static let columns = """
        s.online_status, s.online_platforms, s.last_online_status_updated_at, s.custom_status, \
        s.custom_status_expires_at, s.last_custom_status_updated_at
        """

    /// The types of ``columns``, in order, for a stored status row.
    private typealias StatusColumns = (String, [String], Int64, String, Int64, Int64)

    /// The status of `userID` from the columns at `offset` (all NULL when a LEFT JOIN found no row: the defaults).
    package static func status(userID: String, _ row: PostgresRow, from offset: Int) throws -> UserStatus {
        // `online_status` is NOT NULL in a stored row, so NULL there means no row.
        if try row.decode(String?.self, at: offset) == nil { return UserStatus(userID: userID) }
        let (onlineStatus, onlinePlatforms, onlineUpdatedAt, customStatus, customExpiresAt, customUpdatedAt) = try row.decode(
            StatusColumns.self, at: offset)
        return UserStatus(
            userID: userID, onlineStatus: onlineStatus, onlinePlatforms: onlinePlatforms, lastOnlineStatusUpdatedAt: onlineUpdatedAt,
            customStatus: customStatus, customStatusExpiresAt: customExpiresAt, lastCustomStatusUpdatedAt: customUpdatedAt)
    }

    // MARK: - Statuses

    /// The stored statuses of the users among `userIDs` that exist and are not soft-deleted, by user id (a user
    /// without a status row gets the defaults).
    static func statuses(appID: String, userIDs: [String], on db: PostgresConnection) throws -> [String: UserStatus] {
        if userIDs.isEmpty { return [:] }
        let result = try db.query(
            """
            SELECT u.user_id, \(unsafeSQL: columns)
            FROM users u LEFT JOIN user_statuses s ON s.app_id = u.app_id AND s.user_id = u.user_id
            WHERE u.app_id = \(appID) AND u.user_id = ANY(\(userIDs)::text[]) AND u.deleted_at IS NULL
            """)
        var out: [String: UserStatus] = [:]
        for row in result.rows {
            let userID = try row.decode(String.self, at: 0)
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
            """
            INSERT INTO user_statuses AS s (app_id, user_id, custom_status, custom_status_expires_at, last_custom_status_updated_at)
            VALUES (\(appID), \(userID), \(customStatus), \(expiresAt), \(now))
            ON CONFLICT (app_id, user_id) DO UPDATE
            SET custom_status = EXCLUDED.custom_status, custom_status_expires_at = EXCLUDED.custom_status_expires_at,
                last_custom_status_updated_at = EXCLUDED.last_custom_status_updated_at
            RETURNING \(unsafeSQL: columns)
            """)
        guard let row = result.first else { throw APIError(.internalError, "status of \(userID) not written") }
        return try status(userID: userID, row, from: 0)
    }

    /// Sets the online part of `userID`'s status (creating its row) and returns the whole stored status; only the
    /// live streams call it (``StreamPresence``).
    package static func setOnline(
        appID: String, userID: String, onlineStatus: String, platforms: [String], now: Int64, on db: PostgresConnection
    ) throws -> UserStatus {
        let result = try db.query(
            """
            INSERT INTO user_statuses AS s (app_id, user_id, online_status, online_platforms, last_online_status_updated_at)
            VALUES (\(appID), \(userID), \(onlineStatus), \(platforms), \(now))
            ON CONFLICT (app_id, user_id) DO UPDATE
            SET online_status = EXCLUDED.online_status, online_platforms = EXCLUDED.online_platforms,
                last_online_status_updated_at = EXCLUDED.last_online_status_updated_at
            RETURNING \(unsafeSQL: columns)
            """)
        guard let row = result.first else { throw APIError(.internalError, "status of \(userID) not written") }
        return try status(userID: userID, row, from: 0)
    }

    /// Reverts up to `limit` custom statuses due at `now`, in any app, to `""` (as of their expiry) and returns them
    /// with their apps. Claims rows with `SKIP LOCKED` and re-checks the due condition in the UPDATE, so concurrent
    /// runs (and a concurrent set) never revert, and so never announce, the same status twice.
    static func expireDueCustom(now: Int64, limit: Int, on db: PostgresConnection) throws -> [(appID: String, status: UserStatus)] {
        let result = try db.query(
            """
            WITH due AS (
                SELECT app_id, user_id FROM user_statuses
                WHERE custom_status <> '' AND custom_status_expires_at <= \(now)
                ORDER BY custom_status_expires_at
                LIMIT \(limit)
                FOR UPDATE SKIP LOCKED
            )
            UPDATE user_statuses s
            SET custom_status = '', custom_status_expires_at = 0, last_custom_status_updated_at = s.custom_status_expires_at
            FROM due
            WHERE s.app_id = due.app_id AND s.user_id = due.user_id
              AND s.custom_status <> '' AND s.custom_status_expires_at <= \(now)
            RETURNING s.app_id, s.user_id, \(unsafeSQL: columns)
            """)
        return try result.rows.map { row in
            let (appID, userID) = try row.decode((String, String).self, at: 0)
            return (appID, try status(userID: userID, row, from: 2))
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
        let pairs = try db.query(
            """
            SELECT target_id, subscriber_id FROM status_subscriptions
            WHERE app_id = \(appID) AND target_id = ANY(\(targetIDs)::text[]) AND expires_at > \(now)
            ORDER BY target_id, subscriber_id
            """
        ).decode((String, String).self)
        var out: [String: [String]] = [:]
        for (targetID, subscriberID) in pairs { out[targetID, default: []].append(subscriberID) }
        return out
    }

    /// How many unexpired subscriptions `subscriberID` holds at `now`.
    package static func count(appID: String, subscriberID: String, now: Int64, on db: PostgresConnection) throws -> Int {
        let count = try db.query(
            "SELECT count(*) FROM status_subscriptions WHERE app_id = \(appID) AND subscriber_id = \(subscriberID) AND expires_at > \(now)"
        ).decodeFirst(Int64.self)
        return Int(count ?? 0)
    }

    /// The ids among `targetIDs` that `subscriberID` holds an unexpired subscription to at `now`.
    static func subscribed(
        appID: String, subscriberID: String, targetIDs: [String], now: Int64, on db: PostgresConnection
    ) throws -> Set<String> {
        if targetIDs.isEmpty { return [] }
        let ids = try db.query(
            """
            SELECT target_id FROM status_subscriptions
            WHERE app_id = \(appID) AND subscriber_id = \(subscriberID) AND target_id = ANY(\(targetIDs)::text[]) AND expires_at > \(now)
            """
        ).decode(String.self)
        return Set(ids)
    }

    /// Subscribes `subscriberID` to `targetIDs` until `expiresAt`; an existing (even expired) subscription gets the
    /// new `expires_at`.
    static func upsert(
        appID: String, subscriberID: String, targetIDs: [String], expiresAt: Int64, now: Int64, on db: PostgresConnection
    ) throws {
        if targetIDs.isEmpty { return }
        try db.query(
            """
            INSERT INTO status_subscriptions (app_id, subscriber_id, target_id, created_at, expires_at)
            SELECT \(appID), \(subscriberID), t, \(now), \(expiresAt) FROM unnest(\(targetIDs)::text[]) AS t
            ON CONFLICT (app_id, subscriber_id, target_id) DO UPDATE SET expires_at = EXCLUDED.expires_at
            """)
    }

    /// Removes `subscriberID`'s subscriptions to `targetIDs` (expired ones too) and returns the targets whose
    /// subscription was still unexpired at `now`.
    package static func delete(
        appID: String, subscriberID: String, targetIDs: [String], now: Int64, on db: PostgresConnection
    ) throws -> Set<String> {
        if targetIDs.isEmpty { return [] }
        let deleted = try db.query(
            """
            DELETE FROM status_subscriptions
            WHERE app_id = \(appID) AND subscriber_id = \(subscriberID) AND target_id = ANY(\(targetIDs)::text[])
            RETURNING target_id, expires_at
            """
        ).decode((String, Int64).self)
        return Set(deleted.filter { $0.1 > now }.map(\.0))
    }

    /// Up to `limit` of `subscriberID`'s unexpired subscriptions at `now` with their targets' stored statuses, by
    /// target id asc, strictly after `afterTargetID`, optionally only to `targetIDs`. Soft-deleted targets are
    /// hidden (docs/users.md) but keep their subscription.
    static func list(
        appID: String, subscriberID: String, targetIDs: [String]?, afterTargetID: String?, limit: Int, now: Int64,
        on db: PostgresConnection
    ) throws -> [(subscription: Subscription, status: UserStatus)] {
        var query: PostgresQuery = """
            SELECT b.target_id, b.expires_at, \(unsafeSQL: columns)
            FROM status_subscriptions b
            JOIN users u ON u.app_id = b.app_id AND u.user_id = b.target_id
            LEFT JOIN user_statuses s ON s.app_id = b.app_id AND s.user_id = b.target_id
            WHERE b.app_id = \(appID) AND b.subscriber_id = \(subscriberID) AND b.expires_at > \(now) AND u.deleted_at IS NULL
            """
        if let targetIDs { query += " AND b.target_id = ANY(\(targetIDs)::text[])" }
        if let afterTargetID { query += " AND b.target_id > \(afterTargetID)" }
        query += " ORDER BY b.target_id LIMIT \(limit)"
        return try db.query(query).rows.map { row in
            let (targetID, expiresAt) = try row.decode((String, Int64).self, at: 0)
            return (Subscription(targetID: targetID, expiresAt: expiresAt), try status(userID: targetID, row, from: 2))
        }
    }

    /// Deletes up to `limit` subscriptions due at `now` in any app and returns how many. Expired subscriptions go
    /// silently (docs/users.md#presence); `SKIP LOCKED` plus the re-checked condition keep concurrent runs and
    /// re-subscribes safe.
    static func deleteExpired(now: Int64, limit: Int, on db: PostgresConnection) throws -> Int {
        let result = try db.query(
            """
            WITH due AS (
                SELECT app_id, subscriber_id, target_id FROM status_subscriptions
                WHERE expires_at <= \(now)
                ORDER BY expires_at
                LIMIT \(limit)
                FOR UPDATE SKIP LOCKED
            )
            DELETE FROM status_subscriptions b USING due
            WHERE b.app_id = due.app_id AND b.subscriber_id = due.subscriber_id AND b.target_id = due.target_id
              AND b.expires_at <= \(now)
            RETURNING b.target_id
            """)
        return result.rowCount
    }
}
