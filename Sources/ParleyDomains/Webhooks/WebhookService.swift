import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The rules of webhook endpoints (docs/webhooks.md#endpoints): endpoints, secrets and rotation, before-hook ownership,
/// the delivery log and retries.
///
/// A value made per request; it owns nothing mutable. Endpoint writes lock the endpoint's row (or, on create, count
/// the app's endpoints under the app's row lock) so the 20-endpoint limit and before-hook ownership hold under races;
/// `webhook_before_hooks` holds the ownership itself (one row per app and before type).
struct WebhookService: DomainService {
    let db: PostgresConnection
    let appID: String
    let now: Int64

    /// Most endpoints per app (more: 422 `7000505`).
    static let maxEndpoints = 20
    /// How long the old secret still signs after a rotation (docs/webhooks.md#endpoints).
    static let rotationOverlapMillis: Int64 = 24 * 3_600_000

    /// The fields of a create or a PATCH (docs/webhooks.md#endpoints); nil members were not given.
    struct Fields {
        var url: String?
        var eventTypes: [String]?
        var secret: String?
        var enabled: Bool?
        var description: String?
        var timeoutMillis: Int?
        var failOpen: Bool?
        var disableAfterFailures: Int?
        var disableAfterSeconds: Int?

        static func read(from body: inout BodyReader, create: Bool) -> Fields {
            Fields(
                url: body.httpURL("url", required: create), eventTypes: WebhookEventTypes.read(from: &body, required: create),
                secret: WebhookSecret.read(from: &body), enabled: body.bool("enabled"),
                description: body.string("description", maxBytes: 256),
                timeoutMillis: body.int("timeout_ms", range: 100...5000).map(Int.init), failOpen: body.bool("fail_open"),
                disableAfterFailures: body.int("disable_after_failures", range: 1...1000).map(Int.init),
                disableAfterSeconds: body.int("disable_after_s", range: 0...2_592_000).map(Int.init))
        }
    }

    func create(_ fields: Fields) throws -> Webhook {
        try db.transaction { db in
            // The app's row orders concurrent creates, so the count below is the count at commit.
            try db.query("SELECT 1 FROM apps WHERE app_id = \(appID) FOR UPDATE")
            guard try WebhookStore.count(appID: appID, on: db) < Self.maxEndpoints else {
                throw APIError(.webhookLimit, "an app has at most \(Self.maxEndpoints) webhook endpoints")
            }
            let enabled = fields.enabled ?? true
            let webhook = Webhook(
                webhookID: "wh_" + Crypto.base64URLEncode(Crypto.randomBytes(12)), url: fields.url ?? "", eventTypes: fields.eventTypes ?? [],
                secret: fields.secret ?? WebhookSecret.generate(), previousSecret: nil, previousSecretUntil: nil, enabled: enabled,
                disabledReason: enabled ? nil : "manual", description: fields.description ?? "", timeoutMillis: fields.timeoutMillis ?? 2000,
                failOpen: fields.failOpen ?? true, disableAfterFailures: fields.disableAfterFailures ?? 20,
                disableAfterSeconds: fields.disableAfterSeconds ?? 86_400, consecutiveFailures: 0,
                createdAt: now, updatedAt: now)
            try WebhookStore.insert(appID: appID, webhook, on: db)
            try WebhookCursors.create(appID: appID, webhookID: webhook.webhookID, enabled: enabled, on: db)
            try claimBeforeHooks(webhook, on: db)
            return webhook
        }
    }

    func get(_ webhookID: String) throws -> Webhook {
        guard let webhook = try WebhookStore.fetch(appID: appID, webhookID: webhookID, on: db) else { throw Self.notFound(webhookID) }
        return webhook
    }

    func list(after: (Int64, String)?, limit: Int) throws -> [Webhook] {
        try WebhookStore.list(appID: appID, after: after, limit: limit, on: db)
    }

    /// A PATCH: `enabled: true` resets the failure count and reason and resumes paused deliveries (with those of the
    /// events committed before the endpoint was disabled that were not written yet); `enabled: false` sets
    /// `disabled_reason: manual` and pauses them (the endpoint gets no delivery of events committed afterwards).
    func update(_ webhookID: String, _ fields: Fields) throws -> Webhook {
        try db.transaction { db in
            guard var webhook = try WebhookStore.fetch(appID: appID, webhookID: webhookID, forUpdate: true, on: db) else {
                throw Self.notFound(webhookID)
            }
            if let url = fields.url { webhook.url = url }
            if let types = fields.eventTypes { webhook.eventTypes = types }
            if let secret = fields.secret { webhook.secret = secret }
            if let description = fields.description { webhook.description = description }
            if let timeout = fields.timeoutMillis { webhook.timeoutMillis = timeout }
            if let failOpen = fields.failOpen { webhook.failOpen = failOpen }
            if let limit = fields.disableAfterFailures { webhook.disableAfterFailures = limit }
            if let seconds = fields.disableAfterSeconds { webhook.disableAfterSeconds = seconds }
            switch fields.enabled {
            case true?:
                // Before the row changes: the deliveries it writes follow the event types the endpoint had then.
                if !webhook.enabled { try WebhookCursors.resume(appID: appID, webhookID: webhookID, now: now, on: db) }
                webhook.enabled = true
                webhook.disabledReason = nil
                webhook.consecutiveFailures = 0
                try WebhookStore.setDeliveriesPaused(false, appID: appID, webhookID: webhookID, now: now, on: db)
            case false?:
                if webhook.enabled {
                    webhook.disabledReason = "manual"
                    try WebhookCursors.pause(appID: appID, webhookID: webhookID, on: db)
                }
                webhook.enabled = false
                try WebhookStore.setDeliveriesPaused(true, appID: appID, webhookID: webhookID, now: now, on: db)
            case nil: break
            }
            webhook.updatedAt = now
            try WebhookStore.update(appID: appID, webhook, on: db)
            try claimBeforeHooks(webhook, on: db)
            return webhook
        }
    }

    /// In a transaction for its retry: the cascade to the endpoint's deliveries can deadlock with a delivery worker
    /// that holds a delivery row and then updates the endpoint's failure count (PostgreSQL aborts one side, 40P01; seen
    /// as a 500 under load), and a pooled transaction runs again after a deadlock.
    func delete(_ webhookID: String) throws {
        let deleted = try db.transaction { db in try WebhookStore.delete(appID: appID, webhookID: webhookID, on: db) }
        guard deleted else { throw Self.notFound(webhookID) }
    }

    /// `POST …/recover`: the deliveries the endpoint would have received since `since` (an event id: the events after
    /// it; or an RFC 3339 time: the events created from then) and does not have, written as `pending` in event order
    /// (docs/webhooks.md#recovering-missed-events). Up to the endpoint's cursor while it is enabled (its dispatcher
    /// writes what comes after), up to the log's head while it is disabled (nothing else ever will): those wait,
    /// paused, until it is enabled again. `since` before the log's retention is 400, as the log trimmed those events.
    func recover(_ webhookID: String, since: String) throws -> Int {
        try db.transaction { db in
            guard let webhook = try WebhookStore.fetch(appID: appID, webhookID: webhookID, forUpdate: true, on: db) else {
                throw Self.notFound(webhookID)
            }
            let (head, trimPoint) = try EventLog.bounds(appID: appID, on: db)
            let position = try WebhookCursors.position(appID: appID, webhookID: webhookID, on: db)
            let through = webhook.enabled ? (position?.cursor ?? head) : head
            var afterID = trimPoint
            var fromTime = Int64.min
            if !since.isEmpty, since.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }), let id = Int64(since) {
                guard id >= trimPoint, id <= head else {
                    throw APIError.invalidParam("body.since", "event \(id) is outside the event log (\(trimPoint) to \(head) are kept)")
                }
                afterID = id
            } else if let time = RFC3339.milliseconds(since) {
                let oldest = try EventLog.oldestCreatedAt(appID: appID, after: trimPoint, on: db)
                guard trimPoint == 0 || oldest.map({ time >= $0 }) ?? (time >= now) else {
                    throw APIError.invalidParam("body.since", "\(since) is before the oldest event the log keeps")
                }
                fromTime = time
            } else {
                throw APIError.invalidParam("body.since", "must be an event id or an RFC 3339 time")
            }
            return try WebhookCursors.recover(
                appID: appID, webhookID: webhookID, afterID: afterID, fromTime: fromTime, throughID: through, now: now, on: db)
        }
    }

    /// A new secret (given or generated); the old one signs as the second signature for 24 h.
    func rotateSecret(_ webhookID: String, secret: String?) throws -> Webhook {
        try db.transaction { db in
            guard var webhook = try WebhookStore.fetch(appID: appID, webhookID: webhookID, forUpdate: true, on: db) else {
                throw Self.notFound(webhookID)
            }
            webhook.previousSecret = webhook.secret
            webhook.previousSecretUntil = now + Self.rotationOverlapMillis
            webhook.secret = secret ?? WebhookSecret.generate()
            webhook.updatedAt = now
            try WebhookStore.update(appID: appID, webhook, on: db)
            return webhook
        }
    }

    /// The endpoint's before-hook types, or 409 `7000504` naming those another enabled endpoint serves.
    private func claimBeforeHooks(_ webhook: Webhook, on db: PostgresConnection) throws {
        let taken = try WebhookStore.claimBeforeHooks(appID: appID, webhook, on: db)
        guard taken.isEmpty else {
            throw APIError(.beforeHookTaken, "another enabled endpoint already serves \(taken.joined(separator: ", "))")
        }
    }

    // MARK: - Deliveries

    func deliveries(_ webhookID: String, filter: DeliveryFilter, before: (Int64, String)?, limit: Int) throws -> [Delivery] {
        _ = try get(webhookID)
        return try DeliveryStore.list(appID: appID, webhookID: webhookID, filter: filter, before: before, limit: limit, on: db)
    }

    func delivery(_ webhookID: String, _ deliveryID: String) throws -> Delivery {
        guard let delivery = try DeliveryStore.fetch(appID: appID, webhookID: webhookID, deliveryID: deliveryID, on: db) else {
            throw APIError(.notFound, "delivery \(deliveryID) of webhook \(webhookID) does not exist")
        }
        return delivery
    }

    /// Re-queues an after delivery now (docs/webhooks.md#endpoints); 409 `7000009` when it is pending, or a before or
    /// ping delivery.
    func retry(_ webhookID: String, _ deliveryID: String) throws -> Delivery {
        _ = try get(webhookID)
        guard let (delivery, retried) = try DeliveryStore.retry(appID: appID, webhookID: webhookID, deliveryID: deliveryID, now: now, on: db)
        else { throw APIError(.notFound, "delivery \(deliveryID) of webhook \(webhookID) does not exist") }
        guard retried else {
            throw APIError(
                .conflict, delivery.kind == .after ? "the delivery is already pending" : "a \(delivery.kind.rawValue) delivery cannot be retried")
        }
        return delivery
    }

    static func notFound(_ webhookID: String) -> APIError { APIError(.notFound, "webhook \(webhookID) does not exist") }
}
