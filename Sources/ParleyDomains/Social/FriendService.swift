import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The friend rules (docs/social.md#friends): friend lists and friend applications. Each change runs in one transaction
/// that checks, writes and appends its events last (docs/events.md#the-event-object).
///
/// Changes that can add entries lock the users rows of both people in `user_id` order first
/// (``UserStore/fetchMany(appID:userIDs:forUpdate:on:)``), so concurrent adds and accepts between the same two users
/// run one after the other: they never pass the 3000 limit and never race on the pair's rows (crossed accepts end as
/// one mutual friendship).
///
/// A value made per request; it owns nothing mutable. Transaction bodies are re-runnable (the pool retries them on
/// serialization failures and deadlocks), so they compute everything they return from what they read.
struct FriendService: DomainService {
    /// The request's connection (its worker thread's): reads run on it and transactions open on it.
    let db: PostgresConnection
    let appID: String
    /// Server-clock ms of the request.
    let now: Int64

    /// What a direct add, an application or an accept asks for the caller's entry; nil = absent (a new entry takes
    /// `""` / `{}`, a repeated application keeps the value it had).
    struct EntryRequest: Sendable {
        var wording: String?
        var alias: String?
        var attributes: JSONObject?
    }

    // MARK: - Direct add

    /// `POST …/friends`: adds `friendID` to `owner`'s list and, unless it is there, `owner` to the friend's list (empty
    /// alias and attributes). Errors in this order: yourself (422), an unknown user (404), an existing friend (409),
    /// the friend's blacklist (403), a full list.
    func add(owner: String, friendID: String, _ entry: EntryRequest) throws -> Friend {
        if owner == friendID { throw Self.cannotFriendSelf() }
        return try db.transaction { db in
            let users = try lockPair(owner, friendID, on: db)
            guard let friend = users[friendID] else { throw UserService.notFound(friendID) }
            if try !FriendStore.present(appID: appID, owner: owner, friendIDs: [friendID], on: db).isEmpty {
                throw APIError(.alreadyFriends, "user \(friendID) is already a friend of \(owner)")
            }
            try checkNotBlocked(applicant: owner, by: friendID, on: db)
            let reverseExists = try !FriendStore.present(appID: appID, owner: friendID, friendIDs: [owner], on: db).isEmpty
            try checkRoom(for: reverseExists ? [owner] : [owner, friendID], on: db)
            let wording = entry.wording ?? ""
            let alias = entry.alias ?? ""
            let attributes = entry.attributes ?? JSONObject()
            try FriendStore.insert(
                appID: appID, owner: owner, friendID: friendID, alias: alias, attributes: attributes, wording: wording, now: now, on: db)
            if !reverseExists {
                try FriendStore.insert(
                    appID: appID, owner: friendID, friendID: owner, alias: "", attributes: JSONObject(), wording: wording, now: now, on: db)
            }
            try EventLog.append([added(owner, friendID, via: "direct")], appID: appID, now: now, on: db)
            return Friend(
                userID: friendID, name: friend.name, avatarURL: friend.avatarURL, alias: alias, attributes: attributes, wording: wording,
                createdAt: now, updatedAt: now)
        }
    }

    // MARK: - Applications

    /// `POST …/friend_applications`: a new waiting application (`created` true), or the waiting one `from` → `to`
    /// updated by a repeated send. An overdue waiting one is expired first (with its event), then replaced.
    func apply(from: String, to: String, _ entry: EntryRequest, push: JSONValue?, expirySeconds: Int64) throws
        -> (application: FriendApplication, created: Bool)
    {
        if from == to { throw Self.cannotFriendSelf() }
        return try db.transaction { db in
            try lockPair(from, to, on: db)
            if try !FriendStore.present(appID: appID, owner: from, friendIDs: [to], on: db).isEmpty {
                throw APIError(.alreadyFriends, "user \(to) is already a friend of \(from)")
            }
            try checkNotBlocked(applicant: from, by: to, on: db)
            var events: [NewEvent] = []
            if let expired = try FriendApplicationStore.expireOverdue(appID: appID, from: from, to: to, now: now, on: db) {
                events.append(expired.event("friend.application_updated"))
            }
            let result: (FriendApplication, Bool)
            if var existing = try FriendApplicationStore.waiting(appID: appID, from: from, to: to, on: db) {
                existing.wording = entry.wording ?? existing.wording
                existing.alias = entry.alias ?? existing.alias
                existing.attributes = entry.attributes ?? existing.attributes
                existing.updatedAt = now
                try FriendApplicationStore.saveResend(appID: appID, existing, push: push, on: db)
                // The application exists already: its change is an update, not a second creation.
                events.append(existing.event("friend.application_updated"))
                result = (existing, false)
            } else {
                let application = FriendApplication(
                    applicationID: IdentifierKind.generateSortableID(prefix: "fa", timestampMs: now), from: from, to: to,
                    wording: entry.wording ?? "", alias: entry.alias ?? "", attributes: entry.attributes ?? JSONObject(),
                    state: .waiting, createdAt: now, updatedAt: now, expiresAt: now + expirySeconds * 1000)
                try FriendApplicationStore.insert(appID: appID, application, push: push, on: db)
                events.append(application.event("friend.application_created"))
                result = (application, true)
            }
            try EventLog.append(events, appID: appID, now: now, on: db)
            return result
        }
    }

    /// `POST …/friend_applications/{id}/accept` by `owner` (the application's `to`): both become friends of each
    /// other; the acceptor's entry takes `entry`, the applicant's the alias and attributes of its application.
    /// Returns the acceptor's entry.
    func accept(owner: String, applicationID: String, _ entry: EntryRequest, push: JSONValue?) throws -> Friend {
        try db.transaction { db in
            try requireOwner(owner, on: db)
            guard let found = try FriendApplicationStore.fetch(appID: appID, applicationID: applicationID, on: db), found.to == owner else {
                throw Self.applicationNotFound(applicationID)
            }
            try lockPair(found.to, found.from, mustExist: false, on: db)
            // Re-read under the row lock: a concurrent answer or expiry may have changed it.
            guard var application = try FriendApplicationStore.fetch(appID: appID, applicationID: applicationID, forUpdate: true, on: db)
            else { throw Self.applicationNotFound(applicationID) }
            try checkWaiting(application)
            let acceptorHas = try !FriendStore.present(appID: appID, owner: owner, friendIDs: [application.from], on: db).isEmpty
            let applicantHas = try !FriendStore.present(appID: appID, owner: application.from, friendIDs: [owner], on: db).isEmpty
            try checkRoom(for: (acceptorHas ? [] : [owner]) + (applicantHas ? [] : [application.from]), on: db)
            try FriendStore.insert(
                appID: appID, owner: owner, friendID: application.from, alias: entry.alias ?? "",
                attributes: entry.attributes ?? JSONObject(), wording: application.wording, now: now, on: db)
            try FriendStore.insert(
                appID: appID, owner: application.from, friendID: owner, alias: application.alias, attributes: application.attributes,
                wording: application.wording, now: now, on: db)
            application.state = .accepted
            application.updatedAt = now
            try FriendApplicationStore.saveAnswer(appID: appID, application, push: push, on: db)
            var events = [application.event("friend.application_updated")]
            // Already mutual friends (a crossed application was accepted first): nothing was added.
            if !acceptorHas || !applicantHas { events.append(added(owner, application.from, via: "application")) }
            guard let friend = try FriendStore.fetch(appID: appID, owner: owner, friendID: application.from, on: db) else {
                throw APIError.internalError
            }
            try EventLog.append(events, appID: appID, now: now, on: db)
            return friend
        }
    }

    /// `POST …/friend_applications/{id}/reject` by `owner` (the application's `to`).
    func reject(owner: String, applicationID: String, push: JSONValue?) throws -> FriendApplication {
        try db.transaction { db in
            try requireOwner(owner, on: db)
            guard var application = try FriendApplicationStore.fetch(appID: appID, applicationID: applicationID, forUpdate: true, on: db),
                application.to == owner
            else { throw Self.applicationNotFound(applicationID) }
            try checkWaiting(application)
            application.state = .rejected
            application.updatedAt = now
            try FriendApplicationStore.saveAnswer(appID: appID, application, push: push, on: db)
            try EventLog.append([application.event("friend.application_updated")], appID: appID, now: now, on: db)
            return application
        }
    }

    /// A page of `userID`'s applications, each as read now (see ``FriendApplicationStore/list``).
    func applications(
        of userID: String, direction: FriendApplication.Direction, state: FriendApplication.State?,
        after: (createdAt: Int64, applicationID: String)?, limit: Int, on db: PostgresConnection
    ) throws -> [FriendApplication] {
        try requireOwner(userID, on: db)
        return try FriendApplicationStore.list(
            appID: appID, userID: userID, direction: direction, state: state, now: now, after: after, limit: limit, on: db
        ).map { $0.asOf(now) }
    }

    // MARK: - The list

    /// A page of `owner`'s list (see ``FriendStore/list``).
    func list(
        owner: String, keywords: [String], matchAlias: Bool, after: (createdAt: Int64, userID: String)?, limit: Int,
        on db: PostgresConnection
    ) throws -> [Friend] {
        try requireOwner(owner, on: db)
        return try FriendStore.list(
            appID: appID, owner: owner, keywords: keywords, matchAlias: matchAlias, after: after, limit: limit, on: db)
    }

    /// `owner`'s entry for `friendID` (404 `not_friends` when absent or the friend is soft-deleted).
    func get(owner: String, friendID: String, on db: PostgresConnection) throws -> Friend {
        try requireOwner(owner, on: db)
        guard let friend = try FriendStore.fetch(appID: appID, owner: owner, friendID: friendID, visibleOnly: true, on: db) else {
            throw Self.notFriends(friendID)
        }
        return friend
    }

    /// `PATCH …/friends/{friend_id}`: a new alias and/or attributes merged in (`""` removes a key). Writes
    /// `friend.updated` to the owner only when something changed.
    func update(owner: String, friendID: String, alias: String?, attributes: JSONObject?) throws -> Friend {
        try db.transaction { db in
            try requireOwner(owner, on: db)
            guard var friend = try FriendStore.fetch(appID: appID, owner: owner, friendID: friendID, on: db) else {
                throw Self.notFriends(friendID)
            }
            let before = friend
            if let alias { friend.alias = alias }
            if let attributes { friend.attributes = FriendAttributes.merged(friend.attributes, attributes) }
            guard friend != before else { return friend }
            friend.updatedAt = now
            try FriendStore.save(appID: appID, owner: owner, friend: friend, on: db)
            var data = JSONObjectWriter()
            data["user_id"] = owner
            data.raw("friend", friend.json)
            try EventLog.append(
                [NewEvent(type: "friend.updated", data: data.finish(), audience: [owner], orderKey: owner)], appID: appID, now: now, on: db)
            return friend
        }
    }

    /// The outcome of one delete item.
    enum DeleteOutcome: Sendable, Equatable {
        case deleted
        case isSelf
        case notFriends
    }

    /// Removes `friendIDs` (distinct, valid ids) from `owner`'s list, and for `both` `owner` from theirs. One
    /// `friend.deleted` per removed friend, to the owner (and the friend for `both`).
    package func delete(owner: String, friendIDs: [String], mode: Friend.DeleteMode) throws -> [String: DeleteOutcome] {
        try db.transaction { db in
            try requireOwner(owner, on: db)
            let others = friendIDs.filter { $0 != owner }
            let removed = try FriendStore.delete(appID: appID, owner: owner, friendIDs: others, on: db)
            let ordered = others.filter(removed.contains)
            if mode == .both { try FriendStore.deleteReverse(appID: appID, friendID: owner, userIDs: ordered, on: db) }
            var outcomes: [String: DeleteOutcome] = [:]
            for id in friendIDs { outcomes[id] = id == owner ? .isSelf : removed.contains(id) ? .deleted : .notFriends }
            let events = ordered.map { friendID -> NewEvent in
                var data = JSONObjectWriter(capacity: 64 + owner.utf8.count + friendID.utf8.count)
                data["user_id"] = owner
                data["friend_id"] = friendID
                data["mode"] = mode.rawValue
                return NewEvent(
                    type: "friend.deleted", data: data.finish(), audience: mode == .both ? [owner, friendID] : [owner], orderKey: owner)
            }
            try EventLog.append(events, appID: appID, now: now, on: db)
            return outcomes
        }
    }

    /// The relation of `owner` with each of `userIDs` (distinct, valid ids); nil for a user that does not exist or
    /// is soft-deleted.
    func check(owner: String, userIDs: [String], mode: Friend.DeleteMode, on db: PostgresConnection) throws -> [String: Friend.Relation?] {
        try requireOwner(owner, on: db)
        let live = try UserService.activeUserIDs(userIDs, appID: appID, on: db)
        let ownerHas = try FriendStore.present(appID: appID, owner: owner, friendIDs: userIDs, on: db)
        let otherHas = mode == .both ? try FriendStore.listing(appID: appID, friendID: owner, userIDs: userIDs, on: db) : []
        var relations: [String: Friend.Relation?] = [:]
        for id in userIDs {
            relations[id] =
                live.contains(id) ? Friend.Relation(mode: mode, ownerHas: ownerHas.contains(id), otherHas: otherHas.contains(id)) : nil
        }
        return relations
    }

    // MARK: - Helpers

    /// Locks the users rows of `owner` and `other` in `user_id` order and returns them by id. Both must exist and not
    /// be soft-deleted (404 `user_not_found`, the owner checked first); with `mustExist` false only the locks matter
    /// (an accept checked the acceptor already, and a soft-deleted applicant keeps its applications).
    @discardableResult
    private func lockPair(_ owner: String, _ other: String, mustExist: Bool = true, on db: PostgresConnection) throws -> [String: User] {
        var users: [String: User] = [:]
        for user in try UserStore.fetchMany(appID: appID, userIDs: [owner, other], forUpdate: true, on: db) { users[user.userID] = user }
        if mustExist, users[owner]?.isDeleted != false { throw UserService.notFound(owner) }
        if mustExist, users[other]?.isDeleted != false { throw UserService.notFound(other) }
        return users
    }

    /// The owner must exist and not be soft-deleted (404 `user_not_found`).
    private func requireOwner(_ owner: String, on db: PostgresConnection) throws {
        try UserService.requireActive(owner, appID: appID, on: db)
    }

    /// 403 `20007` when `applicant` is on `blocker`'s blacklist (always an error for friend requests,
    /// docs/social.md#blacklists).
    private func checkNotBlocked(applicant: String, by blocker: String, on db: PostgresConnection) throws {
        if try !BlacklistStore.present(appID: appID, owner: blocker, blockedIDs: [applicant], on: db).isEmpty {
            throw APIError(.blockedByRecipient, "user \(applicant) is on the blacklist of \(blocker)")
        }
    }

    /// 422 `6000801` when any of `owners` (each about to get one new entry) already has the most friends.
    private func checkRoom(for owners: [String], on db: PostgresConnection) throws {
        for owner in owners where try FriendStore.count(appID: appID, owner: owner, on: db) >= Friend.maxFriends {
            throw APIError(.friendLimit, "the friend list of \(owner) would exceed \(Friend.maxFriends) entries")
        }
    }

    /// Only a waiting application may be answered: an overdue or expired one → 409 `6000814`, any other state → 409
    /// `6000802`.
    private func checkWaiting(_ application: FriendApplication) throws {
        let state = application.asOf(now).state
        if state == .expired { throw APIError(.applicationExpired, "application \(application.applicationID) has expired") }
        if state != .waiting {
            throw APIError(.applicationNotWaiting, "application \(application.applicationID) is \(state.rawValue), not waiting")
        }
    }

    /// `friend.added` `{user_id, friend_id, via}` to both users, ordered by `user_id`.
    private func added(_ userID: String, _ friendID: String, via: String) -> NewEvent {
        var data = JSONObjectWriter(capacity: 80 + userID.utf8.count + friendID.utf8.count)
        data["user_id"] = userID
        data["friend_id"] = friendID
        data["via"] = via
        return NewEvent(type: "friend.added", data: data.finish(), audience: [userID, friendID], orderKey: userID)
    }

    static func cannotFriendSelf() -> APIError { APIError(.cannotFriendSelf, "a user cannot befriend itself") }

    static func notFriends(_ friendID: String) -> APIError { APIError(.notFriends, "user \(friendID) is not in the friend list") }

    static func applicationNotFound(_ id: String) -> APIError { APIError(.notFound, "friend application \(id) does not exist") }
}
