import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The reaction rules of API.md §11.6: adding and removing a user's reaction to a stored message, and the reactors
/// of one reaction type.
///
/// Every change locks the message row (``MessageStore/lock(appID:messageID:on:)``), changes `message_reactions`,
/// recomputes the summary column `messages.reactions` from that table in one statement and appends
/// `message.reactions_updated`, all in one transaction: concurrent reactions to one message queue on the row lock, so
/// the summary and the 50-type limit are exact and every change writes exactly one event with the summary it made.
///
/// A value made per request; it owns nothing mutable. Transaction bodies are re-runnable.
struct MessageReactions: DomainService {
    /// The request's connection (its worker thread's).
    let db: PostgresConnection
    let appID: String
    /// Server-clock ms of the request.
    let now: Int64

    /// Distinct reaction types one message may carry (§3.1 limits).
    static let maxTypes = 50
    /// Bytes of a `reaction_type` (§11.6).
    static let typeBytes = 1...32

    /// A reactor in `GET …/reactions/{reaction_type}/users`.
    struct Reactor: Sendable {
        var userID: String
        var name: String
        var reactedAt: Int64

        func json() -> [UInt8] {
            var o = JSONObjectWriter(capacity: 96)
            o["user_id"] = userID
            o["name"] = name
            o["reacted_at"] = reactedAt
            return o.finish()
        }
    }

    // MARK: - Changes

    /// `POST /v1/messages/{message_id}/reactions`: `userID` adds `reactionType`. Returns the new summary, with
    /// `self_included` for `viewer` when it is a user (§2: only in responses to a user token).
    func add(_ messageID: String, userID: String, reactionType: String, viewer: MessageViewer) throws -> [UInt8] {
        try db.transaction { db in
            let message = try reactable(messageID, userID: userID, on: db)
            // The locked row's summary lists every type the message holds (each change rebuilds it under this lock).
            let types = Self.types(inSummary: message.reactions)
            if !types.contains(reactionType) && types.count >= Self.maxTypes {
                throw APIError(.reactionTypeLimit, "message \(messageID) already has \(Self.maxTypes) reaction types")
            }
            let added =
                try db.query(
                    """
                    INSERT INTO message_reactions (app_id, message_id, reaction_type, user_id, reacted_at)
                    VALUES (\(appID), \(messageID), \(reactionType), \(userID), \(now))
                    ON CONFLICT DO NOTHING RETURNING 1
                    """
                ).first != nil
            if !added { throw APIError(.reactionExists, "user \(userID) already reacted \(reactionType) to message \(messageID)") }
            let summary = try changed(message, on: db)
            guard case .user(let viewerID) = viewer else { return summary }
            return try Self.summary(appID: appID, messageID: messageID, selfIncludedFor: viewerID, on: db)
        }
    }

    /// `DELETE /v1/messages/{message_id}/reactions/{reaction_type}?user_id=`: `userID` removes its `reactionType`.
    func remove(_ messageID: String, userID: String, reactionType: String) throws {
        try db.transaction { db in
            let message = try reactable(messageID, userID: userID, on: db, removing: true)
            let removed =
                try db.query(
                    """
                    DELETE FROM message_reactions
                    WHERE app_id = \(appID) AND message_id = \(messageID) AND reaction_type = \(reactionType) AND user_id = \(userID)
                    RETURNING 1
                    """
                ).first != nil
            guard removed else {
                throw APIError(.reactionNotFound, "user \(userID) has no reaction \(reactionType) on message \(messageID)")
            }
            _ = try changed(message, on: db)
        }
    }

