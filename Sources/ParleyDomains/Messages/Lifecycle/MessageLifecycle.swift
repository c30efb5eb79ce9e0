import ParleyAPI
import ParleyCore
import ParleyPostgres

/// Revoke, edit and delete (docs/messages.md#revoke-edit-delete) for stored peer, group and room messages.
///
/// Every change locks the message row, checks and writes in one transaction, and writes its events last:
/// `message.revoked` / `message.edited` / `message.deleted` to the message audience at commit, then a reply's root
/// `message.reply_count_updated`. The knock-on rules run in the same transaction: a revoked or deleted-for-everyone
/// message loses its mentions, reactions and pin, its replies' `reply.state` becomes `deleted` and their snapshot goes,
/// and its root's `reply_count` is recounted. Unread counts follow by themselves: they are counted from the rows
/// (ConversationStore `countable` leaves out type 31, deleted and hidden messages).
///
/// A value made per request; it owns nothing mutable.
struct MessageLifecycle {
    let service: MessageService
    var db: PostgresConnection { service.db }
    var appID: String { service.appID }
    var now: Int64 { service.now }
    /// The app's `revoke_window_s` and `edit_window_s` (docs/users.md#apps-and-settings), read at the time of the
    /// action.
    var revokeWindowS: Int64 = 120
    var editWindowS: Int64 = 86_400
    /// The app's `delete_files_with_messages`: a revoke or delete for everyone deletes the files only that message named
    /// (docs/files.md#files-in-messages).
    var deleteFiles = true
    /// Deletes the S3 objects of the files deleted with a message, after the commit.
    var removeObjects: MessageFiles.ObjectRemover

    init(_ ctx: APIContext) {
        service = MessageService(ctx)
        revokeWindowS = ctx.app.settings.int("revoke_window_s")
        editWindowS = ctx.app.settings.int("edit_window_s")
        deleteFiles = ctx.app.settings.bool("delete_files_with_messages")
        removeObjects = MessageFiles.objectRemover(ctx.services)
    }

    /// For a revoke written in a batch (``MessageRevokes``), with what its request read.
    init(service: MessageService, revokeWindowS: Int64, deleteFiles: Bool, removeObjects: @escaping MessageFiles.ObjectRemover) {
        self.service = service
        self.revokeWindowS = revokeWindowS
        self.deleteFiles = deleteFiles
        self.removeObjects = removeObjects
    }

    /// Who acts: a user (a token, or the app naming `operator`) or the app itself; `skipChecks` (app only) acts as
    /// the app whatever `operator` says, while `operator` is still recorded.
    struct Actor: Sendable {
        var userID: String?
        var skipChecks = false

        /// The app's own authority (an app key without a user, docs/users.md#user-tokens; or `skip_checks`).
        var isApp: Bool { userID == nil || skipChecks }
    }

    /// The actor of a revoke, edit or delete for everyone; 404 `user_not_found` when the acting user does not exist
    /// or is deleted.
    func actor(userID: String?, skipChecks: Bool) throws -> Actor {
        if let userID { try UserService.requireActive(userID, appID: appID, on: db) }
        return Actor(userID: userID, skipChecks: skipChecks)
    }

    // MARK: - Revoke

    /// `POST /v1/messages/{message_id}/revoke`: the message becomes a type-31 record in place, in a transaction of
    /// its own (``MessageRevokes`` writes a node's concurrent revokes a batch per transaction, with ``revokeLocked``).
    func revoke(_ messageID: String, by actor: Actor, extendedData: String, push: JSONValue?, revokePush: RevokePush) throws -> Message {
        try db.transaction { db in
            var events: [NewEvent]? = nil
            return try revokeLocked(messageID, by: actor, extendedData: extendedData, push: push, revokePush: revokePush, events: &events, on: db)
        }
    }

