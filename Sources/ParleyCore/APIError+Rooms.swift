extension APIError {
    /// 404 `room_not_found` (docs/rooms.md).
    package static func roomNotFound(_ roomID: String) -> APIError { APIError(.roomNotFound, "room \(roomID) does not exist") }
    /// 403 `not_in_room`: the acting or target user is not in the room.
    package static func notInRoom(_ userID: String, _ roomID: String) -> APIError {
        APIError(.notInRoom, "user \(userID) is not in room \(roomID)")
    }
}
