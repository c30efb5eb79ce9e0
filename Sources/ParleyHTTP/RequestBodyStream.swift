import Glibc

/// Why a streamed request body ended before its last byte.
public enum RequestBodyError: Error, Sendable, Equatable {
    /// The client closed the connection.
    case closed
    /// No byte arrived for the server's body timeout (the server answered 408).
    case timedOut
    /// The body went over the route's `maxBodyBytes` (a chunked body, whose size is known only as it arrives).
    case tooLarge
    /// The body's framing was malformed (the server answered 400).
    case malformed
    /// The handler answered before reading the whole body; the rest is dropped.
    case abandoned
}

/// The readable end of a request body that arrives while its handler runs (routes with `RouteOptions.streamsBody`):
/// uploads of any size pass through in pieces, so memory stays bounded by ``highWater`` whatever the body's size.
///
/// The connection's event loop pushes what the parser took off the socket; the handler's worker thread reads it with
/// ``next()``, which blocks until bytes arrive. Above ``highWater`` bytes waiting, the connection stops reading the
/// socket (TCP then slows the client down); once the handler has read down to ``lowWater`` it asks the loop to read
/// again. The first read also sends the `100 Continue` a client that sent `Expect: 100-continue` waits for, so a
/// handler that refuses the request first (credentials, quota) never invites the body.
///
/// Owner: the fields below `lock` are guarded by it; the connection side belongs to the loop.
public final class RequestBodyStream: @unchecked Sendable {
    /// Bytes waiting for the handler above which the connection stops reading.
    public static let highWater = 1 << 20
    /// Bytes waiting below which a paused connection reads again.
    public static let lowWater = 256 << 10

    private let lock = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let arrived = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var chunks: [[UInt8]] = []
    private var head = 0
    private var waitingBytes = 0
    private var ended = false
    private var failure: RequestBodyError?
    /// The connection stopped reading (backpressure, or a `100 Continue` not sent yet).
    private var producerPaused: Bool
    /// Bytes handed to the handler so far.
    private var readBytes = 0
    /// Asks the connection's loop to read again (and to send a pending `100 Continue`); nil for a body known whole.
    private let resume: (@Sendable () -> Void)?

    /// A stream the connection fills; `startsPaused` when the client waits for `100 Continue`.
    init(startsPaused: Bool, resume: @escaping @Sendable () -> Void) {
        producerPaused = startsPaused
        self.resume = resume
        pthread_mutex_init(lock, nil)
        pthread_cond_init(arrived, nil)
    }

    /// A body already read whole (the in-process path): the handler reads it the same way.
    public init(complete body: [UInt8]) {
        producerPaused = false
        resume = nil
        if !body.isEmpty { chunks = [body] }
        waitingBytes = body.count
        ended = true
        pthread_mutex_init(lock, nil)
        pthread_cond_init(arrived, nil)
    }

    deinit {
        pthread_cond_destroy(arrived)
        pthread_mutex_destroy(lock)
        lock.deallocate()
        arrived.deallocate()
    }

    private func locked<T>(_ body: () -> T) -> T {
        pthread_mutex_lock(lock)
        defer { pthread_mutex_unlock(lock) }
        return body()
    }

    // MARK: - The handler's side (a worker thread; never an event loop)

    /// The next piece of the body, nil once it has all been read. Blocks until bytes arrive, the body ends or fails.
    public func next() throws(RequestBodyError) -> [UInt8]? {
        pthread_mutex_lock(lock)
        var askResume = false
        if producerPaused && waitingBytes <= Self.lowWater && failure == nil && !ended {
            producerPaused = false
            askResume = true
        }
        if askResume, let resume {
            // Outside the lock: the loop may push as soon as it hears.
            pthread_mutex_unlock(lock)
            resume()
            pthread_mutex_lock(lock)
        }
        while head == chunks.count && !ended && failure == nil {
            pthread_cond_wait(arrived, lock)
        }
        if head < chunks.count {
            let chunk = chunks[head]
            // The array lets go of the piece now: while the connection keeps pushing, `head` may never catch up with
            // the end, and every piece read would stay referenced (a chunked upload in 8 KiB chunks held 150 MB).
            chunks[head] = []
            head += 1
            if head == chunks.count {
                chunks.removeAll(keepingCapacity: true)
                head = 0
            } else if head >= 64 && head * 2 >= chunks.count {
                chunks.removeFirst(head)
                head = 0
            }
            waitingBytes -= chunk.count
            readBytes += chunk.count
            let resumeNow = producerPaused && waitingBytes <= Self.lowWater && !ended && failure == nil
            if resumeNow { producerPaused = false }
            pthread_mutex_unlock(lock)
            if resumeNow { resume?() }
            return chunk
        }
        let failure = self.failure
        pthread_mutex_unlock(lock)
        if let failure { throw failure }
        return nil
    }

    /// Reads the rest of the body into memory, failing with `.tooLarge` past `limit` bytes (for bodies that are small
    /// by rule, such as a multipart form's non-file fields).
    public func readAll(limit: Int) throws(RequestBodyError) -> [UInt8] {
        var all: [UInt8] = []
        while let chunk = try next() {
            if all.count + chunk.count > limit { throw .tooLarge }
            all += chunk
        }
        return all
    }

    /// Bytes handed to the handler so far.
    public var bytesRead: Int { locked { readBytes } }

    /// Bytes arrived and not yet read (at most ``highWater`` plus one read of the socket).
    public var bytesWaiting: Int { locked { waitingBytes } }

    // MARK: - The connection's side (its event loop)

    /// Adds bytes the parser took off the socket; returns whether the connection should stop reading.
    func push(_ bytes: [UInt8]) -> Bool {
        locked {
            if failure != nil || ended { return false }
            if !bytes.isEmpty {
                chunks.append(bytes)
                waitingBytes += bytes.count
                pthread_cond_signal(arrived)
            }
            if waitingBytes >= Self.highWater { producerPaused = true }
            return producerPaused
        }
    }

    /// The body's last bytes arrived.
    func finish(_ tail: [UInt8]) {
        locked {
            if failure != nil || ended { return }
            if !tail.isEmpty {
                chunks.append(tail)
                waitingBytes += tail.count
            }
            ended = true
            pthread_cond_signal(arrived)
        }
    }

    /// The body will not arrive whole: the handler's next read throws `error` (bytes already waiting are dropped).
    func fail(_ error: RequestBodyError) {
        locked {
            if failure != nil || ended { return }
            failure = error
            chunks = []
            head = 0
            waitingBytes = 0
            pthread_cond_signal(arrived)
        }
    }

    /// Whether the body arrived whole (the connection may keep its next request).
    var isComplete: Bool { locked { ended } }
}
