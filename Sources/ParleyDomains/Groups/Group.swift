import ParleyAPI
import ParleyCore

/// A group (the Group object, docs/groups.md#the-objects) as stored, with its attributes; the JSON view applies the
/// app's limits and the clock.
///
/// A value read from one `groups` row; services change it under the row lock (``GroupStore/fetch``) and save it.
package struct Group: Sendable, Equatable {
    package var groupID: String
    package var name: String
    var avatarURL: String
    var notice: String
    var extendedData: String
    var ownerID: String
    var joinMode: JoinMode
    var inviteMode: InviteMode
    var beInviteMode: BeInviteMode
    /// As requested: 0 follows the app's `max_group_members`.
    var maxMembers: Int64
    var memberCount: Int64
    var isBigGroup: Bool
    var mute: Mute
    /// The group attributes (docs/groups.md#attributes; never part of the Group object).
    var attributes: JSONObject
    package var createdAt: Int64
    var updatedAt: Int64
    var dismissedAt: Int64?

    /// `join_mode` (docs/api.md).
    enum JoinMode: String, CaseIterable, Sendable { case any, auth, forbid }
    /// `invite_mode`.
    enum InviteMode: String, CaseIterable, Sendable { case any, admin }
    /// `be_invite_mode`.
    enum BeInviteMode: String, CaseIterable, Sendable { case none, auth }

    /// The group mute (docs/groups.md#mute): who may not send while it lasts.
    struct Mute: Sendable, Equatable {
        var mode: Mode
        /// 0 none, -1 permanent, else ms.
        var expiresAt: Int64
        /// `custom` only: the muted roles (never the owner).
        var roles: [Int64]

        enum Mode: String, CaseIterable, Sendable { case none, normal, all, custom }

        static let none = Mute(mode: .none, expiresAt: 0, roles: [])

        /// The mute as it reads at `now`: an expired one reads as none (no timer is needed: its expiry writes no
        /// event).
        func asOf(_ now: Int64) -> Mute {
            mode == .none || (expiresAt != -1 && expiresAt <= now) ? .none : self
        }

        /// Whether a member of `role` is covered at `now`.
        func covers(role: Int64, now: Int64) -> Bool {
            let mute = asOf(now)
            switch mute.mode {
            case .none: return false
            case .normal: return role >= GroupRole.member
            case .all: return role != GroupRole.owner
            case .custom: return role != GroupRole.owner && mute.roles.contains(role)
            }
        }

        var json: [UInt8] {
            var o = JSONObjectWriter(capacity: 64)
            o["mode"] = mode.rawValue
            o["expires_at"] = expiresAt
            o["roles"] = roles
            return o.finish()
        }
    }

    var isDismissed: Bool { dismissedAt != nil }

    /// The effective `max_members` under the app's `max_group_members`.
    func effectiveMaxMembers(_ limits: GroupLimits) -> Int64 {
        maxMembers == 0 ? limits.maxGroupMembers : min(maxMembers, limits.maxGroupMembers)
    }

    /// The Group JSON object at `now`.
    func json(_ limits: GroupLimits, now: Int64) -> [UInt8] {
        var o = JSONObjectWriter(capacity: 448 + name.utf8.count + avatarURL.utf8.count + notice.utf8.count + extendedData.utf8.count)
        o["group_id"] = groupID
        o["name"] = name
        o["avatar_url"] = avatarURL
        o["notice"] = notice
        o["extended_data"] = extendedData
        o["owner_id"] = ownerID
        o["join_mode"] = joinMode.rawValue
        o["invite_mode"] = inviteMode.rawValue
        o["be_invite_mode"] = beInviteMode.rawValue
        o["max_members"] = effectiveMaxMembers(limits)
        o["member_count"] = memberCount
        o["is_big_group"] = isBigGroup
        o.raw("mute", mute.asOf(now).json)
        o["created_at"] = createdAt
        o["updated_at"] = updatedAt
        o["dismissed_at"] = dismissedAt
        return o.finish()
    }
}

/// The app settings that bound groups (docs/users.md#apps-and-settings), read once per request.
struct GroupLimits: Sendable {
    var maxGroupMembers: Int64 = 2000
    var bigGroupThreshold: Int64 = 1000
    var applicationExpiryMillis: Int64 = 604_800_000

    init() {}

    init(_ settings: AppSettings?) {
        guard let settings else { return }
        // A setting missing from an app's stored object keeps its default (0 would make every group full).
        if settings.int("max_group_members") > 0 { maxGroupMembers = settings.int("max_group_members") }
        if settings.int("big_group_threshold") > 0 { bigGroupThreshold = settings.int("big_group_threshold") }
        if settings.int("application_expiry_s") > 0 { applicationExpiryMillis = settings.int("application_expiry_s") * 1000 }
    }
}
