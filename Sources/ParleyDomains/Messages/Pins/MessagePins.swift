import ParleyAPI
import ParleyCore
import ParleyPostgres

/// Message pins (docs/messages.md#reactions-pins-and-replies): pin and unpin a stored peer or group message (with
/// `message.pin_updated` and a tips message, docs/groups.md#tips-messages), and a conversation's pinned messages.
///
/// A value made per request; it owns nothing mutable.
struct MessagePins: DomainService {
    /// The request's connection (its worker thread's): reads run on it and transactions open on it.
    let db: PostgresConnection
    let appID: String
    /// Server-clock ms of the request.
    let now: Int64

    /// Pinned messages per conversation (more: 422 `7000205`).
    static let limit: Int64 = 20

    /// Types that cannot be pinned: never stored (2, 20), revoked (31) and tips (32).
    static let unpinnableTypes: Set<Int64> = [2, 20, MessageType.revoke.rawValue, MessageType.tips.rawValue]

    /// Pins (`pinned` true) or unpins message `messageID` for `operatorID` (nil: the app itself, no permission
    /// check) and returns it as it is now. A pin that changes nothing writes nothing.
    ///
    /// Locks the conversation's seq head before the message row, the order a send replying to the message takes
    /// them in; the seq head also makes the 20-pin count race-free (every pin of the conversation takes it first).
    func set(_ messageID: String, pinned: Bool, operatorID: String?) throws -> Message {
        try db.transaction { db in
            guard let seen = try MessageStore.fetch(appID: appID, messageID: messageID, on: db) else {
                throw MessageService.notFound(messageID)
            }
            let threadID = MessageStore.thread(seen.conversationType, seen.from, seen.to)
            try db.query(
                """
                SELECT 1 FROM conversation_seqs
                WHERE app_id = \(appID) AND conv_type = \(seen.conversationType.rawValue) AND conv_id = \(threadID) FOR UPDATE
                """)
            guard let message = try MessageStore.lock(appID: appID, messageID: messageID, on: db), !message.deleted else {
                throw MessageService.notFound(messageID)
            }
            if message.conversationType == .room || !message.stored || Self.unpinnableTypes.contains(message.type) {
                throw APIError(.unsupportedOperation, "message \(messageID) cannot be pinned (room, unstored, revoked or tips message)")
            }
            let service = MessageService(db: db, appID: appID, now: now)
            if let operatorID, try !service.isVisible(message, to: .user(operatorID), on: db) {
                throw MessageService.notFound(messageID)
            }
            // The tips' sender when the app acts alone: the group owner, or the pinned message's sender.
            var fallbackFrom = message.from
            if message.conversationType == .group {
                guard let group = try Self.group(appID: appID, groupID: message.to, userID: operatorID, on: db) else {
                    throw MessageService.notFound(messageID)
                }
                if group.dismissed { throw APIError.groupDismissed(message.to) }
                // Owner (1) or admin (2); anyone else of the group may not
                // (docs/messages.md#reactions-pins-and-replies).
                if operatorID != nil, !(group.role.map { $0 == 1 || $0 == 2 } ?? false) {
                    throw APIError(.messagePermissionDenied, "only the group owner or an admin may pin or unpin messages")
                }
                fallbackFrom = group.ownerID
            }
            // Either peer participant may pin: visibility already asked that.
            if (message.pinnedAt != nil) == pinned { return message }
            if pinned {
                let count =
                    try db.query(
                        """
                        SELECT count(*) FROM messages
                        WHERE app_id = \(appID) AND conv_type = \(message.conversationType.rawValue) AND conv_id = \(threadID)
                          AND pinned_at IS NOT NULL
                        """
                    ).decodeFirst(Int64.self) ?? 0
                if count >= Self.limit {
                    throw APIError(.pinLimit, "the conversation already has \(Self.limit) pinned messages")
                }
            }
            var updated = message
            updated.pinnedAt = pinned ? now : nil
            updated.pinnedBy = pinned ? operatorID : nil
            try db.query(
                """
                UPDATE messages SET pinned_at = \(updated.pinnedAt), pinned_by = \(updated.pinnedBy)
                WHERE app_id = \(appID) AND message_id = \(messageID)
                """)
            let tips = PinTips(message: updated, isPinned: pinned, operatorID: operatorID, fallbackFrom: fallbackFrom)
            let events = [
                MessageAudience.event("message.pin_updated", data: Self.eventData(updated, operatorID: operatorID), about: updated),
                try tips.write(appID: appID, now: now, on: db),
            ]
            try EventLog.append(events, appID: appID, now: now, on: db)
            return updated
        }
    }

