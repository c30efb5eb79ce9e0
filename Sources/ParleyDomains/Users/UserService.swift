import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The user rules (docs/users.md): every user change runs in one transaction that locks the user's row, saves it and
/// writes the change's events last (docs/events.md#the-event-object).
///
/// A value made per request; it owns nothing mutable. Transaction bodies are re-runnable (the pool retries them on
/// serialization failures), so they compute everything they return from what they read.
package struct UserService: DomainService {
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

    /// Longest mute or ban, in seconds (one year; -1 is permanent).
    static let maxRestrictionSeconds: Int64 = 31_536_000

    /// The `platform` enum, in ZIM number order.
    static let platforms = ["win", "ios", "android", "macos", "linux", "web", "miniprogram", "ipados", "ohos", "unknown"]

    // MARK: - Reads

    /// A user that is not soft-deleted (or any user with `includeDeleted`), else 404 `user_not_found`.
    func get(_ userID: String, includeDeleted: Bool = false, on db: PostgresConnection) throws -> User {
        guard let user = try UserStore.fetch(appID: appID, userID: userID, on: db), includeDeleted || !user.isDeleted else {
            throw Self.notFound(userID)
        }
        return user
    }

    // MARK: - Create and import

    /// Creates one user; 409 `user_already_exists` when the id is taken, also by a soft-deleted user.
    package func create(_ userID: String, profile: UserProfile) throws -> User {
        let user = User(userID: userID, profile: profile, now: now)
        try db.transaction { db in
            guard try UserStore.insert(appID: appID, user: user, on: db) else {
                throw APIError(.userAlreadyExists, "user \(userID) already exists")
            }
            try EventLog.append([created(user)], appID: appID, now: now, on: db)
        }
        return user
    }

    /// One valid item of an import.
    struct ImportItem: Sendable {
        var index: Int
        var userID: String
        var profile: UserProfile
    }

    /// The outcome of one import item.
    enum ImportOutcome: Sendable {
        case created(User)
        case updated(User)
        case exists
    }

    /// Creates (or with `upsert` updates) the items in one transaction: set-based statements, one event per
    /// created or changed user, in input order. Items must have distinct user ids.
    func importUsers(_ items: [ImportItem], upsert: Bool) throws -> [String: ImportOutcome] {
        if items.isEmpty { return [:] }
        return try db.transaction { db in
            let ids = items.map(\.userID)
            var existing: [String: User] = [:]
            for user in try UserStore.fetchMany(appID: appID, userIDs: ids, forUpdate: upsert, on: db) {
                existing[user.userID] = user
            }
            let fresh = items.filter { existing[$0.userID] == nil }.map { User(userID: $0.userID, profile: $0.profile, now: now) }
            let inserted = try UserStore.insertMany(appID: appID, users: fresh, on: db)
            let raced = fresh.map(\.userID).filter { !inserted.contains($0) }
            // Created by a concurrent request since the first read: they exist now.
            for user in try UserStore.fetchMany(appID: appID, userIDs: raced, forUpdate: upsert, on: db) {
                existing[user.userID] = user
            }
            var outcomes: [String: ImportOutcome] = [:]
            var changedUsers: [User] = []
            var events: [NewEvent] = []
            for item in items {
                if inserted.contains(item.userID) {
                    let user = User(userID: item.userID, profile: item.profile, now: now)
                    outcomes[item.userID] = .created(user)
                    events.append(created(user))
                } else if var user = existing[item.userID], upsert {
                    let changed = item.profile.apply(to: &user)
                    if !changed.isEmpty {
                        user.updatedAt = now
                        changedUsers.append(user)
                        events.append(updated(user, changed: changed))
                    }
                    outcomes[item.userID] = .updated(user)
                } else {
                    outcomes[item.userID] = .exists
                }
            }
            try UserStore.saveMany(appID: appID, users: changedUsers, on: db)
            try EventLog.append(events, appID: appID, now: now, on: db)
            return outcomes
        }
    }

    // MARK: - Changes

    /// Which users a change may address.
    enum Target {
        /// Not soft-deleted.
        case live
        /// Soft-deleted only (restore).
        case softDeleted
    }

    /// Locks the user, lets `change` modify it and return the names of the changed User fields, saves it when
    /// anything differs, and writes `user.updated` when a listed field changed (then `extra` events); `record`, given
    /// the user before and after, names the moderation-log entry to write in the same transaction, if any. Returns
    /// the user as saved.
    private func change(
        _ userID: String, target: Target = .live, extra: (User) -> [NewEvent] = { _ in [] },
        record: (_ before: User, _ after: User) -> ModerationLogStore.Entry? = { _, _ in nil },
        _ change: (inout User) throws -> [String]
    ) throws -> User {
        try db.transaction { db in
            guard var user = try UserStore.fetch(appID: appID, userID: userID, forUpdate: true, on: db),
                user.isDeleted == (target == .softDeleted)
            else { throw Self.notFound(userID) }
            let original = user
            let changed = try change(&user)
            var events: [NewEvent] = []
            if !changed.isEmpty {
                user.updatedAt = now
                events.append(updated(user, changed: changed))
            }
            if user != original { try UserStore.save(appID: appID, user: user, on: db) }
            if let entry = record(original, user) { try ModerationLogStore.record(entry, appID: appID, now: now, on: db) }
            events += extra(user)
            try EventLog.append(events, appID: appID, now: now, on: db)
            return user
        }
    }

    /// `PATCH /v1/users/{user_id}`.
    func update(_ userID: String, profile: UserProfile) throws -> User {
        try change(userID) { user in profile.apply(to: &user) }
    }

    /// ``create(_:profile:)`` and ``update(_:profile:)`` with the profile screened by the app's `user_profile`
    /// blocklists (docs/blocklists.md#profiles): `name` and `extended_data` masked, or the write refused (422
    /// `content_blocked`) by `block` and `shadow_block`; a hit on the written user goes to the hooks after the commit.
    func write(_ userID: String, profile: UserProfile, creating: Bool, blocklists: BlocklistCache) throws -> User {
        let (fields, check) = try blocklists.screen(
            [profile.name, profile.extendedData], scope: .userProfile, appID: appID, userID: userID, now: now, on: db
        ) { screened in
            var attempted: JSONObject = ["user_id": .string(userID)]
            if let name = screened[0] { attempted["name"] = .string(name) }
            if let extendedData = screened[1] { attempted["extended_data"] = .string(extendedData) }
            return .user(userID: userID, snapshot: attempted)
        }
        var screened = profile
        (screened.name, screened.extendedData) = (fields[0], fields[1])
        let user = creating ? try create(userID, profile: screened) : try update(userID, profile: screened)
        if let check, case .object(let snapshot)? = try? JSONValue.parse(user.json(.app)),
            let hit = check.hit(appID: appID, userID: userID, target: .user(userID: userID, snapshot: snapshot), at: now)
        {
            blocklists.report(hit)
        }
        return user
    }

    /// Global mute: `durationSeconds` -1 (permanent), 0 (unmute) or 1…31536000. Logged (docs/moderation.md#the-moderation-log)
    /// as `logAs` (a report action, automatic escalation) or else as the user route's `mute`, or `unmute` when it
    /// lifts a mute in force.
    func mute(_ userID: String, durationSeconds: Int64, logAs: ModerationLogStore.Entry? = nil) throws -> User {
        let until = restrictionEnd(durationSeconds)
        let record = { (before: User, _: User) -> ModerationLogStore.Entry? in
            if let logAs { return logAs }
            if durationSeconds == 0 {
                guard self.restricted(before.mutedUntil) else { return nil }
                return ModerationLogStore.Entry(action: "unmute", targetType: "user", targetID: userID, moderator: nil, source: .api)
            }
            return ModerationLogStore.Entry(
                action: "mute", targetType: "user", targetID: userID, params: ["duration_s": .int(durationSeconds)], moderator: nil, source: .api)
        }
        return try change(userID, record: record) { user in
            guard user.mutedUntil != until else { return [] }
            user.mutedUntil = until
            return ["muted_until"]
        }
    }

    /// Ban: `durationSeconds` -1 (permanent) or 1…31536000. The user's streams are told with `user.kicked`. Logged as
    /// `logAs` or else as the user route's `ban`.
    func ban(_ userID: String, durationSeconds: Int64, reason: String?, logAs: ModerationLogStore.Entry? = nil) throws -> User {
        let until = restrictionEnd(durationSeconds)
        let kicked = { (user: User) in [self.kicked(user.userID, platforms: Self.platforms, revokeTokens: false)] }
        var params: JSONObject = ["duration_s": .int(durationSeconds)]
        if let reason { params["reason"] = .string(reason) }
        let entry =
            logAs ?? ModerationLogStore.Entry(action: "ban", targetType: "user", targetID: userID, params: params, moderator: nil, source: .api)
        return try change(userID, extra: kicked, record: { _, _ in entry }) { user in
            // The reason is not a User field: it is stored but never listed in `changed`, and alone it does not
            // make an event.
            if let reason { user.banReason = reason }
            guard user.bannedUntil != until else { return [] }
            user.bannedUntil = until
            return ["banned_until"]
        }
    }

    /// Lifts a ban (a request that changes nothing writes no event); logged as `unban` when a ban was in force.
    func unban(_ userID: String) throws -> User {
        let record = { (before: User, _: User) -> ModerationLogStore.Entry? in
            self.restricted(before.bannedUntil)
                ? ModerationLogStore.Entry(action: "unban", targetType: "user", targetID: userID, moderator: nil, source: .api) : nil
        }
        return try change(userID, record: record) { user in
            guard user.bannedUntil != 0 else { return [] }
            user.bannedUntil = 0
            user.banReason = ""
            return ["banned_until"]
        }
    }

    /// Brings a soft-deleted user back; 404 unless the user is soft-deleted.
    func restore(_ userID: String) throws -> User {
        try change(userID, target: .softDeleted) { user in
            user.deletedAt = nil
            return ["deleted_at"]
        }
    }

    /// Kick: with `revokeTokens` every token minted before it stops verifying; the live hub closes the user's
    /// streams on `platforms` when it delivers `user.kicked`.
    func kick(_ userID: String, platforms: [String], revokeTokens: Bool) throws {
        try db.transaction { db in
            guard var user = try UserStore.fetch(appID: appID, userID: userID, forUpdate: true, on: db), !user.isDeleted else {
                throw Self.notFound(userID)
            }
            if revokeTokens {
                user.tokenGeneration += 1
                try UserStore.save(appID: appID, user: user, on: db)
            }
            try ModerationLogStore.record(
                ModerationLogStore.Entry(
                    action: "kick", targetType: "user", targetID: userID,
                    params: ["platforms": .array(platforms.map(JSONValue.string)), "revoke_tokens": .bool(revokeTokens)], moderator: nil,
                    source: .api), appID: appID, now: now, on: db)
            try EventLog.append([kicked(userID, platforms: platforms, revokeTokens: revokeTokens)], appID: appID, now: now, on: db)
        }
    }

    package enum DeleteMode: String, CaseIterable, Sendable {
        case soft, hard
    }

    /// Soft delete (deactivate; tokens are revoked) or hard delete (the row goes; the id may be created again).
    /// Soft delete addresses live users only; hard delete also purges a soft-deleted user, after
    /// `removeFromGroups` (``UserHooks``) took it out of its groups.
    package func delete(_ userID: String, mode: DeleteMode, removeFromGroups: UserHooks.RemoveFromGroups) throws {
        try db.transaction { db in
            var groupEvents: [NewEvent] = []
            switch mode {
            case .soft:
                guard var user = try UserStore.fetch(appID: appID, userID: userID, forUpdate: true, on: db), !user.isDeleted else {
                    throw Self.notFound(userID)
                }
                user.deletedAt = now
                user.updatedAt = now
                // Tokens minted before the deletion stay revoked after a restore.
                user.tokenGeneration += 1
                try UserStore.save(appID: appID, user: user, on: db)
            case .hard:
                // The user leaves its groups first (owner continuity, dismissal of emptied groups;
                // docs/groups.md#lifecycle-and-membership).
                groupEvents = try removeFromGroups(db, appID, userID, now)
                guard try UserStore.delete(appID: appID, userID: userID, on: db) else { throw Self.notFound(userID) }
            }
            try ModerationLogStore.record(
                ModerationLogStore.Entry(
                    action: "delete_user", targetType: "user", targetID: userID, params: ["mode": .string(mode.rawValue)], moderator: nil,
                    source: .api), appID: appID, now: now, on: db)
            var data = JSONObjectWriter(capacity: 64)
            data["user_id"] = userID
            data["mode"] = mode.rawValue
            try EventLog.append(
                groupEvents + [NewEvent(type: "user.deleted", data: data.finish(), orderKey: userID)], appID: appID, now: now, on: db)
        }
    }

    // MARK: - Tokens

    /// Mints a user token valid for `ttlSeconds`; 404 for unknown or soft-deleted users, 403 while banned.
    func mintToken(_ userID: String, ttlSeconds: Int64, secret: [UInt8], on db: PostgresConnection) throws -> (token: String, expiresAt: Int64) {
        let user = try get(userID, on: db)
        if user.isBanned(now: now) { throw APIError(.userBanned, "user \(userID) is banned") }
        // JWT times are whole seconds; `expires_at` is the exact ms at which the token stops verifying.
        let issuedAt = now / 1000
        let expiresAt = issuedAt + ttlSeconds
        let token = UserToken.mint(
            appID: appID, userID: userID, issuedAt: issuedAt, expiresAt: expiresAt, generation: Int(user.tokenGeneration),
            secret: secret)
        return (token, expiresAt * 1000)
    }

    // MARK: - Helpers

    /// Whether a `*_until` value is a mute or ban in force now.
    private func restricted(_ until: Int64) -> Bool { until == -1 || until > now }

    /// The `*_until` value of a mute or ban lasting `durationSeconds` from now (-1 permanent, 0 none).
    private func restrictionEnd(_ durationSeconds: Int64) -> Int64 {
        durationSeconds <= 0 ? durationSeconds : now + durationSeconds * 1000
    }

    static func notFound(_ userID: String) -> APIError { APIError(.userNotFound, "user \(userID) does not exist") }

    private func created(_ user: User) -> NewEvent {
        var data = JSONObjectWriter()
        data.raw("user", user.json(.app))
        return NewEvent(type: "user.created", data: data.finish(), orderKey: user.userID)
    }

    private func updated(_ user: User, changed: [String]) -> NewEvent {
        var data = JSONObjectWriter()
        data.raw("user", user.json(.app))
        data["changed"] = changed
        return NewEvent(type: "user.updated", data: data.finish(), audience: [user.userID], orderKey: user.userID)
    }

    private func kicked(_ userID: String, platforms: [String], revokeTokens: Bool) -> NewEvent {
        var data = JSONObjectWriter(capacity: 128)
        data["user_id"] = userID
        data["platforms"] = platforms
        data["revoke_tokens"] = revokeTokens
        return NewEvent(type: "user.kicked", data: data.finish(), audience: [userID], orderKey: userID)
    }
}

