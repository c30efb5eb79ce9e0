import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The columns of a `messages` row as ``MessageStore`` selects them, in order (`MessageStore.columns`).
enum MessageColumn: Int, CaseIterable {
    case messageID, clientMsgID, type, conversationType, sender, recipient, seq, timestamp, body, extendedData
    case mentionIDs, mentionAll, reply, rootMessageID, replyCount, priority, needReceipt, noUnread, repeatCount, push
    case suppressed, deleted, editedAt, editorID, editCount, pinnedAt, pinnedBy, reactions, originalText, receiptState
    case visibleTo

    /// The column's name in the `messages` table.
    package var name: String {
        switch self {
        case .messageID: "message_id"
        case .clientMsgID: "client_msg_id"
        case .type: "type"
        case .conversationType: "conv_type"
        case .sender: "sender"
        case .recipient: "recipient"
        case .seq: "seq"
        case .timestamp: "timestamp"
        case .body: "body"
        case .extendedData: "extended_data"
        case .mentionIDs: "mention_ids"
        case .mentionAll: "mention_all"
        case .reply: "reply"
        case .rootMessageID: "root_message_id"
        case .replyCount: "reply_count"
        case .priority: "priority"
        case .needReceipt: "need_receipt"
        case .noUnread: "no_unread"
        case .repeatCount: "repeat_count"
        case .push: "push"
        case .suppressed: "suppressed"
        case .deleted: "deleted"
        case .editedAt: "edited_at"
        case .editorID: "editor_id"
        case .editCount: "edit_count"
        case .pinnedAt: "pinned_at"
        case .pinnedBy: "pinned_by"
        case .reactions: "reactions"
        case .originalText: "original_text"
        case .receiptState: "receipt_state"
        case .visibleTo: "visible_to"
        }
    }
}

/// One stored message read in place from its `messages` row: the JSON writer copies the cells from libpq's
/// buffer, so a history page builds no `Message`, `String` or array per row (bench/RESULTS.md, GET history).
struct MessageRow: MessageFields {
    typealias Failure = PostgresError

    let row: PostgresRow
    /// Index of the row's `message_id` column (the columns follow in ``MessageColumn`` order).
    let offset: Int

    init(_ row: PostgresRow, at offset: Int = 0) {
        self.row = row
        self.offset = offset
    }

    subscript(column: MessageColumn) -> PostgresCell { row[offset + column.rawValue] }

    func writeText(_ field: MessageTextField, to w: inout JSONWriter) throws(PostgresError) {
        let cell: PostgresCell
        switch field {
        case .messageID: cell = self[.messageID]
        case .clientMsgID: cell = self[.clientMsgID]
        case .conversationType: cell = self[.conversationType]
        case .from: cell = self[.sender]
        case .to: cell = self[.recipient]
        case .extendedData: cell = self[.extendedData]
        case .rootMessageID: cell = self[.rootMessageID]
        case .suppressed: cell = self[.suppressed]
        case .editorID: cell = self[.editorID]
        case .pinnedBy: cell = self[.pinnedBy]
        }
        if cell.isNull { w.writeNull() } else { try cell.withTextBytes { w.writeString(utf8: $0) } }
    }

    func writeJSON(_ field: MessageJSONField, to w: inout JSONWriter) throws(PostgresError) {
        let cell: PostgresCell
        switch field {
        case .body: cell = self[.body]
        case .reply: cell = self[.reply]
        case .push: cell = self[.push]
        case .reactions: cell = self[.reactions]
        }
        if cell.isNull { w.writeNull() } else { try cell.withTextBytes { w.writeRaw($0) } }
    }

    func writeBody(to w: inout JSONWriter, originalText withOriginal: Bool) throws(PostgresError) {
        let body = self[.body]
        if body.isNull { return w.writeNull() }
        if withOriginal, try integer(.type) == MessageType.revoke.rawValue, !self[.originalText].isNull {
            let text = try self[.originalText].string
            try body.withTextBytes { Self.writeRevokeBody($0, originalText: text, to: &w) }
        } else {
            let type = try integer(.type)
            try body.withTextBytes { bytes in
                if let fresh = MessageFiles.refreshed(bytes, type: type) { w.writeRaw(fresh) } else { w.writeRaw(bytes) }
            }
        }
    }

    func writeMentionIDs(to w: inout JSONWriter) throws(PostgresError) {
        let ids = try self[.mentionIDs].stringArray
        w.beginArray()
        for id in ids { w.writeString(id) }
        w.endArray()
    }

