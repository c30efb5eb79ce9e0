import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The expiry of custom statuses (docs/users.md#presence): at `custom_status_expires_at` a custom status reverts to
/// `""` and `user.status_updated` is written to the user and its unexpired subscribers.
///
/// Reads already treat an overdue custom status as cleared (``UserStatus/asOf(_:)``); this timer makes the state and
/// its event durable. It owns nothing: each batch is one transaction that claims its rows atomically.
package enum CustomStatusExpiry {
    package static let kind = TimerKind.batchedExpiry(name: "custom_status_expiry") { db, now, limit in
        let expired = try PresenceStore.expireDueCustom(now: now, limit: limit, on: db)
        var events: [String: [NewEvent]] = [:]
        for (appID, claimed) in Dictionary(grouping: expired, by: \.appID) {
            let statuses = claimed.map(\.status).sorted {
                ($0.lastCustomStatusUpdatedAt, $0.userID) < ($1.lastCustomStatusUpdatedAt, $1.userID)
            }
            let subscribers = try PresenceStore.subscribers(appID: appID, targetIDs: statuses.map(\.userID), now: now, on: db)
            events[appID] = statuses.map { $0.event(subscribers: subscribers[$0.userID] ?? []) }
        }
        return (expired.count, events)
    }
}
