import ParleyAPI
import ParleyCore
import ParleyDomains
import ParleyHTTP
import ParleyPostgres
import ParleySync

/// Presence from open user streams (docs/users.md#presence, docs/events.md#live-streams-server-sent-events): every user
/// stream is a row of `user_streams`; a user is `online` while one of its presence-counting rows exists, on the
/// platforms of those rows. Rows are written when the hub starts a stream and removed when it closes, each in a
/// transaction that locks the user and recomputes its status from the rows, so concurrent opens and closes (on any
/// node) always end in the status the rows say, and each change is announced once with `user.status_updated`.
package enum StreamPresence {
    /// How a stream ended: `logout` (kick, ban, delete) makes a user with no other stream `logout`, not `offline`.
    enum Ending: Sendable {
        case closed, logout
    }

    /// Records an opened user stream. `opened_at` is wall-clock time, compared with node heartbeats.
    static func opened(
        appID: String, userID: String, streamID: String, nodeID: String, platform: String, countsPresence: Bool,
        services: Services
    ) throws {
        try change(appID: appID, userID: userID, services: services, ending: .closed) { db, now in
            try db.query(
                """
                INSERT INTO user_streams (app_id, user_id, stream_id, node_id, platform, counts_presence, opened_at)
                VALUES (\(appID), \(userID), \(streamID), \(nodeID), \(platform), \(countsPresence), \(Timestamp.wallMillis())) ON CONFLICT DO NOTHING
                """)
            // The user's call invitations not received yet are now (docs/calls.md), under the user's row lock.
            return countsPresence ? try CallService(db: db, appID: appID, now: now).streamOpened(userID, on: db) : []
        }
    }

    /// Removes closed user streams of one user (one stream, or every stream of a dead node).
    static func closed(appID: String, userID: String, streamIDs: [String], ending: Ending, services: Services) throws {
        try change(appID: appID, userID: userID, services: services, ending: ending) { db, _ in
            try db.query("DELETE FROM user_streams WHERE app_id = \(appID) AND user_id = \(userID) AND stream_id = ANY(\(streamIDs)::text[])")
            return []
        }
    }

    /// The open streams of a user on any of `platforms` (every node), e.g. those a kick closes.
    package static func count(appID: String, userID: String, platforms: [String], on db: PostgresConnection) throws -> Int {
        let count = try db.query(
            "SELECT count(*) FROM user_streams WHERE app_id = \(appID) AND user_id = \(userID) AND platform = ANY(\(platforms)::text[])"
        ).decodeFirst(Int64.self)
        return Int(count ?? 0)
    }

    /// Runs `write` on the user's streams (it returns the events of what else the change did), then stores and
    /// announces the status the rows now give, if it changed.
    private static func change(
        appID: String, userID: String, services: Services, ending: Ending,
        _ write: @escaping (PostgresConnection, Int64) throws -> [NewEvent]
    ) throws {
        let now = services.clock.now()
        let announced = try services.pool.transaction { db -> Bool in
            // The user's row lock serialises its stream changes; a deleted user has no status left to change.
            guard let user = try UserStore.fetch(appID: appID, userID: userID, forUpdate: true, on: db) else { return false }
            let written = try write(db, now)
            if user.isDeleted {
                try EventLog.append(written, appID: appID, now: now, on: db)
                return !written.isEmpty
            }
            var events: [NewEvent] = []
            let platforms =
                try db.query(
                    """
                    SELECT coalesce(array_agg(DISTINCT platform ORDER BY platform), '{}') FROM user_streams
                    WHERE app_id = \(appID) AND user_id = \(userID) AND counts_presence
                    """
                ).decodeFirst([String].self) ?? []
            let online = platforms.isEmpty ? (ending == .logout ? "logout" : "offline") : "online"
            let presence = PresenceService(db: db, appID: appID, now: now)
            let stored = try presence.status(userID, on: db)
            if stored.onlineStatus != online || Set(stored.onlinePlatforms) != Set(platforms) {
                let status = try PresenceStore.setOnline(
                    appID: appID, userID: userID, onlineStatus: online, platforms: platforms, now: now, on: db
                ).asOf(now)
                events.append(try presence.statusUpdatedEvent(status, on: db))
            }
            events += written
            try EventLog.append(events, appID: appID, now: now, on: db)
            return !events.isEmpty
        }
        if announced { services.sequencer.poke(appID) }
    }

    /// Heartbeats (wall-clock ms) older than this mark a node dead; its streams are closed for presence.
    static let nodeTimeoutMillis: Int64 = 30_000

    /// Records that `nodeID` is alive.
    static func heartbeat(nodeID: String, on db: PostgresConnection) throws {
        try db.query(
            """
            INSERT INTO live_nodes (node_id, seen_at) VALUES (\(nodeID), \(Timestamp.wallMillis()))
            ON CONFLICT (node_id) DO UPDATE SET seen_at = EXCLUDED.seen_at
            """)
    }

    /// How many other nodes beat lately (they listen for this node's notifications).
    static func otherLiveNodes(than nodeID: String, on db: PostgresConnection) throws -> Int64 {
        let cutoff = Timestamp.wallMillis() - nodeTimeoutMillis
        return try db.query("SELECT count(*) FROM live_nodes WHERE node_id <> \(nodeID) AND seen_at >= \(cutoff)").decodeFirst(Int64.self) ?? 0
    }

    /// Forgets the heartbeat of a node that is stopping: the others stop counting it (and notifying it) at once.
    static func leave(nodeID: String, on db: PostgresConnection) throws {
        try db.query("DELETE FROM live_nodes WHERE node_id = \(nodeID)")
    }

    /// The nodes that hold stream rows but stopped beating (crashed, killed), and forgets their heartbeats.
    static func deadNodes(on db: PostgresConnection) throws -> [String] {
        let cutoff = Timestamp.wallMillis() - nodeTimeoutMillis
        let nodes = try db.query(
            """
            SELECT DISTINCT s.node_id FROM user_streams s
            WHERE s.opened_at < \(cutoff)
              AND NOT EXISTS (SELECT 1 FROM live_nodes n WHERE n.node_id = s.node_id AND n.seen_at >= \(cutoff))
            """
        ).decode(String.self)
        try db.query("DELETE FROM live_nodes WHERE seen_at < \(cutoff)")
        return nodes
    }

    /// Closes, for presence, every stream row of `nodeID` (a node stopping, or found dead).
    static func nodeGone(_ nodeID: String, services: Services) throws {
        let users = try services.pool.withConnection { db in
            try db.query("SELECT app_id, user_id, array_agg(stream_id) FROM user_streams WHERE node_id = \(nodeID) GROUP BY 1, 2").decode(
                (String, String, [String]).self
            ).map { (appID: $0.0, userID: $0.1, streams: $0.2) }
        }
        for user in users {
            try closed(appID: user.appID, userID: user.userID, streamIDs: user.streams, ending: .closed, services: services)
        }
    }
}