    /// `message.pin_updated` data: `{message_id, conversation_type, to, pinned, operator}`.
    static func eventData(_ message: Message, operatorID: String?) -> [UInt8] {
        var o = JSONObjectWriter(capacity: 192)
        o["message_id"] = message.messageID
        o["conversation_type"] = message.conversationType.rawValue
        o["to"] = message.to
        if let at = message.pinnedAt {
            o.write("pinned") { w in
                w.object { w in
                    w.key("by")
                    if let by = message.pinnedBy { w.writeString(by) } else { w.writeNull() }
                    w.key("at")
                    w.writeInt(at)
                }
            }
        } else {
            o["pinned"] = nil
        }
        o["operator"] = operatorID
        return o.finish()
    }

    /// Group `groupID`'s owner, whether it is dismissed and `userID`'s role in it (nil: not a member, or no user);
    /// nil when there is no such group. Read by SQL: messages sit below the group domain.
    static func group(appID: String, groupID: String, userID: String?, on db: PostgresConnection) throws
        -> (ownerID: String, dismissed: Bool, role: Int64?)?
    {
        try db.query(
            """
            SELECT g.owner_id, g.dismissed_at IS NOT NULL,
                   (SELECT m.role::bigint FROM group_members m WHERE m.app_id = g.app_id AND m.group_id = g.group_id AND m.user_id = \(userID))
            FROM groups g WHERE g.app_id = \(appID) AND g.group_id = \(groupID)
            """
        ).decodeFirst((String, Bool, Int64?).self).map { (ownerID: $0.0, dismissed: $0.1, role: $0.2) }
    }

    // MARK: - The pins of a conversation

    /// The pinned messages of `userID`'s conversation `type`/`id` visible to it, by `pinned_at` desc then `seq` desc,
    /// as rows in ``MessageColumn`` order. The history's access rules (docs/messages.md#history): the user exists
    /// (404), a group exists (404), is not dismissed (409) and has the user as a member (403).
    func list(_ type: ConversationType, id: String, userID: String) throws -> PostgresResult {
        try UserService.requireActive(userID, appID: appID, on: db)
        if type == .group {
            try MessageService(db: db, appID: appID, now: now).requireGroupHistory(id, viewer: userID, on: db)
        }
        let threadID = MessageStore.thread(type, userID, id)
        // At most 20 rows (the pin limit): the visibility filters run on the pinned rows only.
        return try db.query(
            """
            SELECT \(unsafeSQL: MessageStore.columns("m")) FROM messages m
            WHERE m.app_id = \(appID) AND m.conv_type = \(type.rawValue) AND m.conv_id = \(threadID) AND m.pinned_at IS NOT NULL
              AND (m.suppressed IS NULL OR m.sender = \(userID))
              AND (m.visible_to IS NULL OR m.sender = \(userID) OR \(userID) = ANY(m.visible_to))
              AND NOT EXISTS (SELECT 1 FROM message_hidden h WHERE h.app_id = m.app_id AND h.message_id = m.message_id AND h.user_id = \(userID))
            ORDER BY m.pinned_at DESC, m.seq DESC
            """)
    }
}
