import ParleyAPI
import ParleyCore
import ParleyDomains

/// Which events a stream delivers (docs/events.md#live-streams-server-sent-events): an app stream's filters, combined
/// with AND, or a user stream's audience rule (`user` set, with the user's own type filter).
struct StreamFilter: Sendable {
    var types = EventTypeFilter()
    /// App stream: the `user_id` filter; user stream: its user. Either way: events whose audience includes it.
    var userID: String?
    var groupID: String?
    var roomID: String?

    /// Whether the stream delivers `event`. A user's audience is `audience`, and for events written to members
    /// (`toGroupMembers`) also the members of the event's group, or of its room when it has none, when it was written:
    /// `wasMember` answers that for the user and that group or room (``MemberAudience``).
    func matches(_ event: LiveEvent, wasMember: (_ userID: String, _ groupOrRoom: MemberAudience.Key) throws -> Bool) rethrows -> Bool {
        guard types.matches(event.type) else { return false }
        if let userID, !event.audience.contains(userID) {
            guard let key = MemberAudience.key(of: event), try wasMember(userID, key) else { return false }
        }
        if let groupID, event.groupID != groupID { return false }
        if let roomID, event.roomID != roomID { return false }
        return true
    }
}
