import Synchronization

/// Asks "does the server answer within this time?" on a connection of its own, for readiness checks: it never queues
/// behind the pool's workers and never waits past the caller's deadline, whatever the server does.
///
/// One check runs at a time. A caller that finds one running waits for its turn until its own deadline, and takes
/// that check's answer when it succeeded after the caller asked, so concurrent checks cost one round trip. It ignores
/// the configuration's circuit and response timeout: it sends `SELECT 1` and waits no longer than the caller allows.
///
/// Owner: the connection travels in `slot`, a queue of one: whoever took it from there owns it until it is put back.
public final class PostgresProbe: Sendable {
    private let configuration: PostgresConfiguration
    private let logger: PostgresLogger
    private let slot = WaitQueue<Holder>(capacity: 1)
    /// Monotonic nanoseconds when the server last answered a check.
    private let lastAnswered = Atomic<UInt64>(0)

    public init(configuration: PostgresConfiguration, logger: PostgresLogger = .disabled) {
        var own = configuration
        own.circuit = nil
        if own.applicationName == nil || own.applicationName == "parley" { own.applicationName = "parley-probe" }
        self.configuration = own
        self.logger = logger
        slot.push(Holder())
    }

    /// True when the server answered `SELECT 1` within `timeout` (counting the wait for a check already running).
    public func check(within timeout: Duration) -> Bool {
        let asked = monotonicNanos()
        let deadline = asked + PostgresConfiguration.nanos(timeout)
        guard let holder = slot.pop(deadlineNanos: deadline) else { return false }
        defer { slot.push(holder) }
        if lastAnswered.load(ordering: .acquiring) >= asked { return true }
        // A kept connection may have been closed by a restart of the server since the last check: then one fresh try.
        if let kept = holder.connection, kept.detectClosedByServer() { holder.connection = nil }
        for _ in 0..<2 {
            let now = monotonicNanos()
            guard now < deadline else { return false }
            let fresh = holder.connection == nil
            do {
                var bounded = configuration
                bounded.responseTimeout = .nanoseconds(Int64(deadline - now))
                let connection = try holder.connection ?? PostgresConnection(bounded, logger: logger)
                holder.connection = connection
                let left = deadline > monotonicNanos() ? deadline - monotonicNanos() : 0
                try connection.withResponseTimeout(.nanoseconds(Int64(max(1, left)))) { try $0.simpleQuery("SELECT 1") }
                lastAnswered.store(monotonicNanos(), ordering: .releasing)
                return true
            } catch {
                guard holder.connection?.isBroken ?? true else { return false }
                holder.connection = nil
                // A timeout means the server does not answer; a kept connection that broke gets one fresh try.
                if fresh || (error as? PostgresError)?.isTimeout == true { return false }
            }
        }
        return false
    }

    /// Closes the probe's connection (waiting up to `timeout` for a check that runs); a later check opens a new one.
    public func close(within timeout: Duration = .seconds(1)) {
        guard let holder = slot.pop(deadlineNanos: monotonicNanos() + PostgresConfiguration.nanos(timeout)) else { return }
        holder.connection = nil
        slot.push(holder)
    }

    /// The probe's connection between checks.
    ///
    /// @unchecked Sendable: it is in `slot` or held by the one caller that took it from there, never both.
    private final class Holder: @unchecked Sendable {
        var connection: PostgresConnection?
    }
}
