import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The presence rules (docs/users.md#presence) except the online/offline part: custom statuses and status
/// subscriptions.
///
/// A value made per request; it owns nothing mutable. Transaction bodies are re-runnable (the pool retries them on
/// serialization failures), so they compute everything they return from what they read.
///
/// Online status: the live user streams (docs/events.md#live-streams-server-sent-events) will own `online_status`,
/// `online_platforms` and `last_online_status_updated_at` of `user_statuses`. Their open/close path plugs in here as
/// one more write method next to ``setCustomStatus(_:customStatus:expiresInSeconds:)``: update those columns in one
/// transaction, then append ``statusUpdatedEvent(_:on:)`` last, so subscribers hear online changes exactly like custom
/// ones.
package struct PresenceService: DomainService {
    /// The request's connection (its worker thread's): reads run on it and transactions open on it.
    let db: PostgresConnection
    let appID: String
    /// Server-clock ms of the request.
    let now: Int64

    package init(db: PostgresConnection, appID: String, now: Int64) {
        self.db = db
        self.appID = appID
        self.now = now
    }

    /// Most unexpired subscriptions one subscriber may hold (more: 422 `7000103`).
    static let maxSubscriptions = 1000
    /// `expires_in_s` of a custom status (docs/users.md#presence).
    static let customStatusExpiry: ClosedRange<Int64> = 1...86400
    /// `duration_min` of a subscription (docs/users.md#presence).
    static let subscriptionDuration: ClosedRange<Int64> = 1...43200

    /// The outcome of one subscribe item.
    enum SubscribeOutcome: Sendable, Equatable {
        case subscribed(expiresAt: Int64, status: UserStatus)
        case isSelf
        case userNotFound
        case limitReached
    }

    // MARK: - Statuses

    /// The status of `userID` at `now` (404 `user_not_found` when unknown or soft-deleted).
    package func status(_ userID: String, on db: PostgresConnection) throws -> UserStatus {
        guard let status = try PresenceStore.statuses(appID: appID, userIDs: [userID], on: db)[userID] else {
            throw UserService.notFound(userID)
        }
        return status.asOf(now)
    }

    /// The statuses at `now` of the users among `userIDs` that exist and are not soft-deleted.
    func statuses(_ userIDs: [String], on db: PostgresConnection) throws -> [String: UserStatus] {
        try PresenceStore.statuses(appID: appID, userIDs: userIDs, on: db).mapValues { $0.asOf(now) }
    }

    /// Sets (or with `""` clears) `userID`'s custom status and writes `user.status_updated` to the user and its
    /// unexpired subscribers. The user's row is locked so a concurrent hard delete cannot break the insert.
    func setCustomStatus(_ userID: String, customStatus: String, expiresInSeconds: Int64) throws -> UserStatus {
        try db.transaction { db in
            try UserService.requireActive(userID, appID: appID, forUpdate: true, on: db)
            let expiresAt = customStatus.isEmpty ? 0 : now + expiresInSeconds * 1000
            let status = try PresenceStore.setCustom(
                appID: appID, userID: userID, customStatus: customStatus, expiresAt: expiresAt, now: now, on: db
            ).asOf(now)
            try EventLog.append([try statusUpdatedEvent(status, on: db)], appID: appID, now: now, on: db)
            return status
        }
    }

    /// `user.status_updated` for `status`, addressed to the user and its subscribers unexpired at `now`.
    package func statusUpdatedEvent(_ status: UserStatus, on db: PostgresConnection) throws -> NewEvent {
        let subscribers = try PresenceStore.subscribers(appID: appID, targetIDs: [status.userID], now: now, on: db)
        return status.event(subscribers: subscribers[status.userID] ?? [])
    }

    // MARK: - Subscriptions

    /// Subscribes `subscriberID` to `targetIDs` (distinct, valid ids) for `durationMinutes`, in order, up to the
    /// limit; a re-subscribe replaces `expires_at` and does not count again. The subscriber's users row is locked
    /// for the whole transaction, so concurrent subscribes of one user are serialised and never pass the limit.
    func subscribe(_ subscriberID: String, targetIDs: [String], durationMinutes: Int64) throws -> [String: SubscribeOutcome] {
        try db.transaction { db in
            try lockSubscriber(subscriberID, on: db)
            let live = try PresenceStore.statuses(appID: appID, userIDs: targetIDs, on: db)
            let held = try PresenceStore.subscribed(
                appID: appID, subscriberID: subscriberID, targetIDs: targetIDs, now: now, on: db)
            var count = try PresenceStore.count(appID: appID, subscriberID: subscriberID, now: now, on: db)
            let expiresAt = now + durationMinutes * 60_000
            var outcomes: [String: SubscribeOutcome] = [:]
            var accepted: [String] = []
            for id in targetIDs {
                if id == subscriberID {
                    outcomes[id] = .isSelf
                } else if let status = live[id] {
                    if !held.contains(id) {
                        guard count < Self.maxSubscriptions else {
                            outcomes[id] = .limitReached
                            continue
                        }
                        count += 1
                    }
                    accepted.append(id)
                    outcomes[id] = .subscribed(expiresAt: expiresAt, status: status.asOf(now))
                } else {
                    outcomes[id] = .userNotFound
                }
            }
            try PresenceStore.upsert(
                appID: appID, subscriberID: subscriberID, targetIDs: accepted, expiresAt: expiresAt, now: now, on: db)
            return outcomes
        }
    }

    /// Removes `subscriberID`'s subscriptions to `targetIDs`; returns the targets it was (unexpired) subscribed to.
    func unsubscribe(_ subscriberID: String, targetIDs: [String]) throws -> Set<String> {
        try db.transaction { db in
            try lockSubscriber(subscriberID, on: db)
            return try PresenceStore.delete(appID: appID, subscriberID: subscriberID, targetIDs: targetIDs, now: now, on: db)
        }
    }

    /// A page of `subscriberID`'s unexpired subscriptions with the targets' statuses at `now`.
    func subscriptions(
        _ subscriberID: String, targetIDs: [String]?, afterTargetID: String?, limit: Int, on db: PostgresConnection
    ) throws -> [(subscription: PresenceStore.Subscription, status: UserStatus)] {
        try UserService.requireActive(subscriberID, appID: appID, on: db)
        return try PresenceStore.list(
            appID: appID, subscriberID: subscriberID, targetIDs: targetIDs, afterTargetID: afterTargetID, limit: limit,
            now: now, on: db
        ).map { ($0.subscription, $0.status.asOf(now)) }
    }

    /// The subscriber must exist and not be soft-deleted (404 `user_not_found`); locks its row until the
    /// transaction ends.
    private func lockSubscriber(_ subscriberID: String, on db: PostgresConnection) throws {
        try UserService.requireActive(subscriberID, appID: appID, forUpdate: true, on: db)
    }
}
