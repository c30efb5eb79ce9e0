import ParleyCore
import ParleyPostgres

/// A webhook endpoint of an app (docs/webhooks.md#endpoints).
package struct Webhook: Sendable, Equatable {
    package var webhookID: String
    package var url: String
    package var eventTypes: [String]
    /// `whsec_` + base64 of the key: it signs, so it is kept as is (shown only in the API's Webhook views).
    package var secret: String
    /// The secret before the last rotation: it still signs (the second signature) until `previousSecretUntil`.
    package var previousSecret: String?
    package var previousSecretUntil: Int64?
    package var enabled: Bool
    package var disabledReason: String?
    package var description: String
    package var timeoutMillis: Int
    package var failOpen: Bool
    package var disableAfterFailures: Int
    /// How old the first failure of a streak must be before the streak can disable the endpoint (seconds; 0: at once).
    package var disableAfterSeconds: Int
    package var consecutiveFailures: Int
    package var createdAt: Int64
    package var updatedAt: Int64

    package init(
        webhookID: String, url: String, eventTypes: [String], secret: String, previousSecret: String?, previousSecretUntil: Int64?, enabled: Bool,
        disabledReason: String?, description: String, timeoutMillis: Int, failOpen: Bool, disableAfterFailures: Int, disableAfterSeconds: Int,
        consecutiveFailures: Int, createdAt: Int64, updatedAt: Int64
    ) {
        self.webhookID = webhookID
        self.url = url
        self.eventTypes = eventTypes
        self.secret = secret
        self.previousSecret = previousSecret
        self.previousSecretUntil = previousSecretUntil
        self.enabled = enabled
        self.disabledReason = disabledReason
        self.description = description
        self.timeoutMillis = timeoutMillis
        self.failOpen = failOpen
        self.disableAfterFailures = disableAfterFailures
        self.disableAfterSeconds = disableAfterSeconds
        self.consecutiveFailures = consecutiveFailures
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }

    /// The before-event types (docs/webhooks.md#before-event-hooks) this endpoint serves: listed explicitly, and only
    /// while enabled.
    package var beforeTypes: [String] { enabled ? eventTypes.filter(WebhookEventTypes.isBeforeType) : [] }

    /// The secrets that sign a request at `now`, new first (two during a rotation's 24 h, docs/webhooks.md#endpoints).
    package func signingSecrets(at now: Int64) -> [String] {
        if let previousSecret, let until = previousSecretUntil, now < until { return [secret, previousSecret] }
        return [secret]
    }

    /// The Webhook view: every view carries `secret` (docs/webhooks.md#endpoints).
    package func json() -> [UInt8] {
        var o = JSONObjectWriter()
        o["webhook_id"] = webhookID
        o["url"] = url
        o["event_types"] = eventTypes
        o["secret"] = secret
        o["enabled"] = enabled
        o["disabled_reason"] = disabledReason
        o["description"] = description
        o["timeout_ms"] = timeoutMillis
        o["fail_open"] = failOpen
        o["disable_after_failures"] = disableAfterFailures
        o["disable_after_s"] = disableAfterSeconds
        o["consecutive_failures"] = consecutiveFailures
        o["created_at"] = createdAt
        o["updated_at"] = updatedAt
        return o.finish()
    }
}

