/// Events that a transaction of this node has just committed, with their ids: what the node's own readers (the live
/// hub, the push bridge, the webhook dispatcher) are handed in memory, so that none of them reads back from the log
/// what this node has just written. Other nodes' commits still reach them through the log (a poke or NOTIFY, then a
/// read).
///
/// `events` are in id order and are every event of `appID` that the committing transaction wrote; they are not
/// necessarily all the events between the app's previous head and `events.last.id` (another writer of this node or
/// another node may have committed ids in between), so a reader that keeps a cursor checks that the first id follows
/// its cursor and reads the log for a gap.
public struct CommittedEvents: Sendable {
    public let appID: String
    public let events: [CommittedEvent]

    public init(appID: String, events: [CommittedEvent]) {
        self.appID = appID
        self.events = events
    }
}

/// One committed event with its id and time.
public struct CommittedEvent: Sendable {
    public let id: Int64
    /// Server-clock ms (`created_at`).
    public let createdAt: Int64
    public let event: NewEvent

    public init(id: Int64, createdAt: Int64, event: NewEvent) {
        self.id = id
        self.createdAt = createdAt
        self.event = event
    }
}
