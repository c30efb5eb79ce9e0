import ParleyAPI
import ParleyCore

/// A report of a message, user or group, and its place in the review queue (docs/moderation.md#the-report-object).
struct ModerationReport: Sendable {
    enum Status: String, CaseIterable, Sendable {
        case open, resolved, dismissed
    }

    /// Why it was reported; `automod` only for the reports a blocklist flag files (docs/moderation.md#automatic-escalation).
    enum Reason: String, CaseIterable, Sendable {
        case spam, abuse, sexual, violence, illegal, other, automod

        /// The reasons a reporter may give.
        static let given: [Reason] = [.spam, .abuse, .sexual, .violence, .illegal, .other]
    }

    enum TargetType: String, CaseIterable, Sendable {
        case message, user, group
    }

    struct Target: Sendable, Equatable {
        var type: TargetType
        var id: String

        func json() -> [UInt8] {
            var o = JSONObjectWriter(capacity: 64)
            o["type"] = type.rawValue
            o[type.rawValue + "_id"] = id
            return o.finish()
        }
    }

    var reportID: String
    var status: Status
    var reason: Reason
    var comment: String
    var reporterID: String?
    var target: Target
    /// The message's sender or the reported user; nil for a group.
    var targetUserID: String?
    /// The Message (app view), User or Group as it was at the first open report on the target, as JSON.
    var snapshot: [UInt8]
    var createdAt: Int64
    var resolvedAt: Int64?
    /// `[{action, params, note, moderator, at}]` as JSON.
    var actions: [UInt8]
    /// Open reports on the target (read with the report).
    var reportCount: Int64

    /// The Report object (docs/moderation.md#the-report-object); `reports` (the reports on the same target, newest first) only for a read of one report.
    func json(reports: [ModerationReport]? = nil) -> [UInt8] {
        var o = JSONObjectWriter(capacity: 512 + snapshot.count + actions.count)
        o["report_id"] = reportID
        o["status"] = status.rawValue
        o["reason"] = reason.rawValue
        o["comment"] = comment
        o["reporter_id"] = reporterID
        o.raw("target", target.json())
        o.raw("target_snapshot", snapshot)
        o["created_at"] = createdAt
        o["resolved_at"] = resolvedAt
        o.raw("actions", actions)
        o["report_count"] = reportCount
        if let reports {
            o.write("reports") { writer in
                writer.beginArray()
                for report in reports { writer.writeRaw(report.json()) }
                writer.endArray()
            }
        }
        return o.finish()
    }
}

/// What a moderator does with a report (docs/moderation.md#actions).
enum ReportAction: String, CaseIterable, Sendable {
    case dismiss
    case deleteMessage = "delete_message"
    case muteUser = "mute_user"
    case banUser = "ban_user"
    case warnUser = "warn_user"
    case removeFromGroup = "remove_from_group"
}

/// Limits of reports (docs/moderation.md#reports-and-the-review-queue).
enum ReportLimits {
    static let maxCommentBytes = 1024
    static let maxNoteBytes = 1024
    static let maxModeratorBytes = 64
    static let maxWarningBytes = 1024
    /// The reports on one target a read of one report lists.
    static let maxReportsPerTarget = 100
}
