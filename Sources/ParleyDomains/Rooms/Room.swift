import ParleyAPI
import ParleyCore

/// A room (docs/rooms.md): transient, explicit membership, no roles.
package struct Room: Sendable {
    var roomID: String
    var name: String
    var memberCount: Int64
    var destroyDelayS: Int64
    /// Null when the app created it without `creator`.
    var createdBy: String?
    var createdAt: Int64
    /// When the member count last dropped to 0 (null while members > 0, or if nobody ever entered).
    var emptySince: Int64?
    var destroyAt: Int64?
    /// The room seq head when this room was created: older seqs belong to an earlier room with the same id.
    var firstSeq: Int64

    func json() -> [UInt8] {
        var o = JSONObjectWriter(capacity: 256 + name.utf8.count)
        o["room_id"] = roomID
        o["name"] = name
        o["member_count"] = memberCount
        o["destroy_delay_s"] = destroyDelayS
        o["created_by"] = createdBy
        o["created_at"] = createdAt
        o["empty_since"] = emptySince
        o["destroy_at"] = destroyAt
        return o.finish()
    }
}

/// A member as the member list and `room.member_joined` show it.
struct RoomMember: Sendable {
    var userID: String
    var name: String
    var avatarURL: String
    var extendedData: String
    var enteredAt: Int64

    func json() -> [UInt8] {
        var o = JSONObjectWriter(capacity: 160 + name.utf8.count + extendedData.utf8.count)
        o["user_id"] = userID
        o["name"] = name
        o["avatar_url"] = avatarURL
        o["extended_data"] = extendedData
        o["entered_at"] = enteredAt
        return o.finish()
    }
}

/// A room attribute (docs/rooms.md#room-attributes).
struct RoomAttribute: Sendable, Equatable {
    var key: String
    var value: String
    /// Null: owned by the app.
    var ownerID: String?
    var deleteAfterOwnerLeft: Bool
    var updatedAt: Int64

    func json() -> [UInt8] {
        var o = JSONObjectWriter(capacity: 96 + key.utf8.count + value.utf8.count)
        o["key"] = key
        o["value"] = value
        o["owner_id"] = ownerID
        o["delete_after_owner_left"] = deleteAfterOwnerLeft
        o["updated_at"] = updatedAt
        return o.finish()
    }
}

/// The limits of rooms (docs/rooms.md): names, rooms per app and per user, attributes and member attributes.
enum RoomLimits {
    static let maxRoomsPerApp: Int64 = 10_000
    static let maxNameBytes = 64
    static let maxDestroyDelayS: Int64 = 10_800
    static let maxExtendedDataBytes = 1024
    static let maxKick = 100
    static let maxMemberQuery = 10

    static let maxAttributes = 20
    static let maxAttributeKeyBytes = 16
    static let maxAttributeValueBytes = 1024
    static let maxAttributesTotalBytes = 5120

    static let maxMemberAttributeUsers = 100
    static let maxMemberAttributePairs = 30
    static let maxMemberAttributeKeyBytes = 8
    static let maxMemberAttributeValueBytes = 64
    static let maxMemberAttributesBytes = 144
    static let maxUsersWithMemberAttributes = 500

    /// Why `key` = `value` cannot be set on top of `current` (key → value), checked in this order: a new key that would
    /// be the 21st, key empty or over 16 B, value over 1024 B, total of keys plus values over 5120 B.
    static func attributeProblem(key: String, value: String, in current: [String: String]) -> ErrorCode? {
        let existing = current[key]
        if existing == nil && current.count >= maxAttributes { return .roomAttributeCountExceeded }
        if key.utf8.isEmpty || key.utf8.count > maxAttributeKeyBytes { return .roomAttributeKeyTooLong }
        if value.utf8.count > maxAttributeValueBytes { return .roomAttributeValueTooLong }
        let total =
            totalBytes(current) - (existing.map { key.utf8.count + $0.utf8.count } ?? 0) + key.utf8.count + value.utf8.count
        if total > maxAttributesTotalBytes { return .roomAttributesTotalExceeded }
        return nil
    }

    static func totalBytes(_ attributes: [String: String]) -> Int {
        attributes.reduce(0) { $0 + $1.key.utf8.count + $1.value.utf8.count }
    }

    /// Why a member's full set of attributes after a change is refused (docs/rooms.md#member-attributes), in the
    /// table's order after `not_in_room`: more than 30 pairs (after the change, or in the request itself), a changed
    /// key empty or over 8 B, a changed value over 64 B, more than 144 B in total.
    static func memberAttributesProblem(after: [String: String], changed: [(key: String, value: String)]) -> ErrorCode? {
        if after.count > maxMemberAttributePairs || changed.count > maxMemberAttributePairs { return .memberAttributePairsExceeded }
        if changed.contains(where: { $0.key.utf8.isEmpty || $0.key.utf8.count > maxMemberAttributeKeyBytes }) {
            return .memberAttributeKeyTooLong
        }
        if changed.contains(where: { $0.value.utf8.count > maxMemberAttributeValueBytes }) { return .memberAttributeValueTooLong }
        if totalBytes(after) > maxMemberAttributesBytes { return .memberAttributesTotalExceeded }
        return nil
    }
}
