import ParleyAPI
import ParleyCore
import ParleyPostgres

/// SQL for conversation entries (docs/conversations.md) and their derived read state
/// (docs/messages.md#unread-read-state-and-mentions). No rules here.
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

    /// The messages of entry `c` that count for its owner (docs/messages.md#unread-read-state-and-mentions): stored,
    /// from someone else, not `no_unread`, not revoke/tips, not deleted (for everyone or for the owner) and not
    /// suppressed, nor a targeted message that does not list the owner.
    private static let countable = """
        m.app_id = c.app_id AND m.conv_type = c.conv_type AND m.conv_id = c.thread_id AND m.seq > c.read_seq
          AND m.seq <= \(lastSeq) AND m.sender <> c.user_id AND m.type NOT IN (31, 32) AND NOT m.deleted
          AND m.suppressed IS NULL AND (m.visible_to IS NULL OR c.user_id = ANY(m.visible_to))
          AND NOT EXISTS (SELECT 1 FROM message_hidden h WHERE h.app_id = c.app_id AND h.user_id = c.user_id
                          AND h.conv_type = c.conv_type AND h.conv_id = c.thread_id AND h.seq = m.seq)
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
        LEFT JOIN LATERAL (\(lastVisible)) lm ON true
        """

    /// The last message of entry `c` (`last_message`): its highest-seq message the owner sees in its history — not
    /// deleted for the owner, not another user's suppressed message nor a targeted one that does not list the owner,
    /// after its `cleared_seq`. A backward walk of the conversation's primary key from `last_seq`: the first row
    /// qualifies unless the owner hid it.
    private static let lastVisible = """
        SELECT * FROM messages m
        WHERE m.app_id = c.app_id AND m.conv_type = c.conv_type AND m.conv_id = c.thread_id AND m.seq <= \(lastSeq)
          AND m.seq > c.cleared_seq AND (m.suppressed IS NULL OR m.sender = c.user_id)
          AND (m.visible_to IS NULL OR m.sender = c.user_id OR c.user_id = ANY(m.visible_to))
          AND NOT EXISTS (SELECT 1 FROM message_hidden h WHERE h.app_id = c.app_id AND h.user_id = c.user_id
                          AND h.conv_type = c.conv_type AND h.conv_id = c.thread_id AND h.seq = m.seq)
        ORDER BY m.seq DESC LIMIT 1
        """

    /// The types of the entry columns of ``select``, in order, up to the last message's columns (which follow them).
    private typealias EntryColumns = (
        String, String, String, String, String, String, String, Int64, Int64, Int64, Int64, Bool, String, String, Int64, [Int],
        PostgresTextBytes, Int64, Int64, Int64, Bool, Int64
    )

    static func conversation(_ row: PostgresRow) throws -> Conversation {
        let (
            userID, type, id, threadID, name, avatarURL, alias, unreadCount, readSeq, lastSeq, orderKey, pinned, notificationStatus,
            draft, draftUpdatedAt, marks, mentionItems, clearedSeq, createdAt, updatedAt, disabled, mutedUntil
        ) = try row.decode(EntryColumns.self, at: 0)
        let items = mentionItems.bytes
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
            userID: userID, type: type, id: id, threadID: threadID, name: name, avatarURL: avatarURL, alias: alias,
            unreadCount: unreadCount, readSeq: readSeq, lastSeq: lastSeq, lastMessage: try MessageStore.message(row, at: 22),
            orderKey: orderKey, pinned: pinned, notificationStatus: notificationStatus, draft: draft, draftUpdatedAt: draftUpdatedAt,
            marks: marks, mentionItems: items, mentionMe: me, mentionAll: all, clearedSeq: clearedSeq, disabled: disabled,
            mutedUntil: mutedUntil, createdAt: createdAt, updatedAt: updatedAt)
    }

    /// One entry that is not deleted.
    package static func fetch(appID: String, userID: String, type: String, id: String, on db: PostgresConnection) throws -> Conversation? {
        try db.query(
            "\(unsafeSQL: select) WHERE c.app_id = \(appID) AND c.user_id = \(userID) AND c.conv_type = \(type) AND c.conv_id = \(id) AND NOT c.deleted"
        ).first.map(conversation)
    }

    /// Several entries of one user by (type, id), not deleted, in no particular order.
    static func fetchMany(appID: String, userID: String, keys: [(type: String, id: String)], on db: PostgresConnection) throws
        -> [Conversation]
    {
        if keys.isEmpty { return [] }
        return try db.query(
            """
            \(unsafeSQL: select)
             JOIN unnest(\(keys.map(\.type))::text[], \(keys.map(\.id))::text[]) AS k(type, id) ON k.type = c.conv_type AND k.id = c.conv_id
            WHERE c.app_id = \(appID) AND c.user_id = \(userID) AND NOT c.deleted
            """
        ).rows.map(conversation)
    }

    /// The list and total filters of docs/conversations.md#operations (`types`, `marks`, `unread_only`, `pinned`,
    /// `exclude_dnd`).
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

    /// The conditions of `f` (each an always-present condition with its switch bound, so one statement text serves
    /// every filter).
    private static func conditions(_ f: Filter) -> PostgresQuery {
        """
          AND (\(f.types)::text[] IS NULL OR c.conv_type = ANY(\(f.types)::text[]))
          AND (NOT \(f.hasMarks) OR (\(f.anyMarked) AND cardinality(c.marks) > 0) OR (\(f.unmarked) AND cardinality(c.marks) = 0)
               OR c.marks && \(f.marks ?? [])::int[])
          AND (\(f.pinned)::boolean IS NULL OR c.pinned = \(f.pinned))
          AND (NOT \(f.unreadOnly) OR EXISTS (SELECT 1 FROM messages m WHERE \(unsafeSQL: countable) AND NOT m.no_unread))
          AND (NOT \(f.excludeDND) OR c.notification_status <> 'do_not_disturb')
        """
    }

    /// Up to `limit` entries by `order_key` desc, then type desc, then id desc, strictly after `after`.
    static func list(
        appID: String, userID: String, filter: Filter, after: (orderKey: Int64, type: String, id: String)?, limit: Int,
        on db: PostgresConnection
    ) throws -> [Conversation] {
        try db.query(
            """
            \(unsafeSQL: select) WHERE c.app_id = \(appID) AND c.user_id = \(userID) AND NOT c.deleted\(conditions(filter))
              AND (\(after?.orderKey)::bigint IS NULL
                   OR (\(unsafeSQL: orderKey), c.conv_type, c.conv_id) < (\(after?.orderKey)::bigint, \(after?.type)::text, \(after?.id)::text))
            ORDER BY \(unsafeSQL: orderKey) DESC, c.conv_type DESC, c.conv_id DESC LIMIT \(limit)
            """
        ).rows.map(conversation)
    }

    /// The sum of the unread counts of the matching entries.
    static func totalUnread(appID: String, userID: String, filter: Filter, on db: PostgresConnection) throws -> Int64 {
        try db.query(
            """
            SELECT coalesce(sum(\(unsafeSQL: unreadCount)), 0)::bigint FROM conversations c
            WHERE c.app_id = \(appID) AND c.user_id = \(userID) AND NOT c.deleted\(conditions(filter))
            """
        ).decodeFirst(Int64.self) ?? 0
    }

    /// Each user's total unread count with the default filters (the push bridge's badge,
    /// docs/push.md#how-the-bridge-sends), for many users in one query; users with nothing unread are absent.
    static func totalUnread(appID: String, userIDs: [String], on db: PostgresConnection) throws -> [String: Int64] {
        guard !userIDs.isEmpty else { return [:] }
        var out: [String: Int64] = [:]
        for row in try db.query(
            """
            SELECT c.user_id, coalesce(sum(\(unsafeSQL: unreadCount)), 0)::bigint FROM conversations c
            WHERE c.app_id = \(appID) AND c.user_id = ANY(\(userIDs)) AND NOT c.deleted\(conditions(Filter()))
            GROUP BY c.user_id
            """
        ).decode((String, Int64).self) {
            out[row.0] = row.1
        }
        return out
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
            """
            SELECT pinned, notification_status, draft, deleted FROM conversations
            WHERE app_id = \(appID) AND user_id = \(userID) AND conv_type = \(type) AND conv_id = \(id) FOR UPDATE
            """
        ).decodeFirst((Bool, String, String, Bool).self).map { Settings(pinned: $0.0, notificationStatus: $0.1, draft: $0.2, deleted: $0.3) }
    }

    /// Creates an empty entry (PATCH on a conversation without one).
    package static func create(appID: String, userID: String, type: String, id: String, threadID: String, now: Int64, on db: PostgresConnection)
        throws
    {
        try db.query(
            """
            INSERT INTO conversations (app_id, user_id, conv_type, conv_id, thread_id, order_key, created_at, updated_at)
            VALUES (\(appID), \(userID), \(type), \(id), \(threadID), \(now), \(now), \(now))
            ON CONFLICT (app_id, user_id, conv_type, conv_id) DO NOTHING
            """)
    }

    /// Creates the group entry of a current member (PATCH on a group conversation without an entry): it follows
    /// the group and starts read up to the group's head, like an entry made on join
    /// (docs/messages.md#unread-read-state-and-mentions). False when `userID` is not a member of `groupID`. The caller
    /// holds the member row (``lockMemberAlias``), so a concurrent leave freezes the new entry after this transaction.
    static func createGroupEntry(appID: String, userID: String, groupID: String, now: Int64, on db: PostgresConnection) throws -> Bool {
        try db.query(
            """
            INSERT INTO conversations (app_id, user_id, conv_type, conv_id, thread_id, read_seq, follows_group, order_key,
                                       created_at, updated_at)
            SELECT gm.app_id, gm.user_id, 'group', gm.group_id, gm.group_id, coalesce(h.last_seq, 0), true, \(now), \(now), \(now)
            FROM group_members gm
            LEFT JOIN conversation_seqs h ON h.app_id = gm.app_id AND h.conv_type = 'group' AND h.conv_id = gm.group_id
            WHERE gm.app_id = \(appID) AND gm.user_id = \(userID) AND gm.group_id = \(groupID)
            ON CONFLICT (app_id, user_id, conv_type, conv_id) DO NOTHING
            """
        ).affectedRows == 1
    }

    /// The member's own alias for the group, its member row locked until the transaction ends; nil when it is not a
    /// member. Taken before the entry's lock (the order a leave takes them: member row, then entry).
    static func lockMemberAlias(appID: String, userID: String, groupID: String, on db: PostgresConnection) throws -> String? {
        try db.query("SELECT alias FROM group_members WHERE app_id = \(appID) AND group_id = \(groupID) AND user_id = \(userID) FOR UPDATE")
            .decodeFirst(String.self)
    }

    /// Sets the member's own alias for the group (the `alias` of its group entry).
    static func setMemberAlias(appID: String, userID: String, groupID: String, alias: String, on db: PostgresConnection) throws {
        try db.query("UPDATE group_members SET alias = \(alias) WHERE app_id = \(appID) AND group_id = \(groupID) AND user_id = \(userID)")
    }

    /// How many of the user's live entries are pinned.
    static func pinnedCount(appID: String, userID: String, on db: PostgresConnection) throws -> Int {
        Int(
            try db.query("SELECT count(*) FROM conversations WHERE app_id = \(appID) AND user_id = \(userID) AND pinned AND NOT deleted")
                .decodeFirst(Int64.self) ?? 0)
    }

    /// Saves the settable fields (nil = unchanged); a draft sets `draft_updated_at`, which raises `order_key`.
    static func update(
        appID: String, userID: String, type: String, id: String, pinned: Bool?, notificationStatus: String?, draft: String?,
        now: Int64, on db: PostgresConnection
    ) throws {
        try db.query(
            """
            UPDATE conversations SET pinned = coalesce(\(pinned), pinned), notification_status = coalesce(\(notificationStatus), notification_status),
                draft = coalesce(\(draft), draft), draft_updated_at = CASE WHEN \(draft)::text IS NULL THEN draft_updated_at ELSE \(now) END,
                order_key = CASE WHEN \(draft)::text IS NULL THEN order_key ELSE greatest(order_key, \(now)) END,
                deleted = false, updated_at = \(now)
            WHERE app_id = \(appID) AND user_id = \(userID) AND conv_type = \(type) AND conv_id = \(id)
            """)
    }

    /// Deletes an entry: unread and mentions drop to nothing (read_seq = last_seq) and, with `clearHistory`, the
    /// user's history is cleared up to last_seq. False when there was no live entry.
    package static func delete(appID: String, userID: String, type: String, id: String, clearHistory: Bool, now: Int64, on db: PostgresConnection)
        throws -> Bool
    {
        // The effective last_seq is stored too, so a followed group entry keeps the position it was deleted at.
        try db.query(
            """
            UPDATE conversations c SET deleted = true, last_seq = \(unsafeSQL: lastSeq), read_seq = greatest(c.read_seq, \(unsafeSQL: lastSeq)),
                cleared_seq = CASE WHEN \(clearHistory) THEN greatest(c.cleared_seq, \(unsafeSQL: lastSeq)) ELSE c.cleared_seq END, updated_at = \(now)
            WHERE c.app_id = \(appID) AND c.user_id = \(userID) AND c.conv_type = \(type) AND c.conv_id = \(id) AND NOT c.deleted
            """
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
            """
            UPDATE conversations c SET read_seq = least(coalesce(\(seq), \(unsafeSQL: lastSeq)), \(unsafeSQL: lastSeq)), updated_at = \(now)
            WHERE c.app_id = \(appID) AND c.user_id = \(userID) AND NOT c.deleted
              AND (\(keys?.map(\.type))::text[] IS NULL OR (c.conv_type, c.conv_id) IN (SELECT * FROM unnest(\(keys?.map(\.type))::text[], \(keys?.map(\.id))::text[])))
              AND least(coalesce(\(seq), \(unsafeSQL: lastSeq)), \(unsafeSQL: lastSeq)) > c.read_seq
            RETURNING c.conv_type, c.conv_id, c.thread_id, c.read_seq
            """)
        return try result.decode((String, String, String, Int64).self).map {
            ReadMove(type: $0.0, id: $0.1, threadID: $0.2, readSeq: $0.3)
        }
    }

    /// Adds or removes `mark` on the live entries among `keys`; returns the keys that changed.
    static func setMark(
        appID: String, userID: String, keys: [(type: String, id: String)], mark: Int64, enable: Bool, now: Int64, on db: PostgresConnection
    )
        throws -> [(type: String, id: String)]
    {
        try db.query(
            """
            UPDATE conversations c SET updated_at = \(now),
                marks = CASE WHEN \(enable) THEN ARRAY(SELECT DISTINCT x FROM unnest(c.marks || \(mark)::int) x ORDER BY x)
                             ELSE array_remove(c.marks, \(mark)::int) END
            FROM unnest(\(keys.map(\.type))::text[], \(keys.map(\.id))::text[]) AS k(type, id)
            WHERE c.app_id = \(appID) AND c.user_id = \(userID) AND c.conv_type = k.type AND c.conv_id = k.id AND NOT c.deleted
              AND (\(mark)::int = ANY(c.marks)) <> \(enable)
            RETURNING c.conv_type, c.conv_id
            """
        ).decode((String, String).self).map { (type: $0.0, id: $0.1) }
    }
}
