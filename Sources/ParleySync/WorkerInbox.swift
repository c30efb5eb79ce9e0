/// The inbox of a node's background worker: the state any thread posts work into, behind its lock, and the worker
/// thread(s) that take it, with their wake-up and their stop (the message writer, the event sequencer, the live hub,
/// the timers, and every ``WorkerLoop``).
///
/// Why one type: every background worker needs the same handshake, and its details are easy to get wrong in a copy.
/// A post must never be missed by a worker that is about to sleep; a post while the worker is busy
/// must cost the posting thread the lock alone, not a system call (the message writer's inbox is on every send); a
/// stop must reach every worker thread, also one that went to sleep after the stop's signal was consumed; and nothing
/// accepted before the stop may be dropped (`post` refuses once stopped, under the lock the worker's last look takes,
/// so whatever was accepted is still in the state when ``take(waitMillis:_:)`` returns nil).
///
/// The handshake: `post` changes the state and marks it posted; `take` takes at once when something was posted since
/// the last take, and otherwise counts its thread as sleeping and waits on the ``Wakeup``. A post writes the wake-up's
/// pipe only when a thread sleeps and no wake-up is on its way to the sleepers yet. The pipe keeps a signal sent
/// between a thread's count and its wait, so it returns at once.
///
/// Owner: `guarded` (the worker's state and the handshake) behind its lock, from any thread; what a worker thread
/// takes is its own.
public final class WorkerInbox<State: Sendable>: Sendable {
    @usableFromInline
    struct Guarded: Sendable {
        @usableFromInline var state: State
        @usableFromInline var stopped = false
        /// Something was posted since the last take: the next take does not wait.
        @usableFromInline var posted = false
        /// Worker threads between their count in `take` and the look after their wait.
        @usableFromInline var sleeping = 0
        /// A post has written the pipe since a sleeper last woke: later posts need not (the thread it wakes takes what
        /// they posted too).
        @usableFromInline var signalled = false

        @usableFromInline
        init(state: State) { self.state = state }
    }

    @usableFromInline let guarded: LockedValue<Guarded>
    @usableFromInline let wakeup = Wakeup()
    private let threads = LockedValue<[BackgroundThread]>([])

    public init(_ state: State) {
        guarded = LockedValue(Guarded(state: state))
    }

    // MARK: - Any thread

    /// Hands work to the worker: runs `body` on the state under the lock and wakes a sleeping worker thread (or makes
    /// the next take return at once). False once stopped, without running `body`: the caller answers the work itself.
    @inlinable
    @discardableResult
    public func post(_ body: (inout State) -> Void) -> Bool {
        let (accepted, wake) = guarded.withLock { guarded -> (Bool, Bool) in
            guard !guarded.stopped else { return (false, false) }
            body(&guarded.state)
            guarded.posted = true
            guard guarded.sleeping > 0 && !guarded.signalled else { return (true, false) }
            guarded.signalled = true
            return (true, true)
        }
        if wake { wakeup.signal() }
        return accepted
    }

    /// There may be new work that the state does not show (the clock moved, a round wants to run again at once).
    public func poke() {
        post { _ in }
    }

    /// Runs `body` on the state under the lock without waking the worker (bookkeeping its next round reads anyway, or
    /// that must not run once stopped); nil once stopped, without running `body`.
    @inlinable
    public func ifRunning<Result>(_ body: (inout State) -> Result) -> Result? {
        guarded.withLock { guarded in guarded.stopped ? nil : body(&guarded.state) }
    }

    /// Runs `body` on the state under the lock, stopped or not, without waking the worker (counts and releases that
    /// must also happen during and after a stop, and the worker's own bookkeeping).
    @inlinable
    public func withState<Result>(_ body: (inout State) -> Result) -> Result {
        guarded.withLock { body(&$0.state) }
    }

    // MARK: - Lifecycle

    /// Starts `count` worker threads named `name`, each running `body` with its index (its loop around `take`).
    public func start(name: String, threads count: Int = 1, _ body: @escaping @Sendable (_ index: Int) -> Void) {
        let started = (0..<count).map { index in BackgroundThread(name: name) { body(index) } }
        threads.withLock { $0 += started }
    }

    /// Makes every `take` return nil from now on (each worker thread passes the wake-up on to the others still
    /// asleep), refuses later posts and waits for the threads to end.
    public func stop() {
        guarded.withLock { $0.stopped = true }
        wakeup.signal()
        let started = threads.withLock { threads -> [BackgroundThread] in
            defer { threads = [] }
            return threads
        }
        for thread in started { thread.join() }
    }

    // MARK: - The worker threads

    /// The next take: at once when something was posted since the last take (or `waitMillis` is 0 or less), otherwise
    /// after a post's wake-up or `waitMillis`, runs `body` under the lock to take what was posted (it may be nothing:
    /// the worker's timeouts run then; work `body` leaves waits for the next post or timeout). Nil once stopped, without running `body`: what was posted before the
    /// stop is still in the state, for the worker to finish with ``withState(_:)``.
    @inlinable
    public func take<Taken>(waitMillis: Int, _ body: (inout State) -> Taken) -> Taken? {
        let look = guarded.withLock { guarded -> (taken: Taken?, sleeps: Bool, wakeOthers: Bool) in
            if guarded.stopped { return (nil, false, guarded.sleeping > 0) }
            guard !guarded.posted && waitMillis > 0 else {
                guarded.posted = false
                return (body(&guarded.state), false, false)
            }
            guarded.sleeping += 1
            return (nil, true, false)
        }
        if look.sleeps {
            wakeup.wait(timeoutMillis: waitMillis)
        } else {
            if look.wakeOthers { wakeup.signal() }
            return look.taken
        }
        let (taken, wakeOthers) = guarded.withLock { guarded -> (Taken?, Bool) in
            guarded.sleeping -= 1
            guarded.signalled = false
            if guarded.stopped { return (nil, guarded.sleeping > 0) }
            guarded.posted = false
            return (body(&guarded.state), false)
        }
        // This thread may have consumed the stop's only signal: the others still asleep see the stop too.
        if wakeOthers { wakeup.signal() }
        return taken
    }
}

extension WorkerInbox where State == Void {
    /// An inbox that carries no work, only the wake-up and the stop (a ticking thread).
    public convenience init() { self.init(()) }
}
