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
