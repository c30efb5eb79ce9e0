import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The expiry of receipts (docs/messages.md#receipts, docs/operations.md#test-clock): a receipt not done 30 days after
/// its message's `timestamp` becomes `expired`, with one `message.receipt_updated` (`reader_id` null) to the sender.
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
