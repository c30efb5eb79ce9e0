import ParleyAPI
import ParleyCore

/// The default role matrix (docs/groups.md#roles): which member roles may do which group action. Custom roles 4–10000
/// have member rights. Each rule is one function so routes, services and tests name the same cell.
enum GroupRole {
    static let owner: Int64 = 1
    static let admin: Int64 = 2
    static let member: Int64 = 3
    /// Roles a member may be given through `PUT …/role` (1 only through transfer).
    static let assignable: ClosedRange<Int64> = 2...10000

    /// Update name, avatar, notice, extended_data, the modes and max_members; set the group mute.
    static func canEditGroup(_ role: Int64) -> Bool { role == owner || role == admin }

    /// Invite, under the group's `invite_mode`.
    static func canInvite(_ role: Int64, mode: Group.InviteMode) -> Bool { mode == .any || canEditGroup(role) }

    /// Kick, mute members and answer join applications at all (the first check of those requests).
    static func canManageMembers(_ role: Int64) -> Bool { canEditGroup(role) }

    /// Kick or mute `target`: the owner acts on anyone but itself-as-owner, an admin on members (3+) only.
    static func canManage(_ role: Int64, target: Int64) -> Bool {
        switch role {
        case owner: return target != owner
        case admin: return target >= member
        default: return false
        }
    }

    /// Set member roles, transfer ownership, dismiss.
    static func isOwner(_ role: Int64) -> Bool { role == owner }

    /// Set `target`'s nickname: the owner anyone, an admin itself and members (3+), a member itself.
    static func canSetNickname(_ role: Int64, isSelf: Bool, target: Int64) -> Bool {
        if isSelf || role == owner { return true }
        return role == admin && target >= member
    }

    /// Read the member list (not ordinary members of a big group).
    static func canReadMembers(_ role: Int64, bigGroup: Bool) -> Bool { !bigGroup || canEditGroup(role) }
}