    /// The revoke inside the caller's transaction. Its events are written with the row's change (one round trip),
    /// or, when `events` is non-nil, added to it for the caller to append (a batch appends all of its events at
    /// once). Every problem it throws comes before its first write (the row lock is a read), so a batch can go on
    /// with its other revokes after one is refused.
    func revokeLocked(
        _ messageID: String, by actor: Actor, extendedData: String, push: JSONValue?, revokePush: RevokePush, events: inout [NewEvent]?,
        on db: PostgresConnection
    ) throws -> Message {
        let (message, isRepliedTo) = try lockForGone(messageID, by: actor, on: db)
        if message.type == MessageType.tips.rawValue {
            throw APIError(.unsupportedOperation, "tips messages cannot be revoked")
        }
        if message.type == MessageType.revoke.rawValue { throw APIError(.alreadyRevoked, "message \(messageID) is already revoked") }
        let status = try revokeStatus(message, by: actor, on: db)
        var body = JSONObjectWriter(capacity: 256 + extendedData.utf8.count)
        body["revoke_type"] = 0
        body["revoke_status"] = status
        body["revoked_at"] = now
        body["operator_id"] = actor.userID
        body["revoke_extended_data"] = extendedData
        body["original_type"] = message.type
        let originalText =
            message.type == MessageType.text.rawValue
            ? message.body.flatMap { try? JSONValue.parse($0) }?["text"]?.stringValue : nil
        let gone = MessageStore.Gone.revoked(body: body.finish(), originalText: originalText)
        // Rendered from the record the change makes, so it can go with the change.
        let event = MessageAudience.event("message.revoked", data: Self.wrapped(MessageStore.gone(message, gone)), about: message)
        guard
            let revoked = try MessageStore.markGone(
                appID: appID, message: message, isRepliedTo: isRepliedTo, gone, events: events == nil ? [event] : [], now: now, on: db)
        else { throw MessageService.notFound(messageID) }
        let effects = try goneEffects(message, on: db)
        if events == nil {
            try EventLog.append(effects, appID: appID, now: now, on: db)
        } else {
            events? += [event] + effects
        }
        try revokePush(db, appID, messageID, push, now)
        try RoomRecent.refresh(appID: appID, message: revoked, on: db)
        return revoked
    }

    /// The first rung of the revoke ladder (docs/messages.md#revoke-edit-delete) that allows `actor` to revoke
    /// `message`: the sender within `revoke_window_s` (0), the group owner (4), a group admin for a sender of role ≥ 3
    /// (3), the app (2).
    private func revokeStatus(_ message: Message, by actor: Actor, on db: PostgresConnection) throws -> Int64 {
        let withinWindow = revokeWindowS > 0 && now < message.timestamp + revokeWindowS * 1000
        if let userID = actor.userID, userID == message.from, withinWindow { return 0 }
        if let userID = actor.userID, message.conversationType == .group {
            let roles = try MessageStore.groupRoles(appID: appID, groupID: message.to, userIDs: [userID, message.from], on: db)
            if roles[userID] == 1 { return 4 }
            if roles[userID] == 2 && (roles[message.from] ?? Int64.max) >= 3 { return 3 }
        }
        if actor.isApp { return 2 }
        if actor.userID == message.from {
            throw APIError(.revokeWindowExpired, "the revoke window of \(revokeWindowS) s has passed")
        }
        throw APIError(.messagePermissionDenied, "user \(actor.userID ?? "") may not revoke this message")
    }

    // MARK: - Edit

    /// `PATCH /v1/messages/{message_id}`: a new body of the same type (1 or 200), re-validated and re-filtered, and
    /// checked by the app's blocklists (docs/blocklists.md#where-lists-apply): `block` and `shadow_block` refuse the
    /// edit (the original was delivered, so it cannot be hidden now), `mask` masks, and a hit goes to the hooks.
    func edit(
        _ messageID: String, by actor: Actor, body json: JSONValue, extendedData: String?, settings: AppSettings, blocklists: BlocklistCache?
    ) throws -> Message {
        let snapshot = actor.skipChecks ? nil : try blocklists?.snapshot(appID: appID, db: db)
        var check: BlocklistCheck?
        let edited: Message
        do {
            edited = try editing(messageID, by: actor, body: json, extendedData: extendedData, settings: settings) { body in
                guard let snapshot, !snapshot.isEmpty else { return }
                let result = MessageBlocklists.check(&body, against: snapshot)
                check = result.action == nil ? nil : result
                if result.action == .block || result.action == .shadowBlock { throw result.problem }
            }
        } catch let error as APIError where error.code == .contentBlocked {
            if let blocklists, let hit = check?.hit(appID: appID, userID: actor.userID, target: .refusedSend, at: now) { blocklists.report(hit) }
            throw error
        }
        if let blocklists, let check, case .object(let snapshot)? = try? JSONValue.parse(edited.json(.app)),
            let hit = check.hit(
                appID: appID, userID: actor.userID ?? edited.from, target: .message(messageID: messageID, snapshot: snapshot), at: now)
        {
            blocklists.report(hit)
        }
        return edited
    }

