import ParleyCore
import ParleyPostgres

/// SQL for apps and app keys (docs/users.md#apps-and-settings). No rules here: callers check permissions and inputs.
package enum AppStore {
    /// The app's columns, and the before-event hook types an enabled webhook serves
    /// (docs/webhooks.md#before-event-hooks; Apps/AppDirectory.swift caches them with the app, so a request learns
    /// whether to call a hook without a query).
    static let columns = """
        app_id, name, settings::text, token_secret, created_at, updated_at,
        (SELECT json_agg(json_build_object('type', h.hook_type, 'webhook_id', w.webhook_id, 'url', w.url, 'secret', w.secret,
                    'previous_secret', CASE WHEN w.previous_secret_until > (extract(epoch FROM now()) * 1000)::bigint THEN w.previous_secret END,
                    'timeout_ms', w.timeout_ms, 'fail_open', w.fail_open))::text
         FROM webhook_before_hooks h JOIN webhooks w ON w.app_id = h.app_id AND w.webhook_id = h.webhook_id
         WHERE h.app_id = apps.app_id AND w.enabled)
        """

    /// A row of ``columns`` (`token_secret` is bytea, read from its cell).
    package static func record(_ row: PostgresRow) throws -> AppRecord {
        let (appID, name, settingsJSON, tokenSecret, createdAt, updatedAt, hooks) = try row.decode(
            (String, String, String, PostgresCell, Int64, Int64, String?).self)
        let settingsObject = (try? JSONValue.parse(Array(settingsJSON.utf8)))?.objectValue ?? JSONObject()
        return AppRecord(
            appID: appID, name: name, settings: .stored(settingsObject), tokenSecret: try tokenSecret.bytes, createdAt: createdAt,
            updatedAt: updatedAt, beforeHooks: hooks.map(beforeHooks) ?? [:])
    }

    /// The before-hook endpoints by type, from the JSON array `columns` builds.
    private static func beforeHooks(_ json: String) -> [String: HookEndpoint] {
        guard case .array(let items)? = try? JSONValue.parse(Array(json.utf8)) else { return [:] }
        var hooks: [String: HookEndpoint] = [:]
        for case .object(let item) in items {
            if let (type, endpoint) = HookEndpoint.parse(item) { hooks[type] = endpoint }
        }
        return hooks
    }

    static func fetchRecord(appID: String, on db: PostgresConnection) throws -> AppRecord? {
        let result = try db.query("SELECT \(unsafeSQL: columns) FROM apps WHERE app_id = \(appID)")
        return try result.first.map(record)
    }

    /// The app of an active (not revoked) key with this hash.
    static func activeKey(hash: String, on db: PostgresConnection) throws -> (appID: String, keyID: String)? {
        let result = try db.query("SELECT app_id, key_id FROM app_keys WHERE key_hash = \(hash) AND revoked_at IS NULL")
        guard let (appID, keyID) = try result.decodeFirst((String, String).self) else { return nil }
        return (appID, keyID)
    }

    static func touchKey(appID: String, keyID: String, at now: Int64, on db: PostgresConnection) throws {
        try db.query("UPDATE app_keys SET last_used_at = \(now) WHERE app_id = \(appID) AND key_id = \(keyID)")
    }

    /// Inserts an app with its event-log head. Returns false when the id is taken.
    static func insert(appID: String, name: String, settings: AppSettings, now: Int64, on db: PostgresConnection) throws -> Bool {
        let inserted = try db.query(
            """
            INSERT INTO apps (app_id, name, settings, token_secret, created_at, updated_at)
            VALUES (\(appID), \(name), \(String(decoding: settings.json, as: UTF8.self))::jsonb, \(Crypto.randomBytes(32)), \(now), \(now)) ON CONFLICT (app_id) DO NOTHING RETURNING 1
            """, prepared: false)
        guard inserted.rowCount == 1 else { return false }
        try db.query("INSERT INTO event_heads (app_id) VALUES (\(appID))", prepared: false)
        return true
    }

    /// Creates a key and returns `(key_id, secret)`; only the hash is stored.
    static func insertKey(appID: String, name: String, now: Int64, on db: PostgresConnection) throws -> (keyID: String, secret: String) {
        let secret = AppKey.generate(appID: appID)
        let keyID = IdentifierKind.generateID(prefix: "key_", length: 16)
        try db.query(
            "INSERT INTO app_keys (app_id, key_id, name, key_hash, prefix, created_at) VALUES (\(appID), \(keyID), \(name), \(AppKey.hash(secret)), \(String(secret.prefix(12))), \(now))",
            prepared: false)
        return (keyID, secret)
    }

    package static func list(after: (Int64, String)?, limit: Int, on db: PostgresConnection) throws -> [AppRecord] {
        let result = try db.query(
            """
            SELECT \(unsafeSQL: columns) FROM apps
            WHERE \(after?.0)::bigint IS NULL OR (created_at, app_id) > (\(after?.0), \(after?.1))
            ORDER BY created_at, app_id LIMIT \(limit)
            """, prepared: false)
        return try result.rows.map(record)
    }

    package static func rename(appID: String, name: String, now: Int64, on db: PostgresConnection) throws -> AppRecord? {
        let result = try db.query(
            "UPDATE apps SET name = \(name), updated_at = \(now) WHERE app_id = \(appID) RETURNING \(unsafeSQL: columns)", prepared: false)
        return try result.first.map(record)
    }

    /// The app's settings, its row locked until the transaction ends; nil when there is no such app.
    static func lockSettings(appID: String, on db: PostgresConnection) throws -> AppSettings? {
        try db.query("SELECT \(unsafeSQL: columns) FROM apps WHERE app_id = \(appID) FOR UPDATE", prepared: false).first.map {
            try record($0).settings
        }
    }

    package static func updateSettings(appID: String, settings: AppSettings, now: Int64, on db: PostgresConnection) throws {
        try db.query(
            "UPDATE apps SET settings = \(String(decoding: settings.json, as: UTF8.self))::jsonb, updated_at = \(now) WHERE app_id = \(appID)",
            prepared: false)
    }

    /// Deletes the app and everything it owns. Returns false when it did not exist.
    package static func delete(appID: String, on db: PostgresConnection) throws -> Bool {
        // Tables without a foreign key to apps (the high-volume ones) are cleared explicitly.
        try db.query("DELETE FROM events WHERE app_id = \(appID)", prepared: false)
        try db.query("DELETE FROM pending_events WHERE app_id = \(appID)", prepared: false)
        try db.query("DELETE FROM idempotency_keys WHERE app_id = \(appID)", prepared: false)
        return try db.query("DELETE FROM apps WHERE app_id = \(appID)", prepared: false).affectedRows == 1
    }

    package struct KeyRow {
        package let keyID: String
        package let name: String
        package let prefix: String
        package let createdAt: Int64
        package let lastUsedAt: Int64?
        package let revokedAt: Int64?
    }

    package static func keys(appID: String, on db: PostgresConnection) throws -> [KeyRow] {
        let result = try db.query(
            """
            SELECT key_id, name, prefix, created_at, last_used_at, revoked_at FROM app_keys
            WHERE app_id = \(appID) ORDER BY created_at, key_id
            """, prepared: false)
        return try result.decode((String, String, String, Int64, Int64?, Int64?).self).map {
            (keyID, name, prefix, createdAt, lastUsedAt, revokedAt) in
            KeyRow(keyID: keyID, name: name, prefix: prefix, createdAt: createdAt, lastUsedAt: lastUsedAt, revokedAt: revokedAt)
        }
    }

    package enum RevokeOutcome { case revoked, notFound, lastActiveKey }

    /// Revokes a key unless it is the app's last active one (checked under a lock on the app row).
    package static func revokeKey(appID: String, keyID: String, now: Int64, on db: PostgresConnection) throws -> RevokeOutcome {
        try db.query("SELECT 1 FROM apps WHERE app_id = \(appID) FOR UPDATE", prepared: false)
        let result = try db.query(
            "SELECT revoked_at IS NULL, (SELECT count(*) FROM app_keys WHERE app_id = \(appID) AND revoked_at IS NULL) FROM app_keys WHERE app_id = \(appID) AND key_id = \(keyID)",
            prepared: false)
        guard let (active, activeCount) = try result.decodeFirst((Bool, Int64).self) else { return .notFound }
        if active && activeCount <= 1 { return .lastActiveKey }
        if active {
            try db.query("UPDATE app_keys SET revoked_at = \(now) WHERE app_id = \(appID) AND key_id = \(keyID)", prepared: false)
        }
        return .revoked
    }
}

extension AppRecord {
    /// The App object (docs/users.md#apps-and-settings): `{app_id, name, created_at, updated_at, settings}`.
    package var json: [UInt8] {
        var o = JSONObjectWriter()
        o["app_id"] = appID
        o["name"] = name
        o["created_at"] = createdAt
        o["updated_at"] = updatedAt
        o.raw("settings", settings.json)
        return o.finish()
    }
}
