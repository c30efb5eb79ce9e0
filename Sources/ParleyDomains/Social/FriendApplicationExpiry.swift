import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The expiry of waiting friend applications (docs/social.md#friends): `application_expiry_s` after creation an
/// application becomes `expired` and `friend.application_updated` is written to `from` and `to`.
///
/// Reads already treat an overdue waiting application as expired (``FriendApplication/asOf(_:)``); this timer makes
/// the state and its event durable. It owns nothing: each batch is one transaction that claims its rows atomically.
package enum FriendApplicationExpiry {
    package static let kind = TimerKind.batchedExpiry(name: "friend_application_expiry") { db, now, limit in
        let expired = try FriendApplicationStore.expireDue(now: now, limit: limit, on: db)
        let byApp = Dictionary(grouping: expired, by: \.appID).mapValues { claimed in
            claimed.map(\.application).sorted { ($0.expiresAt, $0.applicationID) < ($1.expiresAt, $1.applicationID) }
                .map { $0.event("friend.application_updated") }
        }
        return (expired.count, byApp)
    }
}
