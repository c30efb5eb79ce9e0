import Synchronization

/// Whether the node can take one more event stream without running out of file descriptors
/// (docs/scaling.md#open-files).
///
/// Every client connection holds a descriptor, and an idle stream holds its connection for hours, so streams are what
/// can use up the open-files limit. A new stream is refused (503 `7000020`) once the client connections, this one
/// included, would leave fewer than `reserve` descriptors below the limit: those are kept for what must still work
/// when the node is full of streams, its database connections first (the pool, and the dedicated connections opened
/// after the listener), then outbound webhook and push connections, files, and ordinary requests. The connections are
/// counted as the server accepts and closes them (``connectionsChanged(_:)``), never by scanning /proc per request.
///
/// Owner: any thread; the cap and the count are atomics.
package final class StreamCapacity: Sendable {
    /// Descriptors kept free of client connections.
    package let reserve: Int
    /// Client connections allowed while a stream opens (`Int.max` until the server has started).
    private let cap = Atomic<Int>(Int.max)
    /// Open client connections, as the HTTP server last reported them.
    private let connections = Atomic<Int>(0)

    package init(reserve: Int) { self.reserve = reserve }

    /// The client connections a node may hold while a new stream opens: the open-files limit, less what the process
    /// held before it listened (`atStart`: standard streams, logs, the embedded PostgreSQL's pipes…) and the reserve.
    package static func connectionCap(openFiles: Int, atStart: Int, reserve: Int) -> Int {
        if openFiles == Int.max { return Int.max }
        return max(0, openFiles - atStart - reserve)
    }

    /// Sets the cap from the server's limit once it listens; returns it.
    @discardableResult
    package func start(openFiles: Int, atStart: Int) -> Int {
        let value = Self.connectionCap(openFiles: openFiles, atStart: atStart, reserve: reserve)
        cap.store(value, ordering: .relaxed)
        return value
    }

    /// Sets the cap itself (tests: a few streams fill it).
    package func setCap(_ value: Int) { cap.store(value, ordering: .relaxed) }

    package var connectionCap: Int { cap.load(ordering: .relaxed) }

    /// The HTTP server's hook: the open client connections changed.
    package func connectionsChanged(_ count: Int) { connections.store(count, ordering: .relaxed) }

    /// Whether a stream may open now: the request's own connection is already counted, so at most `cap` connections,
    /// that one included.
    package var admitsStream: Bool { connections.load(ordering: .relaxed) <= cap.load(ordering: .relaxed) }

    /// Seconds a refused client waits before it tries again (`Retry-After`): streams end as their clients leave, and a
    /// balancer sends the retry to another node meanwhile.
    static let retryAfterSeconds = 5
}
