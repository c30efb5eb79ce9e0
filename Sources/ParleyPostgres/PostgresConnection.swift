internal import CLibPQ
import Glibc

/// One libpq session (`PGconn`): parameterised queries, prepared statements, savepoints.
///
/// Every exchange with the server (connecting, each statement) runs on libpq's non-blocking API and waits with
/// `poll()` until the configuration's `responseTimeout`: a stalled server (frozen, or its host gone) costs a thread that
/// long, not forever. A connection whose exchange timed out is abandoned: its statement is cancelled (`PQcancel`, on
/// `PostgresCanceller`'s thread), `isBroken` turns true so its owner drops it, and it is never used again; owners open
/// a fresh one. The waiting costs no system call beyond what libpq's blocking calls make (send, poll, recv).
///
/// Not `Sendable`: owned by exactly one thread (a pool worker or the listener thread) and used only there.
/// `PQfinish` runs exactly once, in `deinit`, also when connecting failed.
public final class PostgresConnection {
    let handle: OpaquePointer
    /// The settings this connection was opened with.
    public let configuration: PostgresConfiguration
    private let noticeSink: PostgresNoticeSink
    private var preparedNames: [String: String] = [:]
    /// `preparedNames` by the address of the SQL text's storage: hot statements are `static let` strings, so the
    /// lookup need not hash ~1.5 KB of SQL per call. An entry keeps its text alive, so its address is not reused
    /// while cached; a hit is still confirmed with `==` (O(1) for the same storage), which also covers small strings,
    /// whose bytes are lent from a temporary copy.
    private var preparedByAddress: [Int: (sql: String, name: String)] = [:]
    private var nextPreparedID = 0
    private var nextSavepointID = 0
    /// Statements sent since connecting (lets callers tell "failed on the first statement").
    public private(set) var statementCount = 0
    /// Monotonic time of the last statement, for the pool's idle health check.
    var lastUsedNanos: UInt64 = monotonicNanos()
    /// How long one exchange may wait for its answer (`configuration.responseTimeout`, or `withResponseTimeout`'s).
    private var responseTimeoutNanos: UInt64?
    /// Set when an exchange timed out or its socket failed half-way: the session's state is unknown, so it is
    /// never used again (`isBroken`).
    private var abandoned = false
    /// The BEGIN of a transaction that has run no statement yet: it goes out with the first one (in one pipeline, or
    /// in front of a simple query's text), one round trip fewer per transaction; a transaction that runs no statement
    /// sends neither BEGIN nor COMMIT. (BEGIN takes no snapshot and no lock, so sending it later changes nothing else.)
    private var deferredBegin: String?
    /// The open transaction was committed by ``queryCommitting(sql:_:)`` (its COMMIT went out with its last statement):
    /// the `transaction` wrapper's own COMMIT then sends nothing.
    private var committedWithLastStatement = false
    /// Work waiting for the open transaction's COMMIT (``afterCommit(_:)``).
    private var workAfterCommit: [() -> Void] = []

    /// Beyond this many cached statements new SQL runs unnamed, so ad-hoc SQL cannot grow the cache forever.
    static let maxPreparedStatements = 512

