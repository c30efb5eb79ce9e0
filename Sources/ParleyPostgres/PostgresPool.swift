import Glibc
import ParleySync
import Synchronization

/// Transaction isolation level for `PostgresPool.transaction`.
public enum PostgresIsolation: Sendable {
    case readCommitted, repeatableRead, serializable

    var beginSQL: String {
        switch self {
        case .readCommitted: "BEGIN ISOLATION LEVEL READ COMMITTED"
        case .repeatableRead: "BEGIN ISOLATION LEVEL REPEATABLE READ"
        case .serializable: "BEGIN ISOLATION LEVEL SERIALIZABLE"
        }
    }
}

/// A fixed set of worker threads, each owning one `PostgresConnection`, that run database work.
///
/// Work (a whole request handler via `submit`, or a closure via `withConnection`/`transaction`) runs on a
/// worker thread with that thread's connection, so blocking libpq calls never touch an event loop or Swift's
/// cooperative pool. Connections are opened lazily, health-checked after 30 s of idleness, and re-opened
/// when broken, so a PostgreSQL restart costs failed calls during the outage and nothing after it.
/// Shared state: the job queue (`WaitQueue`) and atomics; connections are owned by their worker threads.
/// Call `shutdown()` when done: the worker threads keep the pool alive until then.
public final class PostgresPool: Sendable {
    /// One unit of work waiting for a worker.
    struct Job: Sendable {
        let enqueuedNanos: UInt64
        let work: @Sendable () -> Void
        let rejected: @Sendable () -> Void
    }

    public let configuration: PostgresConfiguration
    /// Number of worker threads (and connections).
    public let size: Int
    public let acquireTimeout: Duration
    let logger: PostgresLogger
    private let acquireTimeoutNanos: UInt64
    private let queue: WaitQueue<Job>
    private let threads: LockedValue<[pthread_t]>
    private let inUseCount = Atomic<Int>(0)
    /// Successful connects by any worker (ends the other workers' fail-fast windows after an outage).
    let connectCounter = ConnectCounter()
    private let closed = Atomic<Bool>(false)

    /// Jobs beyond this many waiting are rejected at once (load shedding instead of unbounded latency).
    public static let maxQueuedJobs = 10_000
    /// Idle time after which a connection is checked with `SELECT 1` before use.
    static let idleCheckNanos: UInt64 = 30_000_000_000
    /// Idle time after which a borrowed connection is first checked (one poll) for a close by the server.
    static let closedCheckNanos: UInt64 = 2_000_000

    /// Starts `size` worker threads; connections open on first use.
    public init(
        configuration: PostgresConfiguration, size: Int, acquireTimeout: Duration = .seconds(5),
        logger: PostgresLogger = .disabled
    ) {
        precondition(size > 0, "pool size must be positive")
        self.configuration = configuration
        self.size = size
        self.acquireTimeout = acquireTimeout
        self.logger = logger
        let (seconds, attoseconds) = acquireTimeout.components
        self.acquireTimeoutNanos = UInt64(max(0, seconds)) * 1_000_000_000 + UInt64(max(0, attoseconds) / 1_000_000_000)
        self.queue = WaitQueue(capacity: Self.maxQueuedJobs)
        self.threads = LockedValue([])
        var started: [pthread_t] = []
        for index in 0..<size {
            started.append(PostgresThread.start(name: "pg-worker-\(index)") { [self] in self.workerLoop() })
        }
        threads.withLock { $0 = started }
    }

    /// Workers currently running a job.
    public var inUse: Int { inUseCount.load(ordering: .relaxed) }
    /// Jobs queued for a worker.
    public var waiting: Int { queue.count }

    /// Stops accepting work, rejects what is still queued, joins the workers and closes their connections.
    ///
    /// Must not be called from a worker thread of this pool.
    public func shutdown() {
        precondition(WorkerContext.current(for: self) == nil, "shutdown() called from a pool worker")
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        queue.close()
        let toJoin = threads.withLock { threads in
            defer { threads = [] }
            return threads
        }
        for thread in toJoin { PostgresThread.join(thread) }
    }

    /// Queues `work` to run on a worker thread (with that thread's connection available to `withConnection`).
    ///
    /// `rejected` runs instead when the job waited longer than `acquireTimeout`, when more than
    /// `maxQueuedJobs` are waiting (then at once, on the caller's thread) or when the pool is shut down.
    public func submit(_ work: @escaping @Sendable () -> Void, rejected: @escaping @Sendable () -> Void) {
        let job = Job(enqueuedNanos: monotonicNanos(), work: work, rejected: rejected)
        if closed.load(ordering: .acquiring) || !queue.push(job) { rejected() }
    }

