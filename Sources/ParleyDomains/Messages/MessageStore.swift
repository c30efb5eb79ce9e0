import ParleyAPI
import ParleyCore
import ParleyPostgres

/// SQL for messages (docs/messages.md). No rules here: callers validate inputs and map outcomes to problems.
enum MessageStore {
    /// The thread key of a peer conversation: the unordered pair (user ids never contain a space).
    static func peerThread(_ a: String, _ b: String) -> String { a < b ? a + " " + b : b + " " + a }

    /// The thread key (`messages.conv_id`) of a message from `from` to `to`: the pair for peers, else `to`.
    static func thread(_ type: ConversationType, _ from: String, _ to: String) -> String {
        type == .peer ? peerThread(from, to) : to
    }

    // MARK: - Rows

    /// The columns ``message(_:at:)`` decodes, in ``MessageColumn`` order, for a `messages` row aliased `alias`.
    static func columns(_ alias: String = "m") -> String {
        MessageColumn.allCases.map { "\(alias).\($0.name)" }.joined(separator: ", ")
    }

    /// The message columns of `messages m`, computed once.
    private static let messageColumns = columns()

    /// The message whose columns start at `offset` (nil when its `message_id` is NULL, as after a LEFT JOIN).
    static func message(_ row: PostgresRow, at offset: Int = 0) throws -> Message? {
        let message = MessageRow(row, at: offset)
        if message[.messageID].isNull { return nil }
        return try message.decode()
    }

    // MARK: - Dedupe keys

    /// A dedupe key with its stored message, if the message still exists.
    struct StoredKey {
        var messageID: String
        var conversationType: ConversationType
        var to: String
        var seq: Int64?
        var timestamp: Int64
        /// The whole JSON of an unstored message.
        var unstoredJSON: [UInt8]?
        var message: Message?
    }

    static func key(appID: String, from: String, clientMsgID: String, on db: PostgresConnection) throws -> StoredKey? {
        let result = try db.query(
            """
            SELECT k.message_id, k.conv_type, k.recipient, k.seq, k.timestamp, k.message, \(unsafeSQL: columns("m"))
            FROM message_keys k LEFT JOIN messages m ON m.app_id = k.app_id AND m.message_id = k.message_id
            WHERE k.app_id = \(appID) AND k.sender = \(from) AND k.client_msg_id = \(clientMsgID)
            """)
        guard let row = result.first else { return nil }
        let (messageID, conversationType, to, seq, timestamp, unstoredJSON) = try row.decode(
            (String, String, String, Int64?, Int64, PostgresTextBytes?).self, at: 0)
        return StoredKey(
            messageID: messageID, conversationType: ConversationType(rawValue: conversationType) ?? .peer, to: to, seq: seq,
            timestamp: timestamp, unstoredJSON: unstoredJSON?.bytes, message: try message(row, at: 6))
    }

    // MARK: - Reads

    package static func fetch(appID: String, messageID: String, on db: PostgresConnection) throws -> Message? {
        let result = try db.query("SELECT \(unsafeSQL: messageColumns) FROM messages m WHERE m.app_id = \(appID) AND m.message_id = \(messageID)")
        return try result.first.flatMap { try message($0) }
    }

    /// The stored message `messageID` with its row locked (every change of a stored message holds it: revoke, edit,
    /// delete, pin, reactions).
    static func lock(appID: String, messageID: String, on db: PostgresConnection) throws -> Message? {
        let result = try db.query(
            "SELECT \(unsafeSQL: messageColumns) FROM messages m WHERE m.app_id = \(appID) AND m.message_id = \(messageID) FOR UPDATE")
        return try result.first.flatMap { try message($0) }
    }

    /// ``lock(appID:messageID:on:)``, and whether any message replies to it (an index probe: ``markGone`` changes the
    /// replies only when there are some).
    static func lockProbingReplies(appID: String, messageID: String, on db: PostgresConnection) throws -> (message: Message, isRepliedTo: Bool)? {
        let result = try db.query(
            """
            SELECT EXISTS (SELECT 1 FROM messages r
                           WHERE r.app_id = \(appID) AND ((r.reply::json) ->> 'message_id') = \(messageID) AND r.reply IS NOT NULL),
                   \(unsafeSQL: messageColumns)
            FROM messages m WHERE m.app_id = \(appID) AND m.message_id = \(messageID) FOR UPDATE OF m
            """)
        guard let row = result.first, let message = try message(row, at: 1) else { return nil }
        return (message, try row.decode(Bool.self, at: 0))
    }

