import ParleyAPI
import ParleyCore

/// One pushable item (docs/push.md#what-is-pushed-to-whom: a stored message, a broadcast, a revoke, a call invitation
/// or cancellation, an application action or a test), with what its gateway requests say about it whoever receives it.
struct PushItem: Sendable {
    enum Kind: String, CaseIterable, Sendable {
        case message, revoke, call, broadcast, application, test
        case callCancel = "call_cancel"

        /// The notification `type` (docs/push.md#how-the-bridge-sends).
        var notificationType: String { "parley." + rawValue }
        /// Call kinds go to `voip` devices first; the others never go to `voip` devices (step 3 of
        /// docs/push.md#what-is-pushed-to-whom).
        var isCall: Bool { self == .call || self == .callCancel }
        /// Only messages respect a conversation's `do_not_disturb` (step 2 of docs/push.md#what-is-pushed-to-whom).
        var respectsDoNotDisturb: Bool { self == .message }
    }

    var kind: Kind
    /// The notification's `event_id`: the message id (message, revoke, broadcast), call id or application id; ""
    /// in a dry run of an unsent message.
    var eventID: String
    var messageID: String?
    var callID: String?
    /// `peer` or `group` for messages and revokes; nil for the other kinds.
    var conversationType: String?
    /// The group id of a group conversation (peers see the sender as the conversation id).
    var groupID: String?
    /// The acting user: sender, caller or operator, broadcast `from`, applicant or responder.
    var sender: String
    var senderName: String
    /// The group's name (group conversations).
    var groupName: String?
    /// The recipient of a peer message not sent yet (a dry run of a send body).
    var peerRecipient: String? = nil
    /// For `room_id` of applications: `friend` or `group`.
    var applicationKind: String?
    var messageType: Int?
    var seq: Int64?
    var priority: Int
    /// The PushConfig with every default filled in (``PushConfig/read(from:key:)``; defaults when none was given).
    var push: JSONObject
    /// The default notification body (`PushConfig.content`): the text cut to 100 characters, or `[Image]`, `[File]` ….
    var defaultContent: String
    /// An image message's thumbnail URL (its image's when it has no thumbnail), signed when the message was sent:
    /// the `generic` format's `image_url`, for rich notifications (docs/push.md#settings).
    var imageURL: String? = nil

    /// Whether `push.enable` allows this item at all (false: no attempt for anyone).
    var enabled: Bool { push["enable"]?.boolValue ?? true }
    var enableBadge: Bool { push["enable_badge"]?.boolValue ?? false }

    /// The notification title: `push.title`, else the group's name (group messages) or the acting user's name.
    var title: String {
        if let title = push["title"]?.stringValue { return title }
        if conversationType == "group" { return groupName ?? "" }
        return senderName
    }

    /// The notification body: `push.content`, else the default of the item.
    var content: String { push["content"]?.stringValue ?? defaultContent }

    /// The notification's `room_id` as `userID` sees it (docs/push.md#how-the-bridge-sends).
    func roomID(for userID: String) -> String {
        switch kind {
        case .call, .callCancel: return "call:" + (callID ?? "")
        case .broadcast: return "broadcast"
        case .application: return "application:" + (applicationKind ?? "friend")
        case .test where callID != nil: return "call:" + (callID ?? "")
        case .message, .revoke, .test:
            if conversationType == "group" { return "group:" + (groupID ?? "") }
            return "peer:" + sender
        }
    }

    /// The conversation id as a recipient sees it: the sender (peer) or the group; nil for other kinds of items.
    var conversationID: String? {
        switch conversationType {
        case "group": groupID
        case "peer": sender
        default: nil
        }
    }

    /// The conversation's name as the recipient sees it: the group's, else the acting user's.
    var roomName: String { conversationType == "group" ? groupName ?? "" : senderName }

    /// The item of a call push: `call` or `call_cancel` of `callID` by `actor` (the inviter or the operator).
    static func call(_ kind: Kind, callID: String, actor: String, actorName: String, push: JSONObject?) -> PushItem {
        PushItem(
            kind: kind, eventID: callID, messageID: nil, callID: callID, conversationType: nil, groupID: nil, sender: actor,
            senderName: actorName, groupName: nil, applicationKind: nil, messageType: nil, seq: nil, priority: 2,
            push: push ?? defaultPush, defaultContent: "")
    }

    /// The PushConfig every item without one gets: ``PushConfig`` with all its defaults.
    static let defaultPush: JSONObject = {
        var reader = BodyReader(["push": .object(JSONObject())])
        return PushConfig.read(from: &reader)?.objectValue ?? [:]
    }()

    /// The default notification body of a message of `type` with `body` JSON (`PushConfig.content`).
    static func defaultContent(type: Int, body: JSONValue?) -> String {
        switch type {
        case 1:
            let text = body?["text"]?.stringValue ?? ""
            return text.count > 100 ? String(text.prefix(100)) : text
        case 11: return "[Image]"
        case 12: return "[File]"
        case 13: return "[Audio]"
        case 14: return "[Video]"
        default: return "[Message]"
        }
    }

    /// The notification image of a message of `type` with `body` JSON: an image's thumbnail (or the image), or a
    /// multiple message's first image item's; nil for any other message.
    static func imageURL(type: Int, body: JSONValue?) -> String? {
        switch type {
        case 11: return body?["thumbnail_url"]?.stringValue ?? body?["url"]?.stringValue
        case 10:
            let image = body?["items"]?.arrayValue?.first { $0["type"]?.intValue == 11 }
            return image.flatMap { imageURL(type: 11, body: $0["body"]) }
        default: return nil
        }
    }

    /// Message types a stored message is pushed for (docs/push.md#what-is-pushed-to-whom).
    static let pushableMessageTypes: Set<Int> = [1, 10, 11, 12, 13, 14, 100, 200]
}
