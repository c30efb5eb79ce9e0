import ParleyAPI
import ParleyCore
import ParleyPostgres
import ParleySync

/// The reaction rules (docs/messages.md#reactions-pins-and-replies): adding and removing a user's reaction to a stored
/// message, and the reactors of one reaction type.
///
/// A change is checked on the request's connection (the user, the message's visibility), then queued per message on
/// the node's ``Changes``: one runner per message sends the queued changes together to `parley_reaction_changes`
/// (Migrations/functions), one statement that is its own transaction. It locks the message row once, changes
/// `message_reactions` and the per-type counts (Migrations/0018) item by item, appends each change's
/// `message.reactions_updated` with the summary after it and stores the last summary in `messages.reactions`.
/// Changes of one message are serialised by the row lock (across nodes too), so the summary and the 50-type limit are
/// exact and every change writes exactly one event with the counts it made; the lock is held for that one call and its
/// commit, for a whole batch.
///
/// A value made per request; it owns nothing mutable. Transaction bodies are re-runnable.
struct MessageReactions: DomainService {
    /// The request's connection (its worker thread's).
    let db: PostgresConnection
    let appID: String
    /// Server-clock ms of the request.
    let now: Int64

    /// Distinct reaction types one message may carry (more: 422 `7000211`).
    static let maxTypes = 50
    /// Bytes of a `reaction_type` (docs/messages.md#reactions-pins-and-replies).
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

    /// One checked change, waiting for its message's batch.
    struct Change: Sendable {
        /// The message as the checks read it: only its id and conversation, which never change, are used.
        var message: Message
        var userID: String
        var reactionType: String
        var adding: Bool
        /// The user token's user, whose answer carries `self_included` (docs/messages.md#sending); nil for the app.
        var viewerID: String?
        /// Server-clock ms of the request: `reacted_at` and the event's time.
        var now: Int64
    }

    /// `POST /v1/messages/{message_id}/reactions`: `userID` is to add `reactionType`; the change's answer is the new
    /// summary, with `self_included` for `viewer` when it is a user.
    func adding(_ messageID: String, userID: String, reactionType: String, viewer: MessageViewer) throws -> Change {
        var viewerID: String?
        if case .user(let id) = viewer { viewerID = id }
        return Change(
            message: try reactable(messageID, userID: userID), userID: userID, reactionType: reactionType, adding: true, viewerID: viewerID,
            now: now)
    }

    /// `DELETE /v1/messages/{message_id}/reactions/{reaction_type}?user_id=`: `userID` is to remove its `reactionType`.
    func removing(_ messageID: String, userID: String, reactionType: String) throws -> Change {
        Change(message: try reactable(messageID, userID: userID), userID: userID, reactionType: reactionType, adding: false, viewerID: nil, now: now)
    }

    /// The node's reaction changes, queued per message and written a batch per statement by one pool worker at a
    /// time per message (``KeyedBatcher``). Owner: the route table that made it.
    final class Changes: Sendable {
        /// Changes per statement: a bound on the lock time of one batch, not a wait.
        static let maxBatch = 64
        private let batches: KeyedBatcher<Change, [UInt8]>

        init(pool: PostgresPool) {
            batches = KeyedBatcher(pool: pool, maxBatch: Self.maxBatch) { changes, appID, db in
                try MessageReactions.write(changes, appID: appID, on: db)
            }
        }

        /// Queues `change` (of the app `appID`); `done` runs on a pool worker once its batch is written.
        func submit(_ change: Change, appID: String, done: @escaping @Sendable (Result<[UInt8], any Error>) -> Void) {
            batches.submit(change, appID: appID, key: appID + "\u{0}" + change.message.messageID, done: done)
        }
    }

    /// What `parley_reaction_changes` answers for an item besides a change (its `outcome`).
    /// The `outcome` column of `parley_reaction_changes`, which stays a number: the function's return type is shared
    /// with the previous release's binary while both run (its file replaces the function in place), so a named
    /// outcome needs a function under a new name in one release and the old one dropped in the next.
    private enum Outcome: Int64 {
        case changed = 0
        case messageNotFound, noReactions, typeLimit, exists, notFound
    }

