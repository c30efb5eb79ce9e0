import ParleyAPI
import ParleyCore
import ParleyPostgres

/// A message's overall receipt status (`receipt_status`, docs/messages.md#receipts).
enum ReceiptStatus: String, Sendable {
    case none, processing, done, expired

    /// The status of a message with `needReceipt` whose receipt settled as `settled` (nil: still open).
    init(needReceipt: Bool, settled: ReceiptStatus?) {
        self = settled ?? (needReceipt ? .processing : .none)
    }
}

/// Read receipts (docs/messages.md#receipts) of stored peer and group messages sent with `need_receipt`.
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

    /// A receipt that is not done this long after the message's `timestamp` expires (docs/messages.md#receipts,
    /// docs/operations.md#test-clock).
    static let lifetimeMillis: Int64 = 30 * 86_400_000

    init(_ ctx: APIContext) { service = MessageService(ctx) }

    init(db: PostgresConnection, appID: String, now: Int64) { service = MessageService(db: db, appID: appID, now: now) }

    /// A receipt as its sender reads it (`GET …/receipt`) and as `message.receipt_updated` reports it.
    struct Receipt {
        var status: ReceiptStatus
        var readCount: Int64
        var unreadCount: Int64
        var doneAt: Int64?
        /// The recipients that received it (a reader received it too, docs/messages.md#delivery-receipts).
        var deliveredCount: Int64
        /// A peer message's receipt (its views add `delivered`).
        var peer = false
    }

    // MARK: - Reading

    /// `POST /v1/users/{user_id}/receipts/read`: marks each message read by `userID`, one result per item (`data` =
    /// `{message_id, receipt_status}`), and one `message.receipt_updated` per message whose readers grew.
    func read(_ items: [BatchItem], by userID: String, ctx: APIContext) throws -> [BatchResult] {
        try each(items, of: userID) { messageID, db in
            try Self.tellingUnstored(messageID, ctx) { try markRead(messageID, by: userID, on: db) }
        }
    }

    /// A receipt batch of `userID` (an active user) in one transaction: `mark` answers each message's status and its
    /// event, if any; results carry `{message_id, receipt_status}`, per item problems their code.
    private func each(
        _ items: [BatchItem], of userID: String, mark: (_ messageID: String, _ db: PostgresConnection) throws -> (ReceiptStatus, NewEvent?)
    ) throws -> [BatchResult] {
        try UserService.requireActive(userID, appID: appID, on: db)
        return try db.transaction { db in
            var results: [BatchResult] = []
            var events: [NewEvent] = []
            for (index, item) in items.enumerated() {
                guard let messageID = item.userID else {
                    results.append(BatchResult(index: index, id: item.id, outcome: .failed(.invalidParams, item.problem ?? "invalid")))
                    continue
                }
                do {
                    let (status, event) = try mark(messageID, db)
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

    /// A conversation read by a user up to `throughSeq` (its read position,
    /// docs/messages.md#unread-read-state-and-mentions).
    struct ReadRange {
        var conversationType: String
        var threadID: String
        var throughSeq: Int64
    }

    /// The open `need_receipt` messages of others up to each read position that `userID` has not read yet, marked read
    /// by `userID`: their `message.receipt_updated` events, for the caller's transaction (Conversations, which sits
    /// above Messages, hands its read positions in). Messages it may not read (not a recipient, hidden, revoked,
    /// expired) are passed over.
    func markRead(_ ranges: [ReadRange], by userID: String) throws -> [NewEvent] {
        let candidates = try MessageReceiptStore.openReceipts(
            appID: appID, ranges: ranges, unreadBy: userID, sentAfter: now - Self.lifetimeMillis, on: db)
        var events: [NewEvent] = []
        for messageID in candidates {
            do {
                if let event = try markRead(messageID, by: userID, on: db).event { events.append(event) }
            } catch is APIError {
                continue
            }
        }
        return events
    }

    /// Marks `messageID` read by `userID` under the message's row lock: its status after the read, and the event when
    /// the read is new (an already-read message answers its status and writes nothing).
    private func markRead(_ messageID: String, by userID: String, on db: PostgresConnection) throws -> (
        status: ReceiptStatus, event: NewEvent?
    ) {
        let message = try lockedForRecipient(messageID, userID, on: db)
        if let reason = try notRecipient(message, userID, on: db) { throw Self.notApplicable(messageID, reason) }
        guard
            let receipt = try MessageReceiptStore.addReader(appID: appID, messageID: messageID, userID: userID, now: now, on: db)
        else { return (status(of: message), nil) }
        return (receipt.status, Self.event(message, receipt, readerID: userID))
    }

    /// The message `messageID` locked for a receipt change by `userID`: 404 `7000210` when unknown, a tombstone or not
    /// visible to the user.
    private func lockedForRecipient(_ messageID: String, _ userID: String, on db: PostgresConnection) throws -> Message {
        guard let message = try MessageStore.lock(appID: appID, messageID: messageID, on: db), !message.deleted,
            try service.isVisible(message, to: .user(userID), on: db)
        else { throw MessageService.notFound(messageID) }
        return message
    }

    /// Why `userID` has no open receipt to change on `message` (nil when it has one): no receipt requested, the sender,
    /// a member who joined later, revoked, expired.
    private func notRecipient(_ message: Message, _ userID: String, on db: PostgresConnection) throws -> String? {
        guard message.needReceipt else { return "no receipt was requested" }
        if message.from == userID { return "the sender does not read its own receipt" }
        if message.conversationType == .group,
            try !MessageReceiptStore.wasMember(appID: appID, groupID: message.to, userID: userID, atSeq: message.seq ?? 0, on: db)
        {
            return "user \(userID) joined after the message was sent"
        }
        if message.type == MessageType.revoke.rawValue { return "the message is revoked" }
        if status(of: message) == .expired { return "the receipt has expired" }
        return nil
    }

    // MARK: - Delivery (docs/messages.md#delivery-receipts)

    /// `POST /v1/messages/delivered`: marks each message received by `userID`, one result per item (`data` =
    /// `{message_id, receipt_status}`). A message the user can see but has no open receipt on (no receipt requested,
    /// its own, revoked, expired, sent before it joined) succeeds and records nothing: the client acknowledges what
    /// it received without knowing which messages asked. Events: at most one `message.receipt_updated` per message per
    /// second (``MessageReceiptStore/claimDeliveryNotice(appID:messageID:now:on:)``; the rest via
    /// ``MessageDeliveryNotices``).
    func deliver(_ items: [BatchItem], to userID: String) throws -> [BatchResult] {
        try each(items, of: userID) { messageID, db in
            let message = try lockedForRecipient(messageID, userID, on: db)
            guard try notRecipient(message, userID, on: db) == nil,
                let receipt = try MessageReceiptStore.addDelivery(appID: appID, messageID: messageID, userID: userID, now: now, on: db)
            else { return (status(of: message), nil) }
            // Within a second of the last delivery event, the `delivery_notices` timer reports it when the second ends.
            let eventNow = try MessageReceiptStore.claimDeliveryNotice(appID: appID, messageID: messageID, now: now, on: db)
            return (receipt.status, eventNow ? Self.event(message, receipt, readerID: nil) : nil)
        }
    }

    /// The coalesced delivery event of `messageID` whose second has ended, for the `delivery_notices` timer: the
    /// receipt's counts now; nil when no delivery waited or the message is gone.
    func dueDeliveryEvent(_ messageID: String) throws -> NewEvent? {
        guard let message = try MessageStore.lock(appID: appID, messageID: messageID, on: db),
            try MessageReceiptStore.takeDeliveryNotice(appID: appID, messageID: messageID, now: now, on: db) == true, !message.deleted,
            let counts = try MessageReceiptStore.counts(appID: appID, messageID: messageID, on: db)
        else { return nil }
        let receipt = Receipt(
            status: status(of: message), readCount: counts.reads, unreadCount: max(counts.recipients - counts.reads, 0),
            doneAt: counts.doneAt, deliveredCount: counts.deliveries)
        return Self.event(message, receipt, readerID: nil)
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
            doneAt: counts.doneAt, deliveredCount: counts.deliveries, peer: message.conversationType == .peer)
    }

    /// Which recipients `GET …/receipt/members` lists.
    enum MemberState: String, CaseIterable {
        case read, unread, delivered
    }

    /// `GET /v1/messages/{message_id}/receipt/members`: a page of a group message's recipients who have read it
    /// (`read`), not (`unread`), or received it (`delivered`, readers included), by `user_id`, after `after`.
    func members(_ messageID: String, viewer: MessageViewer, state: MemberState, after: String?, limit: Int) throws
        -> [MessageReceiptStore.Member]
    {
        let message = try sentMessage(messageID, viewer: viewer)
        if message.conversationType != .group {
            throw APIError(.unsupportedOperation, "receipt members are listed for group messages only")
        }
        guard message.needReceipt else { throw Self.notApplicable(messageID, "no receipt was requested") }
        switch state {
        case .read: return try MessageReceiptStore.readers(appID: appID, messageID: messageID, after: after, limit: limit, on: db)
        case .delivered: return try MessageReceiptStore.deliverers(appID: appID, messageID: messageID, after: after, limit: limit, on: db)
        case .unread:
            return try MessageReceiptStore.nonReaders(
                appID: appID, groupID: message.to, messageID: messageID, sender: message.from, seq: message.seq ?? 0,
                visibleTo: message.visibleTo, after: after, limit: limit, on: db)
        }
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

    /// `message.receipt_updated` about `message` to its sender (docs/events.md#the-event-object).
    static func event(_ message: Message, _ receipt: Receipt, readerID: String?) -> NewEvent {
        var data = JSONObjectWriter(capacity: 256)
        data["message_id"] = message.messageID
        data["conversation_type"] = message.conversationType.rawValue
        data["to"] = message.to
        data["receipt_status"] = receipt.status.rawValue
        data["read_count"] = receipt.readCount
        data["unread_count"] = receipt.unreadCount
        data["delivered_count"] = receipt.deliveredCount
        if message.conversationType == .peer { data["delivered"] = receipt.deliveredCount > 0 }
        data["reader_id"] = readerID
        return MessageAudience.senderEvent("message.receipt_updated", data: data.finish(), about: message)
    }

    static func notApplicable(_ messageID: String, _ reason: String) -> APIError {
        APIError(.receiptNotApplicable, "message \(messageID): \(reason)")
    }

    /// Runs `body` for a receipt call naming `messageID`: an unstored message's id the server still knows answers
    /// 422 `6000277` (receipt calls on unstored messages, docs/messages.md#receipts) instead of 404.
    static func tellingUnstored<T>(_ messageID: String, _ ctx: APIContext, _ body: () throws -> T) throws -> T {
        do { return try body() } catch let error as APIError where error.code == .messageNotFound {
            guard MessageService.isRecentUnstored(messageID, ctx) else { throw error }
            throw notApplicable(messageID, "the message was not stored")
        }
    }
}
