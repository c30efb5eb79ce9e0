import ParleyAPI
import ParleyCore
import ParleyPostgres

/// A message's overall receipt status (API.md §1.9 `receipt_status`, §11.8).
enum ReceiptStatus: String, Sendable {
    case none, processing, done, expired

    /// The status of a message with `needReceipt` whose receipt settled as `settled` (nil: still open).
    init(needReceipt: Bool, settled: ReceiptStatus?) {
        self = settled ?? (needReceipt ? .processing : .none)
    }
}

/// Read receipts (API.md §11.8) of stored peer and group messages sent with `need_receipt`.
///
/// The recipients are fixed at send: their number is stored with the message (`receipt_recipients`) and who they are
/// is told from the group entries' `joined_seq` (Migrations/0020), so a group message stays one row at send. Each new
/// reader is a `message_receipt_reads` row and bumps `receipt_reads` under the message's row lock, so concurrent
/// readers each count once and each event carries the counts after its own read. Events go to the sender only.
///
/// A value made per request (or per timer batch); it owns nothing mutable.
struct MessageReceipts {
    let service: MessageService
    var db: PostgresConnection { service.db }
    var appID: String { service.appID }
    var now: Int64 { service.now }

    /// A receipt that is not done this long after the message's `timestamp` expires (§11.8, §17).
    static let lifetimeMillis: Int64 = 30 * 86_400_000

    init(_ ctx: APIContext) { service = MessageService(ctx) }

    init(db: PostgresConnection, appID: String, now: Int64) { service = MessageService(db: db, appID: appID, now: now) }

    /// A receipt as its sender reads it (`GET …/receipt`) and as `message.receipt_updated` reports it.
    struct Receipt {
        var status: ReceiptStatus
        var readCount: Int64
        var unreadCount: Int64
        var doneAt: Int64?
    }

    // MARK: - Reading

    /// `POST /v1/users/{user_id}/receipts/read`: marks each message read by `userID`, one result per item (`data` =
    /// `{message_id, receipt_status}`), and one `message.receipt_updated` per message whose readers grew.
    func read(_ items: [BatchItem], by userID: String, ctx: APIContext) throws -> [BatchResult] {
        try db.transaction { db in
            var results: [BatchResult] = []
            var events: [NewEvent] = []
            for (index, item) in items.enumerated() {
                guard let messageID = item.userID else {
                    results.append(BatchResult(index: index, id: item.id, outcome: .failed(.invalidParams, item.problem ?? "invalid")))
                    continue
                }
                do {
                    let (status, event) = try Self.tellingUnstored(messageID, ctx) { try markRead(messageID, by: userID, on: db) }
                    if let event { events.append(event) }
                    var data = JSONObjectWriter(capacity: 96)
                    data["message_id"] = messageID
                    data["receipt_status"] = status.rawValue
                    results.append(BatchResult(index: index, id: messageID, outcome: .ok(data.finish())))
                } catch let problem as APIError {
                    results.append(BatchResult(index: index, id: messageID, outcome: .failed(problem.code, problem.detail)))
                }
            }
            try EventLog.append(events, appID: appID, now: now, on: db)
            return results
        }
    }

    /// A stretch of a conversation a user's read position moved over (§11.7): seqs after `afterSeq` up to `throughSeq`.
    struct ReadRange {
        var conversationType: String
        var threadID: String
        var afterSeq: Int64
        var throughSeq: Int64
    }

    /// The `need_receipt` messages of others in the stretches `userID`'s read positions just moved over, marked read by
    /// `userID`: their `message.receipt_updated` events, for the caller's transaction (Conversations, which sits above
    /// Messages, hands its moves in). Messages it may not read (not a recipient, hidden, revoked, expired) are passed
    /// over.
    func markRead(_ ranges: [ReadRange], by userID: String) throws -> [NewEvent] {
        var events: [NewEvent] = []
        for range in ranges {
            let candidates = try MessageReceiptStore.openReceipts(
                appID: appID, conversationType: range.conversationType, threadID: range.threadID, afterSeq: range.afterSeq,
                throughSeq: range.throughSeq, notFrom: userID, sentAfter: now - Self.lifetimeMillis, on: db)
            for messageID in candidates {
                do {
                    if let event = try markRead(messageID, by: userID, on: db).event { events.append(event) }
                } catch is APIError {
                    continue
                }
            }
        }
        return events
    }

