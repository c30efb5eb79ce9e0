import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Membership routes (docs/groups.md#lifecycle-and-membership).
extension GroupRoutes {
    static func registerMembers(on api: inout API) {
        api.add(.post, "/v1/groups/{group_id}/join", .appOrUser, "joinGroup") { ctx in
            let groupID = try ctx.pathID("group_id", .groupID)
            var body = try ctx.body()
            let userID = try ctx.actingUser(body.id("user_id", .userID), field: body.fieldPath("user_id"))
            let wording = body.string("wording", maxBytes: 256) ?? ""
            let skip = try ctx.appOnlyFlag(body.bool("skip_checks"))
            let skipHooks = try ctx.appOnlyFlag(body.bool("skip_hooks"))
            try body.check()
            let join = { @Sendable (ctx: APIContext, verdicts: [String: GroupService.JoinHookVerdict]?) throws -> Response in
                switch try GroupService(ctx).join(groupID, userID: userID, wording: wording, skipChecks: skip, hookVerdicts: verdicts) {
                case .joined(let member): return Reply.json(member.json(now: ctx.now))
                case .applied(let application): return Reply.json(application.json, status: 202)
                }
            }
            // The `group.before_join` hook (docs/webhooks.md#before-event-hooks), only for a direct join: the group is
            // read (unlocked) only when the hook is on.
            guard ctx.hasHook(joinHook, skip: skipHooks) else { return try join(ctx, nil) }
            guard try GroupService(ctx).joinsDirectly(groupID, userID: userID, skipChecks: skip) else { return try join(ctx, [:]) }
            // The joiner is the acting user of a join (docs/users.md#user-tokens), with either credential.
            let data = joinHookData(groupID, userID: userID, via: "join", operator: userID)
            return try ctx.afterHook(joinHook, data: { data }) { ctx, verdict in
                try requireJoinAllowed(verdict)
                return try join(ctx, [userID: .allowed])
            }
        }

        api.add(.post, "/v1/groups/{group_id}/leave", .appOrUser, "leaveGroup") { ctx in
            let groupID = try ctx.pathID("group_id", .groupID)
            var body = try ctx.body()
            let userID = try ctx.actingUser(body.id("user_id", .userID), field: body.fieldPath("user_id"))
            try body.check()
            let newOwner = try GroupService(ctx).leave(groupID, userID: userID)
            var o = JSONObjectWriter(capacity: 96)
            o["group_id"] = groupID
            o["user_id"] = userID
            o["new_owner_id"] = newOwner
            return Reply.json(o.finish())
        }

        api.add(.post, "/v1/groups/{group_id}/members/invite", .appOrUser, "inviteGroupMembers") { ctx in
            let groupID = try ctx.pathID("group_id", .groupID)
            var body = try ctx.body()
            let actor = try actor(ctx, &body)
            let items = body.batchIDs(maxItems: GroupService.maxBatch)
            let wording = body.string("wording", maxBytes: 256) ?? ""
            let skipHooks = try ctx.appOnlyFlag(body.bool("skip_hooks"))
            try body.check()
            let userIDs = items.compactMap(\.userID)
            let invite = { @Sendable (ctx: APIContext, verdicts: [String: GroupService.JoinHookVerdict]?) throws -> Response in
                let outcomes = try GroupService(ctx).invite(
                    groupID, actor: actor, userIDs: userIDs, wording: wording, hookVerdicts: verdicts)
                return inviteResults(items, outcomes)
            }
            // The `group.before_join` hook, one call per invitee who would join directly (not for invite applications).
            // A reject, a drop or a failed fail-closed call fails that invitee's item alone (7000501 / 7000502).
            guard ctx.hasHook(joinHook, skip: skipHooks) else { return try invite(ctx, nil) }
            let direct = try GroupService(ctx).directInvitees(groupID, actor: actor, userIDs: userIDs)
            let data = direct.map { joinHookData(groupID, userID: $0, via: "invite", operator: actor.userID) }
            return try ctx.afterHooks(joinHook, data: { data }) { ctx, results in
                var verdicts: [String: GroupService.JoinHookVerdict] = [:]
                for (id, result) in zip(direct, results) {
                    switch result {
                    case .success(let verdict):
                        verdicts[id] = verdict.action == .reject || verdict.action == .drop ? .refused(verdict.rejection) : .allowed
                    case .failure(let error): verdicts[id] = .refused(error)
                    }
                }
                return try invite(ctx, verdicts)
            }
        }

        api.add(.post, "/v1/groups/{group_id}/members/kick", .appOrUser, "kickGroupMembers") { ctx in
            let groupID = try ctx.pathID("group_id", .groupID)
            var body = try ctx.body()
            let actor = try actor(ctx, &body)
            let items = body.batchIDs(maxItems: GroupService.maxBatch)
            try body.check()
            let outcomes = try GroupService(ctx).kick(groupID, actor: actor, userIDs: items.compactMap(\.userID))
            return Reply.batch(BatchResult.results(items) { id in itemOutcome(outcomes[id]) { _ in nil } })
        }

        api.add(.post, "/v1/groups/{group_id}/transfer_owner", .appOrUser, "transferGroupOwner") { ctx in
            let groupID = try ctx.pathID("group_id", .groupID)
            var body = try ctx.body()
            let actor = try actor(ctx, &body)
            let to = body.id("to_user_id", .userID, required: true)
            try body.check()
            guard let to else { throw APIError.internalError }
            let service = GroupService(ctx)
            return Reply.json(try service.transferOwner(groupID, actor: actor, to: to).json(service.limits, now: ctx.now))
        }

        api.add(.put, "/v1/groups/{group_id}/members/{member_id}/role", .appOrUser, "setGroupMemberRole") { ctx in
            let groupID = try ctx.pathID("group_id", .groupID)
            let memberID = try ctx.pathID("member_id", .userID)
            var body = try ctx.body()
            let actor = try actor(ctx, &body)
            let role = body.int("role", required: true, range: GroupRole.assignable)
            try body.check()
            guard let role else { throw APIError.internalError }
            let member = try GroupService(ctx).setRole(groupID, actor: actor, memberID: memberID, role: role)
            return Reply.json(member.json(now: ctx.now))
        }

        api.add(.put, "/v1/groups/{group_id}/members/{member_id}/nickname", .appOrUser, "setGroupMemberNickname") { ctx in
            let groupID = try ctx.pathID("group_id", .groupID)
            let memberID = try ctx.pathID("member_id", .userID)
            var body = try ctx.body()
            let actor = try actor(ctx, &body)
            let nickname = body.string("nickname", required: true, maxBytes: 64)
            try body.check()
            guard let nickname else { throw APIError.internalError }
            let member = try GroupService(ctx).setNickname(groupID, actor: actor, memberID: memberID, nickname: nickname)
            return Reply.json(member.json(now: ctx.now))
        }

        api.add(.get, "/v1/groups/{group_id}/members", .appOrUser, "listGroupMembers") { ctx in
            try listMembers(ctx)
        }

        api.add(.get, "/v1/groups/{group_id}/members/{member_id}", .appOrUser, "getGroupMember") { ctx in
            let groupID = try ctx.pathID("group_id", .groupID)
            let memberID = try ctx.pathID("member_id", .userID)
            let service = GroupService(ctx)
            let group = try service.get(groupID, on: ctx.db)
            _ = try service.reader(group, userID: ctx.tokenUserID, on: ctx.db)
            let member = try service.member(memberID, of: groupID)
            return Reply.json(member.json(now: ctx.now))
        }

        api.add(.get, "/v1/users/{user_id}/groups", .appOrSelf, "listUserGroups") { ctx in
            try listUserGroups(ctx)
        }
    }

    /// The before-event hook of joins, direct invites and application accepts (docs/webhooks.md#before-event-hooks).
    static let joinHook = "group.before_join"

    /// `group.before_join`'s `data`: `{group_id, user_id, via, operator}` (operator null when the app acts).
    static func joinHookData(_ groupID: String, userID: String, via: String, operator: String?) -> [UInt8] {
        var o = JSONObjectWriter(capacity: 128)
        o["group_id"] = groupID
        o["user_id"] = userID
        o["via"] = via
        o["operator"] = `operator`
        return o.finish()
    }

    /// Throws the 403 `7000501` of a `reject` or `drop` (nothing is patchable: a `modify` proceeds unchanged).
    static func requireJoinAllowed(_ verdict: HookVerdict) throws {
        if verdict.action == .reject || verdict.action == .drop { throw verdict.rejection }
    }

    /// The batch answer of an invite: `data` = `{user_id, state, application_id}`.
    private static func inviteResults(_ items: [BatchItem], _ outcomes: [String: GroupService.MemberOutcome]) -> Response {
        Reply.batch(
            BatchResult.results(items) { id in
                var o = JSONObjectWriter(capacity: 96)
                o["user_id"] = id
                switch outcomes[id] {
                case .joined?:
                    o["state"] = "joined"
                    o["application_id"] = nil as String?
                case .pending(let application)?:
                    o["state"] = "pending"
                    o["application_id"] = application.applicationID
                case .failed(let code, let message)?: return .failed(code, message)
                case nil: return .failed(.internalError, "not processed")
                }
                return .ok(o.finish())
            })
    }

    /// A kick or mute item's batch outcome; `data` renders a successful one.
    static func itemOutcome(_ outcome: GroupService.ItemOutcome?, data: (GroupMember?) -> [UInt8]?) -> BatchResult.Outcome {
        switch outcome {
        case .done(let member)?: .ok(data(member))
        case .failed(let code, let message)?: .failed(code, message)
        case nil: .failed(.internalError, "not processed")
        }
    }

    /// `GET …/members`: by role asc, `joined_at` asc, `user_id` asc; `role` filters (list), `q` matches user_id,
    /// name or nickname.
    private static func listMembers(_ ctx: APIContext) throws -> Response {
        let groupID = try ctx.pathID("group_id", .groupID)
        var query = ctx.query()
        let limit = query.limit()
        let keywords = KeywordMatch.keywords(&query)
        var roles: [Int64]?
        if let raw = query.list("role") {
            roles = raw.compactMap { Int64($0) }.filter { (1...10000).contains($0) }
            if roles?.count != raw.count { query.addError("role", "must be a list of roles 1 to 10000") }
        }
        let cursor = query.cursor()
        try query.check()
        let service = GroupService(ctx)
        let group = try service.get(groupID, on: ctx.db)
        try service.requireMemberListReader(group, userID: ctx.tokenUserID, on: ctx.db)
        let list =
            "group_members|\(ctx.appID)|\(groupID)|\(roles.map { $0.map(String.init).joined(separator: ",") } ?? "")|\(keywords.joined(separator: " "))"
        var after: (Int64, Int64, String)?
        if let values = try ListPage.cursorValues(ctx, cursor, list: list, count: 3) {
            guard let role = values[0].intValue, let t = values[1].intValue, let id = values[2].stringValue else { throw ListPage.malformedCursor() }
            after = (role, t, id)
        }
        let members = try GroupService(ctx).members(
            of: groupID, roles: roles, keywords: keywords, after: after, limit: limit + 1)
        return ListPage.page(members, limit: limit, list: list, ctx: ctx, { [.int($0.role), .int($0.joinedAt), .string($0.userID)] }) {
            $0.json(now: ctx.now)
        }
    }

    /// `GET /v1/users/{user_id}/groups`: the user's live groups by `joined_at` desc, then `group_id` desc.
    private static func listUserGroups(_ ctx: APIContext) throws -> Response {
        let userID = try ctx.pathID("user_id", .userID)
        var query = ctx.query()
        let limit = query.limit()
        let keywords = KeywordMatch.keywords(&query)
        let cursor = query.cursor()
        try query.check()
        let service = GroupService(ctx)
        try UserService.requireActive(userID, appID: ctx.appID, on: ctx.db)
        let list = "user_groups|\(ctx.appID)|\(userID)|\(keywords.joined(separator: " "))"
        var after: (Int64, String)?
        if let values = try ListPage.cursorValues(ctx, cursor, list: list, count: 2) {
            guard let t = values[0].intValue, let id = values[1].stringValue else { throw ListPage.malformedCursor() }
            after = (t, id)
        }
        let rows = try service.groups(of: userID, keywords: keywords, after: after, limit: limit + 1)
        return ListPage.page(rows, limit: limit, list: list, ctx: ctx, { [.int($0.joinedAt), .string($0.group.groupID)] }) { row in
            row.json(service.limits, now: ctx.now)
        }
    }
}
