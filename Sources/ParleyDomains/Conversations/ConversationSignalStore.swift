import ParleyAPI
import ParleyCore
import ParleyPostgres

/// What signals read (docs/conversations.md#typing-and-other-signals): who may send one in a conversation and who
/// gets it. Reads only: the groups, rooms and blacklist rows belong to their domains, below this one.
enum ConversationSignalStore {
    /// A group's state for a signal of `userID`: dismissed, whether `userID` is a member, whether it is big (flagged,
    /// or more members than `threshold`), and the other members; nil when there is no such group.
    static func group(appID: String, groupID: String, userID: String, threshold: Int64, on db: PostgresConnection) throws -> (
        dismissed: Bool, member: Bool, big: Bool, others: [String]
    )? {
        guard
            let (dismissed, member, big) = try db.query(
                """
                SELECT g.dismissed_at IS NOT NULL,
                       EXISTS (SELECT 1 FROM group_members m WHERE m.app_id = g.app_id AND m.group_id = g.group_id AND m.user_id = \(userID)),
                       g.is_big_group OR g.member_count > \(threshold)
                FROM groups g WHERE g.app_id = \(appID) AND g.group_id = \(groupID)
                """
            ).decodeFirst((Bool, Bool, Bool).self)
        else { return nil }
        // A big group's members are never listed: the caller refuses it.
        if dismissed || !member || big { return (dismissed, member, big, []) }
        let others = try db.query(
            "SELECT user_id FROM group_members WHERE app_id = \(appID) AND group_id = \(groupID) AND user_id <> \(userID)"
        ).decode(String.self)
        return (dismissed, member, big, others)
    }

    /// A room's members other than `userID` and whether `userID` is one; nil when there is no such room.
    static func room(appID: String, roomID: String, userID: String, on db: PostgresConnection) throws -> (member: Bool, others: [String])? {
        guard
            let members = try db.query(
                """
                SELECT ARRAY(SELECT user_id FROM room_members m WHERE m.app_id = r.app_id AND m.room_id = r.room_id)
                FROM rooms r WHERE r.app_id = \(appID) AND r.room_id = \(roomID)
                """
            ).decodeFirst([String].self)
        else { return nil }
        return (members.contains(userID), members.filter { $0 != userID })
    }

    /// Whether `owner` has put `userID` on its blacklist.
    static func blacklisted(appID: String, owner: String, userID: String, on db: PostgresConnection) throws -> Bool {
        try db.query(
            "SELECT EXISTS (SELECT 1 FROM blacklist WHERE app_id = \(appID) AND user_id = \(owner) AND blocked_id = \(userID))"
        ).decodeFirst(Bool.self) ?? false
    }
}
