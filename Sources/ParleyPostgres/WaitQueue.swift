internal import CParleyShims
import Glibc
import ParleySync

/// A blocking FIFO with deadlines: the one place where threads sleep on a condition variable.
///
/// Used for the pool's job queue and for one-shot replies to blocked callers. State is owned by the
/// internal pthread mutex (the project's lock type is `LockedValue`; a condition wait needs a pthread mutex).
final class WaitQueue<Element: Sendable>: @unchecked Sendable {
    // @unchecked: `items` and `closed` are only touched with `mutex` held.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>
    private var items: [Element] = []
    private var head = 0
    private var closed = false
    private let capacity: Int

    /// A queue holding at most `capacity` elements (`push` fails beyond it).
    init(capacity: Int = .max) {
        self.capacity = capacity
        mutex = .allocate(capacity: 1)
        condition = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        // Deadlines are measured on the monotonic clock, immune to wall-clock jumps.
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
        condition.deallocate()
    }

    /// Number of queued elements.
    var count: Int {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return items.count - head
    }

    /// Appends `element`; false when the queue is closed or full.
    @discardableResult
    func push(_ element: Element) -> Bool {
        pthread_mutex_lock(mutex)
        guard !closed, items.count - head < capacity else {
            pthread_mutex_unlock(mutex)
            return false
        }
        items.append(element)
        pthread_mutex_unlock(mutex)
        pthread_cond_signal(condition)
        return true
    }

    /// Takes the oldest element, waiting until `deadlineNanos` (monotonic; nil waits forever).
    ///
    /// Returns nil on timeout, or when the queue is closed and empty.
    func pop(deadlineNanos: UInt64? = nil) -> Element? {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while head == items.count {
            if closed { return nil }
            if let deadlineNanos {
                guard monotonicNanos() < deadlineNanos else { return nil }
                var ts = timespec(tv_sec: Int(deadlineNanos / 1_000_000_000), tv_nsec: Int(deadlineNanos % 1_000_000_000))
                _ = pthread_cond_timedwait(condition, mutex, &ts)
            } else {
                _ = pthread_cond_wait(condition, mutex)
            }
        }
        let element = items[head]
        head += 1
        // Compact occasionally so the array does not grow without bound.
        if head == items.count {
            items.removeAll(keepingCapacity: true)
            head = 0
        } else if head > 1024 && head * 2 > items.count {
            items.removeFirst(head)
            head = 0
        }
        return element
    }

    /// Refuses further pushes and wakes every waiter; queued elements can still be popped.
    func close() {
        pthread_mutex_lock(mutex)
        closed = true
        pthread_mutex_unlock(mutex)
        pthread_cond_broadcast(condition)
    }
}

/// Starts and joins plain pthreads (database work must never run on Swift's cooperative pool).
enum PostgresThread {
    /// Starts a joinable thread running `body`.
    static func start(name: String, _ body: @escaping @Sendable () -> Void) -> pthread_t {
        BackgroundThread.start(name: name, body)
    }

    static func join(_ thread: pthread_t) {
        _ = pthread_join(thread, nil)
    }

    /// Sleeps the calling (non-async) thread.
    static func sleep(milliseconds: Int) {
        var ts = timespec(tv_sec: milliseconds / 1000, tv_nsec: (milliseconds % 1000) * 1_000_000)
        var remaining = timespec()
        while nanosleep(&ts, &remaining) != 0 && errno == EINTR { ts = remaining }
    }
}
