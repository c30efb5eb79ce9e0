import Glibc
import ParleySync
import Synchronization

/// The writable end of a streaming response (SSE). Any thread may write; bytes reach the socket through the
/// connection's event loop, in call order.
///
/// Owner: `state` is guarded by its `LockedValue`; the socket side belongs to the connection on `loop`.
public final class ResponseStream: Sendable {
    private struct State {
        var closed = false
        var closeHandlers: [@Sendable () -> Void] = []
    }

    let loop: EventLoop
    let connection: ConnectionID
    private let state = LockedValue(State())
    /// Bytes handed to the loop by `write` and not yet in the connection's output buffer.
    let queued = Atomic<Int>(0)
    /// Bytes in the connection's output buffer not yet taken by the socket (set by the connection after each flush).
    let buffered = Atomic<Int>(0)
    /// When the bytes queued for the socket exceed this, the client is too slow: the connection is closed
    /// (it resumes later, e.g. with `Last-Event-ID`) rather than letting memory grow without bound.
    public let maxBufferedBytes: Int
    /// The body's length when the response declared one (`Content-Length`): its bytes go out as they are, and the
    /// connection carries the next request once exactly that many went out. Nil: writes are framed as chunks.
    let declaredLength: Int?
    var chunked: Bool { declaredLength == nil }
    /// Bytes of a body of known length put in the connection's output so far (written and read by its loop only).
    let writtenBytes = Atomic<Int>(0)

    init(loop: EventLoop, connection: ConnectionID, maxBufferedBytes: Int, declaredLength: Int? = nil) {
        self.loop = loop
        self.connection = connection
        self.maxBufferedBytes = maxBufferedBytes
        self.declaredLength = declaredLength
    }

    /// Queues `bytes` as one chunk. Ignored once the stream is closed.
    public func write(_ bytes: [UInt8]) {
        if isClosed || bytes.isEmpty { return }
        queued.add(bytes.count, ordering: .relaxed)
        loop.enqueue(.streamWrite(connection, bytes))
    }

    /// Bytes written and not yet sent to the socket: a writer that produces faster than the client reads (a bulk
    /// export) waits on this instead of reaching `maxBufferedBytes`, which closes the stream.
    public var backlog: Int { queued.load(ordering: .relaxed) + buffered.load(ordering: .relaxed) }

    /// Blocks the calling thread (never an event loop) until `backlog` is below `limit` or the stream closed.
    public func waitForBacklog(below limit: Int) {
        while backlog >= limit && !isClosed { usleep(1_000) }
    }

    /// Ends the response (terminating chunk) and closes the connection once everything is flushed.
    public func close() {
        loop.enqueue(.streamFinish(connection))
    }

    /// True once the connection is gone or the stream was closed.
    public var isClosed: Bool { state.withLock { $0.closed } }

    /// Runs `handler` once when the stream closes (client gone, server closed it, or shutdown). Runs at once if
    /// already closed.
    public func onClose(_ handler: @escaping @Sendable () -> Void) {
        let runNow = state.withLock { s -> Bool in
            if s.closed { return true }
            s.closeHandlers.append(handler)
            return false
        }
        if runNow { handler() }
    }

    /// Called by the connection when the socket closes.
    func markClosed() {
        let handlers = state.withLock { s -> [@Sendable () -> Void] in
            if s.closed { return [] }
            s.closed = true
            defer { s.closeHandlers = [] }
            return s.closeHandlers
        }
        for handler in handlers { handler() }
    }
}

/// Identifies a connection on its loop across threads; the generation guards against fd reuse.
public struct ConnectionID: Sendable, Hashable {
    let fd: Int32
    let generation: UInt32
}
