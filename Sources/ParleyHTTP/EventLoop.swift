import CParleyShims
import Glibc
import ParleySync
import Synchronization

/// One epoll thread: it owns the sockets registered on it and runs jobs other threads hand it.
///
/// Owner: everything but `inbox`, `sleeping` and `hasJobs` is touched only on the loop thread (`assertInLoop()`
/// checks it in debug builds). Other threads talk to the loop only through `execute(_:)`, `deliver(_:to:)` and
/// the stream jobs (`enqueue(_:)`). The loop-owned fields read on every request are `@exclusivity(unchecked)`: one
/// thread, no overlapping accesses, so the runtime check is pure cost.
public final class EventLoop: @unchecked Sendable {
    /// Something registered on the loop that wants readiness events.
    protocol Watcher: AnyObject {
        func handle(events: UInt32, loop: EventLoop)
    }

    private struct Registration {
        var generation: UInt32
        var watcher: any Watcher
    }

    /// Work another thread hands the loop. The common ones are plain values, not closures: an answer settled on a
    /// worker thread or a stream chunk costs a queue slot, not a closure context.
    enum Job: Sendable {
        case run(@Sendable (EventLoop) -> Void)
        /// A handler's response for the connection (dropped if it closed meanwhile).
        case answer(ConnectionID, Response)
        /// A chunk of a streaming response, and its end.
        case streamWrite(ConnectionID, [UInt8])
        case streamFinish(ConnectionID)
        /// A streamed request body's handler read down its backlog: read the socket again.
        case bodyResume(ConnectionID)
    }

    let index: Int
    private let epfd: Int32
    private let wakeFD: Int32
    private let inbox = LockedValue<[Job]>([])
    /// The loop is in (or about to enter) `epoll_wait`: the first job queued after this is set writes the eventfd
    /// and clears it, so the loop is woken at most once per pass, and never while it is awake anyway.
    private let sleeping = Atomic<Bool>(false)
    /// Jobs were queued since the loop last took the inbox: it must not sleep (checked after `sleeping` is set).
    private let hasJobs = Atomic<Bool>(false)
    private let stopping = Atomic<Bool>(false)
    /// Registrations by fd number (fds are small and dense): an array index, not a hash, per event.
    @exclusivity(unchecked) private var registrations: [Registration?] = []
    /// The jobs being run (swapped with `inbox`'s array, so neither reallocates in the steady state).
    @exclusivity(unchecked) private var running: [Job] = []
    private var nextGeneration: UInt32 = 1
    private var tickHandlers: [(EventLoop) -> Void] = []
    private var thread: pthread_t?
    private let threadID = Atomic<UInt64>(0)
    /// Coarse clock (monotonic milliseconds) refreshed once per wake-up; deadlines need no finer grain.
    @exclusivity(unchecked) private(set) var nowMillis: Int64 = EventLoop.monotonicMillis()
    private var lastTick: Int64 = 0
    /// Counter behind generated request ids (loop-owned, so no synchronisation).
    @exclusivity(unchecked) var requestCounter: UInt64 = 0
    /// `<process prefix>-<loop index>-`, the fixed start of the request ids this loop generates.
    var requestIDStem: [UInt8] = []
    /// Scratch space for socket reads, shared by the loop's connections (only one reads at a time).
    private let readBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    /// The pre-rendered `Date:` header line, refreshed once per second.
    @exclusivity(unchecked) private(set) var dateHeader: [UInt8] = EventLoop.renderDateHeader()

    init(index: Int) throws(SystemError) {
        self.index = index
        epfd = parley_epoll_create()
        if epfd < 0 { throw SystemError(function: "epoll_create1") }
        wakeFD = parley_eventfd()
        if wakeFD < 0 { throw SystemError(function: "eventfd") }
        // Edge-triggered: every write to the eventfd reports it again, so the loop never reads it (one system call
        // per wake-up saved); `wake()` resets the counter in the unlikely case it fills up.
        if parley_epoll_ctl(epfd, PARLEY_EPOLL_CTL_ADD, wakeFD, PARLEY_EPOLLIN | PARLEY_EPOLLET, UInt64(UInt32.max)) != 0 {
            throw SystemError(function: "epoll_ctl(eventfd)")
        }
    }