    /// Connects, waiting at most `connect_timeout` (3 s unless configured) and `responseTimeout`.
    ///
    /// With an open `circuit` it fails at once (`.timeout`) unless it is the circuit's probe.
    public init(_ configuration: PostgresConfiguration, logger: PostgresLogger = .disabled) throws(PostgresError) {
        self.configuration = configuration
        self.noticeSink = PostgresNoticeSink(logger: logger)
        self.responseTimeoutNanos = configuration.responseTimeout.map(PostgresConfiguration.nanos)
        let pairs = configuration.connectKeywords
        var keywords: [UnsafeMutablePointer<CChar>?] = pairs.map { strdup($0.key) }
        var values: [UnsafeMutablePointer<CChar>?] = pairs.map { strdup($0.value) }
        keywords.append(nil)
        values.append(nil)
        defer {
            for pointer in keywords { free(pointer) }
            for pointer in values { free(pointer) }
        }
        let circuit = configuration.circuit
        let admission = circuit?.admit() ?? .pass
        if case .refuse = admission { throw Self.notAnswering }
        let connection = keywords.withUnsafeBufferPointer { k in
            values.withUnsafeBufferPointer { v in
                k.withMemoryRebound(to: UnsafePointer<CChar>?.self) { k2 in
                    v.withMemoryRebound(to: UnsafePointer<CChar>?.self) { v2 in
                        PQconnectStartParams(k2.baseAddress, v2.baseAddress, 0)
                    }
                }
            }
        }
        guard let connection else {
            circuit?.finished(admission, answered: false)
            throw PostgresError(kind: .connection, message: "libpq could not allocate a connection")
        }
        let started = monotonicNanos()
        do {
            try Self.completeConnect(connection, timeoutNanos: configuration.connectTimeoutNanos, poll: PQconnectPoll)
        } catch {
            if error.isTimeout {
                circuit?.unanswered(timeoutMillis: Int((configuration.connectTimeoutNanos ?? 0) / 1_000_000), startedAt: started)
            }
            circuit?.finished(admission, answered: false)
            PQfinish(connection)
            throw error
        }
        circuit?.finished(admission, answered: true)
        self.handle = connection
        // Non-blocking: sends never block on a server that stopped reading, and neither does PQfinish's goodbye.
        _ = PQsetnonblocking(connection, 1)
        // The sink lives as long as `self`, which outlives the PGconn (finished in deinit).
        _ = PQsetNoticeProcessor(connection, postgresNoticeProcessor, Unmanaged.passUnretained(noticeSink).toOpaque())
    }

    deinit { PQfinish(handle) }

    /// True when the session is gone (server restart, network failure) or was abandoned after a timeout; the pool
    /// then reconnects.
    public var isBroken: Bool { abandoned || PQstatus(handle) != CONNECTION_OK }

    /// True inside BEGIN … COMMIT (also when the transaction has failed and awaits ROLLBACK).
    public var inTransaction: Bool {
        if deferredBegin != nil { return true }
        let status = PQtransactionStatus(handle)
        return status == PQTRANS_INTRANS || status == PQTRANS_INERROR || status == PQTRANS_ACTIVE
    }

    /// True when the open transaction has failed and only ROLLBACK is possible.
    public var inFailedTransaction: Bool { PQtransactionStatus(handle) == PQTRANS_INERROR }

    /// The server's process id for this session (for `pg_terminate_backend` and logs).
    public var backendPID: Int32 { PQbackendPID(handle) }

    /// The socket, for `poll()` (listener).
    var socket: Int32 { PQsocket(handle) }

    /// Re-opens the session with the same settings; prepared statements are forgotten.
    public func reset() throws(PostgresError) {
        preparedNames.removeAll()
        preparedByAddress.removeAll()
        guard PQresetStart(handle) == 1 else {
            throw PostgresError.connection(handle, context: "could not reconnect to PostgreSQL")
        }
        try Self.completeConnect(handle, timeoutNanos: configuration.connectTimeoutNanos, poll: PQresetPoll)
        abandoned = false
        _ = PQsetnonblocking(handle, 1)  // closing the old session reset it
    }

    /// Runs `body` with another bound on each exchange (nil: none) than the configuration's `responseTimeout`: for
    /// the few statements that rightly run long, or a probe that must answer sooner.
    public func withResponseTimeout<T>(_ timeout: Duration?, _ body: (PostgresConnection) throws -> T) rethrows -> T {
        let saved = responseTimeoutNanos
        responseTimeoutNanos = timeout.map(PostgresConfiguration.nanos)
        defer { responseTimeoutNanos = saved }
        return try body(self)
    }

