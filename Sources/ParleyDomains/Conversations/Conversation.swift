import ParleyAPI
import ParleyCore

/// One user's conversation entry (docs/conversations.md#the-conversation-object) as read, with its derived counts and
/// last message.
struct Conversation: Sendable {
    var userID: String
    package var type: String
    var id: String
    var threadID: String
    package var name: String
    var avatarURL: String
    var alias: String
    /// Derived (docs/messages.md#unread-read-state-and-mentions): countable messages in (`readSeq`, `lastSeq`].
    var unreadCount: Int64
    var readSeq: Int64
    var lastSeq: Int64
    var lastMessage: Message?
    var orderKey: Int64
    var pinned: Bool
    var notificationStatus: String
    var draft: String
    var draftUpdatedAt: Int64
    var marks: [Int]
    /// The JSON array of unread mention items `[{message_id, seq, from, type}]`, derived like the unread count.
    var mentionItems: [UInt8]
    var mentionMe: Bool
    var mentionAll: Bool
    var clearedSeq: Int64
    /// A group entry whose owner is no longer a member (left, kicked, or the group dismissed): frozen at the
    /// group's head of that moment, still readable, patchable and deletable (docs/conversations.md).
    var disabled: Bool
    /// Group entries: the owner's member mute as stored (-1, 0 or ms); 0 for peers and former members.
    var mutedUntil: Int64
    package var createdAt: Int64
    var updatedAt: Int64

    /// The Conversation object as its owner sees it (`viewer`: the app or the owner) at `now` (a mute that has
    /// expired reads 0).
    func json(_ viewer: MessageViewer, now: Int64) -> [UInt8] {
        var o = JSONObjectWriter(capacity: 512 + draft.utf8.count + mentionItems.count)
        o["type"] = type
        o["id"] = id
        o["name"] = name
        o["avatar_url"] = avatarURL
        o["alias"] = alias
        o["unread_count"] = unreadCount
        o["read_seq"] = readSeq
        o["last_seq"] = lastSeq
        if let lastMessage { o.raw("last_message", lastMessage.json(viewer)) } else { o["last_message"] = nil }
        o["order_key"] = orderKey
        o["pinned"] = pinned
        o["notification_status"] = notificationStatus
        o["draft"] = draft
        o["draft_updated_at"] = draftUpdatedAt
        o["marks"] = marks
        o.write("mention") { w in
            w.object { w in
                w.key("me")
                w.writeBool(mentionMe)
                w.key("all")
                w.writeBool(mentionAll)
                w.key("items")
                w.writeRaw(mentionItems)
            }
        }
        o["disabled"] = disabled
        o["muted_until"] = mutedUntil == -1 || mutedUntil > now ? mutedUntil : 0
        o["cleared_seq"] = clearedSeq
        o["created_at"] = createdAt
        o["updated_at"] = updatedAt
        return o.finish()
    }
}
