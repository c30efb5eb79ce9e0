import ParleyCore
import ParleyPostgres

/// App creation, shared by `POST /v1/apps`, `parley apps create` and the default app of a first start.
package enum AppService {
    package struct Created {
        let record: AppRecord
        let keyID: String
        let keyName: String
        package let secret: String
    }

    /// Creates the app, its event-log head and a first key in one transaction (or inside the caller's); nil when
    /// `appID` is taken.
    package static func create(appID: String, name: String, settings: AppSettings, now: Int64, on db: PostgresConnection) throws -> Created? {
        try db.transaction { db in
            guard try AppStore.insert(appID: appID, name: name, settings: settings, now: now, on: db) else { return nil }
            let key = try AppStore.insertKey(appID: appID, name: "default", now: now, on: db)
            guard let record = try AppStore.fetchRecord(appID: appID, on: db) else { return nil }
            return Created(record: record, keyID: key.keyID, keyName: "default", secret: key.secret)
        }
    }

    /// The app `appID`, or 404.
    package static func existing(_ appID: String, on db: PostgresConnection) throws -> AppRecord {
        guard let app = try AppStore.fetchRecord(appID: appID, on: db) else { throw APIError(.notFound, "app \(appID) does not exist") }
        return app
    }

    /// Apps by creation time, then id, strictly after `after`.
    package static func list(after: (Int64, String)?, limit: Int, on db: PostgresConnection) throws -> [AppRecord] {
        try AppStore.list(after: after, limit: limit, on: db)
    }

    /// Renames the app, or 404.
    package static func rename(_ appID: String, to name: String, now: Int64, on db: PostgresConnection) throws -> AppRecord {
        guard let record = try AppStore.rename(appID: appID, name: name, now: now, on: db) else {
            throw APIError(.notFound, "app \(appID) does not exist")
        }
        return record
    }

    /// Deletes the app and everything in it, or 404.
    package static func delete(_ appID: String, on db: PostgresConnection) throws {
        guard try db.transaction({ db in try AppStore.delete(appID: appID, on: db) }) else {
            throw APIError(.notFound, "app \(appID) does not exist")
        }
    }

    /// A new key of the app (its secret shown only now).
    package static func createKey(_ appID: String, name: String, now: Int64, on db: PostgresConnection) throws -> (keyID: String, secret: String) {
        try AppStore.insertKey(appID: appID, name: name, now: now, on: db)
    }

    /// The app's keys, without secrets.
    package static func keys(_ appID: String, on db: PostgresConnection) throws -> [AppStore.KeyRow] {
        try AppStore.keys(appID: appID, on: db)
    }

    /// Revokes a key; the app's last active key stays (409).
    package static func revokeKey(_ appID: String, keyID: String, now: Int64, on db: PostgresConnection) throws {
        switch try db.transaction({ db in try AppStore.revokeKey(appID: appID, keyID: keyID, now: now, on: db) }) {
        case .notFound: throw APIError(.notFound, "key \(keyID) does not exist")
        case .lastActiveKey: throw APIError(.lastActiveKey, "the app's last active key cannot be revoked")
        case .revoked: return
        }
    }

    /// Applies a partial settings update under the app row's lock and writes `app.settings_updated` when something
    /// changed. Returns the settings after it.
    package static func updateSettings(_ appID: String, patch: JSONObject, now: Int64, on db: PostgresConnection) throws -> AppSettings {
        try db.transaction { db -> AppSettings in
            guard var settings = try AppStore.lockSettings(appID: appID, on: db) else {
                throw APIError(.notFound, "app \(appID) does not exist")
            }
            let changed = try settings.apply(patch)
            if !changed.isEmpty {
                try AppStore.updateSettings(appID: appID, settings: settings, now: now, on: db)
                var data = JSONObjectWriter()
                data["changed"] = JSONValue.array(changed.map { .string($0) })
                try EventLog.append([NewEvent(type: "app.settings_updated", data: data.finish(), orderKey: "app")], appID: appID, now: now, on: db)
            }
            return settings
        }
    }

    /// `{app, key: {key_id, name, secret, created_at}}`, the answer of app creation.
    package static func createdJSON(_ created: Created) -> [UInt8] {
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