    private func editing(
        _ messageID: String, by actor: Actor, body json: JSONValue, extendedData: String?, settings: AppSettings,
        blocklist: (inout MessageBody) throws -> Void
    ) throws -> Message {
        try db.transaction { db in
            let message = try lockForChange(messageID, by: actor, on: db)
            if message.type == MessageType.revoke.rawValue { throw APIError(.alreadyRevoked, "message \(messageID) is revoked") }
            guard message.type == MessageType.text.rawValue || message.type == MessageType.custom.rawValue else {
                throw APIError(.unsupportedOperation, "only text (1) and custom (200) messages can be edited")
            }
            if !actor.isApp {
                guard actor.userID == message.from else {
                    throw APIError(.messagePermissionDenied, "only the sender may edit this message")
                }
                guard editWindowS > 0 && now < message.timestamp + editWindowS * 1000 else {
                    throw APIError(.editWindowExpired, "the edit window of \(editWindowS) s has passed")
                }
            }
            var body = try MessageBodyValidator.validate(
                type: message.type, body: json, textMaxBytes: Int(settings.int("text_max_bytes")))
            if !actor.skipChecks && SensitiveWordFilter(settings: settings).apply(to: &body) {
                throw APIError(.sensitiveWord, "the message contains a sensitive word")
            }
            if !actor.skipChecks { try blocklist(&body) }
            try MessageStore.saveEdit(
                appID: appID, message: message, body: body.json.serialized(), extendedData: extendedData ?? message.extendedData,
                editor: actor.userID, now: now, on: db)
            let edited = try refetch(messageID, on: db)
            try RoomRecent.refresh(appID: appID, message: edited, on: db)
            try EventLog.append(
                [MessageAudience.event("message.edited", data: Self.wrapped(edited), about: edited)], appID: appID, now: now, on: db)
            return edited
        }
    }

    /// `GET /v1/messages/{message_id}/edits`: the versions of a message the viewer can read, from `version` `from`
    /// on, oldest first; a message never edited has one, itself as it is.
    func edits(_ messageID: String, viewer: MessageViewer, from: Int, limit: Int) throws -> [(version: Int, json: [UInt8])] {
        let message = try service.get(messageID, viewer: viewer, on: db)
        if message.deleted { throw MessageService.notFound(messageID) }
        guard message.editCount == 0 else {
            return try MessageStore.edits(appID: appID, messageID: messageID, from: from, limit: limit, on: db)
        }
        guard from == 1 else { return [] }
        var o = JSONObjectWriter(capacity: 256 + (message.body?.count ?? 0))
        o["version"] = 1
        o.raw("body", message.body ?? Array("null".utf8))
        o["extended_data"] = message.extendedData
        o["edited_at"] = message.timestamp
        o["editor_id"] = message.from
        return [(1, o.finish())]
    }

    // MARK: - Delete

    enum DeleteScope: String, CaseIterable, Sendable {
        case `self`, everyone
    }

    /// `POST /v1/messages/delete`: one result per id; one `message.deleted` per distinct conversation of the
    /// messages deleted, listing them in request order.
    func delete(_ items: [BatchItem], scope: DeleteScope, userID: String?, by actor: Actor, revokePush: RevokePush) throws -> [BatchResult] {
        if let userID { try UserService.requireActive(userID, appID: appID, on: db) }
        return try db.transaction { db in
            var results: [BatchResult] = []
            var deleted: [(message: Message, id: String)] = []
            var effects: [NewEvent] = []
            for (index, item) in items.enumerated() {
                guard let messageID = item.userID else {
                    results.append(BatchResult(index: index, id: item.id, outcome: .failed(.invalidParams, item.problem ?? "invalid")))
                    continue
                }
                do {
                    switch scope {
                    case .self:
                        guard let userID else { throw APIError.internalError }
                        let message = try lockForChange(messageID, by: Actor(userID: userID), on: db)
                        try MessageStore.hide(appID: appID, message: message, from: userID, on: db)
                        deleted.append((message, messageID))
                    case .everyone:
                        deleted.append(
                            (try deleteForEveryoneLocked(messageID, by: actor, effects: &effects, revokePush: revokePush, on: db), messageID))
                    }
                    results.append(BatchResult(index: index, id: messageID, outcome: .ok(nil)))
                } catch let problem as APIError {
                    results.append(BatchResult(index: index, id: messageID, outcome: .failed(problem.code, problem.detail)))
                }
            }
            let events = Self.deletedEvents(deleted, scope: scope, userID: userID, operator: actor.userID)
            try EventLog.append(events + effects, appID: appID, now: now, on: db)
            return results
        }
    }

