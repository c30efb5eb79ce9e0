import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Reports, the review queue and the moderation log (docs/moderation.md): HTTP ↔ ``ReportService`` and
/// ``ModerationLogService``.
package enum ReportRoutes {
    package static func register(on api: inout API) {
        api.add(.post, "/v1/reports", .appOrUser, "createReport", create)

        api.add(.get, "/v1/reports", .app, "listReports", list)

        api.add(.get, "/v1/reports/{report_id}", .app, "getReport") { ctx in
            let reportID = try ctx.pathID("report_id", .opaque)
            let (report, reports) = try ReportService(ctx).get(reportID)
            return Reply.json(report.json(reports: reports))
        }

        api.add(.post, "/v1/reports/{report_id}/actions", .app, "actOnReport") { ctx in
            let reportID = try ctx.pathID("report_id", .opaque)
            var body = try ctx.body()
            let action = body.enumeration("action", ReportAction.self, required: true)
            var decision = ReportService.Decision(action: action ?? .dismiss)
            switch action {
            case .muteUser:
                decision.durationS = body.int("duration_s", required: true, range: 1...UserService.maxRestrictionSeconds)
            case .banUser:
                decision.durationS = body.int("duration_s", range: 0...UserService.maxRestrictionSeconds) ?? 0
            case .warnUser:
                decision.text = body.string("text", required: true, minBytes: 1, maxBytes: ReportLimits.maxWarningBytes)
            case .removeFromGroup:
                decision.groupID = body.id("group_id", .groupID)
            default:
                break
            }
            decision.note = body.string("note", maxBytes: ReportLimits.maxNoteBytes)
            decision.moderator = body.string("moderator", maxBytes: ReportLimits.maxModeratorBytes)
            try body.check()
            return Reply.json(try ReportService(ctx).act(reportID, decision).json())
        }

        api.add(.get, "/v1/moderation/log", .app, "listModerationLog", log)
    }

    /// `POST /v1/reports`: an app key names `reporter_id`; a user token reports as itself.
    private static func create(_ ctx: APIContext) throws -> Response {
        var body = try ctx.body()
        let reporterID = body.id("reporter_id", .userID)
        let target = body.object("target", required: true) { target -> ModerationReport.Target? in
            guard let type = target.enumeration("type", ModerationReport.TargetType.self, required: true) else { return nil }
            let kind: IdentifierKind =
                switch type {
                case .message: .opaque
                case .user: .userID
                case .group: .groupID
                }
            return target.id(type.rawValue + "_id", kind, required: true).map { ModerationReport.Target(type: type, id: $0) }
        }
        let reason = body.string("reason", required: true)
        if let reason, ModerationReport.Reason(rawValue: reason).map(ModerationReport.Reason.given.contains) != true {
            body.addError("reason", "must be one of " + ModerationReport.Reason.given.map(\.rawValue).joined(separator: ", "))
        }
        let comment = body.string("comment", maxBytes: ReportLimits.maxCommentBytes) ?? ""
        try body.check()
        let reporter = try ctx.actingUser(reporterID, field: body.fieldPath("reporter_id"))
        guard let target = target ?? nil, let reason = reason.flatMap(ModerationReport.Reason.init) else { throw APIError.internalError }
        let report = try ReportService(ctx).create(reporterID: reporter, target: target, reason: reason, comment: comment)
        return Reply.created(report.json())
    }

    /// `GET /v1/reports`: open reports first, each group oldest first.
    private static func list(_ ctx: APIContext) throws -> Response {
        var query = ctx.query()
        let limit = query.limit()
        var filter = ReportService.Filter()
        filter.status = query.choice("status", ModerationReport.Status.allCases.map(\.rawValue)).flatMap(ModerationReport.Status.init)
        filter.targetType = query.choice("target_type", ModerationReport.TargetType.allCases.map(\.rawValue)).flatMap(
            ModerationReport.TargetType.init)
        filter.reason = query.choice("reason", ModerationReport.Reason.allCases.map(\.rawValue)).flatMap(ModerationReport.Reason.init)
        filter.userID = query.id("user_id", .userID)
        let cursor = query.cursor()
        try query.check()
        let list =
            "reports|\(ctx.appID)|\(filter.status?.rawValue ?? "")|\(filter.targetType?.rawValue ?? "")|\(filter.reason?.rawValue ?? "")|\(filter.userID ?? "")"
        var after: (closed: Int64, at: Int64, id: String)?
        if let values = try ListPage.cursorValues(ctx, cursor, list: list, count: 3) {
            guard let closed = values[0].intValue, let at = values[1].intValue, let id = values[2].stringValue else {
                throw ListPage.malformedCursor()
            }
            after = (closed, at, id)
        }
        let reports = try ReportService(ctx).list(filter: filter, after: after, limit: limit + 1)
        return ListPage.page(
            reports, limit: limit, list: list, ctx: ctx, { [.int($0.status == .open ? 0 : 1), .int($0.createdAt), .string($0.reportID)] }
        ) {
            $0.json()
        }
    }

    /// `GET /v1/moderation/log`: newest first.
    private static func log(_ ctx: APIContext) throws -> Response {
        var query = ctx.query()
        let limit = query.limit()
        let filter = ModerationLogService.Filter(
            userID: query.id("user_id", .userID), action: query.string("action", maxBytes: 64), moderator: query.string("moderator", maxBytes: 64),
            from: query.int("from", range: 0...Int64.max), to: query.int("to", range: 0...Int64.max))
        let cursor = query.cursor()
        try query.check()
        let list =
            "moderation_log|\(ctx.appID)|\(filter.userID ?? "")|\(filter.action ?? "")|\(filter.moderator ?? "")|\(filter.from ?? -1)|\(filter.to ?? -1)"
        var before: (at: Int64, id: Int64)?
        if let values = try ListPage.cursorValues(ctx, cursor, list: list, count: 2) {
            guard let at = values[0].intValue, let id = values[1].intValue else { throw ListPage.malformedCursor() }
            before = (at, id)
        }
        let actions = try ModerationLogService(ctx).list(filter: filter, before: before, limit: limit + 1)
        return ListPage.page(actions, limit: limit, list: list, ctx: ctx, { [.int($0.at), .int($0.actionID)] }) { $0.json() }
    }
}
