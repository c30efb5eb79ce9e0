import ParleyPostgres

/// SQL for conversation entries (API.md §12) and the derived read state of §11.7. No rules here.
///
/// Unread counts and mention items are computed from each entry's `read_seq`/`last_seq` over the conversation's
/// messages, so a group message stays one row however many members read it.
///
/// A group entry of a current member (`follows_group`) stores no last_seq/last_ts of its own: a group send writes
/// only the group's `conversation_seqs` row (Migrations/0009), and the entry reads its head from there. Every query
/// goes through ``lastSeq`` and ``orderKey`` (alias `c` for the entry) rather than the stored columns.
enum ConversationStore {
    /// Column `column` of the group head row of entry `c` (null when the group has no stored message yet).
    private static func groupHead(_ column: String) -> String {
        "(SELECT h.\(column) FROM conversation_seqs h WHERE h.app_id = c.app_id AND h.conv_type = 'group' AND h.conv_id = c.thread_id)"
    }

    /// The effective last_seq of entry `c`: the group's head while it follows its group, else the stored value
    /// (peers, and group entries frozen by leave, kick or dismissal).
    static let lastSeq = "(CASE WHEN c.follows_group THEN coalesce(\(groupHead("last_seq")), 0) ELSE c.last_seq END)"

    /// The effective order_key of entry `c`: a followed group's latest message raises it without being stored.
    static let orderKey =
        "(CASE WHEN c.follows_group THEN greatest(c.order_key, coalesce(\(groupHead("last_ts")), 0)) ELSE c.order_key END)"

    /// The messages of entry `c` that count for its owner (§11.7): stored, from someone else, not `no_unread`,
    /// not revoke/tips, not deleted and not suppressed.
    private static let countable = """
        m.app_id = c.app_id AND m.conv_type = c.conv_type AND m.conv_id = c.thread_id AND m.seq > c.read_seq
          AND m.seq <= \(lastSeq) AND m.sender <> c.user_id AND m.type NOT IN (31, 32) AND NOT m.deleted
          AND m.suppressed IS NULL
        """

    /// The unread count of entry `c`.
    static let unreadCount = "(SELECT count(*) FROM messages m WHERE \(countable) AND NOT m.no_unread)"

    /// The entry columns ``conversation(_:)`` decodes, with the derived ones and the last message. Name and avatar
    /// come from the other user (peer) or the group; alias from the owner's friend row (peer) or its own member row
    /// (group: '' once it is no longer a member).
    private static let select = """
        SELECT c.user_id, c.conv_type, c.conv_id, c.thread_id, coalesce(u.name, g.name, ''), coalesce(u.avatar_url, g.avatar_url, ''),
               coalesce(f.alias, gm.alias, ''), \(unreadCount), c.read_seq, \(lastSeq), \(orderKey), c.pinned, c.notification_status,
               c.draft, c.draft_updated_at, c.marks,
               (SELECT coalesce(json_agg(json_build_object('message_id', m.message_id, 'seq', m.seq, 'from', m.sender,
                         'type', CASE WHEN NOT m.mention_all THEN 'me' WHEN c.user_id = ANY(m.mention_ids) THEN 'all_and_me'
                                      ELSE 'all' END) ORDER BY m.seq), '[]')::text
                FROM messages m WHERE \(countable) AND m.mention_notify AND (m.mention_all OR c.user_id = ANY(m.mention_ids))),
               c.cleared_seq, c.created_at, c.updated_at, c.conv_type = 'group' AND NOT c.follows_group,
               coalesce(gm.muted_until, 0), \(MessageStore.columns("lm"))
        FROM conversations c
        LEFT JOIN users u ON u.app_id = c.app_id AND u.user_id = c.conv_id AND c.conv_type = 'peer'
        LEFT JOIN friends f ON f.app_id = c.app_id AND f.user_id = c.user_id AND f.friend_id = c.conv_id AND c.conv_type = 'peer'
        LEFT JOIN groups g ON g.app_id = c.app_id AND g.group_id = c.conv_id AND c.conv_type = 'group'
        LEFT JOIN group_members gm ON gm.app_id = c.app_id AND gm.group_id = c.conv_id AND gm.user_id = c.user_id
                                  AND c.conv_type = 'group'
        LEFT JOIN messages lm ON lm.app_id = c.app_id AND lm.conv_type = c.conv_type AND lm.conv_id = c.thread_id
                             AND lm.seq = \(lastSeq)
        """

