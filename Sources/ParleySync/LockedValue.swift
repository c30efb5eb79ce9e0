import CParleyShims
import Glibc

/// A value guarded by a lock: the one lock type of the project.
///
/// Backed by an adaptive pthread mutex (spin briefly, then sleep) rather than `Synchronization.Mutex`, whose
/// priority-inheritance futex made contended lookups (app cache, rate limiter, loop inboxes) cost ~20% of CPU
/// under 64 connections on 16 worker threads (measured with perf, bench/RESULTS.md). Keep bodies short and
/// synchronous: no I/O, no callbacks, no logging under the lock.
public final class LockedValue<Value>: @unchecked Sendable {
    // Invariant: `value` is read and written only while `mutex` is held. The mutex is what makes accesses exclusive,
    // so the runtime's exclusivity check on `value` (about 80 instructions per `withLock`) is switched off.
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>
    @usableFromInline @exclusivity(unchecked) var value: Value

    public init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        precondition(parley_mutex_init(mutex) == 0, "pthread_mutex_init failed")
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with exclusive access to the value.
    @inlinable
    public func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
