import ParleySync

/// Idle keep-alive connections of outbound requests, by destination (scheme, host, port and policy), so webhook
/// deliveries and hook calls to one receiver do not pay a TCP (and TLS) handshake each.
///
/// A connection is checked out by one thread for one request and put back after it (``OutboundHTTP/send``); one idle
/// longer than `maxIdle`, or closed by the peer meanwhile, is closed instead of reused. The addresses were checked
/// against the policy when the connection was opened, and a reused connection goes to that same address.
///
/// Owner: `idle` behind its lock; a connection in it belongs to no thread.
public final class OutboundConnections: Sendable {
    struct Key: Hashable, Sendable {
        var scheme: HTTPClientURL.Scheme
        var host: String
        var port: Int
        var policy: OutboundPolicy
    }

    /// A parked connection: owned by the lock while parked, by one thread once taken.
    private final class Parked: @unchecked Sendable {
        let connection: HTTPClientConnection
        let since: ContinuousClock.Instant
        init(_ connection: HTTPClientConnection) {
            self.connection = connection
            since = .now
        }
    }

    private let idle = LockedValue<[Key: [Parked]]>([:])
    private let maxPerDestination: Int
    private let maxIdle: Duration

    /// `maxPerDestination` is at least what one worker has in flight to one destination (the push bridge sends 64
    /// requests at once to its gateway): with fewer, each burst closes the surplus and the next one reconnects.
    public init(maxPerDestination: Int = 64, maxIdle: Duration = .seconds(30)) {
        self.maxPerDestination = maxPerDestination
        self.maxIdle = maxIdle
    }

    /// An idle connection to `key` that still looks open, if any.
    func take(_ key: Key) -> HTTPClientConnection? {
        while let parked = idle.withLock({ $0[key]?.popLast() }) {
            if ContinuousClock.now - parked.since < maxIdle, !parked.connection.isClosedByPeer(timeout: .zero) {
                return parked.connection
            }
            parked.connection.close()
        }
        return nil
    }

    /// Parks `connection`; false (the caller closes it) when `key` already has its share of idle connections.
    func put(_ key: Key, _ connection: HTTPClientConnection) -> Bool {
        let parked = Parked(connection)
        return idle.withLock { idle in
            guard idle[key, default: []].count < maxPerDestination else { return false }
            idle[key, default: []].append(parked)
            return true
        }
    }
}
