import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The recent cache of a room (`GET /v1/rooms/{room_id}/messages/recent`, docs/messages.md#history): the messages sent
/// with `cache: true`, kept by ``MessageWrite`` in `room_recent_messages` as the app reads them.
enum RoomRecent {
    /// The cache holds about this many messages per room; a read returns at most this many.
    static let capacity = 50

    /// The room's cached messages, newest first, as `viewer` sees them: a user sees no `suppressed` and the `push` of
    /// its own messages only (the Message visibility rule of ``Message/isVisible(to:)``).
    static func read(appID: String, roomID: String, viewer: MessageViewer, on db: PostgresConnection) throws -> [[UInt8]] {
        let rows = try db.query(
            """
            SELECT message FROM room_recent_messages WHERE app_id = \(appID) AND room_id = \(roomID)
            ORDER BY position DESC LIMIT \(capacity)
            """)
        return try rows.decode(PostgresTextBytes.self).map { try view($0.bytes, viewer) }
    }

    /// The app's JSON of a cached message as `viewer` sees it (the same rule as the user view of events).
    static func view(_ json: [UInt8], _ viewer: MessageViewer) throws -> [UInt8] {
        guard case .user(let userID) = viewer else { return json }
        return try EventUserView.message(json, for: userID)
    }

    /// Replaces the cached copy of a stored room message that changed (revoked, edited, deleted for everyone), if the
    /// cache holds it.
    static func refresh(appID: String, message: Message, on db: PostgresConnection) throws {
        guard message.conversationType == .room else { return }
        try db.query(
            """
            UPDATE room_recent_messages SET message = \(String(decoding: message.json(.app), as: UTF8.self))
            WHERE app_id = \(appID) AND room_id = \(message.to) AND (message::json ->> 'message_id') = \(message.messageID)
            """)
    }
}
