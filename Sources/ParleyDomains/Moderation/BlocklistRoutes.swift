import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Blocklists (docs/blocklists.md): HTTP ↔ ``BlocklistService``; app key only. A change is seen at once by this
/// node's `cache` and by the other nodes' within their check interval.
package enum BlocklistRoutes {
    package static func register(on api: inout API, cache: BlocklistCache) {
        api.add(.post, "/v1/blocklists", .app, "createBlocklist") { ctx in
            var body = try ctx.body()
            let name = body.string("name", required: true, minBytes: 1, maxBytes: BlocklistLimits.nameBytes.upperBound)
            let draft = try readDraft(&body, creating: true)
            try body.check()
            let list = try BlocklistService(ctx).create(name: name ?? "", draft)
            cache.invalidate(appID: ctx.appID)
            return Reply.created(list.json())
        }

        api.add(.get, "/v1/blocklists", .app, "listBlocklists") { ctx in
            var query = ctx.query()
            try query.check()
            return Reply.list(try BlocklistService(ctx).list().map { $0.json(entries: false) }, nextCursor: nil)
        }

        api.add(.post, "/v1/blocklists/test", .app, "testBlocklists") { ctx in
            var body = try ctx.body()
            let text = body.string("text", required: true, maxBytes: BlocklistLimits.testTextBytes)
            let names = body.stringArray("names", minItems: 1, maxItems: BlocklistLimits.maxLists)
            try body.check()
            return Reply.json(try BlocklistService(ctx).test(text ?? "", names: names, cache: cache))
        }

        api.add(.get, "/v1/blocklists/{name}", .app, "getBlocklist") { ctx in
            Reply.json(try BlocklistService(ctx).get(try name(ctx)).json())
        }

        api.add(.patch, "/v1/blocklists/{name}", .app, "updateBlocklist") { ctx in
            let name = try name(ctx)
            var body = try ctx.body()
            let draft = try readDraft(&body, creating: false)
            try body.check()
            let list = try BlocklistService(ctx).update(name: name, draft)
            cache.invalidate(appID: ctx.appID)
            return Reply.json(list.json())
        }

        api.add(.delete, "/v1/blocklists/{name}", .app, "deleteBlocklist") { ctx in
            try BlocklistService(ctx).delete(try name(ctx))
            cache.invalidate(appID: ctx.appID)
            return Reply.noContent()
        }
    }

    /// The `{name}` of the path: 1–64 bytes.
    private static func name(_ ctx: APIContext) throws -> String {
        let name = ctx.path("name")
        if let problem = BodyReader.lengthProblem(
            name, minBytes: BlocklistLimits.nameBytes.lowerBound, maxBytes: BlocklistLimits.nameBytes.upperBound)
        {
            throw APIError.invalidParam("name", problem)
        }
        return name
    }

    /// `type`, `action`, `entries` (required when creating) and `applies_to` (at least one scope, no repeats).
    private static func readDraft(_ body: inout BodyReader, creating: Bool) throws -> BlocklistService.Draft {
        var draft = BlocklistService.Draft()
        draft.kind = body.enumeration("type", Blocklist.Kind.self, required: creating)
        draft.action = body.enumeration("action", Blocklist.Action.self, required: creating)
        draft.entries = body.stringArray(
            "entries", required: creating, minItems: BlocklistLimits.entries.lowerBound, maxItems: BlocklistLimits.entries.upperBound)
        if let scopes = body.stringArray("applies_to", minItems: 1, maxItems: Blocklist.Scope.allCases.count) {
            var out: [Blocklist.Scope] = []
            for (index, raw) in scopes.enumerated() {
                guard let scope = Blocklist.Scope(rawValue: raw) else {
                    body.addError(path: "applies_to[\(index)]", "must be one of " + Blocklist.Scope.allCases.map(\.rawValue).joined(separator: ", "))
                    continue
                }
                if out.contains(scope) {
                    body.addError(path: "applies_to[\(index)]", "repeats \(raw)")
                    continue
                }
                out.append(scope)
            }
            draft.appliesTo = out
        }
        return draft
    }
}
