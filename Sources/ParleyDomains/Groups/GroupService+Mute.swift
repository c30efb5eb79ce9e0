import ParleyAPI
import ParleyCore
import ParleyPostgres

/// Group mute and member mute (docs/groups.md#mute). Both expire by time: reads and the send-time check compare with
/// the clock, so no timer runs (an expiry writes no event).
extension GroupService {
    /// Longest timed mute (7 days).
    static let maxMuteSeconds: Int64 = 604_800

    /// The `*_until` / `expires_at` value of a mute of `durationSeconds` (-1 permanent, 0 none).
    func muteEnd(_ durationSeconds: Int64) -> Int64 {
        durationSeconds <= 0 ? durationSeconds : now + durationSeconds * 1000
    }

    /// Sets the group mute (owner and admins); `none` clears it.
    func setGroupMute(_ groupID: String, actor: Actor, mode: Group.Mute.Mode, durationSeconds: Int64, roles: [Int64]) throws -> Group {
        try db.transaction { db in
            var group = try lockActive(groupID, on: db)
            let op = try operatorMember(actor, group, on: db)
            try permit(op.map { GroupRole.canEditGroup($0.role) }, "only the owner and admins may set the group mute")
            group.mute =
                mode == .none
                ? .none : Group.Mute(mode: mode, expiresAt: muteEnd(durationSeconds), roles: mode == .custom ? roles : [])
            group.updatedAt = now
            try GroupStore.save(appID: appID, group, on: db)
            var data = JSONObjectWriter()
            data["group_id"] = groupID
            data.raw("mute", group.mute.json)
            data["operator"] = actor.userID
            let audience = try GroupStore.memberIDs(appID: appID, groupID: groupID, on: db)
            let tips = try writeTips(group, GroupTips(event: .groupChanged, operatorID: actor.userID, change: .groupMute(group.mute)), on: db)
            try EventLog.append([event("group.mute_updated", group, data, audience), tips], appID: appID, now: now, on: db)
            return group
        }
    }

    /// Mutes (or with 0 unmutes) `userIDs` (distinct, valid ids): per item `not_group_member`, or
    /// `group_permission_denied` for a target role the operator may not manage.
    func muteMembers(_ groupID: String, actor: Actor, userIDs: [String], durationSeconds: Int64) throws -> [String: ItemOutcome] {
        try db.transaction { db in
            let group = try lockActive(groupID, on: db)
            let op = try operatorMember(actor, group, on: db)
            try permit(op.map { GroupRole.canManageMembers($0.role) }, "only the owner and admins may mute members")
            let present = try GroupStore.members(appID: appID, groupID: groupID, userIDs: userIDs, on: db)
            let until = muteEnd(durationSeconds)
            var outcomes: [String: ItemOutcome] = [:]
            var changed: [GroupMember] = []
            for id in userIDs {
                guard var target = present[id] else {
                    outcomes[id] = .failed(.notGroupMember, "user \(id) is not a member of group \(groupID)")
                    continue
                }
                if let op, !GroupRole.canManage(op.role, target: target.role) {
                    outcomes[id] = .failed(.groupPermissionDenied, "role \(op.role) may not mute role \(target.role)")
                    continue
                }
                let before = target.mutedUntil(asOf: now)
                target.mutedUntil = until
                if before != until {
                    try GroupStore.saveMember(appID: appID, groupID: groupID, target, on: db)
                    changed.append(target)
                }
                outcomes[id] = .done(target)
            }
            if !changed.isEmpty {
                let audience = try GroupStore.memberIDs(appID: appID, groupID: groupID, on: db)
                let tips = try writeTips(
                    group,
                    GroupTips(event: .memberChanged, operatorID: actor.userID, targets: changed.map(\.userID), change: .mutedUntil(until)),
                    on: db)
                try EventLog.append(
                    [memberUpdated(group, changed, changed: ["muted_until"], operator: actor.userID, audience: audience), tips],
                    appID: appID, now: now, on: db)
            }
            return outcomes
        }
    }
}
