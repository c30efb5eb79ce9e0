/// One Server-Sent Events block as read by `HTTPClientStream`: the fields between two blank lines.
///
/// Unlike a browser's `EventSource`, a block without `data` lines (only comments, `id` or `retry`) is still
/// returned, with an empty `data`, so tests can see keep-alive comments such as `: ping`.
public struct SSEEvent: Sendable, Equatable {
    /// The `id` field of this block, or nil when the block had none (the stream keeps the last one seen).
    public var id: String?
    /// The `event` field (the event type), or nil for the default `message`.
    public var event: String?
    /// The `data` lines joined with `\n`.
    public var data: String
    /// The comment lines (`:` removed, and one leading space), in order.
    public var comments: [String]
    /// The `retry` field in milliseconds, when it was a valid integer.
    public var retry: Int?

    public init(id: String? = nil, event: String? = nil, data: String = "", comments: [String] = [], retry: Int? = nil) {
        self.id = id
        self.event = event
        self.data = data
        self.comments = comments
        self.retry = retry
    }
}
