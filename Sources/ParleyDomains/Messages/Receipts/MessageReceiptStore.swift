import ParleyAPI
import ParleyCore
import ParleyPostgres

/// SQL for receipts (Migrations/0020, delivery receipts Migrations/0034). No rules here: ``MessageReceipts`` checks and locks.
enum MessageReceiptStore {
    /// A recipient in `GET …/receipt/members`: `readAt` nil for one who has not read.
    struct Member: Sendable {
        var userID: String
        var name: String
        var readAt: Int64?
        /// Set for the `delivered` state only (its items carry `delivered_at`).
        var deliveredAt: Int64? = nil

        func json() -> [UInt8] {
            var o = JSONObjectWriter(capacity: 112)
            o["user_id"] = userID
            o["name"] = name
            o["read_at"] = readAt
            if let deliveredAt { o["delivered_at"] = deliveredAt }
            return o.finish()
        }
    }

    /// Whether the current member `userID` of `groupID` was a member when seq `seq` was sent: its entry's membership
    /// began at a lower head. An entry made before Migrations/0020 (or none) counts from the group's beginning.
    static func wasMember(appID: String, groupID: String, userID: String, atSeq seq: Int64, on db: PostgresConnection) throws -> Bool {
        let joinedSeq = try db.query(
            """
            SELECT joined_seq FROM conversations
            WHERE app_id = \(appID) AND user_id = \(userID) AND conv_type = 'group' AND conv_id = \(groupID)
            """
        ).decodeFirst(Int64.self)
        return (joinedSeq ?? 0) < seq
    }

    /// Records `userID` as a reader of the locked message `messageID` and counts it; nil when it had read already.
    /// The last recipient's read makes the receipt `done`; `done_at` keeps the first such read (a recipient count one
    /// off, Migrations/0020, lets a read come after it).
    static func addReader(appID: String, messageID: String, userID: String, now: Int64, on db: PostgresConnection) throws
        -> MessageReceipts.Receipt?
    {
        try db.query(
            """
            WITH added AS (
                INSERT INTO message_receipt_reads (app_id, message_id, user_id, read_at) VALUES (\(appID), \(messageID), \(userID), \(now))
                ON CONFLICT DO NOTHING RETURNING 1
            ), delivered AS (
                INSERT INTO message_receipt_deliveries (app_id, message_id, user_id, delivered_at)
                SELECT \(appID), \(messageID), \(userID), \(now) WHERE EXISTS (SELECT 1 FROM added)
                ON CONFLICT DO NOTHING RETURNING 1
            )
            UPDATE messages SET receipt_reads = receipt_reads + 1,
                receipt_deliveries = receipt_deliveries + (SELECT count(*) FROM delivered),
                receipt_state = CASE WHEN receipt_reads + 1 >= receipt_recipients THEN 'done' END,
                receipt_done_at = coalesce(receipt_done_at, CASE WHEN receipt_reads + 1 >= receipt_recipients THEN \(now)::bigint END)
            WHERE app_id = \(appID) AND message_id = \(messageID) AND EXISTS (SELECT 1 FROM added)
            RETURNING \(unsafeSQL: receiptColumns)
            """
        ).first.map { try receipt($0, at: 0) }
    }

    /// Records `userID` as a recipient that received the locked message `messageID` (a read counts as received, so
    /// an earlier reader is not counted again); nil when it was recorded already.
    static func addDelivery(appID: String, messageID: String, userID: String, now: Int64, on db: PostgresConnection) throws
        -> MessageReceipts.Receipt?
    {
        try db.query(
            """
            WITH added AS (
                INSERT INTO message_receipt_deliveries (app_id, message_id, user_id, delivered_at)
                SELECT \(appID), \(messageID), \(userID), \(now)
                WHERE NOT EXISTS (SELECT 1 FROM message_receipt_reads
                                  WHERE app_id = \(appID) AND message_id = \(messageID) AND user_id = \(userID))
                ON CONFLICT DO NOTHING RETURNING 1
            )
            UPDATE messages SET receipt_deliveries = receipt_deliveries + 1
            WHERE app_id = \(appID) AND message_id = \(messageID) AND EXISTS (SELECT 1 FROM added)
            RETURNING \(unsafeSQL: receiptColumns)
            """
        ).first.map { try receipt($0, at: 0) }
    }

