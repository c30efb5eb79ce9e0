import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The SQL of rooms (Migrations/0015_rooms.sql). No rules: ``RoomService`` decides, locks and writes events.
enum RoomStore {
    private static let columns =
        "room_id, name, member_count, destroy_delay_s, created_by, created_at, empty_since, destroy_at, first_seq"

    /// The types of ``columns``, in order.
    private typealias Columns = (String, String, Int64, Int64, String?, Int64, Int64?, Int64?, Int64)

    private static func room(_ row: PostgresRow) throws -> Room { room(try row.decode(Columns.self)) }

    private static func room(_ columns: Columns) -> Room {
        let (roomID, name, memberCount, destroyDelayS, createdBy, createdAt, emptySince, destroyAt, firstSeq) = columns
        return Room(
            roomID: roomID, name: name, memberCount: memberCount, destroyDelayS: destroyDelayS, createdBy: createdBy,
            createdAt: createdAt, emptySince: emptySince, destroyAt: destroyAt, firstSeq: firstSeq)
    }

    static func fetch(appID: String, roomID: String, forUpdate: Bool = false, on db: PostgresConnection) throws -> Room? {
        try db.query(
            "SELECT \(unsafeSQL: columns) FROM rooms WHERE app_id = \(appID) AND room_id = \(roomID)\(unsafeSQL: forUpdate ? " FOR UPDATE" : "")"
        ).first.map(room)
    }

    /// Inserts a new room (its seq continues the id's earlier rooms); false when the id is taken.
    static func insert(appID: String, _ r: Room, on db: PostgresConnection) throws -> Room? {
        try db.query(
            """
            INSERT INTO rooms (app_id, room_id, name, destroy_delay_s, created_by, created_at, first_seq)
            VALUES (\(appID), \(r.roomID), \(r.name), \(r.destroyDelayS), \(r.createdBy), \(r.createdAt),
                    coalesce((SELECT last_seq FROM conversation_seqs
                              WHERE app_id = \(appID) AND conv_type = 'room' AND conv_id = \(r.roomID)), 0))
            ON CONFLICT DO NOTHING
            RETURNING \(unsafeSQL: columns)
            """
        ).first.map(room)
    }

    /// Writes the counters and the destruction schedule.
    static func saveState(appID: String, _ r: Room, on db: PostgresConnection) throws {
        try db.query(
            """
            UPDATE rooms SET member_count = \(r.memberCount), empty_since = \(r.emptySince), destroy_at = \(r.destroyAt)
            WHERE app_id = \(appID) AND room_id = \(r.roomID)
            """)
    }

    static func delete(appID: String, roomID: String, on db: PostgresConnection) throws {
        try db.query("DELETE FROM rooms WHERE app_id = \(appID) AND room_id = \(roomID)")
    }

    /// The number of rooms of an app (the 10,000 limit).
    static func count(appID: String, on db: PostgresConnection) throws -> Int64 {
        try db.query("SELECT count(*) FROM rooms WHERE app_id = \(appID)").decodeFirst(Int64.self) ?? 0
    }

    /// Serialises room creation in an app until commit, so the 10,000-rooms limit holds across nodes.
    static func lockCreation(appID: String, on db: PostgresConnection) throws {
        try db.query("SELECT pg_advisory_xact_lock(hashtextextended('parley.rooms.' || \(appID), 0))")
    }

    /// `GET /v1/rooms`: by created_at desc, then room_id desc; `q` = prefix of room_id or substring of name.
    static func list(appID: String, q: String?, after: (Int64, String)?, limit: Int, on db: PostgresConnection) throws -> [Room] {
        var query: PostgresQuery = "SELECT \(unsafeSQL: columns) FROM rooms WHERE app_id = \(appID)"
        if let q, !q.isEmpty {
            let lowered = q.lowercased()
            query += " AND (starts_with(lower(room_id), \(lowered)) OR strpos(lower(name), \(lowered)) > 0)"
        }
        if let (t, id) = after {
            query += " AND (created_at, room_id COLLATE \"C\") < (\(t), \(id) COLLATE \"C\")"
        }
        query += " ORDER BY created_at DESC, room_id COLLATE \"C\" DESC LIMIT \(limit)"
        return try db.query(query).rows.map(room)
    }

    // MARK: - Members

    /// Whether `userID` is in the room.
    static func isMember(appID: String, roomID: String, userID: String, on db: PostgresConnection) throws -> Bool {
        try db.query("SELECT 1 FROM room_members WHERE app_id = \(appID) AND room_id = \(roomID) AND user_id = \(userID)").first != nil
    }

