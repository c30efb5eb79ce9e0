import ParleyCore
import ParleyHTTP

/// One signed webhook request (docs/webhooks.md#signatures): Standard Webhooks headers and signature, and Parley's own
/// headers.
///
/// The signature is `v1,` + base64(HMAC-SHA256(key, "{webhook-id}.{webhook-timestamp}.{body}")) with the key taken
/// from the secret after `whsec_`; during a rotation the header holds one signature per secret, new first,
/// separated by a space. The body is sent as given, so a delivery's attempts carry identical bytes.
package struct WebhookRequest: Sendable {
    package var id: String
    package var eventType: String
    package var body: [UInt8]
    /// The attempt number sent as `Parley-Delivery-Attempt` (1, 2, …).
    package var attempt: Int

    package init(id: String, eventType: String, body: [UInt8], attempt: Int) {
        self.id = id
        self.eventType = eventType
        self.body = body
        self.attempt = attempt
    }

    /// The `webhook-signature` value for `secrets` (new first) at `timestampSeconds`.
    package static func signature(id: String, timestampSeconds: Int64, body: [UInt8], secrets: [String]) -> String {
        let signed = Array("\(id).\(timestampSeconds).".utf8) + body
        return secrets.compactMap(WebhookSecret.key).map { "v1," + Crypto.base64Encode(Crypto.hmacSHA256(key: $0, message: signed)) }
            .joined(separator: " ")
    }

    /// The request headers, signed at `now` (server-clock milliseconds; the timestamp is in seconds).
    package func headers(secrets: [String], now: Int64) -> HTTPHeaders {
        let timestamp = now / 1000
        var headers = HTTPHeaders()
        headers.add("Content-Type", "application/json")
        headers.add("User-Agent", "Parley-Webhooks/1")
        headers.add("webhook-id", id)
        headers.add("webhook-timestamp", String(timestamp))
        headers.add("webhook-signature", Self.signature(id: id, timestampSeconds: timestamp, body: body, secrets: secrets))
        headers.add("Parley-Event-Type", eventType)
        headers.add("Parley-Delivery-Attempt", String(attempt))
        return headers
    }
}

/// What one attempt of a webhook request came to.
package struct WebhookAttempt: Sendable {
    /// The answer's status; nil when there was none (timeout, connection error, refused destination).
    package var statusCode: Int?
    package var error: String?
    /// The first 1 KiB of the answer's body.
    package var responseExcerpt: String
    /// The whole answer's body, up to the transport's bound (before-event hooks parse it).
    package var responseBody: [UInt8]
    package var durationMillis: Int
    /// No answer within the time limit.
    package var timedOut = false

    /// A 2xx answer: the attempt succeeded (docs/webhooks.md#retries).
    package var succeeded: Bool { statusCode.map { (200...299).contains($0) } ?? false }
}

/// Sends webhook requests: the outbound side of webhooks and before-event hooks, shared by every caller.
///
/// Blocking: it runs on the webhook sender threads and the hook threads, never on an HTTP event loop. Redirects are
/// not followed (a 3xx is a failed attempt).
package struct WebhookTransport: Sendable {
    package var policy: OutboundPolicy
    /// Idle keep-alive connections, shared by every request of the node: as many per receiver as calls may be in
    /// flight to it (before-event hooks: one per waiting request), so that none reconnects after a burst.
    private let connections = OutboundConnections(maxPerDestination: 1024)

    package init(policy: OutboundPolicy) { self.policy = policy }

    /// The most an answer's body is read (the excerpt is the first 1 KiB of it).
    static let maxResponseBytes = 65_536
    static let excerptBytes = 1024

    /// POSTs `request` to `url` signed with `secrets` at `now`, bounded by `timeoutMillis` as a whole.
    package func send(_ request: WebhookRequest, to url: String, secrets: [String], now: Int64, timeoutMillis: Int) -> WebhookAttempt {
        post(body: request.body, to: url, headers: request.headers(secrets: secrets, now: now), timeoutMillis: timeoutMillis)
    }

    /// POSTs `body` with `headers` to `url`, bounded by `timeoutMillis` as a whole (webhooks, hooks, push gateways).
    package func post(body: [UInt8], to url: String, headers: HTTPHeaders, timeoutMillis: Int) -> WebhookAttempt {
        let started = ContinuousClock.now
        func elapsed() -> Int {
            let d = ContinuousClock.now - started
            return Int(d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000)
        }
        do {
            let response = try OutboundHTTP.send(
                .post, url: url, headers: headers, body: body,
                timeout: .milliseconds(timeoutMillis), policy: policy, maxResponseBytes: Self.maxResponseBytes,
                connections: connections)
            let excerpt = String(decoding: response.body.prefix(Self.excerptBytes), as: UTF8.self)
            let status = response.status
            return WebhookAttempt(
                statusCode: status, error: (200...299).contains(status) ? nil : "HTTP \(status)", responseExcerpt: excerpt,
                responseBody: response.body, durationMillis: elapsed())
        } catch let error as HTTPClientError {
            return WebhookAttempt(
                statusCode: nil, error: error.message, responseExcerpt: "", responseBody: [], durationMillis: elapsed(),
                timedOut: error.kind == .timeout)
        } catch {
            return WebhookAttempt(statusCode: nil, error: "\(error)", responseExcerpt: "", responseBody: [], durationMillis: elapsed())
        }
    }
}