    /// Stamps a delivery event of the locked message `messageID` (docs/messages.md#delivery-receipts): true when one
    /// may be written now (none in the last second), false when it is left to the `delivery_notices` timer, which
    /// writes one when the second ends.
    static func claimDeliveryNotice(appID: String, messageID: String, now: Int64, on db: PostgresConnection) throws -> Bool {
        let pending = try db.query(
            """
            INSERT INTO message_delivery_notices AS n (app_id, message_id, due_at) VALUES (\(appID), \(messageID), \(now + 1000))
            ON CONFLICT (app_id, message_id) DO UPDATE
                SET pending = n.due_at > \(now), due_at = CASE WHEN n.due_at > \(now) THEN n.due_at ELSE \(now + 1000) END
            RETURNING pending
            """
        ).decodeFirst(Bool.self)
        return pending == false
    }

    /// Up to `limit` delivery notices whose second has ended, in any app, oldest first (not locked: each is taken
    /// under its message's lock by ``takeDeliveryNotice(appID:messageID:now:on:)``, in the order deliveries lock).
    static func dueDeliveryNotices(now: Int64, limit: Int, on db: PostgresConnection) throws -> [(appID: String, messageID: String)] {
        try db.query(
            """
            SELECT app_id, message_id FROM message_delivery_notices WHERE due_at <= \(now) ORDER BY due_at LIMIT \(limit)
            """
        ).decode((String, String).self).map { (appID: $0.0, messageID: $0.1) }
    }

    /// Drops the due notice of `messageID` (whose message the caller has locked): whether deliveries are waiting for
    /// their event; nil when it is gone or no longer due.
    static func takeDeliveryNotice(appID: String, messageID: String, now: Int64, on db: PostgresConnection) throws -> Bool? {
        try db.query(
            """
            DELETE FROM message_delivery_notices WHERE app_id = \(appID) AND message_id = \(messageID) AND due_at <= \(now)
            RETURNING pending
            """
        ).decodeFirst(Bool.self)
    }

    /// A page of the recipients of `messageID` that received it (readers included), after `after`, by `user_id`.
    static func deliverers(appID: String, messageID: String, after: String?, limit: Int, on db: PostgresConnection) throws -> [Member] {
        let rows: [(String, String, Int64?, Int64)] = try db.query(
            """
            SELECT x.user_id, coalesce(u.name, ''), r.read_at, min(x.at)
            FROM (SELECT user_id, delivered_at AS at FROM message_receipt_deliveries WHERE app_id = \(appID) AND message_id = \(messageID)
                  UNION ALL
                  SELECT user_id, read_at FROM message_receipt_reads WHERE app_id = \(appID) AND message_id = \(messageID)) x
            LEFT JOIN message_receipt_reads r ON r.app_id = \(appID) AND r.message_id = \(messageID) AND r.user_id = x.user_id
            LEFT JOIN users u ON u.app_id = \(appID) AND u.user_id = x.user_id
            WHERE x.user_id COLLATE "C" > \(after ?? "") COLLATE "C"
            GROUP BY x.user_id, u.name, r.read_at
            ORDER BY x.user_id COLLATE "C" LIMIT \(limit)
            """
        ).decode((String, String, Int64?, Int64).self)
        return rows.map { Member(userID: $0.0, name: $0.1, readAt: $0.2, deliveredAt: $0.3) }
    }

