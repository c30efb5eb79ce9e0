import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The push routes' rules (docs/push.md): the attempt log and the test push, which predicts what the bridge would do
/// for one user and, unless it is a dry run, sends it.
///
/// A value made per request; it owns nothing mutable.
package struct PushService: DomainService {
    let db: PostgresConnection
    let appID: String
    let now: Int64

    package init(db: PostgresConnection, appID: String, now: Int64) {
        self.db = db
        self.appID = appID
        self.now = now
    }

    /// A real test push holds its pool worker while it waits for the gateway: at most this long.
    static let testTimeoutMillis = 5000

    // MARK: - The attempt log

    /// Attempts by `created_at` desc, then `attempt_id` desc, after `after`.
    func attempts(_ filter: PushAttemptFilter, after: (createdAt: Int64, attemptID: String)?, limit: Int) throws -> [PushAttemptRow] {
        try PushStore.list(appID: appID, filter: filter, after: after, limit: limit, on: db)
    }

    /// The attempt `attemptID`, else 404 `not_found`.
    func attempt(_ attemptID: String) throws -> PushAttemptRow {
        guard let attempt = try PushStore.fetch(appID: appID, attemptID: attemptID, on: db) else {
            throw APIError(.notFound, "push attempt \(attemptID) does not exist")
        }
        return attempt
    }

    // MARK: - The test push

    /// What a test push stands for.
    enum TestSource {
        /// A message as if it were sent now (no `event_id`, no `seq`).
        case unsent(SendRequest)
        /// A stored message.
        case message(String)
        /// The user's invitation to a call.
        case call(String)
    }

    /// What a test push decided and, unless a dry run, what the gateway answered.
    struct TestOutcome {
        var decision: PushDecision
        /// The attempt as planned (a dry run) or as recorded; nil when the user has no device.
        var attempt: PushAttemptRow?
        /// The gateway's answer to a real test push.
        var response: Response?

        struct Response {
            var statusCode: Int?
            var body: [UInt8]
            var rejectedKeys: [String]
        }
    }

    /// The decision for each of `userID`'s devices and the request it comes to; without `dryRun` the request is sent
    /// (kind `test`), logged as an attempt and answered with the attempt as recorded.
    func test(userID: String, _ source: TestSource, dryRun: Bool, settings: PushSettings, bridge: PushBridge) throws -> TestOutcome {
        let user = try UserService.requireActive(userID, appID: appID, on: db)
        var item = try self.item(source, for: user.userID)
        if !dryRun {
            guard settings.configured else { throw APIError(.pushNotConfigured, "push is not enabled or has no gateway_url") }
            item.kind = .test
        }
        let (recipient, decision) = try decide(item, for: userID, settings: settings)
        var outcome = TestOutcome(
            decision: decision,
            attempt: recipient.devices.isEmpty
                ? nil : PushPlanner.attempt(item, to: recipient, decision: decision, settings: settings, appID: appID, now: now))
        guard !dryRun, let attempt = outcome.attempt else { return outcome }
        try db.transaction { db in try PushStore.insert([attempt], appID: appID, sentByCaller: true, on: db) }
        guard attempt.status == "pending", let url = attempt.url, let body = attempt.body else { return outcome }
        let claimed = PushBridge.Claimed(
            attemptID: attempt.attemptID, appID: appID, kind: attempt.kind, url: url, format: settings.format,
            body: Array(body.utf8), attempt: 1, maxAttempts: 1, timeoutMillis: min(settings.timeoutMillis, Self.testTimeoutMillis),
            secret: settings.secret, pushKeys: attempt.pushKeys)
        let result = bridge.send(claimed)
        // Its `device.removed` events (rejected keys) are in this request's transaction: the pipeline sequences them
        // before the answer.
        try db.transaction { db in
            _ = try PushBridge.record([PushBridge.Outcome(claimed: claimed, result: result)], now: result.at, on: db)
        }
        bridge.metrics.recorded([(attempt.kind, result.status)])
        outcome.response = .init(
            statusCode: result.statusCode, body: Array(result.attempt.responseBody.prefix(1024)), rejectedKeys: result.rejectedKeys)
        outcome.attempt = try PushStore.fetch(appID: appID, attemptID: attempt.attemptID, on: db) ?? attempt
        return outcome
    }

    /// The push item `source` stands for, once `userID` is known to receive it.
    private func item(_ source: TestSource, for userID: String) throws -> PushItem {
        switch source {
        case .unsent(let request):
            let item = try unsentMessageItem(request)
            try requireRecipient(userID, of: item, peerRecipient: item.peerRecipient)
            return item
        case .message(let messageID):
            guard let message = try MessageStore.fetch(appID: appID, messageID: messageID, on: db) else {
                throw APIError(.messageNotFound, "message \(messageID) does not exist")
            }
            // A room message, an unpushable type, a suppressed or deleted message, `push.enable: false`: the bridge
            // pushes nothing for it, so there is nothing to predict.
            guard let item = try PushSources.messageItem(appID: appID, messageID: messageID, onlyPushable: true, on: db) else {
                throw APIError(.unsupportedOperation, "message \(messageID) is not pushed (see docs/push.md: what is pushed)")
            }
            try requireRecipient(userID, of: item, peerRecipient: message.to)
            return item
        case .call(let callID):
            guard let invitation = try PushSources.callInvitation(appID: appID, callID: callID, userID: userID, on: db) else {
                throw APIError(.callNotFound, "call \(callID) does not exist")
            }
            guard let invited = invitation else {
                throw APIError(.unsupportedOperation, "user \(userID) is not invited to call \(callID)")
            }
            return invited
        }
    }

    /// The decision for one user, with its state read as the planner reads it.
    private func decide(_ item: PushItem, for userID: String, settings: PushSettings) throws -> (PushRecipient, PushDecision) {
        var recipient =
            try PushStore.recipients(appID: appID, userIDs: [userID], on: db)[userID] ?? PushRecipient(userID: userID, devices: [])
        if item.enableBadge { recipient.unread = try ConversationStore.totalUnread(appID: appID, userIDs: [userID], on: db)[userID] ?? 0 }
        if item.kind.respectsDoNotDisturb || item.kind == .test, let type = item.conversationType, let id = item.conversationID {
            recipient.doNotDisturb = try !PushStore.doNotDisturb(appID: appID, entries: [(userID, type, id)], on: db).isEmpty
        }
        // A test push is decided as the item it stands for: a call invitation or a message.
        let kind = item.kind == .test ? (item.callID != nil ? PushItem.Kind.call : .message) : item.kind
        return (recipient, PushDecision(kind: kind, configured: settings.configured, recipient: recipient))
    }

    /// The item of a send body, as if it were sent now (no `event_id`, no `seq`); 422 `unsupported_operation` when the
    /// bridge would not push it.
    private func unsentMessageItem(_ request: SendRequest) throws -> PushItem {
        guard request.conversationType != .room, request.stored, PushItem.pushableMessageTypes.contains(Int(request.body.type.rawValue)),
            request.push?["enable"]?.boolValue != false
        else {
            throw APIError(.unsupportedOperation, "this message would not be pushed (see docs/push.md: what is pushed)")
        }
        let isGroup = request.conversationType == .group
        let names = try PushStore.names(appID: appID, users: [request.from], groups: isGroup ? [request.to] : [], on: db)
        let type = Int(request.body.type.rawValue)
        return PushItem(
            kind: .message, eventID: "", messageID: nil, callID: nil, conversationType: request.conversationType.rawValue,
            groupID: isGroup ? request.to : nil, sender: request.from, senderName: names.users[request.from] ?? "",
            groupName: isGroup ? names.groups[request.to] : nil, peerRecipient: request.conversationType == .peer ? request.to : nil,
            applicationKind: nil, messageType: type, seq: nil, priority: Int(request.priority),
            push: request.push?.objectValue ?? PushItem.defaultPush, defaultContent: PushItem.defaultContent(type: type, body: request.body.json))
    }

    /// 422 `unsupported_operation` unless `userID` receives `item`: the other side of a peer message (`peerRecipient`),
    /// a member of its group (now: the planner asks for membership when the message was sent, which differs only for
    /// a member who joined or left since).
    private func requireRecipient(_ userID: String, of item: PushItem, peerRecipient: String?) throws {
        let receives: Bool
        if item.sender == userID {
            receives = false
        } else if item.conversationType == "group", let groupID = item.groupID {
            receives = try GroupStore.member(appID: appID, groupID: groupID, userID: userID, on: db) != nil
        } else {
            receives = peerRecipient == userID
        }
        guard receives else {
            throw APIError(.unsupportedOperation, "user \(userID) is not a recipient of \(item.messageID.map { "message " + $0 } ?? "this message")")
        }
    }
}
