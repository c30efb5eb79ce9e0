import ParleyPostgres

/// The expiry of waiting friend applications (API.md §7): `application_expiry_s` after creation an application
/// becomes `expired` and `friend.application_updated` is written to `from` and `to`.
///
/// Reads already treat an overdue waiting application as expired (``FriendApplication/asOf(_:)``); this timer makes
/// the state and its event durable. It owns nothing: each batch is one transaction that claims its rows atomically.
enum FriendApplicationExpiry {
    /// Applications expired per transaction, so one sweep never holds a huge batch of row locks.
    static let batchSize = 500

    static let kind = TimerKind(name: "friend_application_expiry") { services, now in
        var fired = 0
        while true {
            let count = try services.pool.transaction { db in
                let expired = try FriendApplicationStore.expireDue(now: now, limit: batchSize, on: db)
                let byApp = Dictionary(grouping: expired, by: \.appID)
                // Apps in a stable order, so concurrent sweeps take the apps' event-head locks in the same order.
                for appID in byApp.keys.sorted() {
                    let applications = byApp[appID, default: []].map(\.application).sorted {
                        ($0.expiresAt, $0.applicationID) < ($1.expiresAt, $1.applicationID)
                    }
                    try EventLog.append(applications.map { $0.event("friend.application_updated") }, appID: appID, now: now, on: db)
                }
                return expired.count
            }
            fired += count
            if count < batchSize { return fired }
        }
    }
}