    /// Which of `userIDs` are in the room.
    static func members(appID: String, roomID: String, among userIDs: [String], on db: PostgresConnection) throws -> Set<String> {
        Set(
            try db.query(
                "SELECT user_id FROM room_members WHERE app_id = \(appID) AND room_id = \(roomID) AND user_id = ANY(\(userIDs)::text[])"
            ).decode(String.self))
    }

    /// How many rooms the user is in.
    static func roomCount(appID: String, userID: String, on db: PostgresConnection) throws -> Int64 {
        try db.query("SELECT count(*) FROM room_members WHERE app_id = \(appID) AND user_id = \(userID)").decodeFirst(Int64.self) ?? 0
    }

    /// The rooms the user is in, in room order (the lock order).
    static func roomIDs(appID: String, userID: String, on db: PostgresConnection) throws -> [String] {
        try db.query(
            "SELECT room_id FROM room_members WHERE app_id = \(appID) AND user_id = \(userID) ORDER BY room_id COLLATE \"C\""
        ).decode(String.self)
    }

    /// Every member's id, in user order.
    static func memberIDs(appID: String, roomID: String, on db: PostgresConnection) throws -> [String] {
        try db.query(
            "SELECT user_id FROM room_members WHERE app_id = \(appID) AND room_id = \(roomID) ORDER BY user_id COLLATE \"C\""
        ).decode(String.self)
    }

    static func insertMember(
        appID: String, roomID: String, userID: String, extendedData: String, now: Int64, on db: PostgresConnection
    ) throws -> RoomMember? {
        try db.query(
            """
            WITH m AS (
                INSERT INTO room_members (app_id, room_id, user_id, extended_data, entered_at)
                VALUES (\(appID), \(roomID), \(userID), \(extendedData), \(now))
                RETURNING user_id, extended_data, entered_at
            )
            SELECT m.user_id, u.name, u.avatar_url, m.extended_data, m.entered_at
            FROM m JOIN users u ON u.app_id = \(appID) AND u.user_id = m.user_id
            """
        ).first.map(member)
    }

    /// Removes members (they move to the membership history, stamped by the sequencer with the event that records
    /// their leave) and returns the ids removed.
    /// `userIDs` nil: every member (destruction). The filter is written per case, not as one optional parameter: a
    /// generic plan of `($3 IS NULL OR user_id = ANY($3))`, and on a table without statistics yet even of
    /// `user_id = ANY($3)`, filters the whole room instead of probing the primary key, so one user (a leave, an offline
    /// removal, a hard delete) is matched with `=`.
    static func removeMembers(appID: String, roomID: String, userIDs: [String]?, on db: PostgresConnection) throws -> [String] {
        var which: PostgresQuery = "app_id = \(appID) AND room_id = \(roomID)"
        if let userIDs, userIDs.count == 1 {
            which += " AND user_id = \(userIDs[0])"
        } else if let userIDs {
            which += " AND user_id = ANY(\(userIDs)::text[])"
        }
        return try db.query(
            """
            WITH gone AS (
                DELETE FROM room_members WHERE \(which)
                RETURNING app_id, room_id, user_id, joined_event, joined_xact
            )
            INSERT INTO room_member_history (app_id, room_id, user_id, joined_event, joined_xact)
            SELECT app_id, room_id, user_id, joined_event, joined_xact FROM gone
            RETURNING user_id
            """
        ).decode(String.self)
    }

    private static let memberColumns = "m.user_id, u.name, u.avatar_url, m.extended_data, m.entered_at"

    private static func member(_ row: PostgresRow) throws -> RoomMember {
        let (userID, name, avatarURL, extendedData, enteredAt) = try row.decode((String, String, String, String, Int64).self)
        return RoomMember(userID: userID, name: name, avatarURL: avatarURL, extendedData: extendedData, enteredAt: enteredAt)
    }

    /// `GET …/members`: by entered_at, then user_id.
    static func listMembers(appID: String, roomID: String, after: (Int64, String)?, limit: Int, on db: PostgresConnection) throws
        -> [RoomMember]
    {
        // The list index is keyed by `app_id || '/' || room_id` (Migrations/0015_rooms.sql).
        var query: PostgresQuery = """
            SELECT \(unsafeSQL: memberColumns) FROM room_members m JOIN users u ON u.app_id = m.app_id AND u.user_id = m.user_id
            WHERE (m.app_id || '/' || m.room_id) = \(appID + "/" + roomID)
            """
        if let (t, id) = after {
            query += " AND (m.entered_at, m.user_id COLLATE \"C\") > (\(t), \(id) COLLATE \"C\")"
        }
        query += " ORDER BY (m.app_id || '/' || m.room_id), m.entered_at, m.user_id COLLATE \"C\" LIMIT \(limit)"
        return try db.query(query).rows.map(member)
    }

