import ParleyHTTP
import ParleyPostgres

/// Apps, keys and settings (API.md §3).
enum AppRoutes {
    static func register(on api: inout API) {
        api.add(.post, "/v1/apps", .admin, "createApp") { ctx in
            var body = try ctx.body()
            let appID = body.id("app_id", .appID) ?? IdentifierKind.generateAppID()
            let name = body.string("name", required: true, minBytes: 1, maxBytes: 128)
            var settings = AppSettings.defaults()
            let patch = body.rawObject("settings")
            // One 400 lists every invalid field, the settings' included.
            var fieldErrors = body.errors
            if let patch {
                do throws(APIError) { _ = try settings.apply(patch, path: "body.settings") } catch { fieldErrors += error.fieldErrors }
            }
            if !fieldErrors.isEmpty { throw APIError.invalidParams(fieldErrors) }
            guard let created = try AppService.create(appID: appID, name: name!, settings: settings, now: ctx.now, pool: ctx.services.pool)
            else { throw APIError(.conflict, "app_id \(appID) is taken") }
            return Reply.created(AppService.createdJSON(created))
        }

        api.add(.get, "/v1/apps", .admin, "listApps") { ctx in
            var query = ctx.query()
            let limit = query.limit()
            let cursor = query.string("cursor")
            try query.check()
            let after = try timeAndIDCursor(ctx, cursor, list: "apps")
            let apps = try AppStore.list(after: after, limit: limit + 1, on: ctx.db)
            let page = Array(apps.prefix(limit))
            let next = apps.count > limit ? page.last.map { ctx.cursors.encode(list: "apps", values: [.int($0.createdAt), .string($0.appID)]) } : nil
            return Reply.list(page.map(\.json), nextCursor: next)
        }

        api.add(.get, "/v1/apps/{app_id}", .admin, "getApp") { ctx in
            Reply.json(try existingApp(ctx).json)
        }

        api.add(.patch, "/v1/apps/{app_id}", .admin, "updateApp") { ctx in
            let appID = try ctx.pathID("app_id", .appID)
            var body = try ctx.body()
            let name = body.string("name", minBytes: 1, maxBytes: 128)
            try body.check()
            guard let name else { return Reply.json(try existingApp(ctx).json) }
            guard let record = try AppStore.rename(appID: appID, name: name, now: ctx.now, on: ctx.db) else {
                throw APIError(.notFound, "app \(appID) does not exist")
            }
            ctx.services.apps.invalidate(appID: appID)
            return Reply.json(record.json)
        }

        api.add(.delete, "/v1/apps/{app_id}", .admin, "deleteApp") { ctx in
            let appID = try ctx.pathID("app_id", .appID)
            let deleted = try ctx.services.pool.transaction { db in try AppStore.delete(appID: appID, on: db) }
            guard deleted else { throw APIError(.notFound, "app \(appID) does not exist") }
            ctx.services.apps.invalidate(appID: appID)
            return Reply.noContent()
        }

        api.add(.post, "/v1/apps/{app_id}/keys", .admin, "createAppKey") { ctx in
            let app = try existingApp(ctx)
            var body = try ctx.body()
            let name = body.string("name", maxBytes: 64) ?? ""
            try body.check()
            let key = try AppStore.insertKey(appID: app.appID, name: name, now: ctx.now, on: ctx.db)
            return Reply.created(keyJSON(keyID: key.keyID, name: name, secret: key.secret, createdAt: ctx.now))
        }

        api.add(.get, "/v1/apps/{app_id}/keys", .admin, "listAppKeys") { ctx in
            let app = try existingApp(ctx)
            let keys = try AppStore.keys(appID: app.appID, on: ctx.db).map { key in
                var o = JSONObjectWriter()
                o["key_id"] = key.keyID
                o["name"] = key.name
                o["prefix"] = key.prefix
                o["created_at"] = key.createdAt
                o["last_used_at"] = key.lastUsedAt
                o["revoked_at"] = key.revokedAt
                return o.finish()
            }
            return Reply.list(keys, nextCursor: nil)
        }

        api.add(.delete, "/v1/apps/{app_id}/keys/{key_id}", .admin, "revokeAppKey") { ctx in
            let app = try existingApp(ctx)
            let keyID = ctx.path("key_id")
            let outcome = try ctx.services.pool.transaction { db in
                try AppStore.revokeKey(appID: app.appID, keyID: keyID, now: ctx.now, on: db)
            }
            switch outcome {
            case .notFound: throw APIError(.notFound, "key \(keyID) does not exist")
            case .lastActiveKey: throw APIError(.lastActiveKey, "the app's last active key cannot be revoked")
            case .revoked:
                ctx.services.apps.invalidate(appID: app.appID)
                return Reply.noContent()
            }
        }

        api.add(.get, "/v1/apps/{app_id}/settings", .admin, "getAppSettingsAsAdmin") { ctx in
            Reply.json(try existingApp(ctx).settings.json)
        }
        api.add(.patch, "/v1/apps/{app_id}/settings", .admin, "updateAppSettingsAsAdmin") { ctx in
            try updateSettings(ctx, appID: try existingApp(ctx).appID)
        }
        api.add(.get, "/v1/settings", .app, "getSettings") { ctx in
            Reply.json(try ctx.services.apps.app(ctx.appID, db: ctx.db)?.settings.json ?? [])
        }
        api.add(.patch, "/v1/settings", .app, "updateSettings") { ctx in
            try updateSettings(ctx, appID: ctx.appID)
        }
    }

