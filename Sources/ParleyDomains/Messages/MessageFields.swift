import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The text members of a message (written escaped, or `null` when absent).
enum MessageTextField {
    case messageID, clientMsgID, conversationType, from, to, extendedData, rootMessageID, suppressed, editorID, pinnedBy
}

/// The members stored as JSON (`body`, `reply`, `push`, `reactions`): copied as stored, or `null` when absent.
enum MessageJSONField {
    case body, reply, push, reactions
}

/// The integer members of a message.
enum MessageIntegerField {
    case type, timestamp, replyCount, priority, repeatCount, editCount
}

/// The integer members that may be null.
enum MessageOptionalIntegerField {
    case editedAt, pinnedAt
}

/// The boolean members of a message.
enum MessageFlag {
    case mentionAll, needReceipt, noUnread, onlineOnly, isBroadcast, deleted
}

/// What the Message JSON (docs/messages.md#sending) is written from: a decoded ``Message``, or a `messages` row read in
/// place (``MessageRow``). The layout below is the one definition of that JSON; conformances only hand over fields.
protocol MessageFields {
    associatedtype Failure: Error
    func writeText(_ field: MessageTextField, to w: inout JSONWriter) throws(Failure)
    func writeJSON(_ field: MessageJSONField, to w: inout JSONWriter) throws(Failure)
    func writeMentionIDs(to w: inout JSONWriter) throws(Failure)
    func integer(_ field: MessageIntegerField) throws(Failure) -> Int64
    func optionalInteger(_ field: MessageOptionalIntegerField) throws(Failure) -> Int64?
    func flag(_ field: MessageFlag) throws(Failure) -> Bool
    /// Writes `body`; with `originalText`, a revoke body (type 31) with its original text (shown only to the
    /// original sender and the app key).
    func writeBody(to w: inout JSONWriter, originalText: Bool) throws(Failure)
    /// The seq; nil for messages that are not stored.
    func sequence() throws(Failure) -> Int64?
    /// The members a targeted group message is limited to; nil for every other message.
    func visibleMembers() throws(Failure) -> [String]?
    /// Whether `userID` sent the message.
    func isSent(by userID: String) throws(Failure) -> Bool
    /// The receipt's final status once it is `done` or `expired`; nil while it follows `need_receipt`.
    func settledReceiptStatus() throws(Failure) -> ReceiptStatus?
}

extension MessageFields {
    /// Writes the Message object as `viewer` sees it as the next value of `w` (one buffer for a whole list).
    func write(to w: inout JSONWriter, _ viewer: MessageViewer) throws(Failure) {
        w.beginObject()
        // `suppressed` for the app; `push` and a revoke's original text for the app and the sender
        // (docs/events.md#two-views-of-the-same-event).
        let isApp = viewer == .app
        let seesPush: Bool
        switch viewer {
        case .app: seesPush = true
        case .user(let userID): seesPush = try isSent(by: userID)
        }
        try writeMembers(&w, originalText: seesPush)
        if isApp {
            w.key(static: "suppressed")
            try writeText(.suppressed, to: &w)
        }
        if seesPush {
            w.key(static: "push")
            try writeJSON(.push, to: &w)
        }
        w.endObject()
    }

    /// Every member every viewer sees, in order (with `originalText`, a revoke body keeps its original text).
    func writeMembers(_ w: inout JSONWriter, originalText: Bool = false) throws(Failure) {
        try writeHead(&w)
        if let seq = try sequence() { w.writeInt(seq) } else { w.writeNull() }
        w.key(static: "timestamp")
        w.writeInt(try integer(.timestamp))
        try writeTail(&w, originalText: originalText)
    }

    /// The members before the seq value, ending with `"seq":`.
    func writeHead(_ w: inout JSONWriter) throws(Failure) {
        w.key(static: "message_id")
        try writeText(.messageID, to: &w)
        w.key(static: "client_msg_id")
        try writeText(.clientMsgID, to: &w)
        w.key(static: "type")
        w.writeInt(try integer(.type))
        w.key(static: "conversation_type")
        try writeText(.conversationType, to: &w)
        w.key(static: "from")
        try writeText(.from, to: &w)
        w.key(static: "to")
        try writeText(.to, to: &w)
        w.key(static: "seq")
    }

