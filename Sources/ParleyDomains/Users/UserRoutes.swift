import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Users (docs/users.md): HTTP ↔ ``UserService``.
package enum UserRoutes {
    /// `blocklists`: the node's compiled blocklists, which screen profiles (docs/blocklists.md#profiles).
    package static func register(on api: inout API, hooks: UserHooks, blocklists: BlocklistCache) {
        api.add(.post, "/v1/users", .app, "createUser") { ctx in
            var body = try ctx.body()
            let userID = body.id("user_id", .userID, required: true)
            let profile = UserProfile.read(from: &body)
            try body.check()
            let user = try UserService(ctx).write(userID!, profile: profile, creating: true, blocklists: blocklists)
            return Reply.created(user.json(.app))
        }

        api.add(.post, "/v1/users/import", .app, "importUsers") { ctx in
            try importUsers(ctx)
        }

        api.add(.get, "/v1/users", .app, "listUsers") { ctx in
            try listUsers(ctx)
        }

        api.add(.get, "/v1/users/{user_id}", .appOrUser, "getUser") { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            var query = ctx.query()
            let includeDeleted = query.bool("include_deleted") ?? false
            try query.check()
            if includeDeleted && !ctx.isApp { throw APIError.forbidden("include_deleted needs an app key") }
            let user = try UserService(ctx).get(userID, includeDeleted: includeDeleted, on: ctx.db)
            return Reply.json(user.json(view(ctx, of: userID)))
        }

        api.add(.post, "/v1/users/query", .appOrUser, "queryUsers") { ctx in
            try queryUsers(ctx)
        }

        api.add(.patch, "/v1/users/{user_id}", .appOrSelf, "updateUser") { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            var body = try ctx.body()
            let profile = UserProfile.read(from: &body)
            try body.check()
            let user = try UserService(ctx).write(userID, profile: profile, creating: false, blocklists: blocklists)
            return Reply.json(user.json(view(ctx, of: userID)))
        }

        api.add(.delete, "/v1/users/{user_id}", .app, "deleteUser") { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            var query = ctx.query()
            let mode = query.choice("mode", UserService.DeleteMode.allCases.map(\.rawValue)).flatMap(UserService.DeleteMode.init)
            try query.check()
            try UserService(ctx).delete(userID, mode: mode ?? .soft, removeFromGroups: hooks.removeFromGroups)
            return Reply.noContent()
        }

        api.add(.post, "/v1/users/{user_id}/restore", .app, "restoreUser") { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            return Reply.json(try UserService(ctx).restore(userID).json(.app))
        }

        api.add(.post, "/v1/users/{user_id}/tokens", .app, "createUserToken") { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            var body = try ctx.body()
            let ttl = body.int("ttl_s", range: 60...2_592_000)
            try body.check()
            let app = ctx.app
            let minted = try UserService(ctx).mintToken(
                userID, ttlSeconds: ttl ?? app.settings.tokenDefaultTTLSeconds, secret: app.tokenSecret, on: ctx.db)
            var o = JSONObjectWriter()
            o["token"] = minted.token
            o["user_id"] = userID
            o["expires_at"] = minted.expiresAt
            return Reply.created(o.finish())
        }

        api.add(.post, "/v1/users/{user_id}/kick", .app, "kickUser") { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            var body = try ctx.body()
            let platforms = readPlatforms(&body)
            let revokeTokens = body.bool("revoke_tokens") ?? true
            try body.check()
            let kickedPlatforms = platforms ?? UserService.platforms
            // The streams open now on those platforms (every node): the hub closes them on `user.kicked`.
            let closing = try hooks.openStreams(ctx.db, ctx.appID, userID, kickedPlatforms)
            try UserService(ctx).kick(userID, platforms: kickedPlatforms, revokeTokens: revokeTokens)
            var o = JSONObjectWriter(capacity: 32)
            o["closed_streams"] = closing
            return Reply.json(o.finish())
        }

        api.add(.post, "/v1/users/{user_id}/mute", .app, "muteUser") { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            var body = try ctx.body()
            let duration = body.int("duration_s", required: true, range: -1...UserService.maxRestrictionSeconds)
            try body.check()
            return Reply.json(try UserService(ctx).mute(userID, durationSeconds: duration!).json(.app))
        }

        api.add(.post, "/v1/users/{user_id}/ban", .app, "banUser") { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            var body = try ctx.body()
            let duration = body.int("duration_s", required: true, range: -1...UserService.maxRestrictionSeconds)
            if duration == 0 { body.addError("duration_s", "must be -1 or between 1 and \(UserService.maxRestrictionSeconds)") }
            let reason = body.string("reason", maxBytes: 256)
            try body.check()
            return Reply.json(try UserService(ctx).ban(userID, durationSeconds: duration!, reason: reason).json(.app))
        }

        api.add(.post, "/v1/users/{user_id}/unban", .app, "unbanUser") { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            return Reply.json(try UserService(ctx).unban(userID).json(.app))
        }
    }

    /// What the caller may see of `userID`: everything (app), all but `deleted_at` (itself), or the public fields.
    private static func view(_ ctx: APIContext, of userID: String) -> User.View {
        guard let tokenUser = ctx.tokenUserID else { return .app }
        return tokenUser == userID ? .owner : .other
    }

    /// `platforms` of a kick: known values, de-duplicated, in ZIM number order; nil when absent.
    private static func readPlatforms(_ body: inout BodyReader) -> [String]? {
        guard let values = body.stringArray("platforms", minItems: 1, maxItems: UserService.platforms.count * 4) else { return nil }
        var bad = false
        for (i, value) in values.enumerated() where !UserService.platforms.contains(value) {
            body.addError(
                path: "\(body.fieldPath("platforms"))[\(i)]", "must be one of " + UserService.platforms.joined(separator: ", "))
            bad = true
        }
        return bad ? nil : UserService.platforms.filter(values.contains)
    }

    // MARK: - Batches

    /// One input item of a batch that failed validation, or its valid value.
    private enum Item<T> {
        case valid(T)
        case invalid(String)
    }

    /// `POST /v1/users/import`: per-item validation; a repeated `user_id` fails from its second occurrence on.
    private static func importUsers(_ ctx: APIContext) throws -> Response {
        var body = try ctx.body()
        let rawItems = body.array("users", required: true, minItems: 1, maxItems: 100)
        let upsert = body.bool("upsert") ?? false
        try body.check()
        var ids: [String] = []
        var items: [Item<UserService.ImportItem>] = []
        var seen: Set<String> = []
        for (index, raw) in rawItems!.enumerated() {
            let path = "\(body.fieldPath("users"))[\(index)]"
            guard case .object(let object) = raw else {
                ids.append("")
                items.append(.invalid("\(path): expected object, got \(raw.typeName)"))
                continue
            }
            let rawID = object["user_id"]?.stringValue ?? ""
            ids.append(rawID)
            var reader = BodyReader(object, path: path)
            let userID = reader.id("user_id", .userID, required: true)
            let profile = UserProfile.read(from: &reader)
            if let first = reader.errors.first {
                items.append(.invalid(first.description))
            } else if !seen.insert(rawID).inserted {
                items.append(.invalid("user \(rawID) is repeated in this request"))
            } else {
                items.append(.valid(UserService.ImportItem(index: index, userID: userID!, profile: profile)))
            }
            seen.insert(rawID)
        }
        let valid = items.compactMap { if case .valid(let item) = $0 { item } else { nil } }
        let outcomes = try UserService(ctx).importUsers(valid, upsert: upsert)
        let results = items.enumerated().map { index, item -> BatchResult in
            switch item {
            case .invalid(let message):
                return BatchResult(index: index, id: ids[index], outcome: .failed(.invalidParams, message))
            case .valid(let item):
                switch outcomes[item.userID] {
                case .created(let user)?, .updated(let user)?:
                    return BatchResult(index: index, id: item.userID, outcome: .ok(user.json(.app)))
                case .exists?, nil:
                    return BatchResult(
                        index: index, id: item.userID, outcome: .failed(.userAlreadyExists, "user \(item.userID) already exists"))
                }
            }
        }
        return Reply.batch(results)
    }

    /// `POST /v1/users/query`: one result per id; unknown and soft-deleted users fail with `user_not_found`.
    private static func queryUsers(_ ctx: APIContext) throws -> Response {
        var body = try ctx.body()
        let rawItems = body.array("user_ids", required: true, minItems: 1, maxItems: 100)
        try body.check()
        var ids: [String] = []
        var items: [Item<String>] = []
        var seen: Set<String> = []
        for (index, raw) in rawItems!.enumerated() {
            let path = "\(body.fieldPath("user_ids"))[\(index)]"
            guard case .string(let userID) = raw else {
                ids.append("")
                items.append(.invalid("\(path): expected string, got \(raw.typeName)"))
                continue
            }
            ids.append(userID)
            if let problem = IdentifierKind.userID.problem(userID) {
                items.append(.invalid("\(path): \(problem)"))
            } else if !seen.insert(userID).inserted {
                items.append(.invalid("user \(userID) is repeated in this request"))
            } else {
                items.append(.valid(userID))
            }
            seen.insert(userID)
        }
        let wanted = items.compactMap { if case .valid(let id) = $0 { id } else { nil } }
        var found: [String: User] = [:]
        for user in try UserService(ctx).liveUsers(wanted) {
            found[user.userID] = user
        }
        let results = items.enumerated().map { index, item -> BatchResult in
            switch item {
            case .invalid(let message):
                return BatchResult(index: index, id: ids[index], outcome: .failed(.invalidParams, message))
            case .valid(let userID):
                guard let user = found[userID] else {
                    return BatchResult(index: index, id: userID, outcome: .failed(.userNotFound, "user \(userID) does not exist"))
                }
                return BatchResult(index: index, id: userID, outcome: .ok(user.json(view(ctx, of: userID))))
            }
        }
        return Reply.batch(results)
    }

    // MARK: - List

    /// `GET /v1/users`: by `user_id` asc; the cursor is bound to the `state` and `q` it was minted for.
    private static func listUsers(_ ctx: APIContext) throws -> Response {
        var query = ctx.query()
        let state = query.choice("state", UserService.ListState.allCases.map(\.rawValue)).flatMap(UserService.ListState.init) ?? .active
        let q = query.string("q").map { $0.lowercased() }.flatMap { $0.isEmpty ? nil : $0 }
        let limit = query.limit()
        let cursor = query.cursor()
        try query.check()
        let list = "users|\(state.rawValue)|\(q ?? "")"
        var after: String?
        if let cursor {
            let values = try ctx.decodeCursor(cursor, list: list)
            guard values.count == 1, let id = values[0].stringValue else { throw APIError(.invalidCursor, "malformed cursor") }
            after = id
        }
        let users = try UserService(ctx).list(state: state, query: q, after: after, limit: limit + 1)
        let page = users.prefix(limit)
        let next = users.count > limit ? page.last.map { ctx.cursors.encode(list: list, values: [.string($0.userID)]) } : nil
        return Reply.list(page.map { $0.json(.app) }, nextCursor: next)
    }
}
