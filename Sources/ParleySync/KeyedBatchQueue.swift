/// Jobs queued by key and taken a batch at a time by one runner per key: for changes that all lock one row (the
/// reactions of one message), so a single connection works through them, many per transaction, instead of every
/// request's connection queuing on the row lock, where each commit wakes every waiter to find the row changed again.
///
/// ``enqueue(_:key:)`` tells its caller whether it is to start the key's runner (none is active for the key); the
/// runner calls ``next(key:max:)`` until it answers nil, which ends its turn under the same lock `enqueue` takes, so no
/// job is ever left without a runner. Owner: `queues` (any thread); a key present = its runner is active.
public final class KeyedBatchQueue<Job: Sendable>: Sendable {
    private let queues = LockedValue<[String: [Job]]>([:])

    public init() {}

    /// Queues `job` under `key`; true when the caller must start the key's runner.
    public func enqueue(_ job: Job, key: String) -> Bool {
        queues.withLock { queues in
            if queues[key] != nil {
                queues[key]?.append(job)
                return false
            }
            queues[key] = [job]
            return true
        }
    }

    /// The runner's next batch of `key` (at most `max` jobs, in queue order), or nil: the queue is empty and the
    /// runner's turn is over.
    public func next(key: String, max: Int) -> [Job]? {
        queues.withLock { queues in
            guard let jobs = queues[key], !jobs.isEmpty else {
                queues[key] = nil
                return nil
            }
            let batch = Array(jobs.prefix(max))
            queues[key] = Array(jobs.dropFirst(batch.count))
            return batch
        }
    }
}
