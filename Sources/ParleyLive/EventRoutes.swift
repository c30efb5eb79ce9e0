import ParleyAPI
import ParleyCore
import ParleyDomains
import ParleyHTTP
import ParleyPostgres

/// Reading the event log (docs/events.md#polling-the-log): the app's (`GET /v1/events/log`, app view) and one user's
/// audience (`GET /v1/users/{user_id}/events/log`, that user's view, docs/events.md#two-views-of-the-same-event).
package enum EventRoutes {
    package static func register(on api: inout API) {
        api.add(.get, "/v1/events/log", .app, "getEventLog") { ctx in
            var query = ctx.query()
            let limit = query.limit()
            var filter = EventLog.Filter()
            filter.types = query.list("types") ?? []
            filter.userID = query.id("user_id", .userID)
            filter.groupID = query.id("group_id", .groupID)
            filter.roomID = query.id("room_id", .roomID)
            let afterText = query.raw("after")
            try query.check()
            return try page(ctx, after: afterText, limit: limit, filter: filter) { $0.json }
        }
        // Another user's token → 403 7000002, as on every `/v1/users/{user_id}/…` route (`.appOrSelf`).
        api.add(.get, "/v1/users/{user_id}/events/log", .appOrSelf, "getUserEventLog") { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            var query = ctx.query()
            let limit = query.limit()
            var filter = EventLog.Filter()
            filter.types = query.list("types") ?? []
            filter.userID = userID
            let afterText = query.raw("after")
            try query.check()
            try UserService(ctx).requireExists(userID)
            // The user view whichever credential reads it: the app key reads what the user's own token reads.
            return try page(ctx, after: afterText, limit: limit, filter: filter) { try $0.json(viewedBy: userID) }
        }
    }

    /// One page of the log after `afterText` (docs/events.md#polling-the-log): `{items, next_cursor,
    /// previous_event_id}`, each item written by `render`.
    private static func page(
        _ ctx: APIContext, after afterText: String?, limit: Int, filter: EventLog.Filter, render: (LoggedEvent) throws -> [UInt8]
    ) throws -> Response {
        let (head, trimPoint) = try EventLog.bounds(appID: ctx.appID, on: ctx.db)
        let position = try ResumePosition.parse(afterText, head: head, trimPoint: trimPoint)
        let items = try EventLog.read(appID: ctx.appID, after: position.after, limit: limit, filter: filter, on: ctx.db)
        let rendered = try items.map(render)
        var w = JSONWriter()
        w.object { w in
            w.key("items")
            w.array { w in for item in rendered { w.writeRaw(item) } }
            w.key("next_cursor")
            if let last = items.last { w.writeString(String(last.id)) } else { w.writeNull() }
            w.key("previous_event_id")
            w.writeString(String(position.previous))
        }
        return Reply.json(w.bytes)
    }
}

/// A resume position of the event log (docs/events.md#resuming-without-losing-events): `Last-Event-ID`, `last_event_id`
/// or `after`.
struct ResumePosition: Equatable {
    /// Deliver events with id > `after`.
    let after: Int64
    /// The `Parley-Last-Event-ID` / `previous_event_id` value: the position just before the first event sent.
    let previous: Int64

    /// `nil`/empty → after the head; `earliest` → after the trim point; digits `R` → after max(R, T).
    /// Anything else, or a number above the head, → 400 `7000012`.
    static func parse(_ value: String?, head: Int64, trimPoint: Int64) throws -> ResumePosition {
        guard let value, !value.isEmpty else { return ResumePosition(after: head, previous: head) }
        if value == "earliest" { return ResumePosition(after: trimPoint, previous: trimPoint) }
        guard value.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }), let requested = Int64(value),
            requested <= head
        else {
            throw APIError(.invalidLastEventId, "event id must be ASCII digits up to the log head (\(head)) or earliest")
        }
        let start = max(requested, trimPoint)
        return ResumePosition(after: start, previous: start)
    }
}
