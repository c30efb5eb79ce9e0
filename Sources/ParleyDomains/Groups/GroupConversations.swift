import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The group conversation entries (docs/conversations.md, docs/messages.md#unread-read-state-and-mentions) as
/// membership changes: a member's entry follows the group's seq head (`follows_group`, Migrations/0009), and leaving,
/// being removed or dismissal freezes it at the head of that moment (`disabled`).
///
/// Stateless SQL; callers run it inside the membership change's transaction, under the group row lock.
enum GroupConversations {
    /// Creates (or, on a re-join, revives) the entries of `userIDs`, who just became members. Call it after the
    /// request's tips message: a joiner starts with `read_seq` = the group's head, its own join tips included.
    static func follow(appID: String, groupID: String, userIDs: [String], now: Int64, on db: PostgresConnection) throws {
        if userIDs.isEmpty { return }
        // last_seq / last_ts / order of a following entry come from the head at read time; the stored ones only
        // matter once it is frozen again.
        // `joined_seq` (the same head) tells the messages sent before this membership from those after it: a receipt's
        // recipients are the members at send time (Migrations/0020).
        try db.query(
            """
            INSERT INTO conversations AS c (app_id, user_id, conv_type, conv_id, thread_id, read_seq, joined_seq, last_seq, last_ts,
                                            order_key, created_at, updated_at, follows_group)
            SELECT \(appID), u.user_id, 'group', \(groupID), \(groupID), h.seq, h.seq, 0, 0, \(now), \(now), \(now), true
            FROM unnest(\(userIDs)::text[]) AS u(user_id)
            CROSS JOIN (SELECT coalesce((SELECT h.last_seq FROM conversation_seqs h
                                         WHERE h.app_id = \(appID) AND h.conv_type = 'group' AND h.conv_id = \(groupID)), 0) AS seq) h
            ON CONFLICT (app_id, user_id, conv_type, conv_id) DO UPDATE SET
                follows_group = true,
                deleted = false,
                read_seq = excluded.read_seq,
                joined_seq = excluded.joined_seq,
                order_key = greatest(c.order_key, excluded.order_key),
                updated_at = excluded.updated_at
            """)
    }

    /// Freezes the entries of `userIDs`, who are no longer members (or whose group is dismissed): `last_seq` and
    /// `last_ts` become the group's head (0 without messages), the order moves up to the head's timestamp, and the
    /// entry stops following the group. Leavers are frozen before their leave tips message, which they do not see.
    static func freeze(appID: String, groupID: String, userIDs: [String], now: Int64, on db: PostgresConnection) throws {
        if userIDs.isEmpty { return }
        // The head row is locked first, as a send locks it before touching entries: one lock order, and no send can
        // slip a message in between the frozen head and the membership change.
        try db.query(
            """
            WITH h AS (
                SELECT coalesce(max(s.last_seq), 0) AS seq, coalesce(max(s.last_ts), 0) AS ts
                FROM (SELECT last_seq, last_ts FROM conversation_seqs
                      WHERE app_id = \(appID) AND conv_type = 'group' AND conv_id = \(groupID) FOR UPDATE) s
            )
            UPDATE conversations c
            SET last_seq = h.seq, last_ts = h.ts, order_key = greatest(c.order_key, h.ts), follows_group = false, updated_at = \(now)
            FROM h
            WHERE c.app_id = \(appID) AND c.user_id = ANY(\(userIDs)::text[]) AND c.conv_type = 'group' AND c.conv_id = \(groupID)
                AND c.follows_group
            """)
    }
}
