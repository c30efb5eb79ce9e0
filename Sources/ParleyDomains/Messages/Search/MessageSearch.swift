import ParleyAPI
import ParleyCore
import ParleyPostgres

/// A message search (docs/messages.md#search): its filters, and the statement that answers it over
/// `messages.search_text` and its trigram index (Migrations/0019_message_search.sql).
///
/// The statement's text is built from the filters present, so each combination is its own prepared statement with its
/// own generic plan: one text with `($n IS NULL OR …)` for every optional filter would make one generic plan serve
/// searches that need different access paths (the trigram index app-wide, the conversation's primary key in one
/// conversation).
struct MessageSearch {
    /// A position in the search order: the sort keys of a message (`timestamp`, `seq`, `message_id`).
    struct Position {
        var timestamp: Int64
        var seq: Int64
        var messageID: String
    }

    /// The conversation a search is limited to: its type and thread key (`messages.conv_id`).
    struct Scope {
        var type: ConversationType
        var threadID: String
    }

    /// Each must occur in the searchable text. Lowercased by the database (``lowercased(_:on:)``) before the statement
    /// is built.
    var keywords: [String] = []
    /// The user whose history (docs/messages.md#history) bounds the search; nil: every stored message of the app,
    /// suppressed ones too.
    var viewer: String?
    var conversationType: ConversationType?
    var conversation: Scope?
    var types: [Int64]?
    /// Sub-types a custom message (type 200) must have; other types are not affected.
    var subTypes: [Int64]?
    var senders: [String]?
    /// Inclusive.
    var startAt: Int64?
    /// Exclusive.
    var endAt: Int64?
    var ascending = false
    /// The last message of the previous page: the search continues after it.
    var after: Position?
    var limit = 20

    /// Whether the trigram index can narrow a search for `keyword` (lowercased): the index holds the hex of the UTF-8
    /// bytes, so a keyword of 2 bytes or more (4 hex digits, 2 trigrams) has trigrams. A 1-byte keyword (a single ASCII
    /// character) has none; it is checked on `search_text` only.
    static func isIndexable(_ keyword: String) -> Bool { keyword.utf8.count >= 2 }

    /// The LIKE pattern that probes the trigram index for `keyword` (lowercased): its hex, as `parley_search_key`
    /// writes the indexed text. Built here and bound as a bare parameter: with `'%' || parley_search_key($n) || '%'`
    /// in the statement the generic plan read the whole table (the planner cannot cost an index probe whose pattern
    /// is an expression), with the pattern as the parameter it is a bitmap scan of the index (bench/RESULTS.md).
    static func pattern(_ keyword: String) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var bytes: [UInt8] = [UInt8(ascii: "%")]
        bytes.reserveCapacity(keyword.utf8.count * 2 + 2)
        for byte in keyword.utf8 {
            bytes.append(digits[Int(byte >> 4)])
            bytes.append(digits[Int(byte & 0x0f)])
        }
        bytes.append(UInt8(ascii: "%"))
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `keywords` lowercased as `search_text` is (ICU root collation, Migrations/0019), in order: the same function on
    /// both sides, so Swift's and ICU's case mappings can never disagree about a match.
    static func lowercased(_ keywords: [String], on db: PostgresConnection) throws -> [String] {
        if keywords.isEmpty { return [] }
        return try db.query(
            """
            SELECT coalesce(array_agg(lower(k COLLATE "und-x-icu") ORDER BY n), '{}')
            FROM unnest(\(keywords)::text[]) WITH ORDINALITY AS t(k, n)
            """
        ).decodeFirst([String].self) ?? []
    }