    /// Runs `body` with a connection, synchronously.
    ///
    /// On a worker of this pool (inside `submit` work, or nested) it uses that thread's connection directly.
    /// From any other thread it queues the work and blocks until it is done; if no worker takes it within
    /// `acquireTimeout` it throws `PostgresError` of kind `.poolTimeout`. Never call it from async code
    /// (it blocks the thread): use the async overload.
    @discardableResult
    public func withConnection<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        try runOnWorker { context in try context.run(body) }
    }

    /// Runs `body` with a connection on a worker thread without blocking the caller's thread.
    @discardableResult
    public func withConnection<T: Sendable>(
        _ body: @escaping @Sendable (PostgresConnection) throws -> T
    ) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            submit(
                { continuation.resume(with: Result { try self.withConnection(body) }) },
                rejected: { continuation.resume(throwing: self.rejectionError()) })
        }
    }

    /// Runs `body` in a transaction: BEGIN, COMMIT, or ROLLBACK when it throws.
    ///
    /// Serialization failures and deadlocks (40001, 40P01) re-run the whole body, up to 5 times; a connection
    /// that broke before COMMIT was sent is replaced and the body re-run once (not after a timeout: the server is
    /// stalled, and a second try would wait as long again). So `body` must be safe to
    /// repeat (no side effects outside the database). Nested inside another transaction on the same worker
    /// it becomes a savepoint (and is not retried on its own).
    @discardableResult
    public func transaction<T>(
        isolation: PostgresIsolation = .readCommitted, _ body: (PostgresConnection) throws -> T
    ) throws -> T {
        try runOnWorker { context in try context.transaction(isolation: isolation, body) }
    }

    /// The async form of `transaction`: the body runs on a worker thread.
    @discardableResult
    public func transaction<T: Sendable>(
        isolation: PostgresIsolation = .readCommitted, _ body: @escaping @Sendable (PostgresConnection) throws -> T
    ) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            submit(
                { continuation.resume(with: Result { try self.transaction(isolation: isolation, body) }) },
                rejected: { continuation.resume(throwing: self.rejectionError()) })
        }
    }

    private func rejectionError() -> PostgresError {
        closed.load(ordering: .acquiring)
            ? PostgresError(kind: .poolClosed, message: "the database pool is shut down")
            : PostgresError(kind: .poolTimeout, message: "no database connection became free in time")
    }

    /// Runs `operation` with this thread's worker context, hopping to a worker (and blocking) when needed.
    private func runOnWorker<T>(_ operation: (WorkerContext) throws -> T) throws -> T {
        if let context = WorkerContext.current(for: self) { return try operation(context) }
        return try withoutActuallyEscaping(operation) { escapable in
            let call = BlockingCall(escapable)
            let ticket = Ticket()
            let replies = WaitQueue<BlockingReply>()
            submit(
                {
                    guard ticket.claim(.running) else { return }
                    replies.push(.started)
                    // Only this worker touches `call` now: the caller is blocked until `.finished`.
                    let outcome = call.runAndRelease()
                    replies.push(.finished(outcome))
                },
                rejected: {
                    if ticket.claim(.cancelled) { replies.push(.rejected) }
                })
            let deadline = monotonicNanos() + acquireTimeoutNanos
            var started = false
            while true {
                switch replies.pop(deadlineNanos: started ? nil : deadline) {
                case nil:
                    if ticket.claim(.cancelled) {
                        call.release()
                        throw rejectionError()
                    }
                    started = true  // a worker claimed it just now; wait for it to finish
                case .started:
                    started = true
                case .rejected:
                    call.release()
                    throw rejectionError()
                case .finished(let outcome):
                    return try outcome.get(as: T.self)
                }
            }
        }
    }

    private func workerLoop() {
        let context = WorkerContext(pool: self)
        context.install()
        while let job = queue.pop() {
            if closed.load(ordering: .acquiring) || monotonicNanos() &- job.enqueuedNanos > acquireTimeoutNanos {
                job.rejected()
                continue
            }
            inUseCount.add(1, ordering: .relaxed)
            job.work()
            inUseCount.subtract(1, ordering: .relaxed)
        }
        context.uninstall()
    }
}

/// Decides once whether a blocked caller's job runs or is cancelled (whoever claims first wins).
private final class Ticket: Sendable {
    enum State: Int {
        case pending = 0
        case running = 1
        case cancelled = 2
    }
    private let state = Atomic<Int>(State.pending.rawValue)

    func claim(_ target: State) -> Bool {
        state.compareExchange(expected: State.pending.rawValue, desired: target.rawValue, ordering: .acquiringAndReleasing)
            .exchanged
    }
}

/// A synchronous caller's closure carried to a worker thread.
///
/// @unchecked Sendable: the caller is blocked while the worker uses it, and exactly one side releases the
/// closure (the worker after running it, or the caller after cancelling), so it is never touched by two
/// threads at once, and no reference outlives `withoutActuallyEscaping`.
private final class BlockingCall<T>: @unchecked Sendable {
    private var operation: ((WorkerContext) throws -> T)?
    init(_ operation: @escaping (WorkerContext) throws -> T) { self.operation = operation }

    func runAndRelease() -> BlockingOutcome {
        let operation = self.operation!
        self.operation = nil
        guard let context = WorkerContext.currentAny() else {
            return BlockingOutcome(Result<T, any Error>.failure(PostgresError(kind: .protocol, message: "not on a pool worker")))
        }
        return BlockingOutcome(Result { try operation(context) })
    }

    func release() { operation = nil }
}

/// The result of a blocking call, handed back to the blocked caller.
///
/// @unchecked Sendable: created by the worker and then read only by the caller (handed over through a queue).
private struct BlockingOutcome: @unchecked Sendable {
    let result: Any
    init<T>(_ result: Result<T, any Error>) { self.result = result }
    func get<T>(as type: T.Type) throws -> T { try (result as! Result<T, any Error>).get() }
}

private enum BlockingReply: Sendable {
    case started, rejected
    case finished(BlockingOutcome)
}

/// Counts successful connects across a pool's workers.
final class ConnectCounter: Sendable {
    private let count = Atomic<Int>(0)
    var value: Int { count.load(ordering: .acquiring) }
    func increment() { count.add(1, ordering: .releasing) }
}
