import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Webhook endpoints and their delivery log (docs/webhooks.md#endpoints): HTTP ↔ ``WebhookService``.
package enum WebhookRoutes {
    package static func register(on api: inout API) {
        api.add(.post, "/v1/webhooks", .app, "createWebhook") { ctx in
            var body = try ctx.body()
            let fields = WebhookService.Fields.read(from: &body, create: true)
            try body.check()
            let webhook = try WebhookService(ctx).create(fields)
            ctx.services.apps.invalidate(appID: ctx.appID)
            ctx.services.webhooks.dispatcher.endpointsChanged()
            return Reply.created(webhook.json())
        }

        api.add(.get, "/v1/webhooks", .app, "listWebhooks") { ctx in
            var query = ctx.query()
            let limit = query.limit()
            let cursor = query.cursor()
            try query.check()
            let after = try ctx.timeAndIDCursor(cursor, list: "webhooks")
            let webhooks = try WebhookService(ctx).list(after: after, limit: limit + 1)
            let page = Array(webhooks.prefix(limit))
            let next =
                webhooks.count > limit
                ? page.last.map { ctx.cursors.encode(list: "webhooks", values: [.int($0.createdAt), .string($0.webhookID)]) } : nil
            return Reply.list(page.map { $0.json() }, nextCursor: next)
        }

        api.add(.get, "/v1/webhooks/{webhook_id}", .app, "getWebhook") { ctx in
            Reply.json(try WebhookService(ctx).get(try ctx.pathID("webhook_id", .opaque)).json())
        }

        api.add(.patch, "/v1/webhooks/{webhook_id}", .app, "updateWebhook") { ctx in
            let webhookID = try ctx.pathID("webhook_id", .opaque)
            var body = try ctx.body()
            let fields = WebhookService.Fields.read(from: &body, create: false)
            try body.check()
            let webhook = try WebhookService(ctx).update(webhookID, fields)
            ctx.services.apps.invalidate(appID: ctx.appID)
            // Before the answer: the events committed after it see the change (re-enabled deliveries may be due at once).
            ctx.services.webhooks.dispatcher.endpointsChanged()
            if fields.enabled == true { ctx.services.webhooks.dispatcher.poke() }
            return Reply.json(webhook.json())
        }

        api.add(.delete, "/v1/webhooks/{webhook_id}", .app, "deleteWebhook") { ctx in
            try WebhookService(ctx).delete(try ctx.pathID("webhook_id", .opaque))
            ctx.services.apps.invalidate(appID: ctx.appID)
            ctx.services.webhooks.dispatcher.endpointsChanged()
            return Reply.noContent()
        }

        api.add(.post, "/v1/webhooks/{webhook_id}/rotate_secret", .app, "rotateWebhookSecret") { ctx in
            let webhookID = try ctx.pathID("webhook_id", .opaque)
            var body = try ctx.body()
            let secret = WebhookSecret.read(from: &body)
            try body.check()
            let webhook = try WebhookService(ctx).rotateSecret(webhookID, secret: secret)
            ctx.services.apps.invalidate(appID: ctx.appID)
            ctx.services.webhooks.dispatcher.endpointsChanged()
            return Reply.json(webhook.json())
        }

        api.add(.post, "/v1/webhooks/{webhook_id}/ping", .app, "pingWebhook") { ctx in
            try ping(ctx)
        }

        api.add(.post, "/v1/webhooks/{webhook_id}/recover", .app, "recoverWebhook") { ctx in
            let webhookID = try ctx.pathID("webhook_id", .opaque)
            var body = try ctx.body()
            let since = body.string("since", required: true, maxBytes: 64)
            try body.check()
            let created = try WebhookService(ctx).recover(webhookID, since: since ?? "")
            ctx.services.webhooks.dispatcher.poke()
            var o = JSONObjectWriter()
            o["created"] = created
            return Reply.json(o.finish(), status: 202)
        }

        api.add(.get, "/v1/webhooks/{webhook_id}/deliveries", .app, "listWebhookDeliveries") { ctx in
            let webhookID = try ctx.pathID("webhook_id", .opaque)
            var query = ctx.query()
            let limit = query.limit()
            let cursor = query.cursor()
            let filter = DeliveryFilter(
                status: query.choice("status", Delivery.Status.allCases.map(\.rawValue)).flatMap(Delivery.Status.init),
                kind: query.choice("kind", Delivery.Kind.allCases.map(\.rawValue)).flatMap(Delivery.Kind.init),
                eventType: query.string("event_type", maxBytes: 64))
            try query.check()
            let before = try ctx.timeAndIDCursor(cursor, list: "deliveries:\(webhookID)")
            let deliveries = try WebhookService(ctx).deliveries(webhookID, filter: filter, before: before, limit: limit + 1)
            let page = Array(deliveries.prefix(limit))
            let next =
                deliveries.count > limit
                ? page.last.map {
                    ctx.cursors.encode(list: "deliveries:\(webhookID)", values: [.int($0.createdAt), .string($0.deliveryID)])
                } : nil
            return Reply.list(page.map { $0.json() }, nextCursor: next)
        }

        api.add(.get, "/v1/webhooks/{webhook_id}/deliveries/{delivery_id}", .app, "getWebhookDelivery") { ctx in
            let webhookID = try ctx.pathID("webhook_id", .opaque)
            let deliveryID = try ctx.pathID("delivery_id", .opaque)
            return Reply.json(try WebhookService(ctx).delivery(webhookID, deliveryID).json())
        }

        api.add(.post, "/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/retry", .app, "retryWebhookDelivery") { ctx in
            let webhookID = try ctx.pathID("webhook_id", .opaque)
            let deliveryID = try ctx.pathID("delivery_id", .opaque)
            let delivery = try WebhookService(ctx).retry(webhookID, deliveryID)
            ctx.services.webhooks.dispatcher.poke()
            return Reply.json(delivery.json(), status: 202)
        }
    }

    /// How long a ping waits for its answer: long enough for a receiver that answers at all, short enough that the
    /// caller (an operator at a console, a script) is never left waiting on a destination that drops packets.
    static let pingTimeoutMillis = 5_000

    /// `POST …/ping`: one signed POST of a `webhook.ping` body, answered with its outcome (docs/webhooks.md#endpoints).
    /// The call runs on a call thread (the request holds no connection while it waits) and is logged as a `ping`
    /// delivery; it does not count toward the endpoint's consecutive failures.
    private static func ping(_ ctx: APIContext) throws -> Response {
        let webhook = try WebhookService(ctx).get(try ctx.pathID("webhook_id", .opaque))
        let pingID = "ping_" + Crypto.base64URLEncode(Crypto.randomBytes(15))
        var data = JSONObjectWriter()
        data["webhook_id"] = webhook.webhookID
        var body = JSONObjectWriter()
        body["id"] = pingID
        body["type"] = "webhook.ping"
        body["app_id"] = ctx.appID
        body["created_at"] = ctx.now
        body.raw("data", data.finish())
        let bytes = body.finish()
        let webhooks = ctx.services.webhooks
        let (appID, now) = (ctx.appID, ctx.now)
        return .later { respond in
            webhooks.hooks.run {
                let attempt = webhooks.transport.send(
                    WebhookRequest(id: pingID, eventType: "webhook.ping", body: bytes, attempt: 1), to: webhook.url,
                    secrets: webhook.signingSecrets(at: now), now: now, timeoutMillis: pingTimeoutMillis)
                webhooks.dispatcher.log(
                    DeliveryLogEntry(
                        appID: appID, webhookID: webhook.webhookID, kind: .ping, refID: pingID, eventType: "webhook.ping", body: bytes,
                        attempt: attempt, succeeded: attempt.succeeded, decision: nil, at: now))
                var o = JSONObjectWriter()
                o["ok"] = attempt.succeeded
                o["status_code"] = attempt.statusCode
                o["duration_ms"] = attempt.durationMillis
                o["error"] = attempt.error
                respond(Reply.json(o.finish()))
            }
        }
    }
}