    /// Delete for everyone, by the app, of messages a bulk removal chose (docs/jobs.md#removing-a-users-messages),
    /// inside the caller's transaction (a step of its job): each message goes exactly as `POST /v1/messages/delete`
    /// with `scope` `everyone` deletes it (the row lock, the tombstone, the knock-on effects, the revoke push); ids
    /// already gone are skipped, and so are those a legal hold covers (docs/retention.md#legal-hold). One
    /// `message.deleted` per conversation per `perEvent` messages, in the order given. Returns the ids it deleted.
    func deleteForEveryone(_ messageIDs: [String], perEvent: Int, revokePush: RevokePush, on db: PostgresConnection) throws -> [String] {
        var deleted: [(message: Message, id: String)] = []
        var effects: [NewEvent] = []
        for messageID in messageIDs {
            do {
                deleted.append((try deleteForEveryoneLocked(messageID, by: Actor(), effects: &effects, revokePush: revokePush, on: db), messageID))
            } catch let problem as APIError where problem.code == .messageNotFound || problem.code == .legalHold {
                continue
            }
        }
        let events = Self.deletedEvents(deleted, scope: .everyone, userID: nil, operator: nil, perEvent: perEvent)
        try EventLog.append(events + effects, appID: appID, now: now, on: db)
        return deleted.map(\.id)
    }

    /// Deletes `messageID` for everyone in the caller's transaction: locks it, checks `actor` may, makes it a tombstone
    /// and runs the knock-on effects (their events added to `effects`); returns the message as it was.
    private func deleteForEveryoneLocked(
        _ messageID: String, by actor: Actor, effects: inout [NewEvent], revokePush: RevokePush, on db: PostgresConnection
    ) throws -> Message {
        let (message, isRepliedTo) = try lockForGone(messageID, by: actor, on: db)
        try requireDeleteForEveryone(message, by: actor, on: db)
        guard
            let tombstone = try MessageStore.markGone(
                appID: appID, message: message, isRepliedTo: isRepliedTo, .deleted, now: now, on: db)
        else {
            throw MessageService.notFound(messageID)
        }
        try RoomRecent.refresh(appID: appID, message: tombstone, on: db)
        effects += try goneEffects(message, on: db)
        try revokePush(db, appID, messageID, nil, now)
        return message
    }

    /// The `message.deleted` events of `deleted` (in order): one per distinct conversation, listing its ids, split every
    /// `perEvent` ids.
    private static func deletedEvents(
        _ deleted: [(message: Message, id: String)], scope: DeleteScope, userID: String?, operator: String?, perEvent: Int = .max
    ) -> [NewEvent] {
        var groups: [(key: String, message: Message, ids: [String])] = []
        var open: [String: Int] = [:]
        for (message, id) in deleted {
            let key = message.conversationType.rawValue + ":" + message.to
            if let i = open[key], groups[i].ids.count < perEvent {
                groups[i].ids.append(id)
            } else {
                open[key] = groups.count
                groups.append((key, message, [id]))
            }
        }
        return groups.map { group in
            let first = group.message
            var o = JSONObjectWriter(capacity: 256 + group.ids.count * 32)
            o["scope"] = scope.rawValue
            o["user_id"] = scope == .self ? userID : nil
            o["conversation_type"] = first.conversationType.rawValue
            o["to"] = first.to
            o["message_ids"] = JSONValue.array(group.ids.map(JSONValue.string))
            o["operator"] = scope == .everyone ? `operator` : nil
            return scope == .self
                ? NewEvent(type: "message.deleted", data: o.finish(), audience: [userID ?? ""], orderKey: userID ?? "")
                : MessageAudience.event("message.deleted", data: o.finish(), about: first)
        }
    }