    /// Whether `userID` deleted `messageID` for itself (delete with `scope=self`, docs/messages.md#revoke-edit-delete).
    static func isHidden(appID: String, messageID: String, from userID: String, on db: PostgresConnection) throws -> Bool {
        try db.query(
            "SELECT 1 FROM message_hidden WHERE app_id = \(appID) AND message_id = \(messageID) AND user_id = \(userID)"
        ).first != nil
    }

    static func fetchMany(appID: String, messageIDs: [String], on db: PostgresConnection) throws -> [Message] {
        if messageIDs.isEmpty { return [] }
        let result = try db.query(
            "SELECT \(unsafeSQL: messageColumns) FROM messages m WHERE m.app_id = \(appID) AND m.message_id = ANY(\(messageIDs)::text[])")
        return try result.rows.compactMap { try message($0) }
    }

    /// Filters and bounds of a history read (docs/messages.md#history); seq bounds are exclusive, time bounds [start,
    /// end).
    struct HistoryQuery {
        var afterSeq: Int64 = 0
        var beforeSeq: Int64 = .max
        var startAt: Int64 = .min
        var endAt: Int64 = .max
        var types: [Int64]?
        var forward = false
        /// The viewing user of a user view (its `cleared_seq` applies, others' suppressed messages and targeted messages
        /// that do not list it are hidden); rows come only while that user exists and is not soft-deleted
        /// (`UserService.requireActive`, folded in).
        var viewer: String?
        /// App key only: also the messages the viewer deleted for itself and other users' suppressed messages.
        var includeHidden = false
        /// Group history: return rows only while the group is live and the viewer (if any) is a member, so the
        /// access check costs no extra round trip; an empty answer leaves the reason to the caller.
        var requireGroupAccess = false
        var limit = 20
        /// The user token's user (`self_included` in reaction summaries is for answers to a user token only).
        var tokenUser: String?
    }

    /// The message columns of a history page: the reaction summary of a reacted message carries `self_included`
    /// for the user token's user ($14; its stored form otherwise), rendered by the same function that stores it
    /// (Migrations/functions/parley_reaction_summary.sql) from the message's per-type counts.
    private static let historyColumns = MessageColumn.allCases.map { column in
        guard column == .reactions else { return "m.\(column.name)" }
        return """
            CASE WHEN $14::text IS NULL OR m.reactions = '[]' THEN m.reactions ELSE (
                SELECT parley_reaction_summary(m.app_id, m.message_id, $14, array_agg(t.reaction_type), array_agg(t.count),
                                               array_agg(t.first_at))
                FROM message_reaction_types t WHERE t.app_id = m.app_id AND t.message_id = m.message_id) END
            """
    }.joined(separator: ", ")

    /// The history SELECT in both orders, built once: GET history is the hottest read, and assembling ~1.5 KB of SQL
    /// per request showed in its profile (bench/RESULTS.md).
    ///
    /// `timestamp + 0` keeps the time bounds off the BRIN index of Migrations/0010: the pool's generic plan cannot
    /// see that the bounds are usually open, and with the index usable it chose a bitmap scan of the whole
    /// conversation plus a sort (130 ms on a 70,000-message group) over walking `messages_pkey` from the end.
    static let historySQL: (ascending: String, descending: String) = {
        func sql(_ order: String) -> String {
            """
            SELECT \(historyColumns) FROM messages m
            WHERE m.app_id = $1 AND m.conv_type = $2 AND m.conv_id = $3 AND m.seq > $4 AND m.seq < $5
              AND m.timestamp + 0 >= $6 AND m.timestamp + 0 < $7 AND ($8::int[] IS NULL OR m.type = ANY($8::int[]))
              AND ($9::text IS NULL OR $10 OR m.suppressed IS NULL OR m.sender = $9)
              AND ($9::text IS NULL OR m.visible_to IS NULL OR m.sender = $9 OR $9 = ANY(m.visible_to))
              AND ($9::text IS NULL OR m.seq > coalesce((SELECT c.cleared_seq FROM conversations c
                    WHERE c.app_id = $1 AND c.user_id = $9 AND c.conv_type = $2 AND c.conv_id = $11), 0))
              AND (NOT $13 OR EXISTS (SELECT 1 FROM groups g WHERE g.app_id = $1 AND g.group_id = $3 AND g.dismissed_at IS NULL
                    AND ($9::text IS NULL OR EXISTS (SELECT 1 FROM group_members gm
                                                     WHERE gm.app_id = $1 AND gm.group_id = $3 AND gm.user_id = $9))))
              AND ($9::text IS NULL OR EXISTS (SELECT 1 FROM users u WHERE u.app_id = $1 AND u.user_id = $9 AND u.deleted_at IS NULL))
              AND ($9::text IS NULL OR $10 OR NOT EXISTS (SELECT 1 FROM message_hidden h
                    WHERE h.app_id = $1 AND h.user_id = $9 AND h.conv_type = $2 AND h.conv_id = $3 AND h.seq = m.seq))
            ORDER BY m.seq \(order) LIMIT $12
            """
        }
        return (sql("ASC"), sql("DESC"))
    }()

