import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Mute (docs/groups.md#mute) and attribute (docs/groups.md#attributes) routes.
extension GroupRoutes {
    static func registerMuteAndAttributes(on api: inout API) {
        api.add(.put, "/v1/groups/{group_id}/mute", .appOrUser, "setGroupMute") { ctx in
            let groupID = try ctx.pathID("group_id", .groupID)
            var body = try ctx.body()
            let actor = try actor(ctx, &body)
            let mode = body.enumeration("mode", Group.Mute.Mode.self, required: true)
            var duration: Int64 = 0
            var roles: [Int64] = []
            if let mode, mode != .none {
                duration = readMuteDuration(&body, allowZero: false) ?? 0
                if mode == .custom {
                    roles = body.intArray("roles", required: true, minItems: 1, maxItems: 10, range: 2...10000) ?? []
                }
            }
            try body.check()
            guard let mode else { throw APIError.internalError }
            let service = GroupService(ctx)
            let group = try service.setGroupMute(groupID, actor: actor, mode: mode, durationSeconds: duration, roles: roles)
            return Reply.json(group.json(service.limits, now: ctx.now))
        }

        api.add(.post, "/v1/groups/{group_id}/members/mute", .appOrUser, "muteGroupMembers") { ctx in
            let groupID = try ctx.pathID("group_id", .groupID)
            var body = try ctx.body()
            let actor = try actor(ctx, &body)
            let items = body.batchIDs(maxItems: GroupService.maxBatch)
            let duration = readMuteDuration(&body, allowZero: true)
            try body.check()
            guard let duration else { throw APIError.internalError }
            let outcomes = try GroupService(ctx).muteMembers(
                groupID, actor: actor, userIDs: items.compactMap(\.userID), durationSeconds: duration)
            return Reply.batch(
                BatchResult.results(items) { id in
                    itemOutcome(outcomes[id]) { member in
                        var o = JSONObjectWriter(capacity: 64)
                        o["user_id"] = id
                        o["muted_until"] = member?.mutedUntil(asOf: ctx.now) ?? 0
                        return o.finish()
                    }
                })
        }

        api.add(.get, "/v1/groups/{group_id}/muted_members", .appOrUser, "listMutedGroupMembers") { ctx in
            let groupID = try ctx.pathID("group_id", .groupID)
            var query = ctx.query()
            let limit = query.limit()
            let cursor = query.cursor()
            try query.check()
            let service = GroupService(ctx)
            let group = try service.get(groupID, on: ctx.db)
            _ = try service.reader(group, userID: ctx.tokenUserID, on: ctx.db)
            let list = "group_muted|\(ctx.appID)|\(groupID)"
            let after = try ListPage.cursorValues(ctx, cursor, list: list, count: 1)?[0].stringValue
            let rows = try service.mutedMembers(of: groupID, after: after, limit: limit + 1)
            return ListPage.page(rows, limit: limit, list: list, ctx: ctx, { [.string($0.userID)] }) { $0.json(now: ctx.now) }
        }

        api.add(.post, "/v1/groups/{group_id}/attributes", .appOrUser, "setGroupAttributes") { ctx in
            let groupID = try ctx.pathID("group_id", .groupID)
            var body = try ctx.body()
            let actor = try actor(ctx, &body)
            var items: [(key: String, value: String?)] = []
            if let attributes = body.rawObject("attributes", required: true) {
                if attributes.isEmpty || attributes.count > GroupAttributes.maxKeys {
                    body.addError("attributes", "must have 1 to \(GroupAttributes.maxKeys) entries")
                }
                items = attributes.map { ($0.key, $0.value.stringValue) }
            }
            try body.check()
            let valid = items.compactMap { item in item.value.map { (key: item.key, value: $0) } }
            let outcomes = try GroupService(ctx).setAttributes(groupID, actor: actor, entries: valid)
            return Reply.batch(attributeResults(items.map { ($0.key, $0.value == nil ? "expected string value" : nil) }, outcomes))
        }

        api.add(.post, "/v1/groups/{group_id}/attributes/delete", .appOrUser, "deleteGroupAttributes") { ctx in
            let groupID = try ctx.pathID("group_id", .groupID)
            var body = try ctx.body()
            let actor = try actor(ctx, &body)
            var items: [(key: String, problem: String?)] = []
            if let raw = body.array("keys", required: true, minItems: 1, maxItems: GroupAttributes.maxKeys) {
                var seen: Set<String> = []
                for value in raw {
                    guard let key = value.stringValue else {
                        items.append(("", "expected string, got \(value.typeName)"))
                        continue
                    }
                    items.append((key, seen.insert(key).inserted ? nil : "key \(key) is repeated in this request"))
                }
            }
            try body.check()
            let keys = items.filter { $0.problem == nil }.map(\.key)
            let outcomes = try GroupService(ctx).deleteAttributes(groupID, actor: actor, keys: keys)
            return Reply.batch(attributeResults(items, outcomes))
        }

        api.add(.get, "/v1/groups/{group_id}/attributes", .appOrUser, "getGroupAttributes") { ctx in
            let groupID = try ctx.pathID("group_id", .groupID)
            var query = ctx.query()
            let keys = query.list("keys")
            try query.check()
            let service = GroupService(ctx)
            let group = try service.get(groupID, on: ctx.db)
            _ = try service.reader(group, userID: ctx.tokenUserID, on: ctx.db)
            var attributes = group.attributes
            if let keys { attributes = JSONObject(attributes.filter { keys.contains($0.key) }.map { ($0.key, $0.value) }) }
            var o = JSONObjectWriter()
            o["group_id"] = groupID
            o["attributes"] = attributes
            return Reply.json(o.finish())
        }
    }

    /// `duration_s`: -1 or 1–604800 (and 0 = unmute where `allowZero`); required.
    private static func readMuteDuration(_ body: inout BodyReader, allowZero: Bool) -> Int64? {
        guard let d = body.int("duration_s", required: true) else { return nil }
        if d == -1 || (1...GroupService.maxMuteSeconds).contains(d) || (allowZero && d == 0) { return d }
        body.addError("duration_s", "must be -1\(allowZero ? ", 0" : "") or 1 to \(GroupService.maxMuteSeconds)")
        return nil
    }

    /// One result per requested key (`id` = key): items that failed validation (`problem`) fail with
    /// `invalid_params`; the others take the service's outcomes in order.
    private static func attributeResults(_ items: [(key: String, problem: String?)], _ outcomes: [GroupService.AttributeOutcome])
        -> [BatchResult]
    {
        var next = outcomes.makeIterator()
        return items.enumerated().map { index, item in
            if let problem = item.problem { return BatchResult(index: index, id: item.key, outcome: .failed(.invalidParams, problem)) }
            switch next.next() {
            case .applied?: return BatchResult(index: index, id: item.key, outcome: .ok(nil))
            case .failed(let code, let message)?: return BatchResult(index: index, id: item.key, outcome: .failed(code, message))
            case nil: return BatchResult(index: index, id: item.key, outcome: .failed(.internalError, "not processed"))
            }
        }
    }
}
