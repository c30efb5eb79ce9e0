import ParleyAPI
import ParleyCore
import ParleyPostgres

/// Turns an app's events into push attempts (docs/push.md, "What is pushed, to whom"): for every pushable event, the
/// recipients (never the sender), each one's decision, and one attempt per recipient with devices — `pending` with its
/// request body, or `suppressed` with the reason. It only reads: the bridge sends and records (``PushBridge``).
///
/// Recipients are read a page at a time: a group message to 5,000 members or a broadcast is planned over several
/// steps (the cursor's `user_after`), never loaded whole.
package enum PushPlanner {
    /// Recipients decided per step (one page of a big group or broadcast).
    static let recipientsPerRound = 500
    /// Events planned per step.
    static let eventsPerRound = 200

    /// The event types the bridge looks at (each may still come to nothing: unstored, suppressed, no `push` …).
    static let pushableEventTypes = [
        "message.sent", "message.broadcast", "friend.application_created", "friend.application_updated", "group.application_updated",
    ]

    /// What one planning step came to: attempts to send, and attempts that need no try (suppressed).
    struct Step {
        var pending: [PushAttemptRow] = []
        var suppressed: [PushAttemptRow] = []
        /// The events fully planned.
        var taken: [PushLogEvent] = []
    }

    /// Plans the events `lane` has ready, in order, up to ``eventsPerRound`` events and ``recipientsPerRound`` (or
    /// `budget`, if fewer) recipients, and moves the lane's planned position past them (into a big group's or a
    /// broadcast's recipients, when a page ends there). Reads the recipients and their state; writes nothing.
    static func planReady(_ lane: inout PushLane, budget: Int, settings: PushSettings, now: Int64, on db: PostgresConnection) throws
        -> Step
    {
        let events = Array(lane.ready.prefix(eventsPerRound))
        let items = try PushSources.items(of: events, appID: lane.appID, on: db)
        var left = max(1, min(recipientsPerRound, budget))
        var batch: [(item: PushItem, userIDs: [String])] = []
        var position = lane.planned
        var consumed = 0
        for event in events {
            if let sourced = items[event.id] {
                let after = event.id == lane.planned.eventID ? lane.planned.userAfter : nil
                let page = try PushSources.recipients(of: sourced, eventID: event.id, after: after, limit: left + 1, appID: lane.appID, on: db)
                let taken = Array(page.prefix(left))
                batch.append((sourced.item, taken))
                left -= taken.count
                if page.count > taken.count {
                    // The rest of this event's recipients go to the next step.
                    position = PushPosition(eventID: event.id, userAfter: taken.last ?? after)
                    break
                }
            }
            consumed += 1
            position = PushPosition(eventID: event.id, userAfter: nil)
            if left == 0 { break }
        }
        lane.ready.removeFirst(consumed)
        lane.planned = position
        try PushSources.fillNames(&batch, appID: lane.appID, on: db)
        var step = Step(taken: Array(events.prefix(consumed)))
        for row in try decide(batch, settings: settings, appID: lane.appID, now: now, on: db) {
            if row.status == "pending" { step.pending.append(row) } else { step.suppressed.append(row) }
        }
        return step
    }

    /// Decides every (item, recipient) pair of a round and renders the attempts, reading each recipient's state once.
    static func decide(
        _ batch: [(item: PushItem, userIDs: [String])], settings: PushSettings, appID: String, now: Int64, on db: PostgresConnection
    ) throws -> [PushAttemptRow] {
        // Step 1: an app without push configured pays nothing per item: no attempt, not even a suppressed one.
        guard settings.configured else { return [] }
        let userIDs = Array(Set(batch.flatMap(\.userIDs)))
        // Devices, open-stream platforms and push rules in one read: only recipients with devices come back.
        var states = try PushStore.recipients(appID: appID, userIDs: userIDs, on: db)
        let withDevices = batch.map { ($0.item, $0.userIDs.filter { states[$0] != nil }) }
        let reached = Array(Set(withDevices.flatMap(\.1)))
        guard !reached.isEmpty else { return [] }
        if withDevices.contains(where: { $0.0.enableBadge && !$0.1.isEmpty }) {
            let unread = try ConversationStore.totalUnread(appID: appID, userIDs: reached, on: db)
            for userID in reached { states[userID]?.unread = unread[userID] ?? 0 }
        }
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

    /// The revoke push of a message revoked or deleted for everyone (docs/push.md#what-is-pushed-to-whom), in the
    /// revoking transaction: for each recipient whose push for it ended `sent`, one `revoke` attempt to the devices of
    /// that push still registered (step 1 and `push.enable` apply, not steps 2–3); pushes still being retried stop
    /// (`failed`, `revoked`). `push`: the revoke request's PushConfig. Returns the attempts written.
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

    /// A call push (`call` or `call_cancel`, docs/push.md#what-is-pushed-to-whom) to `userIDs`, in the call's
    /// transaction (the calls domain).
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