    /// Runs one statement with text parameters (`$1`, `$2`, …; nil binds NULL).
    ///
    /// With `prepared: true` the statement is prepared on first use on this connection and reused by name:
    /// use it for hot statements (it saves the parse and plan on every call).
    @discardableResult
    public func query(
        sql: String, _ parameters: [(any PostgresEncodable)?] = [], prepared: Bool = false
    ) throws(PostgresError) -> PostgresResult {
        if prepared {
            if let name = preparedName(of: sql) {
                do {
                    return try queryPrepared(name: name, parameters)
                } catch {
                    if error.sqlState == "0A000" {
                        // "cached plan must not change result type" (the table changed): prepare afresh next time.
                        preparedNames[sql] = nil
                        preparedByAddress.removeAll()
                        if !inTransaction { _ = try? simpleQuery("DEALLOCATE \(name)") }
                    }
                    throw error
                }
            }
            if preparedNames.count < Self.maxPreparedStatements {
                nextPreparedID += 1
                let name = "parley_\(nextPreparedID)"
                try prepare(name: name, sql: sql)
                preparedNames[sql] = name
                return try queryPrepared(name: name, parameters)
            }
        }
        let handle = self.handle
        let values = try CParameters(parameters)
        return try exchange(carriesBegin: true) { values.withPointers { PQsendQueryParams(handle, sql, $1, nil, $0, nil, nil, 0) } }
    }

    /// Runs `sql` unprepared with every result column in binary format and, when `bytes` is given, those bytes as its
    /// last parameter in binary format (after `parameters`, which go as text).
    ///
    /// For bytea bodies (file chunks): a text bytea is hex, two characters a byte, encoded on one side and decoded on
    /// the other; in binary the bytes cross as they are. Only for statements whose results are bytea or read
    /// through ``PostgresCell/bytes``: the other accessors read text.
    @discardableResult
    public func queryBinary(sql: String, _ parameters: [(any PostgresEncodable)?], bytes: [UInt8]? = nil) throws(PostgresError) -> PostgresResult {
        let handle = self.handle
        let values = try CParameters(parameters)
        return try exchange(carriesBegin: true) {
            values.withPointers { textValues, count in
                let textCount = Int(count)
                let total = textCount + (bytes == nil ? 0 : 1)
                var pointers = [UnsafePointer<CChar>?](repeating: nil, count: total)
                var lengths = [Int32](repeating: 0, count: total)
                var formats = [Int32](repeating: 0, count: total)
                for index in 0..<textCount { pointers[index] = textValues?[index] }
                guard let bytes else {
                    return PQsendQueryParams(handle, sql, Int32(total), nil, pointers, lengths, formats, 1)
                }
                return bytes.withUnsafeBytes { raw in
                    pointers[textCount] = raw.baseAddress?.assumingMemoryBound(to: CChar.self)
                    lengths[textCount] = Int32(raw.count)
                    formats[textCount] = 1
                    return PQsendQueryParams(handle, sql, Int32(total), nil, pointers, lengths, formats, 1)
                }
            }
        }
    }

    /// Runs the open transaction's last statement and its COMMIT in one round trip (one pipeline), prepared like
    /// `query(sql:_:prepared: true)`; the `transaction` wrapper's COMMIT then sends nothing.
    ///
    /// For a writer whose last statement takes a lock that others queue for (the event head): the lock is held for
    /// the statement and the commit on the server, not also for a round trip to this thread and back, which on a
    /// busy machine includes waiting for this thread to be scheduled. A failing statement leaves the transaction
    /// open and failed (the server skips the COMMIT), so the wrapper rolls back as after any failure; a failing
    /// COMMIT ends it, and its error is thrown.
    @discardableResult
    public func queryCommitting(sql: String, _ parameters: [(any PostgresEncodable)?]) throws(PostgresError) -> PostgresResult {
        guard inTransaction, !committedWithLastStatement else {
            throw PostgresError(kind: .query, message: "queryCommitting needs an open transaction")
        }
        var name = preparedName(of: sql)
        if name == nil, preparedNames.count < Self.maxPreparedStatements {
            nextPreparedID += 1
            let fresh = "parley_\(nextPreparedID)"
            try prepare(name: fresh, sql: sql)
            preparedNames[sql] = fresh
            name = fresh
        }
        let handle = self.handle
        let values = try CParameters(parameters)
        let result = try exchange(carriesBegin: true, commits: true) {
            values.withPointers {
                if let name {
                    PQsendQueryPrepared(handle, name, $1, $0, nil, nil, 0)
                } else {
                    PQsendQueryParams(handle, sql, $1, nil, $0, nil, nil, 0)
                }
            }
        }
        committedWithLastStatement = !inTransaction
        return result
    }

