import ParleyAPI
import ParleyCore

/// A friend application (docs/social.md#friends) as stored: the public fields plus what the applicant asked
/// for its own entry (`alias`, `attributes`), applied when the application is accepted.
///
/// A value read from one `friend_applications` row; services change it under the row lock and save it.
struct FriendApplication: Sendable, Equatable {
    var applicationID: String
    /// The applicant.
    var from: String
    /// The respondent.
    var to: String
    var wording: String
    /// The applicant's alias and attributes for `to`; never rendered.
    var alias: String
    var attributes: JSONObject
    var state: State
    package var createdAt: Int64
    var updatedAt: Int64
    var expiresAt: Int64

    /// Application `state` (docs/api.md).
    enum State: String, CaseIterable, Sendable {
        case waiting, accepted, rejected, expired
    }

    /// Which applications of a user a list shows (docs/social.md#friends).
    enum Direction: String, CaseIterable, Sendable {
        case received, sent, all
    }

    /// Whether a waiting application has passed its expiry at `now` (it then reads as `expired`, whether or not the
    /// expiry timer has made that durable yet).
    func isOverdue(now: Int64) -> Bool { state == .waiting && expiresAt <= now }

    /// The application as it reads at `now`: an overdue waiting one is `expired`, updated at its expiry time (the
    /// same values the expiry timer stores, so a read before and after the timer agree).
    package func asOf(_ now: Int64) -> FriendApplication {
        guard isOverdue(now: now) else { return self }
        var copy = self
        copy.state = .expired
        copy.updatedAt = expiresAt
        return copy
    }

    /// The FriendApplication JSON object; `direction` († list only) is `sent`/`received` as seen by `viewer`.
    func json(viewer: String? = nil) -> [UInt8] {
        var o = JSONObjectWriter(capacity: 224 + from.utf8.count + to.utf8.count + wording.utf8.count)
        o["application_id"] = applicationID
        o["from"] = from
        o["to"] = to
        o["wording"] = wording
        o["state"] = state.rawValue
        o["created_at"] = createdAt
        o["updated_at"] = updatedAt
        o["expires_at"] = expiresAt
        if let viewer { o["direction"] = viewer == from ? "sent" : "received" }
        return o.finish()
    }

    /// The `{application}` event data of `friend.application_created` / `friend.application_updated`
    /// (docs/events.md#the-event-object): to `from` and `to`, ordered by `from`.
    func event(_ type: String) -> NewEvent {
        var data = JSONObjectWriter()
        data.raw("application", json())
        return NewEvent(type: type, data: data.finish(), audience: [from, to], orderKey: from)
    }
}