    static func conversation(_ row: PostgresRow) throws -> Conversation {
        let items = try row[16].textBytes
        var me = false
        var all = false
        for item in (try? JSONValue.parse(items))?.arrayValue ?? [] {
            switch item["type"]?.stringValue {
            case "me": me = true
            case "all": all = true
            default:
                me = true
                all = true
            }
        }
        return Conversation(
            userID: try row[0].string, type: try row[1].string, id: try row[2].string, threadID: try row[3].string,
            name: try row[4].string, avatarURL: try row[5].string, alias: try row[6].string, unreadCount: try row[7].int64,
            readSeq: try row[8].int64, lastSeq: try row[9].int64, lastMessage: try MessageStore.message(row, at: 22),
            orderKey: try row[10].int64, pinned: try row[11].bool, notificationStatus: try row[12].string, draft: try row[13].string,
            draftUpdatedAt: try row[14].int64, marks: try row[15].intArray, mentionItems: items, mentionMe: me, mentionAll: all,
            clearedSeq: try row[17].int64, disabled: try row[20].bool, mutedUntil: try row[21].int64, createdAt: try row[18].int64,
            updatedAt: try row[19].int64)
    }

    /// One entry that is not deleted.
    static func fetch(appID: String, userID: String, type: String, id: String, on db: PostgresConnection) throws -> Conversation? {
        try db.query(
            sql:
                select + " WHERE c.app_id = $1 AND c.user_id = $2 AND c.conv_type = $3 AND c.conv_id = $4 AND NOT c.deleted",
            [appID, userID, type, id], prepared: true
        ).first.map(conversation)
    }

    /// Several entries of one user by (type, id), not deleted, in no particular order.
    static func fetchMany(appID: String, userID: String, keys: [(type: String, id: String)], on db: PostgresConnection) throws
        -> [Conversation]
    {
        if keys.isEmpty { return [] }
        return try db.query(
            sql:
                select + """
                     JOIN unnest($3::text[], $4::text[]) AS k(type, id) ON k.type = c.conv_type AND k.id = c.conv_id
                    WHERE c.app_id = $1 AND c.user_id = $2 AND NOT c.deleted
                    """, [appID, userID, keys.map(\.type), keys.map(\.id)], prepared: true
        ).rows.map(conversation)
    }

    /// The list and total filters of §12 (`types`, `marks`, `unread_only`, `pinned`, `exclude_dnd`).
    struct Filter {
        var types: [String]?
        /// 1–20 marks of the filter (nil: no marks filter).
        var marks: [Int64]?
        var anyMarked = false
        var unmarked = false
        var unreadOnly = false
        var pinned: Bool?
        var excludeDND = false

        var hasMarks: Bool { marks != nil || anyMarked || unmarked }
    }

    private static let filterSQL = """
          AND ($3::text[] IS NULL OR c.conv_type = ANY($3::text[]))
          AND (NOT $4 OR ($5 AND cardinality(c.marks) > 0) OR ($6 AND cardinality(c.marks) = 0) OR c.marks && $7::int[])
          AND ($8::boolean IS NULL OR c.pinned = $8)
          AND (NOT $9 OR EXISTS (SELECT 1 FROM messages m WHERE \(countable) AND NOT m.no_unread))
          AND (NOT $10 OR c.notification_status <> 'do_not_disturb')
        """

    private static func filterParameters(_ f: Filter) -> [(any PostgresEncodable)?] {
        [f.types, f.hasMarks, f.anyMarked, f.unmarked, f.marks ?? [], f.pinned, f.unreadOnly, f.excludeDND]
    }

    /// Up to `limit` entries by `order_key` desc, then type desc, then id desc, strictly after `after`.
    static func list(
        appID: String, userID: String, filter: Filter, after: (orderKey: Int64, type: String, id: String)?, limit: Int,
        on db: PostgresConnection
    ) throws -> [Conversation] {
        let sql =
            select + " WHERE c.app_id = $1 AND c.user_id = $2 AND NOT c.deleted" + filterSQL
            + " AND ($11::bigint IS NULL OR (\(orderKey), c.conv_type, c.conv_id) < ($11, $12, $13))"
            + " ORDER BY \(orderKey) DESC, c.conv_type DESC, c.conv_id DESC LIMIT $14"
        let parameters: [(any PostgresEncodable)?] =
            [appID, userID] + filterParameters(filter) + [after?.orderKey, after?.type, after?.id, limit]
        return try db.query(sql: sql, parameters, prepared: true).rows.map(conversation)
    }

