internal import CLibPQ
import Glibc
import ParleySync
import Synchronization

/// Receives LISTEN/NOTIFY notifications on a dedicated thread and connection, reconnecting forever.
///
/// The thread waits with `poll()` on the connection's socket and a wake-up pipe (no sleep polling). After a
/// reconnect it re-issues every LISTEN and calls `onReconnect`, so consumers re-read what they may have
/// missed while disconnected. The connection is owned by the listener thread; shared state is atomics.
public final class PostgresListener: Sendable {
    public let channels: [String]
    private let configuration: PostgresConfiguration
    private let logger: PostgresLogger
    private let onNotification: @Sendable (_ channel: String, _ payload: String) -> Void
    private let onReconnect: @Sendable () -> Void
    private let stopping = Atomic<Bool>(false)
    private let listening = Atomic<Bool>(false)
    private let wakeRead: Int32
    private let wakeWrite: Int32
    private let thread: LockedValue<pthread_t?>

    /// Idle time after which the listener checks its connection with `SELECT 1` (finds silently dead peers).
    static let healthCheckMilliseconds: Int32 = 30_000

    /// Starts listening on `channels`; `onNotification(channel, payload)` runs on the listener thread.
    public init(
        configuration: PostgresConfiguration, channels: [String], logger: PostgresLogger = .disabled,
        onReconnect: @escaping @Sendable () -> Void = {},
        onNotification: @escaping @Sendable (_ channel: String, _ payload: String) -> Void
    ) {
        self.channels = channels
        var listenerConfiguration = configuration
        if listenerConfiguration.applicationName == nil { listenerConfiguration.applicationName = "parley-listener" }
        self.configuration = listenerConfiguration
        self.logger = logger
        self.onNotification = onNotification
        self.onReconnect = onReconnect
        var fds: [Int32] = [-1, -1]
        let result = pipe(&fds)
        precondition(result == 0, "pipe failed: \(errno)")
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        self.wakeRead = fds[0]
        self.wakeWrite = fds[1]
        self.thread = LockedValue(nil)
        let started = PostgresThread.start(name: "pg-listener") { [self] in self.loop() }
        thread.withLock { $0 = started }
    }

    /// True while connected with every LISTEN in place.
    public var isListening: Bool { listening.load(ordering: .acquiring) }

    /// Stops the thread and closes the connection; idempotent.
    public func stop() {
        guard !stopping.exchange(true, ordering: .acquiringAndReleasing) else { return }
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
        guard let started = thread.withLock({ $0.take() }) else { return }
        if pthread_equal(started, pthread_self()) != 0 {
            // Called from a callback on the listener thread: it exits when the callback returns.
            pthread_detach(started)
            return
        }
        PostgresThread.join(started)
        close(wakeRead)
        close(wakeWrite)
    }

    /// Sends a notification on any connection (`SELECT pg_notify($1, $2)`; delivered at commit).
    public static func notify(on connection: PostgresConnection, channel: String, payload: String) throws(PostgresError) {
        try connection.notify(channel: channel, payload: payload)
    }

    private func loop() {
        var backoffMilliseconds: Int32 = 100
        var connectedBefore = false
        while !stopping.load(ordering: .acquiring) {
            let connection: PostgresConnection
            do {
                connection = try PostgresConnection(configuration, logger: logger)
                for channel in channels {
                    try connection.simpleQuery("LISTEN " + (try connection.escapeIdentifier(channel)))
                }
            } catch {
                logger.log(.warning, "postgres listener: cannot listen (\(error.message)); retrying in \(backoffMilliseconds) ms")
                if waitForWake(timeoutMilliseconds: backoffMilliseconds) { return }
                backoffMilliseconds = min(backoffMilliseconds * 2, 5000)
                continue
            }
            backoffMilliseconds = 100
            listening.store(true, ordering: .releasing)
            if connectedBefore {
                logger.log(.info, "postgres listener: reconnected")
                onReconnect()
            }
            connectedBefore = true
            serve(connection)
            listening.store(false, ordering: .releasing)
        }
    }

    /// Delivers notifications until the connection breaks or `stop()` is called.
    private func serve(_ connection: PostgresConnection) {
        while !stopping.load(ordering: .acquiring) {
            var fds = [
                pollfd(fd: connection.socket, events: Int16(POLLIN), revents: 0),
                pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0),
            ]
            let ready = poll(&fds, 2, Self.healthCheckMilliseconds)
            if ready < 0 {
                if errno == EINTR { continue }
                logger.log(.error, "postgres listener: poll failed (errno \(errno))")
                return
            }
            if fds[1].revents != 0 { return }
            if ready == 0 {
                if (try? connection.simpleQuery("SELECT 1")) == nil || connection.isBroken {
                    logger.log(.warning, "postgres listener: health check failed; reconnecting")
                    return
                }
                deliverPending(connection)
                continue
            }
            if PQconsumeInput(connection.handle) == 0 {
                logger.log(.warning, "postgres listener: connection lost; reconnecting")
                return
            }
            deliverPending(connection)
            if connection.isBroken { return }
        }
    }

    private func deliverPending(_ connection: PostgresConnection) {
        while let notification = PQnotifies(connection.handle) {
            let channel = String(cString: notification.pointee.relname)
            let payload = notification.pointee.extra.map { String(cString: $0) } ?? ""
            PQfreemem(notification)
            onNotification(channel, payload)
        }
    }

    /// Sleeps up to `timeoutMilliseconds` unless woken by `stop()`; true when stopping.
    private func waitForWake(timeoutMilliseconds: Int32) -> Bool {
        var fd = pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)
        _ = poll(&fd, 1, timeoutMilliseconds)
        return stopping.load(ordering: .acquiring)
    }
}