    func integer(_ field: MessageIntegerField) throws(PostgresError) -> Int64 {
        switch field {
        case .type: try self[.type].int64
        case .timestamp: try self[.timestamp].int64
        case .replyCount: try self[.replyCount].int64
        case .priority: try self[.priority].int64
        case .repeatCount: try self[.repeatCount].int64
        case .editCount: try self[.editCount].int64
        }
    }

    func optionalInteger(_ field: MessageOptionalIntegerField) throws(PostgresError) -> Int64? {
        let cell =
            switch field {
            case .editedAt: self[.editedAt]
            case .pinnedAt: self[.pinnedAt]
            }
        return cell.isNull ? nil : try cell.int64
    }

    func flag(_ field: MessageFlag) throws(PostgresError) -> Bool {
        switch field {
        case .mentionAll: try self[.mentionAll].bool
        case .needReceipt: try self[.needReceipt].bool
        case .noUnread: try self[.noUnread].bool
        case .deleted: try self[.deleted].bool
        // Rows are stored messages: never online-only (those are not stored) and never broadcasts.
        case .onlineOnly, .isBroadcast: false
        }
    }

    func sequence() throws(PostgresError) -> Int64? { try self[.seq].int64 }

    func visibleMembers() throws(PostgresError) -> [String]? {
        let cell = self[.visibleTo]
        return cell.isNull ? nil : try cell.stringArray
    }

    func isSent(by userID: String) throws(PostgresError) -> Bool {
        try self[.sender].withTextBytes { $0.elementsEqual(userID.utf8) }
    }

    func settledReceiptStatus() throws(PostgresError) -> ReceiptStatus? {
        // Compared in place: a history page builds no String per row (the column holds only 'done' or 'expired').
        let cell = self[.receiptState]
        return cell.isNull ? nil : try cell.withTextBytes { $0.elementsEqual("done".utf8) ? .done : .expired }
    }

    /// The row decoded into a ``Message`` (for the code paths that work with the values).
    func decode() throws(PostgresError) -> Message {
        func string(_ column: MessageColumn) throws(PostgresError) -> String { try self[column].string }
        func optionalString(_ column: MessageColumn) throws(PostgresError) -> String? {
            self[column].isNull ? nil : try self[column].string
        }
        func optionalJSON(_ column: MessageColumn) throws(PostgresError) -> [UInt8]? {
            self[column].isNull ? nil : try self[column].textBytes
        }
        return Message(
            messageID: try string(.messageID), clientMsgID: try optionalString(.clientMsgID), type: try integer(.type),
            conversationType: ConversationType(rawValue: try string(.conversationType)) ?? .peer, from: try string(.sender),
            to: try string(.recipient), seq: try self[.seq].int64, timestamp: try integer(.timestamp), body: try optionalJSON(.body),
            extendedData: try string(.extendedData), mentionIDs: try self[.mentionIDs].stringArray, mentionAll: try flag(.mentionAll),
            reply: try optionalJSON(.reply), rootMessageID: try optionalString(.rootMessageID), replyCount: try integer(.replyCount),
            priority: try integer(.priority), needReceipt: try flag(.needReceipt), noUnread: try flag(.noUnread), onlineOnly: false,
            repeatCount: try integer(.repeatCount), push: try optionalJSON(.push), suppressed: try optionalString(.suppressed),
            deleted: try flag(.deleted), editedAt: try optionalInteger(.editedAt), editorID: try optionalString(.editorID),
            editCount: try integer(.editCount), pinnedAt: try optionalInteger(.pinnedAt), pinnedBy: try optionalString(.pinnedBy),
            reactions: try self[.reactions].textBytes, originalText: try optionalString(.originalText),
            settledReceipt: try settledReceiptStatus(), visibleTo: try visibleMembers())
    }
}

extension MessageRow {
    /// Writes the first `count` of `rows` as `"items": [Message …]` into the open object `w`: the list shape of history,
    /// replies and pins, written straight from libpq's buffer. `nextCursor`: `.none` for a complete list (no
    /// `next_cursor` member), else the page's cursor (`.some(nil)`: null, the list is exhausted).
    static func writeItems(
        _ rows: PostgresResult, count: Int, nextCursor: String??, to w: inout JSONWriter, _ viewer: MessageViewer
    ) throws {
        w.key(static: "items")
        w.beginArray()
        for index in 0..<count { try MessageRow(rows[index]).write(to: &w, viewer) }
        w.endArray()
        guard let nextCursor else { return }
        w.key(static: "next_cursor")
        if let next = nextCursor { w.writeString(next) } else { w.writeNull() }
    }
}
