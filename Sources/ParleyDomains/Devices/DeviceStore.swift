import ParleyAPI
import ParleyCore
import ParleyPostgres

/// SQL for devices and push rules (docs/users.md#devices-and-the-offline-push-rule). No rules here: ``DeviceService``
/// checks inputs and holds the user-row locks.
enum DeviceStore {
    /// The columns ``device(_:)`` decodes, in order.
    static let columns =
        "device_id, user_id, platform, provider, push_key, push_app_id, voip, apptype, lang, created_at, updated_at, last_push_at"

    /// The types of ``columns``, in order.
    typealias Columns = (String, String, String, String, String, String, Bool, Int64, String, Int64, Int64, Int64?)

    static func device(_ row: PostgresRow) throws -> Device { try device(try row.decode(Columns.self)) }

    static func device(_ columns: Columns) throws -> Device {
        let (deviceID, userID, platform, provider, pushKey, pushAppID, voip, apptype, lang, createdAt, updatedAt, lastPushAt) = columns
        guard let p = Device.Platform(rawValue: platform), let v = Device.Provider(rawValue: provider) else {
            throw APIError(.internalError, "device row with platform \(platform) provider \(provider)")
        }
        return Device(
            deviceID: deviceID, userID: userID, platform: p, provider: v, pushKey: pushKey, pushAppID: pushAppID, voip: voip,
            apptype: apptype, lang: lang, createdAt: createdAt, updatedAt: updatedAt, lastPushAt: lastPushAt)
    }

    // MARK: - Devices

    /// The user's devices by `created_at`, then `device_id`.
    static func list(appID: String, userID: String, on db: PostgresConnection) throws -> [Device] {
        try db.query(
            "SELECT \(unsafeSQL: columns) FROM devices WHERE app_id = \(appID) AND user_id = \(userID) ORDER BY created_at, device_id"
        ).rows.map(device)
    }

    package static func fetch(appID: String, userID: String, deviceID: String, on db: PostgresConnection) throws -> Device? {
        try db.query(
            "SELECT \(unsafeSQL: columns) FROM devices WHERE app_id = \(appID) AND user_id = \(userID) AND device_id = \(deviceID)"
        ).first.map(device)
    }

    /// The device (of any user) holding `provider` + `pushAppID` + `pushKey`.
    package static func fetch(
        appID: String, provider: Device.Provider, pushAppID: String, pushKey: String, on db: PostgresConnection
    ) throws -> Device? {
        try db.query(
            "SELECT \(unsafeSQL: columns) FROM devices WHERE app_id = \(appID) AND provider = \(provider.rawValue) AND push_app_id = \(pushAppID) AND push_key = \(pushKey)"
        ).first.map(device)
    }

    static func insert(appID: String, device d: Device, on db: PostgresConnection) throws {
        _ = try db.query(
            """
            INSERT INTO devices (app_id, user_id, device_id, platform, provider, push_key, push_app_id, voip, apptype, lang,
                                 created_at, updated_at, last_push_at)
            VALUES (\(appID), \(d.userID), \(d.deviceID), \(d.platform.rawValue), \(d.provider.rawValue), \(d.pushKey), \(d.pushAppID), \(d.voip), \(d.apptype), \(d.lang), \(d.createdAt), \(d.updatedAt), \(d.lastPushAt))
            """)
    }

    /// Writes `device` over the row of (`userID`, `oldDeviceID`), which may rename the device.
    static func update(appID: String, oldDeviceID: String, device d: Device, on db: PostgresConnection) throws {
        _ = try db.query(
            """
            UPDATE devices SET device_id = \(d.deviceID), platform = \(d.platform.rawValue), provider = \(d.provider.rawValue), push_key = \(d.pushKey), push_app_id = \(d.pushAppID), voip = \(d.voip),
                   apptype = \(d.apptype), lang = \(d.lang), updated_at = \(d.updatedAt)
            WHERE app_id = \(appID) AND user_id = \(d.userID) AND device_id = \(oldDeviceID)
            """)
    }

    /// Removes one device; false when there was none.
    package static func delete(appID: String, userID: String, deviceID: String, on db: PostgresConnection) throws -> Bool {
        try db.query("DELETE FROM devices WHERE app_id = \(appID) AND user_id = \(userID) AND device_id = \(deviceID)").affectedRows > 0
    }

    /// Removes the user's `count` least recently updated devices (ties: oldest created, then `device_id`) and
    /// returns their ids in that order.
    static func evict(appID: String, userID: String, count: Int, on db: PostgresConnection) throws -> [String] {
        if count <= 0 { return [] }
        let result = try db.query(
            """
            WITH victims AS (
                SELECT device_id, updated_at, created_at FROM devices WHERE app_id = \(appID) AND user_id = \(userID)
                ORDER BY updated_at, created_at, device_id LIMIT \(count)
            ), gone AS (
                DELETE FROM devices d USING victims v
                WHERE d.app_id = \(appID) AND d.user_id = \(userID) AND d.device_id = v.device_id
                RETURNING d.device_id, d.updated_at, d.created_at
            )
            SELECT device_id FROM gone ORDER BY updated_at, created_at, device_id
            """)
        return try result.decode(String.self)
    }

    package static func count(appID: String, userID: String, on db: PostgresConnection) throws -> Int {
        let result = try db.query("SELECT count(*) FROM devices WHERE app_id = \(appID) AND user_id = \(userID)")
        return try result.decodeFirst(Int.self) ?? 0
    }

    // MARK: - Push rules

    static func pushRule(appID: String, userID: String, on db: PostgresConnection) throws -> PushRule? {
        guard
            let (online, muted) = try db.query(
                "SELECT online_platforms, not_to_receive_offline_push_platforms FROM push_rules WHERE app_id = \(appID) AND user_id = \(userID)"
            ).decodeFirst(([String], [String]).self)
        else { return nil }
        return PushRule(
            onlinePlatforms: online.compactMap(Device.Platform.init), mutedPlatforms: muted.compactMap(Device.Platform.init))
    }

    static func savePushRule(appID: String, userID: String, rule: PushRule, now: Int64, on db: PostgresConnection) throws {
        _ = try db.query(
            """
            INSERT INTO push_rules (app_id, user_id, online_platforms, not_to_receive_offline_push_platforms, updated_at)
            VALUES (\(appID), \(userID), \(rule.onlinePlatforms.map(\.rawValue))::text[], \(rule.mutedPlatforms.map(\.rawValue))::text[], \(now))
            ON CONFLICT (app_id, user_id) DO UPDATE
            SET online_platforms = EXCLUDED.online_platforms,
                not_to_receive_offline_push_platforms = EXCLUDED.not_to_receive_offline_push_platforms,
                updated_at = EXCLUDED.updated_at
            """)
    }
}
