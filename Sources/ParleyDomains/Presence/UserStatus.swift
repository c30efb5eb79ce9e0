import ParleyAPI
import ParleyCore

/// A user's presence as stored (the UserStatus object, docs/users.md#presence), with its JSON view and its
/// `user.status_updated` event.
///
/// A value type read from one `user_statuses` row (or the defaults when the user has none yet).
package struct UserStatus: Sendable, Equatable {
    var userID: String
    /// `online`, `offline` or `logout`; only the live user streams change it.
    package var onlineStatus: String = "offline"
    /// Platforms with an open presence-counting stream, as stored by the streams.
    package var onlinePlatforms: [String] = []
    var lastOnlineStatusUpdatedAt: Int64 = 0
    /// `""` when unset.
    var customStatus: String = ""
    /// 0 when unset, else the ms at which the custom status reverts to `""`.
    var customStatusExpiresAt: Int64 = 0
    var lastCustomStatusUpdatedAt: Int64 = 0

    /// Most bytes of a custom status.
    static let maxCustomStatusBytes = 64

    /// The status as read at `now`: a custom status whose expiry has passed reads as cleared at its expiry, exactly
    /// as ``CustomStatusExpiry`` will store it, so reads never depend on the timer having fired.
    package func asOf(_ now: Int64) -> UserStatus {
        guard !customStatus.isEmpty, customStatusExpiresAt <= now else { return self }
        var status = self
        status.customStatus = ""
        status.lastCustomStatusUpdatedAt = customStatusExpiresAt
        status.customStatusExpiresAt = 0
        return status
    }

    /// The UserStatus JSON object; `online_platforms` sorted by ZIM number (the order of ``UserService/platforms``).
    var json: [UInt8] {
        var o = JSONObjectWriter(capacity: 256 + userID.utf8.count + customStatus.utf8.count)
        o["user_id"] = userID
        o["online_status"] = onlineStatus
        o["online_platforms"] = UserService.platforms.filter(onlinePlatforms.contains)
        o["custom_status"] = customStatus
        o["custom_status_expires_at"] = customStatusExpiresAt
        o["last_updated_at"] = max(lastOnlineStatusUpdatedAt, lastCustomStatusUpdatedAt)
        o["last_online_status_updated_at"] = lastOnlineStatusUpdatedAt
        o["last_custom_status_updated_at"] = lastCustomStatusUpdatedAt
        return o.finish()
    }

    /// `user.status_updated` `{status}` to the user and `subscribers` (its unexpired subscribers,
    /// docs/events.md#the-event-object).
    func event(subscribers: [String]) -> NewEvent {
        var data = JSONObjectWriter(capacity: 300 + userID.utf8.count + customStatus.utf8.count)
        data.raw("status", json)
        return NewEvent(type: "user.status_updated", data: data.finish(), audience: [userID] + subscribers, orderKey: userID)
    }
}
