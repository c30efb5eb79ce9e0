import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The SQL of reports and automatic-escalation strikes (Migrations/0031_reports.sql). No rules: ``ReportService``
/// and ``ReportHooks`` decide, lock and write events.
enum ReportStore {
    /// The columns of a Report object, `report_count` last (the open reports on the report's target, counted per row).
    private static let columns =
        fields + """
            , (SELECT count(*) FROM reports o WHERE o.app_id = r.app_id AND o.target_type = r.target_type AND o.target_id = r.target_id
                AND o.status = 'open')
            """
    /// The columns of a Report object with `report_count` 0, for reads of many reports on one target (where a count
    /// per row would read the target's reports once per report): the caller sets it with ``openCount(appID:target:on:)``.
    private static let uncounted = fields + ", 0::bigint"
    private static let fields = """
        r.report_id, r.status, r.reason, r.comment, r.reporter_id, r.target_type, r.target_id, r.target_user_id, r.snapshot::text,
        r.created_at, r.resolved_at, r.actions::text
        """

    /// The open reports on `target`.
    static func openCount(appID: String, target: ModerationReport.Target, on db: PostgresConnection) throws -> Int64 {
        try db.query(
            """
            SELECT count(*) FROM reports
            WHERE app_id = \(appID) AND target_type = \(target.type.rawValue) AND target_id = \(target.id) AND status = 'open'
            """
        ).decodeFirst(Int64.self) ?? 0
    }

    /// Inserts `report` (open); false when the reporter already has an open report on the target.
    static func insert(appID: String, report: ModerationReport, on db: PostgresConnection) throws -> Bool {
        let inserted = try db.query(
            """
            INSERT INTO reports (app_id, report_id, status, reason, comment, reporter_id, target_type, target_id, target_user_id, snapshot,
                                 created_at)
            VALUES (\(appID), \(report.reportID), \(report.status.rawValue), \(report.reason.rawValue), \(report.comment), \(report.reporterID),
                    \(report.target.type.rawValue), \(report.target.id), \(report.targetUserID), \(String(decoding: report.snapshot, as: UTF8.self))::jsonb,
                    \(report.createdAt))
            ON CONFLICT (app_id, target_type, target_id, reporter_id) WHERE status = 'open' AND reporter_id IS NOT NULL DO NOTHING
            RETURNING report_id
            """)
        return inserted.rowCount == 1
    }

    /// The snapshot of the oldest open report on `target`, if any is open.
    static func openSnapshot(appID: String, target: ModerationReport.Target, on db: PostgresConnection) throws -> [UInt8]? {
        try db.query(
            """
            SELECT snapshot::text FROM reports
            WHERE app_id = \(appID) AND target_type = \(target.type.rawValue) AND target_id = \(target.id) AND status = 'open'
            ORDER BY created_at, report_id LIMIT 1
            """
        ).decodeFirst(String.self).map { Array($0.utf8) }
    }

    /// One report.
    static func fetch(appID: String, reportID: String, on db: PostgresConnection) throws -> ModerationReport? {
        try db.query("SELECT \(unsafeSQL: columns) FROM reports r WHERE r.app_id = \(appID) AND r.report_id = \(reportID)").rows.first.map(report)
    }

    /// The reports `reportIDs`, in `report_id` order, with `report_count` 0.
    static func fetchMany(appID: String, reportIDs: [String], on db: PostgresConnection) throws -> [ModerationReport] {
        try db.query(
            """
            SELECT \(unsafeSQL: uncounted) FROM reports r WHERE r.app_id = \(appID) AND r.report_id = ANY(\(reportIDs)::text[])
            ORDER BY r.report_id
            """
        ).rows.map(report)
    }

    /// The open reports on `target`, locked in `report_id` order (so two actions on one target never deadlock), with
    /// `report_count` 0.
    static func lockOpen(appID: String, target: ModerationReport.Target, on db: PostgresConnection) throws -> [ModerationReport] {
        try db.query(
            """
            SELECT \(unsafeSQL: uncounted) FROM reports r
            WHERE r.app_id = \(appID) AND r.target_type = \(target.type.rawValue) AND r.target_id = \(target.id) AND r.status = 'open'
            ORDER BY r.report_id FOR UPDATE OF r
            """
        ).rows.map(report)
    }

    /// Up to `limit` reports on `target`, newest first, with `report_count` 0.
    static func onTarget(appID: String, target: ModerationReport.Target, limit: Int, on db: PostgresConnection) throws -> [ModerationReport] {
        try db.query(
            """
            SELECT \(unsafeSQL: uncounted) FROM reports r
            WHERE r.app_id = \(appID) AND r.target_type = \(target.type.rawValue) AND r.target_id = \(target.id)
            ORDER BY r.created_at DESC, r.report_id DESC LIMIT \(limit)
            """
        ).rows.map(report)
    }

