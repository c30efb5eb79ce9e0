import ParleyAPI
import ParleyCore
import ParleyPostgres
import ParleySync

/// Typing and other ephemeral signals (docs/conversations.md#typing-and-other-signals): a `conversation.signal` to
/// the other members' open user streams, through ``EphemeralEvents`` (no event log, no webhooks, no push, no resume).
///
/// A value made per request; the rate limit's memory (``limiter``) is per node.
struct ConversationSignals {
    let db: PostgresConnection
    let appID: String
    let now: Int64
    let bigGroupThreshold: Int64

    init(_ ctx: APIContext) {
        db = ctx.db
        appID = ctx.appID
        now = ctx.now
        bigGroupThreshold = GroupLimits(ctx.app.settings).bigGroupThreshold
    }

    enum Signal: String, CaseIterable {
        case typingStart = "typing_start"
        case typingStop = "typing_stop"
        case custom
    }

    /// At most one signal per user and conversation per this many ms, whatever the signal; the rest are dropped.
    static let intervalMillis: Int64 = 500
    static let limiter = SignalLimiter()

    /// Sends `signal` (with `data`, custom only) from `from` in the conversation `type`/`id` (peer: the other user).
    /// Answers once the checks pass, whether the signal went out or was dropped (the rate limit; a peer that has
    /// blacklisted `from` gets nothing, and `from` is not told).
    func send(from: String, type: ConversationType, id: String, signal: Signal, data: String?) throws {
        try UserService.requireActive(from, appID: appID, on: db)
        let recipients: [String]
        switch type {
        case .peer:
            try UserService.requireActive(id, appID: appID, on: db)
            recipients = try ConversationSignalStore.blacklisted(appID: appID, owner: id, userID: from, on: db) ? [] : [id]
        case .group:
            guard
                let group = try ConversationSignalStore.group(
                    appID: appID, groupID: id, userID: from, threshold: bigGroupThreshold, on: db)
            else { throw APIError.groupNotFound(id) }
            if group.dismissed { throw APIError.groupDismissed(id) }
            if !group.member { throw APIError.notGroupMember(from, id) }
            if group.big { throw APIError(.unsupportedOperation, "group \(id) is a big group: it takes no signals") }
            recipients = group.others
        case .room:
            guard let room = try ConversationSignalStore.room(appID: appID, roomID: id, userID: from, on: db) else {
                throw RoomAccess.notFound(id)
            }
            if !room.member { throw RoomAccess.notInRoom(from, id) }
            recipients = room.others
        }
        guard Self.limiter.admit("\(appID)\u{1}\(from)\u{1}\(type.rawValue)\u{1}\(id)", now: now, interval: Self.intervalMillis) else {
            return
        }
        var o = JSONObjectWriter(capacity: 96 + (data?.utf8.count ?? 0))
        o["conversation_type"] = type.rawValue
        // As each recipient sees the conversation: for a peer, the other user is the sender.
        o["conversation_id"] = type == .peer ? from : id
        o["from"] = from
        o["signal"] = signal.rawValue
        if let data { o["data"] = data }
        try EphemeralEvents.publish(appID: appID, type: "conversation.signal", data: o.finish(), to: recipients, now: now, on: db)
    }
}

/// The per-node memory of the signal rate limit: when each (app, user, conversation) last had a signal admitted, on the
/// server clock (so the test clock drives it). Entries older than the interval are swept once the table grows, so it
/// holds about one entry per user typing in the last half second. Owner: `last` (any request thread).
final class SignalLimiter: Sendable {
    private let last = LockedValue<[String: Int64]>([:])
    private static let sweepAt = 10_000

    /// Whether a signal under `key` at `now` may go out (none admitted in the `interval` before it); records it if so.
    func admit(_ key: String, now: Int64, interval: Int64) -> Bool {
        last.withLock { last in
            if let previous = last[key], now >= previous, now - previous < interval { return false }
            if last.count >= Self.sweepAt { last = last.filter { now - $0.value < interval } }
            last[key] = now
            return true
        }
    }
}
