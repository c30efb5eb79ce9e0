import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The shared steps of the group rules: locking, the operator and role checks, adding and removing members with
/// owner continuity, and the event shapes (docs/events.md#the-event-object).
extension GroupService {
    static func denied(_ detail: String) -> APIError { APIError(.groupPermissionDenied, detail) }

    /// `ids` without repeats, first occurrence first (event audiences).
    static func distinct(_ ids: [String]) -> [String] {
        var seen: Set<String> = []
        return ids.filter { seen.insert($0).inserted }
    }

    /// Locks the group row for the transaction (404 `group_not_found`, 409 `group_dismissed`).
    func lockActive(_ groupID: String, on db: PostgresConnection) throws -> Group {
        try active(groupID, lock: true, on: db)
    }

    /// The group (404 `group_not_found`, 409 `group_dismissed`), locked for the transaction with `lock`.
    func active(_ groupID: String, lock: Bool, on db: PostgresConnection) throws -> Group {
        guard let group = try GroupStore.fetch(appID: appID, groupID: groupID, forUpdate: lock, on: db) else {
            throw APIError.groupNotFound(groupID)
        }
        if group.isDismissed { throw APIError.groupDismissed(groupID) }
        return group
    }

    /// The `group.before_join` hook's word (docs/webhooks.md#before-event-hooks) on one user who would join directly.
    enum JoinHookVerdict: Sendable {
        case allowed
        /// 403 `7000501` (reject, drop) or 503 `7000502` (a fail-closed hook that failed).
        case refused(APIError)
    }

    /// Why `userID` may not join directly after the hook, or nil when it may. `verdicts` is nil without an enabled
    /// hook (or with `skip_hooks`). The hook is asked before the write, from an unlocked read of the group (the
    /// hook call holds no transaction); a user it was not asked about — the group changed in between, e.g. its
    /// `join_mode` or `be_invite_mode` — answers 503 `7000502`, so a retry asks it. The opposite race (asked, then
    /// the write makes an application instead) just ignores the verdict.
    static func joinRefusal(_ verdicts: [String: JoinHookVerdict]?, _ groupID: String, _ userID: String) -> APIError? {
        guard let verdicts else { return nil }
        switch verdicts[userID] {
        case .allowed?: return nil
        case .refused(let error)?: return error
        case nil:
            return APIError.retryLater(
                .hookUnavailable, "group \(groupID) changed while the group.before_join hook was asked; retry", retryAfterSeconds: 1)
        }
    }

    /// The operator's membership when the role checks (``GroupRole``) apply (nil for the app itself or with
    /// `skip_checks`); an operator that is not a member → 403 `not_group_member`.
    func operatorMember(_ actor: Actor, _ group: Group, on db: PostgresConnection) throws -> GroupMember? {
        guard actor.checks, let userID = actor.userID else { return nil }
        guard let member = try GroupStore.member(appID: appID, groupID: group.groupID, userID: userID, on: db) else {
            throw APIError.notGroupMember(userID, group.groupID)
        }
        return member
    }

    /// Throws 403 `group_permission_denied` when a checked operator's role does not allow the action (`allowed`
    /// is nil when no check applies).
    func permit(_ allowed: Bool?, _ detail: String) throws {
        if allowed == false { throw Self.denied(detail) }
    }

    /// The ids among `userIDs` of existing, not soft-deleted users.
    func liveUsers(_ userIDs: [String], on db: PostgresConnection) throws -> Set<String> {
        try UserService.activeUserIDs(userIDs, appID: appID, on: db)
    }

    /// The owner and admins (join application audiences, big-group membership audiences).
    func managerIDs(_ groupID: String, on db: PostgresConnection) throws -> [String] {
        try GroupStore.memberIDs(appID: appID, groupID: groupID, roles: [GroupRole.owner, GroupRole.admin], on: db)
    }

    /// 422 `group_full` unless `count` more members fit.
    func requireSeats(_ group: Group, _ count: Int64) throws {
        let capacity = group.effectiveMaxMembers(limits)
        if group.memberCount + count > capacity {
            throw APIError(.groupFull, "group \(group.groupID) has \(group.memberCount) members (max_members \(capacity))")
        }
    }

    /// A member about to join with role 3.
    struct NewMemberRow: Sendable {
        var userID: String
        var enterType: GroupMember.EnterType
        var operatedBy: String?
    }

