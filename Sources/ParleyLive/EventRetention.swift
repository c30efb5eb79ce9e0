import ParleyAPI
import ParleyCore
import ParleyDomains
import ParleyPostgres

/// Trims each app's event log to `event_retention_hours` (docs/events.md#the-event-object): deletes the events created
/// before the horizon and moves the trim point `T` to the newest deleted id. Then it deletes the past room memberships
/// that ended at or before `T` (`room_member_history.left_event` ≤ T): such an interval can never contain a retained
/// event (k > T ≥ left_event), so neither `parley_room_member_at` nor the hub's cache needs it any more.
///
/// Ids grow with `created_at` (both are taken in the writer's transaction under the event-head lock), so the
/// trimmable events are a leading run of the log after `T`: each pass reads at most `batchSize` of them per app
/// by primary key, cheap when nothing is due. Concurrent passes are harmless: the delete is idempotent and `T`
/// only moves forward.
package enum EventRetention {
    static let batchSize = 2_000

    package static let kind = TimerKind(name: "event_retention", everyMillis: 60_000) { services, now in
        let apps = try services.pool.withConnection { db in
            try db.query(
                """
                SELECT h.app_id, h.trim_point, COALESCE((a.settings->>'event_retention_hours')::bigint, 72)
                FROM event_heads h JOIN apps a USING (app_id)
                ORDER BY h.app_id
                """, prepared: false
            ).decode((String, Int64, Int64).self).map { (appID: $0.0, trimPoint: $0.1, hours: $0.2) }
        }
        var trimmed = 0
        for app in apps {
            trimmed += try trim(appID: app.appID, after: app.trimPoint, before: now - app.hours * 3_600_000, services: services)
        }
        return trimmed
    }

    /// Trims one app whose trim point was `after`: its events created before `before`, then the room memberships that
    /// ended at or before the new trim point. Returns how many events were deleted.
    static func trim(appID: String, after: Int64, before: Int64, services: Services) throws -> Int {
        var trimPoint = after
        var trimmed = 0
        while true {
            let (newPoint, count) = try trimBatch(appID: appID, after: trimPoint, before: before, services: services)
            trimmed += count
            trimPoint = max(trimPoint, newPoint)
            if count < batchSize { break }
        }
        // Intervals only come to end at or before T when T moves (leaves are stamped above the head); what a pass
        // cut short leaves is deleted on the next move.
        if trimmed > 0 {
            while try trimRoomHistoryBatch(appID: appID, upTo: trimPoint, services: services) == batchSize {}
        }
        return trimmed
    }

    /// Deletes up to `batchSize` past room memberships of `appID` that ended at or before `upTo`, found through
    /// `room_member_history_left`; returns how many.
    ///
    /// group_member_history is not trimmed: the same rule holds for it, but it has no index on `left_event`, so the
    /// delete would read every past membership of the app on each pass.
    private static func trimRoomHistoryBatch(appID: String, upTo: Int64, services: Services) throws -> Int {
        try services.pool.withConnection { db in
            let row = try db.query(
                """
                WITH gone AS (
                    DELETE FROM room_member_history
                    WHERE ctid = ANY(ARRAY(
                            SELECT ctid FROM room_member_history
                            WHERE app_id = \(appID) AND left_event <= \(upTo) LIMIT \(batchSize)))
                      AND app_id = \(appID) AND left_event <= \(upTo)
                    RETURNING 1
                )
                SELECT count(*) FROM gone
                """
            ).decodeFirst(Int64.self)!
            return Int(row)
        }
    }

    /// Deletes the leading run (≤ `batchSize`) of events after `after` created before `before`; returns the new
    /// trim point and how many were deleted.
    private static func trimBatch(appID: String, after: Int64, before: Int64, services: Services) throws -> (Int64, Int) {
        try services.pool.transaction { db in
            let row = try db.query(
                """
                WITH batch AS (
                    SELECT id, created_at FROM events WHERE app_id = \(appID) AND id > \(after) ORDER BY id LIMIT \(batchSize)
                ), run AS (
                    SELECT id FROM batch
                    WHERE id < COALESCE((SELECT min(id) FROM batch WHERE created_at >= \(before)), 9223372036854775807)
                ), gone AS (
                    DELETE FROM events e USING run WHERE e.app_id = \(appID) AND e.id = run.id RETURNING e.id
                ), moved AS (
                    UPDATE event_heads SET trim_point = (SELECT max(id) FROM gone)
                    WHERE app_id = \(appID) AND (SELECT max(id) FROM gone) > trim_point
                )
                SELECT COALESCE((SELECT max(id) FROM gone), \(after)), (SELECT count(*) FROM gone)
                """
            ).decodeFirst((Int64, Int64).self)!
            return (row.0, Int(row.1))
        }
    }
}
