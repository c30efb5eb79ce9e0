import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The call rules (docs/calls.md): the call state machine, its events and its pushes.
///
/// Every change runs in one transaction that locks the call row and re-reads its users under the lock (after the
/// user rows it locks, if any: invitees on create and invite-more, the user of a stream opening or hard delete), so
/// racing answers — accept against cancel, accept against the timeout — end in exactly one outcome, and writes its
/// events last: `call.user_state_changed` for the changed users, then `call.ended` when the change ended the call.
///
/// A value made per request; it owns nothing mutable. Transaction bodies are re-runnable.
package struct CallService: DomainService {
    let db: PostgresConnection
    let appID: String
    let now: Int64

    package init(db: PostgresConnection, appID: String, now: Int64) {
        self.db = db
        self.appID = appID
        self.now = now
    }

    // MARK: - Reads

    /// The call as it is at `now`: timers already due are applied (a window closes at its due time whether or not
    /// the sweep has fired it yet, docs/operations.md#test-clock; the sweep writes them and their events).
    func get(_ callID: String, on db: PostgresConnection) throws -> Call {
        guard var call = try CallStore.fetch(appID: appID, callID: callID, on: db) else { throw Self.notFound(callID) }
        _ = applyDue(&call)
        return call
    }

    /// `GET /v1/calls/{call_id}`: a user token reads only the calls it is in (others are 404, docs/calls.md).
    func readable(_ callID: String, by userID: String?) throws -> Call {
        let call = try get(callID, on: db)
        if let userID, call.user(userID) == nil { throw Self.notFound(callID) }
        return call
    }

    func list(userID: String, ended: Bool?, after: (Int64, String)?, limit: Int) throws -> [Call] {
        try requireUser(userID, on: db)
        return try CallStore.list(appID: appID, userID: userID, ended: ended, after: after, limit: limit, on: db).map { call in
            var call = call
            _ = applyDue(&call)
            return call
        }
    }

    // MARK: - Invitations

    /// A create or invite-more request: who invites whom, with what.
    struct Invitation: Sendable {
        var inviter: String
        var items: [BatchItem]
        var push: JSONValue?
        var skipChecks = false
    }

    /// The call a create request proposes (`POST /v1/calls`, docs/calls.md#operations).
    struct NewCall: Sendable {
        var mode = Call.Mode.general
        var timeoutS = CallLimits.defaultTimeoutS
        var extendedData = ""
        var notReceivedCheck = false
    }

    /// The per-invitee checks of create and invite-more, in their order, without writing: each item's failure, if
    /// any, and the invitees that passed (input order). Run before the `call.before_invite` hook (which is told who
    /// passed) and again under the locks of the write.
    func screen(_ invitation: Invitation, call: Call?, on db: PostgresConnection) throws -> (failures: [Int: APIError], passed: [String]) {
        let ids = invitation.items.compactMap(\.userID)
        let active = try CallStore.lockActiveUsers(appID: appID, userIDs: ids, on: db)
        let blocking =
            invitation.skipChecks ? [] : try CallStore.blocking(appID: appID, userIDs: ids, inviter: invitation.inviter, on: db)
        var failures: [Int: APIError] = [:]
        var passed: [String] = []
        for (index, item) in invitation.items.enumerated() {
            guard let userID = item.userID else {
                failures[index] = APIError.invalidParam("invitees", item.problem ?? "invalid")
                continue
            }
            if userID == invitation.inviter && call == nil {
                failures[index] = APIError.invalidParam("invitees", "the caller cannot invite itself")
            } else if let state = call?.user(userID)?.state, state.isPending || state == .accepted {
                failures[index] = APIError(.alreadyInCall, "user \(userID) is already \(state.rawValue) in the call")
            } else if !active.contains(userID) {
                failures[index] = APIError(.inviteeNotFound, "user \(userID) does not exist")
            } else if blocking.contains(userID) {
                failures[index] = APIError(.blockedByRecipient, "user \(userID) does not accept calls from \(invitation.inviter)")
            } else {
                passed.append(userID)
            }
        }
        return (failures, passed)
    }

    /// The checks before the `call.before_invite` hook of a create: the caller exists and some invitee passes.
    func precheckCreate(_ invitation: Invitation) throws -> [String] {
        try requireUser(invitation.inviter, on: db)
        let passed = try screen(invitation, call: nil, on: db).passed
        if passed.isEmpty { throw Self.noInvitee }
        return passed
    }

    /// `POST /v1/calls`: the call, and one result per invitee (data: its CallUser).
    func create(_ new: NewCall, _ invitation: Invitation) throws -> (call: Call, results: [BatchResult]) {
        try db.transaction { db in
            try requireUser(invitation.inviter, on: db)
            let (failures, passed) = try screen(invitation, call: nil, on: db)
            if passed.isEmpty { throw Self.noInvitee }
            var call = Call(
                callID: IdentifierKind.generateSortableID(prefix: "call_", timestampMs: now), mode: new.mode, callerID: invitation.inviter,
                ended: false, endReason: nil, extendedData: new.extendedData, timeoutS: new.timeoutS, notReceivedCheck: new.notReceivedCheck,
                createdAt: now, endedAt: nil, users: [])
            call.users.append(
                CallUser(
                    userID: invitation.inviter, position: 0, state: .accepted, inviterID: nil, extendedData: "", invitedAt: nil,
                    updatedAt: now, acceptedAt: now, quitAt: nil))
            try CallStore.insert(appID: appID, call: call, on: db)
            try invite(&call, userIDs: passed, inviter: invitation.inviter, on: db)
            try CallStore.save(appID: appID, call: call, users: call.users, on: db)
            var events = [event("call.created", data: wrapped(call), audience: [call.callerID], call: call)]
            events.append(invitedEvent(call, inviter: invitation.inviter, invitees: passed))
            try EventLog.append(events, appID: appID, now: now, on: db)
            try PushPlanner.call(
                kind: .call, appID: appID, callID: call.callID, actor: invitation.inviter, userIDs: passed, push: invitation.push, now: now,
                on: db)
            return (call, results(invitation.items, failures: failures, call: call))
        }
    }

    /// The checks before the `call.before_invite` hook of an invite-more; returns the invitees that pass.
    func precheckInvite(_ callID: String, _ invitation: Invitation) throws -> (call: Call, passed: [String]) {
        let call = try get(callID, on: db)
        try requireInviteMore(call, invitation, on: db)
        let passed = try screen(invitation, call: call, on: db).passed
        try requireRoom(call, adding: passed)
        return (call, passed)
    }

    /// `POST /v1/calls/{call_id}/invite` (advanced): one result per invitee; when none passes, nothing is written.
    func inviteMore(_ callID: String, _ invitation: Invitation) throws -> (call: Call, results: [BatchResult]) {
        // Invitees' rows before the call's (the lock order of every call change).
        try changing(callID, first: { db in try screen(invitation, call: try get(callID, on: db), on: db) }) { call, db, screened in
            let (failures, passed) = screened
            try requireInviteMore(call, invitation, on: db)
            // Re-screened under the call lock: the call's users may have changed since the first look.
            var recheck = failures
            var still: [String] = []
            for userID in passed {
                if let state = call.user(userID)?.state, state.isPending || state == .accepted {
                    let index = invitation.items.firstIndex { $0.userID == userID }!
                    recheck[index] = APIError(.alreadyInCall, "user \(userID) is already \(state.rawValue) in the call")
                } else {
                    still.append(userID)
                }
            }
            try requireRoom(call, adding: still)
            guard !still.isEmpty else { return (call, results(invitation.items, failures: recheck, call: call)) }
            let invited = try invite(&call, userIDs: still, inviter: invitation.inviter, on: db)
            let changed = call.users.filter { invited.contains($0.userID) }
            try CallStore.save(appID: appID, call: call, users: changed, on: db)
            try EventLog.append(
                [
                    invitedEvent(call, inviter: invitation.inviter, invitees: still),
                    stateChangedEvent(call, changed: invited, operatorID: invitation.inviter, extendedData: nil),
                ], appID: appID, now: now, on: db)
            try PushPlanner.call(
                kind: .call, appID: appID, callID: call.callID, actor: invitation.inviter, userIDs: still, push: invitation.push, now: now,
                on: db)
            return (call, results(invitation.items, failures: recheck, call: call))
        }
    }

    /// Makes `userIDs` pending in `call` (new users appended, re-invited ones keep their place): `received` when
    /// they have a presence-counting stream open now (their rows are locked, docs/calls.md), else `inviting`.
    @discardableResult
    private func invite(_ call: inout Call, userIDs: [String], inviter: String, on db: PostgresConnection) throws -> Set<String> {
        let online = try CallStore.online(appID: appID, userIDs: userIDs, on: db)
        for userID in userIDs {
            let state: CallUser.State = online.contains(userID) ? .received : .inviting
            if let index = call.users.firstIndex(where: { $0.userID == userID }) {
                call.users[index].state = state
                call.users[index].inviterID = inviter
                call.users[index].invitedAt = now
                call.users[index].updatedAt = now
            } else {
                call.users.append(
                    CallUser(
                        userID: userID, position: (call.users.map(\.position).max() ?? -1) + 1, state: state, inviterID: inviter,
                        extendedData: "", invitedAt: now, updatedAt: now, acceptedAt: nil, quitAt: nil))
            }
        }
        return Set(userIDs)
    }

    private func requireInviteMore(_ call: Call, _ invitation: Invitation, on db: PostgresConnection) throws {
        try requireAdvanced(call)
        try requireUser(invitation.inviter, on: db)
        try requireStarted(call)
        guard call.user(invitation.inviter)?.state == .accepted else {
            throw Self.conflict("user \(invitation.inviter) has not accepted the call")
        }
    }

    /// The 50-user cap of advanced calls (docs/calls.md): the whole request fails.
    private func requireRoom(_ call: Call, adding userIDs: [String]) throws {
        guard call.mode == .advanced else { return }
        let total = call.activeUserIDs.count + userIDs.count
        if total > CallLimits.maxActiveUsers {
            throw APIError(.callUserLimit, "the call would hold \(total) users pending or accepted (at most \(CallLimits.maxActiveUsers))")
        }
    }

    // MARK: - Answers and the rest of the state machine

    /// `POST …/cancel`: the operator's pending invitees among `invitees` (default: all of them) become `cancelled`.
    func cancel(_ callID: String, operator operatorID: String, invitees: [BatchItem]?, extendedData: String, push: JSONValue?) throws
        -> (call: Call, results: [BatchResult])
    {
        try changing(callID) { call, db in
            try requireUser(operatorID, on: db)
            try requireStarted(call)
            let items =
                invitees
                ?? call.users.filter { $0.state.isPending && $0.inviterID == operatorID }.map { BatchItem(id: $0.userID, userID: $0.userID) }
            var failures: [Int: APIError] = [:]
            var cancelled: [String] = []
            for (index, item) in items.enumerated() {
                guard let userID = item.userID else {
                    failures[index] = APIError.invalidParam("invitees", item.problem ?? "invalid")
                    continue
                }
                guard let user = call.user(userID), user.inviterID == operatorID else {
                    failures[index] = APIError(.notInviter, "user \(userID) was not invited by \(operatorID)")
                    continue
                }
                guard user.state.isPending else {
                    failures[index] = Self.conflict("user \(userID) is \(user.state.rawValue), not pending")
                    continue
                }
                cancelled.append(userID)
            }
            let changed = set(&call, cancelled, to: .cancelled)
            try commit(&call, changed: changed, operatorID: operatorID, extendedData: extendedData, on: db)
            if !cancelled.isEmpty {
                try PushPlanner.call(
                    kind: .callCancel, appID: appID, callID: callID, actor: operatorID, userIDs: cancelled, push: push, now: now, on: db)
            }
            return (call, results(items, failures: failures, call: call))
        }
    }

    /// `POST …/accept` and `…/reject`: an invitee answers its pending invitation.
    func answer(_ callID: String, userID: String, accept: Bool, extendedData: String) throws -> Call {
        try changing(callID) { call, db in
            try requireUser(userID, on: db)
            guard let user = call.user(userID), user.inviterID != nil else {
                throw APIError(.notInvitee, "user \(userID) is not invited to call \(callID)")
            }
            try requireStarted(call)
            guard user.state.isPending else { throw Self.conflict("user \(userID) is \(user.state.rawValue), not pending") }
            let changed = set(&call, [userID], to: accept ? .accepted : .rejected, extendedData: extendedData)
            try commit(&call, changed: changed, operatorID: userID, extendedData: extendedData, on: db)
            return call
        }
    }

    /// `POST …/join` (advanced): any user not `accepted` becomes `accepted`.
    func join(_ callID: String, userID: String, extendedData: String) throws -> Call {
        try changing(callID) { call, db in
            try requireAdvanced(call)
            try requireUser(userID, on: db)
            try requireStarted(call)
            if call.user(userID)?.state == .accepted { throw APIError(.alreadyInCall, "user \(userID) has already accepted the call") }
            if call.user(userID)?.state.isPending != true { try requireRoom(call, adding: [userID]) }
            if call.user(userID) == nil {
                call.users.append(
                    CallUser(
                        userID: userID, position: (call.users.map(\.position).max() ?? -1) + 1, state: .inviting, inviterID: nil,
                        extendedData: "", invitedAt: nil, updatedAt: now, acceptedAt: nil, quitAt: nil))
            }
            let changed = set(&call, [userID], to: .accepted, extendedData: extendedData)
            try commit(&call, changed: changed, operatorID: userID, extendedData: extendedData, on: db)
            return call
        }
    }

    /// `POST …/quit` (advanced): an `accepted` user leaves; with `push`, the others pending or accepted get
    /// `call_cancel`.
    func quit(_ callID: String, userID: String, extendedData: String, push: JSONValue?) throws -> Call {
        try changing(callID) { call, db in
            try requireAdvanced(call)
            try requireUser(userID, on: db)
            try requireStarted(call)
            guard call.user(userID)?.state == .accepted else { throw Self.conflict("user \(userID) has not accepted the call") }
            let before = call.activeUserIDs
            let changed = set(&call, [userID], to: .quit, extendedData: extendedData)
            try commit(&call, changed: changed, operatorID: userID, extendedData: extendedData, on: db)
            if let push {
                try PushPlanner.call(
                    kind: .callCancel, appID: appID, callID: callID, actor: userID, userIDs: before, push: push, now: now, on: db)
            }
            return call
        }
    }

    /// `POST …/end` (advanced): accepted users → `ended`, pending ones → `cancelled`, the call ends (`ended`).
    func end(_ callID: String, operator operatorID: String, extendedData: String, push: JSONValue?) throws -> Call {
        try changing(callID) { call, db in
            try requireAdvanced(call)
            try requireUser(operatorID, on: db)
            try requireStarted(call)
            guard call.user(operatorID)?.state == .accepted else { throw Self.conflict("user \(operatorID) has not accepted the call") }
            let before = call.activeUserIDs
            var changed = set(&call, call.users.filter { $0.state == .accepted }.map(\.userID), to: .ended)
            changed.formUnion(set(&call, call.users.filter(\.state.isPending).map(\.userID), to: .cancelled))
            try commit(&call, changed: changed, operatorID: operatorID, extendedData: extendedData, ending: .ended, on: db)
            if let push {
                try PushPlanner.call(
                    kind: .callCancel, appID: appID, callID: callID, actor: operatorID, userIDs: before, push: push, now: now, on: db)
            }
            return call
        }
    }

    // MARK: - Changes without a request: timers, stream openings, hard deletes

    /// The timers of `call` due at `now` (the caller holds its lock): pending users past `invited_at + timeout_s`
    /// → `timeout`, `inviting` users 5 s after `invited_at` with `not_received_check` → `not_yet_received`. Each
    /// kind of change is its own `call.user_state_changed` (in due-time order), then `call.ended` if the call ended.
    func fireDue(_ call: inout Call, on db: PostgresConnection) throws -> [NewEvent] {
        let (events, changed) = applyDue(&call)
        try save(call, changed: changed, on: db)
        return events
    }

    /// ``fireDue(_:on:)`` without writing: the due changes applied to `call`, their events and the users they changed.
    private func applyDue(_ call: inout Call) -> (events: [NewEvent], changed: Set<String>) {
        guard !call.ended else { return ([], []) }
        let checks = call.users.filter {
            $0.state == .inviting && call.notReceivedCheck && ($0.invitedAt ?? .max) + CallLimits.notReceivedCheckMillis <= now
        }
        let timeouts = call.users.filter { $0.state.isPending && ($0.invitedAt ?? .max) + call.timeoutS * 1000 <= now }
        var steps: [(due: Int64, userIDs: [String], to: CallUser.State)] = []
        for user in checks where !timeouts.contains(where: { $0.userID == user.userID }) {
            steps.append((user.invitedAt! + CallLimits.notReceivedCheckMillis, [user.userID], .notYetReceived))
        }
        for user in timeouts { steps.append((user.invitedAt! + call.timeoutS * 1000, [user.userID], .timeout)) }
        guard !steps.isEmpty else { return ([], []) }
        // Users invited by one request fall due together: one change (and one event) per due time and kind.
        var grouped: [(due: Int64, userIDs: [String], to: CallUser.State)] = []
        for step in steps.sorted(by: { ($0.due, $0.to == .timeout ? 1 : 0) < ($1.due, $1.to == .timeout ? 1 : 0) }) {
            if let last = grouped.last, last.due == step.due, last.to == step.to {
                grouped[grouped.count - 1].userIDs += step.userIDs
            } else {
                grouped.append(step)
            }
        }
        var events: [NewEvent] = []
        var allChanged: Set<String> = []
        for step in grouped {
            let changed = set(&call, step.userIDs, to: step.to)
            allChanged.formUnion(changed)
            events += changes(&call, changed: changed, operatorID: nil, extendedData: nil)
            if call.ended { break }
        }
        return (events, allChanged)
    }

    /// A presence-counting stream of `userID` opened (the caller's transaction holds the user's row): its
    /// invitations still `inviting` or `not_yet_received` become `received`, one `call.user_state_changed` each.
    package func streamOpened(_ userID: String, on db: PostgresConnection) throws -> [NewEvent] {
        var events: [NewEvent] = []
        for callID in try CallStore.unreceived(appID: appID, userID: userID, on: db) {
            guard var call = try CallStore.fetch(appID: appID, callID: callID, forUpdate: true, on: db) else { continue }
            events += try fireDue(&call, on: db)
            guard !call.ended, let state = call.user(userID)?.state, state == .inviting || state == .notYetReceived else { continue }
            let changed = set(&call, [userID], to: .received)
            events += changes(&call, changed: changed, operatorID: nil, extendedData: nil)
            try save(call, changed: changed, on: db)
        }
        return events
    }

    /// A user being hard-deleted (its row is locked first, docs/users.md): in its calls in progress it is `quit` where
    /// it had accepted and `cancelled` where pending; a general call's caller also takes its pending invitations with
    /// it.
    package func removeDeletedUser(_ userID: String, on db: PostgresConnection) throws -> [NewEvent] {
        _ = try db.query("SELECT 1 FROM users WHERE app_id = \(appID) AND user_id = \(userID) FOR UPDATE")
        var events: [NewEvent] = []
        for callID in try CallStore.callsOf(appID: appID, userID: userID, on: db) {
            guard var call = try CallStore.fetch(appID: appID, callID: callID, forUpdate: true, on: db) else { continue }
            events += try fireDue(&call, on: db)
            guard !call.ended, let user = call.user(userID) else { continue }
            var changed: Set<String> = []
            if user.state == .accepted {
                changed = set(&call, [userID], to: .quit)
            } else if user.state.isPending {
                changed = set(&call, [userID], to: .cancelled)
            }
            if call.mode == .general && userID == call.callerID {
                changed.formUnion(set(&call, call.users.filter(\.state.isPending).map(\.userID), to: .cancelled))
            }
            guard !changed.isEmpty else { continue }
            events += changes(&call, changed: changed, operatorID: nil, extendedData: nil)
            try save(call, changed: changed, on: db)
        }
        return events
    }

    // MARK: - Internals

    /// Runs a request's `change` in one transaction on the locked call, after `first` (which takes the locks that
    /// come before the call's) and after firing the call's timers due at `now`: an invitation whose deadline has
    /// passed is `timeout` for the request even if the sweep has not fired it yet (docs/operations.md#test-clock). A
    /// change refused with a problem still commits the timers it fired (their events included), then the problem is
    /// thrown.
    private func changing<First, T>(
        _ callID: String, first: (PostgresConnection) throws -> First, _ change: (inout Call, PostgresConnection, First) throws -> T
    ) throws -> T {
        let outcome = try db.transaction { db -> Result<T, APIError> in
            let before = try first(db)
            guard var call = try CallStore.fetch(appID: appID, callID: callID, forUpdate: true, on: db) else {
                throw Self.notFound(callID)
            }
            let fired = try fireDue(&call, on: db)
            try EventLog.append(fired, appID: appID, now: now, on: db)
            do {
                return .success(try change(&call, db, before))
            } catch let problem as APIError where !fired.isEmpty {
                return .failure(problem)
            }
        }
        return try outcome.get()
    }

    private func changing<T>(_ callID: String, _ change: (inout Call, PostgresConnection) throws -> T) throws -> T {
        try changing(callID, first: { _ in () }) { call, db, _ in try change(&call, db) }
    }

    /// Moves `userIDs` to `state` at `now` (stamping `accepted_at`, `quit_at`, the answer's `extended_data`);
    /// returns them.
    private func set(_ call: inout Call, _ userIDs: [String], to state: CallUser.State, extendedData: String? = nil) -> Set<String> {
        for userID in userIDs {
            guard let index = call.users.firstIndex(where: { $0.userID == userID }) else { continue }
            call.users[index].state = state
            call.users[index].updatedAt = now
            if state == .accepted { call.users[index].acceptedAt = now }
            if state == .quit { call.users[index].quitAt = now }
            if let extendedData { call.users[index].extendedData = extendedData }
        }
        return Set(userIDs)
    }

    /// The events of a change of `changed` users: `call.user_state_changed`, then `call.ended` when the call ends
    /// by it (`ending`, or general: nobody pending any more; advanced: nobody accepted and nobody pending). Nothing
    /// when nobody changed.
    private func changes(
        _ call: inout Call, changed: Set<String>, operatorID: String?, extendedData: String?, ending: Call.EndReason? = nil
    ) -> [NewEvent] {
        guard !changed.isEmpty, !call.ended else { return [] }
        var events = [stateChangedEvent(call, changed: changed, operatorID: operatorID, extendedData: extendedData)]
        let pending = call.users.contains { $0.state.isPending }
        let accepted = call.users.contains { $0.state == .accepted }
        if let ending {
            call.endReason = ending
        } else if call.mode == .general && !pending {
            call.endReason = .resolved
        } else if call.mode == .advanced && !pending && !accepted {
            call.endReason = .empty
        }
        if call.endReason != nil {
            call.ended = true
            call.endedAt = now
            var o = JSONObjectWriter(capacity: 512)
            o.raw("call", call.json())
            o["operator_id"] = operatorID
            o["extended_data"] = extendedData
            events.append(event("call.ended", data: o.finish(), audience: call.users.map(\.userID), call: call))
        }
        return events
    }

    /// Writes a request's change: its users, the call's state, its events.
    private func commit(
        _ call: inout Call, changed: Set<String>, operatorID: String?, extendedData: String?, ending: Call.EndReason? = nil,
        on db: PostgresConnection
    ) throws {
        let events = changes(&call, changed: changed, operatorID: operatorID, extendedData: extendedData, ending: ending)
        try save(call, changed: changed, on: db)
        try EventLog.append(events, appID: appID, now: now, on: db)
    }

    private func save(_ call: Call, changed: Set<String>, on db: PostgresConnection) throws {
        guard !changed.isEmpty else { return }
        try CallStore.save(appID: appID, call: call, users: call.users.filter { changed.contains($0.userID) }, on: db)
        if call.ended { try CallStore.saveState(appID: appID, call: call, on: db) }
    }

    private func results(_ items: [BatchItem], failures: [Int: APIError], call: Call) -> [BatchResult] {
        items.enumerated().map { index, item in
            if let failure = failures[index] {
                return BatchResult(index: index, id: item.id, outcome: .failed(failure.code, failure.detail))
            }
            let id = item.userID ?? item.id
            return BatchResult(index: index, id: id, outcome: .ok(call.user(id)?.json()))
        }
    }

    private func event(_ type: String, data: [UInt8], audience: [String], call: Call) -> NewEvent {
        NewEvent(type: type, data: data, audience: audience, orderKey: "call:" + call.callID)
    }

    private func wrapped(_ call: Call) -> [UInt8] {
        var o = JSONObjectWriter(capacity: 512)
        o.raw("call", call.json())
        return o.finish()
    }

    private func invitedEvent(_ call: Call, inviter: String, invitees: [String]) -> NewEvent {
        var o = JSONObjectWriter(capacity: 512)
        o.raw("call", call.json())
        o["inviter_id"] = inviter
        o["invitee_ids"] = JSONValue.array(invitees.map(JSONValue.string))
        return event("call.invited", data: o.finish(), audience: invitees, call: call)
    }

    /// `call.user_state_changed` to the users pending or accepted after the change and the changed users; `users`
    /// in the call's order.
    private func stateChangedEvent(_ call: Call, changed: Set<String>, operatorID: String?, extendedData: String?) -> NewEvent {
        var o = JSONObjectWriter(capacity: 512)
        o["call_id"] = call.callID
        o["mode"] = call.mode.rawValue
        o.write("users") { w in
            w.beginArray()
            for user in call.users where changed.contains(user.userID) { w.writeRaw(user.json()) }
            w.endArray()
        }
        o["operator_id"] = operatorID
        o["extended_data"] = extendedData
        let audience = call.users.filter { $0.state.isPending || $0.state == .accepted || changed.contains($0.userID) }.map(\.userID)
        return event("call.user_state_changed", data: o.finish(), audience: audience, call: call)
    }

    private func requireUser(_ userID: String, on db: PostgresConnection) throws {
        try UserService.requireActive(userID, appID: appID, on: db)
    }

    private func requireStarted(_ call: Call) throws {
        if call.ended { throw Self.conflict("call \(call.callID) has ended") }
    }

    private func requireAdvanced(_ call: Call) throws {
        if call.mode != .advanced { throw APIError(.unsupportedOperation, "this operation needs an advanced call") }
    }

    static func notFound(_ callID: String) -> APIError { APIError(.callNotFound, "call \(callID) does not exist") }
    static func conflict(_ detail: String) -> APIError { APIError(.callStateConflict, detail) }
    static let noInvitee = APIError(.callNoInvitee, "no invitee could be invited; no call was created")
}
