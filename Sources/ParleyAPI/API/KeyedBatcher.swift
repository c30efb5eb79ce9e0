import ParleyCore
import ParleyPostgres
import ParleySync

/// Changes that all lock one row, written a batch at a time by one pool worker per key (the node's revokes per app, its
/// reaction changes per message): one connection works through the queued changes, many per transaction, instead of
/// every request's connection queuing on the row lock, where each commit wakes every waiter to find the row changed
/// again. The queue and its one-runner-per-key rule are ``KeyedBatchQueue``'s; this type runs the batches and answers
/// each item. Owner: the route table that made it.
package final class KeyedBatcher<Item: Sendable, Output: Sendable>: Sendable {
    package typealias Done = @Sendable (Result<Output, any Error>) -> Void
    /// Writes one key's batch (in queue order) on a pool worker's connection: one result per item, in order. What it
    /// throws is every item's outcome.
    package typealias Write = @Sendable (_ items: [Item], _ appID: String, _ db: PostgresConnection) throws -> [Result<Output, any Error>]

    private struct Job: Sendable {
        let item: Item
        let done: Done
    }

    private let queue = KeyedBatchQueue<Job>()
    private let pool: PostgresPool
    /// Items per batch: a bound on how long a batch holds its row locked, not a wait (a batch forms only from the
    /// items that queued while the previous one was written).
    private let maxBatch: Int
    private let write: Write

    package init(pool: PostgresPool, maxBatch: Int, write: @escaping Write) {
        self.pool = pool
        self.maxBatch = maxBatch
        self.write = write
    }

    /// Queues `item` of the app `appID` under `key` (every item of a key is of one app); `done` runs on a pool worker
    /// once its batch is written. When the pool refuses the key's runner (its queue is full), every item then queued
    /// under the key is answered 503 `unavailable`: none waits for a runner that will not come.
    package func submit(_ item: Item, appID: String, key: String, done: @escaping Done) {
        guard queue.enqueue(Job(item: item, done: done), key: key) else { return }
        pool.submit(
            { [self] in
                while let batch = queue.next(key: key, max: maxBatch) {
                    let results: [Result<Output, any Error>]
                    do {
                        results = try pool.withConnection { db in try write(batch.map(\.item), appID, db) }
                    } catch {
                        results = batch.map { _ in .failure(error) }
                    }
                    for (job, result) in zip(batch, results) { job.done(result) }
                }
            },
            rejected: { [self] in
                let busy = APIError.retryLater(.unavailable, "no database connection became free", retryAfterSeconds: 1)
                while let batch = queue.next(key: key, max: Int.max) { for job in batch { job.done(.failure(busy)) } }
            })
    }
}