    /// The sum of the unread counts of the matching entries.
    static func totalUnread(appID: String, userID: String, filter: Filter, on db: PostgresConnection) throws -> Int64 {
        let sql =
            "SELECT coalesce(sum(\(unreadCount)), 0)::bigint FROM conversations c WHERE c.app_id = $1 AND c.user_id = $2 AND NOT c.deleted"
            + filterSQL
        return try db.query(sql: sql, [appID, userID] + filterParameters(filter), prepared: true).first?[0].int64 ?? 0
    }

    // MARK: - Writes

    /// The settable fields of an entry, locked until the transaction ends (deleted entries included).
    struct Settings {
        var pinned: Bool
        var notificationStatus: String
        var draft: String
        var deleted: Bool
    }

    static func lock(appID: String, userID: String, type: String, id: String, on db: PostgresConnection) throws -> Settings? {
        try db.query(
            sql:
                """
                SELECT pinned, notification_status, draft, deleted FROM conversations
                WHERE app_id = $1 AND user_id = $2 AND conv_type = $3 AND conv_id = $4 FOR UPDATE
                """, [appID, userID, type, id], prepared: true
        ).first.map { Settings(pinned: try $0[0].bool, notificationStatus: try $0[1].string, draft: try $0[2].string, deleted: try $0[3].bool) }
    }

    /// Creates an empty entry (PATCH on a conversation without one).
    static func create(appID: String, userID: String, type: String, id: String, threadID: String, now: Int64, on db: PostgresConnection) throws {
        try db.query(
            sql:
                """
                INSERT INTO conversations (app_id, user_id, conv_type, conv_id, thread_id, order_key, created_at, updated_at)
                VALUES ($1, $2, $3, $4, $5, $6, $6, $6)
                ON CONFLICT (app_id, user_id, conv_type, conv_id) DO NOTHING
                """, [appID, userID, type, id, threadID, now], prepared: true)
    }

    /// Creates the group entry of a current member (PATCH on a group conversation without an entry): it follows
    /// the group and starts read up to the group's head, like an entry made on join (§11.7). False when `userID` is
    /// not a member of `groupID`. The caller holds the member row (``lockMemberAlias``), so a concurrent leave
    /// freezes the new entry after this transaction.
    static func createGroupEntry(appID: String, userID: String, groupID: String, now: Int64, on db: PostgresConnection) throws -> Bool {
        try db.query(
            sql:
                """
                INSERT INTO conversations (app_id, user_id, conv_type, conv_id, thread_id, read_seq, follows_group, order_key,
                                           created_at, updated_at)
                SELECT gm.app_id, gm.user_id, 'group', gm.group_id, gm.group_id, coalesce(h.last_seq, 0), true, $4, $4, $4
                FROM group_members gm
                LEFT JOIN conversation_seqs h ON h.app_id = gm.app_id AND h.conv_type = 'group' AND h.conv_id = gm.group_id
                WHERE gm.app_id = $1 AND gm.user_id = $2 AND gm.group_id = $3
                ON CONFLICT (app_id, user_id, conv_type, conv_id) DO NOTHING
                """, [appID, userID, groupID, now], prepared: true
        ).affectedRows == 1
    }

    /// The member's own alias for the group, its member row locked until the transaction ends; nil when it is not a
    /// member. Taken before the entry's lock (the order a leave takes them: member row, then entry).
    static func lockMemberAlias(appID: String, userID: String, groupID: String, on db: PostgresConnection) throws -> String? {
        try db.query(
            sql:
                "SELECT alias FROM group_members WHERE app_id = $1 AND group_id = $2 AND user_id = $3 FOR UPDATE",
            [appID, groupID, userID], prepared: true
        ).first.map { try $0[0].string }
    }

    /// Sets the member's own alias for the group (the `alias` of its group entry).
    static func setMemberAlias(appID: String, userID: String, groupID: String, alias: String, on db: PostgresConnection) throws {
        try db.query(
            sql:
                "UPDATE group_members SET alias = $4 WHERE app_id = $1 AND group_id = $2 AND user_id = $3", [appID, groupID, userID, alias],
            prepared: true)
    }

    /// How many of the user's live entries are pinned.
    static func pinnedCount(appID: String, userID: String, on db: PostgresConnection) throws -> Int {
        Int(
            try db.query(
                sql:
                    "SELECT count(*) FROM conversations WHERE app_id = $1 AND user_id = $2 AND pinned AND NOT deleted", [appID, userID],
                prepared: true
            ).first?[0].int64 ?? 0)
    }

