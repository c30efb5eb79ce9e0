import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The rules of scheduled messages (docs/scheduled-messages.md): accepting a send for later, reading, listing, editing
/// and cancelling. Sending at the due time is ``ScheduledSending``'s.
struct ScheduledMessageService: DomainService {
    let db: PostgresConnection
    let appID: String
    let now: Int64

    init(db: PostgresConnection, appID: String, now: Int64) {
        self.db = db
        self.appID = appID
        self.now = now
    }

    /// Messages of one app waiting to be sent at once; a scheduled batch counts one.
    static let limit: Int64 = 10_000
    /// The earliest and latest `send_at` accepted at `now`: 10 s to 366 days ahead.
    static func sendAtRange(now: Int64) -> ClosedRange<Int64> { (now + 10_000)...(now + 366 * 86_400_000) }

    static func notFound(_ id: String) -> APIError { APIError(.notFound, "scheduled message \(id) does not exist") }

    /// Stores `request` (validated by the caller) to be sent at `sendAt` by `userID`; 422 `scheduled_limit` when the app
    /// already has ``limit`` waiting. The request gets a `client_msg_id` derived from the new id unless it has one, so
    /// a send repeated after a crash is deduplicated (docs/messages.md#deduplication-with-client_msg_id).
    func schedule(request: JSONObject, userID: String, asUser: Bool, batch: Bool, sendAt: Int64) throws -> ScheduledMessage {
        let id = IdentifierKind.generateSortableID(prefix: "sch", timestampMs: now)
        var request = request
        request["send_at"] = nil
        request["from"] = .string(userID)
        if request["client_msg_id"] == nil || request["client_msg_id"] == .null { request["client_msg_id"] = .string("s:" + id) }
        let scheduled = ScheduledMessage(
            scheduledID: id, userID: userID, asUser: asUser, batch: batch, request: request, sendAt: sendAt, state: .scheduled,
            createdAt: now, updatedAt: now)
        try db.transaction { db in
            try ScheduledMessageStore.lockApp(appID: appID, on: db)
            let pending = try ScheduledMessageStore.pendingCount(appID: appID, on: db)
            if pending >= Self.limit {
                throw APIError(.scheduledLimit, "the app has \(pending) scheduled messages waiting (at most \(Self.limit))")
            }
            try ScheduledMessageStore.insert(appID: appID, scheduled, on: db)
        }
        return scheduled
    }

    /// The scheduled message `id`; a user (`viewer`) sees only the ones it sends.
    func get(_ id: String, viewer: String?) throws -> ScheduledMessage {
        guard let s = try ScheduledMessageStore.fetch(appID: appID, id: id, on: db), viewer == nil || viewer == s.userID else {
            throw Self.notFound(id)
        }
        return s
    }

    /// Newest first; `state` `scheduled` includes the ones being sent.
    func list(userID: String?, state: ScheduledMessage.State?, before: (Int64, String)?, limit: Int) throws -> [ScheduledMessage] {
        let states = state.map { $0 == .scheduled ? ["scheduled", "sending"] : [$0.rawValue] }
        return try ScheduledMessageStore.list(appID: appID, userID: userID, states: states, before: before, limit: limit, on: db)
    }

    /// Changes `send_at` and/or the request of a message still `scheduled` (409 `scheduled_not_pending` otherwise);
    /// `validate` checks the new request as a send would.
    func edit(
        _ id: String, viewer: String?, sendAt: Int64?, body: JSONValue?, validate: (JSONObject, Bool) throws -> Void
    ) throws -> ScheduledMessage {
        try db.transaction { db in
            guard var s = try ScheduledMessageStore.fetch(appID: appID, id: id, forUpdate: true, on: db), viewer == nil || viewer == s.userID
            else { throw Self.notFound(id) }
            guard s.state == .scheduled else { throw Self.notPending(s) }
            if let body {
                s.request["body"] = body
                try validate(s.request, s.batch)
            }
            if let sendAt { s.sendAt = sendAt }
            s.updatedAt = now
            try ScheduledMessageStore.update(appID: appID, s, on: db)
            return s
        }
    }

    /// Cancels a message still `scheduled` (409 `scheduled_not_pending` otherwise): it is never sent.
    func cancel(_ id: String, viewer: String?) throws {
        try db.transaction { db in
            guard var s = try ScheduledMessageStore.fetch(appID: appID, id: id, forUpdate: true, on: db), viewer == nil || viewer == s.userID
            else { throw Self.notFound(id) }
            guard s.state == .scheduled else { throw Self.notPending(s) }
            s.state = .cancelled
            s.updatedAt = now
            try ScheduledMessageStore.update(appID: appID, s, on: db)
        }
    }

    private static func notPending(_ s: ScheduledMessage) -> APIError {
        let state = s.state == .sending ? "being sent" : s.state.rawValue
        return APIError(.scheduledNotPending, "scheduled message \(s.scheduledID) is no longer scheduled (\(state))")
    }
}
