import Synchronization

/// Whether one PostgreSQL server answers, as seen by every connection of this process that shares the circuit (a
/// configuration's `circuit`: the pool, the background threads' connections, the listener).
///
/// Closed while the server answers. An exchange that goes unanswered past its `responseTimeout` opens it: from then on
/// an exchange (a statement or a connect) fails at once with a `.timeout` error instead of waiting out its own
/// timeout, except one at a time, the probe, which is sent as usual. The first answer closes it again. So while the
/// server is stalled (frozen, or its host unreachable) a request waits at most for the exchanges already in flight and
/// one probe, not for one timeout per statement and per pool worker; and no flood of connects piles up in a frozen
/// server's listen queue, to be forked all at once when it wakes.
///
/// A slow statement (longer than the timeout) on a healthy server opens it too, for as long as the next exchange
/// takes to answer: the requests refused meanwhile get 503 and retry.
///
/// Owner: atomics only (read on every exchange: one relaxed load while closed).
public final class PostgresCircuit: Sendable {
    /// What an exchange may do.
    public enum Admission: Sendable {
        /// The circuit is closed: go ahead.
        case pass
        /// The circuit is open and this exchange is the one probe: go ahead, then report with `finished`.
        case probe
        /// The circuit is open and another exchange probes: fail at once.
        case refuse
    }

    /// Monotonic nanoseconds when the circuit opened; 0 while closed.
    private let openedAt = Atomic<UInt64>(0)
    /// Monotonic nanoseconds when the circuit last closed (the server answered again); 0 if it never opened.
    private let closedAt = Atomic<UInt64>(0)
    private let probing = Atomic<Bool>(false)
    private let openings = Atomic<Int>(0)
    private let logger: PostgresLogger

    public init(logger: PostgresLogger = .disabled) { self.logger = logger }

    /// True while exchanges are refused (the server did not answer lately).
    public var isOpen: Bool { openedAt.load(ordering: .acquiring) != 0 }

    /// How often the circuit opened since the start (for metrics).
    public var timesOpened: Int { openings.load(ordering: .relaxed) }

    /// Whether an exchange may start now.
    public func admit() -> Admission {
        if openedAt.load(ordering: .relaxed) == 0 { return .pass }
        return probing.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged ? .probe : .refuse
    }

    /// Reports how an admitted exchange ended: `answered` when the server answered (an error answer counts), false
    /// when it failed otherwise (refused connect, broken socket). Timeouts are reported with `unanswered` first.
    public func finished(_ admission: Admission, answered: Bool) {
        if answered {
            let opened = openedAt.load(ordering: .relaxed)
            if opened != 0, openedAt.compareExchange(expected: opened, desired: 0, ordering: .acquiringAndReleasing).exchanged {
                closedAt.store(monotonicNanos(), ordering: .releasing)
                logger.log(.info, "postgres: the server answers again after \((monotonicNanos() &- opened) / 1_000_000) ms")
            }
        }
        if case .probe = admission { probing.store(false, ordering: .releasing) }
    }

    /// Whether the circuit closed (the server answered again) after `nanos` (monotonic nanoseconds).
    public func closed(since nanos: UInt64) -> Bool { closedAt.load(ordering: .acquiring) > nanos }

    /// Reports an answer the server gave on a connection outside the circuit (the readiness probe's): it closes the
    /// circuit like an answer to one of its exchanges.
    public func serverAnswered() { finished(.pass, answered: true) }

    /// Reports an exchange started at `startedAt` (monotonic nanoseconds) that got no answer within its timeout: the
    /// circuit opens (if it was closed), unless it closed after that exchange started. Such an exchange was sent
    /// into the stall the circuit already recorded and outlived it (its deadline fell just after the server woke):
    /// the server has answered since, and opening again would refuse everything for nothing.
    public func unanswered(timeoutMillis: Int, startedAt: UInt64) {
        if closedAt.load(ordering: .acquiring) > startedAt { return }
        if openedAt.compareExchange(expected: 0, desired: max(1, monotonicNanos()), ordering: .acquiringAndReleasing).exchanged {
            openings.add(1, ordering: .relaxed)
            logger.log(
                .warning,
                "postgres: the server did not answer within \(timeoutMillis) ms; failing fast (one probe at a time) until it answers")
        }
    }
}
