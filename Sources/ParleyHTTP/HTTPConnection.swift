import CParleyShims
import Glibc
import Synchronization

/// One client connection: reads and parses requests, hands them to handlers, writes responses in order.
///
/// Owner: its event loop; every method runs on that loop thread. Handlers on worker threads refer to it only by
/// `ConnectionID` and deliver responses through `EventLoop.deliver(_:to:)`.
///
/// The mutable fields are `@exclusivity(unchecked)`: only the loop thread touches them and no method hands one out
/// while another access to it is open, so the runtime's exclusivity bookkeeping (about twenty checks a request,
/// ~7 % of the loop's instructions under callgrind) buys nothing here.
final class HTTPConnection: EventLoop.Watcher {
    private enum Phase {
        /// Waiting for (the rest of) a request head.
        case awaitingHead
        /// Head parsed, reading the body.
        case readingBody
        /// A handler is running; reads are paused so pipelined requests wait in the kernel.
        case handling
        /// The response is queued; waiting for it to drain before the next request.
        case writing
        /// A streaming response is open.
        case streaming(ResponseStream)
        /// The answer to a request whose body was not read is out and our side is shut down; input is read and
        /// dropped (up to `remaining` more bytes) until the client closes, so it can finish sending and read the
        /// answer instead of getting a reset.
        case lingering(remaining: Int)
        case closed
    }

    let fd: Int32
    var generation: UInt32 = 0
    // unowned(unsafe): the server and its loops outlive every connection (shutdown closes connections before the
    // loops stop), and a checked unowned reference costs an atomic retain on every access of the hot path.
    unowned(unsafe) let server: HTTPServer
    unowned(unsafe) let loop: EventLoop
    @exclusivity(unchecked) private var parser: HTTPRequestParser
    @exclusivity(unchecked) private var phase: Phase = .awaitingHead
    @exclusivity(unchecked) private var pending: PendingRequest?
    @exclusivity(unchecked) private var output: [UInt8] = []
    @exclusivity(unchecked) private var outputOffset = 0
    @exclusivity(unchecked) private var writeInterest = false
    @exclusivity(unchecked) private var readPaused = false
    @exclusivity(unchecked) private var closeAfterResponse = false
    /// The request's body was left unread (over its limit): the connection lingers after the answer.
    @exclusivity(unchecked) private var lingerAfterResponse = false
    /// The body of a request whose handler already runs (`RouteOptions.streamsBody`), while it arrives.
    @exclusivity(unchecked) private var bodyStream: RequestBodyStream?
    /// That request's client waits for `100 Continue`: sent on the handler's first read, never if it answers first.
    @exclusivity(unchecked) private var continuePending = false
    /// Monotonic ms after which the connection is closed (0 = none).
    @exclusivity(unchecked) private var deadline: Int64
    private static let readChunk = 64 * 1024

    init(fd: Int32, server: HTTPServer, loop: EventLoop) {
        self.fd = fd
        self.server = server
        self.loop = loop
        parser = HTTPRequestParser(limits: server.configuration.limits)
        deadline = loop.nowMillis + server.headerTimeoutMillis
    }

    var id: ConnectionID { ConnectionID(fd: fd, generation: generation) }

    private var isIdle: Bool {
        if case .awaitingHead = phase, parser.isIdle, output.count == outputOffset { return true }
        return false
    }

    // MARK: - Events

    func handle(events: UInt32, loop: EventLoop) {
        if events & (PARLEY_EPOLLERR | PARLEY_EPOLLHUP) != 0 {
            close()
            return
        }
        if events & PARLEY_EPOLLOUT != 0 {
            flush()
            if case .closed = phase { return }
        }
        if events & (PARLEY_EPOLLIN | PARLEY_EPOLLRDHUP) != 0 {
            if isBusy && events & PARLEY_EPOLLRDHUP == 0 {
                // Input while a response is computed or written (pipelining): leave it in the kernel until the
                // response is out. Pausing only when this happens, rather than around every handler, saves two
                // epoll_ctl calls per request (bench/RESULTS.md).
                pauseReading(true)
                return
            }
            readAvailable()
        }
    }

    /// A request is being handled or its response written: the next one must wait.
    private var isBusy: Bool {
        switch phase {
        case .handling, .writing: true
        // A body of known length keeps the connection: a pipelined request waits in the kernel meanwhile.
        case .streaming(let stream): !stream.chunked
        default: false
        }
    }

