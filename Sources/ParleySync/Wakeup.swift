import Glibc

/// Wakes one background thread that sleeps until there is work or a deadline passes (the live hub, the event
/// sequencer, the message writer).
///
/// A non-blocking pipe: `signal` from any thread writes a byte, `wait` polls the read end and drains it. Signals
/// sent while the thread is busy are not lost: the next `wait` returns at once. Owner: the two file descriptors,
/// closed in `deinit`.
public final class Wakeup: Sendable {
    private let readEnd: Int32
    private let writeEnd: Int32

    public init() {
        var fds: [Int32] = [-1, -1]
        precondition(pipe(&fds) == 0, "pipe failed: \(errno)")
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        }
        readEnd = fds[0]
        writeEnd = fds[1]
    }

    deinit {
        close(readEnd)
        close(writeEnd)
    }

    /// Wakes the waiting thread (or makes its next `wait` return at once).
    public func signal() {
        var byte: UInt8 = 1
        _ = write(writeEnd, &byte, 1)
    }

    /// Sleeps until `signal` or `timeoutMillis` (negative: no timeout), then clears the pending signals.
    public func wait(timeoutMillis: Int) {
        var pfd = pollfd(fd: readEnd, events: Int16(POLLIN), revents: 0)
        if poll(&pfd, 1, Int32(clamping: timeoutMillis)) > 0 {
            withUnsafeTemporaryAllocation(byteCount: 64, alignment: 1) { buffer in
                while read(readEnd, buffer.baseAddress, buffer.count) > 0 {}
            }
        }
    }

    /// Sleeps for `millis` without waking on signals (backoff after a failure).
    public static func sleep(millis: Int) {
        var ts = timespec(tv_sec: millis / 1000, tv_nsec: (millis % 1000) * 1_000_000)
        nanosleep(&ts, nil)
    }
}