/// The `event_types` patterns of an endpoint (docs/webhooks.md#endpoints): `*`, `<prefix>.*`, an exact after-event type
/// of the event catalogue, or a before-event type (docs/webhooks.md#before-event-hooks).
package enum WebhookEventTypes {
    /// Every after-event type of the catalogue (docs/events.md#the-event-object), including those of domains still to
    /// come: an endpoint may subscribe to them before they are written.
    package static let afterTypes: Set<String> = [
        "app.settings_updated", "webhook.disabled",
        "user.created", "user.updated", "user.deleted", "user.kicked", "user.status_updated", "user.push_rule_updated",
        "device.registered", "device.removed",
        "friend.added", "friend.deleted", "friend.updated", "friend.application_created", "friend.application_updated",
        "blacklist.added", "blacklist.removed",
        "group.created", "group.updated", "group.dismissed", "group.member_joined", "group.member_left",
        "group.member_updated", "group.mute_updated", "group.attributes_updated", "group.application_created",
        "group.application_updated",
        "room.created", "room.member_joined", "room.member_left", "room.attributes_updated", "room.attributes_batch_updated",
        "room.member_attributes_updated", "room.destroyed",
        "message.sent", "message.broadcast", "message.revoked", "message.edited", "message.deleted", "message.pin_updated",
        "message.reactions_updated", "message.reply_count_updated", "message.receipt_updated",
        "conversation.updated", "conversation.deleted", "conversation.read",
        "call.created", "call.invited", "call.user_state_changed", "call.ended",
        "report.created", "report.resolved", "user.warned", "job.finished", "file.deleted",
        "retention.purged",
    ]

    /// The before-event hook types (docs/webhooks.md#before-event-hooks): never written to the log, served only when
    /// listed exactly.
    package static let beforeTypes: Set<String> = [
        "message.before_send", "group.before_create", "group.before_join", "friend.before_add", "call.before_invite",
    ]

    /// The prefixes a `<prefix>.*` pattern may name: the part before the dot of an after-event type of the catalogue.
    package static let prefixes: Set<String> = Set(afterTypes.map { String($0.prefix(while: { $0 != "." })) })

    package static func isBeforeType(_ type: String) -> Bool { beforeTypes.contains(type) }

    /// Why `pattern` is not a valid entry, or nil.
    package static func problem(_ pattern: String) -> String? {
        if pattern == "*" || afterTypes.contains(pattern) || beforeTypes.contains(pattern) { return nil }
        if pattern.hasSuffix(".*"), prefixes.contains(String(pattern.dropLast(2))) { return nil }
        return "is not an event type of the catalogue, a <prefix>.* pattern or *"
    }

    /// Reads `event_types` (1–100 valid, distinct patterns; docs/webhooks.md#endpoints), adding errors named
    /// `body.event_types[i]` (docs/errors.md#problems-rfc-9457).
    package static func read(from body: inout BodyReader, required: Bool) -> [String]? {
        guard let patterns = body.stringArray("event_types", required: required, minItems: 1, maxItems: 100) else { return nil }
        var seen: Set<String> = []
        var valid = true
        let field = body.fieldPath("event_types")
        for (index, pattern) in patterns.enumerated() {
            if let problem = problem(pattern) {
                body.addError(path: "\(field)[\(index)]", problem)
                valid = false
            } else if !seen.insert(pattern).inserted {
                body.addError(path: "\(field)[\(index)]", "is repeated")
                valid = false
            }
        }
        return valid ? patterns : nil
    }

    /// Whether `patterns` select the after-event `type` (the SQL twin: Migrations/functions/parley_webhook_selects.sql).
    package static func selects(_ patterns: [String], _ type: String) -> Bool {
        patterns.contains("*") || patterns.contains(type) || patterns.contains(String(type.prefix(while: { $0 != "." })) + ".*")
    }
}

/// Webhook secrets: `whsec_` + base64 of 24–64 random bytes (docs/webhooks.md#endpoints).
package enum WebhookSecret {
    package static let prefix = "whsec_"

    /// A new secret with 32 random bytes.
    package static func generate() -> String { prefix + Crypto.base64Encode(Crypto.randomBytes(32)) }

    /// The HMAC key of a secret (the base64-decoded part after `whsec_`), nil when it is not one.
    package static func key(_ secret: String) -> [UInt8]? {
        guard secret.hasPrefix(prefix), let key = Crypto.base64Decode(String(secret.dropFirst(prefix.count))),
            (24...64).contains(key.count)
        else { return nil }
        return key
    }

    /// Reads an optional `secret` member: a valid secret, or an error naming it.
    package static func read(from body: inout BodyReader) -> String? {
        guard let secret = body.string("secret") else { return nil }
        guard key(secret) != nil else {
            body.addError("secret", "must be whsec_ followed by the base64 of 24 to 64 bytes")
            return nil
        }
        return secret
    }
}
