import Synchronization

/// A one-way "shutdown has started" flag shared with the routes.
package final class StopFlag: Sendable {
    private let flag = Atomic<Bool>(false)

    package init() {}

    package var isSet: Bool { flag.load(ordering: .relaxed) }
    /// Sets the flag; returns whether it was already set.
    package func set() -> Bool { flag.exchange(true, ordering: .acquiringAndReleasing) }
}
