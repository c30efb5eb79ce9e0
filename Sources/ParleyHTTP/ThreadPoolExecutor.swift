import Dispatch
import Glibc
import ParleySync
import Synchronization

/// A fixed set of worker threads running request handlers (used when handlers need no database thread).
///
/// Owner: the job queue is guarded by its `LockedValue`; `available` counts queued jobs so idle workers sleep.
public final class ThreadPoolExecutor: RequestExecutor, @unchecked Sendable {
    private struct Job {
        let work: @Sendable () -> Void
        let rejected: @Sendable () -> Void
        let enqueuedAt: Int64
    }

    private let queue = LockedValue<(jobs: [Job], head: Int, stopping: Bool)>(([], 0, false))
    private let available = DispatchSemaphore(value: 0)
    private let maxQueued: Int
    private let maxWaitMillis: Int64
    private var threads: [pthread_t] = []  // written only in init/shutdown by the owner

    /// Starts `threads` workers. Jobs that wait longer than `maxWait` (or arrive while `maxQueued` wait) are rejected.
    public init(threads count: Int, maxQueued: Int = 10_000, maxWait: Duration = .seconds(5)) {
        self.maxQueued = maxQueued
        self.maxWaitMillis = maxWait.components.seconds * 1000 + maxWait.components.attoseconds / 1_000_000_000_000_000
        for _ in 0..<max(1, count) {
            let box = Unmanaged.passRetained(self)
            var tid = pthread_t()
            let rc = pthread_create(
                &tid, nil,
                { arg in
                    let pool = Unmanaged<ThreadPoolExecutor>.fromOpaque(arg!).takeRetainedValue()
                    pool.workerLoop()
                    return nil
                }, box.toOpaque())
            precondition(rc == 0, "pthread_create failed: \(rc)")
            threads.append(tid)
        }
    }

    public func execute(_ work: @escaping @Sendable () -> Void, rejected: @escaping @Sendable () -> Void) {
        let accepted = queue.withLock { q -> Bool in
            if q.stopping || q.jobs.count - q.head >= maxQueued { return false }
            q.jobs.append(Job(work: work, rejected: rejected, enqueuedAt: EventLoop.monotonicMillis()))
            return true
        }
        if accepted { available.signal() } else { rejected() }
    }

    /// Stops the workers after the queued jobs ran, and waits for them.
    public func shutdown() {
        let count = queue.withLock { q -> Int in
            q.stopping = true
            return threads.count
        }
        for _ in 0..<count { available.signal() }
        for t in threads { pthread_join(t, nil) }
        threads = []
    }

    private func workerLoop() {
        while true {
            available.wait()
            let next = queue.withLock { q -> Job?? in
                if q.head < q.jobs.count {
                    let job = q.jobs[q.head]
                    q.head += 1
                    if q.head > 1024 && q.head * 2 > q.jobs.count {
                        q.jobs.removeFirst(q.head)
                        q.head = 0
                    }
                    return .some(job)
                }
                return q.stopping ? .none : .some(nil)
            }
            switch next {
            case .none: return
            case .some(nil): continue
            case .some(let job?):
                if EventLoop.monotonicMillis() - job.enqueuedAt > maxWaitMillis { job.rejected() } else { job.work() }
            }
        }
    }
}
