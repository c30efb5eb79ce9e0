import ParleyCore

/// A scheduled message (docs/scheduled-messages.md): a send request accepted with `send_at`, sent at that time.
struct ScheduledMessage: Sendable {
    /// The states a caller sees; `sending` (claimed by a node, not yet answered) reads as `scheduled` but can no longer
    /// be edited or cancelled.
    enum State: String, CaseIterable, Sendable {
        case scheduled, sending, sent, failed, cancelled
    }

    var scheduledID: String
    /// The sender (`from`).
    var userID: String
    /// Scheduled with the sender's user token (sent with it), else by the app.
    var asUser: Bool
    /// A `POST /v1/messages/batch` request.
    var batch: Bool
    /// The send request as it will be sent (without `send_at`, with its `client_msg_id`).
    var request: JSONObject
    var sendAt: Int64
    var state: State
    var createdAt: Int64
    var updatedAt: Int64
    var sentAt: Int64?
    var messageID: String?
    var seq: Int64?
    var results: JSONValue?
    var problem: JSONValue?

    /// The ScheduledMessage object of the API.
    func json() -> [UInt8] {
        var o = JSONObjectWriter(capacity: 256)
        o["scheduled_id"] = scheduledID
        o["user_id"] = userID
        o["batch"] = batch
        o["send_at"] = sendAt
        o["state"] = (state == .sending ? State.scheduled : state).rawValue
        o["request"] = JSONValue.object(request)
        o["created_at"] = createdAt
        o["updated_at"] = updatedAt
        o["sent_at"] = sentAt
        o["message_id"] = messageID
        o["seq"] = seq
        o["results"] = results
        o["problem"] = problem
        return o.finish()
    }
}
