import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Presence (docs/users.md#presence): HTTP ↔ ``PresenceService``. Status reads are open to any user token of the app
/// (`U·r`, `.appOrUser`); writes and a user's own subscriptions are for the app or that user (`.appOrSelf`).
package enum PresenceRoutes {
    package static func register(on api: inout API) {
        api.add(.get, "/v1/users/{user_id}/status", .appOrUser, "getUserStatus") { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            return Reply.json(try PresenceService(ctx).status(userID, on: ctx.db).json)
        }

        api.add(.post, "/v1/users/status/query", .appOrUser, "queryUserStatuses") { ctx in
            try queryStatuses(ctx)
        }

        api.add(.put, "/v1/users/{user_id}/status/custom", .appOrSelf, "setCustomStatus") { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            var body = try ctx.body()
            let custom = body.string("custom_status", required: true, maxBytes: UserStatus.maxCustomStatusBytes)
            let expiresIn = body.int("expires_in_s", range: PresenceService.customStatusExpiry)
            try body.check()
            let status = try PresenceService(ctx).setCustomStatus(
                userID, customStatus: custom ?? "", expiresInSeconds: expiresIn ?? PresenceService.customStatusExpiry.upperBound)
            return Reply.json(status.json)
        }

        api.add(.post, "/v1/users/{user_id}/status/subscriptions", .appOrSelf, "subscribeUserStatuses") { ctx in
            try subscribe(ctx)
        }

        api.add(.post, "/v1/users/{user_id}/status/subscriptions/delete", .appOrSelf, "unsubscribeUserStatuses") { ctx in
            try unsubscribe(ctx)
        }

        api.add(.get, "/v1/users/{user_id}/status/subscriptions", .appOrSelf, "listUserStatusSubscriptions") { ctx in
            try list(ctx)
        }
    }

    /// `{user_id, expires_at, status}`: one subscription as subscribe and list return it.
    static func subscriptionJSON(targetID: String, expiresAt: Int64, status: UserStatus) -> [UInt8] {
        var o = JSONObjectWriter(capacity: 320 + targetID.utf8.count * 2 + status.customStatus.utf8.count)
        o["user_id"] = targetID
        o["expires_at"] = expiresAt
        o.raw("status", status.json)
        return o.finish()
    }

    /// The failed result of an item that did not pass validation.
    private static func invalid(_ index: Int, _ item: BatchItem) -> BatchResult {
        BatchResult(index: index, id: item.id, outcome: .failed(.invalidParams, item.problem ?? "invalid"))
    }

    // MARK: - Batches

    /// `POST /v1/users/status/query`: per item `user_not_found` (unknown or soft-deleted).
    private static func queryStatuses(_ ctx: APIContext) throws -> Response {
        var body = try ctx.body()
        let items = body.batchIDs()
        try body.check()
        let found = try PresenceService(ctx).statuses(items.compactMap(\.userID), on: ctx.db)
        let results = items.enumerated().map { index, item -> BatchResult in
            guard let userID = item.userID else { return invalid(index, item) }
            guard let status = found[userID] else {
                return BatchResult(index: index, id: userID, outcome: .failed(.userNotFound, "user \(userID) does not exist"))
            }
            return BatchResult(index: index, id: userID, outcome: .ok(status.json))
        }
        return Reply.batch(results)
    }

    /// `POST …/status/subscriptions`: per item `invalid_params` (also for the subscriber itself), `user_not_found`,
    /// `subscription_limit`; `data` = `{user_id, expires_at, status}`.
    private static func subscribe(_ ctx: APIContext) throws -> Response {
        let subscriberID = try ctx.pathID("user_id", .userID)
        var body = try ctx.body()
        let items = body.batchIDs()
        let duration = body.int("duration_min", required: true, range: PresenceService.subscriptionDuration)
        try body.check()
        let outcomes = try PresenceService(ctx).subscribe(
            subscriberID, targetIDs: items.compactMap(\.userID), durationMinutes: duration ?? 0)
        let results = items.enumerated().map { index, item -> BatchResult in
            guard let userID = item.userID else { return invalid(index, item) }
            let outcome: BatchResult.Outcome
            switch outcomes[userID] {
            case .subscribed(let expiresAt, let status)?:
                outcome = .ok(subscriptionJSON(targetID: userID, expiresAt: expiresAt, status: status))
            case .isSelf?:
                outcome = .failed(.invalidParams, "a user cannot subscribe to its own status")
            case .limitReached?:
                outcome = .failed(
                    .subscriptionLimit, "the subscriptions would exceed \(PresenceService.maxSubscriptions) users")
            case .userNotFound?, nil:
                outcome = .failed(.userNotFound, "user \(userID) does not exist")
            }
            return BatchResult(index: index, id: userID, outcome: outcome)
        }
        return Reply.batch(results)
    }

    /// `POST …/status/subscriptions/delete`: per item `not_found` when there was no unexpired subscription.
    private static func unsubscribe(_ ctx: APIContext) throws -> Response {
        let subscriberID = try ctx.pathID("user_id", .userID)
        var body = try ctx.body()
        let items = body.batchIDs()
        try body.check()
        let removed = try PresenceService(ctx).unsubscribe(subscriberID, targetIDs: items.compactMap(\.userID))
        let results = items.enumerated().map { index, item -> BatchResult in
            guard let userID = item.userID else { return invalid(index, item) }
            guard removed.contains(userID) else {
                return BatchResult(
                    index: index, id: userID, outcome: .failed(.notFound, "no subscription to the status of user \(userID)"))
            }
            return BatchResult(index: index, id: userID, outcome: .ok(nil))
        }
        return Reply.batch(results)
    }

    // MARK: - List

    /// `GET …/status/subscriptions`: by target `user_id` asc; the cursor is bound to the app, the subscriber and the
    /// `user_ids` filter.
    private static func list(_ ctx: APIContext) throws -> Response {
        let subscriberID = try ctx.pathID("user_id", .userID)
        var query = ctx.query()
        // An empty `user_ids=` filters nothing, like an absent one.
        let filter = query.list("user_ids").flatMap { $0.isEmpty ? nil : $0 }
        let limit = query.limit()
        let cursor = query.cursor()
        if let filter {
            for id in filter where IdentifierKind.userID.problem(id) != nil {
                query.addError("user_ids", "\(id): \(IdentifierKind.userID.problem(id) ?? "invalid")")
            }
        }
        try query.check()
        let list = "status_subscriptions|\(ctx.appID)|\(subscriberID)|\(filter.map { Set($0).sorted().joined(separator: ",") } ?? "")"
        var after: String?
        if let cursor {
            let values = try ctx.decodeCursor(cursor, list: list)
            guard values.count == 1, let id = values[0].stringValue else { throw APIError(.invalidCursor, "malformed cursor") }
            after = id
        }
        let entries = try PresenceService(ctx).subscriptions(
            subscriberID, targetIDs: filter, afterTargetID: after, limit: limit + 1, on: ctx.db)
        let page = entries.prefix(limit)
        let next =
            entries.count > limit ? page.last.map { ctx.cursors.encode(list: list, values: [.string($0.subscription.targetID)]) } : nil
        return Reply.list(
            page.map { subscriptionJSON(targetID: $0.subscription.targetID, expiresAt: $0.subscription.expiresAt, status: $0.status) },
            nextCursor: next)
    }
}
