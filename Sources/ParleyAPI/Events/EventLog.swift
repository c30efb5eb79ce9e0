import ParleyCore
import ParleyPostgres

/// An event about to be written: its type, `data` JSON, audience and ordering key (docs/events.md#the-event-object).
public struct NewEvent: Sendable {
    public var type: String
    public var data: [UInt8]
    /// The users whose user streams receive it (with `toGroupMembers`: besides the members).
    public var audience: [String]
    public var groupID: String?
    public var roomID: String?
    /// True for events that go to the members of `groupID`, or of `roomID` when `groupID` is nil, at the moment the
    /// event is written (Migrations/0009, 0015): group message events, and room events to the room's members. A user
    /// receives the event if it is in `audience` or was such a member; group message events leave `audience` empty
    /// however big the group is, room events may list users who are not members at the event (the joiners of
    /// `room.member_joined` are, the leavers of `room.member_left` and the members of `room.destroyed` are not).
    /// Membership at event k: some interval has joined at an event < k and not left at an event ≤ k.
    public var toGroupMembers: Bool
    /// The webhook ordering key (docs/webhooks.md#ordering): conversation, group, room, call, app or primary user.
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

/// The per-app event log: the one place events are appended, numbered and read.
///
/// Writers `append` their events to `pending_events` in their own transaction, touching no row shared by the app
/// (Migrations/0011); a writer that batches many changes per transaction (the message writer) may number its events
/// itself with `appendNumbered`, taking the head lock once per batch as the sequencer does. `sequence`, run by the
/// node's ``EventSequencer``, moves an app's committed pending events into `events` with ids after the head, under the
/// app's `event_heads` row lock, in one short transaction per batch.
/// Readers read `events` only, so they see ids strictly in id order (a reader that saw N never later finds a
/// smaller id), and the head lock is held across one commit per batch instead of one per writer.
public enum EventLog {
    /// Appends `events` in order to the transaction's pending events; they get their ids when sequenced.
    public static func append(_ events: [NewEvent], appID: String, now: Int64, on db: PostgresConnection) throws {
        if events.isEmpty { return }
        try db.query(pendingInsert(events, appID: appID, now: now))
    }

    /// The INSERT of ``append(_:appID:now:on:)``, for a statement that writes a change and its events at once (as a
    /// data-modifying CTE: one round trip fewer, e.g. ``MessageStore.markGone``). `events` must not be empty.
    public static func pendingInsert(_ events: [NewEvent], appID: String, now: Int64) -> PostgresQuery {
        // Numbered parameters, each used once in order (so it can be part of another statement): bench/py/send_sql.py
        // pastes this text into the send benchmark.
        PostgresQuery(
            sql: """
                INSERT INTO pending_events (app_id, type, created_at, data, audience, group_id, room_id, to_group_members, order_key)
                SELECT $1, e.type, $2, e.data::text, e.audience, e.group_id, e.room_id, e.to_group_members, e.order_key
                FROM json_to_recordset($3::json) AS e(\(eventRecords.columnList))
                ORDER BY e.ord
                """, binds: [appID, now, eventsJSON(events)])
    }

    /// Appends `events` with their ids at once, under the app's head row lock held until the caller's commit: for a
    /// writer that commits many changes in one transaction (the message writer's batches), so the lock is taken once
    /// per batch, like the sequencer takes it. Call it last in the transaction. Returns the events with their ids, in
    /// order, for the node's readers once the transaction has committed (``CommittedEvents``). With `committing`, the
    /// transaction's COMMIT goes out with this statement (``PostgresConnection/queryCommitting(sql:_:)``), so the head
    /// lock is held for the server's work only, not for a round trip to the caller's thread and back.
    @discardableResult
    package static func appendNumbered(
        _ events: [NewEvent], appID: String, now: Int64, committing: Bool = false, on db: PostgresConnection
    ) throws -> CommittedEvents {
        let statement = PostgresQuery(sql: numberedAppend, binds: [appID, events.count, now, eventsJSON(events)])
        let result = committing ? try db.queryCommitting(sql: statement.sql, statement.binds) : try db.query(statement)
        let ids = try result.decode(Int64.self).sorted()
        guard ids.count == events.count else {
            throw APIError(.internalError, "event head missing for app \(appID)")
        }
        return CommittedEvents(appID: appID, events: zip(ids, events).map { CommittedEvent(id: $0, createdAt: now, event: $1) })
    }

