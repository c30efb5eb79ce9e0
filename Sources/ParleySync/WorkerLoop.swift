import Dispatch

/// The plumbing of a node's background worker that hands work to sender threads and waits for what they report
/// (the webhook dispatcher, the push bridge): its thread, its wake-up, the reports (`Message`s) posted from any
/// thread, pokes, stopping, and `drain` for tests.
///
/// The worker's thread runs its loop around ``next(waitMillis:gatherMillis:)`` (nil: stop) and calls ``idle()`` once
/// a round found nothing to do and nothing in flight; a `drain` that began before that round then returns.
///
/// Owner: `inbox` (any thread; its ``WorkerInbox`` holds the thread, the wake-up and the stop); the loop's own state
/// stays in the worker's thread.
public final class WorkerLoop<Message: Sendable>: Sendable {
    /// What one call of ``next(waitMillis:gatherMillis:)`` took.
    public struct Round: Sendable {
        /// Reports posted since the previous round, in posting order.
        public var messages: [Message]
        /// Someone poked (or a drain began) since the previous round.
        public var poked: Bool
    }

    private struct State {
        var messages: [Message] = []
        var poked = false
        /// Drains waiting for a round that starts after they did.
        var waiting: [@Sendable () -> Void] = []
        /// Drains that such a round has started for: released by the next `idle()`.
        var covered: [@Sendable () -> Void] = []
        /// When the worker's thread last took a round, or was started (nil before `start`).
        var lastRound: ContinuousClock.Instant?

        /// Takes the reports and the poke for a round that covers every drain waiting now.
        mutating func takeRound() -> Round {
            defer {
                messages = []
                poked = false
                covered += waiting
                waiting = []
            }
            lastRound = ContinuousClock.now
            return Round(messages: messages, poked: poked)
        }
    }

    private let inbox = WorkerInbox(State())

    public init() {}

    // MARK: - Any thread

    /// There may be new work (events stored, the clock moved).
    public func poke() {
        inbox.post { $0.poked = true }
    }

    /// Hands a report to the worker's thread and wakes it.
    public func post(_ message: Message) {
        inbox.post { $0.messages.append(message) }
    }

    /// Blocks until a round that started after this call found the worker idle (tests; never on an event loop or a
    /// pool worker). Returns false when that did not happen within `timeout`; true at once once stopped.
    @discardableResult
    public func drain(timeout: Duration = .seconds(30)) -> Bool {
        let done = DispatchSemaphore(value: 0)
        let accepted = inbox.post { state in
            state.poked = true
            state.waiting.append { done.signal() }
        }
        guard accepted else { return true }
        let seconds = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
        return done.wait(timeout: .now() + seconds) == .success
    }

    /// The worker's thread took a round within `window` and has not stopped: it runs (readiness,
    /// docs/operations.md#health-readiness-and-metrics). A round waits at most its poll interval for work, so a live
    /// worker stays well within a window of seconds.
    public func isRunning(within window: Duration) -> Bool {
        guard let last = inbox.ifRunning({ $0.lastRound }) ?? nil else { return false }
        return ContinuousClock.now - last < window
    }

    // MARK: - Lifecycle

    /// Starts the worker's thread running `body` (its loop).
    public func start(name: String, _ body: @escaping @Sendable () -> Void) {
        inbox.withState { $0.lastRound = ContinuousClock.now }
        inbox.start(name: name) { _ in body() }
    }

    /// Makes ``next(waitMillis:gatherMillis:)`` return nil and waits for the thread to end.
    public func stop() {
        inbox.stop()
    }

    // MARK: - The worker's thread

    /// The next round: first waits up to `waitMillis` for a report or a poke (0: not at all), then, when
    /// `gatherMillis` > 0 and nobody poked, lets reports gather that long (so one round records several); nil once
    /// stopped (every drain is released).
    public func next(waitMillis: Int, gatherMillis: Int = 0) -> Round? {
        var round = inbox.take(waitMillis: waitMillis) { $0.takeRound() }
        if gatherMillis > 0, let first = round, !first.poked {
            Wakeup.sleep(millis: gatherMillis)
            round = inbox.take(waitMillis: 0) { $0.takeRound() }.map { gathered in
                var messages = first.messages
                messages += gathered.messages
                return Round(messages: messages, poked: gathered.poked)
            }
        }
        if let round { return round }
        let released = inbox.withState { state -> [@Sendable () -> Void] in
            defer {
                state.waiting = []
                state.covered = []
            }
            return state.covered + state.waiting
        }
        for release in released { release() }
        return nil
    }

    /// The round just run found nothing to do and nothing in flight: releases the drains it covered.
    public func idle() {
        let released = inbox.withState { state -> [@Sendable () -> Void] in
            defer { state.covered = [] }
            return state.covered
        }
        for release in released { release() }
    }
}
