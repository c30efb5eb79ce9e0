import ParleyAPI
import ParleyCore
import ParleyDomains
import ParleyHTTP
import ParleyLive
import ParleyPostgres

/// Apps, keys and settings (docs/users.md#apps-and-settings).
enum AppRoutes {
    static func register(on api: inout API) {
        api.addAdmin(.post, "/v1/apps", "createApp") { ctx in
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
            guard let created = try AppService.create(appID: appID, name: name!, settings: settings, now: ctx.now, on: ctx.db)
            else { throw APIError(.conflict, "app_id \(appID) is taken") }
            return Reply.created(AppService.createdJSON(created))
        }

        api.addAdmin(.get, "/v1/apps", "listApps") { ctx in
            var query = ctx.query()
            let limit = query.limit()
            let cursor = query.cursor()
            try query.check()
            let after = try ctx.timeAndIDCursor(cursor, list: "apps")
            let apps = try AppService.list(after: after, limit: limit + 1, on: ctx.db)
            let page = Array(apps.prefix(limit))
            let next = apps.count > limit ? page.last.map { ctx.cursors.encode(list: "apps", values: [.int($0.createdAt), .string($0.appID)]) } : nil
            return Reply.list(page.map(\.json), nextCursor: next)
        }

        api.addAdmin(.get, "/v1/apps/{app_id}", "getApp") { ctx in
            Reply.json(try existingApp(ctx).json)
        }

        api.addAdmin(.patch, "/v1/apps/{app_id}", "updateApp") { ctx in
            let appID = try ctx.pathID("app_id", .appID)
            var body = try ctx.body()
            let name = body.string("name", minBytes: 1, maxBytes: 128)
            try body.check()
            guard let name else { return Reply.json(try existingApp(ctx).json) }
            let record = try AppService.rename(appID, to: name, now: ctx.now, on: ctx.db)
            ctx.services.apps.invalidate(appID: appID)
            return Reply.json(record.json)
        }

        api.addAdmin(.delete, "/v1/apps/{app_id}", "deleteApp") { ctx in
            let appID = try ctx.pathID("app_id", .appID)
            try AppService.delete(appID, on: ctx.db)
            ctx.services.apps.invalidate(appID: appID)
            return Reply.noContent()
        }

        api.addAdmin(.post, "/v1/apps/{app_id}/keys", "createAppKey") { ctx in
            let app = try existingApp(ctx)
            var body = try ctx.body()
            let name = body.string("name", maxBytes: 64) ?? ""
            try body.check()
            let key = try AppService.createKey(app.appID, name: name, now: ctx.now, on: ctx.db)
            return Reply.created(keyJSON(keyID: key.keyID, name: name, secret: key.secret, createdAt: ctx.now))
        }

        api.addAdmin(.get, "/v1/apps/{app_id}/keys", "listAppKeys") { ctx in
            let app = try existingApp(ctx)
            let keys = try AppService.keys(app.appID, on: ctx.db).map { key in
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

        api.addAdmin(.delete, "/v1/apps/{app_id}/keys/{key_id}", "revokeAppKey") { ctx in
            let app = try existingApp(ctx)
            let keyID = try ctx.pathID("key_id", .opaque)
            try AppService.revokeKey(app.appID, keyID: keyID, now: ctx.now, on: ctx.db)
            ctx.services.apps.invalidate(appID: app.appID)
            return Reply.noContent()
        }

        api.addAdmin(.get, "/v1/apps/{app_id}/settings", "getAppSettingsAsAdmin") { ctx in
            Reply.json(try existingApp(ctx).settings.json)
        }
        api.addAdmin(.patch, "/v1/apps/{app_id}/settings", "updateAppSettingsAsAdmin") { ctx in
            let appID = try existingApp(ctx).appID
            let answer = try updateSettings(ctx, appID: appID, services: ctx.services)
            // The pipeline sequences the events of the app a request names; an admin route names none, so its
            // `app.settings_updated` is sequenced here, before the answer, as the app route's is.
            let sequencer = ctx.services.sequencer
            return .later { respond in sequencer.publish(appID) { respond(answer) } }
        }
        api.add(.get, "/v1/settings", .app, "getSettings") { ctx in
            Reply.json(try ctx.services.apps.app(ctx.appID, db: ctx.db)?.settings.json ?? [])
        }
        api.add(.patch, "/v1/settings", .app, "updateSettings") { ctx in
            try updateSettings(ctx, appID: ctx.appID, services: ctx.services)
        }
    }

    /// `PATCH` of an app's settings, as the admin or as the app.
    private static func updateSettings(_ ctx: some RequestContext, appID: String, services: Services) throws -> Response {
        let body = try ctx.body()
        let settings = try AppService.updateSettings(appID, patch: body.object, now: ctx.now, on: ctx.db)
        services.apps.invalidate(appID: appID)
        return Reply.json(settings.json)
    }

    private static func existingApp(_ ctx: AdminContext) throws -> AppRecord {
        try AppService.existing(try ctx.pathID("app_id", .appID), on: ctx.db)
    }

    private static func keyJSON(keyID: String, name: String, secret: String, createdAt: Int64) -> [UInt8] {
        var o = JSONObjectWriter()
        o["key_id"] = keyID
        o["name"] = name
        o["secret"] = secret
        o["created_at"] = createdAt
        return o.finish()
    }
}
