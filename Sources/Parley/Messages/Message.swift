/// The kind of conversation a message belongs to (API.md §1.9 `conversation_type`).
enum ConversationType: String, CaseIterable, Sendable {
    case peer, room, group
}

/// Who reads a message: the app (sees `suppressed` and `push`) or one user (sees `push` of its own messages).
enum MessageViewer: Sendable, Equatable {
    case app
    case user(String)

    /// The viewer of a request's credential.
    init(_ ctx: APIContext) {
        self = ctx.tokenUserID.map(MessageViewer.user) ?? .app
    }
}

/// A message as stored (API.md §2 Message), with its JSON views.
///
/// A value read from one `messages` row (or built by a send before it commits). Bodies, `reply` and `push` are kept
/// as the JSON bytes they are stored as, so reads copy them into responses without re-serialising.
struct Message: Sendable {
    var messageID: String
    var clientMsgID: String?
    var type: Int64
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
    /// True only for broadcasts (§11.2).
    var isBroadcast = false

    var stored: Bool { seq != nil }

    /// Whether `viewer` may see this message at all (API.md §11.4 "visible", for a peer participant): another user's
    /// suppressed message is hidden.
    func isVisible(to viewer: MessageViewer) -> Bool {
        guard case .user(let userID) = viewer else { return true }
        if suppressed != nil && userID != from { return false }
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

    /// Writes the Message object as `viewer` sees it as the next value of `w` (one buffer for a whole list).
    func write(to w: inout JSONWriter, _ viewer: MessageViewer) {
        w.beginObject()
        writeMembers(&w)
        // `suppressed` for the app; `push` for the app and the sender (API.md §2 †).
        if viewer == .app {
            w.key(static: "suppressed")
            if let suppressed { w.writeString(suppressed) } else { w.writeNull() }
        }
        if viewer == .app || viewer == .user(from) {
            w.key(static: "push")
            if let push { w.writeRaw(push) } else { w.writeNull() }
        }
        w.endObject()
    }

    /// The Message JSON a `message.sent` event carries (what every recipient sees: no `suppressed`, no `push`), the
    /// same bytes the send statement assembles from ``head()`` and ``tail()``.
    func eventJSON() -> [UInt8] {
        var w = JSONWriter(capacity: 640 + (body?.count ?? 0) + (reply?.count ?? 0))
        w.beginObject()
        writeMembers(&w)
        w.endObject()
        return w.bytes
    }

    /// Every member every viewer sees, in order.
    private func writeMembers(_ w: inout JSONWriter) {
        writeHead(&w)
        if let seq { w.writeInt(seq) } else { w.writeNull() }
        w.key(static: "timestamp")
        w.writeInt(timestamp)
        writeTail(&w)
    }

    /// The opening brace and the members before the seq value, ending with `"seq":` (the send statement fills seq
    /// and timestamp in).
    func head() -> [UInt8] {
        var w = JSONWriter(capacity: 160)
        w.beginObject()
        writeHead(&w)
        return w.bytes
    }

    /// The members after `timestamp`, starting with `,"body":`, without the closing brace.
    func tail() -> [UInt8] {
        var w = JSONWriter(capacity: 384 + (body?.count ?? 0) + (reply?.count ?? 0))
        // A writer inside an object with one member written, so the first key gets its comma; cut before it.
        w.beginObject()
        w.key(static: "_")
        w.writeNull()
        let cut = w.count
        writeTail(&w)
        return Array(w.bytes[cut...])
    }

    private func writeHead(_ w: inout JSONWriter) {
        w.key(static: "message_id")
        w.writeString(messageID)
        w.key(static: "client_msg_id")
        if let clientMsgID { w.writeString(clientMsgID) } else { w.writeNull() }
        w.key(static: "type")
        w.writeInt(type)
        w.key(static: "conversation_type")
        w.writeString(conversationType.rawValue)
        w.key(static: "from")
        w.writeString(from)
        w.key(static: "to")
        w.writeString(to)
        w.key(static: "seq")
    }

    private func writeTail(_ w: inout JSONWriter) {
        w.key(static: "body")
        if let body { w.writeRaw(body) } else { w.writeNull() }
        w.key(static: "extended_data")
        w.writeString(extendedData)
        w.key(static: "mentions")
        w.object { w in
            w.key(static: "user_ids")
            w.array { w in for id in mentionIDs { w.writeString(id) } }
            w.key(static: "all")
            w.writeBool(mentionAll)
        }
        w.key(static: "reply")
        if let reply { w.writeRaw(reply) } else { w.writeNull() }
        w.key(static: "root_message_id")
        if let rootMessageID { w.writeString(rootMessageID) } else { w.writeNull() }
        w.key(static: "reply_count")
        w.writeInt(replyCount)
        w.key(static: "priority")
        w.writeInt(priority)
        w.key(static: "need_receipt")
        w.writeBool(needReceipt)
        w.key(static: "receipt_status")
        w.writeString(needReceipt ? "processing" : "none")
        w.key(static: "no_unread")
        w.writeBool(noUnread)
        w.key(static: "online_only")
        w.writeBool(onlineOnly)
        w.key(static: "stored")
        w.writeBool(stored)
        w.key(static: "repeat_count")
        w.writeInt(repeatCount)
        w.key(static: "is_broadcast")
        w.writeBool(isBroadcast)
        // Edits, pins and reactions are not built yet: their members are constant.
        w.staticMembers(#""edited_at":null,"editor_id":null,"edit_count":0,"pinned":null,"reactions":[]"#)
        w.key(static: "deleted")
        w.writeBool(deleted)
    }

    /// The tombstone a dedupe key answers with once its stored message is gone (API.md §1.6).
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
