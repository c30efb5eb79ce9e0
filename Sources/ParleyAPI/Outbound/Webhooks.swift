import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// A node's webhook machinery (docs/webhooks.md): the outbound transport, the delivery dispatcher and the before-event
/// hook caller, sharing one transport and one set of metrics.
package final class Webhooks: Sendable {
    package let transport: WebhookTransport
    package let dispatcher: WebhookDispatcher
    package let hooks: BeforeHooks
    package let metrics: WebhookMetrics

    /// `eventsWritten`: sequence an app's events (`webhook.disabled`), then call `done`; `appChanged`: forget an app's cached
    /// record (its before-hook endpoints changed).
    package init(
        configuration: Configuration, clock: ServerClock, logger: Logger,
        eventsWritten: @escaping @Sendable (_ appID: String, _ done: @escaping @Sendable () -> Void) -> Void,
        appChanged: @escaping @Sendable (_ appID: String) -> Void
    ) {
        transport = WebhookTransport(
            policy: OutboundPolicy(
                allowPrivateDestinations: configuration.webhookAllowPrivate, extraCAFile: configuration.webhookCAFile))
        let metrics = WebhookMetrics()
        self.metrics = metrics
        let dispatcher = WebhookDispatcher(
            transport: transport, clock: clock, logger: logger, metrics: metrics, eventsWritten: eventsWritten, appChanged: appChanged)
        self.dispatcher = dispatcher
        hooks = BeforeHooks(transport: transport, clock: clock, metrics: metrics) { dispatcher.log($0) }
    }
}