    /// Adds `rows` (seats already checked) and returns them with their one `group.member_joined` event: to the
    /// members, or in a big group only to the joiners, the owner and the admins (docs/groups.md#big-groups). Saves the
    /// group's count and its big-group flag, which never reverts. Unless the group is (now) big, the `tips` event (3
    /// join, 4 invite) by `tips.operator` follows with the joiners as targets; the joiners' conversation entries start
    /// after it.
    func addMembers(
        _ group: inout Group, _ rows: [NewMemberRow], via: String, operator: String?,
        tips: (event: GroupTips.Event, operator: String?), on db: PostgresConnection
    ) throws -> (members: [GroupMember], events: [NewEvent]) {
        let members = try GroupStore.insertMembers(
            appID: appID, groupID: group.groupID,
            rows.map { GroupStore.NewMember(userID: $0.userID, role: GroupRole.member, enterType: $0.enterType, operatedBy: $0.operatedBy) },
            now: now, on: db)
        group.memberCount += Int64(members.count)
        group.isBigGroup = group.isBigGroup || group.memberCount > limits.bigGroupThreshold
        try GroupStore.save(appID: appID, group, on: db)
        let ids = members.map(\.userID)
        let audience =
            group.isBigGroup
            ? Self.distinct(ids + (try managerIDs(group.groupID, on: db)))
            : try GroupStore.memberIDs(appID: appID, groupID: group.groupID, on: db)
        var data = JSONObjectWriter()
        data["group_id"] = group.groupID
        data.write("members") { w in
            w.array { w in for m in members { w.writeRaw(m.json(now: now)) } }
        }
        data["via"] = via
        data["operator"] = `operator`
        var events = [event("group.member_joined", group, data, audience)]
        if !group.isBigGroup {
            events.append(try writeTips(group, GroupTips(event: tips.event, operatorID: tips.operator, targets: ids), on: db))
        }
        try GroupConversations.follow(appID: appID, groupID: group.groupID, userIDs: ids, now: now, on: db)
        return (members, events)
    }

    /// Removes `userIDs` (members of the locked `group`) with owner continuity
    /// (docs/groups.md#lifecycle-and-membership): when the owner goes, the earliest admin, else the earliest member,
    /// becomes owner (`group.member_updated`); when nobody is left the group is dismissed. The leavers' conversation
    /// entries are frozen. Unless the group is big, a `tips` event (5 leave, 6 kick) by `operator` follows
    /// `group.member_left`, with the leavers as targets and the new owner as its change when ownership moved (no
    /// separate event 8). Returns the events (`group.member_left` first) and the new owner.
    func removeMembers(
        _ group: inout Group, _ userIDs: [String], reason: String, operator: String?, tips: GroupTips.Event?, on db: PostgresConnection
    ) throws -> (events: [NewEvent], newOwnerID: String?) {
        let before = group.isBigGroup ? [] : try GroupStore.memberIDs(appID: appID, groupID: group.groupID, on: db)
        let removed = try GroupStore.deleteMembers(appID: appID, groupID: group.groupID, userIDs: userIDs, on: db)
        let leavers = userIDs.filter(removed.contains)
        // Frozen before the tips message below: leavers do not see it.
        try GroupConversations.freeze(appID: appID, groupID: group.groupID, userIDs: leavers, now: now, on: db)
        group.memberCount -= Int64(leavers.count)
        var newOwner: GroupMember?
        if group.memberCount > 0 && leavers.contains(group.ownerID),
            let successor = try GroupStore.successor(appID: appID, groupID: group.groupID, on: db),
            var member = try GroupStore.member(appID: appID, groupID: group.groupID, userID: successor, on: db)
        {
            member.role = GroupRole.owner
            try GroupStore.saveMember(appID: appID, groupID: group.groupID, member, on: db)
            group.ownerID = successor
            newOwner = member
        }
        let audience =
            group.isBigGroup ? Self.distinct(leavers + (try managerIDs(group.groupID, on: db))) : before
        var data = JSONObjectWriter()
        data["group_id"] = group.groupID
        data["user_ids"] = leavers
        data["reason"] = reason
        data["operator"] = `operator`
        data["new_owner_id"] = newOwner?.userID
        var events = [event("group.member_left", group, data, audience)]
        if let tips, !group.isBigGroup, !leavers.isEmpty {
            let change = newOwner.map { GroupTips.Change.newOwner($0.userID) }
            events.append(try writeTips(group, GroupTips(event: tips, operatorID: `operator`, targets: leavers, change: change), on: db))
        }
        if let newOwner {
            let members = try GroupStore.memberIDs(appID: appID, groupID: group.groupID, on: db)
            events.append(memberUpdated(group, [newOwner], changed: ["role"], operator: `operator`, audience: members))
        }
        if group.memberCount <= 0 {
            // The last member left: the group is dismissed (docs/groups.md#lifecycle-and-membership), with nobody left
            // to tell.
            events += try markDismissed(&group, operator: nil, audience: [], on: db)
        } else {
            try GroupStore.save(appID: appID, group, on: db)
        }
        return (events, newOwner?.userID)
    }

