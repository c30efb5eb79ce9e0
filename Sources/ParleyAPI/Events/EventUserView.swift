import ParleyCore

/// The user view of one event's `data` (docs/events.md#two-views-of-the-same-event), made from the app view the log
/// stores: exactly the fields a token of the audience user gets from the REST reads.
///
/// Events are written once, in the app view (every field an app key sees). The user view only leaves fields out:
/// `suppressed` of a Message always, its `push` and a revoke record's `original_text` unless the user sent it,
/// and a User's `deleted_at`. So an event has at most two user views, the sender's and everyone else's: the hub renders
/// each once per event for all its user streams, the user log renders the one of its user. This is the one place those
/// rules are applied to stored JSON (the room recent cache uses ``message(_:for:)`` too).
package struct EventUserView: Sendable {
    /// Where the viewer-dependent fields of an event type's data sit.
    private enum Holder {
        /// `data.message`: a Message.
        case message
        /// `data.conversation.last_message`: a Message (or null).
        case conversationLastMessage
        /// `data.user`: a User, seen by itself (its own `user.updated`).
        case user
    }

    /// The holder of the event types whose data carries viewer-dependent fields; every other type's user view is its
    /// app view, byte for byte.
    private static func holder(of type: String) -> Holder? {
        switch type {
        case "message.sent", "message.broadcast", "message.revoked", "message.edited": .message
        case "conversation.updated": .conversationLastMessage
        case "user.updated": .user
        default: nil
        }
    }

    /// Whether some user view of an event of `type` differs from its app view (cheap: by type only).
    package static func differs(_ type: String) -> Bool { holder(of: type) != nil }

    private let holder: Holder?
    /// The parsed app view (`.null` when the type has no viewer-dependent field).
    private let appData: JSONValue
    /// The sender of the carried message: its user view keeps `push` and `original_text`; nil when every audience
    /// user gets the same view.
    package let sender: String?

    /// Parses the app view `data` of an event of `type` (only when the type has viewer-dependent fields).
    package init(type: String, appData data: [UInt8]) throws {
        holder = Self.holder(of: type)
        appData = holder == nil ? .null : try JSONValue.parse(data)
        switch holder {
        case .message: sender = appData["message"]?["from"]?.stringValue
        case .conversationLastMessage: sender = appData["conversation"]?["last_message"]?["from"]?.stringValue
        case .user, nil: sender = nil
        }
    }

    /// The user view of the data for `userID`; nil when it is the app view unchanged.
    package func data(for userID: String) -> [UInt8]? {
        guard let holder, case .object(var data) = appData else { return nil }
        switch holder {
        case .message:
            guard case .object(var message)? = data["message"] else { return nil }
            Self.strip(&message, for: userID)
            data["message"] = .object(message)
        case .conversationLastMessage:
            guard case .object(var conversation)? = data["conversation"], case .object(var message)? = conversation["last_message"]
            else { return nil }
            Self.strip(&message, for: userID)
            conversation["last_message"] = .object(message)
            data["conversation"] = .object(conversation)
        case .user:
            // The only user.updated audience is the user itself: its own view has every field but `deleted_at`
            // (docs/events.md#the-event-object).
            guard case .object(var user)? = data["user"] else { return nil }
            user["deleted_at"] = nil
            data["user"] = .object(user)
        }
        return JSONValue.object(data).serialized()
    }

    /// A Message object's JSON in the app view (`message`) as `userID`'s token sees it
    /// (docs/events.md#two-views-of-the-same-event).
    package static func message(_ message: [UInt8], for userID: String) throws -> [UInt8] {
        guard case .object(var object) = try JSONValue.parse(message) else {
            throw APIError(.internalError, "a stored message is not a JSON object")
        }
        strip(&object, for: userID)
        return JSONValue.object(object).serialized()
    }

    /// Removes from an app-view Message what `userID` may not see: `suppressed` (app key only); `push` and a revoke
    /// record's `original_text` unless `userID` sent it. (`self_included` is never in the app view.)
    private static func strip(_ message: inout JSONObject, for userID: String) {
        message["suppressed"] = nil
        guard message["from"]?.stringValue != userID else { return }
        message["push"] = nil
        if case .object(var body)? = message["body"], body.contains("original_text") {
            body["original_text"] = nil
            message["body"] = .object(body)
        }
    }
}
