import ParleyAPI
import ParleyCore
import ParleyPostgres

/// Joining, leaving, invitations and kicks (docs/groups.md#lifecycle-and-membership): each locks the group row first,
/// as every change of a group does (``GroupService``).
extension GroupService {

    /// The outcome of a join: a membership, or (join_mode `auth`) a waiting application.
    enum JoinOutcome: Sendable {
        case joined(GroupMember)
        case applied(GroupApplication)
    }

    /// `userID` joins or applies to join. `hookVerdicts`: see ``joinRefusal(_:_:_:)``.
    func join(
        _ groupID: String, userID: String, wording: String, skipChecks: Bool, hookVerdicts: [String: JoinHookVerdict]? = nil
    ) throws -> JoinOutcome {
        try db.transaction { db in
            var group = try lockActive(groupID, on: db)
            if try !joinsDirectly(group, userID: userID, skipChecks: skipChecks, on: db) {
                var events: [NewEvent] = []
                let managers = try managerIDs(groupID, on: db)
                let application: GroupApplication
                if var existing = try waitingApplication(groupID, userID: userID, type: .join, managers: managers, events: &events, on: db) {
                    existing.wording = wording
                    existing.updatedAt = now
                    try GroupApplicationStore.save(appID: appID, existing, on: db)
                    application = existing
                } else {
                    application = newApplication(.join, groupID: groupID, userID: userID, inviterID: nil, wording: wording)
                    try GroupApplicationStore.insert(appID: appID, application, on: db)
                    events.append(application.event("group.application_created", managers: managers))
                }
                try EventLog.append(events, appID: appID, now: now, on: db)
                return .applied(application)
            }
            if let refusal = Self.joinRefusal(hookVerdicts, groupID, userID) { throw refusal }
            let member = NewMemberRow(userID: userID, enterType: .joined, operatedBy: nil)
            let joined = try addMembers(&group, [member], via: "join", operator: nil, tips: (.joined, userID), on: db)
            try EventLog.append(joined.events, appID: appID, now: now, on: db)
            return .joined(joined.members[0])
        }
    }

    /// Whether `userID` would join `groupID` directly (`join_mode` `any`, or `skip_checks`) rather than apply, from
    /// an unlocked read: what the `group.before_join` hook is asked about before the write. Throws what the join
    /// would, so the hook is asked only about a join that would succeed.
    func joinsDirectly(_ groupID: String, userID: String, skipChecks: Bool) throws -> Bool {
        try joinsDirectly(try active(groupID, lock: false, on: db), userID: userID, skipChecks: skipChecks, on: db)
    }

    /// The checks of a join, in this order — 404 user, 409 `already_group_member`, 403 `group_join_forbidden`,
    /// then (a direct join) 422 `group_full` — and whether it joins directly (false: it applies).
    private func joinsDirectly(_ group: Group, userID: String, skipChecks: Bool, on db: PostgresConnection) throws -> Bool {
        try UserService.requireActive(userID, appID: appID, on: db)
        if try GroupStore.member(appID: appID, groupID: group.groupID, userID: userID, on: db) != nil {
            throw APIError(.alreadyGroupMember, "user \(userID) is already a member of group \(group.groupID)")
        }
        if !skipChecks && group.joinMode == .forbid {
            throw APIError(.groupJoinForbidden, "group \(group.groupID) does not accept joins")
        }
        if !skipChecks && group.joinMode == .auth { return false }
        try requireSeats(group, 1)
        return true
    }

    /// `userID` leaves; returns the new owner when ownership moved.
    func leave(_ groupID: String, userID: String) throws -> String? {
        try db.transaction { db in
            var group = try lockActive(groupID, on: db)
            guard try GroupStore.member(appID: appID, groupID: groupID, userID: userID, on: db) != nil else {
                throw APIError.notGroupMember(userID, groupID)
            }
            let removal = try removeMembers(&group, [userID], reason: "left", operator: userID, tips: .left, on: db)
            try EventLog.append(removal.events, appID: appID, now: now, on: db)
            return removal.newOwnerID
        }
    }