    /// A new waiting application created at `now`.
    func newApplication(_ type: GroupApplication.Kind, groupID: String, userID: String, inviterID: String?, wording: String)
        -> GroupApplication
    {
        GroupApplication(
            applicationID: IdentifierKind.generateSortableID(prefix: "ga", timestampMs: now), type: type, state: .waiting,
            groupID: groupID, userID: userID, inviterID: inviterID, wording: wording, operatedBy: nil, createdAt: now,
            updatedAt: now, expiresAt: now + limits.applicationExpiryMillis)
    }

    /// The waiting application of `type` for `userID`; one already overdue is expired here (its
    /// `group.application_updated` goes to `events`) and nil is returned, so a new one can be made.
    func waitingApplication(
        _ groupID: String, userID: String, type: GroupApplication.Kind, managers: [String], events: inout [NewEvent],
        on db: PostgresConnection
    ) throws -> GroupApplication? {
        guard let waiting = try GroupApplicationStore.waiting(appID: appID, groupID: groupID, userID: userID, type: type, on: db) else {
            return nil
        }
        guard waiting.isOverdue(now: now) else { return waiting }
        if let expired = try GroupApplicationStore.expireOverdue(appID: appID, applicationID: waiting.applicationID, now: now, on: db) {
            events.append(expired.event("group.application_updated", managers: managers))
        }
        return nil
    }

    /// A group event ordered by the group.
    func event(_ type: String, _ group: Group, _ data: consuming JSONObjectWriter, _ audience: [String]) -> NewEvent {
        NewEvent(type: type, data: data.finish(), audience: audience, groupID: group.groupID, orderKey: "group:" + group.groupID)
    }

    /// `group.member_updated` `{group_id, members, changed, operator}` to the members.
    func memberUpdated(_ group: Group, _ members: [GroupMember], changed: [String], operator: String?, audience: [String]) -> NewEvent {
        var data = JSONObjectWriter()
        data["group_id"] = group.groupID
        data.write("members") { w in
            w.array { w in for m in members { w.writeRaw(m.json(now: now)) } }
        }
        data["changed"] = changed
        data["operator"] = `operator`
        return event("group.member_updated", group, data, audience)
    }

    /// Saves `group` dismissed at `now` and returns its events for the caller to append: the tips message (event
    /// 2, to the members at dismissal, whose entries are then frozen) and `group.dismissed`. `audience` is the
    /// members at dismissal; when it is empty (the last member just left and that request wrote its own tips
    /// message) no tips message is written.
    func markDismissed(_ group: inout Group, operator: String?, audience: [String], on db: PostgresConnection) throws
        -> [NewEvent]
    {
        group.dismissedAt = now
        group.updatedAt = now
        try GroupStore.save(appID: appID, group, on: db)
        var events: [NewEvent] = []
        if !audience.isEmpty {
            events.append(try writeTips(group, GroupTips(event: .dismissed, operatorID: `operator`), on: db))
            try GroupConversations.freeze(appID: appID, groupID: group.groupID, userIDs: audience, now: now, on: db)
        }
        var data = JSONObjectWriter(capacity: 96)
        data["group_id"] = group.groupID
        data["operator"] = `operator`
        events.append(event("group.dismissed", group, data, audience))
        return events
    }

    /// Stores `tips` in the group's conversation (docs/groups.md#tips-messages) and returns its `message.sent` event.
    func writeTips(_ group: Group, _ tips: GroupTips, on db: PostgresConnection) throws -> NewEvent {
        try tips.write(appID: appID, group: group, now: now, on: db)
    }
}
