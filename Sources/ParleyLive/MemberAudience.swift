import ParleyAPI
import ParleyCore
import ParleyDomains
import ParleyPostgres

/// Who was a member of which group or room at which event, for the events the hub delivers to "the members when the
/// event was written" (`to_group_members`: group message events, Migrations/0009; room events, Migrations/0015).
/// Owned by the hub thread. It answers exactly what `parley_member_at` / `parley_room_member_at` answer for the
/// polling log.
///
/// A group's or room's membership intervals (joined at event j, left at event l) are loaded once, in one statement
/// that also reads the app's event head H: that snapshot holds every membership change with an event id ≤ H. Changes
/// whose events are not sequenced yet have NULL stamps (Migrations/0011): a join without `joined_event` is skipped
/// (its event comes after H), a leave without `left_event` is still an open interval (its event comes after H). The
/// hub reads events in id order, so a change it has not loaded shows up as a membership event (`group.created` /
/// `member_joined` / `member_left`, `room.created` / `member_joined` / `member_left` / `destroyed`) with an id above
/// H before any event written after it; seeing one drops the group or room and the next question reloads it. The
/// answer for event k is exact: some interval has j < k and (no l, or k < l).
struct MemberAudience {
    /// What the members are members of.
    enum Kind: Hashable {
        case group
        case room
    }

    /// A group or a room of one app.
    struct Key: Hashable {
        var kind: Kind
        var id: String
    }

    private struct Membership {
        /// The intervals hold every membership change up to this event id: the app's event head when they were read,
        /// or the last membership event applied since.
        var loadedAt: Int64
        var intervals: [String: [(joined: Int64, left: Int64?)]]
    }

    /// By app id, then group or room.
    private var cache: [String: [Key: Membership]] = [:]
    private var loadedCount = 0
    /// Beyond this many cached groups and rooms the cache starts afresh (memory stays bounded; reloads are one query).
    private static let maxEntries = 2000

    static let groupMembershipTypes: Set<String> = ["group.created", "group.member_joined", "group.member_left"]
    static let roomMembershipTypes: Set<String> = ["room.created", "room.member_joined", "room.member_left", "room.destroyed"]

    /// The group or room whose members receive `event`, if it goes to members: its group, else its room.
    static func key(of event: LiveEvent) -> Key? {
        guard event.toGroupMembers else { return nil }
        if let groupID = event.groupID { return Key(kind: .group, id: groupID) }
        if let roomID = event.roomID { return Key(kind: .room, id: roomID) }
        return nil
    }

    /// Notes an event read from the log. A membership change newer than a cached room is applied to it (the event
    /// names who joined or left, and its id is the stamp the sequencer gave them, see below); one of a cached group,
    /// or a room event that cannot be read, drops it and the next question reloads it.
    ///
    /// A room's intervals are opened by the first join event of a transaction (`room.created` names `created_by`,
    /// `room.member_joined` its members) and closed by the first leave event (`room.member_left` names its users,
    /// `room.destroyed` closes every open interval): exactly the stamps `EventLog.sequence` writes, since every
    /// transaction writes a room's join events before its leave events and names each user in the first of them.
    /// Applying them keeps a busy room's cache warm: a room with 2,000 members and enter/leave churn would otherwise
    /// reload every interval it ever had after each enter or leave.
    mutating func observe(_ event: LiveEvent, appID: String) {
        let key: Key
        if let groupID = event.groupID, Self.groupMembershipTypes.contains(event.type) {
            key = Key(kind: .group, id: groupID)
        } else if let roomID = event.roomID, Self.roomMembershipTypes.contains(event.type) {
            key = Key(kind: .room, id: roomID)
        } else {
            return
        }
        guard var cached = cache[appID]?[key], event.id > cached.loadedAt else { return }
        if key.kind == .room, Self.apply(event, to: &cached) {
            // Everything up to this event is in the intervals now: a later look at it (a stream catching up) skips it.
            cached.loadedAt = event.id
            cache[appID]?[key] = cached
            return
        }
        cache[appID]?[key] = nil
        loadedCount -= 1
    }

