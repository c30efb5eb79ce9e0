import ParleyCore
import ParleyPostgres

/// Events that are not state changes (docs/conversations.md#typing-and-other-signals): sent to the user streams of
/// their recipients that are open at that moment, on every node, and nowhere else — not written to the event log, so
/// never replayed, polled, sent to webhooks or pushed, and their SSE frames carry no `id:` (nothing to resume from).
///
/// They travel as PostgreSQL notifications on ``channel`` (which every node's live hub listens to, its own included):
/// `NOTIFY` needs no table and is dropped when no session listens. A notification payload holds at most 8000 bytes,
/// so the recipients are split over as many notifications as it takes, each carrying the frame.
package enum EphemeralEvents {
    package static let channel = "parley_ephemeral"
    /// The largest payload written (PostgreSQL refuses 8000 bytes and more).
    static let maxPayloadBytes = 7_900

    /// One ephemeral event as a hub receives it: its app, the users whose streams get it, its type and SSE frame.
    package struct Received: Sendable {
        package let appID: String
        package let userIDs: Set<String>
        package let type: String
        package let frame: [UInt8]
    }

    /// Sends `type` with `data` (the Event `data` JSON, the same for every recipient) to the open user streams of
    /// `userIDs`; nothing when there are none.
    package static func publish(
        appID: String, type: String, data: [UInt8], to userIDs: [String], now: Int64, on db: PostgresConnection
    ) throws {
        if userIDs.isEmpty { return }
        var event = JSONWriter(capacity: 96 + data.count)
        event.beginObject()
        event.key(static: "type")
        event.writeString(type)
        event.key(static: "app_id")
        event.writeString(appID)
        event.key(static: "created_at")
        event.writeInt(now)
        event.key(static: "data")
        var frame = Array("event: \(type)\ndata: ".utf8)
        frame += event.bytes
        frame += data
        frame += Array("}\n\n".utf8)
        // Payload: "<app> <type>\n<user> <user> …\n<frame>" (ids have no spaces or line breaks; the frame comes last).
        let head = "\(appID) \(type)\n"
        let room = maxPayloadBytes - head.utf8.count - frame.count - 1
        var payloads: [String] = []
        var users = ""
        for userID in userIDs {
            if !users.isEmpty, users.utf8.count + 1 + userID.utf8.count > room {
                payloads.append(head + users + "\n" + String(decoding: frame, as: UTF8.self))
                users = ""
            }
            users += users.isEmpty ? userID : " " + userID
        }
        payloads.append(head + users + "\n" + String(decoding: frame, as: UTF8.self))
        try db.query("SELECT pg_notify(\(channel), p) FROM unnest(\(payloads)::text[]) AS p", prepared: false)
    }

    /// A payload written by ``publish(appID:type:data:to:now:on:)``; nil when malformed.
    package static func parse(_ payload: String) -> Received? {
        let parts = payload.split(separator: "\n", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        let head = parts[0].split(separator: " ")
        guard head.count == 2 else { return nil }
        return Received(
            appID: String(head[0]), userIDs: Set(parts[1].split(separator: " ").map(String.init)), type: String(head[1]),
            frame: Array(parts[2].utf8))
    }
}
