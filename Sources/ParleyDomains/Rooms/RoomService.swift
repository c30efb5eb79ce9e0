import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The room rules (docs/rooms.md): room lifecycle, membership and destruction (attributes in `RoomService+Attributes`).
///
/// Every change runs in one transaction that locks the room row (after the entering user's row, for an enter), so
/// member counts, the destruction schedule and attribute quotas are exact under concurrency, and writes its events
/// last. Room events go to "the members when the event was written" (`toGroupMembers` with `roomID`,
/// Migrations/0015): the membership history the removals write is what the log and the hub answer that from.
///
/// A value made per request; it owns nothing mutable. Transaction bodies are re-runnable.
package struct RoomService: DomainService {
    let db: PostgresConnection
    let appID: String
    let now: Int64
    /// The app's `max_rooms_per_user` (docs/users.md#apps-and-settings).
    var maxRoomsPerUser: Int64 = 5

    package init(db: PostgresConnection, appID: String, now: Int64) {
        self.db = db
        self.appID = appID
        self.now = now
    }

    /// The service for a request, with its app's `max_rooms_per_user` (the one way routes make it, as for every
    /// domain; background work, which has no request, uses ``init(db:appID:now:)``).
    package init(_ ctx: APIContext) {
        self.init(db: ctx.db, appID: ctx.appID, now: ctx.now)
        let setting = ctx.app.settings.int("max_rooms_per_user")
        if setting > 0 { maxRoomsPerUser = setting }
    }

    /// Who acts on attributes (docs/users.md#user-tokens, docs/rooms.md#room-attributes): a user (a token, or the app
    /// naming `operator`), who must be in the room, or the app itself, which always forces and owns nothing.
    struct Operator: Sendable {
        var userID: String?

        static let app = Operator(userID: nil)
    }

    /// The fields of a room being created (`POST /v1/rooms`, or `enter` with `create_if_missing`).
    struct NewRoom: Sendable {
        var roomID: String?
        var name = ""
        var attributes: [(key: String, value: String)] = []
        var destroyDelayS: Int64 = 0
    }

    // MARK: - Lifecycle

    /// `POST /v1/rooms`: creates the room; the creator (if any) enters it.
    func create(_ input: NewRoom, creator: String?) throws -> Room {
        try db.transaction { db in
            if let creator {
                try UserService.requireActive(creator, appID: appID, forUpdate: true, on: db)
            }
            let roomID = input.roomID ?? IdentifierKind.generateRoomID()
            try RoomStore.lockCreation(appID: appID, on: db)
            if try RoomStore.fetch(appID: appID, roomID: roomID, on: db) != nil {
                throw APIError(.roomAlreadyExists, "room \(roomID) already exists")
            }
            var input = input
            input.roomID = roomID
            var room = try insertRoom(input, createdBy: creator, on: db)
            var events = [createdEvent(room)]
            if let creator {
                events.append(try join(&room, userID: creator, extendedData: "", on: db))
                events[0] = createdEvent(room)
            }
            try EventLog.append(events, appID: appID, now: now, on: db)
            return room
        }
    }

    /// The outcome of an enter.
    struct Entered: Sendable {
        var room: Room
        var created: Bool
        var alreadyMember: Bool
    }

    /// `POST /v1/rooms/{room_id}/enter`, checked in this order: unknown user, already a member (a no-op), unknown
    /// room without `create_if_missing`, the app's room limit, the user's room limit, the initial attributes.
    func enter(_ roomID: String, userID: String, extendedData: String, createIfMissing: Bool, newRoom: NewRoom) throws -> Entered {
        try db.transaction { db in
            try UserService.requireActive(userID, appID: appID, forUpdate: true, on: db)
            var existing = try RoomStore.fetch(appID: appID, roomID: roomID, forUpdate: true, on: db)
            if existing == nil {
                guard createIfMissing else { throw APIError.roomNotFound(roomID) }
                // Another enter may create it while this one waits for the creation lock.
                try RoomStore.lockCreation(appID: appID, on: db)
                existing = try RoomStore.fetch(appID: appID, roomID: roomID, forUpdate: true, on: db)
            }
            if let room = existing, try RoomStore.isMember(appID: appID, roomID: roomID, userID: userID, on: db) {
                return Entered(room: room, created: false, alreadyMember: true)
            }
            var events: [NewEvent] = []
            var room: Room
            if let found = existing {
                try requireRoomSlot(userID, on: db)
                room = found
            } else {
                var input = newRoom
                input.roomID = roomID
                room = try insertRoom(input, createdBy: userID, on: db)
                events.append(createdEvent(room))
            }
            events.append(try join(&room, userID: userID, extendedData: extendedData, on: db))
            if existing == nil { events[0] = createdEvent(room) }
            try EventLog.append(events, appID: appID, now: now, on: db)
            return Entered(room: room, created: existing == nil, alreadyMember: false)
        }
    }

    /// `DELETE /v1/rooms/{room_id}`.
    func destroy(_ roomID: String) throws {
        try db.transaction { db in
            let room = try lock(roomID, on: db)
            try EventLog.append(try destruction(room, on: db), appID: appID, now: now, on: db)
        }
    }

    func get(_ roomID: String, on db: PostgresConnection) throws -> Room {
        guard let room = try RoomStore.fetch(appID: appID, roomID: roomID, on: db) else { throw APIError.roomNotFound(roomID) }
        return room
    }

    /// The room for a members-only read (U·m): a reading user must be in it.
    func readable(_ roomID: String, by userID: String?) throws -> Room {
        let room = try get(roomID, on: db)
        if let userID, try !RoomStore.isMember(appID: appID, roomID: roomID, userID: userID, on: db) {
            throw APIError.notInRoom(userID, roomID)
        }
        return room
    }

    func list(q: String?, after: (Int64, String)?, limit: Int) throws -> [Room] {
        try RoomStore.list(appID: appID, q: q, after: after, limit: limit, on: db)
    }

    // MARK: - Membership

    /// `POST …/leave`.
    func leave(_ roomID: String, userID: String) throws {
        try db.transaction { db in
            var room = try lock(roomID, on: db)
            let removed = try RoomStore.removeMembers(appID: appID, roomID: roomID, userIDs: [userID], on: db)
            guard !removed.isEmpty else { throw APIError.notInRoom(userID, roomID) }
            try EventLog.append(try removal(&room, removed: removed, reason: "left", on: db), appID: appID, now: now, on: db)
        }
    }

    /// `POST …/members/kick`: the users in the room leave (one `room.member_left` in request order); the others
    /// fail with `not_in_room`. Returns the failed ids.
    func kick(_ roomID: String, userIDs: [String]) throws -> Set<String> {
        try db.transaction { db in
            var room = try lock(roomID, on: db)
            let removed = Set(try RoomStore.removeMembers(appID: appID, roomID: roomID, userIDs: userIDs, on: db))
            if !removed.isEmpty {
                let inOrder = userIDs.filter { removed.contains($0) }
                try EventLog.append(try removal(&room, removed: inOrder, reason: "kicked", on: db), appID: appID, now: now, on: db)
            }
            return Set(userIDs).subtracting(removed)
        }
    }

    func members(of roomID: String, after: (Int64, String)?, limit: Int) throws -> [RoomMember] {
        try RoomStore.listMembers(appID: appID, roomID: roomID, after: after, limit: limit, on: db)
    }

    func members(of roomID: String, among userIDs: [String]) throws -> [String: RoomMember] {
        try RoomStore.fetchMembers(appID: appID, roomID: roomID, userIDs: userIDs, on: db)
    }

    /// A hard-deleted user leaves every room it is in (reason `deleted`, one `room.member_left` per room), inside
    /// the deleting transaction; returns the events to append.
    package func removeDeletedUser(_ userID: String, on db: PostgresConnection) throws -> [NewEvent] {
        var events: [NewEvent] = []
        for roomID in try RoomStore.roomIDs(appID: appID, userID: userID, on: db) {
            guard var room = try RoomStore.fetch(appID: appID, roomID: roomID, forUpdate: true, on: db) else { continue }
            let removed = try RoomStore.removeMembers(appID: appID, roomID: roomID, userIDs: [userID], on: db)
            if !removed.isEmpty { events += try removal(&room, removed: removed, reason: "deleted", on: db) }
        }
        return events
    }

    /// The offline removal of one member (the app setting `room_offline_leave_s`), if it is still due under the room
    /// lock; returns its events (none when it no longer applies).
    func removeOffline(_ roomID: String, userID: String, on db: PostgresConnection) throws -> [NewEvent] {
        guard var room = try RoomStore.fetch(appID: appID, roomID: roomID, forUpdate: true, on: db),
            try !RoomStore.offlineMembers(now: now, limit: 1, only: (appID, roomID, userID), on: db).isEmpty
        else { return [] }
        let removed = try RoomStore.removeMembers(appID: appID, roomID: roomID, userIDs: [userID], on: db)
        return removed.isEmpty ? [] : try removal(&room, removed: removed, reason: "offline", on: db)
    }

    /// The events and effects of a due destruction (the timer), or none when an enter cancelled it.
    func destroyIfDue(_ room: Room, on db: PostgresConnection) throws -> [NewEvent] {
        guard room.memberCount == 0, let due = room.destroyAt, due <= now else { return [] }
        return try destruction(room, on: db)
    }

    // MARK: - Internals

    func lock(_ roomID: String, on db: PostgresConnection) throws -> Room {
        guard let room = try RoomStore.fetch(appID: appID, roomID: roomID, forUpdate: true, on: db) else {
            throw APIError.roomNotFound(roomID)
        }
        return room
    }

    /// 403 `not_in_room` unless the operator is the app or a member.
    func requireOperator(_ op: Operator, in roomID: String, on db: PostgresConnection) throws {
        guard let userID = op.userID else { return }
        if try !RoomStore.isMember(appID: appID, roomID: roomID, userID: userID, on: db) { throw APIError.notInRoom(userID, roomID) }
    }

    /// 422 `joined_rooms_limit` when the (locked) user is already in `max_rooms_per_user` rooms.
    private func requireRoomSlot(_ userID: String, on db: PostgresConnection) throws {
        if try RoomStore.roomCount(appID: appID, userID: userID, on: db) >= maxRoomsPerUser {
            throw APIError(.joinedRoomsLimit, "user \(userID) is already in \(maxRoomsPerUser) rooms")
        }
    }

    /// Inserts a new room with its initial attributes (checked as one set: the first violation fails the request),
    /// under the app's creation lock; the 10,000-room limit is checked here.
    private func insertRoom(_ input: NewRoom, createdBy: String?, on db: PostgresConnection) throws -> Room {
        if try RoomStore.count(appID: appID, on: db) >= RoomLimits.maxRoomsPerApp {
            throw APIError(.roomLimit, "the app already has \(RoomLimits.maxRoomsPerApp) rooms")
        }
        if let creator = createdBy { try requireRoomSlot(creator, on: db) }
        var values: [String: String] = [:]
        for (key, value) in input.attributes {
            if let code = RoomLimits.attributeProblem(key: key, value: value, in: values) {
                throw APIError(code, "attribute \(key): \(code.name)")
            }
            values[key] = value
        }
        let proposed = Room(
            roomID: input.roomID ?? IdentifierKind.generateRoomID(), name: input.name, memberCount: 0,
            destroyDelayS: input.destroyDelayS, createdBy: createdBy, createdAt: now, emptySince: nil, destroyAt: nil, firstSeq: 0)
        guard let room = try RoomStore.insert(appID: appID, proposed, on: db) else {
            throw APIError(.roomAlreadyExists, "room \(proposed.roomID) already exists")
        }
        let attributes = input.attributes.map {
            RoomAttribute(key: $0.key, value: $0.value, ownerID: createdBy, deleteAfterOwnerLeft: false, updatedAt: now)
        }
        try RoomStore.writeAttributes(appID: appID, roomID: room.roomID, set: attributes, deleted: [], on: db)
        return room
    }

    /// Adds the member, cancels a scheduled destruction and returns `room.member_joined`.
    private func join(_ room: inout Room, userID: String, extendedData: String, on db: PostgresConnection) throws -> NewEvent {
        guard
            let member = try RoomStore.insertMember(
                appID: appID, roomID: room.roomID, userID: userID, extendedData: extendedData, now: now, on: db)
        else { throw APIError(.internalError, "member \(userID) of room \(room.roomID) not written") }
        room.memberCount += 1
        room.emptySince = nil
        room.destroyAt = nil
        try RoomStore.saveState(appID: appID, room, on: db)
        var data = JSONObjectWriter(capacity: 256)
        data["room_id"] = room.roomID
        data.write("members") { w in w.array { w in w.writeRaw(member.json()) } }
        // The joiner is not a member "at" its own join event: it is named in the audience.
        return event("room.member_joined", room.roomID, data, audience: [userID])
    }

    /// After `removed` (in request order) left the locked room: `room.member_left` (one per user for offline and
    /// deleted removals), each followed by the delete of the keys they owned with `delete_after_owner_left`; their
    /// flagged member attributes dropped; the count; and destruction now (delay 0) or scheduled.
    private func removal(_ room: inout Room, removed: [String], reason: String, on db: PostgresConnection) throws -> [NewEvent] {
        var events: [NewEvent] = []
        let groups = reason == "offline" || reason == "deleted" ? removed.map { [$0] } : [removed]
        for users in groups {
            var data = JSONObjectWriter(capacity: 128)
            data["room_id"] = room.roomID
            data["user_ids"] = users
            data["reason"] = reason
            events.append(event("room.member_left", room.roomID, data, audience: users))
            let deleted = try RoomStore.deleteOwnedAttributes(appID: appID, roomID: room.roomID, ownerIDs: users, on: db)
            if !deleted.isEmpty {
                events.append(attributesUpdated(room.roomID, action: "delete", deleted.map { ($0, "") }, operator: nil))
            }
        }
        try RoomStore.dropMemberAttributes(appID: appID, roomID: room.roomID, userIDs: removed, on: db)
        room.memberCount = max(0, room.memberCount - Int64(removed.count))
        if room.memberCount == 0 {
            if room.destroyDelayS == 0 { return events + (try destruction(room, on: db)) }
            room.emptySince = now
            room.destroyAt = now + room.destroyDelayS * 1000
        }
        try RoomStore.saveState(appID: appID, room, on: db)
        return events
    }

    /// Destroys the locked room: members out (no per-member events), attributes, member attributes and the cache
    /// gone with the row; `room.destroyed` to the members it had.
    private func destruction(_ room: Room, on db: PostgresConnection) throws -> [NewEvent] {
        let members = try RoomStore.removeMembers(appID: appID, roomID: room.roomID, userIDs: nil, on: db)
        try RoomStore.delete(appID: appID, roomID: room.roomID, on: db)
        var data = JSONObjectWriter(capacity: 64)
        data["room_id"] = room.roomID
        return [event("room.destroyed", room.roomID, data, audience: members, toMembers: false)]
    }

    /// `room.created` `{room}` to its creator.
    private func createdEvent(_ room: Room) -> NewEvent {
        var data = JSONObjectWriter(capacity: 320)
        data.raw("room", room.json())
        return event("room.created", room.roomID, data, audience: room.createdBy.map { [$0] } ?? [], toMembers: false)
    }

    /// `room.attributes_updated` `{room_id, action, attributes, operator}` to the members.
    func attributesUpdated(_ roomID: String, action: String, _ applied: [(key: String, value: String)], operator: String?) -> NewEvent {
        var data = JSONObjectWriter(capacity: 256)
        data["room_id"] = roomID
        data["action"] = action
        data["attributes"] = JSONObject(applied.map { ($0.key, JSONValue.string($0.value)) })
        data["operator"] = `operator`
        return event("room.attributes_updated", roomID, data)
    }

    /// A room event: to the members at write time (and `audience`), ordered with the room's messages.
    func event(_ type: String, _ roomID: String, _ data: consuming JSONObjectWriter, audience: [String] = [], toMembers: Bool = true)
        -> NewEvent
    {
        NewEvent(type: type, data: data.finish(), audience: audience, roomID: roomID, toGroupMembers: toMembers, orderKey: "room:" + roomID)
    }
}
