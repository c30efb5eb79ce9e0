import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The blacklist rules (docs/social.md#blacklists): each change runs in one transaction that checks the owner, changes
/// the list and writes its one `blacklist.added` / `blacklist.removed` event last (docs/events.md#the-event-object).
///
/// A value made per request; it owns nothing mutable. Transaction bodies are re-runnable (the pool retries them on
/// serialization failures), so they compute everything they return from what they read.
struct BlacklistService: DomainService {
    /// The request's connection (its worker thread's): reads run on it and transactions open on it.
    let db: PostgresConnection
    let appID: String
    /// Server-clock ms of the request.
    let now: Int64

    /// Most entries one list may hold (more: 422 `6000808`).
    static let maxEntries = 1000

    /// The outcome of one add item.
    enum AddOutcome: Sendable, Equatable {
        case added(createdAt: Int64)
        case alreadyBlacklisted
        case isSelf
        case limitReached
        case userNotFound
    }

    /// Adds `blockedIDs` (distinct, valid ids) to `owner`'s list, in order, up to the limit. The owner's users row
    /// is locked for the whole transaction, so concurrent adds to one list are serialised and never pass the limit.
    func add(owner: String, blockedIDs: [String]) throws -> [String: AddOutcome] {
        try db.transaction { db in
            try lockOwner(owner, on: db)
            let live = try UserService.activeUserIDs(blockedIDs, appID: appID, on: db)
            let present = try BlacklistStore.present(appID: appID, owner: owner, blockedIDs: blockedIDs, on: db)
            var count = try BlacklistStore.count(appID: appID, owner: owner, on: db)
            var outcomes: [String: AddOutcome] = [:]
            var added: [String] = []
            for id in blockedIDs {
                if id == owner {
                    outcomes[id] = .isSelf
                } else if !live.contains(id) {
                    outcomes[id] = .userNotFound
                } else if present.contains(id) {
                    outcomes[id] = .alreadyBlacklisted
                } else if count >= Self.maxEntries {
                    outcomes[id] = .limitReached
                } else {
                    count += 1
                    added.append(id)
                    outcomes[id] = .added(createdAt: now)
                }
            }
            try BlacklistStore.insert(appID: appID, owner: owner, blockedIDs: added, now: now, on: db)
            try EventLog.append(event("blacklist.added", owner: owner, userIDs: added), appID: appID, now: now, on: db)
            return outcomes
        }
    }

    /// Removes `blockedIDs` (distinct, valid ids) from `owner`'s list; returns the ids that were on it.
    func remove(owner: String, blockedIDs: [String]) throws -> Set<String> {
        try db.transaction { db in
            try lockOwner(owner, on: db)
            let removed = try BlacklistStore.delete(appID: appID, owner: owner, blockedIDs: blockedIDs, on: db)
            let ordered = blockedIDs.filter(removed.contains)
            try EventLog.append(event("blacklist.removed", owner: owner, userIDs: ordered), appID: appID, now: now, on: db)
            return removed
        }
    }

    /// A page of `owner`'s list after `after` (see ``BlacklistStore/list(appID:owner:after:limit:on:)``).
    func list(owner: String, after: (createdAt: Int64, userID: String)?, limit: Int, on db: PostgresConnection) throws
        -> [BlacklistStore.Entry]
    {
        try requireOwner(owner, on: db)
        return try BlacklistStore.list(appID: appID, owner: owner, after: after, limit: limit, on: db)
    }

    /// Whether `blockedID` (an existing, not soft-deleted user, else 404) is on `owner`'s list.
    func isBlocked(owner: String, blockedID: String, on db: PostgresConnection) throws -> Bool {
        try requireOwner(owner, on: db)
        try UserService.requireActive(blockedID, appID: appID, on: db)
        return try !BlacklistStore.present(appID: appID, owner: owner, blockedIDs: [blockedID], on: db).isEmpty
    }

    // MARK: - Helpers

    /// The owner must exist and not be soft-deleted (404 `user_not_found`); locks its row until the transaction ends.
    private func lockOwner(_ owner: String, on db: PostgresConnection) throws {
        try UserService.requireActive(owner, appID: appID, forUpdate: true, on: db)
    }

    private func requireOwner(_ owner: String, on db: PostgresConnection) throws {
        try UserService.requireActive(owner, appID: appID, on: db)
    }

    /// The one event of a request, `{user_id, user_ids}` to the owner only; none when no id changed.
    private func event(_ type: String, owner: String, userIDs: [String]) -> [NewEvent] {
        if userIDs.isEmpty { return [] }
        var data = JSONObjectWriter(capacity: 48 + userIDs.reduce(0) { $0 + $1.utf8.count + 3 })
        data["user_id"] = owner
        data["user_ids"] = userIDs
        return [NewEvent(type: type, data: data.finish(), audience: [owner], orderKey: owner)]
    }
}
