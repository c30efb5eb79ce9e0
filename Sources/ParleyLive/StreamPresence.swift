import Glibc
import ParleyAPI
import ParleyCore
import ParleyDomains
import ParleyHTTP
import ParleyPostgres
import ParleySync

/// Presence from open user streams (docs/users.md#presence, docs/events.md#live-streams-server-sent-events): every user
/// stream is a row of `user_streams`; a user is `online` while one of its presence-counting rows exists, on the
/// platforms of those rows. Rows are written when the hub starts a stream and removed when it closes, many streams per
/// transaction (``StreamPresenceWriter``), each user locked and its status recomputed from its rows, so concurrent opens
/// and closes (on any node) always end in the status the rows say, and each change is announced once with
/// `user.status_updated`.
package enum StreamPresence {
    /// How a stream ended: `logout` (kick, ban, delete) makes a user with no other stream `logout`, not `offline`.
    enum Ending: Sendable {
        case closed, logout
    }

    /// One stream's change: opened (with what its row records) or closed (with how it ended).
    struct Change: Sendable {
        struct Opened: Sendable {
            let nodeID: String
            let platform: String
            let countsPresence: Bool
        }
        let userID: String
        let streamID: String
        /// Nil for a close.
        let opened: Opened?
        let ending: Ending
    }

    /// Applies a batch of one app's stream changes (in the order they happened) in one transaction, users locked in
    /// id order. If that transaction fails, each user's changes are applied alone, so one user's problem loses no
    /// other user's rows.
    static func apply(_ batch: [Change], appID: String, services: Services) {
        var byUser: [String: [Change]] = [:]
        for change in batch { byUser[change.userID, default: []].append(change) }
        let users = byUser.keys.sorted().map { (userID: $0, changes: byUser[$0]!) }
        do {
            try change(appID: appID, users: users, services: services)
        } catch {
            // Mostly a lock wait past `lockTimeout` (another node's batch holds some of these users): each user alone,
            // a few times, so a change is lost only when its user cannot be written at all.
            for user in users {
                for attempt in 1...3 {
                    do {
                        try change(appID: appID, users: [user], services: services)
                        break
                    } catch {
                        guard attempt < 3 else {
                            services.logger.warning("msg=\"stream presence not recorded\" user_id=\(user.userID) error=\"\(error)\"")
                            break
                        }
                        usleep(UInt32(50_000 * attempt))
                    }
                }
            }
        }
    }

    /// How long a batch waits for a user's row lock before it gives up and its users are written one by one. Well
    /// under the database timeout: a wait past that would be cancelled as a stalled server, and make every connection
    /// of the node fail fast for a while.
    static let lockTimeout = "500ms"

    /// The open streams of a user on any of `platforms` (every node), e.g. those a kick closes.
    package static func count(appID: String, userID: String, platforms: [String], on db: PostgresConnection) throws -> Int {
        let count = try db.query(
            "SELECT count(*) FROM user_streams WHERE app_id = \(appID) AND user_id = \(userID) AND platform = ANY(\(platforms)::text[])"
        ).decodeFirst(Int64.self)
        return Int(count ?? 0)
    }

    /// Writes each user's stream rows (the opened ones, then the closed ones: a stream that opened and closed within
    /// the batch leaves no row), then stores and announces the status each user's rows now give, if it changed; all
    /// in one transaction, with one commit however many users.
    private static func change(appID: String, users: [(userID: String, changes: [Change])], services: Services) throws {
        let now = services.clock.now()
        let announced = try services.pool.transaction { db -> Bool in
            try db.query("SELECT set_config('lock_timeout', \(lockTimeout), true)")
            var events: [NewEvent] = []
            for (userID, changes) in users {
                events += try change(appID: appID, userID: userID, changes, now: now, on: db)
            }
            try EventLog.append(events, appID: appID, now: now, on: db)
            return !events.isEmpty
        }
        if announced { services.sequencer.poke(appID) }
    }

    /// One user's part of ``change(appID:users:services:)``: its events.
    private static func change(appID: String, userID: String, _ changes: [Change], now: Int64, on db: PostgresConnection) throws
        -> [NewEvent]
    {
        // The user's row lock serialises its stream changes; a deleted user has no status left to change.
        guard let user = try UserStore.fetch(appID: appID, userID: userID, forUpdate: true, on: db) else { return [] }
        let opened = changes.compactMap { change in change.opened.map { (streamID: change.streamID, row: $0) } }
        let closed = changes.filter { $0.opened == nil }.map(\.streamID)
        var written: [NewEvent] = []
        if !opened.isEmpty {
            // `opened_at` is wall-clock time, compared with node heartbeats.
            try db.query(
                """
                INSERT INTO user_streams (app_id, user_id, stream_id, node_id, platform, counts_presence, opened_at)
                SELECT \(appID), \(userID), s, n, p, c, \(Timestamp.wallMillis())
                FROM unnest(\(opened.map { $0.streamID })::text[], \(opened.map { $0.row.nodeID })::text[], \(opened.map { $0.row.platform })::text[],
                            \(opened.map { $0.row.countsPresence })::bool[]) AS t(s, n, p, c)
                ON CONFLICT DO NOTHING
                """)
            // The user's call invitations not received yet are now (docs/calls.md), under the user's row lock.
            if opened.contains(where: { $0.row.countsPresence }) {
                written += try CallService(db: db, appID: appID, now: now).streamOpened(userID, on: db)
            }
        }
        if !closed.isEmpty {
            try db.query("DELETE FROM user_streams WHERE app_id = \(appID) AND user_id = \(userID) AND stream_id = ANY(\(closed)::text[])")
        }
        if user.isDeleted { return written }
        let platforms =
            try db.query(
                """
                SELECT coalesce(array_agg(DISTINCT platform ORDER BY platform), '{}') FROM user_streams
                WHERE app_id = \(appID) AND user_id = \(userID) AND counts_presence
                """
            ).decodeFirst([String].self) ?? []
        // The last close says how the user left: a kick, ban or delete makes a user with no stream left `logout`.
        let ending = changes.last(where: { $0.opened == nil })?.ending ?? .closed
        let online = platforms.isEmpty ? (ending == .logout ? "logout" : "offline") : "online"
        let presence = PresenceService(db: db, appID: appID, now: now)
        let stored = try presence.status(userID, on: db)
        var events: [NewEvent] = []
        if stored.onlineStatus != online || Set(stored.onlinePlatforms) != Set(platforms) {
            let status = try PresenceStore.setOnline(
                appID: appID, userID: userID, onlineStatus: online, platforms: platforms, now: now, on: db
            ).asOf(now)
            events.append(try presence.statusUpdatedEvent(status, on: db))
        }
        return events + written
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
        let rows = try services.pool.withConnection { db in
            try db.query("SELECT app_id, user_id, stream_id FROM user_streams WHERE node_id = \(nodeID) ORDER BY 1, 2").decode(
                (String, String, String).self)
        }
        var byApp: [String: [Change]] = [:]
        for (appID, userID, streamID) in rows {
            byApp[appID, default: []].append(Change(userID: userID, streamID: streamID, opened: nil, ending: .closed))
        }
        // Batches of whole users' closes, each one transaction (a node of 19,000 streams: a few dozen commits).
        for (appID, changes) in byApp {
            var start = 0
            while start < changes.count {
                var end = min(start + StreamPresenceWriter.batchLimit, changes.count)
                while end < changes.count && changes[end].userID == changes[end - 1].userID { end += 1 }
                apply(Array(changes[start..<end]), appID: appID, services: services)
                start = end
            }
        }
    }
}