    /// Up to `limit` stored messages of one conversation in seq order (`forward`) or reverse, as rows in
    /// ``MessageColumn`` order (read them with ``MessageRow``).
    /// Whether a conversation exists: both users of the peer `threadID`, the group `id` (dismissed too) or the room.
    static func conversationExists(
        appID: String, _ type: ConversationType, threadID: String, id: String, on db: PostgresConnection
    ) throws -> Bool {
        switch type {
        case .peer:
            let users = threadID.split(separator: " ").map(String.init)
            return try db.query(
                "SELECT count(*) FROM users WHERE app_id = \(appID) AND user_id = ANY(\(users)::text[])"
            ).decodeFirst(Int64.self) == 2
        case .group:
            return try db.query("SELECT 1::bigint FROM groups WHERE app_id = \(appID) AND group_id = \(id)").decodeFirst(Int64.self) != nil
        case .room:
            return try db.query("SELECT 1::bigint FROM rooms WHERE app_id = \(appID) AND room_id = \(id)").decodeFirst(Int64.self) != nil
        }
    }

    static func history(
        appID: String, conversationType: ConversationType, threadID: String, peer: String, query: HistoryQuery, on db: PostgresConnection
    )
        throws -> PostgresResult
    {
        // Numbered parameters over text built once (see historySQL).
        try db.query(
            PostgresQuery(
                sql: query.forward ? historySQL.ascending : historySQL.descending,
                binds: [
                    appID, conversationType.rawValue, threadID, query.afterSeq, query.beforeSeq, query.startAt, query.endAt, query.types,
                    query.viewer, query.includeHidden, peer, query.limit, query.requireGroupAccess, query.tokenUser,
                ]))
    }

    /// Whether group `groupID` is dismissed and `userID` is a current member of it (false without a user); nil when
    /// there is no such group. Messages read the group rows themselves: groups write messages (tips), so the message
    /// domain stays below the group domain.
    static func groupAccess(appID: String, groupID: String, userID: String?, on db: PostgresConnection) throws
        -> (dismissed: Bool, member: Bool)?
    {
        try db.query(
            """
            SELECT g.dismissed_at IS NOT NULL,
                   EXISTS (SELECT 1 FROM group_members m WHERE m.app_id = g.app_id AND m.group_id = g.group_id AND m.user_id = \(userID))
            FROM groups g WHERE g.app_id = \(appID) AND g.group_id = \(groupID)
            """
        ).decodeFirst((Bool, Bool).self).map { (dismissed: $0.0, member: $0.1) }
    }

    /// Which of `userIDs` are members of group `groupID` (a targeted send's `visible_to`); nil when the group does not
    /// exist (the send's own existence check answers that).
    static func groupMembers(appID: String, groupID: String, among userIDs: [String], on db: PostgresConnection) throws -> Set<String>? {
        try db.query(
            """
            SELECT (SELECT coalesce(array_agg(m.user_id), '{}') FROM group_members m
                    WHERE m.app_id = g.app_id AND m.group_id = g.group_id AND m.user_id = ANY(\(userIDs)::text[]))
            FROM groups g WHERE g.app_id = \(appID) AND g.group_id = \(groupID)
            """
        ).decodeFirst([String].self).map(Set.init)
    }

