import Dispatch
import ParleyCore
import ParleyHTTP
import ParleyPostgres
import ParleySync

/// Gives committed events their per-app ids (``EventLog/sequence(appID:on:)``) on its own thread and connection,
/// then pokes the live hub (which tells the other nodes), so no writer ever holds an app-wide lock across its commit.
///
/// Writers ask for their app after they commit (`publish`), and a request that may have written events waits for
/// that before its response goes out: once a client has its answer, the change's events are in the log, in order,
/// as before the sequencer existed. Requests never wait on a pool worker: the callback runs on this thread.
/// Everything asked for while a round runs is taken by the next round, so one round serves any number of writers.
/// A sweep every second sequences whatever is still pending (a node that died between commit and publish, a failed
/// round), so a lost request delays events but never loses them.
///
/// Owner: `inbox` (any thread); the connection and the round state live in the sequencer thread's `run` loop.
package final class EventSequencer: Sendable {
    private struct Waiter {
        let deadline: Int64
        let done: @Sendable () -> Void
    }

    private struct Inbox {
        var apps: Set<String> = []
        var waiters: [String: [Waiter]] = [:]
        /// Waiting for every app's pending events (the test clock fired timers in any app).
        var waitersForAll: [Waiter] = []
        var all = false
        var stopped = false
    }

    /// How long a request waits for its events to be sequenced while the database fails; then it is answered
    /// anyway (its change is committed; its events follow when the database answers again). Below the 5 s within
    /// which an API request must be answered while the database does not answer
    /// (docs/reliability.md#a-stalled-database).
    static let maxWaitMillis: Int64 = 3_000
    static let sweepMillis: Int64 = 1_000

    private let inbox = LockedValue(Inbox())
    private let wakeup = Wakeup()
    private let thread = LockedValue<BackgroundThread?>(nil)
    /// Told, on the sequencer thread, of each app that got new ids (the node wires the live hub here, which tells
    /// the other nodes): the event log does not know who reads it.
    private let sequenced: @Sendable (_ appID: String) -> Void
    private let logger: Logger

    init(logger: Logger, sequenced: @escaping @Sendable (_ appID: String) -> Void) {
        self.sequenced = sequenced
        self.logger = logger
    }

    // MARK: - Any thread

    /// Sequences `appID`'s committed events, then calls `done` (on the sequencer thread: keep it short).
    func publish(_ appID: String, then done: @escaping @Sendable () -> Void) {
        let accepted = inbox.withLock { inbox -> Bool in
            guard !inbox.stopped else { return false }
            inbox.apps.insert(appID)
            inbox.waiters[appID, default: []].append(Waiter(deadline: EventLoop.monotonicMillis() + Self.maxWaitMillis, done: done))
            return true
        }
        if accepted { wakeup.signal() } else { done() }
    }

    /// Sequences `appID`'s committed events and blocks until done (tests and tools outside a request; never on a
    /// pool worker or an event loop).
    func publishAndWait(_ appID: String) {
        let done = DispatchSemaphore(value: 0)
        publish(appID) { done.signal() }
        done.wait()
    }

    /// Sequences `appID`'s committed events soon; nobody waits.
    package func poke(_ appID: String) {
        inbox.withLock { _ = $0.apps.insert(appID) }
        wakeup.signal()
    }

    /// Sequences every app with pending events, then calls `done` (on the sequencer thread: keep it short).
    package func publishAll(then done: @escaping @Sendable () -> Void) {
        let accepted = inbox.withLock { inbox -> Bool in
            guard !inbox.stopped else { return false }
            inbox.all = true
            inbox.waitersForAll.append(Waiter(deadline: EventLoop.monotonicMillis() + Self.maxWaitMillis, done: done))
            return true
        }
        if accepted { wakeup.signal() } else { done() }
    }

    /// Sequences every app with pending events soon (timers wrote in several apps).
    func pokeAll() {
        inbox.withLock { $0.all = true }
        wakeup.signal()
    }

    // MARK: - Lifecycle

    package func start(database: PostgresConfiguration, pgLogger: PostgresLogger) {
        thread.withLock {
            $0 = BackgroundThread(name: "parley-sequencer") { [self] in
                run(DedicatedConnection(database, applicationName: "parley-sequencer", logger: pgLogger))
            }
        }
    }

    /// Runs a last round for what is asked, answers every waiter and stops the thread.
    package func stop() {
        inbox.withLock { $0.stopped = true }
        wakeup.signal()
        thread.withLock { $0.take() }?.join()
    }

    // MARK: - The sequencer thread

    private func run(_ connection: DedicatedConnection) {
        var db = connection
        var outage = OutageLog(logger: logger, what: "event sequencing")
        var nextSweep: Int64 = 0  // sequence what a previous run left pending, at once
        var retry: [String: [Waiter]] = [:]
        while true {
            let now = EventLoop.monotonicMillis()
            if retry.isEmpty { wakeup.wait(timeoutMillis: Int(max(0, nextSweep - now))) }
            var round = inbox.withLock { inbox -> Inbox in
                defer {
                    inbox.apps = []
                    inbox.waiters = [:]
                    inbox.waitersForAll = []
                    inbox.all = false
                }
                return inbox
            }
            for (appID, waiters) in retry {
                round.apps.insert(appID)
                round.waiters[appID, default: []] += waiters
            }
            retry = [:]
            let sweep = round.all || EventLoop.monotonicMillis() >= nextSweep
            if sweep { nextSweep = EventLoop.monotonicMillis() + Self.sweepMillis }
            do {
                let connection = try db.get()
                if sweep { round.apps.formUnion(try EventLog.appsWithPending(on: connection)) }
                for appID in round.apps.sorted() {
                    if try EventLog.sequence(appID: appID, on: connection) != nil { sequenced(appID) }
                    for waiter in round.waiters.removeValue(forKey: appID) ?? [] { waiter.done() }
                }
                for waiter in round.waitersForAll { waiter.done() }
                round.waitersForAll = []
                outage.succeeded()
            } catch {
                outage.failed(error)
                db.dropIfBroken()
                let now = EventLoop.monotonicMillis()
                // Waiters for all apps are answered now: their timers' changes are committed, and the sweep finds
                // the events on a later round.
                for waiter in round.waitersForAll { waiter.done() }
                for (appID, waiters) in round.waiters {
                    // Past the deadline a request is answered without its events (they follow on a later round).
                    let (late, waiting) = (waiters.filter { $0.deadline <= now }, waiters.filter { $0.deadline > now })
                    for waiter in late { waiter.done() }
                    if !waiting.isEmpty { retry[appID] = waiting }
                }
                if !round.stopped { Wakeup.sleep(millis: 100) }
            }
            if round.stopped {
                for waiter in retry.values.joined() { waiter.done() }
                let left = inbox.withLock { inbox -> [Waiter] in
                    defer {
                        inbox.waiters = [:]
                        inbox.waitersForAll = []
                    }
                    return Array(inbox.waiters.values.joined()) + inbox.waitersForAll
                }
                for waiter in left { waiter.done() }
                return
            }
        }
    }
}
