import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// The endpoint serving a before-event type in an app (docs/webhooks.md#before-event-hooks), as cached with the app
/// record.
package struct HookEndpoint: Sendable, Equatable {
    package var webhookID: String
    package var url: String
    package var secrets: [String]
    package var timeoutMillis: Int
    package var failOpen: Bool

    /// Reads the JSON object `AppStore` builds per served type.
    package static func parse(_ object: JSONObject) -> (type: String, endpoint: HookEndpoint)? {
        guard let type = object["type"]?.stringValue, let webhookID = object["webhook_id"]?.stringValue,
            let url = object["url"]?.stringValue, let secret = object["secret"]?.stringValue,
            let timeout = object["timeout_ms"]?.intValue, let failOpen = object["fail_open"]?.boolValue
        else { return nil }
        var secrets = [secret]
        if let previous = object["previous_secret"]?.stringValue { secrets.append(previous) }
        return (type, HookEndpoint(webhookID: webhookID, url: url, secrets: secrets, timeoutMillis: Int(timeout), failOpen: failOpen))
    }
}

/// What a before-event hook decided (docs/webhooks.md#before-event-hooks).
package struct HookVerdict: Sendable, Equatable {
    package enum Action: String, Sendable { case allow, modify, reject, drop }
    package var action: Action
    /// `modify`: the JSON Merge Patch for the patchable fields.
    package var patch: JSONObject?
    /// `reject`/`drop`: the hook's `code` and `reason`.
    package var code: Int64?
    package var reason: String?

    package static let allow = HookVerdict(action: .allow)

    /// The 403 `7000501` a `reject` (or, outside sends, a `drop`) answers with: `hook_code` = `code`, `detail` = `reason`.
    package var rejection: APIError {
        var error = APIError(.rejectedByHook, reason ?? "rejected by a before-event hook")
        error.hookCode = .some(code.map(Int.init))
        return error
    }

    /// Applies `patch` (RFC 7396) to the `patchable` members of `object`; members outside `patchable` are ignored.
    package func patched(_ object: JSONObject, patchable: Set<String>) -> JSONObject {
        guard let patch else { return object }
        var result = object
        for (key, value) in patch where patchable.contains(key) {
            result[key] = value.isNull ? nil : Self.merge(result[key], value)
        }
        return result
    }

    /// RFC 7396 MergePatch(target, patch).
    static func merge(_ target: JSONValue?, _ patch: JSONValue) -> JSONValue {
        guard case .object(let patchObject) = patch else { return patch }
        var result: JSONObject
        if case .object(let existing)? = target { result = existing } else { result = JSONObject() }
        for (key, value) in patchObject {
            result[key] = value.isNull ? nil : merge(result[key], value)
        }
        return .object(result)
    }

    /// Reads a hook's answer: 200 with `{"action", "patch"?, "code"?, "reason"?}`; nil when it is not one.
    static func parse(status: Int?, body: [UInt8]) -> HookVerdict? {
        guard status == 200, case .object(let answer)? = try? JSONValue.parse(body),
            let actionName = answer["action"]?.stringValue, let action = Action(rawValue: actionName)
        else { return nil }
        var verdict = HookVerdict(action: action)
        if action == .modify {
            guard case .object(let patch)? = answer["patch"] else { return nil }
            verdict.patch = patch
        }
        if let code = answer["code"], !code.isNull {
            guard let value = code.intValue else { return nil }
            verdict.code = value
        }
        if let reason = answer["reason"], !reason.isNull {
            guard let text = reason.stringValue, text.utf8.count <= 256 else { return nil }
            verdict.reason = text
        }
        return verdict
    }
}

/// Calls before-event hooks (docs/webhooks.md#before-event-hooks): one signed POST with the endpoint's `timeout_ms`, on
/// a call thread, so the request waiting for it holds no PostgreSQL connection and no pool worker; each call is logged
/// as a `before` delivery by the webhook dispatcher's thread, in batches.
package final class BeforeHooks: Sendable {
    private let transport: WebhookTransport
    private let calls: OutboundCalls
    private let clock: ServerClock
    private let log: @Sendable (DeliveryLogEntry) -> Void
    private let metrics: WebhookMetrics

    package init(
        transport: WebhookTransport, clock: ServerClock, metrics: WebhookMetrics, maxConcurrentCalls: Int = 1024,
        log: @escaping @Sendable (DeliveryLogEntry) -> Void
    ) {
        self.transport = transport
        self.clock = clock
        self.metrics = metrics
        self.calls = OutboundCalls(maxThreads: maxConcurrentCalls)
        self.log = log
    }

    /// Runs `job` on a call thread (a ping: a blocking outbound call that must not hold a pool worker).
    package func run(_ job: @escaping @Sendable () -> Void) { calls.run(job) }

    /// Calls `endpoint` for `type` with `data` (its JSON), then `done` on a call thread: the verdict (a failed call
    /// with `fail_open` allows), or 503 `7000502` (`Retry-After: 1`) when a fail-closed hook fails.
    package func call(
        _ type: String, endpoint: HookEndpoint, appID: String, data: [UInt8], done: @escaping @Sendable (Result<HookVerdict, APIError>) -> Void
    ) {
        calls.run { [self] in
            let now = clock.now()
            let id = "hook_" + Crypto.base64URLEncode(Crypto.randomBytes(15))
            var body = JSONObjectWriter()
            body["id"] = id
            body["type"] = type
            body["app_id"] = appID
            body["created_at"] = now
            body.raw("data", data)
            let bytes = body.finish()
            let attempt = transport.send(
                WebhookRequest(id: id, eventType: type, body: bytes, attempt: 1), to: endpoint.url, secrets: endpoint.secrets, now: now,
                timeoutMillis: endpoint.timeoutMillis)
            let verdict = HookVerdict.parse(status: attempt.statusCode, body: attempt.responseBody)
            let decision =
                verdict?.action.rawValue ?? (attempt.timedOut ? "timeout" : "error")
            log(
                DeliveryLogEntry(
                    appID: appID, webhookID: endpoint.webhookID, kind: .before, refID: id, eventType: type, body: bytes, attempt: attempt,
                    succeeded: verdict != nil, decision: decision, at: now))
            if let verdict {
                metrics.hookCalled(type, decision: verdict.action.rawValue)
                done(.success(verdict))
            } else if endpoint.failOpen {
                metrics.hookCalled(type, decision: "fail_open")
                done(.success(.allow))
            } else {
                metrics.hookCalled(type, decision: "error")
                done(
                    .failure(
                        APIError.retryLater(
                            .hookUnavailable, "the \(type) hook did not answer: \(attempt.error ?? "invalid answer")", retryAfterSeconds: 1)))
            }
        }
    }
}

/// A finished one-attempt delivery (hook call or ping) to add to the log.
package struct DeliveryLogEntry: Sendable {
    package var appID: String
    package var webhookID: String
    package var kind: Delivery.Kind
    package var refID: String
    package var eventType: String
    package var body: [UInt8]
    package var attempt: WebhookAttempt
    package var succeeded: Bool
    package var decision: String?
    package var at: Int64

    package init(
        appID: String, webhookID: String, kind: Delivery.Kind, refID: String, eventType: String, body: [UInt8], attempt: WebhookAttempt,
        succeeded: Bool, decision: String?, at: Int64
    ) {
        self.appID = appID
        self.webhookID = webhookID
        self.kind = kind
        self.refID = refID
        self.eventType = eventType
        self.body = body
        self.attempt = attempt
        self.succeeded = succeeded
        self.decision = decision
        self.at = at
    }
}