    /// Applies a room membership event to the cached intervals; false when its data cannot be read.
    private static func apply(_ event: LiveEvent, to membership: inout Membership) -> Bool {
        guard let data = eventData(event.frame) else { return false }
        func open(_ userID: String) {
            if membership.intervals[userID]?.contains(where: { $0.left == nil }) == true { return }
            membership.intervals[userID, default: []].append((event.id, nil))
        }
        func close(_ userID: String) {
            guard let index = membership.intervals[userID]?.firstIndex(where: { $0.left == nil }) else { return }
            membership.intervals[userID]?[index].left = event.id
        }
        switch event.type {
        case "room.created":
            if let creator = data["room"]?["created_by"]?.stringValue { open(creator) }
        case "room.member_joined":
            guard let members = data["members"]?.arrayValue else { return false }
            for member in members {
                guard let userID = member["user_id"]?.stringValue else { return false }
                open(userID)
            }
        case "room.member_left":
            guard let userIDs = data["user_ids"]?.arrayValue else { return false }
            for value in userIDs {
                guard let userID = value.stringValue else { return false }
                close(userID)
            }
        case "room.destroyed":
            for userID in Array(membership.intervals.keys) { close(userID) }
        default:
            return false
        }
        return true
    }

    /// The `data` member of the Event JSON in an SSE frame (`id: …`, `event: …`, `data: <Event JSON>`).
    private static func eventData(_ frame: [UInt8]) -> JSONValue? {
        let marker = Array("\ndata: ".utf8)
        guard let start = frame.indices.first(where: { frame[$0...].starts(with: marker) }) else { return nil }
        var end = frame.endIndex
        while end > start, frame[end - 1] == UInt8(ascii: "\n") { end -= 1 }
        let json = Array(frame[(start + marker.count)..<end])
        return (try? JSONValue.parse(json))?["data"]
    }

    /// The members of an event written to members (nil for other events), to ask about many users of one event
    /// with one cache look-up; ask after observing the event.
    mutating func members(of event: LiveEvent, appID: String, on db: PostgresConnection) throws -> Members? {
        guard let key = Self.key(of: event) else { return nil }
        return Members(intervals: try membership(of: key, appID: appID, on: db).intervals, eventID: event.id)
    }

    /// Who was a member of one event's group or room when it was written.
    struct Members {
        fileprivate let intervals: [String: [(joined: Int64, left: Int64?)]]
        let eventID: Int64

        func contains(_ userID: String) -> Bool {
            intervals[userID]?.contains { $0.joined < eventID && ($0.left.map { eventID < $0 } ?? true) } ?? false
        }
    }

    /// Whether `userID` was a member of the group or room `key` when event `eventID` was written.
    mutating func wasMember(_ userID: String, of key: Key, appID: String, at eventID: Int64, on db: PostgresConnection) throws -> Bool {
        Members(intervals: try membership(of: key, appID: appID, on: db).intervals, eventID: eventID).contains(userID)
    }

    /// The cached intervals of `key`, loaded when missing.
    private mutating func membership(of key: Key, appID: String, on db: PostgresConnection) throws -> Membership {
        let membership: Membership
        if let cached = cache[appID]?[key] {
            membership = cached
        } else {
            membership = try Self.load(appID: appID, key: key, on: db)
            if loadedCount >= Self.maxEntries {
                cache = [:]
                loadedCount = 0
            }
            cache[appID, default: [:]][key] = membership
            loadedCount += 1
        }
        return membership
    }

    /// Forgets every group and room of `appID` (its feed closed).
    mutating func forget(appID: String) {
        loadedCount -= cache[appID]?.count ?? 0
        cache[appID] = nil
    }

    private static func load(appID: String, key: Key, on db: PostgresConnection) throws -> Membership {
        // The same query over the group or the room tables (constant fragments, not parameters).
        let (members, history, column) =
            key.kind == .group
            ? ("group_members", "group_member_history", "group_id") : ("room_members", "room_member_history", "room_id")
        let result = try db.query(
            """
            WITH h AS (SELECT head FROM event_heads WHERE app_id = \(appID))
            SELECT h.head, x.user_id, x.joined_event, x.left_event
            FROM h LEFT JOIN (
                SELECT user_id, joined_event, NULL::bigint AS left_event
                FROM \(unsafeSQL: members) WHERE app_id = \(appID) AND \(unsafeSQL: column) = \(key.id) AND joined_event IS NOT NULL
                UNION ALL
                SELECT user_id, joined_event, left_event FROM \(unsafeSQL: history)
                WHERE app_id = \(appID) AND \(unsafeSQL: column) = \(key.id) AND joined_event IS NOT NULL
            ) x ON true
            """)
        var membership = Membership(loadedAt: 0, intervals: [:])
        for (head, userID, joinedEvent, leftEvent) in try result.decode((Int64, String?, Int64?, Int64?).self) {
            membership.loadedAt = head
            // A row without a user is the head alone (no members); a member's joined_event is never NULL here.
            guard let userID, let joinedEvent else { continue }
            membership.intervals[userID, default: []].append((joinedEvent, leftEvent))
        }
        return membership
    }
}
