import Dispatch
import Synchronization
import Testing

@testable import ParleySync

/// ``KeyedBatchQueue``: one runner per key at a time, batches in queue order, and no job left without a runner.
@Suite("Keyed batch queue")
struct KeyedBatchQueueTests {
    @Test func oneRunnerPerKeyAndBatchesInOrder() {
        let queue = KeyedBatchQueue<Int>()
        #expect(queue.enqueue(1, key: "a"))
        #expect(!queue.enqueue(2, key: "a"), "a runner is active for a")
        #expect(queue.enqueue(10, key: "b"), "keys are independent")
        #expect(!queue.enqueue(3, key: "a"))
        #expect(queue.next(key: "a", max: 2) == [1, 2])
        #expect(queue.next(key: "a", max: 2) == [3])
        #expect(queue.next(key: "a", max: 2) == nil, "empty: the runner's turn ends")
        #expect(queue.enqueue(4, key: "a"), "the next job starts a new runner")
        #expect(queue.next(key: "b", max: 5) == [10])
    }

    /// Jobs enqueued from many threads while runners come and go: each job is taken exactly once, in queue order
    /// within its key.
    @Test func everyJobIsTakenOnceUnderConcurrency() {
        let queue = KeyedBatchQueue<Int>()
        let taken = Mutex<[String: [Int]]>([:])
        let enqueued = Mutex<[String: [Int]]>([:])
        DispatchQueue.concurrentPerform(iterations: 2_000) { i in
            let key = "k\(i % 3)"
            // Record the enqueue order under the same critical section as the enqueue itself.
            let starts = enqueued.withLock { order in
                order[key, default: []].append(i)
                return queue.enqueue(i, key: key)
            }
            guard starts else { return }
            while let batch = queue.next(key: key, max: 7) { taken.withLock { $0[key, default: []] += batch } }
        }
        let (got, sent) = (taken.withLock { $0 }, enqueued.withLock { $0 })
        #expect(got == sent)
        #expect(got.values.reduce(0) { $0 + $1.count } == 2_000)
    }
}
