import ParleyAPI
import ParleyCore
import ParleyDomains
import ParleyHTTP
import ParleyLive
import ParleyPostgres

/// Liveness and readiness (docs/operations.md#health-readiness-and-metrics).
struct OpsRoutes {
    let services: Services
    let push: PushBridge
    let health: DatabaseHealth
    /// A background worker that has not taken a round for this long is stuck or gone: the node is not ready.
    static let workerWindow: Duration = .seconds(30)

    func register(on builder: inout RouterBuilder) {
        let embedded = health.embedded
        // Liveness includes the embedded cluster Parley supervises: while it is down or restarting, an orchestrator
        // sees 503 and can act (restart the container) if it stays so. An external database is readiness's business.
        builder.add(.get, "/healthz", options: RouteOptions(runsOnEventLoop: true, operationID: "healthz")) { request in
            guard let embedded else { return Self.healthyExternal }
            switch embedded.state {
            case .running: return Self.healthyRunning
            case .restarting:
                return ProblemRendering.response(
                    .retryLater(.unavailable, "the embedded PostgreSQL is restarting", retryAfterSeconds: 1), requestID: request.requestID)
            case .stopped:
                return ProblemRendering.response(
                    .retryLater(.unavailable, "the embedded PostgreSQL is stopped", retryAfterSeconds: 1), requestID: request.requestID)
            }
        }
        let stopping = services.stopping
        let probe = health.probe
        let circuit = health.circuit
        let (dispatcher, push) = (services.webhooks.dispatcher, self.push)
        // On threads of its own with its own connection: it answers within 1 s even while every pool worker waits on a
        // stalled database.
        builder.add(.get, "/readyz", options: RouteOptions(operationID: "readyz", executor: health.probeExecutor)) { request in
            if stopping.isSet {
                return ProblemRendering.response(
                    .retryLater(.unavailable, "shutting down", retryAfterSeconds: 1), requestID: request.requestID)
            }
            if let embedded, embedded.state != .running {
                return ProblemRendering.response(
                    .retryLater(.unavailable, "the embedded PostgreSQL is restarting", retryAfterSeconds: 1), requestID: request.requestID)
            }
            // The webhook dispatcher and the push bridge loop at least every second while they run.
            guard dispatcher.isRunning(within: Self.workerWindow), push.isRunning(within: Self.workerWindow) else {
                return ProblemRendering.response(
                    .retryLater(.unavailable, "a background worker (webhooks or push) is not running", retryAfterSeconds: 1),
                    requestID: request.requestID)
            }
            guard probe.check(within: DatabaseHealth.readinessBudget) else {
                return ProblemRendering.response(
                    .retryLater(.unavailable, "database unreachable or not answering", retryAfterSeconds: 1), requestID: request.requestID)
            }
            // The server answered: the serving connections stop failing fast now, not when their own next exchange
            // (perhaps a reconnect, perhaps a slow statement) gets through as the circuit's probe. "Ready" then means
            // the requests after it are tried.
            circuit.serverAnswered()
            return .json(Self.ready)
        }
    }

    /// Built once: the liveness answer costs no allocation per request.
    private static let healthyRunning = Response.json(Array("{\"status\":\"ok\",\"database\":\"running\"}".utf8))
    private static let healthyExternal = Response.json(Array("{\"status\":\"ok\",\"database\":\"external\"}".utf8))
    private static let ready: [UInt8] = Array("{\"status\":\"ready\"}".utf8)
}