    /// The receipt columns of `messageID`: its recipients, readers and done time; nil when it has no row.
    static func counts(appID: String, messageID: String, on db: PostgresConnection) throws -> (
        recipients: Int64, reads: Int64, doneAt: Int64?, deliveries: Int64
    )? {
        try db.query(
            """
            SELECT coalesce(receipt_recipients, 0), receipt_reads, receipt_done_at, greatest(receipt_deliveries, receipt_reads) FROM messages
            WHERE app_id = \(appID) AND message_id = \(messageID)
            """
        ).decodeFirst((Int64, Int64, Int64?, Int64).self).map { (recipients: $0.0, reads: $0.1, doneAt: $0.2, deliveries: $0.3) }
    }

    /// A page of the readers of `messageID` after `after`, by `user_id`.
    static func readers(appID: String, messageID: String, after: String?, limit: Int, on db: PostgresConnection) throws -> [Member] {
        try db.query(
            """
            SELECT r.user_id, coalesce(u.name, ''), r.read_at
            FROM message_receipt_reads r LEFT JOIN users u ON u.app_id = r.app_id AND u.user_id = r.user_id
            WHERE r.app_id = \(appID) AND r.message_id = \(messageID) AND r.user_id COLLATE "C" > \(after ?? "") COLLATE "C"
            ORDER BY r.user_id COLLATE "C" LIMIT \(limit)
            """
        ).decode((String, String, Int64?).self).map { Member(userID: $0.0, name: $0.1, readAt: $0.2) }
    }

    /// A page of the recipients of group message `messageID` (seq `seq`) who have not read it, after `after`, by
    /// `user_id`: the members when it was sent other than the sender — current members whose entry joined before
    /// `seq`, and left members whose frozen entry covers `seq` (Migrations/0020); of a targeted message, only the members
    /// it lists (`visibleTo`).
    static func nonReaders(
        appID: String, groupID: String, messageID: String, sender: String, seq: Int64, visibleTo: [String]?, after: String?,
        limit: Int, on db: PostgresConnection
    ) throws -> [Member] {
        try db.query(
            """
            SELECT c.user_id, coalesce(u.name, ''), NULL::bigint
            FROM (SELECT user_id FROM group_members WHERE app_id = \(appID) AND group_id = \(groupID)
                  UNION SELECT user_id FROM group_member_history WHERE app_id = \(appID) AND group_id = \(groupID)) x
            JOIN conversations c ON c.app_id = \(appID) AND c.user_id = x.user_id AND c.conv_type = 'group' AND c.conv_id = \(groupID)
            LEFT JOIN users u ON u.app_id = c.app_id AND u.user_id = c.user_id
            WHERE c.user_id <> \(sender) AND c.joined_seq < \(seq) AND (c.follows_group OR c.last_seq >= \(seq))
              AND (\(visibleTo)::text[] IS NULL OR c.user_id = ANY(\(visibleTo)::text[]))
              AND c.user_id COLLATE "C" > \(after ?? "") COLLATE "C"
              AND NOT EXISTS (SELECT 1 FROM message_receipt_reads r
                              WHERE r.app_id = c.app_id AND r.message_id = \(messageID) AND r.user_id = c.user_id)
            ORDER BY c.user_id COLLATE "C" LIMIT \(limit)
            """
        ).decode((String, String, Int64?).self).map { Member(userID: $0.0, name: $0.1, readAt: $0.2) }
    }

