import ParleyAPI
import ParleyCore
import ParleyDomains
import ParleyHTTP
import ParleyPostgres

/// The SSE streams (docs/events.md#live-streams-server-sent-events): `GET /v1/events` (the app's events) and
/// `GET /v1/users/{user_id}/events` (one user's audience), both resumable by event id.
package enum LiveRoutes {
    /// Stream caps per node (docs/events.md#live-streams-server-sent-events): a user's streams, an app's app-level
    /// streams.
    static let maxStreamsPerUser = 10
    static let maxAppStreams = 100

    /// `hub`: the node's live hub (built and started by the app layer).
    package static func register(on api: inout API, hub: EventHub) {
        api.add(.get, "/v1/events", .app, "streamAppEvents", queryToken: true) { ctx in
            var query = ctx.query()
            var filter = StreamFilter()
            filter.types = EventTypeFilter(query.list("types") ?? [])
            filter.userID = query.id("user_id", .userID)
            filter.groupID = query.id("group_id", .groupID)
            filter.roomID = query.id("room_id", .roomID)
            let resume = resumeValue(ctx, &query)
            try query.check()
            return try open(ctx, hub: hub, filter: filter, userID: nil, resume: resume, countedAs: "a:\(ctx.appID)", limit: maxAppStreams)
        }
        api.add(.get, "/v1/users/{user_id}/events", .appOrSelf, "streamUserEvents", queryToken: true) { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            var query = ctx.query()
            var filter = StreamFilter()
            filter.userID = userID
            filter.types = EventTypeFilter(query.list("types") ?? [])
            let platform = query.choice("platform", Device.Platform.allCases.map(\.rawValue)) ?? "unknown"
            // A user's own stream always makes it online; the app key opts in
            // (docs/events.md#live-streams-server-sent-events).
            let presenceFlag = try ctx.appOnlyFlag(query.bool("presence"))
            let countsPresence = ctx.credential.userID != nil || presenceFlag
            let resume = resumeValue(ctx, &query)
            try query.check()
            try UserService(ctx).requireExists(userID)
            return try open(
                ctx, hub: hub, filter: filter, userID: userID, resume: resume, countedAs: "u:\(ctx.appID):\(userID)",
                limit: maxStreamsPerUser, platform: platform, countsPresence: countsPresence)
        }
    }

    /// The resume id: header `Last-Event-ID`, else query `last_event_id`; an empty value counts as absent.
    private static func resumeValue(_ ctx: APIContext, _ query: inout QueryReader) -> String? {
        if let header = ctx.request.headers["Last-Event-ID"], !header.isEmpty { return header }
        return query.string("last_event_id", maxBytes: 32)
    }

    /// When the user token of the request expires (server-clock ms), nil for other credentials. The token was
    /// verified before the handler ran, so its claims are read as they are.
    private static func tokenExpiry(_ ctx: APIContext) -> Int64? {
        guard ctx.credential.userID != nil else { return nil }
        let token = Authenticator.bearer(ctx.request.headers["Authorization"]) ?? ctx.request.queryValue("access_token")
        guard let token, let (_, claims) = UserToken.decodeUnverified(token), let exp = claims["exp"]?.intValue else { return nil }
        return exp * 1000
    }

    private static func open(
        _ ctx: APIContext, hub: EventHub, filter: StreamFilter, userID: String?, resume: String?, countedAs key: String, limit: Int,
        platform: String = "unknown", countsPresence: Bool = false
    ) throws -> Response {
        let (head, trimPoint) = try EventLog.bounds(appID: ctx.appID, on: ctx.db)
        let position = try ResumePosition.parse(resume, head: head, trimPoint: trimPoint)
        // Descriptors first: a node out of them refuses every new stream, whoever asks (docs/scaling.md#open-files).
        guard hub.capacity.admitsStream else {
            throw APIError.retryLater(
                .streamCapacityReached, "this node holds all the streams its open files allow; retry later or on another node",
                retryAfterSeconds: StreamCapacity.retryAfterSeconds)
        }
        guard let reservation = hub.reserve(key, limit: limit) else {
            throw APIError(.tooManyStreams, "at most \(limit) open streams here; close one first")
        }
        var opened = EventHub.Subscription(appID: ctx.appID, filter: filter, userID: userID, after: position.after, head: head)
        opened.platform = platform
        opened.countsPresence = countsPresence
        opened.expiresAt = tokenExpiry(ctx)
        if case .app(_, let keyID) = ctx.credential { opened.appKeyID = keyID }
        let subscription = opened
        var headers = HTTPHeaders()
        headers.add("Content-Type", "text/event-stream")
        headers.add("Cache-Control", "no-store")
        headers.add("X-Accel-Buffering", "no")
        headers.add("Parley-Last-Event-ID", String(position.previous))
        return Response(status: 200, headers: headers) { stream in
            stream.write(Array("retry: 3000\n\n".utf8))
            hub.subscribe(subscription, on: stream, reservation: reservation)
        }
    }
}