    /// Marks `messageID` read by `userID` under the message's row lock: its status after the read, and the event when
    /// the read is new (an already-read message answers its status and writes nothing).
    private func markRead(_ messageID: String, by userID: String, on db: PostgresConnection) throws -> (
        status: ReceiptStatus, event: NewEvent?
    ) {
        guard let message = try MessageStore.lock(appID: appID, messageID: messageID, on: db), !message.deleted,
            try service.isVisible(message, to: .user(userID), on: db)
        else { throw MessageService.notFound(messageID) }
        guard message.needReceipt else { throw Self.notApplicable(messageID, "no receipt was requested") }
        if message.from == userID { throw Self.notApplicable(messageID, "the sender does not read its own receipt") }
        if message.conversationType == .group,
            try !MessageReceiptStore.wasMember(appID: appID, groupID: message.to, userID: userID, atSeq: message.seq ?? 0, on: db)
        {
            throw Self.notApplicable(messageID, "user \(userID) joined after the message was sent")
        }
        if message.type == MessageType.revoke.rawValue { throw Self.notApplicable(messageID, "the message is revoked") }
        if status(of: message) == .expired { throw Self.notApplicable(messageID, "the receipt has expired") }
        guard
            let receipt = try MessageReceiptStore.addReader(appID: appID, messageID: messageID, userID: userID, now: now, on: db)
        else { return (status(of: message), nil) }
        return (receipt.status, Self.event(message, receipt, readerID: userID))
    }

    // MARK: - The sender's view

    /// `GET /v1/messages/{message_id}/receipt`: the receipt of a message `viewer` sent (or any, for the app).
    func receipt(_ messageID: String, viewer: MessageViewer) throws -> Receipt {
        let message = try sentMessage(messageID, viewer: viewer)
        guard message.needReceipt else { throw Self.notApplicable(messageID, "no receipt was requested") }
        guard let counts = try MessageReceiptStore.counts(appID: appID, messageID: messageID, on: db) else {
            throw MessageService.notFound(messageID)
        }
        return Receipt(
            status: status(of: message), readCount: counts.reads, unreadCount: max(counts.recipients - counts.reads, 0),
            doneAt: counts.doneAt)
    }

    /// `GET /v1/messages/{message_id}/receipt/members`: a page of a group message's recipients who have read it
    /// (`read`) or not (`unread`), by `user_id`, after `after`.
    func members(_ messageID: String, viewer: MessageViewer, read: Bool, after: String?, limit: Int) throws -> [MessageReceiptStore.Member] {
        let message = try sentMessage(messageID, viewer: viewer)
        if message.conversationType != .group {
            throw APIError(.unsupportedOperation, "receipt members are listed for group messages only")
        }
        guard message.needReceipt else { throw Self.notApplicable(messageID, "no receipt was requested") }
        return try read
            ? MessageReceiptStore.readers(appID: appID, messageID: messageID, after: after, limit: limit, on: db)
            : MessageReceiptStore.nonReaders(
                appID: appID, groupID: message.to, messageID: messageID, sender: message.from, seq: message.seq ?? 0, after: after,
                limit: limit, on: db)
    }

    /// The stored message `messageID` for its sender's receipt reads: 404 when unknown, a tombstone or not visible to
    /// `viewer`; 403 `6000285` for a user who did not send it.
    private func sentMessage(_ messageID: String, viewer: MessageViewer) throws -> Message {
        let message = try service.get(messageID, viewer: viewer, on: db)
        if message.deleted { throw MessageService.notFound(messageID) }
        if case .user(let userID) = viewer, userID != message.from {
            throw APIError(.messagePermissionDenied, "only the sender may read the receipt of message \(messageID)")
        }
        return message
    }

    // MARK: - Shared