    /// The locked message `messageID` that `userID` may react to, in the §1.4 order: 404 `message_not_found`
    /// (unknown or unstored, a tombstone, not visible to the user), then 422 `unsupported_operation` (revoked, tips).
    /// `removing`: a revoked or tips message holds no reactions to remove (revoke drops them, §11.5), so that is 404
    /// `reaction_not_found`, as the DELETE route's contract lists.
    private func reactable(_ messageID: String, userID: String, on db: PostgresConnection, removing: Bool = false) throws -> Message {
        // The user and visibility checks read before the row lock, so the queue of a hot message's reactions holds the
        // lock only for the change itself; the lock then re-reads the row (a revoke or delete may have come between).
        // An unstored message has no row, and the server keeps no index of unstored ids: like any unknown id, 404.
        guard let seen = try MessageStore.fetch(appID: appID, messageID: messageID, on: db), !seen.deleted, try isUser(userID, on: db),
            try MessageService(db: db, appID: appID, now: now).isVisible(seen, to: .user(userID), on: db),
            let message = try MessageStore.lock(appID: appID, messageID: messageID, on: db), !message.deleted
        else { throw MessageService.notFound(messageID) }
        if message.type == 31 || message.type == 32 {
            if removing { throw APIError(.reactionNotFound, "message \(messageID) holds no reactions") }
            throw APIError(
                .unsupportedOperation, "message \(messageID) is \(message.type == 31 ? "revoked" : "a tips message"): it takes no reactions")
        }
        return message
    }

    /// A live user: a reaction is always some user's, and an unknown or deleted one sees no message.
    private func isUser(_ userID: String, on db: PostgresConnection) throws -> Bool {
        guard let user = try UserStore.fetch(appID: appID, userID: userID, on: db) else { return false }
        return !user.isDeleted
    }

    /// Recomputes `message`'s summary column and appends its `message.reactions_updated`; returns the summary.
    private func changed(_ message: Message, on db: PostgresConnection) throws -> [UInt8] {
        let summary = try Self.storeSummary(appID: appID, messageID: message.messageID, on: db)
        var data = JSONObjectWriter(capacity: 128 + summary.count)
        data["message_id"] = message.messageID
        data["conversation_type"] = message.conversationType.rawValue
        data["to"] = message.to
        data.raw("reactions", summary)
        try EventLog.append(
            [MessageAudience.event("message.reactions_updated", data: data.finish(), about: message)], appID: appID, now: now, on: db)
        return summary
    }

    // MARK: - Reads

    /// `message` as `viewer`'s answer shows it: for a user token its reaction summary carries `self_included` (§2);
    /// a message without reactions (the common case) costs nothing.
    func forViewer(_ message: Message, _ viewer: MessageViewer) throws -> Message {
        guard case .user(let userID) = viewer, message.reactions != Array("[]".utf8) else { return message }
        var viewed = message
        viewed.reactions = try Self.summary(appID: appID, messageID: message.messageID, selfIncludedFor: userID, on: db)
        return viewed
    }

    /// `GET /v1/messages/{message_id}/reactions/{reaction_type}/users`: a page of the type's reactors after `after`
    /// (by `reacted_at`, then `user_id`) and how many it has. The message must be visible to `viewer`; a tombstone
    /// has no reactions left, so it answers an empty list.
    func reactors(
        _ messageID: String, reactionType: String, viewer: MessageViewer, after: (Int64, String)?, limit: Int
    ) throws -> (reactors: [Reactor], total: Int64) {
        guard let message = try MessageStore.fetch(appID: appID, messageID: messageID, on: db) else {
            throw MessageService.notFound(messageID)
        }
        let service = MessageService(db: db, appID: appID, now: now)
        guard try service.isVisible(message, to: viewer, on: db) else { throw MessageService.notFound(messageID) }
        // Revoke and delete for everyone drop a message's reactions (§11.5); its type or tombstone answers for them.
        if message.deleted || message.type == 31 { return ([], 0) }
        var query: PostgresQuery = """
            SELECT r.user_id, coalesce(u.name, ''), r.reacted_at
            FROM message_reactions r LEFT JOIN users u ON u.app_id = r.app_id AND u.user_id = r.user_id
            WHERE r.app_id = \(appID) AND r.message_id = \(messageID) AND r.reaction_type = \(reactionType)
            """
        if let (t, id) = after {
            query += " AND (r.reacted_at, r.user_id COLLATE \"C\") > (\(t), \(id) COLLATE \"C\")"
        }
        query += " ORDER BY r.reacted_at, r.user_id COLLATE \"C\" LIMIT \(limit)"
        let reactors = try db.query(query).decode((String, String, Int64).self).map {
            Reactor(userID: $0.0, name: $0.1, reactedAt: $0.2)
        }
        let total =
            try db.query(
                """
                SELECT count(*) FROM message_reactions
                WHERE app_id = \(appID) AND message_id = \(messageID) AND reaction_type = \(reactionType)
                """
            ).decodeFirst(Int64.self) ?? 0
        return (reactors, total)
    }

