import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Friends and friend applications (docs/social.md#friends): HTTP ↔ ``FriendService``. Every path is under the owner's
/// `/v1/users/{user_id}`; a user token acts only on its own list (`.appOrSelf`).
package enum FriendRoutes {
    package static func register(on api: inout API) {
        api.add(.post, "/v1/users/{user_id}/friends", .appOrSelf, "addFriend") { ctx in
            let owner = try ctx.pathID("user_id", .userID)
            var body = try ctx.body()
            let friendID = body.id("friend_id", .userID, required: true)
            let entry = readEntry(&body)
            let skipHooks = try ctx.appOnlyFlag(body.bool("skip_hooks"))
            try body.check()
            guard let friendID else { throw APIError.internalError }
            return try beforeAdd(ctx, owner, friendID, via: "direct", entry, skip: skipHooks) { ctx, entry in
                Reply.created(try FriendService(ctx).add(owner: owner, friendID: friendID, entry).json)
            }
        }

        api.add(.get, "/v1/users/{user_id}/friends", .appOrSelf, "listFriends") { ctx in
            try list(ctx)
        }

        api.add(.get, "/v1/users/{user_id}/friends/{friend_id}", .appOrSelf, "getFriend") { ctx in
            let owner = try ctx.pathID("user_id", .userID)
            let friendID = try ctx.pathID("friend_id", .userID)
            return Reply.json(try FriendService(ctx).get(owner: owner, friendID: friendID, on: ctx.db).json)
        }

        api.add(.patch, "/v1/users/{user_id}/friends/{friend_id}", .appOrSelf, "updateFriend") { ctx in
            let owner = try ctx.pathID("user_id", .userID)
            let friendID = try ctx.pathID("friend_id", .userID)
            var body = try ctx.body()
            let alias = body.string("alias", maxBytes: Friend.maxAliasBytes)
            let attributes = FriendAttributes.read(from: &body)
            try body.check()
            let friend = try FriendService(ctx).update(owner: owner, friendID: friendID, alias: alias, attributes: attributes)
            return Reply.json(friend.json)
        }

        api.add(.delete, "/v1/users/{user_id}/friends/{friend_id}", .appOrSelf, "deleteFriend") { ctx in
            let owner = try ctx.pathID("user_id", .userID)
            let friendID = try ctx.pathID("friend_id", .userID)
            var query = ctx.query()
            let mode = query.choice("mode", Friend.DeleteMode.allCases.map(\.rawValue)).flatMap(Friend.DeleteMode.init) ?? .both
            try query.check()
            switch try FriendService(ctx).delete(owner: owner, friendIDs: [friendID], mode: mode)[friendID] {
            case .deleted?: return Reply.noContent()
            case .isSelf?: throw cannotDeleteSelf()
            case .notFriends?, nil: throw FriendService.notFriends(friendID)
            }
        }

        api.add(.post, "/v1/users/{user_id}/friends/delete", .appOrSelf, "deleteFriends") { ctx in
            try deleteMany(ctx)
        }

        api.add(.post, "/v1/users/{user_id}/friends/check", .appOrSelf, "checkFriends") { ctx in
            try check(ctx)
        }

        api.add(.post, "/v1/users/{user_id}/friend_applications", .appOrSelf, "sendFriendApplication") { ctx in
            let from = try ctx.pathID("user_id", .userID)
            var body = try ctx.body()
            let to = body.id("to", .userID, required: true)
            let entry = readEntry(&body)
            let push = PushConfig.read(from: &body)
            let skipHooks = try ctx.appOnlyFlag(body.bool("skip_hooks"))
            try body.check()
            guard let to else { throw APIError.internalError }
            return try beforeAdd(ctx, from, to, via: "application", entry, skip: skipHooks) { ctx, entry in
                let expiry = ctx.app.settings.int("application_expiry_s") ?? 604_800
                let outcome = try FriendService(ctx).apply(from: from, to: to, entry, push: push, expirySeconds: expiry)
                return outcome.created ? Reply.created(outcome.application.json()) : Reply.json(outcome.application.json())
            }
        }

        api.add(.get, "/v1/users/{user_id}/friend_applications", .appOrSelf, "listFriendApplications") { ctx in
            try listApplications(ctx)
        }

        api.add(.post, "/v1/users/{user_id}/friend_applications/{application_id}/accept", .appOrSelf, "acceptFriendApplication") { ctx in
            let owner = try ctx.pathID("user_id", .userID)
            let applicationID = try ctx.pathID("application_id", .opaque)
            var body = try ctx.body()
            let entry = readEntry(&body, wording: false)
            let push = PushConfig.read(from: &body)
            try body.check()
            let friend = try FriendService(ctx).accept(owner: owner, applicationID: applicationID, entry, push: push)
            return Reply.json(friend.json)
        }

        api.add(.post, "/v1/users/{user_id}/friend_applications/{application_id}/reject", .appOrSelf, "rejectFriendApplication") { ctx in
            let owner = try ctx.pathID("user_id", .userID)
            let applicationID = try ctx.pathID("application_id", .opaque)
            var body = try ctx.body()
            let push = PushConfig.read(from: &body)
            try body.check()
            return Reply.json(try FriendService(ctx).reject(owner: owner, applicationID: applicationID, push: push).json())
        }
    }

    private static func cannotDeleteSelf() -> APIError { APIError(.cannotDeleteSelf, "a user cannot delete itself as a friend") }

    /// `wording` (unless `wording` is false: an accept has none), `alias` and `attributes` of an add, application or
    /// accept; `""` attribute values are dropped.
    /// The `friend.before_add` hook (docs/webhooks.md#before-event-hooks) of a direct add or an application, then
    /// `then` with the entry, patched in `wording`, `alias` and `attributes` by a `modify`. Called after validation;
    /// the self check (422) comes first.
    private static func beforeAdd(
        _ ctx: APIContext, _ userID: String, _ friendID: String, via: String, _ entry: FriendService.EntryRequest, skip: Bool,
        then: @escaping @Sendable (APIContext, FriendService.EntryRequest) throws -> Response
    ) throws -> Response {
        if userID == friendID { throw FriendService.cannotFriendSelf() }
        // `data` is `{user_id, friend_id, via, wording}`; the patch also applies to the request's alias and attributes.
        let proposed = { @Sendable (full: Bool) -> JSONObject in
            var o = JSONObject()
            o["user_id"] = .string(userID)
            o["friend_id"] = .string(friendID)
            o["via"] = .string(via)
            o["wording"] = .string(entry.wording ?? "")
            if full {
                o["alias"] = .string(entry.alias ?? "")
                o["attributes"] = .object(entry.attributes ?? JSONObject())
            }
            return o
        }
        return try ctx.afterHook("friend.before_add", data: { JSONValue.object(proposed(false)).serialized() }, skip: skip) { ctx, verdict in
            switch verdict.action {
            case .allow: return try then(ctx, entry)
            case .reject, .drop: throw verdict.rejection
            case .modify:
                let patched = try ctx.repatched(verdict, proposed: proposed(true), patchable: ["wording", "alias", "attributes"]) { body in
                    let entry = readEntry(&body)
                    try body.check()
                    return entry
                }
                return try then(ctx, patched)
            }
        }
    }

    private static func readEntry(_ body: inout BodyReader, wording: Bool = true) -> FriendService.EntryRequest {
        FriendService.EntryRequest(
            wording: wording ? body.string("wording", maxBytes: Friend.maxWordingBytes) : nil,
            alias: body.string("alias", maxBytes: Friend.maxAliasBytes),
            attributes: FriendAttributes.read(from: &body).map { FriendAttributes.merged(JSONObject(), $0) })
    }

    // MARK: - Batches

    /// The `user_ids` items and the `mode` (default `both`) of a delete or check body.
    private static func readBatch(_ ctx: APIContext) throws -> (items: [BatchItem], mode: Friend.DeleteMode) {
        var body = try ctx.body()
        let items = body.batchIDs()
        let mode = body.enumeration("mode", Friend.DeleteMode.self) ?? .both
        try body.check()
        return (items, mode)
    }

    /// The result of an item that failed validation.
    private static func invalid(_ index: Int, _ item: BatchItem) -> BatchResult {
        BatchResult(index: index, id: item.id, outcome: .failed(.invalidParams, item.problem ?? "invalid"))
    }

    /// `POST …/friends/delete`: per item `not_friends`, `cannot_delete_self`.
    private static func deleteMany(_ ctx: APIContext) throws -> Response {
        let owner = try ctx.pathID("user_id", .userID)
        let (items, mode) = try readBatch(ctx)
        let outcomes = try FriendService(ctx).delete(owner: owner, friendIDs: items.compactMap(\.userID), mode: mode)
        let results = items.enumerated().map { index, item -> BatchResult in
            guard let userID = item.userID else { return invalid(index, item) }
            let outcome: BatchResult.Outcome
            switch outcomes[userID] {
            case .deleted?: outcome = .ok(nil)
            case .isSelf?: outcome = .failed(.cannotDeleteSelf, "a user cannot delete itself as a friend")
            case .notFriends?, nil: outcome = .failed(.notFriends, "user \(userID) is not in the friend list")
            }
            return BatchResult(index: index, id: userID, outcome: outcome)
        }
        return Reply.batch(results)
    }

    /// `POST …/friends/check`: `data` = `{user_id, relation}`; per item `user_not_found`.
    private static func check(_ ctx: APIContext) throws -> Response {
        let owner = try ctx.pathID("user_id", .userID)
        let (items, mode) = try readBatch(ctx)
        let relations = try FriendService(ctx).check(owner: owner, userIDs: items.compactMap(\.userID), mode: mode, on: ctx.db)
        let results = items.enumerated().map { index, item -> BatchResult in
            guard let userID = item.userID else { return invalid(index, item) }
            guard let relation = relations[userID] ?? nil else {
                return BatchResult(index: index, id: userID, outcome: .failed(.userNotFound, "user \(userID) does not exist"))
            }
            var o = JSONObjectWriter(capacity: 48 + userID.utf8.count)
            o["user_id"] = userID
            o["relation"] = relation.rawValue
            return BatchResult(index: index, id: userID, outcome: .ok(o.finish()))
        }
        return Reply.batch(results)
    }

    // MARK: - Lists

    /// `GET …/friends`: by `created_at` desc, then `user_id` desc; `q` takes 1–5 space-separated keywords. The cursor
    /// is bound to the app, the owner and the filter.
    private static func list(_ ctx: APIContext) throws -> Response {
        let owner = try ctx.pathID("user_id", .userID)
        var query = ctx.query()
        let limit = query.limit()
        let cursor = query.cursor()
        let keywords = (query.string("q") ?? "").lowercased().split(separator: " ").map(String.init)
        if keywords.count > 5 { query.addError("q", "at most 5 keywords") }
        let matchAlias = query.bool("match_alias") ?? false
        try query.check()
        let list = "friends|\(ctx.appID)|\(owner)|\(keywords.joined(separator: " "))|\(matchAlias)"
        let after: (createdAt: Int64, userID: String)? = try ctx.timeAndIDCursor(cursor, list: list)
        let friends = try FriendService(ctx).list(
            owner: owner, keywords: keywords, matchAlias: matchAlias, after: after, limit: limit + 1, on: ctx.db)
        let page = friends.prefix(limit)
        let next =
            friends.count > limit
            ? page.last.map { ctx.cursors.encode(list: list, values: [.int($0.createdAt), .string($0.userID)]) } : nil
        return Reply.list(page.map(\.json), nextCursor: next)
    }

    /// `GET …/friend_applications`: by `created_at` desc, then `application_id` desc, each with its `direction` as
    /// seen by `{user_id}`. The cursor is bound to the app, the user and the filter.
    private static func listApplications(_ ctx: APIContext) throws -> Response {
        let userID = try ctx.pathID("user_id", .userID)
        var query = ctx.query()
        let limit = query.limit()
        let cursor = query.cursor()
        let direction =
            query.choice("direction", FriendApplication.Direction.allCases.map(\.rawValue)).flatMap(FriendApplication.Direction.init)
            ?? .all
        let state = query.choice("state", FriendApplication.State.allCases.map(\.rawValue)).flatMap(FriendApplication.State.init)
        try query.check()
        let list = "friend_applications|\(ctx.appID)|\(userID)|\(direction.rawValue)|\(state?.rawValue ?? "")"
        let after: (createdAt: Int64, applicationID: String)? = try ctx.timeAndIDCursor(cursor, list: list)
        let applications = try FriendService(ctx).applications(
            of: userID, direction: direction, state: state, after: after, limit: limit + 1, on: ctx.db)
        let page = applications.prefix(limit)
        let next =
            applications.count > limit
            ? page.last.map { ctx.cursors.encode(list: list, values: [.int($0.createdAt), .string($0.applicationID)]) } : nil
        return Reply.list(page.map { $0.json(viewer: userID) }, nextCursor: next)
    }
}
