import ParleyAPI
import ParleyCore

/// A group join or invite application (docs/groups.md#applications).
///
/// A value read from one `group_applications` row; services change it under the row lock and save it.
package struct GroupApplication: Sendable, Equatable {
    var applicationID: String
    package var type: Kind
    var state: State
    package var groupID: String
    /// The applicant (`join`) or the invitee (`invite`).
    var userID: String
    /// `invite` only.
    var inviterID: String?
    var wording: String
    var operatedBy: String?
    package var createdAt: Int64
    var updatedAt: Int64
    var expiresAt: Int64

    /// Application `state` is shared with friend applications (docs/api.md).
    typealias State = FriendApplication.State

    /// Group application `type`.
    package enum Kind: String, CaseIterable, Sendable { case join, invite }

    /// Whether a waiting application has passed its expiry at `now` (it then reads as `expired`).
    func isOverdue(now: Int64) -> Bool { state == .waiting && expiresAt <= now }

    /// The application as it reads at `now`: an overdue waiting one is `expired`, updated at its expiry time (the
    /// values the expiry timer stores, so reads before and after the timer agree).
    package func asOf(_ now: Int64) -> GroupApplication {
        guard isOverdue(now: now) else { return self }
        var copy = self
        copy.state = .expired
        copy.updatedAt = expiresAt
        return copy
    }

    var json: [UInt8] {
        var o = JSONObjectWriter(capacity: 256 + groupID.utf8.count + userID.utf8.count + wording.utf8.count)
        o["application_id"] = applicationID
        o["type"] = type.rawValue
        o["state"] = state.rawValue
        o["group_id"] = groupID
        o["user_id"] = userID
        o["inviter_id"] = inviterID
        o["wording"] = wording
        o["operated_by"] = operatedBy
        o["created_at"] = createdAt
        o["updated_at"] = updatedAt
        o["expires_at"] = expiresAt
        return o.finish()
    }

    /// `group.application_created` / `group.application_updated` (docs/events.md#the-event-object): to the applicant or
    /// invitee, the inviter, and for `join` the group's owner and admins (`managers`).
    func event(_ type: String, managers: [String]) -> NewEvent {
        var data = JSONObjectWriter()
        data.raw("application", json)
        var audience = [userID]
        if let inviterID { audience.append(inviterID) }
        if self.type == .join { audience += managers }
        return NewEvent(type: type, data: data.finish(), audience: GroupService.distinct(audience), groupID: groupID, orderKey: "group:" + groupID)
    }
}
