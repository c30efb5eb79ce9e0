import ParleyHTTP
import Synchronization

/// The one clock everything the server stamps or schedules reads (docs/operations.md#test-clock): system time, plus a
/// movable offset when the test clock is enabled.
///
/// Owner: `offset` is atomic; anyone may read, only `advance` (admin, test mode) writes.
public final class ServerClock: Sendable {
    public let isTestClock: Bool
    private let offset = Atomic<Int64>(0)

    public init(testClock: Bool) { isTestClock = testClock }

    /// Milliseconds since the Unix epoch on the server clock.
    public func now() -> Int64 { Timestamp.wallMillis() + offset.load(ordering: .relaxed) }

    public var offsetMillis: Int64 { offset.load(ordering: .relaxed) }

    /// Moves the clock forward by `ms` (test mode only).
    public func advance(by ms: Int64) {
        precondition(isTestClock, "the test clock is disabled")
        offset.add(ms, ordering: .relaxed)
    }
}
