import ParleyAPI
import ParleyCore
import ParleyPostgres
import ParleySync

/// The one place messages are written: the write steps of a send (docs/messages.md#sending) for a whole batch of sends
/// in one statement — `client_msg_id` dedupe, existence and policy checks, seq allocation, the message rows, dedupe
/// keys, conversation entries, reply counts and combine snapshots — and the `message.sent` events of what it wrote.
///
/// Which rules live in SQL, and why: every rule that reads rows another transaction may change concurrently (the dedupe
/// key, users, groups, memberships, mutes, blacklist, friends, the seq heads) is decided inside the statement that
/// writes, in its snapshot, so no check can go stale between a read and the write. The statement is set-based (one
/// join per rule, one upsert of the seq heads with per-conversation counts, one insert per table) because its cost is
/// per statement, not per message: a batch of 30 sends costs about what one did as a loop of a dozen statements.
/// Rules that need no shared row stay in Swift (validation, the sensitive-word filter, reply and combine look-ups)
/// and arrive here as flags (`reply_missing`, `sensitive_reject`) so their failures keep their place in the check
/// order. The Message JSON is rendered once, in Swift, from the seq and timestamp the statement returns.
///
/// Rooms (docs/rooms.md, docs/messages.md#sending): the room's row and the sender's `room_members` row are two more
/// primary-key probes, like the group branch; stored room messages take seqs from `conversation_seqs` ('room',
/// room_id); rooms have no conversation entries, unread counts or mention records; `cache: true` messages go to
/// `room_recent_messages` in a follow-up statement of the same transaction (``cacheRecent``).
///
/// Seqs: each conversation's `conversation_seqs` row is upserted once per batch and locked until commit, so seqs are
/// gap-free, follow the batch order within a conversation and commit order across batches, and timestamps never
/// decrease. Rows are locked in key order so two batches (two nodes) cannot deadlock on seq heads.
package enum MessageWrite {
    /// Which checks an item goes through.
    enum Checks: Int, Sendable {
        /// Written by the server itself (tips messages): no check at all.
        case none = 0
        /// `skip_checks`: dedupe and existence checks, no policy checks.
        case existence = 1
        /// Every check.
        case all = 2
    }

    /// What the statement decided for one item (the check order of docs/messages.md#sending, first failure wins).
    /// The statement names it (`'muted'`), and the names are the raw values.
    enum Outcome: String, Sendable, PostgresOutcome {
        case sent, duplicate, conflict
        case fromNotFound = "from_not_found"
        case toNotFound = "to_not_found"
        case groupDismissed = "group_dismissed"
        case replyNotFound = "reply_not_found"
        case receiptGroupTooLarge = "receipt_group_too_large"
        case muted
        case notMember = "not_member"
        case blocked
        case notFriends = "not_friends"
        case sensitive
        /// A `block` blocklist matched (docs/blocklists.md#actions): nothing is stored.
        case contentBlocked = "content_blocked"
        /// Room: the sender is not in the room (a policy check).
        case notInRoom = "not_in_room"
    }

    /// One message to write, built and validated by the caller.
    struct Item: Sendable {
        var appID: String
        /// Server-clock ms of the request: the message's timestamp unless its conversation's head is later.
        var now: Int64
        /// The message as it will be stored; seq, timestamp and suppression are filled in by `write`.
        var message: Message
        var threadID: String
        var contentHash: String
        var mentionNotify = true
        var replyMissing = false
        var checks: Checks
        var blacklistError = false
        var friendOnly = false
        var sensitiveReject = false
        /// The `message.before_send` hook dropped it: written suppressed (`hook_drop`), like a silent blacklist.
        var hookDrop = false
        /// A `block` blocklist matched: refused (`content_blocked`) after the other policy checks.
        var blocklistBlock = false
        /// A `shadow_block` blocklist matched: written suppressed (`shadow_block`), like a silent blacklist.
        var shadowBlock = false
        /// The blocklist evaluation of the body when a list matched (docs/blocklists.md#actions): its hit is handed
        /// to the moderation hooks once the outcome is known.
        var blocklist: BlocklistCheck?
        var combineID: String?
        /// Message JSON snapshots of a combine, in order.
        var combineItems: [String] = []
        /// Room messages sent with `cache: true`: kept in the room's recent cache (stored or not).
        var cache = false
        /// The body names uploaded files: the statement records which (`message_files`).
        var namesFiles = false
    }

    /// The result of one item.
    struct Written: Sendable {
        var outcome: Outcome
        /// The message with its seq, timestamp and suppression (meaningful when `outcome == .sent`).
        var message: Message
        /// The root's new reply count, for a reply that counted.
        var replyCount: Int64?
        /// For a duplicate: the message its `client_msg_id` first sent.
        var original: (messageID: String, seq: Int64?)?
        /// A sent message's JSON in the app view, rendered once: its `message.sent` event and an app key's answer.
        var appJSON: [UInt8] = []

        /// The sent message as `viewer` sees it (the answer to its send).
        func json(_ viewer: MessageViewer) -> [UInt8] {
            viewer == .app && !appJSON.isEmpty ? appJSON : message.json(viewer)
        }
    }

    /// Writes `items` in the caller's transaction (the caller appends their events, ``appendEvents(_:_:on:)`` or
    /// ``events(of:)``, and commits).
    /// Results are in item order. Items must not repeat a (sender, client_msg_id) pair: a repeat belongs to a later
    /// batch, where it finds the first one's key.
    static func write(_ items: [Item], on db: PostgresConnection) throws -> [Written] {
        if items.isEmpty { return [] }
        let shape = Shape(items)
        let binds: [(any PostgresEncodable)?] =
            shape.contains(.combine) ? [itemRecords.json(items), combinesJSON(items)] : [itemRecords.json(items)]
        // One row per item, in item order: the outcome, the seq, timestamp and suppression of a sent message, the
        // root's new reply count, and the message a duplicate's key first sent.
        let rows = try db.run(
            PostgresStatement(
                PostgresQuery(sql: statement(shape), binds: binds),
                rows: (Outcome, Int64?, Int64?, String?, Int64?, String?, Int64?).self))
        guard rows.count == items.count else { throw APIError(.internalError, "message write returned \(rows.count) of \(items.count) rows") }
        var written: [Written] = []
        written.reserveCapacity(items.count)
        for (item, (outcome, seq, timestamp, suppressed, replyCount, originalID, originalSeq)) in zip(items, rows) {
            var message = item.message
            if outcome == .sent {
                guard let timestamp else { throw APIError(.internalError, "a sent message came back without its timestamp") }
                message.seq = seq
                message.timestamp = timestamp
                message.suppressed = suppressed
            }
            var original: (messageID: String, seq: Int64?)?
            if outcome == .duplicate {
                guard let originalID else { throw APIError(.internalError, "a duplicate came back without its original") }
                original = (originalID, originalSeq)
            }
            written.append(
                Written(
                    outcome: outcome, message: message, replyCount: replyCount, original: original,
                    appJSON: outcome == .sent ? message.json(.app) : []))
        }
        try storeUnstoredKeys(items, written, on: db)
        try cacheRecent(items, written, on: db)
        return written
    }

    /// What `write` would decide for `item` now (dedupe, existence and policy checks), without writing: its outcome,
    /// and whether it would be suppressed by a silent blacklist. Read before a `message.before_send` hook, which is not
    /// called for duplicates, failed sends or suppressed messages; the write checks again.
    static func check(_ item: Item, on db: PostgresConnection) throws -> (outcome: Outcome, suppressed: Bool) {
        let statement = PostgresStatement(
            PostgresQuery(sql: checkStatement(Shape([item])), binds: [itemRecords.json([item])]), rows: (Outcome, Bool).self)
        guard let (outcome, suppressed) = try db.runFirst(statement) else {
            throw APIError(.internalError, "message check returned no outcome")
        }
        return (outcome, suppressed)
    }

    /// Appends the events of the sent items with their ids, in item order (one statement per app, each taking its
    /// app's head lock until the batch commits: call it last). Returns each app's events with their ids, for the node's
    /// readers once the batch has committed. With `committing`, the last statement carries the batch's COMMIT (see
    /// ``EventLog/appendNumbered(_:appID:now:committing:on:)``); with no event to append, the caller commits.
    @discardableResult
    static func appendEvents(_ items: [Item], _ written: [Written], committing: Bool = false, on db: PostgresConnection) throws
        -> [CommittedEvents]
    {
        var eventsByApp: [String: (now: Int64, events: [NewEvent])] = [:]
        for (item, result) in zip(items, written) where result.outcome == .sent {
            eventsByApp[item.appID, default: (item.now, [])].events += events(of: result)
        }
        // Apps in key order, so two nodes' batches take their head locks in the same order.
        let apps = eventsByApp.keys.sorted()
        return try apps.enumerated().map { index, appID in
            let (now, events) = eventsByApp[appID]!
            return try EventLog.appendNumbered(events, appID: appID, now: now, committing: committing && index == apps.count - 1, on: db)
        }
    }

    /// The JSON the dedupe key of an unstored message keeps (a repeated send answers with it): what every recipient
    /// sees, plus `suppressed` when set.
    static func sentJSON(_ message: Message) -> [UInt8] {
        var w = JSONWriter(capacity: 640 + (message.body?.count ?? 0) + (message.reply?.count ?? 0))
        w.beginObject()
        message.writeMembers(&w)
        if let suppressed = message.suppressed {
            w.key(static: "suppressed")
            w.writeString(suppressed)
        }
        w.endObject()
        return w.bytes
    }

    /// `message.sent`, then the root's `message.reply_count_updated` for a counted reply
    /// (docs/events.md#the-event-object). A suppressed message reaches only its sender (and the app), in a group or
    /// room too (a hook's `drop`); group and room events go to the members at write time (``MessageAudience``). The
    /// message is written in the app view (`suppressed`, `push`); user streams and logs leave out what their user may
    /// not see (``EventUserView``, docs/events.md#two-views-of-the-same-event).
    static func events(of written: Written) -> [NewEvent] {
        let message = written.message
        let json = written.appJSON.isEmpty ? message.json(.app) : written.appJSON
        var data = JSONObjectWriter(capacity: json.count + 16)
        data.raw("message", json)
        if message.visibleTo != nil { data["is_targeted"] = true }
        var events = [MessageAudience.event("message.sent", data: data.finish(), about: message)]
        if let count = written.replyCount, let root = message.rootMessageID {
            var o = JSONObjectWriter(capacity: 128)
            o["root_message_id"] = root
            o["conversation_type"] = message.conversationType.rawValue
            o["to"] = message.to
            o["reply_count"] = count
            events.append(MessageAudience.event("message.reply_count_updated", data: o.finish(), about: message))
        }
        return events
    }

    /// Unstored messages have no row to answer a repeated `client_msg_id` from: their key keeps the whole JSON.
    private static func storeUnstoredKeys(_ items: [Item], _ written: [Written], on db: PostgresConnection) throws {
        var w = JSONWriter()
        var count = 0
        w.beginArray()
        for (item, result) in zip(items, written) where result.outcome == .sent && item.message.seq == nil {
            guard let clientMsgID = item.message.clientMsgID else { continue }
            w.object { w in
                w.key(static: "app_id")
                w.writeString(item.appID)
                w.key(static: "sender")
                w.writeString(item.message.from)
                w.key(static: "client_msg_id")
                w.writeString(clientMsgID)
                w.key(static: "message")
                w.writeString(String(decoding: sentJSON(result.message), as: UTF8.self))
            }
            count += 1
        }
        w.endArray()
        guard count > 0 else { return }
        try db.query(
            """
            UPDATE message_keys k SET message = x.message
            FROM json_to_recordset(\(String(decoding: w.bytes, as: UTF8.self))::json) AS x(app_id text, sender text, client_msg_id text, message text)
            WHERE k.app_id = x.app_id AND k.sender = x.sender AND k.client_msg_id = x.client_msg_id
            """)
    }

    /// The recent cache of rooms (`…/messages/recent`, docs/messages.md#history): the delivered room messages sent with
    /// `cache: true`, as the app reads them (``RoomRecent`` strips what a user may not see), and each touched room
    /// trimmed to about ``RoomRecent/capacity`` rows: the existing rows beyond the newest `capacity - n` go, n being
    /// the batch's new rows for that room (the statement does not see its own inserts). One statement, only when a
    /// batch caches.
    private static func cacheRecent(_ items: [Item], _ written: [Written], on db: PostgresConnection) throws {
        var w = JSONWriter()
        var count = 0
        w.beginArray()
        for (ord, (item, result)) in zip(items, written).enumerated()
        where item.cache && result.outcome == .sent && result.message.conversationType == .room && result.message.suppressed == nil {
            w.object { w in
                w.key(static: "ord")
                w.writeInt(ord)
                w.key(static: "app_id")
                w.writeString(item.appID)
                w.key(static: "room_id")
                w.writeString(result.message.to)
                w.key(static: "message")
                w.writeString(String(decoding: result.message.json(.app), as: UTF8.self))
            }
            count += 1
        }
        w.endArray()
        guard count > 0 else { return }
        _ = try db.query(PostgresQuery(sql: recentStatement, binds: [String(decoding: w.bytes, as: UTF8.self), RoomRecent.capacity]))
    }

    private static let recentStatement = """
        WITH x AS (
            SELECT * FROM json_to_recordset($1::json) AS x(ord int, app_id text, room_id text, message text)
        ), added AS (
            -- A room destroyed since the send's check (committed by now) takes its cache with it: nothing to add.
            INSERT INTO room_recent_messages (app_id, room_id, message)
            SELECT app_id, room_id, message FROM x
            WHERE EXISTS (SELECT 1 FROM rooms r WHERE r.app_id = x.app_id AND r.room_id = x.room_id)
            ORDER BY ord
        ), n AS (
            SELECT app_id, room_id, count(*) AS n FROM x GROUP BY app_id, room_id
        )
        DELETE FROM room_recent_messages r USING n
        WHERE r.app_id = n.app_id AND r.room_id = n.room_id
          AND r.position <= (SELECT o.position FROM room_recent_messages o WHERE o.app_id = n.app_id AND o.room_id = n.room_id
                             ORDER BY o.position DESC OFFSET greatest($2::int - n.n, 0) LIMIT 1)
        """

    // MARK: - The statement

    /// One column of the items JSON (`statement`'s `i`); the JSON and the column list both come from ``itemFields``.
    typealias ItemField = JSONRecordset<Item>.Field

    /// The columns the statement reads from the items JSON.
    static let itemFields: [ItemField] = [
        ItemField(name: "ord", type: "int") { w, _, ord in w.writeInt(ord) },
        ItemField(name: "app_id", type: "text") { w, item, _ in w.writeString(item.appID) },
        ItemField(name: "now", type: "bigint") { w, item, _ in w.writeInt(item.now) },
        ItemField(name: "conv_type", type: "text") { w, item, _ in w.writeString(item.message.conversationType.rawValue) },
        ItemField(name: "conv_id", type: "text") { w, item, _ in w.writeString(item.threadID) },
        ItemField(name: "sender", type: "text") { w, item, _ in w.writeString(item.message.from) },
        ItemField(name: "recipient", type: "text") { w, item, _ in w.writeString(item.message.to) },
        ItemField(name: "message_id", type: "text") { w, item, _ in w.writeString(item.message.messageID) },
        ItemField(name: "client_msg_id", type: "text") { w, item, _ in
            if let key = item.message.clientMsgID { w.writeString(key) } else { w.writeNull() }
        },
        ItemField(name: "content_hash", type: "text") { w, item, _ in w.writeString(item.contentHash) },
        ItemField(name: "stored", type: "boolean") { w, item, _ in w.writeBool(item.message.seq != nil) },
        ItemField(name: "type", type: "int") { w, item, _ in w.writeInt(item.message.type) },
        ItemField(name: "body", type: "text") { w, item, _ in writeText(item.message.body, to: &w) },
        ItemField(name: "extended_data", type: "text") { w, item, _ in w.writeString(item.message.extendedData) },
        ItemField(name: "mention_ids", type: "text[]") { w, item, _ in
            w.array { w in for id in item.message.mentionIDs { w.writeString(id) } }
        },
        ItemField(name: "mention_all", type: "boolean") { w, item, _ in w.writeBool(item.message.mentionAll) },
        ItemField(name: "mention_notify", type: "boolean") { w, item, _ in w.writeBool(item.mentionNotify) },
        ItemField(name: "reply", type: "text") { w, item, _ in writeText(item.message.reply, to: &w) },
        ItemField(name: "root_message_id", type: "text") { w, item, _ in
            if let root = item.message.rootMessageID { w.writeString(root) } else { w.writeNull() }
        },
        ItemField(name: "reply_missing", type: "boolean") { w, item, _ in w.writeBool(item.replyMissing) },
        ItemField(name: "priority", type: "smallint") { w, item, _ in w.writeInt(item.message.priority) },
        ItemField(name: "need_receipt", type: "boolean") { w, item, _ in w.writeBool(item.message.needReceipt) },
        ItemField(name: "no_unread", type: "boolean") { w, item, _ in w.writeBool(item.message.noUnread) },
        ItemField(name: "repeat_count", type: "int") { w, item, _ in w.writeInt(item.message.repeatCount) },
        ItemField(name: "push", type: "text") { w, item, _ in writeText(item.message.push, to: &w) },
        ItemField(name: "checks", type: "int") { w, item, _ in w.writeInt(item.checks.rawValue) },
        ItemField(name: "blacklist_error", type: "boolean") { w, item, _ in w.writeBool(item.blacklistError) },
        ItemField(name: "friend_only", type: "boolean") { w, item, _ in w.writeBool(item.friendOnly) },
        ItemField(name: "sensitive_reject", type: "boolean") { w, item, _ in w.writeBool(item.sensitiveReject) },
        ItemField(name: "hook_drop", type: "boolean") { w, item, _ in w.writeBool(item.hookDrop) },
        ItemField(name: "blocklist_block", type: "boolean") { w, item, _ in w.writeBool(item.blocklistBlock) },
        ItemField(name: "shadow_block", type: "boolean") { w, item, _ in w.writeBool(item.shadowBlock) },
        ItemField(name: "combine_id", type: "text") { w, item, _ in
            if let combineID = item.combineID { w.writeString(combineID) } else { w.writeNull() }
        },
        ItemField(name: "visible_to", type: "text[]") { w, item, _ in
            if let ids = item.message.visibleTo { w.array { w in for id in ids { w.writeString(id) } } } else { w.writeNull() }
        },
    ]

    /// The items as the JSON array the statement reads, one object per item, positions in the batch as `ord`.
    static let itemRecords = JSONRecordset(itemFields)

    /// Stored JSON (body, reply, push) travels as a JSON string, so PostgreSQL stores its exact bytes.
    private static func writeText(_ json: [UInt8]?, to w: inout JSONWriter) {
        guard let json else { return w.writeNull() }
        json.withUnsafeBufferPointer { w.writeString(utf8: $0) }
    }

    /// The snapshots of every combine in the batch (`statement`'s `x`).
    private static func combinesJSON(_ items: [Item]) -> String {
        var w = JSONWriter()
        w.beginArray()
        for item in items {
            guard let combineID = item.combineID else { continue }
            for (position, snapshot) in item.combineItems.enumerated() {
                w.object { w in
                    w.key(static: "combine_id")
                    w.writeString(combineID)
                    w.key(static: "position")
                    w.writeInt(position)
                    w.key(static: "message")
                    w.writeString(snapshot)
                }
            }
        }
        w.endArray()
        return String(decoding: w.bytes, as: UTF8.self)
    }

    /// What a batch holds, which decides the parts of the statement it runs: each part costs its executor set-up and
    /// its nodes on every batch whether or not a row goes through it (a batch of plain peer texts ran the group, reply,
    /// room and combine parts for nothing: a sixth of the writer backend's CPU was executor start-up), so the statement
    /// is composed of the parts the batch needs. Each shape is one prepared statement on the writer's connection.
    struct Shape: OptionSet, Hashable, Sendable {
        let rawValue: Int
        static let peer = Shape(rawValue: 1 << 0)
        static let group = Shape(rawValue: 1 << 1)
        static let room = Shape(rawValue: 1 << 2)
        /// Some item has a `client_msg_id`: the dedupe probe and the key insert.
        static let keyed = Shape(rawValue: 1 << 3)
        /// Some item is checked (not a tips message): the sender probe.
        static let checked = Shape(rawValue: 1 << 4)
        /// Some peer item is fully checked: the blacklist probe.
        static let policy = Shape(rawValue: 1 << 5)
        /// Some peer item needs a mutual friendship (`friend_only_c2c`).
        static let friendOnly = Shape(rawValue: 1 << 6)
        /// Some item replies to a message: the root's reply count.
        static let reply = Shape(rawValue: 1 << 7)
        static let combine = Shape(rawValue: 1 << 8)
        /// Some item's body names uploaded files: the `message_files` rows.
        static let files = Shape(rawValue: 1 << 9)

        /// The names `parley sql` takes (the benchmarks ask the binary for the statement they run).
        static let names: [(String, Shape)] = [
            ("peer", .peer), ("group", .group), ("room", .room), ("keyed", .keyed), ("checked", .checked), ("policy", .policy),
            ("friend_only", .friendOnly), ("reply", .reply), ("combine", .combine), ("files", .files),
        ]

        init(rawValue: Int) { self.rawValue = rawValue }

        init(_ items: [Item]) {
            var shape: Shape = []
            for item in items {
                switch item.message.conversationType {
                case .peer:
                    shape.insert(.peer)
                    if item.checks == .all { shape.insert(.policy) }
                    if item.checks == .all && item.friendOnly { shape.insert(.friendOnly) }
                case .group: shape.insert(.group)
                case .room: shape.insert(.room)
                }
                if item.message.clientMsgID != nil { shape.insert(.keyed) }
                if item.checks != .none { shape.insert(.checked) }
                if item.message.rootMessageID != nil { shape.insert(.reply) }
                if item.combineID != nil { shape.insert(.combine) }
                if item.namesFiles { shape.insert(.files) }
            }
            self = shape
        }
    }

    /// The write statement of the shape named by `names` (``Shape/names``), for `parley sql`; nil for an unknown name.
    package static func statement(named names: [String]) -> String? {
        var shape: Shape = []
        for name in names {
            guard let part = Shape.names.first(where: { $0.0 == name })?.1 else { return nil }
            shape.insert(part)
        }
        return statement(shape)
    }

    /// The part names ``statement(named:)`` takes.
    package static var partNames: [String] { Shape.names.map(\.0) }

    /// The statement of each shape, composed once (``statement(_:)``).
    private static let statements = LockedValue<[Shape: String]>([:])

    /// The write statement for a batch of `shape`. Data-modifying CTEs all run (referenced or not) in one snapshot;
    /// none reads another's writes except through RETURNING, and no row is modified twice (entries are aggregated per
    /// row first). Outcome numbers are ``Outcome``'s raw values.
    static func statement(_ shape: Shape) -> String {
        if let known = statements.withLock({ $0[shape] }) { return known }
        let text = composeStatement(shape)
        statements.withLock { $0[shape] = text }
        return text
    }

    /// The read-only statement of ``check(_:on:)``: the outcome and the suppression of one item.
    static func checkStatement(_ shape: Shape) -> String {
        checked(shape) + " SELECT outcome, suppressed IS NOT NULL FROM checked"
    }

    // MARK: - Fragments shared with the import (MessageImport.statement)

    /// The dedupe rule, first of the checks: a `client_msg_id` (an import's dedupe key) already used answers the
    /// message it first sent when the content is the same, and a conflict when it is not. Reads ``dedupeProbe(keyColumn:)``.
    static let dedupeRule =
        "WHEN k.content_hash IS NOT NULL THEN CASE WHEN k.content_hash = i.content_hash "
        + "THEN \(Outcome.duplicate.sql) ELSE \(Outcome.conflict.sql) END"

    /// The key row of item `i` (columns `app_id`, `sender` and `keyColumn`), as `k`: a point look-up by primary key per
    /// item (LATERAL with LIMIT keeps it a parameterised index probe; json_to_recordset is estimated at 100 rows, which
    /// on small tables made the planner hash whole tables).
    static func dedupeProbe(keyColumn: String) -> String {
        """
        LEFT JOIN LATERAL (
            SELECT k.content_hash, k.message_id, k.seq FROM message_keys k
            WHERE k.app_id = i.app_id AND k.sender = i.sender AND k.client_msg_id = i.\(keyColumn) LIMIT 1
        ) k ON true
        """
    }

    /// The seq allocator of every write of messages: `counts` (the rows of `source` per conversation, and the latest of
    /// their `time`) and `heads`, one upsert of each conversation's `conversation_seqs` row, which stays locked until
    /// the batch commits, so the seqs of a conversation are handed out gap-free and in commit order. `source` names
    /// rows with `app_id`, `conv_type` and `conv_id`; `heads` returns each conversation's new `last_seq` and `last_ts`.
    static func seqHeads(from source: String, time: String) -> String {
        """
        counts AS (
            SELECT app_id, conv_type, conv_id, count(*) AS n, max(\(time)) AS now FROM \(source)
            GROUP BY app_id, conv_type, conv_id
        ), heads AS (
            INSERT INTO conversation_seqs AS h (app_id, conv_type, conv_id, last_seq, last_ts)
            SELECT app_id, conv_type, conv_id, n, now FROM counts ORDER BY app_id, conv_type, conv_id
            ON CONFLICT (app_id, conv_type, conv_id)
            DO UPDATE SET last_seq = h.last_seq + excluded.last_seq, last_ts = greatest(h.last_ts, excluded.last_ts)
            RETURNING h.app_id, h.conv_type, h.conv_id, h.last_seq, h.last_ts
        )
        """
    }

    /// The `i` and `checked` CTEs: the items and the outcome of the dedupe, existence and policy checks for each, read
    /// in one snapshot. The rules are written in their check order; a rule whose rows the batch cannot have is left out
    /// with its probe.
    static func checked(_ shape: Shape) -> String {
        let peer = shape.contains(.peer)
        let group = shape.contains(.group)
        let room = shape.contains(.room)
        let sender = shape.contains(.checked)
        let blacklist = peer && shape.contains(.policy)
        var rules: [String] = []
        if shape.contains(.keyed) { rules.append(dedupeRule) }
        rules.append("WHEN i.checks = 0 THEN \(Outcome.sent.sql)")
        if sender { rules.append("WHEN u.user_id IS NULL OR u.deleted_at IS NOT NULL THEN \(Outcome.fromNotFound.sql)") }
        if group {
            rules.append("WHEN i.conv_type = 'group' AND g.group_id IS NULL THEN \(Outcome.toNotFound.sql)")
            rules.append("WHEN i.conv_type = 'group' AND g.dismissed_at IS NOT NULL THEN \(Outcome.groupDismissed.sql)")
        }
        if peer { rules.append("WHEN i.conv_type = 'peer' AND r.user_id IS NULL THEN \(Outcome.toNotFound.sql)") }
        if room { rules.append("WHEN i.conv_type = 'room' AND ro.found IS NULL THEN \(Outcome.toNotFound.sql)") }
        rules.append("WHEN i.reply_missing THEN \(Outcome.replyNotFound.sql)")
        if group {
            rules.append(
                "WHEN i.conv_type = 'group' AND i.need_receipt AND (g.is_big_group OR g.member_count > 500) "
                    + "THEN \(Outcome.receiptGroupTooLarge.sql)")
        }
        rules.append("WHEN i.checks = 1 THEN \(Outcome.sent.sql)")
        if sender { rules.append("WHEN u.muted_until = -1 OR u.muted_until > i.now THEN \(Outcome.muted.sql)") }
        if group { rules.append("WHEN i.conv_type = 'group' AND gm.user_id IS NULL THEN \(Outcome.notMember.sql)") }
        if room { rules.append("WHEN i.conv_type = 'room' AND rm.found IS NULL THEN \(Outcome.notInRoom.sql)") }
        if group {
            rules.append(
                """
                WHEN i.conv_type = 'group' AND (gm.muted_until = -1 OR gm.muted_until > i.now OR (
                            g.mute_mode <> 'none' AND (g.mute_expires_at = -1 OR g.mute_expires_at > i.now) AND gm.role <> 1
                            AND (g.mute_mode = 'all' OR (g.mute_mode = 'normal' AND gm.role >= 3)
                                 OR (g.mute_mode = 'custom' AND gm.role = ANY(g.mute_roles))))) THEN \(Outcome.muted.sql)
                """)
        }
        if blacklist {
            rules.append("WHEN b.found AND i.blacklist_error THEN \(Outcome.blocked.sql)")
            rules.append("WHEN b.found THEN \(Outcome.sent.sql)")
        }
        if shape.contains(.friendOnly) {
            rules.append("WHEN i.conv_type = 'peer' AND i.friend_only AND fr.mutual < 2 THEN \(Outcome.notFriends.sql)")
        }
        rules.append("WHEN i.sensitive_reject THEN \(Outcome.sensitive.sql)")
        rules.append("WHEN i.blocklist_block THEN \(Outcome.contentBlocked.sql)")
        let suppressed =
            blacklist
            ? "CASE WHEN b.found AND NOT i.blacklist_error THEN 'blacklist' WHEN i.hook_drop THEN 'hook_drop' WHEN i.shadow_block THEN 'shadow_block' END"
            : "CASE WHEN i.hook_drop THEN 'hook_drop' WHEN i.shadow_block THEN 'shadow_block' END"
        // A receipt's recipients, fixed at send (Migrations/0020): the other user, or the members but the sender.
        // A targeted message's: the members it lists but the sender.
        let receiptRecipients =
            group
            ? "CASE WHEN i.conv_type = 'group' AND i.visible_to IS NOT NULL THEN cardinality(array_remove(i.visible_to, i.sender)) "
                + "WHEN i.conv_type = 'group' THEN g.member_count - (gm.user_id IS NOT NULL)::int ELSE 1 END" : "1"
        // Point look-ups by primary key, one per item: LATERAL with LIMIT keeps them parameterised index probes
        // (json_to_recordset is estimated at 100 rows, which on small tables made the planner hash whole tables).
        var probes: [String] = []
        if shape.contains(.keyed) {
            probes.append(dedupeProbe(keyColumn: "client_msg_id"))
        }
        if sender {
            probes.append(
                """
                LEFT JOIN LATERAL (
                    SELECT u.user_id, u.muted_until, u.deleted_at FROM users u WHERE u.app_id = i.app_id AND u.user_id = i.sender LIMIT 1
                ) u ON true
                """)
        }
        if peer {
            probes.append(
                """
                LEFT JOIN LATERAL (
                    SELECT r.user_id FROM users r
                    WHERE i.conv_type = 'peer' AND r.app_id = i.app_id AND r.user_id = i.recipient AND r.deleted_at IS NULL LIMIT 1
                ) r ON true
                """)
        }
        if group {
            probes.append(
                """
                LEFT JOIN LATERAL (
                    SELECT g.group_id, g.dismissed_at, g.is_big_group, g.member_count, g.mute_mode, g.mute_expires_at, g.mute_roles
                    FROM groups g WHERE i.conv_type = 'group' AND g.app_id = i.app_id AND g.group_id = i.recipient LIMIT 1
                ) g ON true
                LEFT JOIN LATERAL (
                    SELECT gm.user_id, gm.role, gm.muted_until FROM group_members gm
                    WHERE i.conv_type = 'group' AND gm.app_id = i.app_id AND gm.group_id = i.recipient AND gm.user_id = i.sender LIMIT 1
                ) gm ON true
                """)
        }
        if room {
            probes.append(
                """
                LEFT JOIN LATERAL (
                    SELECT true AS found FROM rooms ro
                    WHERE i.checks > 0 AND i.conv_type = 'room' AND ro.app_id = i.app_id AND ro.room_id = i.recipient LIMIT 1
                ) ro ON true
                LEFT JOIN LATERAL (
                    SELECT true AS found FROM room_members rm
                    WHERE i.checks = 2 AND i.conv_type = 'room' AND rm.app_id = i.app_id AND rm.room_id = i.recipient
                      AND rm.user_id = i.sender
                    LIMIT 1
                ) rm ON true
                """)
        }
        if blacklist {
            probes.append(
                """
                LEFT JOIN LATERAL (
                    SELECT true AS found FROM blacklist b
                    WHERE i.checks = 2 AND i.conv_type = 'peer' AND b.app_id = i.app_id AND b.user_id = i.recipient
                      AND b.blocked_id = i.sender
                    LIMIT 1
                ) b ON true
                """)
        }
        if shape.contains(.friendOnly) {
            probes.append(
                """
                CROSS JOIN LATERAL (
                    SELECT count(*) AS mutual FROM friends f
                    WHERE i.checks = 2 AND i.friend_only AND i.conv_type = 'peer' AND f.app_id = i.app_id
                      AND ((f.user_id = i.sender AND f.friend_id = i.recipient) OR (f.user_id = i.recipient AND f.friend_id = i.sender))
                ) fr
                """)
        }
        let original =
            shape.contains(.keyed) ? "k.message_id AS original_id, k.seq AS original_seq" : "NULL::text AS original_id, NULL::bigint AS original_seq"
        return """
            WITH i AS (
                SELECT * FROM json_to_recordset($1::json) AS i(
            \(indented(itemRecords.columnList, 8)))
            ), checked AS (
                SELECT i.*,
                    CASE
            \(indented(rules.joined(separator: "\n"), 12))
                        ELSE \(Outcome.sent.sql)
                    END AS outcome,
                    \(suppressed) AS suppressed,
                    CASE WHEN i.need_receipt AND i.stored THEN \(receiptRecipients) END AS receipt_recipients,
                    \(original)
                FROM i
            \(indented(probes.joined(separator: "\n"), 4))
            )
            """
    }

    /// `text` with every line indented by `spaces` (for readable statements in the server's logs).
    private static func indented(_ text: String, _ spaces: Int) -> String {
        let pad = String(repeating: " ", count: spaces)
        return text.split(separator: "\n", omittingEmptySubsequences: false).map { pad + $0 }.joined(separator: "\n")
    }

    /// The write statement for a batch of `shape`: ``checked(_:)``, the seq heads, then the rows of each kind the batch
    /// has.
    private static func composeStatement(_ shape: Shape) -> String {
        var parts: [String] = [
            """
            sent AS (
                SELECT * FROM checked WHERE outcome = \(Outcome.sent.sql)
            ), \(seqHeads(from: "sent WHERE stored", time: "now")), placed AS (
                SELECT s.*,
                       h.last_seq - c.n + row_number() OVER (PARTITION BY s.app_id, s.conv_type, s.conv_id, s.stored ORDER BY s.ord) AS seq,
                       coalesce(h.last_ts, s.now) AS ts
                FROM sent s
                LEFT JOIN counts c ON s.stored AND c.app_id = s.app_id AND c.conv_type = s.conv_type AND c.conv_id = s.conv_id
                LEFT JOIN heads h ON s.stored AND h.app_id = s.app_id AND h.conv_type = s.conv_type AND h.conv_id = s.conv_id
            )
            """,
            """
            stored AS (
                INSERT INTO messages (app_id, conv_type, conv_id, seq, message_id, client_msg_id, sender, recipient, type, body,
                                      extended_data, mention_ids, mention_all, mention_notify, reply, root_message_id, priority,
                                      need_receipt, receipt_recipients, no_unread, repeat_count, push, suppressed, timestamp,
                                      search_text, visible_to)
                SELECT app_id, conv_type, conv_id, seq, message_id, client_msg_id, sender, recipient, type, body, extended_data,
                       coalesce(mention_ids, '{}'), mention_all, mention_notify, reply, root_message_id, priority, need_receipt,
                       receipt_recipients, no_unread, repeat_count, push, suppressed, ts, parley_search_text(type, body), visible_to
                FROM placed WHERE stored ORDER BY ord
            )
            """,
        ]
        if shape.contains(.keyed) {
            parts.append(
                """
                keyed AS (
                    INSERT INTO message_keys (app_id, sender, client_msg_id, content_hash, message_id, conv_type, conv_id, recipient,
                                              type, seq, timestamp)
                    SELECT app_id, sender, client_msg_id, content_hash, message_id, conv_type, conv_id, recipient, type, seq, ts
                    FROM placed WHERE client_msg_id IS NOT NULL
                )
                """)
        }
        if shape.contains(.peer) {
            parts.append(
                """
                peer_entries AS (
                    -- Both sides of each pair, aggregated per row: the sender has read up to its own messages; the recipient's
                    -- entry is created or un-deleted (not for suppressed messages).
                    INSERT INTO conversations AS c (app_id, user_id, conv_type, conv_id, thread_id, read_seq, last_seq, last_ts,
                                                    order_key, created_at, updated_at)
                    SELECT e.app_id, e.user_id, 'peer', e.other, e.thread, max(e.read_seq), max(e.seq), max(e.ts), max(e.ts),
                           max(e.now), max(e.now)
                    FROM (SELECT p.app_id, p.sender AS user_id, p.recipient AS other, p.conv_id AS thread, p.seq AS read_seq, p.seq,
                                 p.ts, p.now
                          FROM placed p WHERE p.stored AND p.conv_type = 'peer'
                          UNION ALL
                          SELECT p.app_id, p.recipient, p.sender, p.conv_id, 0, p.seq, p.ts, p.now
                          FROM placed p WHERE p.stored AND p.conv_type = 'peer' AND p.suppressed IS NULL) e
                    GROUP BY e.app_id, e.user_id, e.other, e.thread
                    ORDER BY e.app_id, e.user_id, e.other
                    ON CONFLICT (app_id, user_id, conv_type, conv_id) DO UPDATE SET
                        read_seq = greatest(c.read_seq, excluded.read_seq),
                        last_seq = greatest(c.last_seq, excluded.last_seq),
                        last_ts = greatest(c.last_ts, excluded.last_ts),
                        order_key = greatest(c.order_key, excluded.last_ts),
                        deleted = false,
                        updated_at = excluded.updated_at
                )
                """)
        }
        if shape.contains(.group) {
            parts.append(
                """
                group_senders AS (
                    SELECT app_id, sender, conv_id, max(seq) AS seq, max(now) AS now FROM placed
                    WHERE stored AND conv_type = 'group' GROUP BY app_id, sender, conv_id
                ), group_read AS (
                    -- Members' entries follow the group head (Migrations/0009): only the sender's read position moves.
                    UPDATE conversations c SET read_seq = greatest(c.read_seq, s.seq), deleted = false, updated_at = s.now
                    FROM group_senders s
                    WHERE c.app_id = s.app_id AND c.user_id = s.sender AND c.conv_type = 'group' AND c.conv_id = s.conv_id
                      AND c.follows_group
                ), group_undeleted AS (
                    -- Deleted entries of the group reappear on its next message they see: a targeted message only those
                    -- of the members it lists (`targets`; `to_all` when some message of the batch is untargeted).
                    UPDATE conversations c SET deleted = false, updated_at = g.now
                    FROM (SELECT p.app_id, p.conv_id, max(p.now) AS now, bool_or(p.visible_to IS NULL) AS to_all,
                                 array_agg(t.user_id) FILTER (WHERE t.user_id IS NOT NULL) AS targets
                          FROM placed p LEFT JOIN LATERAL unnest(p.visible_to) AS t(user_id) ON true
                          WHERE p.stored AND p.conv_type = 'group' AND p.suppressed IS NULL
                          GROUP BY p.app_id, p.conv_id) g
                    WHERE c.app_id = g.app_id AND c.thread_id = g.conv_id AND c.deleted AND c.follows_group AND c.conv_type = 'group'
                      AND (g.to_all OR c.user_id = ANY(g.targets))
                      AND NOT EXISTS (SELECT 1 FROM group_senders s
                                      WHERE s.app_id = c.app_id AND s.sender = c.user_id AND s.conv_id = c.conv_id)
                )
                """)
        }
        if shape.contains(.reply) {
            parts.append(
                """
                replied AS (
                    UPDATE messages m SET reply_count = m.reply_count + r.n
                    FROM (SELECT app_id, root_message_id, count(*) AS n FROM placed
                          WHERE stored AND root_message_id IS NOT NULL AND suppressed IS NULL GROUP BY app_id, root_message_id) r
                    WHERE m.app_id = r.app_id AND m.message_id = r.root_message_id
                    RETURNING m.app_id, m.message_id, m.reply_count, r.n
                )
                """)
        }
        if shape.contains(.combine) {
            parts.append(
                """
                combined AS (
                    INSERT INTO message_combines (app_id, combine_id, position, message)
                    SELECT p.app_id, x.combine_id, x.position, x.message
                    FROM json_to_recordset($2::json) AS x(combine_id text, position int, message text)
                    JOIN placed p ON p.stored AND p.combine_id = x.combine_id
                )
                """)
        }
        if shape.contains(.files) {
            parts.append(
                """
                file_refs AS (
                    -- Which files each stored message names (Migrations/0025): its readers may download them.
                    INSERT INTO message_files (app_id, file_id, message_id)
                    SELECT DISTINCT p.app_id, f.id #>> '{}', p.message_id
                    FROM placed p CROSS JOIN LATERAL jsonb_path_query(p.body::jsonb, 'lax $.**.file_id') AS f(id)
                    WHERE p.stored AND p.type IN (10, 11, 12, 13, 14)
                    ON CONFLICT DO NOTHING
                )
                """)
        }
        var final = """
            SELECT c.outcome, p.seq, p.ts, p.suppressed, \(shape.contains(.reply) ? "rc.reply_count" : "NULL::bigint"), c.original_id, c.original_seq
            FROM checked c
            LEFT JOIN placed p ON p.ord = c.ord
            """
        if shape.contains(.reply) {
            final += """

                LEFT JOIN (SELECT p.ord, r.reply_count - r.n
                                      + row_number() OVER (PARTITION BY p.app_id, p.root_message_id ORDER BY p.ord) AS reply_count
                           FROM placed p JOIN replied r ON r.app_id = p.app_id AND r.message_id = p.root_message_id
                           WHERE p.stored AND p.suppressed IS NULL) rc ON rc.ord = c.ord
                """
        }
        final += "\nORDER BY c.ord"
        return checked(shape) + ", " + parts.joined(separator: ", ") + "\n" + final
    }
}
