import ParleyAPI
import ParleyCore
import ParleyPostgres

/// What the message domain reads of rooms (docs/rooms.md, docs/messages.md#history). Messages sit below the Rooms
/// domain (rooms do not write messages today, but groups and rooms are peers above messages), so they read the `rooms`
/// and `room_members` rows of Migrations/0015 directly, as they do for groups (``MessageStore/groupAccess``).
enum RoomAccess {
    /// The room's `first_seq` (the room seq head when the room was last created: messages up to it belong to an
    /// earlier room with the same id) and whether `userID` is a current member (false without a user); nil when
    /// there is no such room.
    static func fetch(appID: String, roomID: String, userID: String?, on db: PostgresConnection) throws
        -> (firstSeq: Int64, member: Bool)?
    {
        try db.query(
            """
            SELECT r.first_seq,
                   EXISTS (SELECT 1 FROM room_members m WHERE m.app_id = r.app_id AND m.room_id = r.room_id AND m.user_id = \(userID))
            FROM rooms r WHERE r.app_id = \(appID) AND r.room_id = \(roomID)
            """
        ).decodeFirst((Int64, Bool).self).map { (firstSeq: $0.0, member: $0.1) }
    }

    /// The `…/rooms/{room_id}/messages…` reads: 404 `room_not_found` for an unknown room, 403 `not_in_room` for a user
    /// token of a non-member. Returns the room's `first_seq`.
    static func requireRead(appID: String, roomID: String, viewer userID: String?, on db: PostgresConnection) throws -> Int64 {
        guard let access = try fetch(appID: appID, roomID: roomID, userID: userID, on: db) else { throw notFound(roomID) }
        if let userID, !access.member { throw notInRoom(userID, roomID) }
        return access.firstSeq
    }

    static func notFound(_ roomID: String) -> APIError { APIError(.roomNotFound, "room \(roomID) does not exist") }

    static func notInRoom(_ userID: String, _ roomID: String) -> APIError {
        APIError(.notInRoom, "user \(userID) is not in room \(roomID)")
    }
}

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
