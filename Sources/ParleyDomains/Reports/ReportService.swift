import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The report rules (docs/moderation.md#reports-and-the-review-queue): who may report what, the snapshot, the queue,
/// and the actions that close every open report on a target together.
///
/// An action runs in one transaction: it locks every open report on the report's target (in `report_id` order), does
/// the action through the same service code the user, group and message routes use, writes the moderation log
/// (docs/moderation.md#the-moderation-log) and closes the reports, with one `report.resolved` each.
/// A value made per request; it owns nothing mutable. Transaction bodies are re-runnable.
struct ReportService: DomainService {
    let db: PostgresConnection
    let appID: String
    let now: Int64
    /// The group rules with the app's limits (a group's snapshot, `remove_from_group`).
    var groups: GroupService
    /// The message lifecycle with the app's settings (`delete_message`); nil for background work, which has no request.
    var lifecycle: MessageLifecycle?

    init(db: PostgresConnection, appID: String, now: Int64) {
        self.db = db
        self.appID = appID
        self.now = now
        groups = GroupService(db: db, appID: appID, now: now)
        lifecycle = nil
    }

    init(_ ctx: APIContext) {
        db = ctx.db
        appID = ctx.appID
        now = ctx.now
        groups = GroupService(ctx)
        lifecycle = MessageLifecycle(ctx)
    }

    static func notFound(_ reportID: String) -> APIError { APIError(.reportNotFound, "report \(reportID) does not exist") }

    // MARK: - Filing

    /// `POST /v1/reports`: `reporterID` files a report on `target`. The reporter must exist and may report only
    /// messages it can read (else 404 `message_not_found`); a second open report of the same reporter on the same
    /// target → 409 `report_exists`.
    func create(reporterID: String, target: ModerationReport.Target, reason: ModerationReport.Reason, comment: String) throws -> ModerationReport {
        try db.transaction { db in
            try UserService.requireActive(reporterID, appID: appID, on: db)
            let (snapshot, targetUserID) = try snapshot(of: target, reporterID: reporterID, on: db)
            return try file(
                reporterID: reporterID, target: target, targetUserID: targetUserID, snapshot: snapshot, reason: reason, comment: comment, on: db)
        }
    }

    /// The automatic report of a blocklist flag (no reporter, reason `automod`), with the hit's snapshot.
    func fileAutomatic(target: ModerationReport.Target, targetUserID: String?, snapshot: [UInt8], comment: String, on db: PostgresConnection) throws {
        _ = try file(reporterID: nil, target: target, targetUserID: targetUserID, snapshot: snapshot, reason: .automod, comment: comment, on: db)
    }

    /// Inserts a report (the snapshot of the target's open reports if any, else `snapshot`) and its `report.created`.
    private func file(
        reporterID: String?, target: ModerationReport.Target, targetUserID: String?, snapshot: [UInt8], reason: ModerationReport.Reason,
        comment: String,
        on db: PostgresConnection
    ) throws -> ModerationReport {
        let report = ModerationReport(
            reportID: IdentifierKind.generateID(prefix: "rp_", length: 22), status: .open, reason: reason, comment: comment,
            reporterID: reporterID, target: target, targetUserID: targetUserID,
            snapshot: try ReportStore.openSnapshot(appID: appID, target: target, on: db) ?? snapshot, createdAt: now, resolvedAt: nil,
            actions: Array("[]".utf8), reportCount: 0)
        guard try ReportStore.insert(appID: appID, report: report, on: db) else {
            throw APIError(.reportExists, "\(reporterID ?? "") already has an open report on this \(target.type.rawValue)")
        }
        guard let stored = try ReportStore.fetch(appID: appID, reportID: report.reportID, on: db) else { throw APIError.internalError }
        try EventLog.append([Self.event("report.created", stored, appID: appID)], appID: appID, now: now, on: db)
        return stored
    }

    /// The target as it is now (the Message in the app view, the User, the Group) and the user it is about (a
    /// message's sender, the user); 404 with the target's own code when it does not exist or the reporter cannot
    /// read the message.
    private func snapshot(of target: ModerationReport.Target, reporterID: String, on db: PostgresConnection) throws -> ([UInt8], String?) {
        switch target.type {
        case .message:
            let messages = MessageService(db: db, appID: appID, now: now)
            guard let message = try MessageStore.fetch(appID: appID, messageID: target.id, on: db), !message.deleted,
                try messages.isVisible(message, to: .user(reporterID), on: db)
            else { throw MessageService.notFound(target.id) }
            return (message.json(.app), message.from)
        case .user:
            return (try UserService.requireActive(target.id, appID: appID, on: db).json(.app), target.id)
        case .group:
            return (try groups.get(target.id, on: db).json(groups.limits, now: now), nil)
        }
    }

    // MARK: - The queue

    typealias Filter = ReportStore.Filter

    func list(filter: Filter, after: (closed: Int64, at: Int64, id: String)?, limit: Int) throws -> [ModerationReport] {
        try ReportStore.list(appID: appID, filter: filter, after: after, limit: limit, on: db)
    }

    /// One report and the reports on its target, newest first.
    func get(_ reportID: String) throws -> (report: ModerationReport, reports: [ModerationReport]) {
        guard let report = try ReportStore.fetch(appID: appID, reportID: reportID, on: db) else { throw Self.notFound(reportID) }
        let reports = try ReportStore.onTarget(appID: appID, target: report.target, limit: ReportLimits.maxReportsPerTarget, on: db)
        return (
            report,
            reports.map { other in
                var other = other
                other.reportCount = report.reportCount
                return other
            }
        )
    }

    // MARK: - Actions

    /// A moderator's decision on a report.
    struct Decision: Sendable {
        var action: ReportAction
        /// `mute_user` (seconds) and `ban_user` (seconds, 0 forever).
        var durationS: Int64?
        /// `warn_user`.
        var text: String?
        /// `remove_from_group` of a user target.
        var groupID: String?
        var note: String?
        var moderator: String?
    }

    /// `POST /v1/reports/{report_id}/actions`: does the action and closes every open report on the target (409
    /// `report_closed` when this one is closed already; 422 `unsupported_operation` when the action does not fit the
    /// target).
    func act(_ reportID: String, _ decision: Decision) throws -> ModerationReport {
        try db.transaction { db in
            guard let read = try ReportStore.fetch(appID: appID, reportID: reportID, on: db) else { throw Self.notFound(reportID) }
            // The target's open reports, locked in report_id order (never this report first, then the others: two
            // actions on one target would deadlock); this report is among them unless it is closed, or an action
            // closed it since the read.
            let open = try ReportStore.lockOpen(appID: appID, target: read.target, on: db)
            guard let report = open.first(where: { $0.reportID == reportID }) else {
                let status = try ReportStore.fetch(appID: appID, reportID: reportID, on: db)?.status ?? read.status
                throw APIError(.reportClosed, "report \(reportID) is already \(status.rawValue)")
            }
            let params = try perform(decision, on: report, db: db)

            var action = JSONObjectWriter(capacity: 256)
            action["action"] = decision.action.rawValue
            action["params"] = params
            action["note"] = decision.note
            action["moderator"] = decision.moderator
            action["at"] = now
            let status: ModerationReport.Status = decision.action == .dismiss ? .dismissed : .resolved
            let ids = open.map(\.reportID)
            try ReportStore.close(appID: appID, reportIDs: ids, status: status, action: action.finish(), now: now, on: db)

            var events: [NewEvent] = []
            var answer: ModerationReport?
            // Usually 0: the reports filed since the lock are open.
            let stillOpen = try ReportStore.openCount(appID: appID, target: report.target, on: db)
            for var closed in try ReportStore.fetchMany(appID: appID, reportIDs: ids, on: db) {
                closed.reportCount = stillOpen
                events.append(Self.event("report.resolved", closed, appID: appID))
                if closed.reportID == reportID { answer = closed }
            }
            try EventLog.append(events, appID: appID, now: now, on: db)
            guard let answer else { throw APIError.internalError }
            return answer
        }
    }

    /// Does `decision` on `report`'s target and writes its moderation-log entry; returns the action's `params`.
    private func perform(_ decision: Decision, on report: ModerationReport, db: PostgresConnection) throws -> JSONObject {
        var params: JSONObject = [:]
        func entry(_ targetType: String, _ targetID: String) -> ModerationLogStore.Entry {
            var logged = params
            logged["report_id"] = .string(report.reportID)
            if let note = decision.note { logged["note"] = .string(note) }
            return ModerationLogStore.Entry(
                action: decision.action.rawValue, targetType: targetType, targetID: targetID, params: logged, moderator: decision.moderator,
                source: .report)
        }
        let target = report.target
        switch decision.action {
        case .dismiss:
            try ModerationLogStore.record(entry(target.type.rawValue, target.id), appID: appID, now: now, on: db)
        case .deleteMessage:
            guard target.type == .message else { throw Self.misfit(decision.action, target) }
            guard let lifecycle else { throw APIError.internalError }
            let results = try lifecycle.delete(
                [BatchItem(id: target.id, userID: target.id)], scope: .everyone, userID: nil, by: MessageLifecycle.Actor(userID: nil),
                revokePush: { db, appID, messageID, push, now in
                    try PushPlanner.revokePush(appID: appID, messageID: messageID, push: push, now: now, on: db)
                })
            // A message already gone (revoked or deleted since it was reported) stays gone: the action still closes
            // the reports.
            if case .failed(let code, let detail) = results.first?.outcome, code != ErrorCode.messageNotFound { throw APIError(code, detail) }
            try ModerationLogStore.record(entry("message", target.id), appID: appID, now: now, on: db)
        case .muteUser:
            let userID = try reportedUser(decision.action, report)
            params["duration_s"] = .int(decision.durationS ?? 0)
            _ = try UserService(db: db, appID: appID, now: now).mute(
                userID, durationSeconds: decision.durationS ?? 0, logAs: entry("user", userID))
        case .banUser:
            let userID = try reportedUser(decision.action, report)
            let duration = decision.durationS ?? 0
            params["duration_s"] = .int(duration)
            _ = try UserService(db: db, appID: appID, now: now).ban(
                userID, durationSeconds: duration == 0 ? -1 : duration, reason: decision.note, logAs: entry("user", userID))
        case .warnUser:
            let userID = try reportedUser(decision.action, report)
            try UserService.requireActive(userID, appID: appID, on: db)
            let text = decision.text ?? ""
            params["text"] = .string(text)
            try ModerationLogStore.record(entry("user", userID), appID: appID, now: now, on: db)
            var data = JSONObjectWriter(capacity: 128 + text.utf8.count)
            data["user_id"] = userID
            data["text"] = text
            try EventLog.append(
                [NewEvent(type: "user.warned", data: data.finish(), audience: [userID], orderKey: userID)], appID: appID, now: now, on: db)
        case .removeFromGroup:
            let (groupID, userID) = try membership(decision, report)
            params["group_id"] = .string(groupID)
            let outcome = try groups.kick(groupID, actor: .app, userIDs: [userID])[userID]
            if case .failed(let code, let detail) = outcome { throw APIError(code, detail) }
            var logged = entry("user", userID)
            logged.params["group_id"] = .string(groupID)
            try ModerationLogStore.record(logged, appID: appID, now: now, on: db)
        }
        return params
    }

    /// The user a user action addresses: the message's sender or the reported user (a group → 422).
    private func reportedUser(_ action: ReportAction, _ report: ModerationReport) throws -> String {
        guard report.target.type != .group, let userID = report.targetUserID else { throw Self.misfit(action, report.target) }
        return userID
    }

    /// The group and user of `remove_from_group`: the message's group and sender, or the request's `group_id` and the
    /// reported user.
    private func membership(_ decision: Decision, _ report: ModerationReport) throws -> (groupID: String, userID: String) {
        switch report.target.type {
        case .group:
            throw Self.misfit(decision.action, report.target)
        case .user:
            guard let groupID = decision.groupID else {
                throw APIError.invalidParam("body.group_id", "is required to remove a reported user from a group")
            }
            return (groupID, report.target.id)
        case .message:
            let snapshot = try? JSONValue.parse(report.snapshot)
            guard snapshot?["conversation_type"]?.stringValue == "group", let groupID = snapshot?["to"]?.stringValue,
                let userID = report.targetUserID
            else { throw APIError(.unsupportedOperation, "remove_from_group needs a group message") }
            return (groupID, userID)
        }
    }

    private static func misfit(_ action: ReportAction, _ target: ModerationReport.Target) -> APIError {
        APIError(.unsupportedOperation, "\(action.rawValue) does not apply to a \(target.type.rawValue) report")
    }

    /// `report.created` / `report.resolved` `{report}`: app streams and webhooks only, ordered by the app.
    static func event(_ type: String, _ report: ModerationReport, appID: String) -> NewEvent {
        var data = JSONObjectWriter(capacity: 1024)
        data.raw("report", report.json())
        return NewEvent(type: type, data: data.finish(), orderKey: appID)
    }
}
