import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The expiry of waiting group applications (docs/groups.md#applications): `application_expiry_s` after creation an
/// application becomes `expired` and `group.application_updated` is written to its audience.
///
/// Reads already treat an overdue waiting application as expired (``GroupApplication/asOf(_:)``); this timer makes
/// the state and its event durable. It owns nothing: each batch is one transaction that claims its rows atomically.
package enum GroupApplicationExpiry {
    package static let kind = TimerKind.batchedExpiry(name: "group_application_expiry") { db, now, limit in
        let expired = try GroupApplicationStore.expireDue(now: now, limit: limit, on: db)
        var events: [String: [NewEvent]] = [:]
        for (appID, claimed) in Dictionary(grouping: expired, by: \.appID) {
            let applications = claimed.map(\.application).sorted {
                ($0.expiresAt, $0.applicationID) < ($1.expiresAt, $1.applicationID)
            }
            events[appID] = try applications.map { application in
                let managers =
                    application.type == .join
                    ? try GroupStore.memberIDs(
                        appID: appID, groupID: application.groupID, roles: [GroupRole.owner, GroupRole.admin], on: db) : []
                return application.event("group.application_updated", managers: managers)
            }
        }
        return (expired.count, events)
    }
}
