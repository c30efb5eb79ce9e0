import ParleyPostgres
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
    /// The listener lost its connection: other nodes' notices may have been missed while it was away (by default
    /// nothing: the readers that keep cursors re-read the log anyway).
    func notificationsMissed()
}

extension CommitObserver {
    package func storedElsewhere(appID: String) { stored(appID: appID) }
    package func notificationsMissed() {}
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

    package func notificationsMissed() {
        for observer in list.withLock({ $0 }) { observer.notificationsMissed() }
    }

    /// The channel on which nodes tell each other "app X has new events" (`<node> <app>`; the live hub sends and
    /// hears them).
    package static let channel = "parley_events"

    /// Tells the other nodes that `appID` changed without an event (an import, a job's step, a retention batch), as
    /// if it had new events, so that they drop what they keep of it; this node's history cache is dropped at once.
    /// `-` is no node's id: this node's hub hears it too and re-reads the app's log, finding nothing new.
    package static func changedWithoutEvents(appID: String, cache: HistoryCache, on db: PostgresConnection) {
        cache.dropApp(appID)
        _ = try? db.query("SELECT pg_notify(\(channel), \("- " + appID))")
    }
}
