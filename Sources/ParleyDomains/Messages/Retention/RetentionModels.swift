import ParleyAPI
import ParleyCore
import ParleyPostgres

/// A retention policy (docs/retention.md#policies): messages of its scope older than `maxAgeDays` are purged.
struct RetentionPolicy: Sendable {
    var policyID: String
    var scope: RetentionScope
    var maxAgeDays: Int64
    var purgeFiles: Bool
    var createdAt: Int64
    var updatedAt: Int64

    func json() -> [UInt8] {
        var o = JSONObjectWriter(capacity: 256)
        o["policy_id"] = policyID
        o["scope"] = JSONValue.object(scope.json)
        o["max_age_days"] = maxAgeDays
        o["purge_files"] = purgeFiles
        o["created_at"] = createdAt
        o["updated_at"] = updatedAt
        return o.finish()
    }
}

/// A legal hold (docs/retention.md#legal-hold): the messages of its scope are never purged, deleted for everyone,
/// revoked or bulk-removed while it exists.
struct LegalHold: Sendable {
    var holdID: String
    var scope: RetentionScope
    var reason: String
    var createdAt: Int64

    func json() -> [UInt8] {
        var o = JSONObjectWriter(capacity: 256)
        o["hold_id"] = holdID
        o["scope"] = JSONValue.object(scope.json)
        o["reason"] = reason
        o["created_at"] = createdAt
        return o.finish()
    }
}

/// One purge run, dry or real (docs/retention.md#runs).
struct RetentionRun: Sendable {
    var runID: String
    var startedAt: Int64
    var finishedAt: Int64?
    var dryRun: Bool
    /// The ids of the policies applied (`history_retention_days` standing in for the app policy has none).
    var policies: [String] = []
    var messagesPurged: Int64 = 0
    var filesPurged: Int64 = 0
    var heldSkipped: Int64 = 0
    var error: String?

    init(runID: String, startedAt: Int64, dryRun: Bool) {
        self.runID = runID
        self.startedAt = startedAt
        self.dryRun = dryRun
    }

    func json() -> [UInt8] {
        var o = JSONObjectWriter(capacity: 256)
        o["run_id"] = runID
        o["started_at"] = startedAt
        o["finished_at"] = finishedAt
        o["dry_run"] = dryRun
        o["policies"] = JSONValue.array(policies.map(JSONValue.string))
        o["messages_purged"] = messagesPurged
        o["files_purged"] = filesPurged
        o["held_skipped"] = heldSkipped
        o["error"] = error
        return o.finish()
    }
}
