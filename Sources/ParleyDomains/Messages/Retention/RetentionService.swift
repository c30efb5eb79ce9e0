import ParleyAPI
import ParleyCore
import ParleyPostgres

/// Retention policies and legal holds (docs/retention.md): create, replace, list, delete, and the hold check every
/// path that removes a message asks.
struct RetentionService: DomainService {
    let db: PostgresConnection
    let appID: String
    let now: Int64

    init(db: PostgresConnection, appID: String, now: Int64) {
        self.db = db
        self.appID = appID
        self.now = now
    }

    static func notFound(_ what: String, _ id: String) -> APIError { APIError(.notFound, "\(what) \(id) does not exist") }

    // MARK: - Policies

    /// Creates the policy of `scope`, or replaces the one there (same `policy_id`); `created` says which.
    func setPolicy(scope: RetentionScope, maxAgeDays: Int64, purgeFiles: Bool) throws -> (policy: RetentionPolicy, created: Bool) {
        let policy = RetentionPolicy(
            policyID: IdentifierKind.generateID(prefix: "rp_", length: 22), scope: scope, maxAgeDays: maxAgeDays, purgeFiles: purgeFiles,
            createdAt: now, updatedAt: now)
        let (stored, created) = try RetentionStore.upsertPolicy(appID: appID, policy, on: db)
        return (stored, created)
    }

    func policies(after: (Int64, String)?, limit: Int) throws -> [RetentionPolicy] {
        try RetentionStore.policies(appID: appID, after: after, limit: limit, on: db)
    }

    func deletePolicy(_ policyID: String) throws {
        guard try RetentionStore.deletePolicy(appID: appID, policyID: policyID, on: db) else { throw Self.notFound("policy", policyID) }
    }

    // MARK: - Holds

    func createHold(scope: RetentionScope, reason: String) throws -> LegalHold {
        let hold = LegalHold(holdID: IdentifierKind.generateID(prefix: "lh_", length: 22), scope: scope, reason: reason, createdAt: now)
        try RetentionStore.insertHold(appID: appID, hold, on: db)
        return hold
    }

    func holds(after: (Int64, String)?, limit: Int) throws -> [LegalHold] {
        try RetentionStore.holds(appID: appID, after: after, limit: limit, on: db)
    }

    func deleteHold(_ holdID: String) throws {
        guard try RetentionStore.deleteHold(appID: appID, holdID: holdID, on: db) else { throw Self.notFound("hold", holdID) }
    }

    /// The run log, newest first.
    func runs(before: (Int64, String)?, limit: Int) throws -> [RetentionRun] {
        try RetentionStore.runs(appID: appID, before: before, limit: limit, on: db)
    }

    // MARK: - The hold check

    /// 409 `7000901` when a legal hold covers `message` (docs/retention.md#legal-hold): asked, inside the caller's
    /// transaction, before a revoke or a delete for everyone changes it.
    static func requireNotHeld(_ message: Message, appID: String, on db: PostgresConnection) throws {
        let convID = MessageStore.thread(message.conversationType, message.from, message.to)
        if try RetentionStore.isHeld(appID: appID, convType: message.conversationType.rawValue, convID: convID, sender: message.from, on: db) {
            throw APIError(.legalHold, "message \(message.messageID) is under a legal hold")
        }
    }

    /// Those of `messageIDs` a legal hold covers (a bulk removal or an erasure leaves them).
    static func held(_ messageIDs: [String], appID: String, on db: PostgresConnection) throws -> Set<String> {
        try RetentionStore.held(appID: appID, messageIDs: messageIDs, on: db)
    }
}
