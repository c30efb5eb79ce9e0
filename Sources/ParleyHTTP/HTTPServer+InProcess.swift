import Synchronization

/// Requests answered without a socket, for tests of what lies behind the HTTP layer (`HTTPInProcessClient`).
extension HTTPServer {
    /// Answers one request given as the bytes a client would write; `done` gets, once and on any thread, the bytes
    /// the server would write back.
    ///
    /// The request takes the socket path's steps (HTTPServer+Requests.swift): the same parser and limits (400, 431,
    /// and a body past the route's `maxBodyBytes`: 413, or the route's own answer), request id, head checks (400),
    /// route match (404, 405), query decoding, handler on the
    /// executor (on the calling thread for event-loop routes), deferred responses settled, and the same response
    /// head, `requestCompleted` hook and log line. What needs a connection is not here: `100 Continue`, keep-alive,
    /// pipelining (bytes after the first request are ignored), timeouts, and streaming responses: their stream is
    /// closed before it starts and the request is answered 501.
    public func respond(toRequest bytes: [UInt8], done: @escaping @Sendable ([UInt8]) -> Void) {
        var parser = HTTPRequestParser(limits: configuration.limits)
        parser.append(bytes)
        var pending: PendingRequest?
        do throws(HTTPParseError) {
            while let event = try parser.next() {
                switch event {
                case .head(let head):
                    let started = begin(head) { nextInProcessRequestID() }
                    parser.setBodyLimit(started.bodyLimit)
                    pending = started
                case .end(let body):
                    guard let pending else { continue }
                    handleInProcess(pending, body: body, done: done)
                    return
                }
            }
            let failed = failedRequest(pending) { nextInProcessRequestID() }
            let problem = hooks.problem(.badRequest("incomplete request"), failed.requestID)
            finishInProcess(problem, for: failed, closeAfterResponse: true, done: done)
        } catch {
            if error.kind == .payloadTooLarge, let pending {
                handleInProcess(pending, body: [], bodyOverLimit: true, done: done)
                return
            }
            let failed = failedRequest(pending) { nextInProcessRequestID() }
            let problem = hooks.problem(Self.problem(for: error), failed.requestID)
            finishInProcess(problem, for: failed, closeAfterResponse: true, done: done)
        }
    }

    private func handleInProcess(
        _ pending: PendingRequest, body: [UInt8], bodyOverLimit: Bool = false, done: @escaping @Sendable ([UInt8]) -> Void
    ) {
        let close = !pending.keepsConnection || bodyOverLimit || draining.load(ordering: .relaxed)
        switch dispatch(pending, body: body, bodyOverLimit: bodyOverLimit, receivedAtMillis: EventLoop.monotonicMillis()) {
        case .answer(let response):
            finishInProcess(response, for: pending, closeAfterResponse: close, done: done)
        case .handle(let route, let request):
            if route.options.runsOnEventLoop {
                finishInProcess(runInline(route, request), for: pending, closeAfterResponse: close, done: done)
                return
            }
            execute(
                route, request,
                deliver: .callback { [self] response in
                    finishInProcess(response, for: pending, closeAfterResponse: close, done: done)
                })
        }
    }

    private func finishInProcess(
        _ response: Response, for pending: PendingRequest, closeAfterResponse: Bool,
        done: @Sendable ([UInt8]) -> Void
    ) {
        var response = response
        if case .stream(let start) = response.body, pending.head.method != .head {
            // No connection to stream to: the stream is closed before it starts, so its owner cleans up at once.
            let stream = ResponseStream(loop: loops[0], connection: ConnectionID(fd: -1, generation: 0), maxBufferedBytes: 0)
            stream.markClosed()
            start(stream)
            response = hooks.problem(.notImplemented("a streaming response needs a socket connection"), pending.requestID)
        }
        var close = closeAfterResponse
        var output: [UInt8] = []
        writeResponse(response, for: pending, dateHeader: EventLoop.renderDateHeader(), closeAfterResponse: &close, into: &output)
        completed(pending, response: response)
        done(output)
    }

    /// A fresh request id for an in-process request: the server's prefix, `local`, a counter.
    private func nextInProcessRequestID() -> String {
        let n = inProcessRequestCounter.add(1, ordering: .relaxed).newValue
        return "\(requestIDPrefix)-local-\(String(n, radix: 16))"
    }
}
