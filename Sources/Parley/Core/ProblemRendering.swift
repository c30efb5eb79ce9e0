import ParleyHTTP
import ParleyPostgres

/// Turns every failure into the RFC 9457 problem response of API.md §1.4.
enum ProblemRendering {
    /// The response for an `APIError`: catalogue status, problem body, its extra headers.
    static func response(_ error: APIError, requestID: String) -> Response {
        var response = Response(
            status: error.status, headers: ["Content-Type": "application/problem+json"],
            body: error.problemBody(requestID: requestID))
        for (name, value) in error.extraHeaders { response.headers.add(name, value) }
        return response
    }

    /// Problems the HTTP layer raises before any handler runs.
    static func serverProblem(_ problem: ServerProblem, requestID: String) -> Response {
        switch problem {
        case .badRequest(let detail): return response(APIError(.invalidParams, detail), requestID: requestID)
        case .notFound: return response(APIError(.notFound, "no such route"), requestID: requestID)
        case .payloadTooLarge: return response(APIError(.payloadTooLarge, "request body too large"), requestID: requestID)
        case .unavailable:
            return response(.retryLater(.unavailable, "server busy, retry later", retryAfterSeconds: 1), requestID: requestID)
        case .internalError: return response(.internalError, requestID: requestID)
        case .methodNotAllowed, .headersTooLarge, .notImplemented, .versionNotSupported, .requestTimeout:
            // Transport-level statuses with no catalogue code (§19 has none for 405/408/431/501/505).
            var response = HTTPServerHooks.defaultProblem(problem, requestID)
            response.headers.replace("Content-Type", "application/problem+json")
            response.body = .bytes(transportProblemBody(problem, requestID: requestID))
            return response
        }
    }

    private static func transportProblemBody(_ problem: ServerProblem, requestID: String) -> [UInt8] {
        let title: String
        var detail = HTTPStatus.reason(problem.status)
        switch problem {
        case .methodNotAllowed: title = "method_not_allowed"
        case .headersTooLarge: title = "request_header_fields_too_large"
        case .notImplemented(let d):
            title = "not_implemented"
            detail = d
        case .versionNotSupported: title = "http_version_not_supported"
        default: title = "request_timeout"
        }
        var o = JSONObjectWriter()
        o["type"] = "urn:parley:error:\(title)"
        o["title"] = title
        o["status"] = problem.status
        o["detail"] = detail
        o["request_id"] = requestID
        return o.finish()
    }

    /// A handler's thrown error: `APIError` as is; database outages as 503; anything else 500 (logged in full).
    static func handlerError(_ error: any Error, request: Request, logger: Logger) -> Response {
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