    /// The members among `userIDs`, by id.
    static func fetchMembers(appID: String, roomID: String, userIDs: [String], on db: PostgresConnection) throws -> [String: RoomMember] {
        let rows = try db.query(
            """
            SELECT \(unsafeSQL: memberColumns) FROM room_members m JOIN users u ON u.app_id = m.app_id AND u.user_id = m.user_id
            WHERE m.app_id = \(appID) AND m.room_id = \(roomID) AND m.user_id = ANY(\(userIDs)::text[])
            """
        ).rows.map(member)
        return Dictionary(uniqueKeysWithValues: rows.map { ($0.userID, $0) })
    }

    // MARK: - Attributes

    static func attributes(appID: String, roomID: String, on db: PostgresConnection) throws -> [RoomAttribute] {
        try db.query(
            """
            SELECT key, value, owner_id, delete_after_owner_left, updated_at FROM room_attributes
            WHERE app_id = \(appID) AND room_id = \(roomID) ORDER BY key
            """
        ).decode((String, String, String?, Bool, Int64).self).map {
            RoomAttribute(key: $0.0, value: $0.1, ownerID: $0.2, deleteAfterOwnerLeft: $0.3, updatedAt: $0.4)
        }
    }

    /// Replaces the given keys' rows (upsert) and deletes `deleted` keys.
    static func writeAttributes(
        appID: String, roomID: String, set: [RoomAttribute], deleted: [String], on db: PostgresConnection
    ) throws {
        if !deleted.isEmpty {
            try db.query("DELETE FROM room_attributes WHERE app_id = \(appID) AND room_id = \(roomID) AND key = ANY(\(deleted)::text[])")
        }
        guard !set.isEmpty else { return }
        try db.query(
            """
            INSERT INTO room_attributes AS a (app_id, room_id, key, value, owner_id, delete_after_owner_left, updated_at)
            SELECT \(appID), \(roomID), x.key, x.value, x.owner, x.flag, x.at
            FROM unnest(\(set.map(\.key))::text[], \(set.map(\.value))::text[], \(set.map(\.ownerID))::text[],
                        \(set.map(\.deleteAfterOwnerLeft))::boolean[], \(set.map(\.updatedAt))::bigint[]) AS x(key, value, owner, flag, at)
            ON CONFLICT (app_id, room_id, key) DO UPDATE
            SET value = excluded.value, owner_id = excluded.owner_id, delete_after_owner_left = excluded.delete_after_owner_left,
                updated_at = excluded.updated_at
            """)
    }

    /// Deletes the keys owned by `userIDs` with `delete_after_owner_left`; returns them in key order.
    static func deleteOwnedAttributes(appID: String, roomID: String, ownerIDs: [String], on db: PostgresConnection) throws -> [String] {
        try db.query(
            """
            DELETE FROM room_attributes
            WHERE app_id = \(appID) AND room_id = \(roomID) AND owner_id = ANY(\(ownerIDs)::text[]) AND delete_after_owner_left
            RETURNING key
            """
        ).decode(String.self).sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
    }

    // MARK: - Member attributes

    /// The member attributes of `userIDs` (key → value), by user.
    static func memberAttributes(appID: String, roomID: String, userIDs: [String], on db: PostgresConnection) throws
        -> [String: [String: String]]
    {
        var result: [String: [String: String]] = [:]
        for row in try db.query(
            """
            SELECT user_id, key, value FROM room_member_attributes
            WHERE app_id = \(appID) AND room_id = \(roomID) AND user_id = ANY(\(userIDs)::text[])
            """
        ).decode((String, String, String).self) {
            result[row.0, default: [:]][row.1] = row.2
        }
        return result
    }

    /// How many users hold at least one member attribute in the room.
    static func usersWithMemberAttributes(appID: String, roomID: String, on db: PostgresConnection) throws -> Int64 {
        try db.query("SELECT count(DISTINCT user_id) FROM room_member_attributes WHERE app_id = \(appID) AND room_id = \(roomID)")
            .decodeFirst(Int64.self) ?? 0
    }