    /// ``appendNumbered(_:appID:now:committing:on:)``'s statement (`parley sql events` prints it for the benchmarks).
    package static let numberedAppend = """
        WITH h AS (UPDATE event_heads SET head = head + $2 WHERE app_id = $1 RETURNING head)
        INSERT INTO events (app_id, id, type, created_at, data, audience, group_id, room_id, to_group_members, order_key)
        SELECT $1, h.head - $2 + e.ord, e.type, $3, e.data::text, e.audience, e.group_id, e.room_id, e.to_group_members,
               e.order_key
        FROM h, json_to_recordset($4::json) AS e(\(eventRecords.columnList))
        RETURNING id
        """

    /// The events as the JSON array both appends read (`e`), `ord` counting from 1. Each event's data is embedded as
    /// JSON, not as a string: PostgreSQL keeps a `json` value's text as written, and nothing has to be escaped (text
    /// arrays escaped every quote of every event's data, the largest cost of the message writer's Swift side).
    private static let eventRecords = JSONRecordset<NewEvent>([
        .init(name: "ord", type: "int") { w, _, index in w.writeInt(index + 1) },
        .init(name: "type", type: "text") { w, event, _ in w.writeString(event.type) },
        .init(name: "data", type: "json") { w, event, _ in w.writeRaw(event.data) },
        .init(name: "audience", type: "text[]") { w, event, _ in w.array { w in for user in event.audience { w.writeString(user) } } },
        .init(name: "group_id", type: "text") { w, event, _ in
            if let group = event.groupID { w.writeString(group) } else { w.writeNull() }
        },
        .init(name: "room_id", type: "text") { w, event, _ in
            if let room = event.roomID { w.writeString(room) } else { w.writeNull() }
        },
        .init(name: "to_group_members", type: "boolean") { w, event, _ in w.writeBool(event.toGroupMembers) },
        .init(name: "order_key", type: "text") { w, event, _ in w.writeString(event.orderKey) },
    ])

    private static func eventsJSON(_ events: [NewEvent]) -> String {
        eventRecords.json(events, capacity: events.reduce(64) { $0 + $1.data.count + 160 })
    }

