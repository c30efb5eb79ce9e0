import ParleyAPI
import ParleyCore
import ParleyPostgres

/// Turns the event log into push attempts (API.md §16.1): for every pushable event after an app's cursor, the
/// recipients (never the sender), each one's decision, and one attempt per recipient with devices — `pending` with
/// its request body, or `suppressed` with the reason.
///
/// Runs in the caller's transaction, which also moves the cursor, so a crash before the commit plans the same events
/// again and never twice after it. Recipients are read a page at a time: a group message to 5,000 members or a
/// broadcast is planned over several transactions (the cursor's `user_after`), never loaded whole.
package enum PushPlanner {
    /// Recipients decided per transaction (one page of a big group or broadcast).
    static let recipientsPerRound = 500
    /// Events read per transaction.
    static let eventsPerRound = 200

    /// The event types the bridge looks at (each may still come to nothing: unstored, suppressed, no `push` …).
    static let pushableEventTypes = [
        "message.sent", "message.broadcast", "friend.application_created", "friend.application_updated", "group.application_updated",
    ]

    /// What one round planned.
    struct Planned {
        /// Attempts inserted as `pending` (the sender should look).
        var pending = 0
        /// The app has more to plan right away.
        var more = false
        /// The inserted attempts by `kind|status` (metrics).
        var statuses: [String: Int] = [:]
    }

    /// Plans the next part of `appID`'s log in the caller's transaction; nil when another node holds the app.
    static func planNext(appID: String, now: Int64, on db: PostgresConnection) throws -> Planned? {
        guard let cursor = try lockCursor(appID: appID, on: db) else { return nil }
        let head = try db.query("SELECT head FROM event_heads WHERE app_id = \(appID)").decodeFirst(Int64.self) ?? 0
        let settings = try PushStore.settings(appID: appID, on: db)
        let firstEvent = cursor.userAfter == nil ? cursor.eventID + 1 : cursor.eventID
        let events = try db.query(
            """
            SELECT id, type, data FROM events
            WHERE app_id = \(appID) AND id >= \(firstEvent) AND id <= \(head) AND type = ANY(\(pushableEventTypes))
            ORDER BY id LIMIT \(eventsPerRound)
            """
        ).rows.map { (id: try $0[0].int64, type: try $0[1].string, data: try $0[2].string) }
        let items = try PushSources.items(of: events, appID: appID, on: db)
        var planned = Planned()
        var budget = recipientsPerRound
        // Where the cursor ends: past every event read (or the head when fewer than a round's worth were pending).
        var newCursor: (eventID: Int64, userAfter: String?) = (events.count == eventsPerRound ? events.last!.id : head, nil)
        var batch: [(item: PushItem, userIDs: [String])] = []
        for (eventID, item) in items {
            let after = eventID == cursor.eventID ? cursor.userAfter : nil
            let page = try PushSources.recipients(of: item, eventID: eventID, after: after, limit: budget + 1, appID: appID, on: db)
            let taken = Array(page.prefix(budget))
            batch.append((item.item, taken))
            budget -= taken.count
            if page.count > taken.count {
                // The rest of this event's recipients go to the next round.
                newCursor = (eventID, taken.last ?? after)
                planned.more = true
                break
            }
            if budget == 0 {
                newCursor = (eventID, nil)
                planned.more = true
                break
            }
        }
        if events.count == eventsPerRound { planned.more = true }
        let attempts = try decide(batch, settings: settings, appID: appID, now: now, on: db)
        try PushStore.insert(attempts, appID: appID, on: db)
        for attempt in attempts { planned.statuses[attempt.kind + "|" + attempt.status, default: 0] += 1 }
        planned.pending = attempts.filter { $0.status == "pending" }.count
        try db.query(
            "UPDATE push_cursors SET event_id = \(newCursor.eventID), user_after = \(newCursor.userAfter) WHERE app_id = \(appID)")
        return planned
    }

    /// The app's cursor, locked for this transaction; nil when another node holds it. Creates it for a new app.
    private static func lockCursor(appID: String, on db: PostgresConnection) throws -> (eventID: Int64, userAfter: String?)? {
        for _ in 0..<2 {
            if let row = try db.query(
                "SELECT event_id, user_after FROM push_cursors WHERE app_id = \(appID) FOR UPDATE SKIP LOCKED"
            ).first {
                return (try row[0].int64, row[1].isNull ? nil : try row[1].string)
            }
            // From the apps row: an app deleted meanwhile gets no cursor (and no foreign-key error).
            let created = try db.query(
                """
                INSERT INTO push_cursors (app_id, event_id) SELECT app_id, 0 FROM apps WHERE app_id = \(appID)
                ON CONFLICT DO NOTHING RETURNING event_id
                """)
            if created.first != nil { return (0, nil) }
        }
        return nil
    }

    /// Decides every (item, recipient) pair of a round and renders the attempts, reading each recipient's state once.
    static func decide(
        _ batch: [(item: PushItem, userIDs: [String])], settings: PushSettings, appID: String, now: Int64, on db: PostgresConnection
    ) throws -> [PushAttemptRow] {
        // Step 1: an app without push configured pays nothing per item: no attempt, not even a suppressed one.
        guard settings.configured else { return [] }
        let userIDs = Array(Set(batch.flatMap(\.userIDs)))
        let devices = try PushStore.devices(appID: appID, userIDs: userIDs, on: db)
        let withDevices = batch.map { ($0.item, $0.userIDs.filter { devices[$0] != nil }) }
        let reached = Array(Set(withDevices.flatMap(\.1)))
        guard !reached.isEmpty else { return [] }
        let states = try recipientStates(
            appID: appID, userIDs: reached, devices: devices, badge: withDevices.contains { $0.0.enableBadge && !$0.1.isEmpty }, on: db)
        let dnd = try PushStore.doNotDisturb(
            appID: appID,
            entries: withDevices.filter { $0.0.kind.respectsDoNotDisturb }.flatMap { item, users in
                users.map { (userID: $0, conversationType: item.conversationType ?? "", conversationID: item.conversationID ?? "") }
            }, on: db)
        var rows: [PushAttemptRow] = []
        for (item, users) in withDevices {
            for userID in users {
                guard var recipient = states[userID] else { continue }
                recipient.doNotDisturb = dnd.contains(PushStore.conversationKey(userID, item.conversationType ?? "", item.conversationID ?? ""))
                let decision = PushDecision(kind: item.kind, configured: settings.configured, recipient: recipient)
                rows.append(attempt(item, to: recipient, decision: decision, settings: settings, appID: appID, now: now))
            }
        }
        return rows
    }

    /// Each recipient's devices, open-stream platforms, push rule and (with `badge`) unread total.
    static func recipientStates(
        appID: String, userIDs: [String], devices: [String: [Device]], badge: Bool, on db: PostgresConnection
    ) throws -> [String: PushRecipient] {
        let online = try PushStore.onlinePlatforms(appID: appID, userIDs: userIDs, on: db)
        let rules = try PushStore.pushRules(appID: appID, userIDs: userIDs, on: db)
        let unread = badge ? try ConversationStore.totalUnread(appID: appID, userIDs: userIDs, on: db) : [:]
        var states: [String: PushRecipient] = [:]
        for userID in userIDs {
            states[userID] = PushRecipient(
                userID: userID, devices: devices[userID] ?? [], onlinePlatforms: online[userID] ?? [], rule: rules[userID],
                unread: badge ? unread[userID] ?? 0 : nil)
        }
        return states
    }

    /// The attempt a decision comes to: `pending` with its request, or `suppressed` with the reason.
    static func attempt(
        _ item: PushItem, to recipient: PushRecipient, decision: PushDecision, settings: PushSettings, appID: String, now: Int64
    ) -> PushAttemptRow {
        let attemptID = IdentifierKind.generateSortableID(prefix: "pa", timestampMs: now)
        var row = PushAttemptRow(
            attemptID: attemptID, kind: item.kind.rawValue, userID: recipient.userID, messageID: item.messageID, callID: item.callID,
            deviceIDs: recipient.devices.map(\.deviceID), pushKeys: recipient.devices.map(\.pushKey), status: "suppressed",
            reason: nil, url: nil, format: nil, body: nil, createdAt: now)
        if let reason = decision.suppression {
            row.reason = reason.rawValue
            return row
        }
        let candidates = decision.candidates
        row.deviceIDs = candidates.map(\.deviceID)
        row.pushKeys = candidates.map(\.pushKey)
        row.status = "pending"
        row.url = settings.requestURL
        row.format = settings.format.rawValue
        row.body = String(
            decoding: PushGateway.body(
                item, to: recipient.userID, devices: candidates, unread: recipient.unread, settings: settings, appID: appID,
                attemptID: attemptID, now: now), as: UTF8.self)
        return row
    }

    // MARK: - Pushes decided by other domains

    /// The revoke push of a message revoked or deleted for everyone (§16.1), in the revoking transaction: for each
    /// recipient whose push for it ended `sent`, one `revoke` attempt to the devices of that push still registered
    /// (step 1 and `push.enable` apply, not steps 2–3); pushes still being retried stop (`failed`, `revoked`).
    /// `push`: the revoke request's PushConfig. Returns the attempts written.
    @discardableResult
    static func revoke(appID: String, messageID: String, push: JSONValue?, now: Int64, on db: PostgresConnection) throws -> [PushAttemptRow] {
        let sent = try PushStore.revokeAttempts(appID: appID, messageID: messageID, now: now, on: db)
        // Most messages got no push: nothing more to read for them.
        guard !sent.isEmpty else { return [] }
        guard var item = try PushSources.messageItem(appID: appID, messageID: messageID, on: db) else { return [] }
        item.kind = .revoke
        item.push = push?.objectValue ?? PushItem.defaultPush
        guard item.enabled else { return [] }
        let settings = try PushStore.settings(appID: appID, on: db)
        guard settings.configured else { return [] }
        let devices = try PushStore.devices(appID: appID, userIDs: Array(sent.keys), on: db)
        var recipients: [PushRecipient] = []
        for (userID, deviceIDs) in sent.sorted(by: { $0.key < $1.key }) {
            let still = (devices[userID] ?? []).filter { deviceIDs.contains($0.deviceID) }
            if !still.isEmpty { recipients.append(PushRecipient(userID: userID, devices: still)) }
        }
        if item.enableBadge {
            let unread = try ConversationStore.totalUnread(appID: appID, userIDs: recipients.map(\.userID), on: db)
            for i in recipients.indices { recipients[i].unread = unread[recipients[i].userID] ?? 0 }
        }
        let rows = recipients.map { recipient in
            attempt(
                item, to: recipient, decision: PushDecision(kind: .revoke, configured: settings.configured, recipient: recipient, filters: false),
                settings: settings, appID: appID, now: now)
        }
        try PushStore.insert(rows, appID: appID, on: db)
        return rows
    }

    /// ``revoke(appID:messageID:push:now:on:)`` as the message domain's hook (MessageLifecycleRoutes), wired by the
    /// app layer.
    package static func revokePush(appID: String, messageID: String, push: JSONValue?, now: Int64, on db: PostgresConnection) throws {
        try revoke(appID: appID, messageID: messageID, push: push, now: now, on: db)
    }

    /// A call push (`call` or `call_cancel`, §16.1) to `userIDs`, in the call's transaction (the calls domain).
    @discardableResult
    static func call(
        kind: PushItem.Kind, appID: String, callID: String, actor: String, userIDs: [String], push: JSONValue?, now: Int64,
        on db: PostgresConnection
    ) throws -> [PushAttemptRow] {
        precondition(kind.isCall)
        let names = try PushStore.userNames(appID: appID, userIDs: [actor], on: db)
        let item = PushItem.call(kind, callID: callID, actor: actor, actorName: names[actor] ?? "", push: push?.objectValue)
        guard item.enabled else { return [] }
        let settings = try PushStore.settings(appID: appID, on: db)
        let rows = try decide([(item, userIDs.filter { $0 != actor })], settings: settings, appID: appID, now: now, on: db)
        try PushStore.insert(rows, appID: appID, on: db)
        return rows
    }
}
