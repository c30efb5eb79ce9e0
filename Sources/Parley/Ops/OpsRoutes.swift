import ParleyAPI
import ParleyCore
import ParleyDomains
import ParleyHTTP
import ParleyLive
import ParleyPostgres

/// Liveness and readiness (API.md §17).
struct OpsRoutes {
    let services: Services

    func register(on builder: inout RouterBuilder) {
        builder.add(.get, "/healthz", options: RouteOptions(runsOnEventLoop: true, operationID: "healthz")) { _ in
            Self.healthyResponse
        }
        let pool = services.pool
        let stopping = services.stopping
        builder.add(.get, "/readyz", options: RouteOptions(operationID: "readyz")) { request in
            if stopping.isSet {
                return ProblemRendering.response(
                    .retryLater(.unavailable, "shutting down", retryAfterSeconds: 1), requestID: request.requestID)
            }
            do {
                _ = try pool.withConnection { try $0.query("SELECT 1") }
            } catch {
                return ProblemRendering.response(
                    .retryLater(.unavailable, "database unreachable", retryAfterSeconds: 1), requestID: request.requestID)
            }
            return .json(Self.ready)
        }
    }

    /// Built once: the liveness answer costs no allocation per request.
    private static let healthyResponse = Response.json(Array("{\"status\":\"ok\"}".utf8))
    private static let ready: [UInt8] = Array("{\"status\":\"ready\"}".utf8)
}
