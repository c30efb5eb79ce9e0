import ParleyAPI
import ParleyCore
import ParleyDomains

/// Which events a stream delivers (API.md §14.2): an app stream's filters, combined with AND, or a user stream's
/// audience rule (`user` set, with the user's own type filter).
struct StreamFilter: Sendable {
    var types = EventTypeFilter()
    /// App stream: the `user_id` filter; user stream: its user. Either way: events whose audience includes it.
    var userID: String?
    var groupID: String?
    var roomID: String?

    /// Whether the stream delivers `event`; `wasMember` answers for group message events whether a user was a
    /// member of the event's group when it was written.
    func matches(_ event: LiveEvent, wasMember: (_ userID: String, _ groupID: String) throws -> Bool) rethrows -> Bool {
        guard types.matches(event.type) else { return false }
        if let userID {
            if event.toGroupMembers, let group = event.groupID {
                guard try wasMember(userID, group) else { return false }
            } else if !event.audience.contains(userID) {
                return false
            }
        }
        if let groupID, event.groupID != groupID { return false }
        if let roomID, event.roomID != roomID { return false }
        return true
    }
}
