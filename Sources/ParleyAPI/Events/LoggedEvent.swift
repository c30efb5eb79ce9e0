/// One event read from the log (docs/events.md#the-event-object), ready to be written in the app view or in a user view
/// (docs/events.md#two-views-of-the-same-event).
public struct LoggedEvent: Sendable {
    public let id: Int64
    public let type: String
    /// The Event JSON up to its `data` value (`EventLog.eventHead`).
    let head: [UInt8]
    /// The `data` JSON in the app view, as stored.
    public let data: [UInt8]

    /// The Event JSON object in the app view.
    public var json: [UInt8] { head + data + Self.tail }

    /// The Event JSON object in the user view of `userID` (``EventUserView``).
    package func json(viewedBy userID: String) throws -> [UInt8] {
        guard EventUserView.differs(type), let view = try EventUserView(type: type, appData: data).data(for: userID) else { return json }
        return head + view + Self.tail
    }

    /// What closes the Event object after its data.
    static let tail: [UInt8] = [UInt8(ascii: "}")]
}
