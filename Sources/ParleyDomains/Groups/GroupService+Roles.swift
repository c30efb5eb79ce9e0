import ParleyAPI
import ParleyCore
import ParleyPostgres

/// Owner transfer, member roles and nicknames (docs/groups.md#roles), under the role matrix of ``GroupRole``.
extension GroupService {
    /// Makes `toUserID` the owner; the old owner becomes a member (role 3).
    func transferOwner(_ groupID: String, actor: Actor, to toUserID: String) throws -> Group {
        try db.transaction { db in
            var group = try lockActive(groupID, on: db)
            let op = try operatorMember(actor, group, on: db)
            try permit(op.map { GroupRole.isOwner($0.role) }, "only the owner may transfer ownership")
            let members = try GroupStore.members(appID: appID, groupID: groupID, userIDs: Self.distinct([group.ownerID, toUserID]), on: db)
            guard var target = members[toUserID] else { throw APIError.notGroupMember(toUserID, groupID) }
            guard toUserID != group.ownerID, var old = members[group.ownerID] else { return group }
            old.role = GroupRole.member
            target.role = GroupRole.owner
            try GroupStore.saveMember(appID: appID, groupID: groupID, old, on: db)
            try GroupStore.saveMember(appID: appID, groupID: groupID, target, on: db)
            group.ownerID = toUserID
            group.updatedAt = now
            try GroupStore.save(appID: appID, group, on: db)
            let audience = try GroupStore.memberIDs(appID: appID, groupID: groupID, on: db)
            let tips = try writeTips(
                group, GroupTips(event: .memberChanged, operatorID: actor.userID, targets: [toUserID], change: .newOwner(toUserID)), on: db)
            try EventLog.append(
                [memberUpdated(group, [old, target], changed: ["role"], operator: actor.userID, audience: audience), tips], appID: appID,
                now: now, on: db)
            return group
        }
    }

    /// Sets a member's role (owner only; 2, 3 or a custom role; the owner's own role changes only by transfer).
    func setRole(_ groupID: String, actor: Actor, memberID: String, role: Int64) throws -> GroupMember {
        try changeMember(groupID, actor: actor, memberID: memberID, field: "role", tips: .role(role)) { op, target in
            try permit(op.map { GroupRole.isOwner($0.role) }, "only the owner may set member roles")
            if target.role == GroupRole.owner { throw Self.denied("the owner's role changes only by transfer_owner") }
            target.role = role
        }
    }

    /// Sets a member's nickname under the nickname rule of ``GroupRole`` (docs/groups.md#roles).
    func setNickname(_ groupID: String, actor: Actor, memberID: String, nickname: String) throws -> GroupMember {
        try changeMember(groupID, actor: actor, memberID: memberID, field: "nickname") { op, target in
            try permit(
                op.map { GroupRole.canSetNickname($0.role, isSelf: $0.userID == target.userID, target: target.role) },
                "role may not set this member's nickname")
            target.nickname = nickname
        }
    }

    /// The shared shape of a one-member change: lock, operator, target (403 `not_group_member`), `change`, save,
    /// and `group.member_updated` when the member changed, followed by a tips message (event 8) with `tips` when
    /// given.
    private func changeMember(
        _ groupID: String, actor: Actor, memberID: String, field: String, tips: GroupTips.Change? = nil,
        _ change: (_ op: GroupMember?, _ target: inout GroupMember) throws -> Void
    ) throws -> GroupMember {
        try db.transaction { db in
            let group = try lockActive(groupID, on: db)
            let op = try operatorMember(actor, group, on: db)
            guard var target = try GroupStore.member(appID: appID, groupID: groupID, userID: memberID, on: db) else {
                throw APIError.notGroupMember(memberID, groupID)
            }
            let before = target
            try change(op, &target)
            guard target != before else { return target }
            try GroupStore.saveMember(appID: appID, groupID: groupID, target, on: db)
            let audience = try GroupStore.memberIDs(appID: appID, groupID: groupID, on: db)
            var events = [memberUpdated(group, [target], changed: [field], operator: actor.userID, audience: audience)]
            if let tips {
                events.append(
                    try writeTips(group, GroupTips(event: .memberChanged, operatorID: actor.userID, targets: [memberID], change: tips), on: db))
            }
            try EventLog.append(events, appID: appID, now: now, on: db)
            return target
        }
    }
}