    /// Sets (`value` non-empty) or removes (`""`) one user's keys.
    static func writeMemberAttributes(
        appID: String, roomID: String, userID: String, pairs: [(key: String, value: String)], deleteAfterOwnerLeft: Bool,
        on db: PostgresConnection
    ) throws {
        let removed = pairs.filter { $0.value.isEmpty }.map(\.key)
        let set = pairs.filter { !$0.value.isEmpty }
        if !removed.isEmpty {
            try db.query(
                """
                DELETE FROM room_member_attributes
                WHERE app_id = \(appID) AND room_id = \(roomID) AND user_id = \(userID) AND key = ANY(\(removed)::text[])
                """)
        }
        guard !set.isEmpty else { return }
        try db.query(
            """
            INSERT INTO room_member_attributes AS a (app_id, room_id, user_id, key, value, delete_after_owner_left)
            SELECT \(appID), \(roomID), \(userID), x.key, x.value, \(deleteAfterOwnerLeft)
            FROM unnest(\(set.map(\.key))::text[], \(set.map(\.value))::text[]) AS x(key, value)
            ON CONFLICT (app_id, room_id, user_id, key) DO UPDATE
            SET value = excluded.value, delete_after_owner_left = excluded.delete_after_owner_left
            """)
    }

    /// Drops the flagged member attributes of users who leave.
    static func dropMemberAttributes(appID: String, roomID: String, userIDs: [String], on db: PostgresConnection) throws {
        try db.query(
            """
            DELETE FROM room_member_attributes
            WHERE app_id = \(appID) AND room_id = \(roomID) AND user_id = ANY(\(userIDs)::text[]) AND delete_after_owner_left
            """)
    }

    /// `GET …/member_attributes`: users holding attributes, by user_id.
    static func listMemberAttributes(appID: String, roomID: String, after: String?, limit: Int, on db: PostgresConnection) throws
        -> [(userID: String, attributes: [String: String])]
    {
        var query: PostgresQuery = """
            SELECT user_id FROM room_member_attributes WHERE app_id = \(appID) AND room_id = \(roomID)
            """
        if let after { query += " AND user_id > \(after)" }
        query += " GROUP BY user_id ORDER BY user_id LIMIT \(limit)"
        let ids = try db.query(query).decode(String.self)
        let attributes = try memberAttributes(appID: appID, roomID: roomID, userIDs: ids, on: db)
        return ids.map { ($0, attributes[$0] ?? [:]) }
    }

    // MARK: - Timers

    /// Rooms whose destruction is due, locked (others skipped) — the destruction timer's claim.
    static func lockDueForDestruction(now: Int64, limit: Int, on db: PostgresConnection) throws -> [(appID: String, room: Room)] {
        try db.query(
            """
            SELECT app_id, \(unsafeSQL: columns) FROM rooms
            WHERE destroy_at IS NOT NULL AND destroy_at <= \(now) AND member_count = 0
            ORDER BY destroy_at, app_id, room_id LIMIT \(limit) FOR UPDATE SKIP LOCKED
            """
        ).decode((String, String, String, Int64, Int64, String?, Int64, Int64?, Int64?, Int64).self).map {
            (appID: $0.0, room: room(($0.1, $0.2, $0.3, $0.4, $0.5, $0.6, $0.7, $0.8, $0.9)))
        }
    }

    /// Members to remove as offline (the app setting `room_offline_leave_s`, docs/rooms.md#lifecycle) in apps that set
    /// it: no presence-counting stream on any node for that long, counted from the later of `entered_at` and the
    /// detected close of the last stream. `only` narrows the search to one member (the re-check under the room lock).
    static func offlineMembers(
        now: Int64, limit: Int, only: (appID: String, roomID: String, userID: String)? = nil, on db: PostgresConnection
    ) throws -> [(appID: String, roomID: String, userID: String)] {
        var query: PostgresQuery = """
            SELECT m.app_id, m.room_id, m.user_id
            FROM apps a
            JOIN room_members m ON m.app_id = a.app_id
            LEFT JOIN user_statuses s ON s.app_id = m.app_id AND s.user_id = m.user_id
            WHERE (a.settings->>'room_offline_leave_s')::bigint > 0
              AND NOT EXISTS (SELECT 1 FROM user_streams us
                              WHERE us.app_id = m.app_id AND us.user_id = m.user_id AND us.counts_presence)
              AND greatest(m.entered_at, CASE WHEN s.online_status <> 'online' THEN s.last_online_status_updated_at ELSE 0 END)
                  + (a.settings->>'room_offline_leave_s')::bigint * 1000 <= \(now)
            """
        if let only {
            query += " AND m.app_id = \(only.appID) AND m.room_id = \(only.roomID) AND m.user_id = \(only.userID)"
        }
        query += " ORDER BY m.app_id, m.room_id, m.user_id LIMIT \(limit)"
        return try db.query(query).decode((String, String, String).self).map { (appID: $0.0, roomID: $0.1, userID: $0.2) }
    }
}
