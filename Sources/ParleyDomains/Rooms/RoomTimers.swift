import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The two room timers on the server clock (docs/rooms.md#lifecycle: delayed destruction, and the app setting
/// `room_offline_leave_s`; docs/operations.md#test-clock).
///
/// They own nothing: each claims its rooms under their row locks (`SKIP LOCKED` for destruction; the offline
/// removal re-checks its member under the room lock), so a background sweep, a test-clock advance and other nodes
/// never fire the same item twice.
package enum RoomTimers {
    /// Destroys rooms `destroy_delay_s` after they emptied (an enter in between cleared `destroy_at`).
    package static let destruction = TimerKind.batchedExpiry(name: "room_destruction", batchSize: 100) { db, now, limit in
        let due = try RoomStore.lockDueForDestruction(now: now, limit: limit, on: db)
        var events: [String: [NewEvent]] = [:]
        for (appID, room) in due {
            events[appID, default: []] += try RoomService(db: db, appID: appID, now: now).destroyIfDue(room, on: db)
        }
        return (due.count, events)
    }

    /// Removes members who had no presence-counting stream for `room_offline_leave_s`, one member per transaction
    /// (each removal writes its own `room.member_left`, and its membership ends at that event).
    package static let offlineRemoval = TimerKind(name: "room_offline_removal") { services, now in
        var fired = 0
        while true {
            let due = try services.pool.withConnection { db in try RoomStore.offlineMembers(now: now, limit: 200, on: db) }
            for member in due {
                fired += try services.pool.transaction { db in
                    let events = try RoomService(db: db, appID: member.appID, now: now).removeOffline(
                        member.roomID, userID: member.userID, on: db)
                    try EventLog.append(events, appID: member.appID, now: now, on: db)
                    return events.isEmpty ? 0 : 1
                }
            }
            if due.count < 200 { return fired }
        }
    }
}
