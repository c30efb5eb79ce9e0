import ParleyHTTP
import ParleyPostgres

/// Turns every failure into an RFC 9457 problem response (docs/errors.md#problems-rfc-9457).
package enum ProblemRendering {
    /// The response for an `APIError`: catalogue status, problem body, its extra headers.
    package static func response(_ error: APIError, requestID: String) -> Response {
        var response = Response(
            status: error.status, headers: ["Content-Type": "application/problem+json"],
            body: error.problemBody(requestID: requestID))
        for (name, value) in error.extraHeaders { response.headers.add(name, value) }
        return response
    }

    /// Problems the HTTP layer raises before any handler runs.
    package static func serverProblem(_ problem: ServerProblem, requestID: String) -> Response {
        switch problem {
        case .badRequest(let detail): return response(APIError(.badRequest, detail), requestID: requestID)
        case .notFound: return response(APIError(.notFound, "no such route"), requestID: requestID)
        case .payloadTooLarge: return response(APIError(.payloadTooLarge, "request body too large"), requestID: requestID)
        case .unavailable:
            return response(.retryLater(.unavailable, "server busy, retry later", retryAfterSeconds: 1), requestID: requestID)
        case .internalError: return response(.internalError, requestID: requestID)
        case .methodNotAllowed, .headersTooLarge, .notImplemented, .versionNotSupported, .requestTimeout:
            // The HTTP layer's own answer keeps its headers (`Allow`, `Connection: close`); the body is the catalogue's
            // problem (docs/errors.md#code-families, 7000014–7000018).
            var response = HTTPServerHooks.defaultProblem(problem, requestID)
            let error = transportError(problem)
            response.headers.replace("Content-Type", "application/problem+json")
            response.body = .bytes(error.problemBody(requestID: requestID))
            return response
        }
    }

    private static func transportError(_ problem: ServerProblem) -> APIError {
        switch problem {
        case .methodNotAllowed: APIError(.methodNotAllowed, "this path does not take this method")
        case .headersTooLarge: APIError(.requestHeaderFieldsTooLarge, "request line or headers too large")
        case .notImplemented(let detail): APIError(.notImplemented, detail)
        case .versionNotSupported: APIError(.httpVersionNotSupported, "HTTP version not supported")
        default: APIError(.requestTimeout, "the request did not arrive in time")
        }
    }

    /// A handler's thrown error: `APIError` as is; database outages as 503; anything else 500 (logged in full).
    package static func handlerError(_ error: any Error, request: Request, logger: Logger) -> Response {
        if let api = error as? APIError { return response(api, requestID: request.requestID) }
        if let pg = error as? PostgresError,
            pg.kind == .connection || pg.kind == .poolTimeout || pg.kind == .poolClosed || pg.isConnectionFailure
        {
            logger.warning("request_id=\(request.requestID) msg=\"database unavailable\" error=\"\(pg)\"")
            return response(
                .retryLater(.unavailable, "database unavailable, retry later", retryAfterSeconds: 1), requestID: request.requestID)
        }
        logger.error("request_id=\(request.requestID) msg=\"unexpected error\" error=\"\(String(reflecting: error))\"")
        return response(.internalError, requestID: request.requestID)
    }
}