    /// Gives the committed pending events of `appID` their ids, in one transaction on `db` (the sequencer's own
    /// connection); returns the new head and what the events were about (their types and ordering keys, each pair
    /// once: what the history cache drops), or nil when nothing was pending.
    ///
    /// The head row is locked first (nodes sequencing the same app queue here, never on a writer's commit), then
    /// one statement, with a fresh snapshot that sees every writer committed before the lock was granted, moves the
    /// rows in `pending` order and stamps the membership intervals their transactions wrote (Migrations/0011), of
    /// the groups and rooms whose membership events are in the batch (Migrations/0015): the first join event of a
    /// transaction (`group.created` / `group.member_joined`, `room.created` / `room.member_joined`) stamps the
    /// `joined_event` of the member and history rows of that group or room with that `joined_xact`, the first leave
    /// event (`group.member_left`, `room.member_left` / `room.destroyed`) the `left_event` of the history rows with
    /// that `left_xact`.
    static func sequence(appID: String, on db: PostgresConnection) throws -> (head: Int64, changes: [(type: String, orderKey: String)])? {
        try db.transaction { db in
            guard
                let before = try db.query(
                    """
                    SELECT head FROM event_heads
                    WHERE app_id = \(appID) AND EXISTS (SELECT 1 FROM pending_events WHERE app_id = \(appID)) FOR UPDATE
                    """
                ).decodeFirst(Int64.self)
            else { return nil }
            let row =
                try db.query(
                    """
                    WITH moved AS (
                        DELETE FROM pending_events WHERE app_id = \(appID)
                        RETURNING pending, type, created_at, data, audience, group_id, room_id, to_group_members, order_key, xact
                    ), numbered AS (
                        SELECT m.*, \(before) + row_number() OVER (ORDER BY m.pending) AS id FROM moved m
                    ), stored AS (
                        INSERT INTO events (app_id, id, type, created_at, data, audience, group_id, room_id, to_group_members, order_key)
                        SELECT \(appID), id, type, created_at, data, audience, group_id, room_id, to_group_members, order_key
                        FROM numbered ORDER BY id
                    ), joins AS (
                        SELECT group_id, xact, min(id) AS id FROM numbered
                        WHERE type IN ('group.created', 'group.member_joined') GROUP BY group_id, xact
                    ), joined AS (
                        UPDATE group_members gm SET joined_event = j.id FROM joins j
                        WHERE gm.app_id = \(appID) AND gm.group_id = j.group_id AND gm.joined_event IS NULL AND gm.joined_xact = j.xact
                    ), leaves AS (
                        SELECT group_id, xact, min(id) AS id FROM numbered
                        WHERE type = 'group.member_left' GROUP BY group_id, xact
                    ), history AS (
                        -- One UPDATE for both ends: a membership that began and ended in this batch gets both stamps.
                        UPDATE group_member_history h
                        SET joined_event = coalesce(h.joined_event,
                                (SELECT j.id FROM joins j WHERE j.group_id = h.group_id AND j.xact = h.joined_xact)),
                            left_event = coalesce(h.left_event,
                                (SELECT l.id FROM leaves l WHERE l.group_id = h.group_id AND l.xact = h.left_xact))
                        WHERE h.app_id = \(appID) AND (h.joined_event IS NULL OR h.left_event IS NULL)
                          AND h.group_id IN (SELECT group_id FROM joins UNION SELECT group_id FROM leaves)
                    ), room_joins AS (
                        -- Rooms (Migrations/0015), the same way: room.created / room.member_joined open intervals,
                        -- room.member_left / room.destroyed close them.
                        SELECT room_id, xact, min(id) AS id FROM numbered
                        WHERE type IN ('room.created', 'room.member_joined') AND room_id IS NOT NULL GROUP BY room_id, xact
                    ), room_joined AS (
                        UPDATE room_members rm SET joined_event = j.id FROM room_joins j
                        WHERE rm.app_id = \(appID) AND rm.room_id = j.room_id AND rm.joined_event IS NULL AND rm.joined_xact = j.xact
                    ), room_leaves AS (
                        SELECT room_id, xact, min(id) AS id FROM numbered
                        WHERE type IN ('room.member_left', 'room.destroyed') AND room_id IS NOT NULL GROUP BY room_id, xact
                    ), room_history AS (
                        UPDATE room_member_history h
                        SET joined_event = coalesce(h.joined_event,
                                (SELECT j.id FROM room_joins j WHERE j.room_id = h.room_id AND j.xact = h.joined_xact)),
                            left_event = coalesce(h.left_event,
                                (SELECT l.id FROM room_leaves l WHERE l.room_id = h.room_id AND l.xact = h.left_xact))
                        WHERE h.app_id = \(appID) AND (h.joined_event IS NULL OR h.left_event IS NULL)
                          AND h.room_id IN (SELECT room_id FROM room_joins UNION SELECT room_id FROM room_leaves)
                    ), advanced AS (
                        UPDATE event_heads SET head = \(before) + (SELECT count(*) FROM numbered)
                        WHERE app_id = \(appID) AND EXISTS (SELECT 1 FROM numbered)
                    )
                    SELECT (SELECT count(*) FROM numbered),
                           (SELECT json_agg(json_build_object('id', group_id, 'xact', xact::text, 'event', id)) FROM joins)::text,
                           (SELECT json_agg(json_build_object('id', room_id, 'xact', xact::text, 'event', id)) FROM room_joins)::text,
                           (SELECT coalesce(array_agg(DISTINCT type || ' ' || order_key), '{}') FROM numbered)
                    """
                ).decodeFirst((Int64, String?, String?, [String]).self)
            guard let (moved, groupJoins, roomJoins, changes) = row else { return nil }
            if moved == 0 { return nil }
            try stampLateLeavers(appID: appID, groupJoins: groupJoins, roomJoins: roomJoins, on: db)
            // An event type has no space: the first one ends it.
            return (
                before + moved,
                changes.map { pair in
                    let space = pair.firstIndex(of: " ") ?? pair.endIndex
                    return (String(pair[..<space]), space == pair.endIndex ? "" : String(pair[pair.index(after: space)...]))
                }
            )
        }
    }