    private func readAvailable() {
        var budget = 4
        while budget > 0 {
            budget -= 1
            let n = loop.withReadBuffer { buffer -> Int in
                let n = recv(fd, buffer.baseAddress, buffer.count, 0)
                if n > 0 {
                    switch phase {
                    case .streaming: break  // input during a stream is ignored
                    case .lingering(let remaining): phase = .lingering(remaining: remaining - n)
                    default: parser.append(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
                    }
                }
                return n
            }
            if n == 0 {
                close()  // peer closed; a response still being computed is dropped on delivery
                return
            }
            if n < 0 {
                if errno == EAGAIN || errno == EWOULDBLOCK { break }
                if errno == EINTR { continue }
                close()
                return
            }
            if case .lingering(let remaining) = phase, remaining <= 0 {
                close()  // enough dropped: a client still sending gets a reset now
                return
            }
            if n < Self.readChunk { break }
        }
        process()
    }

    /// Runs the parser while the connection may start or continue a request.
    private func process() {
        while true {
            switch phase {
            case .awaitingHead, .readingBody: break
            default: return
            }
            let progress: HTTPRequestParser.Progress
            do {
                progress = try parser.advance()
            } catch {
                if let stream = bodyStream {
                    // The handler runs already: it learns from its next read and answers (413 or 400) itself. The
                    // connection closes after that answer; the rest of the input is dropped.
                    stream.fail(error.kind == .payloadTooLarge ? .tooLarge : .malformed)
                    bodyStream = nil
                    closeAfterResponse = true
                    lingerAfterResponse = true
                    phase = .handling
                    deadline = 0
                    return
                }
                if error.kind == .payloadTooLarge, case .readingBody = phase {
                    // Over the route's limit: nothing more of the body is kept (the failed parser drops its input)
                    // and the request is dispatched now, so its route can put 413 after its other checks. The rest
                    // of the body is never parsed: the connection lingers after the answer, then closes.
                    lingerAfterResponse = true
                    dispatch(body: [], bodyOverLimit: true)
                    return
                }
                fail(with: error)
                return
            }
            switch progress {
            case .needMore:
                if let stream = bodyStream, stream.push(parser.takeBodySoFar()) {
                    // The handler has a backlog (or has not asked for the body yet): the socket waits, and so does
                    // the body's clock, until it reads (``resumeBody()``).
                    pauseReading(true)
                    deadline = 0
                    return
                }
                refreshReadDeadline()
                return
            case .head: begin(parser.takeHead())
            case .end:
                if let stream = bodyStream {
                    stream.finish(parser.takeBody())
                    bodyStream = nil
                    phase = .handling
                    deadline = 0
                } else {
                    dispatch(body: parser.takeBody())
                }
            }
        }
    }

    private func refreshReadDeadline() {
        switch phase {
        case .awaitingHead:
            if parser.isIdle {
                if deadline == 0 { deadline = loop.nowMillis + server.idleTimeoutMillis }
            } else if !headDeadlineArmed {
                // The first bytes of a new request start the header clock (slow-loris defence).
                deadline = loop.nowMillis + server.headerTimeoutMillis
                headDeadlineArmed = true
            }
        case .readingBody:
            deadline = loop.nowMillis + server.bodyTimeoutMillis
        default: break
        }
    }

    @exclusivity(unchecked) private var headDeadlineArmed = true
    /// A request has started on this connection (a fresh one, idle at shutdown, may still be sending its first).
    @exclusivity(unchecked) private var servedRequest = false

    /// Bytes wait in the socket (a request this loop has not read yet).
    private func hasUnreadInput() -> Bool {
        var byte: UInt8 = 0
        return recv(fd, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT)) > 0
    }

