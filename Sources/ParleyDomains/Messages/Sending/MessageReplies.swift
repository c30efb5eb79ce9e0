import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The reply tree of a message (`GET /v1/messages/{message_id}/replies`, docs/messages.md#reactions-pins-and-replies):
/// its root and, page by page, the replies that count toward the root's `reply_count` and are visible to the caller.
///
/// A value made per request; it owns nothing mutable.
struct MessageReplies: DomainService {
    /// The request's connection (its worker thread's): reads run on it.
    let db: PostgresConnection
    let appID: String
    /// Server-clock ms of the request.
    let now: Int64

    /// The root of a tree as the replies list shows it.
    struct Root {
        var messageID: String
        /// `normal`, `deleted` (revoked or deleted for everyone) or `not_found` (purged), as a reply's `reply.state`.
        var state: String
        var replyCount: Int64
        /// The root as the viewer sees it (tombstones included); nil when it is gone or not visible to the viewer.
        var message: Message?
        /// The message the list was asked for (the root itself, or a reply in its tree): its conversation is the tree's.
        var asked: Message
    }

    /// The root of `messageID`'s tree (the message itself when it is no reply), for a message visible to `viewer`
    /// (else 404 `message_not_found`).
    func root(of messageID: String, viewer: MessageViewer) throws -> Root {
        let service = MessageService(db: db, appID: appID, now: now)
        let message = try service.get(messageID, viewer: viewer, on: db)
        guard let rootID = message.rootMessageID else {
            return Root(
                messageID: message.messageID, state: Self.state(of: message), replyCount: message.replyCount, message: message, asked: message)
        }
        guard let root = try MessageStore.fetch(appID: appID, messageID: rootID, on: db) else {
            return Root(messageID: rootID, state: "not_found", replyCount: 0, message: nil, asked: message)
        }
        let visible = try service.isVisible(root, to: viewer, on: db)
        return Root(
            messageID: rootID, state: Self.state(of: root), replyCount: root.replyCount, message: visible ? root : nil, asked: message)
    }

    /// A root's state: `deleted` once revoked or deleted for everyone.
    static func state(of message: Message) -> String {
        message.deleted || message.type == MessageType.revoke.rawValue ? "deleted" : "normal"
    }

    /// Up to `limit` replies of `root`'s tree after `afterSeq`, by seq: the counted ones (not revoked, not deleted for
    /// everyone) visible to `viewer` — for a user, not deleted for it, not another user's suppressed message nor a
    /// targeted one that does not list it, and in a room only those of the room's current life. The root is never its
    /// own reply.
    func replies(of root: Root, viewer: MessageViewer, afterSeq: Int64, limit: Int) throws -> PostgresResult {
        var floor = afterSeq
        var userID: String?
        if case .user(let id) = viewer {
            userID = id
            if root.asked.conversationType == .room {
                floor = max(floor, try RoomAccess.fetch(appID: appID, roomID: root.asked.to, userID: id, on: db)?.firstSeq ?? 0)
            }
        }
        return try db.query(
            """
            SELECT \(unsafeSQL: MessageStore.columns("m")) FROM messages m
            WHERE m.app_id = \(appID) AND m.root_message_id = \(root.messageID) AND m.seq > \(floor)
              AND m.type <> \(MessageType.revoke.rawValue) AND NOT m.deleted
              AND (\(userID)::text IS NULL OR m.suppressed IS NULL OR m.sender = \(userID))
              AND (\(userID)::text IS NULL OR m.visible_to IS NULL OR m.sender = \(userID) OR \(userID) = ANY(m.visible_to))
              AND (\(userID)::text IS NULL OR NOT EXISTS (SELECT 1 FROM message_hidden h
                    WHERE h.app_id = m.app_id AND h.message_id = m.message_id AND h.user_id = \(userID)))
            ORDER BY m.seq LIMIT \(limit)
            """)
    }
}
