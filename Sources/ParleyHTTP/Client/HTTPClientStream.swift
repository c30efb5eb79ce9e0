/// A response body read as it arrives, line by line or as Server-Sent Events, from `openStream`.
///
/// Chunked, length-delimited and close-delimited bodies are all handled; the framing is removed before lines are
/// split. Not `Sendable`: one thread at a time owns it and the connection under it. A timeout leaves the stream
/// usable: it only means nothing complete arrived in time.
public final class HTTPClientStream {
    /// The status code of the response.
    public let status: Int
    /// The header fields of the response.
    public let headers: HTTPHeaders

    private let connection: HTTPClientConnection
    private var body: HTTPClientBodyDecoder
    private var sse = SSEDecoder()
    private var ended = false

    init(connection: HTTPClientConnection, status: Int, headers: HTTPHeaders, decoder: HTTPClientBodyDecoder) {
        self.connection = connection
        self.status = status
        self.headers = headers
        self.body = decoder
    }

    /// The last `id` field seen on the stream (what a reconnecting client sends as `Last-Event-ID`).
    public var lastEventID: String? { sse.lastEventID }

    /// The next line of the body without its line ending; nil once the body has ended.
    ///
    /// Throws `.timeout` if no complete line arrives within `timeout`. A partial last line is dropped, as the
    /// event-stream rules say.
    public func nextLine(timeout: Duration) throws -> String? {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let line = sse.nextLine() { return line }
            if ended { return nil }
            try pump(deadline: deadline)
        }
    }

    /// The next event block (ended by a blank line); nil once the body has ended.
    ///
    /// Throws `.timeout` if no complete block arrives within `timeout`; lines read so far are kept for the next call.
    public func nextEvent(timeout: Duration) throws -> SSEEvent? {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let event = sse.nextEvent() { return event }
            if ended { return nil }
            try pump(deadline: deadline)
        }
    }

    /// Closes the connection under the stream.
    public func close() {
        ended = true
        connection.close()
    }

    /// Decodes buffered bytes, or reads more when none can be used.
    private func pump(deadline: ContinuousClock.Instant) throws {
        let available = connection.unconsumed
        if !available.isEmpty && !body.isDone {
            var payload: [UInt8] = []
            let used = try body.decode(available, into: &payload)
            connection.consume(used)
            try sse.feed(payload)
            if body.isDone {
                ended = true
                return
            }
            if used > 0 { return }
        } else if body.isDone {
            ended = true
            return
        }
        if try !connection.fill(deadline: deadline) {
            try body.finishAtEndOfStream()
            ended = true
        }
    }
}