    /// A page of the snapshots of combine `combineID` from `position`.
    static func combined(appID: String, combineID: String, from position: Int, limit: Int, on db: PostgresConnection) throws
        -> [(position: Int, json: [UInt8])]
    {
        let result = try db.query(
            """
            SELECT position, message FROM message_combines WHERE app_id = \(appID) AND combine_id = \(combineID) AND position >= \(position)
            ORDER BY position LIMIT \(limit)
            """)
        return try result.decode((Int, PostgresTextBytes).self).map { (position: $0.0, json: $0.1.bytes) }
    }

    // MARK: - Lifecycle (docs/messages.md#revoke-edit-delete)

    /// The group roles of those of `userIDs` who are members of `groupID`.
    static func groupRoles(appID: String, groupID: String, userIDs: [String], on db: PostgresConnection) throws -> [String: Int64] {
        var out: [String: Int64] = [:]
        for row in try db.query(
            """
            SELECT user_id, role FROM group_members WHERE app_id = \(appID) AND group_id = \(groupID) AND user_id = ANY(\(userIDs)::text[])
            """
        ).decode((String, Int64).self) {
            out[row.0] = row.1
        }
        return out
    }

    /// Writes an edit: the new body and extended_data, the edit stamp, and the version history (version 1, the
    /// original, is saved by the first edit).
    static func saveEdit(
        appID: String, message: Message, body: [UInt8], extendedData: String, editor: String?, now: Int64, on db: PostgresConnection
    ) throws {
        if message.editCount == 0 {
            try db.query(
                """
                INSERT INTO message_edits (app_id, message_id, version, body, extended_data, edited_at, editor_id)
                VALUES (\(appID), \(message.messageID), 1, \(String(decoding: message.body ?? [], as: UTF8.self)), \(message.extendedData),
                        \(message.timestamp), \(message.from))
                """)
        }
        let text = String(decoding: body, as: UTF8.self)
        try db.query(
            """
            INSERT INTO message_edits (app_id, message_id, version, body, extended_data, edited_at, editor_id)
            VALUES (\(appID), \(message.messageID), \(message.editCount + 2), \(text), \(extendedData), \(now), \(editor))
            """)
        try db.query(
            """
            UPDATE messages SET body = \(text), extended_data = \(extendedData), edited_at = \(now), editor_id = \(editor),
                edit_count = edit_count + 1, search_text = parley_search_text(type, \(text))
            WHERE app_id = \(appID) AND message_id = \(message.messageID)
            """)
    }

    /// A page of a message's versions from `version` on (`GET …/edits`).
    static func edits(appID: String, messageID: String, from version: Int, limit: Int, on db: PostgresConnection) throws
        -> [(version: Int, json: [UInt8])]
    {
        try db.query(
            """
            SELECT version, json_build_object('version', version, 'body', body::json, 'extended_data', extended_data,
                                              'edited_at', edited_at, 'editor_id', editor_id)::text
            FROM message_edits WHERE app_id = \(appID) AND message_id = \(messageID) AND version >= \(version)
            ORDER BY version LIMIT \(limit)
            """
        ).decode((Int, PostgresTextBytes).self).map { (version: $0.0, json: $0.1.bytes) }
    }

    /// Hides a message from one user (delete `scope=self`).
    static func hide(appID: String, message: Message, from userID: String, on db: PostgresConnection) throws {
        try db.query(
            """
            INSERT INTO message_hidden (app_id, user_id, conv_type, conv_id, seq, message_id)
            VALUES (\(appID), \(userID), \(message.conversationType.rawValue), \(thread(message.conversationType, message.from, message.to)),
                    \(message.seq ?? 0), \(message.messageID))
            ON CONFLICT DO NOTHING
            """)
    }

    /// How a message goes for everyone (docs/messages.md#revoke-edit-delete).
    enum Gone {
        /// Revoked: the type-31 record with `body`, the original text kept apart.
        case revoked(body: [UInt8], originalText: String?)
        /// Deleted for everyone: a tombstone, no body.
        case deleted
    }