    /// The name `sql` was prepared under on this connection, if any.
    private func preparedName(of sql: String) -> String? {
        let address = sql.utf8.withContiguousStorageIfAvailable { Int(bitPattern: $0.baseAddress) } ?? 0
        if address != 0, let entry = preparedByAddress[address], entry.sql == sql { return entry.name }
        guard let name = preparedNames[sql] else { return nil }
        if address != 0 {
            if preparedByAddress.count >= Self.maxPreparedStatements { preparedByAddress.removeAll() }
            preparedByAddress[address] = (sql, name)
        }
        return name
    }

    /// Runs one statement and returns the number of rows it affected.
    @discardableResult
    public func execute(
        sql: String, _ parameters: [(any PostgresEncodable)?] = [], prepared: Bool = false
    ) throws(PostgresError) -> Int {
        try query(sql: sql, parameters, prepared: prepared).affectedRows
    }

    /// Runs SQL text that may hold several statements, with the simple protocol (`PQexec`); no parameters.
    ///
    /// For migrations and fixed commands only: never build this text from values.
    @discardableResult
    public func simpleQuery(_ sql: String) throws(PostgresError) -> PostgresResult {
        let handle = self.handle
        if let begin = deferredBegin {
            // The simple protocol runs several statements from one text; the result is the last one's.
            deferredBegin = nil
            return try exchange { PQsendQuery(handle, begin + "; " + sql) }
        }
        return try exchange { PQsendQuery(handle, sql) }
    }

    /// Runs `work` once the open transaction has committed, or now when none is open; a rollback drops it (so does a
    /// rollback to a savepoint taken before it was added). For side effects outside the database that must not happen
    /// for a change that did not happen, and must not hold the transaction open: deleting a stored object whose row
    /// the transaction deletes. It runs on this connection's thread, after COMMIT answered.
    public func afterCommit(_ work: @escaping () -> Void) {
        if inTransaction || deferredBegin != nil { workAfterCommit.append(work) } else { work() }
    }

    /// Runs (and forgets) the work waiting for the commit that just succeeded.
    private func runWorkAfterCommit() {
        guard !workAfterCommit.isEmpty else { return }
        let work = workAfterCommit
        workAfterCommit = []
        for item in work { item() }
    }

    /// Opens a transaction whose BEGIN goes out with its first statement (see `deferredBegin`).
    func begin(_ isolation: PostgresIsolation) throws(PostgresError) {
        workAfterCommit = []
        committedWithLastStatement = false
        guard !inTransaction else { throw PostgresError(kind: .query, message: "a transaction is already open on this connection") }
        deferredBegin = isolation.beginSQL
    }

    /// COMMIT, or nothing when the transaction ran no statement (its BEGIN was never sent); then the work waiting for
    /// it (``afterCommit(_:)``).
    func commit() throws(PostgresError) {
        if deferredBegin != nil {
            deferredBegin = nil
        } else if committedWithLastStatement {
            committedWithLastStatement = false
        } else {
            try simpleQuery("COMMIT")
        }
        runWorkAfterCommit()
    }

    /// ROLLBACK, or nothing when the transaction ran no statement; errors are dropped (the caller is already failing).
    func rollback() {
        workAfterCommit = []
        committedWithLastStatement = false
        if deferredBegin != nil {
            deferredBegin = nil
            return
        }
        _ = try? simpleQuery("ROLLBACK")
    }

    /// Prepares `sql` under `name` (parameter types inferred by the server).
    public func prepare(name: String, sql: String) throws(PostgresError) {
        let handle = self.handle
        _ = try exchange { PQsendPrepare(handle, name, sql, 0, nil) }
    }

    /// Runs a statement prepared with `prepare(name:sql:)`.
    @discardableResult
    public func queryPrepared(name: String, _ parameters: [(any PostgresEncodable)?] = []) throws(PostgresError) -> PostgresResult {
        let handle = self.handle
        let values = try CParameters(parameters)
        return try exchange(carriesBegin: true) { values.withPointers { PQsendQueryPrepared(handle, name, $1, $0, nil, nil, 0) } }
    }