    deinit {
        readBuffer.deallocate()
        close(epfd)
        close(wakeFD)
    }

    /// Runs `job` on the loop thread soon. Safe from any thread.
    public func execute(_ job: @escaping @Sendable (EventLoop) -> Void) {
        enqueue(.run(job))
    }

    /// Hands a response settled on another thread to the connection `id` on this loop.
    func deliver(_ response: Response, to id: ConnectionID) {
        enqueue(.answer(id, response))
    }

    /// Queues `job` and wakes the loop if it sleeps. A burst of jobs from any number of threads costs one eventfd
    /// write per loop pass, and none while the loop is busy (it looks at the inbox before it sleeps).
    func enqueue(_ job: Job) {
        inbox.withLock { $0.append(job) }
        // Paired with the loop's store of `sleeping` and load of `hasJobs` (all sequentially consistent): either
        // the loop sees `hasJobs` and does not block, or this sees `sleeping` and wakes it.
        hasJobs.store(true, ordering: .sequentiallyConsistent)
        if sleeping.load(ordering: .sequentiallyConsistent), sleeping.exchange(false, ordering: .sequentiallyConsistent) {
            wake()
        }
    }

    private func wake() {
        var one: UInt64 = 1
        if write(wakeFD, &one, 8) < 0 && errno == EAGAIN {
            // The counter is full (2^64 - 2 writes, never read): empty it and write again.
            var value: UInt64 = 0
            _ = read(wakeFD, &value, 8)
            _ = write(wakeFD, &one, 8)
        }
    }

    /// True on the loop's own thread.
    public var inLoop: Bool { threadID.load(ordering: .relaxed) == UInt64(pthread_self()) }

    func assertInLoop() { assert(inLoop, "not on event loop \(index)") }

    /// Registers `fd` for `events` and returns the registration's generation.
    @discardableResult
    func register(fd: Int32, events: UInt32, watcher: any Watcher) -> UInt32 {
        assertInLoop()
        let generation = nextGeneration
        nextGeneration &+= 1
        if nextGeneration == 0 { nextGeneration = 1 }
        let slot = Int(fd)
        if slot >= registrations.count {
            registrations.append(contentsOf: repeatElement(nil, count: Swift.max(slot + 1, registrations.count * 2, 64) - registrations.count))
        }
        registrations[slot] = Registration(generation: generation, watcher: watcher)
        if parley_epoll_ctl(epfd, PARLEY_EPOLL_CTL_ADD, fd, events, Self.pack(fd: fd, generation: generation)) != 0 {
            registrations[slot] = nil
            return 0
        }
        return generation
    }

    /// Changes the interest set of a registered fd.
    func modify(fd: Int32, generation: UInt32, events: UInt32) {
        assertInLoop()
        _ = parley_epoll_ctl(epfd, PARLEY_EPOLL_CTL_MOD, fd, events, Self.pack(fd: fd, generation: generation))
    }

    /// Removes `fd` from epoll before the caller closes it (never close first: the fd number may be reused).
    func deregister(fd: Int32) {
        assertInLoop()
        _ = parley_epoll_ctl(epfd, PARLEY_EPOLL_CTL_DEL, fd, 0, 0)
        if Int(fd) < registrations.count { registrations[Int(fd)] = nil }
    }

    /// The watcher registered for `fd` if its registration still has `generation`.
    func watcher(fd: Int32, generation: UInt32) -> (any Watcher)? {
        assertInLoop()
        let slot = Int(fd)
        guard slot >= 0, slot < registrations.count, let registration = registrations[slot],
            registration.generation == generation
        else { return nil }
        return registration.watcher
    }

    /// Every registered watcher (a snapshot: the body may deregister).
    var watchers: [any Watcher] { registrations.compactMap { $0?.watcher } }

    /// Adds a callback run on the loop about once per second (deadline sweeps).
    func onTick(_ handler: @escaping (EventLoop) -> Void) {
        assertInLoop()
        tickHandlers.append(handler)
    }

