import ParleyAPI
import ParleyCore
import ParleyDomains
import ParleyPostgres

/// Who was a member of which group at which event, for the group message events the hub delivers (their audience
/// is "the members when the event was written", Migrations/0009). Owned by the hub thread.
///
/// A group's membership intervals (joined at event j, left at event l) are loaded once, in one statement that also
/// reads the app's event head H: that snapshot holds every membership change with an event id ≤ H. Changes whose
/// events are not sequenced yet have NULL stamps (Migrations/0011): a join without `joined_event` is skipped (its
/// event comes after H), a leave without `left_event` is still an open interval (its event comes after H). The hub reads
/// events in id order, so a change it has not loaded shows up as a `group.created` / `member_joined` /
/// `member_left` event with an id above H before any message written after it; seeing one drops the group and the
/// next question reloads it. The answer for event k is exact: some interval has j < k and (no l, or k < l).
struct GroupAudience {
    private struct Membership {
        /// The app's event head when the intervals were read.
        var loadedAt: Int64
        var intervals: [String: [(joined: Int64, left: Int64?)]]
    }

    /// By app id, then group id.
    private var groups: [String: [String: Membership]] = [:]
    private var loadedCount = 0
    /// Beyond this many cached groups the cache starts afresh (memory stays bounded; reloads are one query).
    private static let maxGroups = 2000

    static let membershipTypes: Set<String> = ["group.created", "group.member_joined", "group.member_left"]

    /// Notes an event read from the log: a membership change newer than a cached group drops that group.
    mutating func observe(_ event: LiveEvent, appID: String) {
        guard let groupID = event.groupID, Self.membershipTypes.contains(event.type),
            let cached = groups[appID]?[groupID], event.id > cached.loadedAt
        else { return }
        groups[appID]?[groupID] = nil
        loadedCount -= 1
    }

    /// Whether `userID` was a member of `groupID` when event `eventID` was written.
    mutating func wasMember(_ userID: String, of groupID: String, appID: String, at eventID: Int64, on db: PostgresConnection) throws
        -> Bool
    {
        let membership: Membership
        if let cached = groups[appID]?[groupID] {
            membership = cached
        } else {
            membership = try Self.load(appID: appID, groupID: groupID, on: db)
            if loadedCount >= Self.maxGroups {
                groups = [:]
                loadedCount = 0
            }
            groups[appID, default: [:]][groupID] = membership
            loadedCount += 1
        }
        return membership.intervals[userID]?.contains { $0.joined < eventID && ($0.left.map { eventID < $0 } ?? true) } ?? false
    }

    /// Forgets every group of `appID` (its feed closed).
    mutating func forget(appID: String) {
        loadedCount -= groups[appID]?.count ?? 0
        groups[appID] = nil
    }

    private static func load(appID: String, groupID: String, on db: PostgresConnection) throws -> Membership {
        let result = try db.query(
            """
            WITH h AS (SELECT head FROM event_heads WHERE app_id = \(appID))
            SELECT h.head, x.user_id, x.joined_event, x.left_event
            FROM h LEFT JOIN (
                SELECT user_id, joined_event, NULL::bigint AS left_event
                FROM group_members WHERE app_id = \(appID) AND group_id = \(groupID) AND joined_event IS NOT NULL
                UNION ALL
                SELECT user_id, joined_event, left_event FROM group_member_history
                WHERE app_id = \(appID) AND group_id = \(groupID) AND joined_event IS NOT NULL
            ) x ON true
            """)
        var membership = Membership(loadedAt: 0, intervals: [:])
        for row in result.rows {
            membership.loadedAt = try row[0].int64
            guard !row[1].isNull else { continue }
            membership.intervals[try row[1].string, default: []].append(
                (try row[2].int64, row[3].isNull ? nil : try row[3].int64))
        }
        return membership
    }
}