    // MARK: - SQL

    /// The summary of `messages.reactions` (§2 `reactions`) computed from `message_reactions` of message `$1`/`$2`:
    /// `[{reaction_type, count, user_ids}]` ordered by each type's earliest current `reacted_at`, then `reaction_type`
    /// (bytes); `user_ids` the first 10 reactors by time, then id (read from the users-list index). `selfIncluded`
    /// adds `self_included` for the user bound as `$3`.
    private static func summarySQL(selfIncluded: Bool) -> String {
        let selfMember =
            selfIncluded
            ? """
            || ',"self_included":' || (EXISTS (SELECT 1 FROM message_reactions s WHERE s.app_id = $1 AND s.message_id = $2
                                              AND s.reaction_type = t.reaction_type AND s.user_id = $3))::text
            """ : ""
        return """
            SELECT coalesce('[' || string_agg(
                       '{"reaction_type":' || to_json(t.reaction_type)::text || ',"count":' || t.n
                       || ',"user_ids":' || array_to_json(f.user_ids)::text \(selfMember) || '}',
                       ',' ORDER BY t.first_at, t.reaction_type COLLATE "C") || ']', '[]')
            FROM (SELECT reaction_type, count(*) AS n, min(reacted_at) AS first_at FROM message_reactions
                  WHERE app_id = $1 AND message_id = $2 GROUP BY reaction_type) t
            CROSS JOIN LATERAL (
                SELECT array_agg(r.user_id ORDER BY r.reacted_at, r.user_id COLLATE "C") AS user_ids
                FROM (SELECT user_id, reacted_at FROM message_reactions
                      WHERE app_id = $1 AND message_id = $2 AND reaction_type = t.reaction_type
                      ORDER BY reacted_at, user_id COLLATE "C" LIMIT 10) r) f
            """
    }

    private static let storedSummarySQL = summarySQL(selfIncluded: false)
    private static let viewerSummarySQL = summarySQL(selfIncluded: true)

    /// Recomputes and stores the message's summary column (its row is locked); returns it.
    private static func storeSummary(appID: String, messageID: String, on db: PostgresConnection) throws -> [UInt8] {
        let row = try db.query(
            sql: "UPDATE messages SET reactions = (\(storedSummarySQL)) WHERE app_id = $1 AND message_id = $2 RETURNING reactions",
            [appID, messageID], prepared: true
        ).first
        guard let row else { throw APIError(.internalError, "message \(messageID) vanished under its lock") }
        return try row[0].textBytes
    }

    /// The summary as `userID`'s token sees it: with `self_included`.
    private static func summary(appID: String, messageID: String, selfIncludedFor userID: String, on db: PostgresConnection) throws
        -> [UInt8]
    {
        guard let row = try db.query(sql: viewerSummarySQL, [appID, messageID, userID], prepared: true).first else { return Array("[]".utf8) }
        return try row[0].textBytes
    }

    /// The reaction types a stored summary (`[{reaction_type, count, user_ids}]`) lists.
    private static func types(inSummary summary: [UInt8]) -> Set<String> {
        guard case .array(let items) = (try? JSONValue.parse(summary)) ?? .null else { return [] }
        return Set(items.compactMap { $0["reaction_type"]?.stringValue })
    }
}
