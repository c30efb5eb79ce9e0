import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres
import ParleySync

/// The node's group commit for sends: concurrent sends are written together, in shared transactions, by two writer
/// threads with a connection each (README.md#how-writes-are-ordered: per-conversation seqs are taken once per batch of
/// sends).
///
/// Two, so PostgreSQL works on one batch while the other waits for its commit's WAL flush: with one writer the
/// database sat idle through every flush (random-pair sends, same machine, alternating: 1.3–1.7k/s with one writer,
/// 2.0–2.1k/s with two). Two batches that touch one conversation queue on its seq row, so seqs still follow commit
/// order; both take the app's head lock last, so event ids do too.
///
/// Sends queue here from any thread; a free writer takes everything queued, writes it with ``MessageWrite`` (one
/// statement for the batch, then its events, numbered under the app's head lock taken once per batch, as the
/// ``EventSequencer`` takes it for other writers), commits, pokes the live hub and answers each send with its own
/// outcome: its events are in the log by then, with no sequencer round in between. While one batch
/// commits, the next one fills: no timer, so an idle server writes a lone send at once. A send is answered only after
/// its batch's commit returned (`synchronous_commit` stays on: nothing acknowledged can be lost); when the commit's
/// fate is unknown (the connection broke) every send of the batch fails with 503, and a retry with the same
/// `client_msg_id` answers as a duplicate if the batch did commit.
///
/// Failures stay with their item: checks fail single items inside the statement; a concurrent first use of a
/// `client_msg_id` on another node, a deadlock or a serialization failure re-runs the batch; any other error re-runs
/// its items one per transaction, so one bad item cannot fail the others.
///
/// Owner: `inbox` (any thread); each writer thread's connection lives in its `run` loop.
package final class MessageWriter: Sendable {
    typealias Completion = @Sendable (Result<MessageWrite.Written, any Error>) -> Void

    private struct Job {
        let item: MessageWrite.Item
        let done: Completion
    }

    /// What the writers share. A send wakes a writer only when one sleeps (the inbox counts them): a pipe write per
    /// send cost a system call while the writers were busy anyway.
    private struct Queue {
        var jobs: [Job] = []
        /// Sends accepted and not answered yet: queued here, or taken by a writer and not written yet.
        var outstanding = 0

        mutating func takeJobs() -> [Job] {
            defer { jobs = [] }
            return jobs
        }
    }

    /// At most this many sends per transaction (a bound on statement size and lock time, not a wait).
    static let maxBatch = 256
    /// Retries of a whole batch after a conflict it can win on the next try.
    static let maxConflictRetries = 5
    /// Overload (docs/errors.md#rate-limits): with more sends than this waiting, priority-1 room sends are refused
    /// before they queue. Four full batches: the two writers hold at most two in flight, so beyond this every new send
    /// waits behind at least two more commits (about half a second at the measured 2k sends/s), and the sends the API
    /// lets go first are the ones shed first, while ordinary sends still queue.
    package static let defaultOverloadThreshold = 4 * maxBatch

    /// Whether a send is refused as overload (docs/errors.md#rate-limits): a priority-1 room send while more than
    /// `threshold` sends wait.
    static func sheds(conversationType: ConversationType, priority: Int64, outstanding: Int, threshold: Int) -> Bool {
        conversationType == .room && priority == 1 && outstanding > threshold
    }

    private let inbox = WorkerInbox(Queue())
    /// Told, on a writer thread, of each app's events a batch committed, with their ids (the node hands them to its
    /// live hub, push bridge and webhook dispatcher).
    private let committed: @Sendable (CommittedEvents) -> Void
    private let logger: Logger
    private let overloadThreshold: Int

    package init(
        logger: Logger, overloadThreshold: Int = MessageWriter.defaultOverloadThreshold,
        committed: @escaping @Sendable (CommittedEvents) -> Void
    ) {
        self.committed = committed
        self.logger = logger
        self.overloadThreshold = overloadThreshold
    }

    /// Whether `request` is to be refused now instead of queued (429 `rate_limited`, docs/errors.md#rate-limits): see
    /// ``sheds``.
    private func sheds(_ request: SendRequest) -> Bool {
        guard request.conversationType == .room && request.priority == 1 else { return false }
        let outstanding = inbox.withState { $0.outstanding }
        return Self.sheds(
            conversationType: request.conversationType, priority: request.priority, outstanding: outstanding, threshold: overloadThreshold)
    }

    /// 429 `rate_limited` when `request` is to be refused now instead of queued (``sheds(_:)``): before any database
    /// work, on whichever thread reads the send.
    func admit(_ request: SendRequest) throws {
        if sheds(request) {
            throw APIError.retryLater(.rateLimited, "the server is overloaded: low-priority room messages are refused", retryAfterSeconds: 1)
        }
    }

    /// Queues one send; `done` runs on a writer thread once its batch committed (or failed): keep it short.
    func submit(_ item: MessageWrite.Item, done: @escaping Completion) {
        let accepted = inbox.post { queue in
            queue.jobs.append(Job(item: item, done: done))
            queue.outstanding += 1
        }
        if !accepted {
            done(.failure(APIError.retryLater(.unavailable, "the server is shutting down", retryAfterSeconds: 1)))
        }
    }

    package func start(database: PostgresConfiguration, pgLogger: PostgresLogger, writers: Int = 2) {
        inbox.start(name: "parley-writer", threads: writers) { [self] index in
            run(DedicatedConnection(database, applicationName: "parley-writer-\(index)", logger: pgLogger))
        }
    }

    /// Writes what is queued, answers it, and stops the threads; later sends fail with 503.
    package func stop() {
        inbox.stop()
    }

    // MARK: - The writer thread

    private func run(_ connection: DedicatedConnection) {
        var db = connection
        var outage = OutageLog(logger: logger, what: "message writer connect")
        // A send or the stop wakes a sleeping writer; the second only bounds each sleep.
        while let queued = inbox.take(waitMillis: 1_000, { $0.takeJobs() }) {
            writeInBatches(queued, db: &db, outage: &outage)
        }
        // Stopped: the sends accepted before the stop are still queued (later ones are refused), and the stop has
        // reached the other writers too; whichever writer comes here first writes them.
        writeInBatches(inbox.withState { $0.takeJobs() }, db: &db, outage: &outage)
    }

    /// Writes `jobs` in batches (``nextBatch(_:)``) and answers each.
    private func writeInBatches(_ jobs: [Job], db: inout DedicatedConnection, outage: inout OutageLog) {
        var pending = jobs
        while !pending.isEmpty {
            let (batch, rest) = Self.nextBatch(pending)
            pending = rest
            do {
                let connection = try db.get()
                outage.succeeded()
                write(batch, on: connection)
                db.dropIfBroken()
            } catch {
                outage.failed(error)
                for job in batch { job.done(.failure(Self.unavailable)) }
            }
            inbox.withState { $0.outstanding -= batch.count }
        }
    }

    /// The first batch of `jobs` in queue order, and the rest. A send repeating a (sender, client_msg_id) already in
    /// the batch waits for the next one, where it finds the first one's key and answers as its duplicate.
    private static func nextBatch(_ jobs: [Job]) -> (batch: [Job], rest: [Job]) {
        SendBatching.split(jobs, limit: maxBatch) { job in
            job.item.message.clientMsgID.map { job.item.appID + "\u{0}" + job.item.message.from + "\u{0}" + $0 }
        }
    }

    /// Writes `batch` in one transaction and answers every job.
    private func write(_ batch: [Job], on db: PostgresConnection) {
        var retries = 0
        while true {
            do {
                let items = batch.map(\.item)
                let (written, events) = try db.transaction { db in
                    let written = try MessageWrite.write(items, on: db)
                    return (written, try MessageWrite.appendEvents(items, written, committing: true, on: db))
                }
                for appEvents in events { committed(appEvents) }
                for (job, result) in zip(batch, written) { job.done(.success(result)) }
                return
            } catch let error as PostgresError
                where !db.isBroken && retries < Self.maxConflictRetries
                && (error.sqlState == "23505" || error.isDeadlock || error.isSerializationFailure)
            {
                // Another node's batch took a client_msg_id first (this batch then answers it as a duplicate), or two
                // batches crossed on row locks.
                retries += 1
                Wakeup.sleep(millis: Int.random(in: 0...retries))
            } catch {
                // The database is gone or does not answer (a timeout, or not tried while it stalls): no item is to blame.
                let unreachable = db.isBroken || (error as? PostgresError)?.isConnectionFailure == true
                if unreachable || batch.count == 1 {
                    if !unreachable { logger.error("msg=\"message write failed\" error=\"\(error)\"") }
                    for job in batch { job.done(.failure(unreachable ? Self.unavailable : error)) }
                    return
                }
                // Find the item that fails: each on its own, so the others still commit.
                for job in batch { write([job], on: db) }
                return
            }
        }
    }

    private static var unavailable: APIError {
        APIError.retryLater(.unavailable, "the database connection was lost; retry the send", retryAfterSeconds: 1)
    }
}
