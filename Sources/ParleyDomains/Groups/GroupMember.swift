import ParleyAPI
import ParleyCore

/// A group member (the GroupMember object, docs/groups.md#the-objects): its membership row with the user's `name` and
/// `avatar_url`.
///
/// A value read from one `group_members` row joined with `users`. The row is also where a member's future
/// per-group state (its group conversation, docs/conversations.md) is keyed.
package struct GroupMember: Sendable, Equatable {
    var userID: String
    package var name: String
    var avatarURL: String
    var role: Int64
    var nickname: String
    /// 0 none, -1 permanent, else ms.
    var mutedUntil: Int64
    var enterType: EnterType
    var joinedAt: Int64
    var operatedBy: String?

    /// `enter_type` (docs/api.md).
    enum EnterType: String, CaseIterable, Sendable {
        case created
        case joinApply = "join_apply"
        case joined, invited
        case inviteApply = "invite_apply"
    }

    /// `muted_until` as it reads at `now`: an expired mute reads as 0 (no timer: its expiry writes no event).
    func mutedUntil(asOf now: Int64) -> Int64 { mutedUntil == -1 || mutedUntil > now ? mutedUntil : 0 }

    /// Whether the member's own mute covers it at `now`.
    func isMuted(now: Int64) -> Bool { mutedUntil(asOf: now) != 0 }

    /// The GroupMember JSON object at `now`.
    func json(now: Int64) -> [UInt8] {
        var o = JSONObjectWriter(capacity: 192 + userID.utf8.count + name.utf8.count + avatarURL.utf8.count + nickname.utf8.count)
        o["user_id"] = userID
        o["name"] = name
        o["avatar_url"] = avatarURL
        o["role"] = role
        o["nickname"] = nickname
        o["muted_until"] = mutedUntil(asOf: now)
        o["enter_type"] = enterType.rawValue
        o["joined_at"] = joinedAt
        o["operated_by"] = operatedBy
        return o.finish()
    }
}

extension GroupStore.Membership {
    /// An item of `GET /v1/users/{user_id}/groups`: `{group, role, joined_at, notification_status, alias}` (also a
    /// user's data export, docs/privacy.md#user-data-export).
    func json(_ limits: GroupLimits, now: Int64) -> [UInt8] {
        var o = JSONObjectWriter()
        o.raw("group", group.json(limits, now: now))
        o["role"] = role
        o["joined_at"] = joinedAt
        o["notification_status"] = notificationStatus
        o["alias"] = alias
        return o.finish()
    }
}
