import Glibc

/// Process-wide key under which each pool worker thread stores its `WorkerContext`.
private let workerContextKey: pthread_key_t = {
    var key = pthread_key_t()
    let result = pthread_key_create(&key, nil)
    precondition(result == 0, "pthread_key_create failed")
    return key
}()

/// One pool worker thread's connection and bookkeeping.
///
/// Owned by that worker thread (found through a pthread thread-specific key), never shared.
final class WorkerContext {
    let poolID: ObjectIdentifier
    let configuration: PostgresConfiguration
    let logger: PostgresLogger
    private(set) var connection: PostgresConnection?
    /// Nesting depth of `run`: nested calls reuse the connection without checks.
    private var depth = 0
    /// After a failed connect, fail fast with the same error until this time (an outage costs no waiting).
    private var retryAfterNanos: UInt64 = 0
    private var lastConnectError: PostgresError?
    /// The pool's count of successful connects when this worker's connect failed: once another worker has
    /// connected since, or the circuit has closed since (the server answered any exchange), the server is back and
    /// the fail-fast window ends early.
    private var failedAtConnectCount = 0
    private var failedAtNanos: UInt64 = 0
    private let connectCount: ConnectCounter

    static let connectBackoffNanos: UInt64 = 250_000_000

    init(pool: PostgresPool) {
        self.poolID = ObjectIdentifier(pool)
        self.configuration = pool.configuration
        self.logger = pool.logger
        self.connectCount = pool.connectCounter
    }

    static func current(for pool: PostgresPool) -> WorkerContext? {
        guard let context = currentAny(), context.poolID == ObjectIdentifier(pool) else { return nil }
        return context
    }

    static func currentAny() -> WorkerContext? {
        guard let raw = pthread_getspecific(workerContextKey) else { return nil }
        return Unmanaged<WorkerContext>.fromOpaque(raw).takeUnretainedValue()
    }

    /// Registers this context for the calling thread (the worker keeps it alive while installed).
    func install() { pthread_setspecific(workerContextKey, Unmanaged.passUnretained(self).toOpaque()) }

    func uninstall() {
        pthread_setspecific(workerContextKey, nil)
        connection = nil
    }

    /// A usable connection: reconnects when missing or broken, health-checks one idle for over 30 s.
    func acquire() throws(PostgresError) -> PostgresConnection {
        if let current = connection {
            let idleNanos = monotonicNanos() &- current.lastUsedNanos
            // A connection in use a moment ago cannot have missed a termination notice worth a syscall: under load
            // the check would cost one poll() per request (bench/RESULTS.md); a session killed during a burst
            // fails its next query and is replaced then.
            if idleNanos > PostgresPool.closedCheckNanos, current.detectClosedByServer() {
                logger.log(.info, "postgres: pooled connection was closed by the server; reconnecting")
                connection = nil
            } else if depth == 0, idleNanos > PostgresPool.idleCheckNanos {
                if (try? current.simpleQuery("SELECT 1")) == nil || current.isBroken {
                    logger.log(.info, "postgres: idle pooled connection failed its health check; reconnecting")
                    connection = nil
                }
            }
        }
        if let connection { return connection }
        let now = monotonicNanos()
        if now < retryAfterNanos, let lastConnectError, connectCount.value == failedAtConnectCount,
            configuration.circuit?.closed(since: failedAtNanos) != true
        {
            throw lastConnectError
        }
        do {
            let fresh = try PostgresConnection(configuration, logger: logger)
            connection = fresh
            lastConnectError = nil
            connectCount.increment()
            return fresh
        } catch {
            lastConnectError = error
            retryAfterNanos = now + Self.connectBackoffNanos
            failedAtConnectCount = connectCount.value
            failedAtNanos = now
            throw error
        }
    }

    /// Runs `body` with the connection; afterwards drops a broken one and rolls back a forgotten transaction.
    func run<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        let connection = try acquire()
        depth += 1
        defer {
            depth -= 1
            if depth == 0 { afterUse(connection) }
        }
        return try body(connection)
    }

    private func afterUse(_ used: PostgresConnection) {
        guard used === connection else { return }
        if used.isBroken {
            connection = nil
        } else if used.inTransaction {
            logger.log(.warning, "postgres: a transaction was left open by a pooled connection's user; rolling back")
            used.rollback()
            if used.isBroken || used.inTransaction { connection = nil }
        }
    }

    /// BEGIN/COMMIT around `body` with the retry rules of `PostgresPool.transaction`.
    func transaction<T>(isolation: PostgresIsolation, _ body: (PostgresConnection) throws -> T) throws -> T {
        if depth > 0, let connection, connection.inTransaction {
            return try connection.savepoint(body)
        }
        var conflictRetries = 0
        var reconnected = false
        while true {
            let connection = try acquire()
            depth += 1
            var commitSent = false
            do {
                defer { depth -= 1 }
                try connection.begin(isolation)
                let value = try body(connection)
                if connection.inFailedTransaction {
                    // COMMIT would silently roll back: the body swallowed an error.
                    throw PostgresError(kind: .query, sqlState: "25P02", message: "transaction aborted by an earlier error; not committed")
                }
                commitSent = true
                try connection.commit()
                return value
            } catch {
                if !connection.isBroken, connection.inTransaction { connection.rollback() }
                if connection.isBroken, self.connection === connection { self.connection = nil }
                guard let pgError = error as? PostgresError else { throw error }
                if pgError.isSerializationFailure || pgError.isDeadlock, conflictRetries < 5 {
                    conflictRetries += 1
                    // Jittered backoff so the conflicting transactions do not collide again in lockstep.
                    PostgresThread.sleep(milliseconds: Int.random(in: 1...(5 * conflictRetries)))
                    continue
                }
                // Not after a timeout: the server is stalled, and trying again would wait as long again.
                if pgError.isConnectionFailure, !pgError.isTimeout, !commitSent, !reconnected {
                    reconnected = true
                    if self.connection === connection { self.connection = nil }
                    retryAfterNanos = 0
                    continue
                }
                throw error
            }
        }
    }
}
