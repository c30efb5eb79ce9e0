import Dispatch
import Glibc
import ParleySync

/// Threads for blocking outbound calls (before-event hooks, pings): a call waits on the network, not on a PostgreSQL
/// worker, so a slow hook holds one of these threads and nothing else.
///
/// Threads are started on demand up to `maxThreads` and end after `idleSeconds` without work; beyond the limit calls
/// queue. A thread costs a small stack while it waits, so hundreds of calls in flight (256 requests each waiting on a
/// 50 ms hook) cost hundreds of sleeping threads, not a pool of database connections.
///
/// Owner: `state` (the queue and the thread counts) behind its lock; `available` counts queued jobs.
package final class OutboundCalls: Sendable {
    private struct State {
        var jobs: [@Sendable () -> Void] = []
        var head = 0
        var threads = 0
        var idle = 0
    }

    private let state = LockedValue(State())
    private let available = DispatchSemaphore(value: 0)
    private let maxThreads: Int
    private let idleSeconds: Int

    package init(maxThreads: Int = 512, idleSeconds: Int = 30) {
        self.maxThreads = maxThreads
        self.idleSeconds = idleSeconds
    }

    /// Runs `job` on a call thread (now, or once one is free).
    package func run(_ job: @escaping @Sendable () -> Void) {
        let startThread = state.withLock { s -> Bool in
            s.jobs.append(job)
            guard s.idle == 0, s.threads < maxThreads else { return false }
            s.threads += 1
            return true
        }
        available.signal()
        if startThread {
            let tid = BackgroundThread.start(name: "parley-hook") { [self] in work() }
            pthread_detach(tid)
        }
    }

    private func work() {
        while true {
            state.withLock { $0.idle += 1 }
            let woke = available.wait(timeout: .now() + .seconds(idleSeconds)) == .success
            let job = state.withLock { s -> (@Sendable () -> Void)? in
                s.idle -= 1
                guard s.head < s.jobs.count else {
                    if !woke { s.threads -= 1 }
                    return nil
                }
                let job = s.jobs[s.head]
                s.head += 1
                if s.head > 1024, s.head * 2 > s.jobs.count {
                    s.jobs.removeFirst(s.head)
                    s.head = 0
                }
                return job
            }
            if let job {
                job()
            } else if !woke {
                return
            }
        }
    }
}
