import ParleySync

/// A reader of this node that follows the event log (the live hub, the webhook dispatcher, the push bridge): told of
/// every commit as soon as it is known, so it need not wait for its next poll of the log.
package protocol CommitObserver: Sendable {
    /// This node's message writer committed `events` (on its thread, right after the commit): handed over in memory
    /// (``CommittedEvents``), so nothing reads back what this node has just written.
    func committed(_ events: CommittedEvents)
    /// The sequencer of this node numbered events of `appID` (another writer's: a request's, a timer's): they are read
    /// from the log.
    func stored(appID: String)
    /// Another node said it has events of `appID` (the live hub's listener heard it); by default as ``stored(appID:)``.
    func storedElsewhere(appID: String)
}

extension CommitObserver {
    package func storedElsewhere(appID: String) { stored(appID: appID) }
}

/// The node's commit observers, one list for every source of commits (the message writer, the sequencer, other
/// nodes). The app layer fills it once, before anything starts; it is made empty first because the observers are made
/// after the services that tell them (the push bridge shares the services' transport). Owner: `list` (any thread).
package final class CommitObservers: Sendable {
    private let list = LockedValue<[any CommitObserver]>([])

    package init() {}

    /// The observers, in the order they are told.
    package func set(_ observers: [any CommitObserver]) { list.withLock { $0 = observers } }

    package func committed(_ events: CommittedEvents) {
        for observer in list.withLock({ $0 }) { observer.committed(events) }
    }

    package func stored(appID: String) {
        for observer in list.withLock({ $0 }) { observer.stored(appID: appID) }
    }

    package func storedElsewhere(appID: String) {
        for observer in list.withLock({ $0 }) { observer.storedElsewhere(appID: appID) }
    }
}
