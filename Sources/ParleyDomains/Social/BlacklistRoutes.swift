import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// The blacklist (docs/social.md#blacklists): HTTP ↔ ``BlacklistService``. Every path is under the owner's
/// `/v1/users/{user_id}`; a user token acts only on its own list (`.appOrSelf`).
package enum BlacklistRoutes {
    package static func register(on api: inout API) {
        api.add(.post, "/v1/users/{user_id}/blacklist", .appOrSelf, "addToBlacklist") { ctx in
            try add(ctx)
        }

        api.add(.post, "/v1/users/{user_id}/blacklist/delete", .appOrSelf, "removeFromBlacklist") { ctx in
            try remove(ctx)
        }

        api.add(.delete, "/v1/users/{user_id}/blacklist/{blocked_id}", .appOrSelf, "deleteFromBlacklist") { ctx in
            let owner = try ctx.pathID("user_id", .userID)
            let blockedID = try ctx.pathID("blocked_id", .userID)
            let removed = try BlacklistService(ctx).remove(owner: owner, blockedIDs: [blockedID])
            guard removed.contains(blockedID) else { throw notInBlacklist(blockedID) }
            return Reply.noContent()
        }

        api.add(.get, "/v1/users/{user_id}/blacklist", .appOrSelf, "listBlacklist") { ctx in
            try list(ctx)
        }

        api.add(.get, "/v1/users/{user_id}/blacklist/{blocked_id}", .appOrSelf, "checkBlacklist") { ctx in
            let owner = try ctx.pathID("user_id", .userID)
            let blockedID = try ctx.pathID("blocked_id", .userID)
            let blocked = try BlacklistService(ctx).isBlocked(owner: owner, blockedID: blockedID, on: ctx.db)
            var o = JSONObjectWriter(capacity: 48 + blockedID.utf8.count)
            o["user_id"] = blockedID
            o["blocked"] = blocked
            return Reply.json(o.finish())
        }
    }

    private static func notInBlacklist(_ id: String) -> APIError {
        APIError(.notInBlacklist, "user \(id) is not on the blacklist")
    }

    // MARK: - Batches

    /// Reads `user_ids` (1–100): a non-string or malformed id, or a repeated one after its first occurrence,
    /// fails only its own item with `invalid_params`.
    private static func readItems(_ ctx: APIContext) throws -> [BatchItem] {
        var body = try ctx.body()
        let items = body.batchIDs()
        try body.check()
        return items
    }

    /// `POST …/blacklist`: per item `already_blacklisted`, `cannot_blacklist_self`, `blacklist_limit`,
    /// `user_not_found`; `data` = `{user_id, created_at}`.
    private static func add(_ ctx: APIContext) throws -> Response {
        let owner = try ctx.pathID("user_id", .userID)
        let items = try readItems(ctx)
        let outcomes = try BlacklistService(ctx).add(owner: owner, blockedIDs: items.compactMap(\.userID))
        let results = items.enumerated().map { index, item -> BatchResult in
            guard let userID = item.userID else {
                return BatchResult(index: index, id: item.id, outcome: .failed(.invalidParams, item.problem ?? "invalid"))
            }
            let outcome: BatchResult.Outcome
            switch outcomes[userID] {
            case .added(let createdAt)?:
                var o = JSONObjectWriter(capacity: 48 + userID.utf8.count)
                o["user_id"] = userID
                o["created_at"] = createdAt
                outcome = .ok(o.finish())
            case .alreadyBlacklisted?:
                outcome = .failed(.alreadyBlacklisted, "user \(userID) is already on the blacklist")
            case .isSelf?:
                outcome = .failed(.cannotBlacklistSelf, "a user cannot blacklist itself")
            case .limitReached?:
                outcome = .failed(.blacklistLimit, "the blacklist would exceed \(BlacklistService.maxEntries) entries")
            case .userNotFound?, nil:
                outcome = .failed(.userNotFound, "user \(userID) does not exist")
            }
            return BatchResult(index: index, id: userID, outcome: outcome)
        }
        return Reply.batch(results)
    }

    /// `POST …/blacklist/delete`: per item `not_in_blacklist`.
    private static func remove(_ ctx: APIContext) throws -> Response {
        let owner = try ctx.pathID("user_id", .userID)
        let items = try readItems(ctx)
        let removed = try BlacklistService(ctx).remove(owner: owner, blockedIDs: items.compactMap(\.userID))
        let results = items.enumerated().map { index, item -> BatchResult in
            guard let userID = item.userID else {
                return BatchResult(index: index, id: item.id, outcome: .failed(.invalidParams, item.problem ?? "invalid"))
            }
            guard removed.contains(userID) else {
                return BatchResult(index: index, id: userID, outcome: .failed(.notInBlacklist, "user \(userID) is not on the blacklist"))
            }
            return BatchResult(index: index, id: userID, outcome: .ok(nil))
        }
        return Reply.batch(results)
    }

    // MARK: - List

    /// `GET …/blacklist`: by `created_at` desc, then `user_id` desc; the cursor is bound to the app and the owner.
    private static func list(_ ctx: APIContext) throws -> Response {
        let owner = try ctx.pathID("user_id", .userID)
        var query = ctx.query()
        let limit = query.limit()
        let cursor = query.cursor()
        try query.check()
        let list = "blacklist|\(ctx.appID)|\(owner)"
        let after: (createdAt: Int64, userID: String)? = try ctx.timeAndIDCursor(cursor, list: list)
        let entries = try BlacklistService(ctx).list(owner: owner, after: after, limit: limit + 1, on: ctx.db)
        let page = entries.prefix(limit)
        let next =
            entries.count > limit
            ? page.last.map { ctx.cursors.encode(list: list, values: [.int($0.createdAt), .string($0.userID)]) } : nil
        return Reply.list(page.map(\.json), nextCursor: next)
    }
}
