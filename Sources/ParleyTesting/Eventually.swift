import Glibc

/// Polls `condition` every `interval` until it holds or `timeout` has passed, looking once more at the deadline;
/// whether it held. The one way the tests wait for something another thread or the server does: assert the result
/// (`#expect(eventually { … })`, or `try #require(eventually { … }, "what did not happen")` to stop there).
///
/// An error thrown by `condition` ends the wait and is rethrown; a condition that may fail while it waits (a request
/// to a restarting server) catches its own errors (`(try? …) == 200`).
@discardableResult
public func eventually(
    timeout: Duration = .seconds(5), every interval: Duration = .milliseconds(10), _ condition: () throws -> Bool
) rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try condition() { return true }
        let (seconds, attoseconds) = interval.components
        usleep(UInt32(seconds * 1_000_000 + attoseconds / 1_000_000_000_000))
    }
    return try condition()
}