    /// A member who left while its join's event was being numbered: the statement above waited for the leave's row
    /// lock on the member row, found the row gone, and could not see the history row the leave wrote (its snapshot
    /// is older), so that membership would never get its `joined_event` and would count for no event. This second
    /// statement, with a newer snapshot in the same transaction, stamps such history rows with the joins just
    /// numbered. (A leave that comes after the member row was stamped waits for this transaction and copies the
    /// stamp; one committed before the first statement's snapshot is stamped by it.)
    private static func stampLateLeavers(appID: String, groupJoins: String?, roomJoins: String?, on db: PostgresConnection) throws {
        guard groupJoins != nil || roomJoins != nil else { return }
        try db.query(
            """
            WITH g AS (
                UPDATE group_member_history h SET joined_event = j.event
                FROM json_to_recordset(coalesce(\(groupJoins)::json, '[]')) AS j(id text, xact text, event bigint)
                WHERE h.app_id = \(appID) AND h.group_id = j.id AND h.joined_event IS NULL AND h.joined_xact = j.xact::xid8
            )
            UPDATE room_member_history h SET joined_event = j.event
            FROM json_to_recordset(coalesce(\(roomJoins)::json, '[]')) AS j(id text, xact text, event bigint)
            WHERE h.app_id = \(appID) AND h.room_id = j.id AND h.joined_event IS NULL AND h.joined_xact = j.xact::xid8
            """)
    }

    /// The apps that have pending events (after a restart, or writes whose node died before asking for them).
    /// Also drops the pending events of apps that have no event head any more: written by a transaction that
    /// committed while its app was being deleted (pending_events has no foreign key to apps, Migrations/0021). Run by
    /// the sequencer's periodic sweep, not on every round.
    static func appsWithPending(on db: PostgresConnection) throws -> [String] {
        try db.query(
            """
            WITH orphans AS (
                DELETE FROM pending_events p WHERE NOT EXISTS (SELECT 1 FROM event_heads h WHERE h.app_id = p.app_id))
            SELECT DISTINCT app_id FROM pending_events p WHERE EXISTS (SELECT 1 FROM event_heads h WHERE h.app_id = p.app_id)
            """
        ).decode(String.self)
    }

    /// The head `H` and trim point `T` of an app's log.
    public static func bounds(appID: String, on db: PostgresConnection) throws -> (head: Int64, trimPoint: Int64) {
        let result = try db.query("SELECT head, trim_point FROM event_heads WHERE app_id = \(appID)")
        guard let (head, trimPoint) = try result.decodeFirst((Int64, Int64).self) else { return (0, 0) }
        return (head, trimPoint)
    }

