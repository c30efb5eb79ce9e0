import ParleyAPI
import ParleyCore

/// A call invitation (docs/calls.md#the-call-object): signalling refereed by the server, no media.
package struct Call: Sendable {
    enum Mode: String, CaseIterable, Sendable {
        case general, advanced
    }

    enum EndReason: String, Sendable {
        /// General: no invitee is pending any more.
        case resolved
        /// Advanced: an accepted user ended it.
        case ended
        /// Advanced: nobody accepted and nobody pending.
        case empty
    }

    var callID: String
    var mode: Mode
    var callerID: String
    var ended: Bool
    var endReason: EndReason?
    var extendedData: String
    var timeoutS: Int64
    var notReceivedCheck: Bool
    var createdAt: Int64
    var endedAt: Int64?
    /// In `position` order: the caller first, then by first invitation or join.
    var users: [CallUser]

    /// Users pending or accepted: the ones a change is announced to, and what the 50-user cap of advanced calls counts.
    var activeUserIDs: [String] { users.filter { $0.state.isPending || $0.state == .accepted }.map(\.userID) }

    func user(_ userID: String) -> CallUser? { users.first { $0.userID == userID } }

    func json() -> [UInt8] {
        var o = JSONObjectWriter(capacity: 256 + extendedData.utf8.count + users.count * 200)
        o["call_id"] = callID
        o["mode"] = mode.rawValue
        o["caller_id"] = callerID
        o["state"] = ended ? "ended" : "started"
        o["end_reason"] = endReason?.rawValue
        o["extended_data"] = extendedData
        o["timeout_s"] = timeoutS
        o["created_at"] = createdAt
        o["ended_at"] = endedAt
        o.write("users") { w in
            w.beginArray()
            for user in users { w.writeRaw(user.json()) }
            w.endArray()
        }
        return o.finish()
    }
}

/// One user of a call (the Call object's `users`, docs/calls.md#the-call-object).
package struct CallUser: Sendable {
    enum State: String, Sendable {
        case inviting, accepted, rejected, cancelled, received, timeout, quit, ended
        case notYetReceived = "not_yet_received"

        /// Invited and not answered yet: `inviting`, `received` or `not_yet_received`.
        var isPending: Bool { self == .inviting || self == .received || self == .notYetReceived }
    }

    var userID: String
    var position: Int
    var state: State
    var inviterID: String?
    var extendedData: String
    var invitedAt: Int64?
    var updatedAt: Int64
    var acceptedAt: Int64?
    var quitAt: Int64?

    func json() -> [UInt8] {
        var o = JSONObjectWriter(capacity: 200 + extendedData.utf8.count)
        o["user_id"] = userID
        o["state"] = state.rawValue
        o["inviter_id"] = inviterID
        o["extended_data"] = extendedData
        o["invited_at"] = invitedAt
        o["updated_at"] = updatedAt
        o["accepted_at"] = acceptedAt
        o["quit_at"] = quitAt
        return o.finish()
    }
}

/// The limits of calls: invitees per request, users per advanced call, `timeout_s`, the not-received check and
/// `extended_data`.
enum CallLimits {
    static let maxInviteesPerRequest = 9
    static let maxTimeoutS: Int64 = 600
    static let defaultTimeoutS: Int64 = 90
    static let maxExtendedDataBytes = 1024
    /// Users pending or accepted in an advanced call.
    static let maxActiveUsers = 50
    /// The not-received check fires this long after `invited_at`.
    static let notReceivedCheckMillis: Int64 = 5000
}
