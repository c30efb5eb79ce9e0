import ParleyPostgres

/// The expiry of custom statuses (API.md §5): at `custom_status_expires_at` a custom status reverts to `""` and
/// `user.status_updated` is written to the user and its unexpired subscribers.
///
/// Reads already treat an overdue custom status as cleared (``UserStatus/asOf(_:)``); this timer makes the state and
/// its event durable. It owns nothing: each batch is one transaction that claims its rows atomically.
enum CustomStatusExpiry {
    /// Statuses reverted per transaction, so one sweep never holds a huge batch of row locks.
    static let batchSize = 500

    static let kind = TimerKind(name: "custom_status_expiry") { services, now in
        var fired = 0
        while true {
            let count = try services.pool.transaction { db in
                let expired = try PresenceStore.expireDueCustom(now: now, limit: batchSize, on: db)
                let byApp = Dictionary(grouping: expired, by: \.appID)
                // Every read happens before the first append: appending locks the app's event head and must be the
                // last work of the transaction.
                var events: [(appID: String, events: [NewEvent])] = []
                for appID in byApp.keys.sorted() {
                    let statuses = byApp[appID, default: []].map(\.status).sorted {
                        ($0.lastCustomStatusUpdatedAt, $0.userID) < ($1.lastCustomStatusUpdatedAt, $1.userID)
                    }
                    let subscribers = try PresenceStore.subscribers(
                        appID: appID, targetIDs: statuses.map(\.userID), now: now, on: db)
                    events.append((appID, statuses.map { $0.event(subscribers: subscribers[$0.userID] ?? []) }))
                }
                // Apps in a stable order, so concurrent sweeps take the apps' event-head locks in the same order.
                for (appID, appEvents) in events {
                    try EventLog.append(appEvents, appID: appID, now: now, on: db)
                }
                return expired.count
            }
            fired += count
            if count < batchSize { return fired }
        }
    }
}