    /// When the oldest event the log keeps (the first after the trim point `trimPoint`) was written; nil when it keeps
    /// none.
    public static func oldestCreatedAt(appID: String, after trimPoint: Int64, on db: PostgresConnection) throws -> Int64? {
        try db.query("SELECT created_at FROM events WHERE app_id = \(appID) AND id > \(trimPoint) ORDER BY id LIMIT 1").decodeFirst(Int64.self)
    }

    /// Filters of a log read (docs/events.md#polling-the-log); they combine with AND.
    public struct Filter: Sendable {
        public var types: [String] = []
        /// The events whose audience includes the user: listed in `audience`, or written `to_group_members` while it
        /// was a member of the event's group (`parley_member_at`), or of its room when it has no group
        /// (`parley_room_member_at`). The user event log (`GET /v1/users/{user_id}/events/log`) reads with it too.
        public var userID: String?
        public var groupID: String?
        public var roomID: String?
        public init() {}
    }

    /// Reads up to `limit` events with id > `after`, in id order, in the app view (its data as stored).
    public static func read(appID: String, after: Int64, limit: Int, filter: Filter, on db: PostgresConnection) throws
        -> [LoggedEvent]
    {
        let types = EventTypeFilter(filter.types)
        let result = try db.query(
            """
            SELECT id, type, created_at, data
            FROM events
            WHERE app_id = \(appID) AND id > \(after)
              AND (\(types.all) OR type = ANY(\(types.exact)::text[]) OR EXISTS (SELECT 1 FROM unnest(\(types.prefixes)::text[]) p WHERE starts_with(type, p)))
              AND (\(filter.userID)::text IS NULL OR \(filter.userID) = ANY(audience)
                   OR (to_group_members AND CASE WHEN group_id IS NOT NULL THEN parley_member_at(app_id, group_id, \(filter.userID), id)
                                                 WHEN room_id IS NOT NULL THEN parley_room_member_at(app_id, room_id, \(filter.userID), id)
                                                 ELSE false END))
              AND (\(filter.groupID)::text IS NULL OR group_id = \(filter.groupID))
              AND (\(filter.roomID)::text IS NULL OR room_id = \(filter.roomID))
            ORDER BY id
            LIMIT \(limit)
            """)
        return try result.decode((Int64, String, Int64, PostgresTextBytes).self).map { (id, type, createdAt, data) in
            LoggedEvent(
                id: id, type: type, head: EventJSON.head(id: id, type: type, appID: appID, createdAt: createdAt), data: data.bytes)
        }
    }

    /// Reads up to `limit` events with `after` < id ≤ `upTo` (no upper bound when nil), in id order, for the live
    /// streams: every event, with what their filters need and the parts of its SSE frames.
    package static func readLive(appID: String, after: Int64, upTo: Int64?, limit: Int, on db: PostgresConnection) throws
        -> [LiveEvent]
    {
        let result = try db.query(
            """
            SELECT id, type, audience, group_id, room_id, to_group_members,
                   CASE WHEN type = 'user.deleted' THEN data::json->>'user_id' END,
                   CASE WHEN type = 'user.kicked' THEN ARRAY(SELECT json_array_elements_text(data::json->'platforms')) END,
                   created_at, data
            FROM events
            WHERE app_id = \(appID) AND id > \(after) AND (\(upTo)::bigint IS NULL OR id <= \(upTo))
            ORDER BY id
            LIMIT \(limit)
            """)
        return try result.decode(
            (Int64, String, [String], String?, String?, Bool, String?, [String]?, Int64, PostgresTextBytes).self
        ).map { (id, type, audience, groupID, roomID, toGroupMembers, deletedUserID, kickedPlatforms, createdAt, data) in
            LiveEvent(
                id: id, type: type, audience: audience, groupID: groupID, roomID: roomID, toGroupMembers: toGroupMembers,
                deletedUserID: deletedUserID, kickedPlatforms: kickedPlatforms,
                frameHead: EventJSON.frameHead(id: id, type: type, appID: appID, createdAt: createdAt), data: data.bytes)
        }
    }
}