    private func begin(_ head: HTTPRequestHead) {
        servedRequest = true
        phase = .readingBody
        let pending = server.begin(head) { server.nextRequestID(loop: loop) }
        parser.setBodyLimit(pending.bodyLimit)
        if let route = pending.route, route.options.streamsBody, pending.problem == nil, (head.contentLength ?? 0) <= pending.bodyLimit {
            startStreamingBody(pending, expectsContinue: head.expectsContinue)
            return
        }
        if head.expectsContinue {
            var routable = head.method == .options
            if case .found = pending.match { routable = true }
            if pending.problem != nil { routable = false }
            if routable && (head.contentLength ?? 0) <= pending.bodyLimit {
                append(Array("HTTP/1.1 100 Continue\r\n\r\n".utf8))
                flush()
            } else if !routable {
                // Do not invite a body we will not use: answer now and close.
                self.pending = pending
                closeAfterResponse = true
                respond(server.hooks.problem(HTTPServer.problem(for: pending), pending.requestID), to: pending)
                return
            }
        }
        self.pending = pending
        refreshReadDeadline()
    }

    private func dispatch(body: [UInt8], bodyOverLimit: Bool = false) {
        guard let pending else { return }
        if !pending.keepsConnection || bodyOverLimit || server.draining.load(ordering: .relaxed) { closeAfterResponse = true }
        switch server.dispatch(pending, body: body, bodyOverLimit: bodyOverLimit, receivedAtMillis: loop.nowMillis) {
        case .answer(let response):
            respond(response, to: pending)
        case .handle(let route, let request):
            if route.options.runsOnEventLoop {
                respond(server.runInline(route, request), to: pending)
                return
            }
            phase = .handling
            deadline = 0
            server.execute(route, request, deliver: .connection(id, loop))
        }
    }

    /// The handler of a `streamsBody` route starts now, with the body to come through a stream this connection fills.
    private func startStreamingBody(_ pending: PendingRequest, expectsContinue: Bool) {
        self.pending = pending
        if !pending.keepsConnection || server.draining.load(ordering: .relaxed) { closeAfterResponse = true }
        continuePending = expectsContinue
        let (id, loop) = (id, loop)
        let stream = RequestBodyStream(startsPaused: expectsContinue) { loop.enqueue(.bodyResume(id)) }
        switch server.dispatch(pending, body: [], bodyStream: stream, receivedAtMillis: loop.nowMillis) {
        case .answer(let response):
            closeAfterResponse = true
            lingerAfterResponse = true
            respond(response, to: pending)
        case .handle(let route, let request):
            bodyStream = stream
            refreshReadDeadline()
            server.execute(route, request, deliver: .connection(id, loop))
        }
    }

    /// The handler of a streamed body read down its backlog (or asked for the body the client waits to send).
    func resumeBody() {
        guard case .readingBody = phase, bodyStream != nil else { return }
        if continuePending {
            continuePending = false
            append(Array("HTTP/1.1 100 Continue\r\n\r\n".utf8))
            flush()
            if case .closed = phase { return }
        }
        pauseReading(false)
        refreshReadDeadline()
        readAvailable()
    }

    /// A handler's response arrives from a worker thread (through the loop's inbox).
    func deliver(_ response: Response) {
        if case .readingBody = phase, let stream = bodyStream, let pending {
            // Answered before its body ended (a refusal, or a handler that did not need the rest): the rest is
            // dropped while the answer goes out, then the connection closes.
            stream.fail(.abandoned)
            bodyStream = nil
            continuePending = false
            closeAfterResponse = true
            lingerAfterResponse = true
            respond(response, to: pending)
            return
        }
        guard case .handling = phase, let pending else { return }
        respond(response, to: pending)
    }

    // MARK: - Writing

    private func respond(_ response: Response, to pending: PendingRequest) {
        self.pending = nil
        // The response is written straight into the output buffer (no intermediate arrays on the hot path).
        if outputOffset == output.count {
            output.removeAll(keepingCapacity: output.capacity <= 64 * 1024)
            outputOffset = 0
        }
        server.writeResponse(
            response, for: pending, dateHeader: loop.dateHeader, closeAfterResponse: &closeAfterResponse, into: &output)
        switch response.body {
        case .bytes:
            phase = .writing
        case .later:
            preconditionFailure("a deferred response reached respond() unsettled")
        case .stream(let start):
            let isHead = pending.head.method == .head
            let s = ResponseStream(
                loop: loop, connection: id, maxBufferedBytes: server.configuration.streamBufferLimit,
                declaredLength: response.headers["Content-Length"].flatMap { Int($0) })
            phase = isHead ? .writing : .streaming(s)
            if !isHead, var size = server.configuration.streamSendBuffer.map(Int32.init) {
                setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
            }
            if isHead { s.markClosed() } else { start(s) }
        }
        server.completed(pending, response: response)
        flush()
    }