    /// Delete for everyone is administrative (docs/messages.md#revoke-edit-delete): the app, the group owner (any group
    /// message), a group admin (senders of role ≥ 3); anyone else → 6000285.
    private func requireDeleteForEveryone(_ message: Message, by actor: Actor, on db: PostgresConnection) throws {
        if actor.isApp { return }
        if let userID = actor.userID, message.conversationType == .group {
            let roles = try MessageStore.groupRoles(appID: appID, groupID: message.to, userIDs: [userID, message.from], on: db)
            if roles[userID] == 1 { return }
            if roles[userID] == 2 && (roles[message.from] ?? Int64.max) >= 3 { return }
        }
        throw APIError(.messagePermissionDenied, "user \(actor.userID ?? "") may not delete this message for everyone")
    }

    // MARK: - Shared

    /// The revoke push of a message revoked or deleted for everyone (docs/push.md#what-is-pushed-to-whom), in its
    /// transaction; wired by the app layer to the push bridge (Push sits above Messages).
    typealias RevokePush =
        @Sendable (_ db: PostgresConnection, _ appID: String, _ messageID: String, _ push: JSONValue?, _ now: Int64)
        throws -> Void

    /// The stored message `messageID`, locked, for a change by `actor`: 404 `7000210` when unknown, a tombstone, or
    /// not visible to an acting user.
    private func lockForChange(_ messageID: String, by actor: Actor, on db: PostgresConnection) throws -> Message {
        try lockForChange(messageID, by: actor, probingReplies: false, on: db).message
    }

    /// ``lockForChange(_:by:on:)`` for a change that makes the message gone, with whether any message replies to it
    /// (for ``MessageStore/markGone(appID:message:isRepliedTo:_:on:)``).
    /// A message under a legal hold is never made gone: 409 `7000901` (docs/retention.md#legal-hold).
    private func lockForGone(_ messageID: String, by actor: Actor, on db: PostgresConnection) throws -> (message: Message, isRepliedTo: Bool) {
        let locked = try lockForChange(messageID, by: actor, probingReplies: true, on: db)
        try RetentionService.requireNotHeld(locked.message, appID: appID, on: db)
        return locked
    }

    private func lockForChange(
        _ messageID: String, by actor: Actor, probingReplies: Bool, on db: PostgresConnection
    ) throws -> (message: Message, isRepliedTo: Bool) {
        let locked =
            probingReplies
            ? try MessageStore.lockProbingReplies(appID: appID, messageID: messageID, on: db)
            : try MessageStore.lock(appID: appID, messageID: messageID, on: db).map { ($0, false) }
        guard let locked, !locked.message.deleted else { throw MessageService.notFound(messageID) }
        if let userID = actor.userID, !actor.skipChecks, try !service.isVisible(locked.message, to: .user(userID), on: db) {
            throw MessageService.notFound(messageID)
        }
        return locked
    }

    /// What a revoke or delete for everyone does beyond ``MessageStore/markGone(appID:message:isRepliedTo:_:on:)`` (the row and
    /// its replies' `reply.state`), for `message` as it was: its reactions go, and a reply's root is recounted (its
    /// `message.reply_count_updated`); the files only it named go too when the app says so.
    private func goneEffects(_ message: Message, on db: PostgresConnection) throws -> [NewEvent] {
        if message.reactions != Array("[]".utf8) { try MessageStore.deleteReactions(appID: appID, messageID: message.messageID, on: db) }
        if let type = MessageType(rawValue: message.type), type.isMedia || type == .multiple {
            try MessageFiles.messageRemoved(
                message.messageID, appID: appID, deleteFiles: deleteFiles, removeObjects: removeObjects, now: now, on: db)
        }
        guard let root = message.rootMessageID else { return [] }
        let count = try MessageStore.recountReplies(appID: appID, rootID: root, on: db)
        var o = JSONObjectWriter(capacity: 128)
        o["root_message_id"] = root
        o["conversation_type"] = message.conversationType.rawValue
        o["to"] = message.to
        o["reply_count"] = count
        return [MessageAudience.event("message.reply_count_updated", data: o.finish(), about: message)]
    }

    private func refetch(_ messageID: String, on db: PostgresConnection) throws -> Message {
        guard let message = try MessageStore.fetch(appID: appID, messageID: messageID, on: db) else { throw MessageService.notFound(messageID) }
        return message
    }

    /// `{message}` in the app view (`suppressed`, `push`, a revoke's original text): user streams and logs leave out
    /// what their user may not see (``EventUserView``, docs/events.md#two-views-of-the-same-event).
    private static func wrapped(_ message: Message) -> [UInt8] {
        var o = JSONObjectWriter(capacity: 1024)
        o.raw("message", message.json(.app))
        return o.finish()
    }
}