// MARK: - Reads

extension UserService {
    typealias ListState = UserStore.ListState

    /// Up to `limit` users of the app in `state`, by `user_id`, strictly after `after`, matching `query`.
    func list(state: ListState, query: String?, after: String?, limit: Int) throws -> [User] {
        try UserStore.list(appID: appID, state: state, query: query, after: after, now: now, limit: limit, on: db)
    }

    /// The users among `userIDs` that exist and are not deleted, in no particular order.
    func liveUsers(_ userIDs: [String]) throws -> [User] {
        try UserStore.fetchMany(appID: appID, userIDs: userIDs, on: db).filter { !$0.isDeleted }
    }

    /// The ids among `userIDs` of users that exist and are not deleted (the many-user form of ``requireActive(_:appID:forUpdate:on:)``).
    package static func activeUserIDs(_ userIDs: [String], appID: String, on db: PostgresConnection) throws -> Set<String> {
        Set(try UserStore.fetchMany(appID: appID, userIDs: userIDs, on: db).filter { !$0.isDeleted }.map(\.userID))
    }

    /// 404 `user_not_found` unless the user exists (deleted users included, as a stream may be opened for them).
    package func requireExists(_ userID: String) throws {
        guard try UserStore.fetch(appID: appID, userID: userID, on: db) != nil else { throw Self.notFound(userID) }
    }

    /// 404 `user_not_found` unless the user exists and is not soft-deleted: reads of a user's own data (its
    /// conversations, unread count, history) are hidden with the user (docs/users.md#creating-and-changing-users).
    package func requireActive(_ userID: String) throws {
        try Self.requireActive(userID, appID: appID, on: db)
    }

    /// The user `userID` if it exists and is not soft-deleted, else 404 `user_not_found`: a deleted user cannot act
    /// or be acted on, and its data is hidden with it. `forUpdate` locks the user's row (a change that must not race
    /// the user's deletion).
    @discardableResult
    package static func requireActive(_ userID: String, appID: String, forUpdate: Bool = false, on db: PostgresConnection) throws -> User {
        guard let user = try UserStore.fetch(appID: appID, userID: userID, forUpdate: forUpdate, on: db), !user.isDeleted else {
            throw notFound(userID)
        }
        return user
    }
}
