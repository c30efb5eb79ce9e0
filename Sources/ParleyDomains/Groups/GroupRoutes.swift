import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Groups (docs/groups.md#roles, docs/groups.md#big-groups): HTTP ↔ ``GroupService``. Lifecycle here; membership,
/// applications, mute and attributes in the `GroupRoutes+…` files.
///
package enum GroupRoutes {
    /// `blocklists`: the node's compiled blocklists, which screen group profiles (docs/blocklists.md#profiles).
    package static func register(on api: inout API, blocklists: BlocklistCache) {
        registerLifecycle(on: &api, blocklists: blocklists)
        registerMembers(on: &api)
        registerApplications(on: &api)
        registerMuteAndAttributes(on: &api)
    }

    private static func registerLifecycle(on api: inout API, blocklists: BlocklistCache) {
        api.add(.post, "/v1/groups", .appOrUser, "createGroup") { ctx in
            try create(ctx, blocklists: blocklists)
        }

        api.add(.get, "/v1/groups", .app, "listGroups") { ctx in
            var query = ctx.query()
            let limit = query.limit()
            let keywords = KeywordMatch.keywords(&query)
            let includeDismissed = query.bool("include_dismissed") ?? false
            let cursor = query.cursor()
            try query.check()
            let list = "groups|\(ctx.appID)|\(keywords.joined(separator: " "))|\(includeDismissed)"
            var after: (Int64, String)?
            if let values = try ListPage.cursorValues(ctx, cursor, list: list, count: 2) {
                guard let t = values[0].intValue, let id = values[1].stringValue else { throw ListPage.malformedCursor() }
                after = (t, id)
            }
            let service = GroupService(ctx)
            let groups = try service.list(keywords: keywords, includeDismissed: includeDismissed, after: after, limit: limit + 1)
            return ListPage.page(groups, limit: limit, list: list, ctx: ctx, { [.int($0.createdAt), .string($0.groupID)] }) {
                $0.json(service.limits, now: ctx.now)
            }
        }

        api.add(.get, "/v1/groups/{group_id}", .appOrUser, "getGroup") { ctx in
            let groupID = try ctx.pathID("group_id", .groupID)
            let service = GroupService(ctx)
            return Reply.json(try service.get(groupID, on: ctx.db).json(service.limits, now: ctx.now))
        }

        api.add(.patch, "/v1/groups/{group_id}", .appOrUser, "updateGroup") { ctx in
            let groupID = try ctx.pathID("group_id", .groupID)
            var body = try ctx.body()
            let actor = try actor(ctx, &body)
            var patch = GroupService.Patch()
            patch.name = body.string("name", maxBytes: 50)
            patch.avatarURL = body.string("avatar_url", maxBytes: 500)
            patch.notice = body.string("notice", maxBytes: 1024)
            patch.extendedData = body.string("extended_data", maxBytes: 4096)
            patch.joinMode = body.enumeration("join_mode", Group.JoinMode.self)
            patch.inviteMode = body.enumeration("invite_mode", Group.InviteMode.self)
            patch.beInviteMode = body.enumeration("be_invite_mode", Group.BeInviteMode.self)
            patch.maxMembers = body.int("max_members", range: 0...100_000)
            try body.check()
            let service = GroupService(ctx)
            return Reply.json(try service.update(groupID, actor: actor, patch: patch, blocklists: blocklists).json(service.limits, now: ctx.now))
        }

        api.add(.post, "/v1/groups/{group_id}/dismiss", .appOrUser, "dismissGroup") { ctx in
            let groupID = try ctx.pathID("group_id", .groupID)
            var body = try ctx.body()
            let actor = try actor(ctx, &body)
            try body.check()
            let service = GroupService(ctx)
            return Reply.json(try service.dismiss(groupID, actor: actor).json(service.limits, now: ctx.now))
        }

        api.add(.get, "/v1/groups/{group_id}/member_count", .appOrUser, "getGroupMemberCount") { ctx in
            let groupID = try ctx.pathID("group_id", .groupID)
            let group = try GroupService(ctx).get(groupID, on: ctx.db)
            var o = JSONObjectWriter(capacity: 64 + groupID.utf8.count)
            o["group_id"] = groupID
            o["member_count"] = group.memberCount
            return Reply.json(o.finish())
        }
    }

    /// `POST /v1/groups`: 201 `{group, results}` with one result per initial member.
    private static func create(_ ctx: APIContext, blocklists: BlocklistCache) throws -> Response {
        var body = try ctx.body()
        let (input, items, skipHooks) = try newGroup(&body, ctx)
        // The `group.before_create` hook (docs/webhooks.md#before-event-hooks), after validation.
        return try ctx.afterHook("group.before_create", data: { hookData(input) }, skip: skipHooks) { ctx, verdict in
            var input = input
            switch verdict.action {
            case .allow: break
            case .reject, .drop: throw verdict.rejection
            case .modify:
                input = try ctx.repatched(verdict, proposed: proposed(input), patchable: patchable) { try newGroup(&$0, ctx).input }
            }
            return try create(ctx, input, items, blocklists: blocklists)
        }
    }

    /// The members of the proposed group a `group.before_create` hook may patch.
    private static let patchable: Set<String> = ["name", "avatar_url", "notice", "extended_data", "attributes"]

    /// The group of a create request as its hook sees it (`group_id` null when the server will choose it).
    private static func proposed(_ input: GroupService.NewGroup) -> JSONObject {
        var o = JSONObject()
        o["group_id"] = input.groupID.map(JSONValue.string) ?? .null
        o["name"] = .string(input.name)
        o["avatar_url"] = .string(input.avatarURL)
        o["notice"] = .string(input.notice)
        o["extended_data"] = .string(input.extendedData)
        o["owner_id"] = .string(input.owner)
        o["join_mode"] = .string(input.joinMode.rawValue)
        o["invite_mode"] = .string(input.inviteMode.rawValue)
        o["be_invite_mode"] = .string(input.beInviteMode.rawValue)
        o["max_members"] = .int(input.maxMembers)
        o["is_big_group"] = .bool(input.bigGroup)
        o["attributes"] = .object(JSONObject(input.attributes.map { ($0.key, JSONValue.string($0.value)) }))
        return o
    }

    /// `group.before_create`'s `data`: `{group, operator, member_ids}`.
    private static func hookData(_ input: GroupService.NewGroup) -> [UInt8] {
        var o = JSONObject()
        o["group"] = .object(proposed(input))
        o["operator"] = .string(input.owner)
        o["member_ids"] = .array(input.memberIDs.map(JSONValue.string))
        return JSONValue.object(o).serialized()
    }

    /// The validated fields of a create request (docs/groups.md#lifecycle-and-membership), its initial members and
    /// `skip_hooks`.
    private static func newGroup(
        _ body: inout BodyReader, _ ctx: APIContext
    ) throws -> (input: GroupService.NewGroup, items: [BatchItem], skipHooks: Bool) {
        let owner = try ctx.actingUser(body.id("operator", .userID), field: body.fieldPath("operator"))
        var input = GroupService.NewGroup(owner: owner)
        input.groupID = body.id("group_id", .groupID)
        input.name = body.string("name", maxBytes: 50) ?? ""
        input.avatarURL = body.string("avatar_url", maxBytes: 500) ?? ""
        input.notice = body.string("notice", maxBytes: 1024) ?? ""
        input.extendedData = body.string("extended_data", maxBytes: 4096) ?? ""
        input.joinMode = body.enumeration("join_mode", Group.JoinMode.self) ?? .any
        input.inviteMode = body.enumeration("invite_mode", Group.InviteMode.self) ?? .any
        input.beInviteMode = body.enumeration("be_invite_mode", Group.BeInviteMode.self) ?? .none
        input.maxMembers = body.int("max_members", range: 0...100_000) ?? 0
        input.bigGroup = body.bool("big_group") ?? false
        // More than 10 keys is 422 `6000531` from the service (docs/groups.md#lifecycle-and-membership), not a 400.
        if let attributes = body.rawObject("attributes") {
            for (key, value) in attributes {
                guard let text = value.stringValue else {
                    body.addError(path: "\(body.fieldPath("attributes")).\(key)", "expected string, got \(value.typeName)")
                    continue
                }
                input.attributes.append((key, text))
            }
        }
        let items = body.batchIDs("members", minItems: 0, maxItems: GroupService.maxInitialMembers, required: false)
        _ = try ctx.appOnlyFlag(body.bool("skip_checks"))
        let skipHooks = try ctx.appOnlyFlag(body.bool("skip_hooks"))
        try body.check()
        input.memberIDs = items.compactMap(\.userID)
        return (input, items, skipHooks)
    }

    /// Creates the group and answers 201 with the initial members' batch results.
    private static func create(
        _ ctx: APIContext, _ input: GroupService.NewGroup, _ items: [BatchItem], blocklists: BlocklistCache
    ) throws -> Response {
        let service = GroupService(ctx)
        let (group, outcomes) = try service.create(input, blocklists: blocklists)
        let results = BatchResult.results(items) { id in
            switch outcomes[id] {
            case .joined(let member)?: .ok(member.json(now: ctx.now))
            case .failed(let code, let message)?: .failed(code, message)
            case .pending?, nil: .failed(.internalError, "not processed")
            }
        }
        let groupJSON = group.json(service.limits, now: ctx.now)
        return Reply.batch(
            results,
            extra: { w in
                w.key("group")
                w.writeRaw(groupJSON)
            }, status: 201)
    }

    // MARK: - Shared request pieces

    /// The operator of a group action (docs/users.md#user-tokens): a user token acts for itself (a different
    /// `operator`, or `skip_checks`, → 403 `7000002`); an app key names the operator — whose role the checks then test
    /// unless `skip_checks` — or omits it to act as the app itself.
    static func actor(_ ctx: APIContext, _ body: inout BodyReader) throws -> GroupService.Actor {
        let op = body.id("operator", .userID)
        let skip = try ctx.appOnlyFlag(body.bool("skip_checks"))
        if let token = ctx.tokenUserID {
            _ = try ctx.actingUser(op, field: body.fieldPath("operator"))
            return GroupService.Actor(userID: token, checks: true)
        }
        return GroupService.Actor(userID: op, checks: op != nil && !skip)
    }
}
