internal import CLibPQ

/// Sends the cancel requests of abandoned statements (`PostgresConnection` timed out) from one background thread.
///
/// `PQcancel` blocks: it connects to the server and waits until the server closes that connection, which a stalled
/// server does only once it runs again. On a thread of its own that wait holds up nobody, and the cancel still stops
/// a statement that was merely slow (it would otherwise run on, holding its locks, until it tried to send its
/// result). Owner: the queue of tokens (at most 64 wait; beyond that a cancel is dropped, the statement then ends when
/// its backend finds the connection closed). The thread lives as long as the process, like `ProcessSpawner`'s.
final class PostgresCanceller: Sendable {
    static let shared = PostgresCanceller()

    private let requests = WaitQueue<Token>(capacity: 64)

    private init() {
        let requests = self.requests
        // Never joined: it may be waiting on a stalled server when the process ends.
        _ = PostgresThread.start(name: "pg-canceller") {
            while let token = requests.pop() { token.send() }
        }
    }

    /// Queues a cancel request; `cancel` (from `PQgetCancel`) is freed here or after sending.
    func cancel(_ cancel: OpaquePointer) {
        if !requests.push(Token(cancel)) { PQfreeCancel(cancel) }
    }

    /// One `PGcancel`: the server's address and the session's key, copied from the connection (independent of it).
    ///
    /// @unchecked Sendable: made by the abandoning thread and then used only by the canceller thread, which frees it.
    private final class Token: @unchecked Sendable {
        private let pointer: OpaquePointer
        init(_ pointer: OpaquePointer) { self.pointer = pointer }

        func send() {
            var errorBuffer = [CChar](repeating: 0, count: 256)
            _ = PQcancel(pointer, &errorBuffer, Int32(errorBuffer.count))
            PQfreeCancel(pointer)
        }
    }
}