    /// The statement: up to `limit` messages in search order, as rows in ``MessageColumn`` order.
    func query(appID: String) -> PostgresQuery {
        let direction = ascending ? "ASC" : "DESC"
        let comparison = ascending ? ">" : "<"
        var q: PostgresQuery = """
            SELECT \(unsafeSQL: MessageStore.columns("m")) FROM messages m
            WHERE m.app_id = \(appID) AND m.type NOT IN (31, 32) AND NOT m.deleted
            """
        for keyword in keywords {
            // In one conversation the keywords only filter the walk of its primary key: the generic plan otherwise
            // takes the index for every conversation, reading the app's matches of common trigrams (90 ms on 600,000
            // messages) to answer from a conversation of a few hundred (0.3 ms by its key).
            if conversation == nil && Self.isIndexable(keyword) {
                q += " AND m.search_text IS NOT NULL AND parley_search_key(m.search_text) LIKE \(Self.pattern(keyword))"
            }
            // The index is only a filter (a hex match may straddle two characters): the keyword itself decides.
            q += " AND strpos(m.search_text, \(keyword)::text) > 0"
        }
        if let conversation {
            q += " AND m.conv_type = \(conversation.type.rawValue) AND m.conv_id = \(conversation.threadID)"
        } else if let conversationType {
            q += " AND m.conv_type = \(conversationType.rawValue)"
        }
        if let types { q += " AND m.type = ANY(\(types)::int[])" }
        if let subTypes { q += " AND (m.type <> 200 OR ((m.body::jsonb) ->> 'sub_type')::int = ANY(\(subTypes)::int[]))" }
        if let senders { q += " AND m.sender = ANY(\(senders)::text[])" }
        if let startAt { q += " AND m.timestamp >= \(startAt)" }
        if let endAt { q += " AND m.timestamp < \(endAt)" }
        if let viewer { q += Self.visible(to: viewer) }
        if conversation != nil {
            // In one conversation `timestamp` never decreases as `seq` grows and seq is unique, so seq alone is the
            // search order there, and the conversation's primary key gives it without a sort.
            if let after { q += " AND m.seq \(unsafeSQL: comparison) \(after.seq)" }
            q += " ORDER BY m.seq \(unsafeSQL: direction) LIMIT \(limit)"
        } else {
            if let after {
                q += """
                     AND (m.timestamp, m.seq, m.message_id COLLATE "C") \(unsafeSQL: comparison) (\(after.timestamp), \(after.seq), \(after.messageID)::text)
                    """
            }
            q += """
                 ORDER BY m.timestamp \(unsafeSQL: direction), m.seq \(unsafeSQL: direction), m.message_id COLLATE "C" \(unsafeSQL: direction) LIMIT \(limit)
                """
        }
        return q
    }

    /// The conditions under which message `m` appears in `userID`'s history (docs/messages.md#history), for any
    /// conversation: the rules of ``MessageStore/historySQL`` for a user view (others' suppressed messages, targeted
    /// messages that do not list the user, the user's deletions for itself and its `cleared_seq`, current group
    /// membership of a live group) and of room history (a current member, the room's current life after `first_seq`),
    /// with the peer participant rule of ``Message/isVisible(to:)``.
    private static func visible(to userID: String) -> PostgresQuery {
        """
         AND (m.suppressed IS NULL OR m.sender = \(userID))
         AND (m.visible_to IS NULL OR m.sender = \(userID) OR \(userID) = ANY(m.visible_to))
         AND NOT EXISTS (SELECT 1 FROM message_hidden h WHERE h.app_id = m.app_id AND h.user_id = \(userID)
                         AND h.conv_type = m.conv_type AND h.conv_id = m.conv_id AND h.seq = m.seq)
         AND m.seq > coalesce((SELECT c.cleared_seq FROM conversations c WHERE c.app_id = m.app_id AND c.user_id = \(userID)
                 AND c.conv_type = m.conv_type
                 AND c.conv_id = CASE WHEN m.conv_type <> 'peer' THEN m.conv_id WHEN m.sender = \(userID) THEN m.recipient ELSE m.sender END), 0)
         AND CASE m.conv_type
               WHEN 'peer' THEN m.sender = \(userID) OR m.recipient = \(userID)
               WHEN 'group' THEN EXISTS (SELECT 1 FROM groups g JOIN group_members gm ON gm.app_id = g.app_id AND gm.group_id = g.group_id
                                         WHERE g.app_id = m.app_id AND g.group_id = m.conv_id AND g.dismissed_at IS NULL
                                           AND gm.user_id = \(userID))
               ELSE EXISTS (SELECT 1 FROM rooms r JOIN room_members rm ON rm.app_id = r.app_id AND rm.room_id = r.room_id
                            WHERE r.app_id = m.app_id AND r.room_id = m.conv_id AND rm.user_id = \(userID) AND m.seq > r.first_seq)
             END
        """
    }

    /// Runs the search.
    func run(appID: String, on db: PostgresConnection) throws -> PostgresResult {
        try db.query(query(appID: appID))
    }
}

extension MessageService {
    /// `GET /v1/messages/search`: the rows `search` finds, in its order. A viewer must exist and may read the named
    /// conversation's history under the rules of reading it (docs/messages.md#history: 404, 409 for a dismissed group,
    /// 403 for a non-member); the app's own search reads whatever is stored.
    func search(_ search: MessageSearch, conversationID: String?, keywords: [String]) throws -> PostgresResult {
        var search = search
        if let type = search.conversationType, let conversationID {
            search.conversation = .init(type: type, threadID: MessageStore.thread(type, search.viewer ?? "", conversationID))
        }
        if let viewer = search.viewer {
            try UserService.requireActive(viewer, appID: appID, on: db)
            if let conversation = search.conversation, let conversationID {
                switch conversation.type {
                case .group: try requireGroupHistory(conversationID, viewer: viewer, on: db)
                case .room: _ = try RoomAccess.requireRead(appID: appID, roomID: conversationID, viewer: viewer, on: db)
                case .peer: break
                }
            }
        }
        search.keywords = try MessageSearch.lowercased(keywords, on: db)
        return try search.run(appID: appID, on: db)
    }
}
