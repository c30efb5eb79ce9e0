import ParleyCore

/// One event as the live streams see it: the fields their rules look at, and its SSE frame rendered once for
/// every stream that receives it.
package struct LiveEvent: Sendable {
    package let id: Int64
    package let type: String
    package let audience: [String]
    package let groupID: String?
    package let roomID: String?
    /// An event to members: besides `audience`, it goes to the members of `groupID`, or of `roomID` when `groupID` is
    /// nil, when it was written (`MemberAudience` in ParleyLive).
    package let toGroupMembers: Bool
    /// For `user.deleted`: the deleted user (its streams close, docs/events.md#live-streams-server-sent-events).
    package let deletedUserID: String?
    /// For `user.kicked`: the platforms whose streams close (nil: every platform).
    package let kickedPlatforms: [String]?
    /// `id: …`, `event: …`, `data: <Event JSON>` and the blank line (docs/events.md#live-streams-server-sent-events),
    /// in the app view: rendered once for every app stream, and for every user stream when no user view differs from
    /// it.
    package let frame: [UInt8]
    /// The `data` JSON in the app view, as stored (what a user view is made from, ``EventUserView``).
    package let data: [UInt8]
    /// The frame up to the Event's `data` value.
    private let frameHead: [UInt8]

    package init(
        id: Int64, type: String, audience: [String], groupID: String?, roomID: String?, toGroupMembers: Bool, deletedUserID: String?,
        kickedPlatforms: [String]?, frameHead: [UInt8], data: [UInt8]
    ) {
        self.id = id
        self.type = type
        self.audience = audience
        self.groupID = groupID
        self.roomID = roomID
        self.toGroupMembers = toGroupMembers
        self.deletedUserID = deletedUserID
        self.kickedPlatforms = kickedPlatforms
        self.frameHead = frameHead
        self.data = data
        frame = frameHead + data + Self.frameTail
    }

    /// An event this node has just committed (``CommittedEvents``), as the log would give it back.
    package init(_ committed: CommittedEvent, appID: String) {
        let event = committed.event
        var deletedUserID: String?
        var kickedPlatforms: [String]?
        if event.type == "user.deleted" || event.type == "user.kicked", let data = try? JSONValue.parse(event.data) {
            if event.type == "user.deleted" { deletedUserID = data["user_id"]?.stringValue }
            if event.type == "user.kicked" { kickedPlatforms = data["platforms"]?.arrayValue?.compactMap(\.stringValue) }
        }
        self.init(
            id: committed.id, type: event.type, audience: event.audience, groupID: event.groupID, roomID: event.roomID,
            toGroupMembers: event.toGroupMembers, deletedUserID: deletedUserID, kickedPlatforms: kickedPlatforms,
            frameHead: EventJSON.frameHead(id: committed.id, type: event.type, appID: appID, createdAt: committed.createdAt),
            data: event.data)
    }

    /// The frame with `data` in place of the app view (a user view).
    package func frame(data view: [UInt8]) -> [UInt8] { frameHead + view + Self.frameTail }

    /// What follows the data: the Event object's `}` and the blank line.
    private static let frameTail = Array("}\n\n".utf8)
}

/// The `types` filter of the event routes (docs/events.md#live-streams-server-sent-events): exact types, `prefix.*` and
/// `*`.
package struct EventTypeFilter: Sendable, Equatable {
    private(set) var all = true
    private(set) var exact: [String] = []
    /// Prefixes with their trailing dot (`message.` for `message.*`).
    private(set) var prefixes: [String] = []

    package init(_ types: [String] = []) {
        all = types.isEmpty
        for type in types {
            if type == "*" {
                all = true
            } else if type.hasSuffix(".*") {
                prefixes.append(String(type.dropLast(1)))
            } else {
                exact.append(type)
            }
        }
    }

    package func matches(_ type: String) -> Bool {
        all || exact.contains(type) || prefixes.contains { type.hasPrefix($0) }
    }
}
