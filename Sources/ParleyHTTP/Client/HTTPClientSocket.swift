import CParleyShims
import Glibc

/// A blocking TCP socket with deadlines, for the HTTP client (and, adopted, for the test receiver).
///
/// Owned by one `HTTPClientConnection` (or a `TLSStream` over it) and used by one thread at a time. The socket stays
/// in blocking mode with `SO_RCVTIMEO`/`SO_SNDTIMEO` as a backstop; reads first `poll` until the caller's deadline
/// so that a whole exchange, not just one `recv`, is bounded.
package final class HTTPClientSocket: HTTPClientTransport {
    private(set) var fd: Int32

    /// Connects to the first of `addresses` that accepts before `deadline` (`name` is `host:port`, for messages).
    init(connectingTo addresses: [HTTPClientAddress], name: String, deadline: ContinuousClock.Instant, ioTimeout: Duration)
        throws
    {
        var lastError = HTTPClientError(.connectFailed, "no address for \(name)")
        for address in addresses {
            do {
                fd = try Self.connect(address, deadline: deadline, name: name)
                try configure(ioTimeout: ioTimeout)
                return
            } catch let error as HTTPClientError {
                if error.kind == .timeout { throw error }
                lastError = error
            }
        }
        throw lastError
    }

    /// Takes ownership of a connected, blocking descriptor (the accepted side of a test server).
    package init(adopting fd: Int32, ioTimeout: Duration) throws {
        self.fd = fd
        try configure(ioTimeout: ioTimeout)
    }

    deinit { close() }

    /// Opens a non-blocking socket, connects it with `poll` bounded by `deadline`, then makes it blocking again.
    private static func connect(_ address: HTTPClientAddress, deadline: ContinuousClock.Instant, name: String) throws
        -> Int32
    {
        let type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue)
        let fd = socket(address.family, type, address.socketProtocol)
        guard fd >= 0 else { throw HTTPClientError(.connectFailed, "socket(): \(errnoText())") }
        var ok = false
        defer { if !ok { _ = Glibc.close(fd) } }

        var storage = address.storage
        let rc = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, address.length) }
        }
        if rc != 0 {
            guard errno == EINPROGRESS || errno == EINTR else {
                throw HTTPClientError(.connectFailed, "connect to \(name): \(errnoText())")
            }
            guard try poll(fd, events: Int16(POLLOUT), until: deadline) else {
                throw HTTPClientError(.timeout, "connect to \(name) timed out")
            }
            var error: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 else {
                throw HTTPClientError(.connectFailed, "connect to \(name): \(errnoText())")
            }
            guard error == 0 else {
                throw HTTPClientError(.connectFailed, "connect to \(name): \(String(cString: strerror(error)))")
            }
        }
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0, fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0 else {
            throw HTTPClientError(.connectFailed, "fcntl(): \(errnoText())")
        }
        ok = true
        return fd
    }

    /// Switches the descriptor to non-blocking mode (for TLS, whose reads and writes wait with `poll`).
    func setNonBlocking() throws {
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else {
            throw HTTPClientError(.connectFailed, "fcntl(): \(errnoText())")
        }
    }

    private func configure(ioTimeout: Duration) throws {
        var one: Int32 = 1
        var tv = Self.timeval(ioTimeout)
        let size = socklen_t(MemoryLayout<timeval>.size)
        guard setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size)) == 0,
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, size) == 0,
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, size) == 0
        else {
            let text = errnoText()
            close()
            throw HTTPClientError(.connectFailed, "setsockopt(): \(text)")
        }
    }

    /// Writes every byte, or throws (`.closed` if the peer is gone, `.timeout` past `deadline` or `SO_SNDTIMEO`).
    package func sendAll(_ bytes: [UInt8], deadline: ContinuousClock.Instant) throws {
        guard fd >= 0 else { throw HTTPClientError(.closed, "connection is closed") }
        try bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                if ContinuousClock.now >= deadline { throw HTTPClientError(.timeout, "write timed out") }
                let n = Glibc.send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                if n >= 0 {
                    offset += n
                    continue
                }
                switch errno {
                case EINTR: continue
                case EAGAIN, EWOULDBLOCK: throw HTTPClientError(.timeout, "write timed out")
                case EPIPE, ECONNRESET, ENOTCONN:
                    throw HTTPClientError(.closed, "peer closed the connection: \(errnoText())")
                default: throw HTTPClientError(.closed, "send(): \(errnoText())")
                }
            }
        }
    }

    /// Waits until `events` (`POLLIN`, `POLLOUT`) are ready, or the connection is in error; false past `deadline`.
    func wait(for events: Int32, until deadline: ContinuousClock.Instant) throws -> Bool {
        guard fd >= 0 else { throw HTTPClientError(.closed, "connection is closed") }
        return try Self.poll(fd, events: Int16(events), until: deadline)
    }

    /// Waits for bytes until `deadline` and appends what is available (at most `limit` bytes); returns the count, 0
    /// at end of stream. A reset connection counts as end of stream.
    package func receive(appendingTo buffer: inout [UInt8], deadline: ContinuousClock.Instant) throws -> Int {
        guard try wait(for: Int32(POLLIN), until: deadline) else { throw HTTPClientError(.timeout, "read timed out") }
        let limit = 64 * 1024
        // Into scratch space, then append what arrived: growing the buffer by `limit` zeros first cost more than the
        // read itself (element by element in debug builds, where the test suites run).
        return try withUnsafeTemporaryAllocation(of: UInt8.self, capacity: limit) { scratch in
            while true {
                let n = Glibc.recv(fd, scratch.baseAddress!, limit, 0)
                if n >= 0 {
                    buffer.append(contentsOf: UnsafeBufferPointer(rebasing: scratch[..<n]))
                    return n
                }
                let code = errno
                if code == EINTR { continue }
                switch code {
                case ECONNRESET, ENOTCONN, EPIPE: return 0
                case EAGAIN, EWOULDBLOCK: throw HTTPClientError(.timeout, "read timed out")
                default: throw HTTPClientError(.closed, "recv(): \(String(cString: strerror(code)))")
                }
            }
        }
    }

    /// Closes the descriptor (idempotent).
    package func close() {
        if fd >= 0 {
            _ = Glibc.close(fd)
            fd = -1
        }
    }

    /// Polls one descriptor for `events` until `deadline`; true when ready (or in error/hang-up, which the next
    /// call reports).
    private static func poll(_ fd: Int32, events: Int16, until deadline: ContinuousClock.Instant) throws -> Bool {
        while true {
            let remaining = deadline - ContinuousClock.now
            let ms = remaining <= .zero ? 0 : Int32(clamping: milliseconds(remaining) + 1)
            var entry = pollfd(fd: fd, events: events, revents: 0)
            let n = Glibc.poll(&entry, 1, ms)
            if n > 0 { return true }
            if n == 0 {
                if ContinuousClock.now >= deadline { return false }
                continue
            }
            if errno == EINTR { continue }
            throw HTTPClientError(.closed, "poll(): \(errnoText())")
        }
    }

    private static func milliseconds(_ d: Duration) -> Int64 {
        let (seconds, attoseconds) = d.components
        let (ms, overflow) = seconds.multipliedReportingOverflow(by: 1000)
        return overflow ? Int64.max / 2 : ms + attoseconds / 1_000_000_000_000_000
    }

    private static func timeval(_ d: Duration) -> Glibc.timeval {
        let (seconds, attoseconds) = d.components
        return Glibc.timeval(tv_sec: Int(max(seconds, 0)), tv_usec: Int(max(attoseconds, 0) / 1_000_000_000_000))
    }
}

/// The text of the current `errno`.
private func errnoText() -> String { String(cString: strerror(errno)) }