/// Applies the stream changes of a node to `user_streams` and presence, many per transaction: one runner per app takes
/// the app's queued changes in order, a batch at a time (docs/scaling.md#idle-streams-at-scale: one transaction per
/// stream made opening streams, and a reconnect storm, as slow as PostgreSQL's commits).
///
/// Owner: `queue` (any thread); a runner per app with queued changes, on the pool.
final class StreamPresenceWriter: Sendable {
    private let queue = KeyedBatchQueue<StreamPresence.Change>()
    private let services: Services
    /// Changes per transaction at most: tens of users' row locks, held for milliseconds (other nodes' batches of the
    /// same users wait for them).
    static let batchLimit = 100

    init(services: Services) { self.services = services }

    /// Queues a change; it is applied after every change queued before it for the same app.
    func submit(_ change: StreamPresence.Change, appID: String) {
        guard queue.enqueue(change, key: appID) else { return }
        services.pool.submit(
            { [self] in
                while let batch = queue.next(key: appID, max: Self.batchLimit) {
                    StreamPresence.apply(batch, appID: appID, services: services)
                }
            },
            rejected: { [self] in
                // The pool has stopped: the node's rows are settled by the hub's stop (`nodeGone`).
                while queue.next(key: appID, max: Int.max) != nil {}
            })
    }
}

/// The presence record of one open user stream: its row is written when the stream starts and removed when it closes,
/// in that order (the writer applies one app's changes in the order they were submitted).
///
/// Owner: `ending`, set by the hub (logout marking) before it closes the stream, read by the close handler.
final class UserStreamPresence: Sendable {
    let userID: String
    let streamID: String
    private let writer: StreamPresenceWriter
    private let ending = LockedValue(StreamPresence.Ending.closed)

    init(userID: String, streamID: String, writer: StreamPresenceWriter) {
        self.userID = userID
        self.streamID = streamID
        self.writer = writer
    }

    /// The hub closes this stream because of a kick, ban or delete.
    func endedByLogout() { ending.withLock { $0 = .logout } }

    func open(_ subscription: EventHub.Subscription, nodeID: String) {
        let opened = StreamPresence.Change.Opened(nodeID: nodeID, platform: subscription.platform, countsPresence: subscription.countsPresence)
        writer.submit(.init(userID: userID, streamID: streamID, opened: opened, ending: .closed), appID: subscription.appID)
    }

    func close(appID: String) {
        writer.submit(.init(userID: userID, streamID: streamID, opened: nil, ending: ending.withLock { $0 }), appID: appID)
    }
}
