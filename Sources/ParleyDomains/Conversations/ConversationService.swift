import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The rules of conversation entries (docs/conversations.md, docs/messages.md#unread-read-state-and-mentions):
/// settings, deletion, read positions and marks. Each change runs in one transaction that writes its events last
/// (docs/events.md#the-event-object).
///
/// A value made per request; it owns nothing mutable. Transaction bodies are re-runnable.
struct ConversationService: DomainService {
    /// The request's connection (its worker thread's): reads run on it and transactions open on it.
    let db: PostgresConnection
    let appID: String
    /// Server-clock ms of the request.
    let now: Int64

    /// Most pinned entries per user (more: 422 `6000604`).
    static let maxPinned = 100

    static func notFound(_ type: String, _ id: String) -> APIError {
        APIError(.conversationNotFound, "conversation \(type):\(id) not found")
    }

    /// The live entry, else 404 `conversation_not_found`.
    func get(userID: String, type: String, id: String, on db: PostgresConnection) throws -> Conversation {
        guard let c = try ConversationStore.fetch(appID: appID, userID: userID, type: type, id: id, on: db) else {
            throw Self.notFound(type, id)
        }
        return c
    }

    /// The settable fields of `PATCH …/conversations/{type}/{id}` (nil = unchanged).
    struct Patch {
        var pinned: Bool?
        var notificationStatus: String?
        var draft: String?
        /// Group entries only: the member's own alias for the group.
        var alias: String?
    }

    /// Applies `patch`, creating the entry when absent (peer: the other user must exist; group: the user must be a
    /// member, else 403 `not_group_member`); 404 `user_not_found` for an unknown or soft-deleted user; `conversation.updated` lists the fields whose value changed. A
    /// disabled group entry can still be patched, but `alias` lives on the member row and is ignored once the user
    /// is no longer a member.
    func update(userID: String, type: String, id: String, patch: Patch) throws -> Conversation {
        try db.transaction { db in
            // Like the list, an unknown or soft-deleted user's entries are 404 (and a new entry's row references its
            // user: without this a patch for a user that does not exist failed on the foreign key).
            try UserService.requireActive(userID, appID: appID, on: db)
            let memberAlias =
                type == "group" ? try ConversationStore.lockMemberAlias(appID: appID, userID: userID, groupID: id, on: db) : nil
            var current = try ConversationStore.lock(appID: appID, userID: userID, type: type, id: id, on: db)
            if current == nil {
                if type == "group" {
                    guard memberAlias != nil else { throw APIError(.notGroupMember, "user \(userID) is not a member of group \(id)") }
                    _ = try ConversationStore.createGroupEntry(appID: appID, userID: userID, groupID: id, now: now, on: db)
                } else {
                    guard let other = try UserStore.fetch(appID: appID, userID: id, on: db), !other.isDeleted else {
                        throw APIError(.targetNotFound, "user \(id) does not exist")
                    }
                    try ConversationStore.create(
                        appID: appID, userID: userID, type: type, id: id, threadID: MessageStore.peerThread(userID, id), now: now, on: db)
                }
                current = try ConversationStore.lock(appID: appID, userID: userID, type: type, id: id, on: db)
            }
            guard let current else { throw APIError.internalError }
            var changed: [String] = []
            if let pinned = patch.pinned, pinned != current.pinned || current.deleted {
                if pinned, try ConversationStore.pinnedCount(appID: appID, userID: userID, on: db) >= Self.maxPinned {
                    throw APIError(.conversationPinLimit, "at most \(Self.maxPinned) conversations may be pinned")
                }
                if pinned != current.pinned { changed.append("pinned") }
            }
            if let status = patch.notificationStatus, status != current.notificationStatus { changed.append("notification_status") }
            if let draft = patch.draft, draft != current.draft { changed.append("draft") }
            if let alias = patch.alias, let memberAlias, alias != memberAlias {
                try ConversationStore.setMemberAlias(appID: appID, userID: userID, groupID: id, alias: alias, on: db)
                changed.append("alias")
            }
            try ConversationStore.update(
                appID: appID, userID: userID, type: type, id: id, pinned: patch.pinned, notificationStatus: patch.notificationStatus,
                draft: patch.draft, now: now, on: db)
            let conversation = try get(userID: userID, type: type, id: id, on: db)
            if !changed.isEmpty {
                var data = JSONObjectWriter()
                data["user_id"] = userID
                // The app view (its user's stream and log show the user view,
                // docs/events.md#two-views-of-the-same-event).
                data.raw("conversation", conversation.json(.app, now: now))
                data["changed"] = changed
                try EventLog.append(
                    [NewEvent(type: "conversation.updated", data: data.finish(), audience: [userID], orderKey: userID)], appID: appID,
                    now: now, on: db)
            }
            return conversation
        }
    }

    /// Deletes the entry until the next message (docs/conversations.md); `conversation.deleted` to the user.
    package func delete(userID: String, type: String, id: String, deleteMessages: Bool) throws {
        try db.transaction { db in
            guard try ConversationStore.delete(appID: appID, userID: userID, type: type, id: id, clearHistory: deleteMessages, now: now, on: db)
            else { throw Self.notFound(type, id) }
            var data = JSONObjectWriter(capacity: 128)
            data["user_id"] = userID
            data["conversation_type"] = type
            data["conversation_id"] = id
            data["delete_messages"] = deleteMessages
            try EventLog.append(
                [NewEvent(type: "conversation.deleted", data: data.finish(), audience: [userID], orderKey: userID)], appID: appID,
                now: now, on: db)
        }
    }

    /// Marks one entry read up to `seq` (default `last_seq`); read_seq never goes back
    /// (docs/messages.md#unread-read-state-and-mentions).
    func markRead(userID: String, type: String, id: String, seq: Int64?) throws -> Conversation {
        try db.transaction { db in
            guard try ConversationStore.lock(appID: appID, userID: userID, type: type, id: id, on: db)?.deleted == false else {
                throw Self.notFound(type, id)
            }
            let moved = try ConversationStore.markRead(appID: appID, userID: userID, keys: [(type, id)], seq: seq, now: now, on: db)
            let conversation = try get(userID: userID, type: type, id: id, on: db)
            // Receipts up to the read position even when it did not move: the user's own sends move it past others'
            // messages without marking them read (docs/messages.md#unread-read-state-and-mentions).
            let read = MessageReceipts.ReadRange(conversationType: type, threadID: conversation.threadID, throughSeq: conversation.readSeq)
            try EventLog.append(try readEvents(userID: userID, moved, receipts: [read]), appID: appID, now: now, on: db)
            return conversation
        }
    }

    /// Marks every entry of the user read; returns how many advanced. 404 `user_not_found` for an unknown or
    /// soft-deleted user, as the list and the unread count answer (not 0 conversations).
    func markAllRead(userID: String) throws -> Int {
        try db.transaction { db in
            try UserService.requireActive(userID, appID: appID, on: db)
            let moved = try ConversationStore.markRead(appID: appID, userID: userID, keys: nil, seq: nil, now: now, on: db)
            let receipts = moved.map { MessageReceipts.ReadRange(conversationType: $0.type, threadID: $0.threadID, throughSeq: $0.readSeq) }
            try EventLog.append(try readEvents(userID: userID, moved, receipts: receipts), appID: appID, now: now, on: db)
            return moved.count
        }
    }

    /// The events of a mark read: `conversation.read` per entry whose position moved, then `message.receipt_updated`
    /// per `need_receipt` message of `receipts` newly marked read by the user
    /// (docs/messages.md#unread-read-state-and-mentions, docs/messages.md#receipts).
    private func readEvents(userID: String, _ moved: [ConversationStore.ReadMove], receipts: [MessageReceipts.ReadRange]) throws
        -> [NewEvent]
    {
        let receiptEvents = try MessageReceipts(db: db, appID: appID, now: now).markRead(receipts, by: userID)
        return moved.map { readEvent(userID: userID, $0) } + receiptEvents
    }

    /// `conversation.read` to the reader and, for peers, the other participant (the C2C read receipt).
    private func readEvent(userID: String, _ move: ConversationStore.ReadMove) -> NewEvent {
        var data = JSONObjectWriter(capacity: 160)
        data["user_id"] = userID
        data["conversation_type"] = move.type
        data["conversation_id"] = move.id
        data["read_seq"] = move.readSeq
        data["read_at"] = now
        let audience = move.type == "peer" ? [userID, move.id] : [userID]
        return NewEvent(type: "conversation.read", data: data.finish(), audience: audience, orderKey: move.type + ":" + move.threadID)
    }

    /// Sets or clears `mark` on distinct entries; returns the keys that exist (changed or not). One
    /// `conversation.updated` per changed entry. 404 `user_not_found` for an unknown or soft-deleted user (not a
    /// batch of per-item misses).
    func setMark(userID: String, mark: Int64, enable: Bool, keys: [(type: String, id: String)]) throws -> Set<String> {
        try db.transaction { db in
            try UserService.requireActive(userID, appID: appID, on: db)
            let existing = try ConversationStore.fetchMany(appID: appID, userID: userID, keys: keys, on: db)
            let changed = try ConversationStore.setMark(appID: appID, userID: userID, keys: keys, mark: mark, enable: enable, now: now, on: db)
            let updated = try ConversationStore.fetchMany(appID: appID, userID: userID, keys: changed, on: db)
            let events = updated.map { c -> NewEvent in
                var data = JSONObjectWriter()
                data["user_id"] = userID
                data.raw("conversation", c.json(.app, now: now))
                data["changed"] = ["marks"]
                return NewEvent(type: "conversation.updated", data: data.finish(), audience: [userID], orderKey: userID)
            }
            try EventLog.append(events, appID: appID, now: now, on: db)
            return Set(existing.map { $0.type + ":" + $0.id })
        }
    }
}

// MARK: - Lists

extension ConversationService {
    typealias Filter = ConversationStore.Filter

    /// Up to `limit` of the user's live entries by `order_key` desc, then type desc, then id desc, after `after`;
    /// 404 `user_not_found` for an unknown or soft-deleted user (not an empty page).
    func list(userID: String, filter: Filter, after: (orderKey: Int64, type: String, id: String)?, limit: Int) throws -> [Conversation] {
        try UserService.requireActive(userID, appID: appID, on: db)
        return try ConversationStore.list(appID: appID, userID: userID, filter: filter, after: after, limit: limit, on: db)
    }

    /// The sum of the unread counts of the user's matching entries; 404 `user_not_found` for an unknown or
    /// soft-deleted user (not 0).
    func totalUnread(userID: String, filter: Filter) throws -> Int64 {
        try UserService.requireActive(userID, appID: appID, on: db)
        return try ConversationStore.totalUnread(appID: appID, userID: userID, filter: filter, on: db)
    }
}