    /// Makes `message` (locked) gone for everyone in one statement: the row becomes its revoke record (same id, seq,
    /// sender, timestamp) or a tombstone, without mentions, reactions or pin; when `isRepliedTo`, the replies to it
    /// show it gone (`reply.state` `deleted`, no snapshot; the expression index of Migrations/0017 finds them); a
    /// combine message's snapshots go with its body. Returns the row as it is now.
    ///
    /// The replies' and snapshots' parts are left out when they have nothing to change: each is a data-modifying CTE
    /// whose executor start costs the same with or without rows (with `search_text` still a generated column, an
    /// UPDATE of `messages` also rebuilt its expression each time): together a twentieth of a revoke's database CPU
    /// (bench/RESULTS.md 2026-12-03). `search_text` is written by its writers (Migrations/0022): gone, it is NULL.
    ///
    /// `events` (about the message as ``gone(_:_:)`` renders it) are appended by the same statement.
    static func markGone(
        appID: String, message: Message, isRepliedTo: Bool, _ gone: Gone, events: [NewEvent] = [], now: Int64, on db: PostgresConnection
    ) throws -> Message? {
        let messageID = message.messageID
        var parts: [PostgresQuery] = []
        if isRepliedTo {
            parts.append(
                """
                replies AS (
                    UPDATE messages SET reply = json_build_object(
                            'message_id', reply::json -> 'message_id', 'seq', reply::json -> 'seq', 'from', reply::json -> 'from',
                            'timestamp', reply::json -> 'timestamp', 'state', 'deleted', 'snapshot', NULL)::text
                    WHERE app_id = \(appID) AND ((reply::json) ->> 'message_id') = \(messageID) AND reply IS NOT NULL)
                """)
        }
        if message.type == MessageType.combine.rawValue,
            let combineID = message.body.flatMap({ try? JSONValue.parse($0) })?["combine_id"]?.stringValue
        {
            parts.append("snapshots AS (DELETE FROM message_combines WHERE app_id = \(appID) AND combine_id = \(combineID))")
        }
        if !events.isEmpty { parts.append("appended AS (\(EventLog.pendingInsert(events, appID: appID, now: now)))") }
        var query: PostgresQuery = parts.isEmpty ? "" : "WITH "
        for (index, part) in parts.enumerated() {
            if index > 0 { query += ", " }
            query += part
        }
        query += """
             UPDATE messages m SET mention_ids = '{}', mention_all = false, reactions = '[]', pinned_at = NULL, pinned_by = NULL,
                search_text = NULL,
            """
        switch gone {
        case .revoked(let body, let originalText):
            query += " type = 31, body = \(String(decoding: body, as: UTF8.self)), original_text = \(originalText)"
        case .deleted:
            query += " deleted = true, body = NULL, original_text = NULL"
        }
        query += " WHERE m.app_id = \(appID) AND m.message_id = \(messageID) RETURNING \(unsafeSQL: messageColumns)"
        return try db.query(query).first.flatMap { try self.message($0) }
    }

    /// `message` as ``markGone`` leaves its row: the same changes as its UPDATE, so the events it writes can be
    /// rendered before it runs.
    static func gone(_ message: Message, _ gone: Gone) -> Message {
        var after = message
        after.mentionIDs = []
        after.mentionAll = false
        after.reactions = Array("[]".utf8)
        after.pinnedAt = nil
        after.pinnedBy = nil
        switch gone {
        case .revoked(let body, let originalText):
            after.type = MessageType.revoke.rawValue
            after.body = body
            after.originalText = originalText
        case .deleted:
            after.deleted = true
            after.body = nil
            after.originalText = nil
        }
        return after
    }

    /// The reactions of a revoked or deleted message go (no event of their own, docs/messages.md#revoke-edit-delete).
    static func deleteReactions(appID: String, messageID: String, on db: PostgresConnection) throws {
        try db.query(
            """
            WITH counts AS (DELETE FROM message_reaction_types WHERE app_id = \(appID) AND message_id = \(messageID))
            DELETE FROM message_reactions WHERE app_id = \(appID) AND message_id = \(messageID)
            """)
    }

    /// Recounts a root's `reply_count` (replies neither revoked nor deleted for everyone) and returns it.
    static func recountReplies(appID: String, rootID: String, on db: PostgresConnection) throws -> Int64 {
        try db.query(
            """
            UPDATE messages SET reply_count = (
                SELECT count(*) FROM messages r
                WHERE r.app_id = \(appID) AND r.root_message_id = \(rootID) AND r.type <> 31 AND NOT r.deleted)
            WHERE app_id = \(appID) AND message_id = \(rootID)
            RETURNING reply_count
            """
        ).decodeFirst(Int64.self) ?? 0
    }
}