    /// The open receipts of others in the conversations `ranges` read up to their `throughSeq` that `userID` has not
    /// read, sent after `sentAfter` (older ones have expired): in one statement for all the conversations of a read
    /// (`read_all` reads them all), by conversation in `ranges` order, then seq. Only open receipts are scanned
    /// (`messages_receipt_open`): `timestamp + 0` keeps the expiry timer's index (`messages_receipt_due`, every open
    /// receipt of every app by time) out of the generic plan, which walked all of it for a range condition on
    /// `timestamp` (63 ms for 5 receipts over 400,000 open ones; 0.15 ms on the conversation's index, bench/RESULTS.md).
    static func openReceipts(
        appID: String, ranges: [MessageReceipts.ReadRange], unreadBy userID: String, sentAfter: Int64, on db: PostgresConnection
    ) throws -> [String] {
        if ranges.isEmpty { return [] }
        return try db.query(
            """
            SELECT m.message_id
            FROM unnest(\(ranges.map(\.conversationType))::text[], \(ranges.map(\.threadID))::text[], \(ranges.map(\.throughSeq))::bigint[])
                WITH ORDINALITY AS c(conv_type, thread_id, through_seq, position)
            JOIN messages m ON m.app_id = \(appID) AND m.conv_type = c.conv_type AND m.conv_id = c.thread_id AND m.seq <= c.through_seq
              AND m.need_receipt AND m.receipt_state IS NULL AND m.type <> 31 AND NOT m.deleted
            WHERE m.sender <> \(userID) AND m.suppressed IS NULL AND m.timestamp + 0 > \(sentAfter)
              AND (m.visible_to IS NULL OR \(userID) = ANY(m.visible_to))
              -- Not the group messages sent before the user's membership began (it is no recipient of them).
              AND (c.conv_type <> 'group' OR m.seq > coalesce(
                  (SELECT e.joined_seq FROM conversations e
                   WHERE e.app_id = \(appID) AND e.user_id = \(userID) AND e.conv_type = 'group' AND e.conv_id = c.thread_id), 0))
              AND NOT EXISTS (SELECT 1 FROM message_receipt_reads r
                              WHERE r.app_id = m.app_id AND r.message_id = m.message_id AND r.user_id = \(userID))
            ORDER BY c.position, m.seq
            """
        ).decode((String).self)
    }

    /// Expires up to `limit` open receipts of messages sent at or before `sentBy`, in any app, oldest first: each
    /// message (with its app) and its receipt after the change. A receipt that changed meanwhile is re-checked under
    /// its row lock and left alone once done.
    static func expireDue(sentBy: Int64, limit: Int, on db: PostgresConnection) throws -> [(
        message: (appID: String, message: Message), receipt: MessageReceipts.Receipt
    )] {
        let offset = MessageColumn.allCases.count + 1
        return try db.query(
            """
            UPDATE messages m SET receipt_state = 'expired'
            FROM (SELECT app_id, message_id FROM messages
                  WHERE need_receipt AND receipt_state IS NULL AND type <> 31 AND NOT deleted AND timestamp <= \(sentBy)
                  ORDER BY timestamp LIMIT \(limit) FOR UPDATE) d
            WHERE m.app_id = d.app_id AND m.message_id = d.message_id AND m.receipt_state IS NULL
            RETURNING m.app_id, \(unsafeSQL: MessageStore.columns("m")), \(unsafeSQL: receiptColumns)
            """
        ).rows.compactMap { row in
            guard let message = try MessageStore.message(row, at: 1) else { return nil }
            return ((try row.decode(String.self, at: 0), message), try receipt(row, at: offset))
        }.sorted { $0.message.message.timestamp < $1.message.message.timestamp }
    }

    /// The receipt columns of a `messages` row, read by ``receipt(_:at:)``. Reads before Migrations/0034 counted no
    /// delivery: a read message was received, hence greatest().
    private static let receiptColumns =
        "receipt_state, receipt_reads, coalesce(receipt_recipients, 0), receipt_done_at, greatest(receipt_deliveries, receipt_reads)"

    /// The receipt in the five columns from `offset` (``receiptColumns``): state, reads, recipients, done time, deliveries.
    private static func receipt(_ row: PostgresRow, at offset: Int) throws -> MessageReceipts.Receipt {
        let (state, reads, recipients, doneAt, deliveries) = try row.decode((String?, Int64, Int64, Int64?, Int64).self, at: offset)
        return MessageReceipts.Receipt(
            status: ReceiptStatus(needReceipt: true, settled: state.flatMap(ReceiptStatus.init(rawValue:))), readCount: reads,
            unreadCount: max(recipients - reads, 0), doneAt: doneAt, deliveredCount: deliveries)
    }
}