    /// Starts the loop thread.
    func start() {
        let box = Unmanaged.passRetained(self)
        var tid = pthread_t()
        let rc = pthread_create(
            &tid, nil,
            { arg in
                let loop = Unmanaged<EventLoop>.fromOpaque(arg!).takeRetainedValue()
                loop.run()
                return nil
            }, box.toOpaque())
        precondition(rc == 0, "pthread_create failed: \(rc)")
        thread = tid
    }

    /// Asks the loop to stop after running the jobs already queued.
    func stop() {
        stopping.store(true, ordering: .releasing)
        execute { _ in }
    }

    /// Waits for the loop thread to end.
    func join() {
        if let thread { pthread_join(thread, nil) }
        thread = nil
    }

    private func run() {
        threadID.store(UInt64(pthread_self()), ordering: .relaxed)
        let capacity = 256
        let eventBits = UnsafeMutablePointer<UInt32>.allocate(capacity: capacity)
        let eventData = UnsafeMutablePointer<UInt64>.allocate(capacity: capacity)
        defer {
            eventBits.deallocate()
            eventData.deallocate()
        }
        while true {
            sleeping.store(true, ordering: .sequentiallyConsistent)
            let timeout: Int32 = hasJobs.load(ordering: .sequentiallyConsistent) ? 0 : 1000
            let n = parley_epoll_wait(epfd, eventBits, eventData, Int32(capacity), timeout)
            sleeping.store(false, ordering: .sequentiallyConsistent)
            nowMillis = Self.monotonicMillis()
            if n < 0 && errno != EINTR { fatalError("epoll_wait failed: \(errno)") }
            for i in 0..<Swift.max(0, Int(n)) {
                let data = eventData[i]
                if data == UInt64(UInt32.max) { continue }  // the eventfd: the inbox is run below anyway
                let slot = Int(data & 0xFFFF_FFFF)
                let generation = UInt32(truncatingIfNeeded: data >> 32)
                // A stale event for an fd that was closed and reused in this batch is dropped.
                guard slot < registrations.count, let registration = registrations[slot], registration.generation == generation
                else { continue }
                registration.watcher.handle(events: eventBits[i], loop: self)
            }
            runInbox()
            if nowMillis - lastTick >= 1000 {
                lastTick = nowMillis
                for handler in tickHandlers { handler(self) }
            }
            if stopping.load(ordering: .acquiring) {
                runInbox()
                break
            }
        }
    }

    private func runInbox() {
        guard hasJobs.load(ordering: .sequentiallyConsistent) else { return }
        // Cleared before the inbox is taken: a job queued after the swap sets it again, so it is not slept on.
        hasJobs.store(false, ordering: .sequentiallyConsistent)
        inbox.withLock { swap(&$0, &running) }
        for job in running {
            switch job {
            case .run(let body): body(self)
            case .answer(let id, let response): connection(id)?.deliver(response)
            case .streamWrite(let id, let bytes): connection(id)?.streamWrite(bytes)
            case .streamFinish(let id): connection(id)?.streamFinish()
            case .bodyResume(let id): connection(id)?.resumeBody()
            }
        }
        running.removeAll(keepingCapacity: true)
    }

    /// Lends the loop's read buffer to `body`.
    func withReadBuffer<T>(_ body: (UnsafeMutableRawBufferPointer) -> T) -> T {
        assertInLoop()
        return body(readBuffer)
    }

    func refreshDateHeader() { dateHeader = Self.renderDateHeader() }

    static func renderDateHeader() -> [UInt8] {
        Array("Date: \(Timestamp.httpDate(seconds: Timestamp.wallMillis() / 1000))\r\n".utf8)
    }

    static func pack(fd: Int32, generation: UInt32) -> UInt64 {
        UInt64(generation) << 32 | UInt64(UInt32(bitPattern: fd))
    }

    public static func monotonicMillis() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }
}

/// A failed system call with its errno.
public struct SystemError: Error, Sendable, CustomStringConvertible {
    public var function: String
    public var errnoCode: Int32

    public init(function: String, errno code: Int32 = errno) {
        self.function = function
        self.errnoCode = code
    }

    public var description: String { "\(function) failed: \(String(cString: strerror(errnoCode))) (errno \(errnoCode))" }
}