    /// The status of `message` now: an open receipt past its lifetime is expired even before the timer settles it
    /// (reads never depend on a timer having fired, ``Timers``).
    private func status(of message: Message) -> ReceiptStatus {
        let status = ReceiptStatus(needReceipt: message.needReceipt, settled: message.settledReceipt)
        return status == .processing && now >= message.timestamp + Self.lifetimeMillis ? .expired : status
    }

    /// `message.receipt_updated` about `message` to its sender (§18).
    static func event(_ message: Message, _ receipt: Receipt, readerID: String?) -> NewEvent {
        var data = JSONObjectWriter(capacity: 256)
        data["message_id"] = message.messageID
        data["conversation_type"] = message.conversationType.rawValue
        data["to"] = message.to
        data["receipt_status"] = receipt.status.rawValue
        data["read_count"] = receipt.readCount
        data["unread_count"] = receipt.unreadCount
        data["reader_id"] = readerID
        return MessageAudience.senderEvent("message.receipt_updated", data: data.finish(), about: message)
    }

    static func notApplicable(_ messageID: String, _ reason: String) -> APIError {
        APIError(.receiptNotApplicable, "message \(messageID): \(reason)")
    }

    /// Runs `body` for a receipt call naming `messageID`: an unstored message's id the server still knows answers
    /// 422 `6000277` (§11.1: receipt calls on unstored messages) instead of 404.
    static func tellingUnstored<T>(_ messageID: String, _ ctx: APIContext, _ body: () throws -> T) throws -> T {
        do { return try body() } catch let error as APIError where error.code == .messageNotFound {
            guard MessageService.isRecentUnstored(messageID, ctx) else { throw error }
            throw notApplicable(messageID, "the message was not stored")
        }
    }
}

/// The expiry of receipts (API.md §11.8, §17): a receipt not done 30 days after its message's `timestamp` becomes
/// `expired`, with one `message.receipt_updated` (`reader_id` null) to the sender.
///
/// Reads already treat an overdue receipt as expired; this timer makes the state and its event durable. It owns
/// nothing: each batch is one transaction that claims its rows atomically.
package enum MessageReceiptExpiry {
    package static let kind = TimerKind.batchedExpiry(name: "receipt_expiry") { db, now, limit in
        let expired = try MessageReceiptStore.expireDue(sentBy: now - MessageReceipts.lifetimeMillis, limit: limit, on: db)
        var events: [String: [NewEvent]] = [:]
        for (message, receipt) in expired {
            events[message.appID, default: []].append(MessageReceipts.event(message.message, receipt, readerID: nil))
        }
        return (expired.count, events)
    }
}

/// SQL for receipts (Migrations/0020). No rules here: ``MessageReceipts`` checks and locks.
enum MessageReceiptStore {
    /// A recipient in `GET …/receipt/members`: `readAt` nil for one who has not read.
    struct Member: Sendable {
        var userID: String
        var name: String
        var readAt: Int64?

        func json() -> [UInt8] {
            var o = JSONObjectWriter(capacity: 96)
            o["user_id"] = userID
            o["name"] = name
            o["read_at"] = readAt
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
        ).first.map { try $0[0].int64 }
        return (joinedSeq ?? 0) < seq
    }

    /// Records `userID` as a reader of the locked message `messageID` and counts it; nil when it had read already.
    /// The last recipient's read makes the receipt `done`.
    static func addReader(appID: String, messageID: String, userID: String, now: Int64, on db: PostgresConnection) throws
        -> MessageReceipts.Receipt?
    {
        try db.query(
            """
            WITH added AS (
                INSERT INTO message_receipt_reads (app_id, message_id, user_id, read_at) VALUES (\(appID), \(messageID), \(userID), \(now))
                ON CONFLICT DO NOTHING RETURNING 1
            )
            UPDATE messages SET receipt_reads = receipt_reads + 1,
                receipt_state = CASE WHEN receipt_reads + 1 >= receipt_recipients THEN 'done' END,
                receipt_done_at = CASE WHEN receipt_reads + 1 >= receipt_recipients THEN \(now)::bigint END
            WHERE app_id = \(appID) AND message_id = \(messageID) AND EXISTS (SELECT 1 FROM added)
            RETURNING receipt_state, receipt_reads, coalesce(receipt_recipients, 0), receipt_done_at
            """
        ).first.map { try receipt($0, at: 0) }
    }