    /// Writes `changes` (all of one message, in order) in one statement, its own transaction (the locked part, see
    /// `parley_reaction_changes`); returns each change's summary (with `self_included` for its viewer) or problem.
    static func write(_ changes: [Change], appID: String, on db: PostgresConnection) throws -> [Result<[UInt8], any Error>] {
        guard let message = changes.first?.message else { return [] }
        // The events' data up to the summary, which the function appends with the closing brace.
        var data = JSONObjectWriter(capacity: 128)
        data["message_id"] = message.messageID
        data["conversation_type"] = message.conversationType.rawValue
        data["to"] = message.to
        var prefix = data.finish()
        prefix.removeLast()
        prefix += Array(#","reactions":"#.utf8)
        let event = MessageAudience.event("message.reactions_updated", data: [], about: message)
        let rows = try db.query(
            sql: """
                SELECT outcome, summary, viewer_summary
                FROM parley_reaction_changes($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
                """,
            [
                appID, message.messageID, changes.map(\.userID), changes.map(\.reactionType), changes.map(\.now), changes.map(\.adding),
                changes.map { $0.viewerID ?? "" }, maxTypes, String(decoding: prefix, as: UTF8.self), event.audience, event.groupID,
                event.roomID, event.toGroupMembers, event.orderKey,
            ], prepared: true
        ).decode((Int64, PostgresCell, PostgresCell).self)  // the summaries stay cells: a change copies only the one it answers with
        guard rows.count == changes.count else { throw APIError(.internalError, "parley_reaction_changes answered \(rows.count) rows") }
        return try zip(changes, rows).map { change, row in
            let (outcome, summary, viewerSummary) = row
            switch Outcome(rawValue: outcome) {
            case .changed: return .success(try (change.viewerID == nil ? summary : viewerSummary).textBytes)
            case let outcome: return .failure(problem(outcome, change))
            }
        }
    }

    /// The problem of a change the function refused.
    private static func problem(_ outcome: Outcome?, _ change: Change) -> APIError {
        let (messageID, userID, reactionType) = (change.message.messageID, change.userID, change.reactionType)
        switch outcome {
        // Revoked or deleted between the checks and the lock: as if the checks had seen it.
        case .messageNotFound, .changed: return MessageService.notFound(messageID)
        case .noReactions:
            // A revoked or tips message holds no reactions to remove (revoke drops them,
            // docs/messages.md#revoke-edit-delete): the DELETE route's contract lists 404 `reaction_not_found` for
            // that.
            if !change.adding { return APIError(.reactionNotFound, "message \(messageID) holds no reactions") }
            return APIError(.unsupportedOperation, "message \(messageID) is revoked or a tips message: it takes no reactions")
        case .typeLimit: return APIError(.reactionTypeLimit, "message \(messageID) already has \(maxTypes) reaction types")
        case .exists: return APIError(.reactionExists, "user \(userID) already reacted \(reactionType) to message \(messageID)")
        case .notFound, nil: return APIError(.reactionNotFound, "user \(userID) has no reaction \(reactionType) on message \(messageID)")
        }
    }

    /// The message `messageID` that `userID` may react to: 404 `message_not_found` when unknown or unstored, a
    /// tombstone, or not visible to the user (the routes turn it into 422 for a recent unstored id:
    /// ``MessageService/tellingUnstored(_:_:_:)``). Revoked and tips messages are refused by `parley_reaction_changes`
    /// (see ``problem(_:_:)``), which re-reads the row under its lock, as a revoke or delete may come between: these
    /// checks read before the lock, so a hot message's queue holds the lock only for the changes.
    private func reactable(_ messageID: String, userID: String) throws -> Message {
        guard let message = try MessageStore.fetch(appID: appID, messageID: messageID, on: db), !message.deleted, try isUser(userID, on: db),
            try MessageService(db: db, appID: appID, now: now).isVisible(message, to: .user(userID), on: db)
        else { throw MessageService.notFound(messageID) }
        return message
    }

    /// A live user: a reaction is always some user's, and an unknown or deleted one sees no message.
    private func isUser(_ userID: String, on db: PostgresConnection) throws -> Bool {
        guard let user = try UserStore.fetch(appID: appID, userID: userID, on: db) else { return false }
        return !user.isDeleted
    }

    // MARK: - Reads

    /// `message` as `viewer`'s answer shows it: for a user token its reaction summary carries `self_included`
    /// (docs/messages.md#sending); a message without reactions (the common case) costs nothing.
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
        // Revoke and delete for everyone drop a message's reactions (docs/messages.md#revoke-edit-delete); its type or
        // tombstone answers for them.
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
                SELECT count FROM message_reaction_types
                WHERE app_id = \(appID) AND message_id = \(messageID) AND reaction_type = \(reactionType)
                """
            ).decodeFirst(Int64.self) ?? 0
        return (reactors, total)
    }

    // MARK: - SQL

    /// The summary as `userID`'s token sees it: with `self_included`.
    private static func summary(appID: String, messageID: String, selfIncludedFor userID: String, on db: PostgresConnection) throws
        -> [UInt8]
    {
        let summary = try db.query(
            sql: """
                SELECT parley_reaction_summary($1, $2, $3, coalesce(array_agg(reaction_type), '{}'), coalesce(array_agg(count), '{}'),
                                               coalesce(array_agg(first_at), '{}'))
                FROM message_reaction_types WHERE app_id = $1 AND message_id = $2
                """, [appID, messageID, userID], prepared: true
        ).decodeFirst(PostgresTextBytes.self)
        return summary?.bytes ?? Array("[]".utf8)
    }
}