    /// BEGIN, `body`, COMMIT on this connection: ROLLBACK (and rethrow) when `body` throws.
    ///
    /// On a pool worker's own connection (a request's) this is `PostgresPool.transaction` on that worker: conflicts
    /// re-run `body` and a connection that broke before COMMIT is replaced (so `body` must be re-runnable and use the
    /// connection it is given). On any other connection (the dedicated connections of background threads) it runs
    /// once. Inside an open transaction, on either, it becomes a savepoint.
    @discardableResult
    public func transaction<T>(isolation: PostgresIsolation = .readCommitted, _ body: (PostgresConnection) throws -> T) throws -> T {
        if let worker = WorkerContext.currentAny(), worker.connection === self {
            return try worker.transaction(isolation: isolation, body)
        }
        // Nested, as on a pool worker: a savepoint (a second BEGIN would not open anything, and its COMMIT would end
        // the outer transaction).
        if inTransaction { return try savepoint(body) }
        try begin(isolation)
        do {
            let value = try body(self)
            try commit()
            return value
        } catch {
            if !isBroken, inTransaction { rollback() }
            throw error
        }
    }

    /// Runs `body` inside `SAVEPOINT`; rolls back to it (and rethrows) when `body` throws.
    ///
    /// Needs an open transaction; nests freely.
    @discardableResult
    public func savepoint<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        nextSavepointID += 1
        let name = "parley_sp_\(nextSavepointID)"
        try simpleQuery("SAVEPOINT \(name)")
        let waiting = workAfterCommit.count
        do {
            let value = try body(self)
            try simpleQuery("RELEASE SAVEPOINT \(name)")
            return value
        } catch {
            workAfterCommit.removeSubrange(min(waiting, workAfterCommit.count)...)
            if !isBroken {
                _ = try? simpleQuery("ROLLBACK TO SAVEPOINT \(name)")
                _ = try? simpleQuery("RELEASE SAVEPOINT \(name)")
            }
            throw error
        }
    }

    /// Quotes an identifier (table, channel, database name) with libpq's rules.
    public func escapeIdentifier(_ identifier: String) throws(PostgresError) -> String {
        guard !identifier.utf8.contains(0) else { throw PostgresError(kind: .query, message: "identifier contains NUL") }
        guard let escaped = PQescapeIdentifier(handle, identifier, identifier.utf8.count) else {
            throw PostgresError.connection(handle, context: "could not escape identifier")
        }
        defer { PQfreemem(escaped) }
        return String(cString: escaped)
    }

    /// Sends a NOTIFY through `pg_notify` (channel and payload are bound, never interpolated).
    public func notify(channel: String, payload: String) throws(PostgresError) {
        try query("SELECT pg_notify(\(channel), \(payload))", prepared: false)
    }

    /// Checks without a round trip whether the server closed an idle session (restart, termination).
    ///
    /// Returns true when the connection is (now known to be) broken.
    func detectClosedByServer() -> Bool {
        // A terminated session first delivers its FATAL message (libpq reports it as a notice while idle),
        // then EOF; read until the socket is quiet so the EOF marks the connection bad.
        for _ in 0..<8 {
            if isBroken { return true }
            var pfd = pollfd(fd: PQsocket(handle), events: Int16(POLLIN), revents: 0)
            guard pfd.fd >= 0 else { return true }
            guard poll(&pfd, 1, 0) > 0 else { break }
            if PQconsumeInput(handle) == 0 { return true }
            while let notification = PQnotifies(handle) { PQfreemem(notification) }
        }
        return isBroken
    }

    // MARK: - Exchanges

    /// The error of an exchange not tried because the circuit is open.
    private static var notAnswering: PostgresError {
        PostgresError(kind: .timeout, message: "PostgreSQL did not answer lately; not tried (another call probes it)")
    }

    /// Sends one command with `send` (a `PQsend…` call), then reads its results until the server is ready again, waiting
    /// with `poll()` no longer than the response timeout; returns the last result, as `PQexec` does. A statement that
    /// `carriesBegin` takes a deferred BEGIN along, in one pipeline with it.
    private func exchange(carriesBegin: Bool = false, commits: Bool = false, _ send: () -> Int32) throws(PostgresError) -> PostgresResult {
        guard !abandoned else {
            throw PostgresError(kind: .connection, message: "the connection was abandoned after an exchange failed")
        }
        let circuit = configuration.circuit
        let admission = circuit?.admit() ?? .pass
        if case .refuse = admission {
            // Not even ROLLBACK goes out now: a transaction left open would be carried into the owner's next use, so
            // the connection is given up (the server rolls back when the socket closes).
            if inTransaction { abandoned = true }
            throw Self.notAnswering
        }
        let raw: OpaquePointer?
        let started = monotonicNanos()
        do {
            let begin = carriesBegin ? deferredBegin : nil
            if begin != nil { deferredBegin = nil }
            let deadline = responseTimeoutNanos.map { started &+ $0 }
            if begin != nil || commits {
                raw = try sendAndCollect(after: begin, send, thenCommit: commits, deadline: deadline)
            } else {
                raw = try sendAndCollect(send, deadline: deadline)
            }
        } catch {
            if error.isTimeout { circuit?.unanswered(timeoutMillis: Int((responseTimeoutNanos ?? 0) / 1_000_000), startedAt: started) }
            circuit?.finished(admission, answered: false)
            throw error
        }
        circuit?.finished(admission, answered: raw != nil && !isBroken)
        return try check(raw)
    }

    private func sendAndCollect(_ send: () -> Int32, deadline: UInt64?) throws(PostgresError) -> OpaquePointer? {
        // 0: not sent (connection gone); `check(nil)` reports libpq's message.
        guard send() == 1 else { return nil }
        guard try flush(deadline: deadline) else { return abandonAfterSocketFailure() }
        var last: OpaquePointer? = nil
        while true {
            while PQisBusy(handle) != 0 {
                do {
                    try waitForSocket(events: Int16(POLLIN), deadline: deadline)
                } catch {
                    PQclear(last)
                    throw error
                }
                if PQconsumeInput(handle) == 0 {
                    // The server closed the session (its FATAL message, if any, is in `last`).
                    abandoned = true
                    return last ?? abandonAfterSocketFailure()
                }
            }
            guard let result = PQgetResult(handle) else { break }
            PQclear(last)
            last = result
            let status = PQresultStatus(result)
            if status == PGRES_COPY_IN || status == PGRES_COPY_OUT || status == PGRES_COPY_BOTH || PQstatus(handle) == CONNECTION_BAD {
                break
            }
        }
        return last
    }

    /// In non-blocking mode a command may still sit in libpq's buffer (a big one, or a server that stopped reading):
    /// flushes it, reading meanwhile so the server cannot block on its own output. False when the socket failed.
    private func flush(deadline: UInt64?) throws(PostgresError) -> Bool {
        while true {
            let flushed = PQflush(handle)
            if flushed == 0 { return true }
            if flushed < 0 { return false }
            try waitForSocket(events: Int16(POLLIN | POLLOUT), deadline: deadline)
            if PQconsumeInput(handle) == 0 { return false }
        }
    }

    /// The statement `send` sends, after `begin` and before a COMMIT when asked, in one pipeline (one round trip): the
    /// first error among them (the server skips what follows an error up to the sync), else the statement's result.
    private func sendAndCollect(after begin: String?, _ send: () -> Int32, thenCommit commit: Bool, deadline: UInt64?) throws(PostgresError)
        -> OpaquePointer?
    {
        guard PQenterPipelineMode(handle) == 1 else { return nil }
        // Leaving fails only with results unread, after a failure that already ends the session: never reuse it then.
        defer { if PQexitPipelineMode(handle) != 1 { abandoned = true } }
        if let begin, PQsendQueryParams(handle, begin, 0, nil, nil, nil, nil, 0) != 1 { return nil }
        guard send() == 1 else { return nil }
        if commit, PQsendQueryParams(handle, "COMMIT", 0, nil, nil, nil, nil, 0) != 1 { return nil }
        guard PQpipelineSync(handle) == 1 else { return nil }
        guard try flush(deadline: deadline) else { return abandonAfterSocketFailure() }
        // Results come query by query, each followed by a NULL, then the sync's own result.
        let statementIndex = begin == nil ? 0 : 1
        var firstError: OpaquePointer? = nil
        var statementResult: OpaquePointer? = nil
        var query = 0
        collecting: while true {
            while PQisBusy(handle) != 0 {
                do {
                    try waitForSocket(events: Int16(POLLIN), deadline: deadline)
                } catch {
                    PQclear(firstError)
                    PQclear(statementResult)
                    throw error
                }
                if PQconsumeInput(handle) == 0 {
                    // The server closed the session (its FATAL message, if any, is in the result kept).
                    abandoned = true
                    break collecting
                }
            }
            guard let result = PQgetResult(handle) else {
                query += 1
                if PQstatus(handle) == CONNECTION_BAD { break }
                continue
            }
            let status = PQresultStatus(result)
            if status == PGRES_PIPELINE_SYNC {
                PQclear(result)
                break
            }
            if status == PGRES_FATAL_ERROR && firstError == nil {
                firstError = result
            } else if query == statementIndex && firstError == nil && status != PGRES_PIPELINE_ABORTED {
                PQclear(statementResult)
                statementResult = result
            } else {
                PQclear(result)
            }
        }
        if let firstError {
            PQclear(statementResult)
            return firstError
        }
        return statementResult ?? (abandoned ? abandonAfterSocketFailure() : nil)
    }

    /// Waits until the socket is ready for `events`; at the deadline the connection is abandoned and `.timeout` thrown.
    private func waitForSocket(events: Int16, deadline: UInt64?) throws(PostgresError) {
        switch Self.wait(socket: PQsocket(handle), events: events, deadline: deadline) {
        case .ready: return
        case .failed(let code):
            abandoned = true
            throw PostgresError(kind: .connection, message: "waiting for PostgreSQL failed: \(String(cString: strerror(code)))")
        case .timedOut:
            abandon()
            throw PostgresError(
                kind: .timeout,
                message: "PostgreSQL did not answer within \((responseTimeoutNanos ?? 0) / 1_000_000) ms; the connection was abandoned")
        }
    }

    /// A socket error half-way through an exchange: libpq's message, and the connection is not used again.
    private func abandonAfterSocketFailure() -> OpaquePointer? {
        abandoned = true
        return nil
    }

    /// Gives up on the session after a timeout: the statement is cancelled (off this thread: `PQcancel` blocks on a
    /// stalled server) and the owner drops the connection when it sees `isBroken`.
    private func abandon() {
        guard !abandoned else { return }
        abandoned = true
        if let cancel = PQgetCancel(handle) { PostgresCanceller.shared.cancel(cancel) }
    }

    enum WaitOutcome {
        case ready
        case timedOut
        case failed(errno: Int32)
    }

    /// `poll()` on one socket until it is ready for `events`, the monotonic `deadline` passes (nil: no deadline) or it
    /// fails.
    static func wait(socket: Int32, events: Int16, deadline: UInt64?) -> WaitOutcome {
        guard socket >= 0 else { return .failed(errno: EBADF) }
        while true {
            var timeoutMillis: Int32 = -1
            if let deadline {
                let now = monotonicNanos()
                guard now < deadline else { return .timedOut }
                timeoutMillis = Int32(clamping: (deadline - now + 999_999) / 1_000_000)
            }
            var descriptor = pollfd(fd: socket, events: events, revents: 0)
            let ready = poll(&descriptor, 1, timeoutMillis)
            if ready > 0 { return .ready }
            if ready < 0 && errno != EINTR { return .failed(errno: errno) }
        }
    }

    /// Drives a non-blocking connect (`PQconnectPoll`, or `PQresetPoll` for a reset) to its end within `timeoutNanos`.
    private static func completeConnect(
        _ connection: OpaquePointer, timeoutNanos: UInt64?, poll step: (OpaquePointer?) -> PostgresPollingStatusType
    ) throws(PostgresError) {
        let deadline = timeoutNanos.map { monotonicNanos() &+ $0 }
        guard PQstatus(connection) != CONNECTION_BAD else {
            throw PostgresError.connection(connection, context: "could not connect to PostgreSQL")
        }
        var status = PGRES_POLLING_WRITING  // as libpq asks, before the first call
        while status != PGRES_POLLING_OK {
            guard status != PGRES_POLLING_FAILED else {
                throw PostgresError.connection(connection, context: "could not connect to PostgreSQL")
            }
            let events = Int16(status == PGRES_POLLING_READING ? POLLIN : POLLOUT)
            switch wait(socket: PQsocket(connection), events: events, deadline: deadline) {
            case .ready: break
            case .failed(let code):
                throw PostgresError(kind: .connection, message: "could not connect to PostgreSQL: \(String(cString: strerror(code)))")
            case .timedOut:
                throw PostgresError(
                    kind: .timeout, message: "PostgreSQL did not accept the connection within \((timeoutNanos ?? 0) / 1_000_000) ms")
            }
            status = step(connection)
        }
    }

    /// Turns a raw `PGresult` into a `PostgresResult`, or clears it and throws the server's error.
    private func check(_ raw: OpaquePointer?) throws(PostgresError) -> PostgresResult {
        statementCount += 1
        lastUsedNanos = monotonicNanos()
        guard let raw else {
            // NULL means libpq could not even send (connection gone) or ran out of memory.
            throw PostgresError.connection(handle, context: "query failed")
        }
        let status = PQresultStatus(raw)
        if status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_EMPTY_QUERY {
            return PostgresResult(raw)
        }
        let error: PostgresError
        if status == PGRES_FATAL_ERROR || status == PGRES_NONFATAL_ERROR || status == PGRES_BAD_RESPONSE {
            error = PostgresError.from(result: raw, connection: handle, connectionBroken: isBroken)
        } else {
            error = PostgresError(kind: .protocol, message: "unsupported result status \(status.rawValue) (COPY is not supported)")
        }
        PQclear(raw)
        throw error
    }
}