    /// Applies a partial settings update under a row lock and writes `app.settings_updated` when something changed.
    private static func updateSettings(_ ctx: APIContext, appID: String) throws -> Response {
        let body = try ctx.body()
        let settings = try ctx.services.pool.transaction { db -> AppSettings in
            let locked = try db.query("SELECT \(AppStore.columns) FROM apps WHERE app_id = $1 FOR UPDATE", [appID])
            guard let row = locked.first else { throw APIError(.notFound, "app \(appID) does not exist") }
            var settings = try AppStore.record(row).settings
            let changed = try settings.apply(body.object)
            if !changed.isEmpty {
                try AppStore.updateSettings(appID: appID, settings: settings, now: ctx.now, on: db)
                var data = JSONObjectWriter()
                data["changed"] = JSONValue.array(changed.map { .string($0) })
                try EventLog.append(
                    [NewEvent(type: "app.settings_updated", data: data.finish(), orderKey: "app")], appID: appID, now: ctx.now, on: db)
            }
            return settings
        }
        ctx.services.apps.invalidate(appID: appID)
        return Reply.json(settings.json)
    }

    private static func existingApp(_ ctx: APIContext) throws -> AppRecord {
        let appID = try ctx.pathID("app_id", .appID)
        guard let app = try AppStore.fetchRecord(appID: appID, on: ctx.db) else {
            throw APIError(.notFound, "app \(appID) does not exist")
        }
        return app
    }

    private static func keyJSON(keyID: String, name: String, secret: String, createdAt: Int64) -> [UInt8] {
        var o = JSONObjectWriter()
        o["key_id"] = keyID
        o["name"] = name
        o["secret"] = secret
        o["created_at"] = createdAt
        return o.finish()
    }

    static func decodeCursor(_ ctx: APIContext, _ cursor: String, list: String) throws -> [JSONValue] {
        do { return try ctx.cursors.decode(cursor, list: list) } catch { throw APIError(.invalidCursor, "invalid cursor") }
    }

    /// The `(created_at, id)` position of a keyset cursor of `list` (nil without a cursor): the shape of every list
    /// ordered by creation time, then id.
    static func timeAndIDCursor(_ ctx: APIContext, _ cursor: String?, list: String) throws -> (Int64, String)? {
        guard let cursor else { return nil }
        let values = try decodeCursor(ctx, cursor, list: list)
        guard values.count == 2, let t = values[0].intValue, let id = values[1].stringValue else {
            throw APIError(.invalidCursor, "malformed cursor")
        }
        return (t, id)
    }
}