/// The presence record of one open user stream: written when the stream starts, removed when it closes, in that
/// order even when the client leaves at once (the removal waits for the insert).
///
/// Owner: `state`, shared by the thread that opened the stream, its close handler and the hub (logout marking).
final class UserStreamPresence: Sendable {
    let userID: String
    let streamID: String
    private let services: Services
    private struct State {
        var opened = false
        var closeRequested = false
        var ending = StreamPresence.Ending.closed
    }
    private let state = LockedValue(State())

    init(userID: String, streamID: String, services: Services) {
        self.userID = userID
        self.streamID = streamID
        self.services = services
    }

    /// The hub closes this stream because of a kick, ban or delete.
    func endedByLogout() { state.withLock { $0.ending = .logout } }

    func open(_ subscription: EventHub.Subscription, nodeID: String) {
        let services = self.services
        services.pool.submit(
            { [self] in
                do {
                    try StreamPresence.opened(
                        appID: subscription.appID, userID: userID, streamID: streamID, nodeID: nodeID,
                        platform: subscription.platform, countsPresence: subscription.countsPresence, services: services)
                } catch {
                    services.logger.warning("msg=\"stream presence not recorded\" user_id=\(userID) error=\"\(error)\"")
                }
                let closeNow = state.withLock { s -> Bool in
                    s.opened = true
                    return s.closeRequested
                }
                if closeNow { remove(appID: subscription.appID) }
            }, rejected: {})
    }

    func close(appID: String) {
        let removeNow = state.withLock { s -> Bool in
            s.closeRequested = true
            return s.opened
        }
        guard removeNow else { return }  // the insert is still queued: it removes the row when done
        services.pool.submit({ [self] in remove(appID: appID) }, rejected: {})
    }

    private func remove(appID: String) {
        let ending = state.withLock { $0.ending }
        do {
            try StreamPresence.closed(appID: appID, userID: userID, streamIDs: [streamID], ending: ending, services: services)
        } catch {
            services.logger.warning("msg=\"stream presence not removed\" user_id=\(userID) error=\"\(error)\"")
        }
    }
}
