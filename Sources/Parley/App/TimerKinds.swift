import ParleyAPI
import ParleyCore
import ParleyDomains
import ParleyLive

/// Every timer kind of the server, handed to ``Timers`` when the node starts; a domain with a timer adds its kind
/// here (the domains declare their kinds; the app layer, which sees them all, lists them).
enum TimerKinds {
    static let all: [TimerKind] = [
        EventRetention.kind, FriendApplicationExpiry.kind, CustomStatusExpiry.kind, StatusSubscriptionExpiry.kind, GroupApplicationExpiry.kind,
        RetentionPurge.kind, WebhookRetention.kind, PushRetention.kind, RoomTimers.destruction, RoomTimers.offlineRemoval,
        CallTimers.kind, MessageReceiptExpiry.kind, FirstStatistics.kind, FileSweep.kind, ScheduledSending.kind,
        MessageDeliveryNotices.kind,
    ]
}
