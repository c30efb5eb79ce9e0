import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Retention policies, legal holds and purge runs (docs/retention.md): HTTP ↔ ``RetentionService`` and
/// ``RetentionPurge``. App key only.
package enum RetentionRoutes {
    package static func register(on api: inout API) {
        api.add(.post, "/v1/retention/policies", .app, "setRetentionPolicy") { ctx in
            var body = try ctx.body()
            let scope = RetentionScope.read(&body, allowed: [.app, .peer, .group, .room])
            let maxAgeDays = body.int("max_age_days", required: true, range: 1...3650)
            let purgeFiles = body.bool("purge_files") ?? true
            try body.check()
            guard let scope, let maxAgeDays else { throw APIError.internalError }
            let (policy, created) = try RetentionService(ctx).setPolicy(scope: scope, maxAgeDays: maxAgeDays, purgeFiles: purgeFiles)
            return Reply.json(policy.json(), status: created ? 201 : 200)
        }

        api.add(.get, "/v1/retention/policies", .app, "listRetentionPolicies") { ctx in
            let (limit, list, after) = try ascendingPage(ctx, "retention_policies")
            let policies = try RetentionService(ctx).policies(after: after, limit: limit + 1)
            return ListPage.page(policies, limit: limit, list: list, ctx: ctx, { [.int($0.createdAt), .string($0.policyID)] }) { $0.json() }
        }

        api.add(.delete, "/v1/retention/policies/{policy_id}", .app, "deleteRetentionPolicy") { ctx in
            try RetentionService(ctx).deletePolicy(try ctx.pathID("policy_id", .opaque))
            return Reply.noContent()
        }

        api.add(.post, "/v1/retention/holds", .app, "createLegalHold") { ctx in
            var body = try ctx.body()
            let scope = RetentionScope.read(&body, allowed: [.user, .peer, .group, .room])
            let reason = body.string("reason", maxBytes: 1024) ?? ""
            try body.check()
            guard let scope else { throw APIError.internalError }
            return Reply.created(try RetentionService(ctx).createHold(scope: scope, reason: reason).json())
        }

        api.add(.get, "/v1/retention/holds", .app, "listLegalHolds") { ctx in
            let (limit, list, after) = try ascendingPage(ctx, "legal_holds")
            let holds = try RetentionService(ctx).holds(after: after, limit: limit + 1)
            return ListPage.page(holds, limit: limit, list: list, ctx: ctx, { [.int($0.createdAt), .string($0.holdID)] }) { $0.json() }
        }

        api.add(.delete, "/v1/retention/holds/{hold_id}", .app, "deleteLegalHold") { ctx in
            try RetentionService(ctx).deleteHold(try ctx.pathID("hold_id", .opaque))
            return Reply.noContent()
        }

        api.add(.get, "/v1/retention/runs", .app, "listRetentionRuns") { ctx in
            var query = ctx.query()
            let limit = query.limit()
            let cursor = query.cursor()
            try query.check()
            let list = "retention_runs|\(ctx.appID)"
            var before: (Int64, String)?
            if let values = try ListPage.cursorValues(ctx, cursor, list: list, count: 2) {
                guard let at = values[0].intValue, let id = values[1].stringValue else { throw ListPage.malformedCursor() }
                before = (at, id)
            }
            let runs = try RetentionService(ctx).runs(before: before, limit: limit + 1)
            return ListPage.page(runs, limit: limit, list: list, ctx: ctx, { [.int($0.startedAt), .string($0.runID)] }) { $0.json() }
        }

        api.add(.post, "/v1/retention/runs", .app, "startRetentionRun") { ctx in
            var body = try ctx.body()
            let dryRun = body.bool("dry_run") ?? true
            try body.check()
            if dryRun {
                let run = RetentionRun(runID: RetentionPurge.newRunID(), startedAt: ctx.now, dryRun: true)
                return Reply.json(try RetentionPurge.run(run, appID: ctx.appID, services: ctx.services, now: ctx.now, on: ctx.db).json())
            }
            return Reply.json(try RetentionPurge.start(appID: ctx.appID, services: ctx.services, now: ctx.now, on: ctx.db).json(), status: 202)
        }
    }

    /// `limit`, the list key and the position after which a page of an oldest-first list of `(created_at, id)` rows
    /// starts.
    private static func ascendingPage(_ ctx: APIContext, _ name: String) throws -> (Int, String, (Int64, String)?) {
        var query = ctx.query()
        let limit = query.limit()
        let cursor = query.cursor()
        try query.check()
        let list = "\(name)|\(ctx.appID)"
        guard let values = try ListPage.cursorValues(ctx, cursor, list: list, count: 2) else { return (limit, list, nil) }
        guard let at = values[0].intValue, let id = values[1].stringValue else { throw ListPage.malformedCursor() }
        return (limit, list, (at, id))
    }
}
