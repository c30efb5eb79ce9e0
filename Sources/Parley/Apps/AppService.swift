import ParleyPostgres

/// App creation, shared by `POST /v1/apps`, `parley apps create` and the default app of a first start.
enum AppService {
    struct Created {
        let record: AppRecord
        let keyID: String
        let keyName: String
        let secret: String
    }

    /// Creates the app, its event-log head and a first key in one transaction; nil when `appID` is taken.
    static func create(appID: String, name: String, settings: AppSettings, now: Int64, pool: PostgresPool) throws -> Created? {
        try pool.transaction { db in try create(appID: appID, name: name, settings: settings, now: now, on: db) }
    }

    /// The same on a connection inside the caller's transaction.
    static func create(appID: String, name: String, settings: AppSettings, now: Int64, on db: PostgresConnection) throws -> Created? {
        guard try AppStore.insert(appID: appID, name: name, settings: settings, now: now, on: db) else { return nil }
        let key = try AppStore.insertKey(appID: appID, name: "default", now: now, on: db)
        guard let record = try AppStore.fetchRecord(appID: appID, on: db) else { return nil }
        return Created(record: record, keyID: key.keyID, keyName: "default", secret: key.secret)
    }

    /// `{app, key: {key_id, name, secret, created_at}}`, the answer of app creation.
    static func createdJSON(_ created: Created) -> [UInt8] {
        var key = JSONObjectWriter()
        key["key_id"] = created.keyID
        key["name"] = created.keyName
        key["secret"] = created.secret
        key["created_at"] = created.record.createdAt
        var o = JSONObjectWriter()
        o.raw("app", created.record.json)
        o.raw("key", key.finish())
        return o.finish()
    }
}
