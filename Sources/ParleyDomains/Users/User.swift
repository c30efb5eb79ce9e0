import ParleyAPI
import ParleyCore

/// A user of an app as stored (docs/users.md#the-user-object), with its JSON views.
///
/// A value type read from and written back to one `users` row; services change it under the row lock and save it.
package struct User: Sendable, Equatable {
    var userID: String
    package var name: String
    var avatarURL: String
    var extendedData: String
    package var createdAt: Int64
    var updatedAt: Int64
    /// Global mute: 0 = not set, -1 = permanent, else ms.
    var mutedUntil: Int64
    /// 0 = not set, -1 = permanent, else ms.
    package var bannedUntil: Int64
    /// Kept for operators; not part of the User resource.
    var banReason: String
    /// Non-nil while soft-deleted.
    package var deletedAt: Int64?
    /// Tokens carrying an older `gen` are revoked (kick, soft delete).
    package var tokenGeneration: Int64

    /// A new user created at `now`.
    ///
    /// The token generation starts at the creation time rather than 0, so tokens of an earlier user with the same
    /// id (hard delete, then create again) carry an older generation and never verify for the new user.
    init(userID: String, profile: UserProfile, now: Int64) {
        self.userID = userID
        name = profile.name ?? ""
        avatarURL = profile.avatarURL ?? ""
        extendedData = profile.extendedData ?? ""
        createdAt = now
        updatedAt = now
        mutedUntil = 0
        bannedUntil = 0
        banReason = ""
        deletedAt = nil
        tokenGeneration = now
    }

    init(
        userID: String, name: String, avatarURL: String, extendedData: String, createdAt: Int64, updatedAt: Int64,
        mutedUntil: Int64, bannedUntil: Int64, banReason: String, deletedAt: Int64?, tokenGeneration: Int64
    ) {
        self.userID = userID
        self.name = name
        self.avatarURL = avatarURL
        self.extendedData = extendedData
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.mutedUntil = mutedUntil
        self.bannedUntil = bannedUntil
        self.banReason = banReason
        self.deletedAt = deletedAt
        self.tokenGeneration = tokenGeneration
    }

    package var isDeleted: Bool { deletedAt != nil }

    /// Whether the user is banned at `now` (server clock ms).
    func isBanned(now: Int64) -> Bool { UserStore.isActive(until: bannedUntil, now: now) }

    /// Whether the user is globally muted at `now` (server clock ms).
    func isMuted(now: Int64) -> Bool { UserStore.isActive(until: mutedUntil, now: now) }

    /// Which fields a reader may see (docs/users.md#the-user-object).
    enum View: Sendable {
        /// The app key: every field, `deleted_at` included.
        case app
        /// A user token reading its own user: every field but `deleted_at`.
        case owner
        /// A user token reading another user: `user_id`, `name`, `avatar_url`, `extended_data`, `created_at`.
        case other
    }

    /// The User JSON object for `view`.
    func json(_ view: View = .app) -> [UInt8] {
        // Static keys straight into one writer: GET /v1/users/{id} is the hottest read (bench/users.sh).
        var w = JSONWriter(capacity: 200 + name.utf8.count + avatarURL.utf8.count + extendedData.utf8.count)
        w.object { w in
            w.key(static: "user_id")
            w.writeString(userID)
            w.key(static: "name")
            w.writeString(name)
            w.key(static: "avatar_url")
            w.writeString(avatarURL)
            w.key(static: "extended_data")
            w.writeString(extendedData)
            w.key(static: "created_at")
            w.writeInt(createdAt)
            if view != .other {
                w.key(static: "updated_at")
                w.writeInt(updatedAt)
                w.key(static: "muted_until")
                w.writeInt(mutedUntil)
                w.key(static: "banned_until")
                w.writeInt(bannedUntil)
            }
            if view == .app {
                w.key(static: "deleted_at")
                if let deletedAt { w.writeInt(deletedAt) } else { w.writeNull() }
            }
        }
        return w.bytes
    }
}

/// The request-settable profile fields of a user (`name`, `avatar_url`, `extended_data`); nil = absent.
package struct UserProfile: Sendable, Equatable {
    package var name: String?
    var avatarURL: String?
    var extendedData: String?

    static let maxNameBytes = 256
    static let maxAvatarURLBytes = 500
    static let maxExtendedDataBytes = 4096

    /// Reads and length-checks the profile fields of `body`, recording errors in it.
    static func read(from body: inout BodyReader) -> UserProfile {
        UserProfile(
            name: body.string("name", maxBytes: maxNameBytes),
            avatarURL: body.string("avatar_url", maxBytes: maxAvatarURLBytes),
            extendedData: body.string("extended_data", maxBytes: maxExtendedDataBytes))
    }

    /// Applies the present fields to `user` and returns the names of those whose value changed.
    func apply(to user: inout User) -> [String] {
        var changed: [String] = []
        if let name, name != user.name {
            user.name = name
            changed.append("name")
        }
        if let avatarURL, avatarURL != user.avatarURL {
            user.avatarURL = avatarURL
            changed.append("avatar_url")
        }
        if let extendedData, extendedData != user.extendedData {
            user.extendedData = extendedData
            changed.append("extended_data")
        }
        return changed
    }
}