    /// Invites `userIDs` (distinct, valid ids): each joins directly, or — `be_invite_mode` `auth`, a user
    /// inviter with checks — gets a waiting invite application. `hookVerdicts` (per invitee who would join
    /// directly): see ``joinRefusal(_:_:_:)``; a refused invitee fails alone and takes no seat.
    func invite(
        _ groupID: String, actor: Actor, userIDs: [String], wording: String, hookVerdicts: [String: JoinHookVerdict]? = nil
    ) throws -> [String: MemberOutcome] {
        try db.transaction { db in
            var group = try lockActive(groupID, on: db)
            let targets = try inviteTargets(group, actor: actor, userIDs: userIDs, on: db)
            var outcomes: [String: MemberOutcome] = [:]
            var rows: [NewMemberRow] = []
            var events: [NewEvent] = []
            var seats = group.effectiveMaxMembers(limits) - group.memberCount
            for id in userIDs {
                switch targets[id] {
                case .failed(let code, let message)?:
                    outcomes[id] = .failed(code, message)
                case .application(let inviter)?:
                    if let existing = try waitingApplication(groupID, userID: id, type: .invite, managers: [], events: &events, on: db) {
                        outcomes[id] = .pending(existing)
                    } else {
                        let application = newApplication(.invite, groupID: groupID, userID: id, inviterID: inviter, wording: wording)
                        try GroupApplicationStore.insert(appID: appID, application, on: db)
                        events.append(application.event("group.application_created", managers: []))
                        outcomes[id] = .pending(application)
                    }
                case .direct?, nil:
                    if let refusal = Self.joinRefusal(hookVerdicts, groupID, id) {
                        outcomes[id] = .failed(refusal.code, refusal.detail)
                    } else if seats <= 0 {
                        outcomes[id] = .failed(.groupFull, "group \(groupID) is full")
                    } else {
                        seats -= 1
                        rows.append(NewMemberRow(userID: id, enterType: .invited, operatedBy: actor.userID))
                    }
                }
            }
            if !rows.isEmpty {
                let joined = try addMembers(&group, rows, via: "invite", operator: actor.userID, tips: (.invited, actor.userID), on: db)
                for m in joined.members { outcomes[m.userID] = .joined(m) }
                events += joined.events
            }
            try EventLog.append(events, appID: appID, now: now, on: db)
            return outcomes
        }
    }

    /// The invitees of `userIDs` who would join directly, in order, from an unlocked read: whom the
    /// `group.before_join` hook is asked about (one call each) before the write. Throws the invite's request-level
    /// errors. The seat check (422 `group_full`) follows the hook, since a refused invitee takes no seat.
    func directInvitees(_ groupID: String, actor: Actor, userIDs: [String]) throws -> [String] {
        let targets = try inviteTargets(try active(groupID, lock: false, on: db), actor: actor, userIDs: userIDs, on: db)
        return userIDs.filter {
            if case .direct? = targets[$0] { true } else { false }
        }
    }

    /// How an invite treats one user (before seats).
    private enum InviteTarget {
        case failed(ErrorCode, String)
        case application(inviter: String)
        case direct
    }

    /// The operator check of an invite (403 `group_permission_denied`) and how it treats each user: 404 user,
    /// 409 `already_group_member`, an invite application, or a direct join.
    private func inviteTargets(_ group: Group, actor: Actor, userIDs: [String], on db: PostgresConnection) throws -> [String: InviteTarget] {
        let op = try operatorMember(actor, group, on: db)
        try permit(op.map { GroupRole.canInvite($0.role, mode: group.inviteMode) }, "only the owner and admins may invite")
        let live = try liveUsers(userIDs, on: db)
        let present = try GroupStore.members(appID: appID, groupID: group.groupID, userIDs: userIDs, on: db)
        let inviter = actor.checks && group.beInviteMode == .auth ? actor.userID : nil
        var targets: [String: InviteTarget] = [:]
        for id in userIDs {
            if !live.contains(id) {
                targets[id] = .failed(.userNotFound, "user \(id) does not exist")
            } else if present[id] != nil {
                targets[id] = .failed(.alreadyGroupMember, "user \(id) is already a member of group \(group.groupID)")
            } else if let inviter {
                targets[id] = .application(inviter: inviter)
            } else {
                targets[id] = .direct
            }
        }
        return targets
    }

    /// The outcome of one kick or mute item.
    enum ItemOutcome: Sendable {
        case done(GroupMember?)
        case failed(ErrorCode, String)
    }

    /// Kicks `userIDs` (distinct, valid ids). The app itself may kick the owner (owner continuity applies).
    func kick(_ groupID: String, actor: Actor, userIDs: [String]) throws -> [String: ItemOutcome] {
        try db.transaction { db in
            var group = try lockActive(groupID, on: db)
            let op = try operatorMember(actor, group, on: db)
            try permit(op.map { GroupRole.canManageMembers($0.role) }, "only the owner and admins may kick members")
            let present = try GroupStore.members(appID: appID, groupID: groupID, userIDs: userIDs, on: db)
            var outcomes: [String: ItemOutcome] = [:]
            var kicked: [String] = []
            for id in userIDs {
                if id == actor.userID {
                    outcomes[id] = .failed(.invalidParams, "an operator cannot kick itself")
                } else if let target = present[id] {
                    if let op, actor.checks, !GroupRole.canManage(op.role, target: target.role) {
                        outcomes[id] = .failed(.groupPermissionDenied, "role \(op.role) may not kick role \(target.role)")
                    } else {
                        kicked.append(id)
                        outcomes[id] = .done(nil)
                    }
                } else {
                    outcomes[id] = .failed(.notGroupMember, "user \(id) is not a member of group \(groupID)")
                }
            }
            if !kicked.isEmpty {
                let removal = try removeMembers(&group, kicked, reason: "kicked", operator: actor.userID, tips: .kicked, on: db)
                try EventLog.append(removal.events, appID: appID, now: now, on: db)
            }
            return outcomes
        }
    }
}