    private func append(_ bytes: [UInt8]) {
        startOverIfSent()
        output.append(contentsOf: bytes)
    }

    /// Once everything queued went out, the buffer starts over (kept unless it grew past 64 KiB).
    private func startOverIfSent() {
        if outputOffset == output.count {
            output.removeAll(keepingCapacity: output.capacity <= 64 * 1024)
            outputOffset = 0
        }
    }

    /// Appends a chunk's size line: `count` in hex, then CRLF.
    private func appendChunkSizeLine(_ count: Int) {
        var shift = max(0, (Int.bitWidth - count.leadingZeroBitCount + 3) / 4 - 1) * 4
        while shift >= 0 {
            let digit = UInt8((count >> shift) & 0xF)
            output.append(digit < 10 ? 0x30 + digit : 0x57 + digit)
            shift -= 4
        }
        output.append(0x0D)
        output.append(0x0A)
    }

    /// Writes as much queued output as the socket takes; arms EPOLLOUT only while bytes remain.
    private func flush() {
        // A stream's writer paces itself on what is still unsent (`ResponseStream.backlog`).
        defer { if case .streaming(let stream) = phase { stream.buffered.store(output.count - outputOffset, ordering: .relaxed) } }
        while outputOffset < output.count {
            let n = output.withUnsafeBytes { raw in
                send(fd, raw.baseAddress! + outputOffset, raw.count - outputOffset, Int32(MSG_NOSIGNAL))
            }
            if n > 0 {
                outputOffset += n
                // Progress restarts the write-stall clock (a slow but moving reader is not cut off).
                if writeInterest { deadline = loop.nowMillis + server.writeTimeoutMillis }
                continue
            }
            if n < 0 && errno == EINTR { continue }
            if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                setWriteInterest(true)
                if deadline == 0 { deadline = loop.nowMillis + server.writeTimeoutMillis }
                return
            }
            close()
            return
        }
        setWriteInterest(false)
        output.removeAll(keepingCapacity: output.capacity <= 64 * 1024)
        outputOffset = 0
        switch phase {
        case .writing: responseDrained()
        case .streaming: deadline = 0
        default: break
        }
    }

    private func responseDrained() {
        if closeAfterResponse {
            if lingerAfterResponse {
                linger()
            } else {
                close()
            }
            return
        }
        phase = .awaitingHead
        deadline = 0
        headDeadlineArmed = false
        pauseReading(false)
        process()
    }

    /// After answering a request whose body it did not read: shut our side (the answer is complete) and drop input
    /// until the client closes, `lingerBytes` have been dropped or `lingerTimeout` passes. Closing at once with
    /// unread input would send a reset, which can destroy the answer before the client reads it.
    private func linger() {
        shutdown(fd, Int32(SHUT_WR))
        phase = .lingering(remaining: server.configuration.lingerBytes)
        deadline = loop.nowMillis + server.lingerTimeoutMillis
        pauseReading(false)
        readAvailable()
    }

    private func setWriteInterest(_ on: Bool) {
        guard on != writeInterest else { return }
        if case .closed = phase { return }
        writeInterest = on
        updateInterest()
    }

    private func pauseReading(_ paused: Bool) {
        guard paused != readPaused else { return }
        readPaused = paused
        updateInterest()
    }

    private func updateInterest() {
        var events = PARLEY_EPOLLRDHUP
        if !readPaused { events |= PARLEY_EPOLLIN }
        if writeInterest { events |= PARLEY_EPOLLOUT }
        loop.modify(fd: fd, generation: generation, events: events)
    }

    private func fail(with error: HTTPParseError) {
        closeAfterResponse = true
        let p = server.failedRequest(pending) { server.nextRequestID(loop: loop) }
        respond(server.hooks.problem(HTTPServer.problem(for: error), p.requestID), to: p)
    }

    // MARK: - Streams

    func streamWrite(_ bytes: [UInt8]) {
        guard case .streaming(let stream) = phase else { return }
        stream.queued.subtract(bytes.count, ordering: .relaxed)
        if stream.chunked {
            // The chunk goes straight into the output buffer (size line, bytes, CRLF): one copy of the bytes, and no
            // allocation for the size line (a big group's message is one such write per member stream).
            startOverIfSent()
            appendChunkSizeLine(bytes.count)
            output.append(contentsOf: bytes)
            output.append(0x0D)
            output.append(0x0A)
        } else {
            append(bytes)
            stream.writtenBytes.add(bytes.count, ordering: .relaxed)
        }
        // The bound is on what the socket would not take: one write larger than it (a page of big events) still goes
        // out to a client that reads, and only a client that leaves more than it waiting is cut
        // (docs/events.md#slow-consumers).
        flush()
        if case .closed = phase { return }
        if output.count - outputOffset > stream.maxBufferedBytes {
            server.logger.debug("msg=\"slow stream closed\" fd=\(fd) waiting_bytes=\(output.count - outputOffset)")
            close()
        }
    }

    func streamFinish() {
        guard case .streaming(let stream) = phase else { return }
        if stream.chunked { append(Array("0\r\n\r\n".utf8)) }
        phase = .writing
        // A chunked stream ends with the connection; one of known length keeps it when every byte it declared went out
        // (a writer that stopped short leaves the client counting: only the close tells it).
        if stream.chunked || stream.writtenBytes.load(ordering: .relaxed) != stream.declaredLength { closeAfterResponse = true }
        // The stream is over for its writers now, whoever ended it: run its close handlers (the socket closes
        // once the last bytes are out, when the phase is no longer `.streaming`).
        stream.markClosed()
        flush()
    }

    // MARK: - Lifecycle

    /// Deadline sweep (once per second): close connections past their deadline.
    func checkDeadline(now: Int64) {
        guard deadline != 0, now >= deadline else { return }
        let timedOut: Bool
        switch phase {
        case .awaitingHead: timedOut = !parser.isIdle  // a slow head (an idle keep-alive connection just closes)
        case .readingBody: timedOut = true  // a stalled body; no response has started (a 100 Continue is not one)
        default: timedOut = false
        }
        if timedOut, let stream = bodyStream {
            // The handler's answer, when it comes, finds the connection past its request and is dropped.
            stream.fail(.timedOut)
            bodyStream = nil
        }
        if timedOut {
            // Tell the client why (408), then close.
            closeAfterResponse = true
            let p = server.failedRequest(pending) { server.nextRequestID(loop: loop) }
            respond(server.hooks.problem(.requestTimeout, p.requestID), to: p)
            if case .closed = phase { return }
            deadline = now + 1000  // give the 408 one second to drain
            return
        }
        close()
    }

    /// Shutdown: idle connections close now; busy ones close after their response (`Connection: close`); streams end.
    /// An idle connection whose next request is already in the socket, or that has not sent its first one yet (it was
    /// accepted from the backlog as the listener closed), is served instead: closing it would fail a request the
    /// client has sent, which a proxy may not retry elsewhere (a POST).
    func drain() {
        closeAfterResponse = true
        switch phase {
        case .awaitingHead where isIdle && (servedRequest && !hasUnreadInput()), .lingering: close()
        case .awaitingHead where isIdle: deadline = min(deadline == 0 ? Int64.max : deadline, loop.nowMillis + 1000)
        case .streaming: streamFinish()
        default: break
        }
    }

    func close() {
        if case .closed = phase { return }
        let stream: ResponseStream?
        if case .streaming(let s) = phase { stream = s } else { stream = nil }
        phase = .closed
        bodyStream?.fail(.closed)
        bodyStream = nil
        loop.deregister(fd: fd)
        Glibc.close(fd)
        let count = server.openConnections.subtract(1, ordering: .relaxed).newValue
        server.hooks.connectionsChanged(count)
        output = []
        stream?.markClosed()
    }
}

extension EventLoop {
    /// The live connection with this id, or nil if it closed (and its fd was perhaps reused).
    func connection(_ id: ConnectionID) -> HTTPConnection? {
        watcher(fd: id.fd, generation: id.generation) as? HTTPConnection
    }

    func sweepConnections() {
        refreshDateHeader()
        let now = nowMillis
        for case let connection as HTTPConnection in watchers { connection.checkDeadline(now: now) }
    }

    func drainConnections() {
        for case let connection as HTTPConnection in watchers { connection.drain() }
    }

    func closeAllConnections() {
        for case let connection as HTTPConnection in watchers { connection.close() }
    }
}

extension Duration {
    var millis: Int64 { components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000 }
}
