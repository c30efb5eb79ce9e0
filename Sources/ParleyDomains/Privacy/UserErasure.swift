import ParleyAPI
import ParleyCore
import ParleyPostgres

/// Erasing a user (docs/privacy.md#erasure): the `user_erase` job kind.
///
/// Each step deletes the next ``batchSize`` messages the user sent for everyone, as bulk removal does (through
/// ``MessageLifecycle``, with `delete_files_with_messages` on: the files only they named go), leaving those a legal
/// hold covers as they are (readable, not tombstoned; docs/retention.md#legal-hold). The last step deletes the user's
/// remaining uploaded files that no surviving message names and hard-deletes the user (``UserService``'s hard delete,
/// as `DELETE /v1/users/{user_id}?mode=hard`). A dry run counts in one step and changes nothing.
package enum UserErasure {
    package static let kindName = "user_erase"
    /// Messages per step.
    static let batchSize = 500

    /// Where the next step resumes, with the running totals.
    struct Checkpoint {
        var afterTimestamp: Int64 = -1
        var afterID = ""
        var deleted: Int64 = 0
        var held: Int64 = 0
        /// The user's uploaded files when the erasure was planned: `files_purged` is how many of them went.
        var filesBefore: Int64 = 0

        var json: JSONObject {
            [
                "after_timestamp": .int(afterTimestamp), "after_id": .string(afterID), "deleted": .int(deleted), "held": .int(held),
                "files_before": .int(filesBefore),
            ]
        }

        init(filesBefore: Int64) { self.filesBefore = filesBefore }

        init(_ json: JSONObject) throws {
            guard let afterTimestamp = json["after_timestamp"]?.intValue, let afterID = json["after_id"]?.stringValue,
                let deleted = json["deleted"]?.intValue, let held = json["held"]?.intValue, let filesBefore = json["files_before"]?.intValue
            else { throw APIError(.internalError, "malformed user_erase checkpoint") }
            (self.afterTimestamp, self.afterID, self.deleted, self.held, self.filesBefore) = (afterTimestamp, afterID, deleted, held, filesBefore)
        }
    }

    static func result(deleted: Int64, filesPurged: Int64, held: Int64) -> JSONObject {
        ["messages_deleted": .int(deleted), "files_purged": .int(filesPurged), "held_kept": .int(held)]
    }

    /// Every stored message `userID` sent (not deleted, not tips), as bulk removal selects them.
    static func selection(_ userID: String) -> MessageBulkRemovalStore.Selection {
        MessageBulkRemovalStore.Selection(userID: userID, from: 0, to: .max)
    }

    /// The job kind, wired by the app layer with what it needs from above: the revoke push (Push sits above Messages)
    /// and the hard delete's removal from groups, rooms and calls (``UserHooks``).
    package static func kind(
        services: Services,
        revokePush:
            @escaping @Sendable (_ db: PostgresConnection, _ appID: String, _ messageID: String, _ push: JSONValue?, _ now: Int64) throws
            -> Void,
        removeFromGroups: @escaping UserHooks.RemoveFromGroups
    ) -> JobKind {
        let removeObjects = MessageFiles.objectRemover(services)
        return JobKind(
            name: kindName,
            plan: { params, _, context in
                guard let userID = params["user_id"]?.stringValue else { throw APIError(.internalError, "malformed user_erase parameters") }
                try UserService(db: context.db, appID: context.appID, now: context.now).requireExists(userID)
                let total = try MessageBulkRemovalStore.count(appID: context.appID, selection(userID), on: context.db)
                let files = try UserErasureStore.ownedFiles(appID: context.appID, userID: userID, on: context.db)
                return JobPlan(total: total, checkpoint: Checkpoint(filesBefore: files).json)
            },
            step: { params, json, context in
                guard let userID = params["user_id"]?.stringValue, let dryRun = params["dry_run"]?.boolValue else {
                    throw APIError(.internalError, "malformed user_erase parameters")
                }
                return try step(
                    userID: userID, dryRun: dryRun, Checkpoint(json), context, revokePush: revokePush, removeFromGroups: removeFromGroups,
                    removeObjects: removeObjects)
            })
    }

    static func step(
        userID: String, dryRun: Bool, _ checkpoint: Checkpoint, _ context: JobKind.Context, revokePush: @escaping MessageLifecycle.RevokePush,
        removeFromGroups: @escaping UserHooks.RemoveFromGroups, removeObjects: @escaping MessageFiles.ObjectRemover
    ) throws -> JobStepOutcome {
        let (db, appID, now) = (context.db, context.appID, context.now)
        var checkpoint = checkpoint
        let selection = selection(userID)
        if dryRun {
            let all = try MessageBulkRemovalStore.count(appID: appID, selection, on: db)
            let held = try MessageBulkRemovalStore.count(appID: appID, selection, held: true, on: db)
            let files = try UserErasureStore.filesErasable(appID: appID, userID: userID, on: db)
            return .finished(result(deleted: all - held, filesPurged: files, held: held), progress: all)
        }
        let batch = try MessageBulkRemovalStore.next(
            appID: appID, selection, after: (checkpoint.afterTimestamp, checkpoint.afterID), limit: batchSize, on: db)
        let ids = batch.map(\.messageID)
        let held = try RetentionService.held(ids, appID: appID, on: db)
        let lifecycle = MessageLifecycle(
            service: MessageService(db: db, appID: appID, now: now), revokeWindowS: 0, deleteFiles: true, removeObjects: removeObjects)
        let deleted = try lifecycle.deleteForEveryone(ids.filter { !held.contains($0) }, perEvent: batchSize, revokePush: revokePush, on: db)
        checkpoint.deleted += Int64(deleted.count)
        checkpoint.held += Int64(held.count)
        if let last = batch.last { (checkpoint.afterTimestamp, checkpoint.afterID) = (last.timestamp, last.messageID) }
        guard batch.count < batchSize else { return .next(checkpoint.json, progress: Int64(ids.count)) }
        // The user's files no surviving message names go; then the user.
        var after: (Int64, String)?
        let files = FileService(db: db, appID: appID, now: now)
        while true {
            let page = try files.list(ownerID: userID, kind: nil, after: after, limit: 100)
            try MessageFiles.release(page.map(\.fileID), appID: appID, removeObjects: removeObjects, now: now, on: db)
            guard page.count == 100, let last = page.last else { break }
            after = (last.createdAt, last.fileID)
        }
        let filesLeft = try UserErasureStore.ownedFiles(appID: appID, userID: userID, on: db)
        try UserService(db: db, appID: appID, now: now).delete(userID, mode: .hard, removeFromGroups: removeFromGroups)
        return .finished(
            result(deleted: checkpoint.deleted, filesPurged: max(0, checkpoint.filesBefore - filesLeft), held: checkpoint.held),
            progress: Int64(ids.count))
    }
}

/// The reads of an erasure (docs/privacy.md#erasure); it writes through the domains that own the rows.
enum UserErasureStore {
    /// How many files `userID` uploaded that still exist.
    static func ownedFiles(appID: String, userID: String, on db: PostgresConnection) throws -> Int64 {
        try db.query("SELECT count(*) FROM files WHERE app_id = \(appID) AND owner_id = \(userID)").decodeFirst(Int64.self) ?? 0
    }

    /// How many of them an erasure would delete: those no message survives it naming (another user's message, or a
    /// held one).
    static func filesErasable(appID: String, userID: String, on db: PostgresConnection) throws -> Int64 {
        try db.query(
            """
            SELECT count(*) FROM files f
            WHERE f.app_id = \(appID) AND f.owner_id = \(userID)
              AND NOT EXISTS (
                SELECT 1 FROM message_files mf JOIN messages m ON m.app_id = mf.app_id AND m.message_id = mf.message_id
                WHERE mf.app_id = \(appID) AND mf.file_id = f.file_id
                  AND (m.sender <> \(userID) OR parley_message_held(m.app_id, m.conv_type, m.conv_id, m.sender)))
            """
        ).decodeFirst(Int64.self) ?? 0
    }
}
