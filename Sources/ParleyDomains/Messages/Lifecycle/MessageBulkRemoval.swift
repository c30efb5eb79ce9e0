import ParleyAPI
import ParleyCore
import ParleyPostgres

/// Removing a user's messages in bulk (docs/jobs.md#removing-a-users-messages): the `remove_messages` job kind.
///
/// Each step takes the next ``batchSize`` matching messages (by timestamp, then id, from the checkpoint) and deletes
/// them for everyone through ``MessageLifecycle`` — the code of `POST /v1/messages/delete` — or hides them, in the
/// step's own transaction: a step locks those message rows only (never a conversation's sequence head, which sends
/// lock), so senders to the same conversations wait for no batch. The step that finishes a real removal writes its
/// moderation log entry.
package enum MessageBulkRemoval {
    /// The job kind's name.
    package static let kindName = "remove_messages"
    /// Messages per step; also the most ids one `message.deleted` lists.
    static let batchSize = 500
    /// Ids in a result's `sample_message_ids`.
    static let sampleSize = 20

    enum Mode: String, CaseIterable, Sendable {
        /// Deleted for everyone: tombstones, as `POST /v1/messages/delete` with `scope` `everyone`.
        case delete
        /// Shadow: only the sender (and the app) still sees them.
        case hide
    }

    /// The request, as the route read it (and as the job keeps it in `params`).
    struct Request: Sendable {
        var userID: String
        var from: Int64
        var to: Int64
        var conversationType: ConversationType?
        var conversationID: String?
        var mode: Mode
        var dryRun: Bool

        var params: JSONObject {
            [
                "user_id": .string(userID), "from": .int(from), "to": .int(to),
                "conversation_type": conversationType.map { .string($0.rawValue) } ?? .null,
                "conversation_id": conversationID.map(JSONValue.string) ?? .null, "mode": .string(mode.rawValue), "dry_run": .bool(dryRun),
            ]
        }

        init(
            userID: String, from: Int64, to: Int64, conversationType: ConversationType?, conversationID: String?, mode: Mode, dryRun: Bool
        ) {
            self.userID = userID
            self.from = from
            self.to = to
            self.conversationType = conversationType
            self.conversationID = conversationID
            self.mode = mode
            self.dryRun = dryRun
        }

        /// The request back from a job's `params`.
        init(_ params: JSONObject) throws {
            guard let userID = params["user_id"]?.stringValue, let from = params["from"]?.intValue, let to = params["to"]?.intValue,
                let mode = params["mode"]?.stringValue.flatMap(Mode.init(rawValue:)), let dryRun = params["dry_run"]?.boolValue
            else { throw APIError(.internalError, "malformed remove_messages parameters") }
            self.init(
                userID: userID, from: from, to: to, conversationType: params["conversation_type"]?.stringValue.flatMap(ConversationType.init),
                conversationID: params["conversation_id"]?.stringValue, mode: mode, dryRun: dryRun)
        }

        /// The messages it matches; a peer conversation is named by the other user, as `user_id` sees it.
        var selection: MessageBulkRemovalStore.Selection {
            var selection = MessageBulkRemovalStore.Selection(userID: userID, from: from, to: to)
            if let conversationType, let conversationID {
                selection.conversation = (conversationType.rawValue, MessageStore.thread(conversationType, userID, conversationID))
            }
            return selection
        }
    }

    /// Where the next step resumes, with the running totals.
    struct Checkpoint {
        /// The app's `delete_files_with_messages` when the removal was requested.
        var deleteFiles: Bool
        /// The last message done: (timestamp, message_id).
        var afterTimestamp: Int64
        var afterID: String
        var matched: Int64
        var changed: Int64
        /// Matched messages a legal hold kept (docs/retention.md#legal-hold).
        var held: Int64
        var sample: [String]

        var json: JSONObject {
            [
                "delete_files": .bool(deleteFiles), "after_timestamp": .int(afterTimestamp), "after_id": .string(afterID),
                "matched": .int(matched), "changed": .int(changed), "held": .int(held), "sample": .array(sample.map(JSONValue.string)),
            ]
        }

        init(deleteFiles: Bool, afterTimestamp: Int64) {
            self.deleteFiles = deleteFiles
            self.afterTimestamp = afterTimestamp
            afterID = ""
            matched = 0
            changed = 0
            held = 0
            sample = []
        }

        init(_ json: JSONObject) throws {
            guard let deleteFiles = json["delete_files"]?.boolValue, let afterTimestamp = json["after_timestamp"]?.intValue,
                let afterID = json["after_id"]?.stringValue, let matched = json["matched"]?.intValue, let changed = json["changed"]?.intValue,
                let sample = json["sample"]?.arrayValue
            else { throw APIError(.internalError, "malformed remove_messages checkpoint") }
            self.deleteFiles = deleteFiles
            self.afterTimestamp = afterTimestamp
            self.afterID = afterID
            self.matched = matched
            self.changed = changed
            // A checkpoint written before holds existed has none.
            self.held = json["held"]?.intValue ?? 0
            self.sample = sample.compactMap(\.stringValue)
        }

        var result: JSONObject {
            ["matched": .int(matched), "changed": .int(changed), "held": .int(held), "sample_message_ids": .array(sample.map(JSONValue.string))]
        }
    }

    /// The job kind, wired by the app layer with what a delete for everyone needs from above: the revoke push (Push
    /// sits above Messages) and the removal of deleted files' objects.
    package static func kind(
        services: Services,
        revokePush:
            @escaping @Sendable (_ db: PostgresConnection, _ appID: String, _ messageID: String, _ push: JSONValue?, _ now: Int64) throws
            -> Void
    ) -> JobKind {
        let removeObjects = MessageFiles.objectRemover(services)
        var kind = JobKind(
            name: kindName,
            plan: { params, settings, context in
                let request = try Request(params)
                try UserService(db: context.db, appID: context.appID, now: context.now).requireExists(request.userID)
                let matched = try MessageBulkRemovalStore.count(appID: context.appID, request.selection, on: context.db)
                let checkpoint = Checkpoint(deleteFiles: settings.bool("delete_files_with_messages"), afterTimestamp: request.from - 1)
                return JobPlan(total: matched, checkpoint: checkpoint.json)
            },
            step: { params, json, context in
                try step(Request(params), Checkpoint(json), context, revokePush: revokePush, removeObjects: removeObjects)
            })
        // A removal's steps take the database's CPU from the senders: rest as long as each step took (bench/RESULTS.md).
        kind.restRatio = 1
        return kind
    }

    /// One batch: the next matching messages from the checkpoint, deleted or hidden (or, for a dry run, the count and
    /// the sample in one step); the last step writes the moderation log entry of a real removal.
    static func step(
        _ request: Request, _ checkpoint: Checkpoint, _ context: JobKind.Context, revokePush: @escaping MessageLifecycle.RevokePush,
        removeObjects: @escaping MessageFiles.ObjectRemover
    ) throws -> JobStepOutcome {
        let (db, appID, now) = (context.db, context.appID, context.now)
        var checkpoint = checkpoint
        let selection = request.selection
        if request.dryRun {
            checkpoint.matched = try MessageBulkRemovalStore.count(appID: appID, selection, on: db)
            checkpoint.held = try MessageBulkRemovalStore.count(appID: appID, selection, held: true, on: db)
            checkpoint.sample = try MessageBulkRemovalStore.next(
                appID: appID, selection, after: (request.from - 1, ""), limit: sampleSize, on: db
            ).map(\.messageID)
            return .finished(checkpoint.result, progress: checkpoint.matched)
        }
        let batch = try MessageBulkRemovalStore.next(
            appID: appID, selection, after: (checkpoint.afterTimestamp, checkpoint.afterID), limit: batchSize, on: db)
        let ids = batch.map(\.messageID)
        // Messages a legal hold covers stay as they are (docs/retention.md#legal-hold).
        let held = try RetentionService.held(ids, appID: appID, on: db)
        let free = ids.filter { !held.contains($0) }
        let changed: [String]
        switch request.mode {
        case .delete:
            let lifecycle = MessageLifecycle(
                service: MessageService(db: db, appID: appID, now: now), revokeWindowS: 0, deleteFiles: checkpoint.deleteFiles,
                removeObjects: removeObjects)
            changed = try lifecycle.deleteForEveryone(free, perEvent: batchSize, revokePush: revokePush, on: db)
        case .hide:
            changed = try MessageBulkRemovalStore.hide(appID: appID, messageIDs: free, on: db)
            // A room's recent-message cache holds the messages as they were: refresh the ones now hidden.
            for message in try MessageStore.fetchMany(appID: appID, messageIDs: changed, on: db) where message.conversationType == .room {
                try RoomRecent.refresh(appID: appID, message: message, on: db)
            }
        }
        checkpoint.matched += Int64(ids.count)
        checkpoint.changed += Int64(changed.count)
        checkpoint.held += Int64(held.count)
        checkpoint.sample += ids.prefix(sampleSize - checkpoint.sample.count)
        if let last = batch.last { (checkpoint.afterTimestamp, checkpoint.afterID) = (last.timestamp, last.messageID) }
        guard batch.count < batchSize else { return .next(checkpoint.json, progress: Int64(ids.count)) }
        try ModerationLogStore.record(
            ModerationLogStore.Entry(
                action: kindName, targetType: "user", targetID: request.userID, params: request.params, moderator: nil, source: .job),
            appID: appID, now: now, on: db)
        return .finished(checkpoint.result, progress: Int64(ids.count))
    }
}
