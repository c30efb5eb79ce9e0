import ParleyAPI
import ParleyCore
import ParleyPostgres
import ParleySync

/// The node's revokes, queued per app and written a batch per transaction by one pool worker at a time per app
/// (``KeyedBatcher``), the way the message writer commits concurrent sends together.
///
/// A revoke alone is a transaction of three statements (the row lock with the checks, the change with its event, the
/// push revoke) plus its commit's WAL flush and the sequencer's move of its event: about twice a send's CPU, where a
/// send is one statement in the writer's group commit (bench/RESULTS.md 2026-12-03). In a batch, the revokes share
/// one commit and one event append. A refused revoke (its problem comes before its first write) leaves the others
/// in the batch; a database error ends the batch, and its revokes are then tried again one by one, each in its own
/// transaction, so one bad item fails alone. Owner: the route table that made it.
final class MessageRevokes: Sendable {
    /// Revokes per transaction: a bound on how long a batch holds its rows locked, not a wait (a batch forms only
    /// from the revokes that queued while the previous one was written).
    static let maxBatch = 64

    /// One revoke request, with what its request read (its clock, the app's window at that time).
    struct Job: Sendable {
        let messageID: String
        let actor: MessageLifecycle.Actor
        let extendedData: String
        let push: JSONValue?
        let now: Int64
        let revokeWindowS: Int64
        /// The app's `delete_files_with_messages` (docs/files.md#files-in-messages).
        let deleteFiles: Bool
    }

    private let batches: KeyedBatcher<Job, Message>

    /// `removeObjects`: deletes the S3 objects of files deleted with a revoked message, after the commit.
    init(pool: PostgresPool, removeObjects: @escaping MessageFiles.ObjectRemover, revokePush: @escaping MessageLifecycle.RevokePush) {
        batches = KeyedBatcher(pool: pool, maxBatch: Self.maxBatch) { jobs, appID, db in
            try Self.write(jobs, appID: appID, removeObjects: removeObjects, revokePush: revokePush, on: db)
        }
    }

    /// Queues `job` (of the app `appID`); `done` runs on a pool worker once its batch has committed.
    func submit(_ job: Job, appID: String, done: @escaping @Sendable (Result<Message, any Error>) -> Void) {
        batches.submit(job, appID: appID, key: appID, done: done)
    }

    /// `jobs` in one transaction (their events appended together, last), or, after a database error, one by one.
    private static func write(
        _ jobs: [Job], appID: String, removeObjects: @escaping MessageFiles.ObjectRemover, revokePush: MessageLifecycle.RevokePush,
        on db: PostgresConnection
    ) throws -> [Result<Message, any Error>] {
        if jobs.count > 1 {
            do {
                return try db.transaction { db in
                    var events: [NewEvent]? = []
                    var results: [Result<Message, any Error>] = []
                    for job in jobs {
                        do {
                            results.append(
                                .success(try revoke(job, appID: appID, removeObjects: removeObjects, revokePush: revokePush, events: &events, on: db))
                            )
                        } catch let problem as APIError {
                            results.append(.failure(problem))
                        }
                    }
                    try EventLog.append(events ?? [], appID: appID, now: jobs.map(\.now).max() ?? 0, on: db)
                    return results
                }
            } catch let error as PostgresError where !error.isConnectionFailure {
                _ = error  // one item's statement failed: the batch is gone; each revoke again on its own below
            }
        }
        return jobs.map { job in
            Result {
                try db.transaction { db in
                    var events: [NewEvent]? = nil
                    return try revoke(job, appID: appID, removeObjects: removeObjects, revokePush: revokePush, events: &events, on: db)
                }
            }
        }
    }

    private static func revoke(
        _ job: Job, appID: String, removeObjects: @escaping MessageFiles.ObjectRemover, revokePush: MessageLifecycle.RevokePush,
        events: inout [NewEvent]?, on db: PostgresConnection
    ) throws -> Message {
        let lifecycle = MessageLifecycle(
            service: MessageService(db: db, appID: appID, now: job.now), revokeWindowS: job.revokeWindowS, deleteFiles: job.deleteFiles,
            removeObjects: removeObjects)
        return try lifecycle.revokeLocked(
            job.messageID, by: job.actor, extendedData: job.extendedData, push: job.push, revokePush: revokePush, events: &events, on: db)
    }
}