    /// The receipt columns of `messageID`: its recipients, readers and done time; nil when it has no row.
    static func counts(appID: String, messageID: String, on db: PostgresConnection) throws -> (
        recipients: Int64, reads: Int64, doneAt: Int64?
    )? {
        try db.query(
            """
            SELECT coalesce(receipt_recipients, 0), receipt_reads, receipt_done_at FROM messages
            WHERE app_id = \(appID) AND message_id = \(messageID)
            """
        ).decodeFirst((Int64, Int64, Int64?).self).map { (recipients: $0.0, reads: $0.1, doneAt: $0.2) }
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
    /// `seq`, and left members whose frozen entry covers `seq` (Migrations/0020).
    static func nonReaders(
        appID: String, groupID: String, messageID: String, sender: String, seq: Int64, after: String?, limit: Int,
        on db: PostgresConnection
    ) throws -> [Member] {
        try db.query(
            """
            SELECT c.user_id, coalesce(u.name, ''), NULL::bigint
            FROM (SELECT user_id FROM group_members WHERE app_id = \(appID) AND group_id = \(groupID)
                  UNION SELECT user_id FROM group_member_history WHERE app_id = \(appID) AND group_id = \(groupID)) x
            JOIN conversations c ON c.app_id = \(appID) AND c.user_id = x.user_id AND c.conv_type = 'group' AND c.conv_id = \(groupID)
            LEFT JOIN users u ON u.app_id = c.app_id AND u.user_id = c.user_id
            WHERE c.user_id <> \(sender) AND c.joined_seq < \(seq) AND (c.follows_group OR c.last_seq >= \(seq))
              AND c.user_id COLLATE "C" > \(after ?? "") COLLATE "C"
              AND NOT EXISTS (SELECT 1 FROM message_receipt_reads r
                              WHERE r.app_id = c.app_id AND r.message_id = \(messageID) AND r.user_id = c.user_id)
            ORDER BY c.user_id COLLATE "C" LIMIT \(limit)
            """
        ).decode((String, String, Int64?).self).map { Member(userID: $0.0, name: $0.1, readAt: $0.2) }
    }

    /// The open receipts of others in a conversation between two seqs (a read position's move, §11.7), sent after
    /// `sentAfter` (older ones have expired), by seq.
    static func openReceipts(
        appID: String, conversationType: String, threadID: String, afterSeq: Int64, throughSeq: Int64, notFrom userID: String,
        sentAfter: Int64, on db: PostgresConnection
    ) throws -> [String] {
        try db.query(
            """
            SELECT message_id FROM messages
            WHERE app_id = \(appID) AND conv_type = \(conversationType) AND conv_id = \(threadID)
              AND seq > \(afterSeq) AND seq <= \(throughSeq) AND need_receipt AND receipt_state IS NULL AND sender <> \(userID)
              AND type <> 31 AND NOT deleted AND timestamp > \(sentAfter)
            ORDER BY seq
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
            RETURNING m.app_id, \(sql: MessageStore.columns("m")), m.receipt_state, m.receipt_reads, coalesce(m.receipt_recipients, 0),
                      m.receipt_done_at
            """
        ).rows.compactMap { row in
            guard let message = try MessageStore.message(row, at: 1) else { return nil }
            return ((try row[0].string, message), try receipt(row, at: offset))
        }.sorted { $0.message.message.timestamp < $1.message.message.timestamp }
    }

    /// The receipt in the four columns from `offset`: state, reads, recipients, done time.
    private static func receipt(_ row: PostgresRow, at offset: Int) throws -> MessageReceipts.Receipt {
        let state = row[offset].isNull ? nil : ReceiptStatus(rawValue: try row[offset].string)
        let reads = try row[offset + 1].int64
        let recipients = try row[offset + 2].int64
        return MessageReceipts.Receipt(
            status: ReceiptStatus(needReceipt: true, settled: state), readCount: reads, unreadCount: max(recipients - reads, 0),
            doneAt: row[offset + 3].isNull ? nil : try row[offset + 3].int64)
    }
}