    /// The members after `timestamp`, from `"body":` on.
    func writeTail(_ w: inout JSONWriter, originalText: Bool) throws(Failure) {
        w.key(static: "body")
        try writeBody(to: &w, originalText: originalText)
        w.key(static: "extended_data")
        try writeText(.extendedData, to: &w)
        w.key(static: "mentions")
        w.beginObject()
        w.key(static: "user_ids")
        try writeMentionIDs(to: &w)
        w.key(static: "all")
        w.writeBool(try flag(.mentionAll))
        w.endObject()
        w.key(static: "reply")
        try writeJSON(.reply, to: &w)
        w.key(static: "root_message_id")
        try writeText(.rootMessageID, to: &w)
        w.key(static: "reply_count")
        w.writeInt(try integer(.replyCount))
        w.key(static: "priority")
        w.writeInt(try integer(.priority))
        let needReceipt = try flag(.needReceipt)
        w.key(static: "need_receipt")
        w.writeBool(needReceipt)
        w.key(static: "receipt_status")
        w.writeString(ReceiptStatus(needReceipt: needReceipt, settled: try settledReceiptStatus()).rawValue)
        w.key(static: "no_unread")
        w.writeBool(try flag(.noUnread))
        w.key(static: "online_only")
        w.writeBool(try flag(.onlineOnly))
        w.key(static: "stored")
        w.writeBool(try sequence() != nil)
        w.key(static: "repeat_count")
        w.writeInt(try integer(.repeatCount))
        w.key(static: "is_broadcast")
        w.writeBool(try flag(.isBroadcast))
        w.key(static: "edited_at")
        if let editedAt = try optionalInteger(.editedAt) { w.writeInt(editedAt) } else { w.writeNull() }
        w.key(static: "editor_id")
        try writeText(.editorID, to: &w)
        w.key(static: "edit_count")
        w.writeInt(try integer(.editCount))
        w.key(static: "pinned")
        if let pinnedAt = try optionalInteger(.pinnedAt) {
            w.beginObject()
            w.key(static: "by")
            try writeText(.pinnedBy, to: &w)
            w.key(static: "at")
            w.writeInt(pinnedAt)
            w.endObject()
        } else {
            w.writeNull()
        }
        w.key(static: "reactions")
        try writeJSON(.reactions, to: &w)
        w.key(static: "deleted")
        w.writeBool(try flag(.deleted))
        // Only targeted messages carry the member (docs/messages.md#targeted-group-messages): every other message's
        // JSON stays as it was.
        if let visibleTo = try visibleMembers() {
            w.key(static: "visible_to")
            w.beginArray()
            for id in visibleTo { w.writeString(id) }
            w.endArray()
        }
    }
}

extension Message: MessageFields {
    typealias Failure = Never

    func writeText(_ field: MessageTextField, to w: inout JSONWriter) {
        let text: String? =
            switch field {
            case .messageID: messageID
            case .clientMsgID: clientMsgID
            case .conversationType: conversationType.rawValue
            case .from: from
            case .to: to
            case .extendedData: extendedData
            case .rootMessageID: rootMessageID
            case .suppressed: suppressed
            case .editorID: editorID
            case .pinnedBy: pinnedBy
            }
        if let text { w.writeString(text) } else { w.writeNull() }
    }

    func writeJSON(_ field: MessageJSONField, to w: inout JSONWriter) {
        let json: [UInt8]? =
            switch field {
            case .body: body
            case .reply: reply
            case .push: push
            case .reactions: reactions
            }
        if let json { w.writeRaw(json) } else { w.writeNull() }
    }

    func writeBody(to w: inout JSONWriter, originalText withOriginal: Bool) {
        guard let body else { return w.writeNull() }
        if withOriginal, type == MessageType.revoke.rawValue, let originalText {
            Self.writeRevokeBody(body, originalText: originalText, to: &w)
        } else if let fresh = body.withUnsafeBufferPointer({ MessageFiles.refreshed($0, type: type) }) {
            w.writeRaw(fresh)
        } else {
            w.writeRaw(body)
        }
    }

    func writeMentionIDs(to w: inout JSONWriter) {
        w.beginArray()
        for id in mentionIDs { w.writeString(id) }
        w.endArray()
    }

    func integer(_ field: MessageIntegerField) -> Int64 {
        switch field {
        case .type: type
        case .timestamp: timestamp
        case .replyCount: replyCount
        case .priority: priority
        case .repeatCount: repeatCount
        case .editCount: editCount
        }
    }

    func optionalInteger(_ field: MessageOptionalIntegerField) -> Int64? {
        switch field {
        case .editedAt: editedAt
        case .pinnedAt: pinnedAt
        }
    }

    func flag(_ field: MessageFlag) -> Bool {
        switch field {
        case .mentionAll: mentionAll
        case .needReceipt: needReceipt
        case .noUnread: noUnread
        case .onlineOnly: onlineOnly
        case .isBroadcast: isBroadcast
        case .deleted: deleted
        }
    }

    func sequence() -> Int64? { seq }

    func visibleMembers() -> [String]? { visibleTo }

    func isSent(by userID: String) -> Bool { from == userID }

    func settledReceiptStatus() -> ReceiptStatus? { settledReceipt }
}

extension MessageFields {
    /// A stored revoke body (an object without `original_text`) with `original_text` added as its last member.
    static func writeRevokeBody(_ body: some Collection<UInt8>, originalText: String, to w: inout JSONWriter) {
        var text = JSONWriter(capacity: originalText.utf8.count + 8)
        text.writeString(originalText)
        var bytes = Array(body.dropLast())
        bytes += #","original_text":"#.utf8
        bytes += text.bytes
        bytes.append(UInt8(ascii: "}"))
        w.writeRaw(bytes)
    }
}