    /// Saves the settable fields (nil = unchanged); a draft sets `draft_updated_at`, which raises `order_key`.
    static func update(
        appID: String, userID: String, type: String, id: String, pinned: Bool?, notificationStatus: String?, draft: String?,
        now: Int64, on db: PostgresConnection
    ) throws {
        try db.query(
            sql:
                """
                UPDATE conversations SET pinned = coalesce($5, pinned), notification_status = coalesce($6, notification_status),
                    draft = coalesce($7, draft), draft_updated_at = CASE WHEN $7::text IS NULL THEN draft_updated_at ELSE $8 END,
                    order_key = CASE WHEN $7::text IS NULL THEN order_key ELSE greatest(order_key, $8) END,
                    deleted = false, updated_at = $8
                WHERE app_id = $1 AND user_id = $2 AND conv_type = $3 AND conv_id = $4
                """, [appID, userID, type, id, pinned, notificationStatus, draft, now], prepared: true)
    }

    /// Deletes an entry: unread and mentions drop to nothing (read_seq = last_seq) and, with `clearHistory`, the
    /// user's history is cleared up to last_seq. False when there was no live entry.
    static func delete(appID: String, userID: String, type: String, id: String, clearHistory: Bool, now: Int64, on db: PostgresConnection)
        throws -> Bool
    {
        // The effective last_seq is stored too, so a followed group entry keeps the position it was deleted at.
        try db.query(
            sql:
                """
                UPDATE conversations c SET deleted = true, last_seq = \(lastSeq), read_seq = greatest(c.read_seq, \(lastSeq)),
                    cleared_seq = CASE WHEN $5 THEN greatest(c.cleared_seq, \(lastSeq)) ELSE c.cleared_seq END, updated_at = $6
                WHERE c.app_id = $1 AND c.user_id = $2 AND c.conv_type = $3 AND c.conv_id = $4 AND NOT c.deleted
                """, [appID, userID, type, id, clearHistory, now], prepared: true
        ).affectedRows == 1
    }

    /// One entry whose read position moved.
    struct ReadMove {
        var type: String
        var id: String
        var threadID: String
        var readSeq: Int64
    }

    /// Moves read_seq of live entries to `min(seq, last_seq)` (nil seq: last_seq) where that is higher; `keys` nil
    /// means every entry of the user. Returns the entries that advanced.
    static func markRead(appID: String, userID: String, keys: [(type: String, id: String)]?, seq: Int64?, now: Int64, on db: PostgresConnection)
        throws -> [ReadMove]
    {
        let result = try db.query(
            sql:
                """
                UPDATE conversations c SET read_seq = least(coalesce($5, \(lastSeq)), \(lastSeq)), updated_at = $6
                WHERE c.app_id = $1 AND c.user_id = $2 AND NOT c.deleted
                  AND ($3::text[] IS NULL OR (c.conv_type, c.conv_id) IN (SELECT * FROM unnest($3::text[], $4::text[])))
                  AND least(coalesce($5, \(lastSeq)), \(lastSeq)) > c.read_seq
                RETURNING c.conv_type, c.conv_id, c.thread_id, c.read_seq
                """, [appID, userID, keys?.map(\.type), keys?.map(\.id), seq, now], prepared: true)
        return try result.rows.map {
            ReadMove(type: try $0[0].string, id: try $0[1].string, threadID: try $0[2].string, readSeq: try $0[3].int64)
        }
    }

    /// Adds or removes `mark` on the live entries among `keys`; returns the keys that changed.
    static func setMark(
        appID: String, userID: String, keys: [(type: String, id: String)], mark: Int64, enable: Bool, now: Int64, on db: PostgresConnection
    )
        throws -> [(type: String, id: String)]
    {
        try db.query(
            sql:
                """
                UPDATE conversations c SET updated_at = $7,
                    marks = CASE WHEN $6 THEN ARRAY(SELECT DISTINCT x FROM unnest(c.marks || $5::int) x ORDER BY x)
                                 ELSE array_remove(c.marks, $5::int) END
                FROM unnest($3::text[], $4::text[]) AS k(type, id)
                WHERE c.app_id = $1 AND c.user_id = $2 AND c.conv_type = k.type AND c.conv_id = k.id AND NOT c.deleted
                  AND ($5::int = ANY(c.marks)) <> $6
                RETURNING c.conv_type, c.conv_id
                """, [appID, userID, keys.map(\.type), keys.map(\.id), mark, enable, now], prepared: true
        ).rows.map { (try $0[0].string, try $0[1].string) }
    }
}