/// Statement parameters as libpq takes them: one buffer of NUL-terminated strings and, when sending, an array of
/// pointers into it (nil for NULL).
private struct CParameters {
    private var storage: [UInt8] = []
    private var offsets: [Int] = []  // -1 for NULL

    init(_ parameters: [(any PostgresEncodable)?]) throws(PostgresError) {
        storage.reserveCapacity(256)
        offsets.reserveCapacity(parameters.count)
        for (index, parameter) in parameters.enumerated() {
            guard let parameter else {
                offsets.append(-1)
                continue
            }
            var text = parameter.postgresText
            // A C string would silently truncate at NUL; PostgreSQL text cannot hold it anyway.
            let clean = text.withUTF8 { utf8 in
                guard utf8.isEmpty || memchr(utf8.baseAddress!, 0, utf8.count) == nil else { return false }
                offsets.append(storage.count)
                storage.append(contentsOf: utf8)
                storage.append(0)
                return true
            }
            if !clean {
                throw PostgresError(kind: .query, sqlState: "22021", message: "parameter $\(index + 1) contains a NUL byte")
            }
        }
    }

    /// Lends `body` the pointer array and its count.
    func withPointers<R>(_ body: (UnsafePointer<UnsafePointer<CChar>?>?, Int32) -> R) -> R {
        storage.withUnsafeBytes { buffer in
            let base = buffer.baseAddress?.assumingMemoryBound(to: CChar.self)
            let pointers: [UnsafePointer<CChar>?] = offsets.map { $0 < 0 ? nil : base! + $0 }
            return pointers.withUnsafeBufferPointer { body($0.baseAddress, Int32(pointers.count)) }
        }
    }
}

/// libpq calls this (on the owning thread) for each notice; `arg` is the connection's `NoticeSink`.
private func postgresNoticeProcessor(_ arg: UnsafeMutableRawPointer?, _ message: UnsafePointer<CChar>?) {
    guard let arg, let message else { return }
    let sink = Unmanaged<PostgresNoticeSink>.fromOpaque(arg).takeUnretainedValue()
    sink.logger.log(.notice, "postgres: " + String(cString: message).trimmingTrailingNewlines())
}

/// Receives server notices (`RAISE NOTICE`, "table does not exist, skipping") instead of stderr.
private final class PostgresNoticeSink {
    let logger: PostgresLogger
    init(logger: PostgresLogger) { self.logger = logger }
}

/// Monotonic clock in nanoseconds (CLOCK_MONOTONIC): idle times and deadlines, immune to clock changes.
func monotonicNanos() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}
