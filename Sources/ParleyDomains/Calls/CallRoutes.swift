import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Calls (docs/calls.md): HTTP ↔ ``CallService``, and the `call.before_invite` hook of create and invite-more
/// (docs/webhooks.md#before-event-hooks).
package enum CallRoutes {
    package static func register(on api: inout API) {
        api.add(.post, "/v1/calls", .appOrUser, "createCall", create)
        api.add(.post, "/v1/calls/{call_id}/invite", .appOrUser, "inviteToCall", inviteMore)

        api.add(.get, "/v1/calls/{call_id}", .appOrUser, "getCall") { ctx in
            let callID = try ctx.pathID("call_id", .opaque)
            return Reply.json(try CallService(ctx).readable(callID, by: ctx.tokenUserID).json())
        }

        api.add(.get, "/v1/users/{user_id}/calls", .appOrSelf, "listUserCalls") { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            var query = ctx.query()
            let limit = query.limit()
            let state = query.string("state")
            let cursor = query.cursor()
            if let state, state != "started", state != "ended" { query.addError("state", "expected started or ended") }
            try query.check()
            let list = "calls|\(ctx.appID)|\(userID)|\(state ?? "")"
            let after = try ctx.timeAndIDCursor(cursor, list: list)
            let calls = try CallService(ctx).list(userID: userID, ended: state.map { $0 == "ended" }, after: after, limit: limit + 1)
            return ListPage.page(calls, limit: limit, list: list, ctx: ctx, { [.int($0.createdAt), .string($0.callID)] }) { $0.json() }
        }

        api.add(.post, "/v1/calls/{call_id}/cancel", .appOrUser, "cancelCall") { ctx in
            let callID = try ctx.pathID("call_id", .opaque)
            var body = try ctx.body()
            let operatorID = try ctx.actingUser(body.id("operator", .userID), field: body.fieldPath("operator"))
            let invitees =
                body.contains("invitees") && !body.isNull("invitees")
                ? body.batchIDs("invitees", minItems: 1, maxItems: CallLimits.maxInviteesPerRequest) : nil
            let extendedData = body.string("extended_data", maxBytes: CallLimits.maxExtendedDataBytes) ?? ""
            let push = PushConfig.read(from: &body)
            try body.check()
            let (call, results) = try CallService(ctx).cancel(
                callID, operator: operatorID, invitees: invitees, extendedData: extendedData, push: push)
            return batchReply(call, results)
        }

        api.add(.post, "/v1/calls/{call_id}/accept", .appOrUser, "acceptCall") { ctx in try answer(ctx, accept: true) }
        api.add(.post, "/v1/calls/{call_id}/reject", .appOrUser, "rejectCall") { ctx in try answer(ctx, accept: false) }

        api.add(.post, "/v1/calls/{call_id}/join", .appOrUser, "joinCall") { ctx in
            let callID = try ctx.pathID("call_id", .opaque)
            var body = try ctx.body()
            let (userID, extendedData) = try answerFields(&body, ctx)
            try body.check()
            return Reply.json(try CallService(ctx).join(callID, userID: userID, extendedData: extendedData).json())
        }

        api.add(.post, "/v1/calls/{call_id}/quit", .appOrUser, "quitCall") { ctx in
            let callID = try ctx.pathID("call_id", .opaque)
            var body = try ctx.body()
            let (userID, extendedData) = try answerFields(&body, ctx)
            let push = PushConfig.read(from: &body)
            try body.check()
            return Reply.json(try CallService(ctx).quit(callID, userID: userID, extendedData: extendedData, push: push).json())
        }

        api.add(.post, "/v1/calls/{call_id}/end", .appOrUser, "endCall") { ctx in
            let callID = try ctx.pathID("call_id", .opaque)
            var body = try ctx.body()
            let operatorID = try ctx.actingUser(body.id("operator", .userID), field: body.fieldPath("operator"))
            let extendedData = body.string("extended_data", maxBytes: CallLimits.maxExtendedDataBytes) ?? ""
            let push = PushConfig.read(from: &body)
            try body.check()
            return Reply.json(try CallService(ctx).end(callID, operator: operatorID, extendedData: extendedData, push: push).json())
        }
    }

    /// `POST …/accept` and `…/reject`.
    private static func answer(_ ctx: APIContext, accept: Bool) throws -> Response {
        let callID = try ctx.pathID("call_id", .opaque)
        var body = try ctx.body()
        let (userID, extendedData) = try answerFields(&body, ctx)
        try body.check()
        return Reply.json(try CallService(ctx).answer(callID, userID: userID, accept: accept, extendedData: extendedData).json())
    }

    /// `{call, results}`: the batch shape with the call beside its results (docs/errors.md#problems-rfc-9457).
    private static func batchReply(_ call: Call, _ results: [BatchResult]) -> Response {
        Reply.batch(results) { w in
            w.key("call")
            w.writeRaw(call.json())
        }
    }

    /// `user_id` (the token's user for a user token) and `extended_data` of accept, reject, join and quit.
    private static func answerFields(_ body: inout BodyReader, _ ctx: APIContext) throws -> (String, String) {
        let userID = try ctx.actingUser(body.id("user_id", .userID), field: body.fieldPath("user_id"))
        return (userID, body.string("extended_data", maxBytes: CallLimits.maxExtendedDataBytes) ?? "")
    }

    // MARK: - Create and invite-more, with their hook

    /// `POST /v1/calls`: 200 `{call, results}`.
    private static func create(_ ctx: APIContext) throws -> Response {
        var body = try ctx.body()
        let (new, invitation, skipHooks) = try readCreate(&body, ctx)
        let service = CallService(ctx)
        guard ctx.hasHook("call.before_invite", skip: skipHooks) else { return try created(ctx, new, invitation) }
        // The `call.before_invite` hook (docs/webhooks.md#before-event-hooks): after the per-invitee checks, with the
        // invitees that passed (none: 422 and no hook call).
        let passed = try service.precheckCreate(invitation)
        let proposed = proposedCall(new, caller: invitation.inviter, invitees: passed, push: invitation.push)
        return try ctx.afterHook("call.before_invite", data: { hookData(proposed, inviter: invitation.inviter, invitees: passed) }) {
            ctx, verdict in
            switch verdict.action {
            case .allow: return try created(ctx, new, invitation)
            case .reject, .drop: throw verdict.rejection
            case .modify:
                let (patched, patchedInvitation, _) = try ctx.repatched(verdict, proposed: proposed, patchable: createPatchable) {
                    try readCreate(&$0, ctx)
                }
                return try created(ctx, patched, patchedInvitation)
            }
        }
    }

    private static func created(_ ctx: APIContext, _ new: CallService.NewCall, _ invitation: CallService.Invitation) throws -> Response {
        let (call, results) = try CallService(ctx).create(new, invitation)
        return batchReply(call, results)
    }

    /// The fields of a create request a `call.before_invite` hook may patch.
    private static let createPatchable: Set<String> = ["extended_data", "timeout_s", "push"]

    private static func readCreate(
        _ body: inout BodyReader, _ ctx: APIContext
    ) throws -> (CallService.NewCall, CallService.Invitation, skipHooks: Bool) {
        let caller = try ctx.actingUser(body.id("caller", .userID), field: body.fieldPath("caller"))
        let items = body.batchIDs("invitees", minItems: 1, maxItems: CallLimits.maxInviteesPerRequest)
        var new = CallService.NewCall()
        new.mode = body.enumeration("mode", Call.Mode.self) ?? .general
        new.timeoutS = body.int("timeout_s", range: 1...CallLimits.maxTimeoutS) ?? CallLimits.defaultTimeoutS
        new.extendedData = body.string("extended_data", maxBytes: CallLimits.maxExtendedDataBytes) ?? ""
        new.notReceivedCheck = body.bool("not_received_check") ?? false
        let push = PushConfig.read(from: &body)
        let skipChecks = try ctx.appOnlyFlag(body.bool("skip_checks"))
        let skipHooks = try ctx.appOnlyFlag(body.bool("skip_hooks"))
        try body.check()
        return (new, CallService.Invitation(inviter: caller, items: items, push: push, skipChecks: skipChecks), skipHooks)
    }

    /// `POST /v1/calls/{call_id}/invite` (advanced): 200 `{call, results}`.
    private static func inviteMore(_ ctx: APIContext) throws -> Response {
        let callID = try ctx.pathID("call_id", .opaque)
        var body = try ctx.body()
        let (invitation, skipHooks) = try readInvite(&body, ctx)
        guard ctx.hasHook("call.before_invite", skip: skipHooks) else { return try invited(ctx, callID, invitation) }
        let (call, passed) = try CallService(ctx).precheckInvite(callID, invitation)
        // Nobody passed the checks: no hook call; the write answers with the per-item failures and changes nothing.
        if passed.isEmpty { return try invited(ctx, callID, invitation) }
        let proposed: JSONObject = ["push": invitation.push ?? .null]
        return try ctx.afterHook(
            "call.before_invite",
            data: { hookData(try JSONValue.parse(call.json()).objectValue ?? [:], inviter: invitation.inviter, invitees: passed) }
        ) { ctx, verdict in
            switch verdict.action {
            case .allow: return try invited(ctx, callID, invitation)
            case .reject, .drop: throw verdict.rejection
            case .modify:
                let (patched, _) = try ctx.repatched(verdict, proposed: proposed, patchable: ["push"]) { try readInvite(&$0, ctx) }
                return try invited(ctx, callID, patched)
            }
        }
    }

    private static func invited(_ ctx: APIContext, _ callID: String, _ invitation: CallService.Invitation) throws -> Response {
        let (call, results) = try CallService(ctx).inviteMore(callID, invitation)
        return batchReply(call, results)
    }

    private static func readInvite(_ body: inout BodyReader, _ ctx: APIContext) throws -> (CallService.Invitation, skipHooks: Bool) {
        let operatorID = try ctx.actingUser(body.id("operator", .userID), field: body.fieldPath("operator"))
        let items = body.batchIDs("invitees", minItems: 1, maxItems: CallLimits.maxInviteesPerRequest)
        let push = PushConfig.read(from: &body)
        let skipChecks = try ctx.appOnlyFlag(body.bool("skip_checks"))
        let skipHooks = try ctx.appOnlyFlag(body.bool("skip_hooks"))
        try body.check()
        return (CallService.Invitation(inviter: operatorID, items: items, push: push, skipChecks: skipChecks), skipHooks)
    }

    /// The call a create proposes, as its hook sees it: no `call_id`, no `created_at`
    /// (docs/webhooks.md#before-event-hooks), and the request's `push` beside it (patchable).
    private static func proposedCall(_ new: CallService.NewCall, caller: String, invitees: [String], push: JSONValue?) -> JSONObject {
        var o = JSONObject()
        o["mode"] = .string(new.mode.rawValue)
        o["caller_id"] = .string(caller)
        o["state"] = .string("started")
        o["end_reason"] = .null
        o["extended_data"] = .string(new.extendedData)
        o["timeout_s"] = .int(new.timeoutS)
        o["ended_at"] = .null
        var users: [JSONValue] = [.object(["user_id": .string(caller), "state": .string("accepted")])]
        users += invitees.map { .object(["user_id": .string($0), "state": .string("inviting"), "inviter_id": .string(caller)]) }
        o["users"] = .array(users)
        o["push"] = push ?? .null
        return o
    }

    /// `call.before_invite`'s `data`: `{call, inviter_id, invitee_ids}` (the request's `push` is not part of the call).
    private static func hookData(_ call: JSONObject, inviter: String, invitees: [String]) -> [UInt8] {
        var call = call
        call["push"] = nil
        var o = JSONObject()
        o["call"] = .object(call)
        o["inviter_id"] = .string(inviter)
        o["invitee_ids"] = .array(invitees.map(JSONValue.string))
        return JSONValue.object(o).serialized()
    }
}
