import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Application routes (docs/groups.md#applications).
extension GroupRoutes {
    static func registerApplications(on api: inout API) {
        api.add(.get, "/v1/groups/{group_id}/applications", .appOrUser, "listGroupApplications") { ctx in
            let groupID = try ctx.pathID("group_id", .groupID)
            return try listApplications(ctx, list: "group_applications|\(ctx.appID)|\(groupID)") { service, type, state, after, limit in
                try service.groupApplications(
                    groupID, reader: ctx.tokenUserID, type: type, state: state, after: after, limit: limit, on: ctx.db)
            }
        }

        api.add(.get, "/v1/users/{user_id}/group_applications", .appOrSelf, "listUserGroupApplications") { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            return try listApplications(ctx, list: "user_group_applications|\(ctx.appID)|\(userID)") { service, type, state, after, limit in
                try service.userApplications(userID, type: type, state: state, after: after, limit: limit, on: ctx.db)
            }
        }

        api.add(.post, "/v1/group_applications/{application_id}/accept", .appOrUser, "acceptGroupApplication") { ctx in
            let (applicationID, actor, push, skipHooks) = try answerRequest(ctx)
            let accept = { @Sendable (ctx: APIContext) throws -> Response in
                Reply.json(try GroupService(ctx).accept(applicationID, actor: actor, push: push).json)
            }
            // The `group.before_join` hook (docs/webhooks.md#before-event-hooks, via `application`), after every check
            // of the accept, so a rejecting hook leaves the application waiting; the application is read (unlocked)
            // only when the hook is on.
            guard ctx.hasHook(joinHook, skip: skipHooks) else { return try accept(ctx) }
            let application = try GroupService(ctx).acceptable(applicationID, actor: actor)
            let data = joinHookData(application.groupID, userID: application.userID, via: "application", operator: actor.userID)
            return try ctx.afterHook(joinHook, data: { data }) { ctx, verdict in
                try requireJoinAllowed(verdict)
                return try accept(ctx)
            }
        }

        api.add(.post, "/v1/group_applications/{application_id}/reject", .appOrUser, "rejectGroupApplication") { ctx in
            let (applicationID, actor, push, _) = try answerRequest(ctx)
            return Reply.json(try GroupService(ctx).reject(applicationID, actor: actor, push: push).json)
        }
    }

    /// The request of an accept or reject: the application, the operator, `push` and `skip_hooks`.
    private static func answerRequest(
        _ ctx: APIContext
    ) throws -> (applicationID: String, actor: GroupService.Actor, push: JSONValue?, skipHooks: Bool) {
        let applicationID = try ctx.pathID("application_id", .opaque)
        var body = try ctx.body()
        let actor = try actor(ctx, &body)
        let push = PushConfig.read(from: &body, key: "push")
        let skipHooks = try ctx.appOnlyFlag(body.bool("skip_hooks"))
        try body.check()
        return (applicationID, actor, push, skipHooks)
    }

    /// A list of applications by `created_at` desc, then `application_id` desc, with `type` and `state` filters.
    private static func listApplications(
        _ ctx: APIContext, list: String,
        _ fetch: (GroupService, GroupApplication.Kind?, GroupApplication.State?, (Int64, String)?, Int) throws -> [GroupApplication]
    ) throws -> Response {
        var query = ctx.query()
        let limit = query.limit()
        let type = query.choice("type", GroupApplication.Kind.allCases.map(\.rawValue)).flatMap(GroupApplication.Kind.init)
        let state = query.choice("state", GroupApplication.State.allCases.map(\.rawValue)).flatMap(GroupApplication.State.init)
        let cursor = query.cursor()
        try query.check()
        let fullList = "\(list)|\(type?.rawValue ?? "")|\(state?.rawValue ?? "")"
        var after: (Int64, String)?
        if let values = try ListPage.cursorValues(ctx, cursor, list: fullList, count: 2) {
            guard let t = values[0].intValue, let id = values[1].stringValue else { throw ListPage.malformedCursor() }
            after = (t, id)
        }
        let rows = try fetch(GroupService(ctx), type, state, after, limit + 1)
        return ListPage.page(rows, limit: limit, list: fullList, ctx: ctx, { [.int($0.createdAt), .string($0.applicationID)] }) { $0.json }
    }
}