    /// Closes the reports `reportIDs` with `status`, appending `action` (one JSON object) to their actions.
    static func close(appID: String, reportIDs: [String], status: ModerationReport.Status, action: [UInt8], now: Int64, on db: PostgresConnection)
        throws
    {
        try db.query(
            """
            UPDATE reports SET status = \(status.rawValue), resolved_at = \(now),
                actions = actions || jsonb_build_array(\(String(decoding: action, as: UTF8.self))::jsonb)
            WHERE app_id = \(appID) AND report_id = ANY(\(reportIDs)::text[])
            """)
    }

    /// The queue's filters.
    struct Filter: Sendable {
        var status: ModerationReport.Status?
        var targetType: ModerationReport.TargetType?
        var reason: ModerationReport.Reason?
        var userID: String?
    }

    /// Up to `limit` reports matching `filter`: open ones first, then the others, each oldest first; strictly after
    /// `after` (`closed` 0 for open, 1 for closed; `created_at`; `report_id`). Pages are ranges of the `reports_queue`
    /// index; with a status, of its open or its closed part.
    static func list(appID: String, filter: Filter, after: (closed: Int64, at: Int64, id: String)?, limit: Int, on db: PostgresConnection) throws
        -> [ModerationReport]
    {
        var q: PostgresQuery = "SELECT \(unsafeSQL: columns) FROM reports r WHERE r.app_id = \(appID)"
        if let status = filter.status {
            q += " AND r.status = \(status.rawValue) AND \(unsafeSQL: closedKey) = \(status == .open ? 0 : 1)::int"
            if let after { q += " AND (r.created_at, r.report_id) > (\(after.at)::bigint, \(after.id)::text)" }
        } else if let after {
            q += " AND (\(unsafeSQL: closedKey), r.created_at, r.report_id) > (\(after.closed)::int, \(after.at)::bigint, \(after.id)::text)"
        }
        if let type = filter.targetType { q += " AND r.target_type = \(type.rawValue)" }
        if let reason = filter.reason { q += " AND r.reason = \(reason.rawValue)" }
        if let userID = filter.userID { q += " AND r.target_user_id = \(userID)" }
        q += " ORDER BY \(unsafeSQL: closedKey), r.created_at, r.report_id LIMIT \(limit)"
        return try db.query(q).rows.map(report)
    }

    /// 0 for an open report, 1 for a closed one: the first key of the queue (the expression of `reports_queue`).
    private static let closedKey = "CASE WHEN r.status = 'open' THEN 0 ELSE 1 END"

    /// Open reports per app (the `/metrics` gauge).
    static func openCounts(on db: PostgresConnection) throws -> [(appID: String, open: Int64)] {
        try db.query("SELECT app_id, count(*) FROM reports WHERE status = 'open' GROUP BY app_id ORDER BY app_id").decode((String, Int64).self)
            .map { (appID: $0.0, open: $0.1) }
    }

    private static func report(_ row: PostgresRow) throws -> ModerationReport {
        let (reportID, status, reason, comment, reporterID, targetType, targetID, targetUserID, snapshot, createdAt, resolvedAt, actions, count) =
            try row.decode((String, String, String, String, String?, String, String, String?, String, Int64, Int64?, String, Int64).self)
        guard let status = ModerationReport.Status(rawValue: status), let reason = ModerationReport.Reason(rawValue: reason),
            let type = ModerationReport.TargetType(rawValue: targetType)
        else { throw PostgresError(kind: .protocol, message: "reports: unknown status, reason or target type") }
        return ModerationReport(
            reportID: reportID, status: status, reason: reason, comment: comment, reporterID: reporterID,
            target: ModerationReport.Target(type: type, id: targetID), targetUserID: targetUserID, snapshot: Array(snapshot.utf8),
            createdAt: createdAt,
            resolvedAt: resolvedAt, actions: Array(actions.utf8), reportCount: count)
    }

    // MARK: - Strikes (docs/moderation.md#automatic-escalation)

    /// Records one strike of `userID` at `now` and forgets its strikes older than the window.
    static func addStrike(appID: String, userID: String, now: Int64, windowStart: Int64, on db: PostgresConnection) throws {
        try db.query("DELETE FROM automod_strikes WHERE app_id = \(appID) AND user_id = \(userID) AND at <= \(windowStart)")
        try db.query("INSERT INTO automod_strikes (app_id, user_id, at) VALUES (\(appID), \(userID), \(now))")
    }

    /// The strikes of `userID` after `windowStart` not yet acted on.
    static func pendingStrikes(appID: String, userID: String, windowStart: Int64, on db: PostgresConnection) throws -> Int64 {
        try db.query(
            """
            SELECT count(*) FROM automod_strikes
            WHERE app_id = \(appID) AND user_id = \(userID) AND at > \(windowStart) AND NOT escalated
            """
        ).decodeFirst(Int64.self) ?? 0
    }

    /// Marks every strike of `userID` as acted on.
    static func markEscalated(appID: String, userID: String, on db: PostgresConnection) throws {
        try db.query("UPDATE automod_strikes SET escalated = true WHERE app_id = \(appID) AND user_id = \(userID) AND NOT escalated")
    }
}
