import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// The one way a request that answers later (``Response/later(_:)``) continues on a pool worker: after the event-loop
/// path handed it over, after a before-event hook's verdicts, after the message writer answered a duplicate send.
extension Services {
    /// Runs `work` on a pool worker; `work` answers through `respond` itself. When the pool refuses it (its queue is
    /// full), the request is answered 503 `unavailable` with `Retry-After`, the answer the HTTP layer gives a request it
    /// cannot queue (docs/errors.md#problems-rfc-9457), so no request is left without one.
    ///
    /// `work` calls `respond` rather than returning its response so that the continuation costs the caller's one
    /// closure and no wrapper around it: the send path comes through here.
    package func resume(
        _ request: Request, answering respond: @escaping @Sendable (Response) -> Void, _ work: @escaping @Sendable () -> Void
    ) {
        let requestID = request.requestID
        pool.submit(work, rejected: { respond(ProblemRendering.serverProblem(.unavailable, requestID: requestID)) })
    }

    /// The response `body` builds, or the problem of what it throws, rendered as the pipeline renders a handler's
    /// error: for a continuation, which runs outside the pipeline's own catch.
    package func answer(_ request: Request, _ body: () throws -> Response) -> Response {
        do { return try body() } catch { return ProblemRendering.handlerError(error, request: request, logger: logger) }
    }
}
