import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The coalesced delivery events (docs/messages.md#delivery-receipts): deliveries of a message within a second of its
/// last delivery event write none themselves; once that second ends this timer writes one `message.receipt_updated`
/// with the counts of that time, so the sender's last view is never stale.
///
/// It owns nothing: each batch is one transaction that takes each due notice under its message's row lock, in the order
/// a delivery locks (message, then notice), so the two never wait on each other in a cycle.
package enum MessageDeliveryNotices {
    package static let kind = TimerKind.batchedExpiry(name: "delivery_notices") { db, now, limit in
        let due = try MessageReceiptStore.dueDeliveryNotices(now: now, limit: limit, on: db)
        var events: [String: [NewEvent]] = [:]
        for notice in due {
            if let event = try MessageReceipts(db: db, appID: notice.appID, now: now).dueDeliveryEvent(notice.messageID) {
                events[notice.appID, default: []].append(event)
            }
        }
        return (due.count, events)
    }
}
