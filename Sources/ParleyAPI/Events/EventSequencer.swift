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

    /// What the next round sequences; a round takes all of it.
    private struct Requests {
        var apps: Set<String> = []
        var waiters: [String: [Waiter]] = [:]
        /// Waiting for every app's pending events (the test clock fired timers in any app).
        var waitersForAll: [Waiter] = []
        var all = false

        mutating func take() -> Requests {
            defer { self = Requests() }
            return self
        }
    }

    /// How long a request waits for its events to be sequenced while the database fails; then it is answered
    /// anyway (its change is committed; its events follow when the database answers again). Below the 5 s within
    /// which an API request must be answered while the database does not answer
    /// (docs/reliability.md#a-stalled-database).
    static let maxWaitMillis: Int64 = 3_000
    static let sweepMillis: Int64 = 1_000

    private let inbox = WorkerInbox(Requests())
    /// Told, on the sequencer thread, of each app that got new ids, with what its events were about (types and
    /// ordering keys; the node wires the history cache and the live hub here, which tells the other nodes): the event
    /// log does not know who reads it.
    private let sequenced: @Sendable (_ appID: String, _ changes: [(type: String, orderKey: String)]) -> Void
    private let logger: Logger

    init(logger: Logger, sequenced: @escaping @Sendable (_ appID: String, _ changes: [(type: String, orderKey: String)]) -> Void) {
        self.sequenced = sequenced
        self.logger = logger
    }

    // MARK: - Any thread

    /// Sequences `appID`'s committed events, then calls `done` (on the sequencer thread: keep it short).
    package func publish(_ appID: String, then done: @escaping @Sendable () -> Void) {
        let accepted = inbox.post { requests in
            requests.apps.insert(appID)
            requests.waiters[appID, default: []].append(Waiter(deadline: EventLoop.monotonicMillis() + Self.maxWaitMillis, done: done))
        }
        if !accepted { done() }
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
        inbox.post { _ = $0.apps.insert(appID) }
    }

    /// Sequences every app with pending events, then calls `done` (on the sequencer thread: keep it short).
    package func publishAll(then done: @escaping @Sendable () -> Void) {
        let accepted = inbox.post { requests in
            requests.all = true
            requests.waitersForAll.append(Waiter(deadline: EventLoop.monotonicMillis() + Self.maxWaitMillis, done: done))
        }
        if !accepted { done() }
    }

    /// Sequences every app with pending events soon (timers wrote in several apps).
    func pokeAll() {
        inbox.post { $0.all = true }
    }

    // MARK: - Lifecycle

    package func start(database: PostgresConfiguration, pgLogger: PostgresLogger) {
        inbox.start(name: "parley-sequencer") { [self] _ in
            run(DedicatedConnection(database, applicationName: "parley-sequencer", logger: pgLogger))
        }
    }

    /// Runs a last round for what is asked, answers every waiter and stops the thread.
    package func stop() {
        inbox.stop()
    }

    // MARK: - The sequencer thread

    private func run(_ connection: DedicatedConnection) {
        var db = connection
        var outage = OutageLog(logger: logger, what: "event sequencing")
        var nextSweep: Int64 = 0  // sequence what a previous run left pending, at once
        var retry: [String: [Waiter]] = [:]
        while true {
            let now = EventLoop.monotonicMillis()
            // Waiters to retry: the next round at once (after the pause of the failed one).
            let taken = inbox.take(waitMillis: retry.isEmpty ? Int(max(0, nextSweep - now)) : 0) { $0.take() }
            // Stopped: a last round for what was asked before the stop (later requests are answered at once).
            let stopping = taken == nil
            var round = taken ?? inbox.withState { $0.take() }
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
                    if let numbered = try EventLog.sequence(appID: appID, on: connection) { sequenced(appID, numbered.changes) }
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
                if !stopping { Wakeup.sleep(millis: 100) }
            }
            if stopping {
                for waiter in retry.values.joined() { waiter.done() }
                return
            }
        }
    }
}
