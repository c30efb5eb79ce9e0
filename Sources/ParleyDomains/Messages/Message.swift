import ParleyAPI
import ParleyCore

/// The kind of conversation a message belongs to (`conversation_type`).
enum ConversationType: String, CaseIterable, Sendable {
    case peer, room, group
}

/// Who reads a message: the app (sees `suppressed` and `push`) or one user (sees `push` of its own messages).
enum MessageViewer: Sendable, Equatable {
    case app
    case user(String)

    /// The viewer of a request's credential.
    init(_ ctx: some AppCaller) {
        self = ctx.tokenUserID.map(MessageViewer.user) ?? .app
    }
}

/// A message as stored (docs/messages.md#sending), with its JSON views.
///
/// A value read from one `messages` row (or built by a send before it commits). Bodies, `reply` and `push` are kept
/// as the JSON bytes they are stored as, so reads copy them into responses without re-serialising.
struct Message: Sendable {
    var messageID: String
    var clientMsgID: String?
    package var type: Int64
    var conversationType: ConversationType
    var from: String
    var to: String
    /// Nil for messages that are not stored.
    var seq: Int64?
    var timestamp: Int64
    /// The normalised body JSON; nil for tombstones.
    var body: [UInt8]?
    var extendedData: String
    var mentionIDs: [String]
    var mentionAll: Bool
    /// The `reply` object JSON (snapshot at send time).
    var reply: [UInt8]?
    var rootMessageID: String?
    var replyCount: Int64
    var priority: Int64
    var needReceipt: Bool
    var noUnread: Bool
    var onlineOnly: Bool
    var repeatCount: Int64
    /// The normalised PushConfig JSON, for the push bridge.
    var push: [UInt8]?
    /// `blacklist` or `hook_drop` when accepted but delivered to nobody.
    var suppressed: String?
    /// Deleted for everyone: a tombstone.
    var deleted: Bool
    /// True only for broadcasts (docs/messages.md#sending).
    var isBroadcast = false
    /// The last edit (docs/messages.md#revoke-edit-delete): when, by whom (null: the app), how many edits.
    var editedAt: Int64? = nil
    var editorID: String? = nil
    var editCount: Int64 = 0
    /// Pinned (docs/messages.md#reactions-pins-and-replies): when and by whom (null `pinnedBy` with a time: the app).
    var pinnedAt: Int64? = nil
    var pinnedBy: String? = nil
    /// The reaction summary JSON as stored (`[{reaction_type, count, user_ids}]`).
    var reactions: [UInt8] = Array("[]".utf8)
    /// A revoked type-1 message's text, shown in its revoke body to the sender and the app only.
    var originalText: String? = nil
    /// The receipt's final status once it is `done` or `expired` (docs/messages.md#receipts); nil while it follows
    /// `needReceipt`.
    var settledReceipt: ReceiptStatus? = nil
    /// A targeted group message (docs/messages.md#targeted-group-messages): the members who see it besides its sender;
    /// nil for every other message.
    var visibleTo: [String]? = nil

    var stored: Bool { seq != nil }

    /// Whether `viewer` may see this message at all (docs/messages.md#history, for a peer participant): another user's
    /// suppressed message is hidden, and a targeted message from anyone its sender did not list.
    func isVisible(to viewer: MessageViewer) -> Bool {
        guard case .user(let userID) = viewer else { return true }
        if suppressed != nil && userID != from { return false }
        if let visibleTo, userID != from, !visibleTo.contains(userID) { return false }
        if conversationType == .peer { return userID == from || userID == to }
        return true  // groups: membership is the service's check (MessageService.isVisible)
    }

    // MARK: - JSON

    /// The Message object as `viewer` sees it.
    func json(_ viewer: MessageViewer) -> [UInt8] {
        var w = JSONWriter(capacity: 640 + (body?.count ?? 0) + (reply?.count ?? 0) + (push?.count ?? 0))
        write(to: &w, viewer)
        return w.bytes
    }

    /// The tombstone a dedupe key answers with once its stored message is gone
    /// (docs/messages.md#deduplication-with-client_msg_id).
    static func tombstone(
        messageID: String, clientMsgID: String, conversationType: ConversationType, from: String, to: String, seq: Int64?,
        timestamp: Int64
    ) -> Message {
        Message(
            messageID: messageID, clientMsgID: clientMsgID, type: 0, conversationType: conversationType, from: from, to: to,
            seq: seq, timestamp: timestamp, body: nil, extendedData: "", mentionIDs: [], mentionAll: false, reply: nil,
            rootMessageID: nil, replyCount: 0, priority: 2, needReceipt: false, noUnread: false, onlineOnly: false,
            repeatCount: 1, push: nil, suppressed: nil, deleted: true)
    }
}
