import ParleyPostgres

/// An event about to be written: its type, `data` JSON, audience and ordering key (API.md §14.1, §18).
public struct NewEvent: Sendable {
    public var type: String
    public var data: [UInt8]
    /// The users whose user streams receive it.
    public var audience: [String]
    public var groupID: String?
    public var roomID: String?
    /// True for group message events: they go to the members of `groupID` at the moment the event is written
    /// (Migrations/0009), and `audience` stays empty however big the group is.
    public var toGroupMembers: Bool
    /// The webhook ordering key (§15.2): conversation, group, room, call, app or primary user.
    public var orderKey: String

    public init(
        type: String, data: [UInt8], audience: [String] = [], groupID: String? = nil, roomID: String? = nil, toGroupMembers: Bool = false,
        orderKey: String
    ) {
        self.type = type
        self.data = data
        self.audience = audience
        self.groupID = groupID
        self.roomID = roomID
        self.toGroupMembers = toGroupMembers
        self.orderKey = orderKey
    }
}

/// The per-app event log: the one place events are appended and read.
///
/// Ids come from the app's `event_heads` row, updated in the writer's transaction. The row lock serialises
/// the app's event-writing transactions from that statement to their commit, so ids become visible strictly in
/// id order (a reader that saw N never later finds a smaller id). Appending is therefore the LAST statement of
/// every transaction that writes events: it keeps the lock short and gives every transaction one lock order.
public enum EventLog {
    /// Appends `events` in order and returns their ids. Call it last in the transaction.
    @discardableResult
    public static func append(_ events: [NewEvent], appID: String, now: Int64, on db: PostgresConnection) throws -> [Int64] {
        if events.isEmpty { return [] }
        let result = try db.query(
            """
            WITH h AS (UPDATE event_heads SET head = head + $2 WHERE app_id = $1 RETURNING head)
            INSERT INTO events (app_id, id, type, created_at, data, audience, group_id, room_id, to_group_members, order_key)
            SELECT $1, h.head - $2 + e.ord, e.type, $3, e.data,
                   ARRAY(SELECT json_array_elements_text(e.audience::json)), NULLIF(e.group_id, ''), NULLIF(e.room_id, ''),
                   e.to_group_members, e.order_key
            FROM h, unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $10::boolean[], $9::text[])
                 WITH ORDINALITY AS e(type, data, audience, group_id, room_id, to_group_members, order_key, ord)
            RETURNING id
            """,
            [
                appID, events.count, now,
                events.map(\.type),
                events.map { String(decoding: $0.data, as: UTF8.self) },
                events.map { String(decoding: JSONValue.array($0.audience.map { .string($0) }).serialized(), as: UTF8.self) },
                events.map { $0.groupID ?? "" },
                events.map { $0.roomID ?? "" },
                events.map(\.orderKey),
                events.map(\.toGroupMembers),
            ], prepared: true)
        guard result.rowCount == events.count else {
            throw APIError(.internalError, "event head missing for app \(appID)")
        }
        return try result.rows.map { try $0[0].int64 }
    }

    /// The head `H` and trim point `T` of an app's log.
    public static func bounds(appID: String, on db: PostgresConnection) throws -> (head: Int64, trimPoint: Int64) {
        let result = try db.query("SELECT head, trim_point FROM event_heads WHERE app_id = $1", [appID], prepared: true)
        guard let row = result.first else { return (0, 0) }
        return (try row[0].int64, try row[1].int64)
    }

    /// Filters of a log read (§14.2); they combine with AND.
    public struct Filter: Sendable {
        public var types: [String] = []
        public var userID: String?
        public var groupID: String?
        public var roomID: String?
        public init() {}
    }

    /// Reads up to `limit` events with id > `after`, in id order, as Event JSON objects.
    public static func read(appID: String, after: Int64, limit: Int, filter: Filter, on db: PostgresConnection) throws
        -> [(id: Int64, json: [UInt8])]
    {
        let types = EventTypeFilter(filter.types)
        let result = try db.query(
            """
            SELECT id, \(eventJSON)
            FROM events
            WHERE app_id = $1 AND id > $2
              AND ($4 OR type = ANY($5::text[]) OR EXISTS (SELECT 1 FROM unnest($6::text[]) p WHERE starts_with(type, p)))
              AND ($7::text IS NULL OR $7 = ANY(audience)
                   OR (to_group_members AND parley_member_at(app_id, group_id, $7, id)))
              AND ($8::text IS NULL OR group_id = $8)
              AND ($9::text IS NULL OR room_id = $9)
            ORDER BY id
            LIMIT $3
            """,
            [appID, after, limit, types.all, types.exact, types.prefixes, filter.userID, filter.groupID, filter.roomID],
            prepared: true)
        return try result.rows.map { (try $0[0].int64, try $0[1].textBytes) }
    }

    /// The Event JSON object of a row of `events` (API.md §2 "Event"), built by PostgreSQL from the stored parts.
    private static let eventJSON = """
        '{"id":"' || id || '","type":' || to_json(type) || ',"app_id":' || to_json(app_id)
               || ',"created_at":' || created_at || ',"data":' || data || '}'
        """

    /// Reads up to `limit` events with `after` < id ≤ `upTo` (no upper bound when nil), in id order, for the live
    /// streams: every event, with what their filters need and the SSE frame.
    static func readLive(appID: String, after: Int64, upTo: Int64?, limit: Int, on db: PostgresConnection) throws
        -> [LiveEvent]
    {
        let result = try db.query(
            """
            SELECT id, type, audience, group_id, room_id, to_group_members,
                   CASE WHEN type = 'user.deleted' THEN data::json->>'user_id' END,
                   CASE WHEN type = 'user.kicked' THEN ARRAY(SELECT json_array_elements_text(data::json->'platforms')) END,
                   'id: ' || id || E'\\nevent: ' || type || E'\\ndata: ' || \(eventJSON) || E'\\n\\n'
            FROM events
            WHERE app_id = $1 AND id > $2 AND ($3::bigint IS NULL OR id <= $3)
            ORDER BY id
            LIMIT $4
            """,
            [appID, after, upTo, limit], prepared: true)
        return try result.rows.map { row in
            LiveEvent(
                id: try row[0].int64, type: try row[1].string, audience: try row[2].stringArray,
                groupID: row[3].isNull ? nil : try row[3].string, roomID: row[4].isNull ? nil : try row[4].string,
                toGroupMembers: try row[5].bool, deletedUserID: row[6].isNull ? nil : try row[6].string,
                kickedPlatforms: row[7].isNull ? nil : try row[7].stringArray, frame: try row[8].textBytes)
        }
    }
}
