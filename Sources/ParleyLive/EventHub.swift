import Glibc
import ParleyAPI
import ParleyCore
import ParleyDomains
import ParleyHTTP
import ParleyPostgres
import ParleySync
import Synchronization

/// The live fan-out of one node (docs/scaling.md#event-fan-out): reads each new event of the log once and hands it to
/// every interested SSE stream of this node, without a thread or a database connection per stream.
///
/// How new events are found: a request that may have written events pokes the hub for its app once it has
/// committed; the hub reads the app's new events on its own connection, delivers them, and tells the other
/// nodes with `NOTIFY parley_events` ("app X has new events"); their hubs read the log the same way. The log is
/// the source of truth: every app with streams is also re-read once a second, so a lost poke or notification
/// delays an event but never loses it.
///
/// Exactly once, in order: each subscriber has a cursor (the last event id it has passed). The hub thread alone
/// owns the feeds and cursors: it first catches a new subscriber up from its resume position to the feed head
/// (the backlog), then delivers each newly read event to every subscriber whose cursor is below it. Nothing is
/// delivered twice and nothing is skipped between backlog and live.
///
/// Owner: `inbox` (any thread: registrations, departures, pokes, stream counts); everything else lives in the
/// hub thread's `run` loop.
package final class EventHub: CommitObserver {
    /// A stream handed to the hub.
    struct Subscription: Sendable {
        let appID: String
        let filter: StreamFilter
        /// The user of a user stream (it closes on `user.kicked` / `user.deleted` of that user).
        let userID: String?
        /// Deliver events with id > `after`.
        let after: Int64
        /// The app's log head when the stream opened: where a new feed starts reading.
        let head: Int64
        /// For a user stream: its `platform`, and whether it makes the user online (docs/users.md#presence).
        var platform = "unknown"
        var countsPresence = false
        /// When the user token it was opened with expires (server-clock ms); the stream closes then.
        var expiresAt: Int64?
        /// The app key it was opened with; the stream closes when that key is revoked.
        var appKeyID: String?
    }

    /// What the hub thread's next round takes.
    private struct Round {
        var newcomers: [(id: UInt64, subscriber: Subscriber)] = []
        var departed: [(appID: String, id: UInt64)] = []
        var dirty: Set<String> = []
        var writtenHere: Set<String> = []
        /// Events this node's writer committed, by app, in the order they were handed over.
        var local: [String: [CommittedEvent]] = [:]
        /// Another node said hello on the channel (it started and listens): notify from now on.
        var peerAppeared = false
        /// Ephemeral events heard (any node's, this one's included): written to the open user streams of their users.
        var ephemeral: [EphemeralEvents.Received] = []
        /// The node is draining (``endStreams()``): end every stream with the short retry hint.
        var endStreams = false
    }

    private struct Inbox {
        /// Taken whole by each round; the stream counts below stay (a round does not copy them).
        var round = Round()
        var nextID: UInt64 = 1
        /// Open streams per counting key (`u:<app>:<user>`, `a:<app>`), for the stream caps
        /// (docs/events.md#live-streams-server-sent-events).
        var openStreams: [String: Int] = [:]
        /// Reservations whose stream has not started: counting key and release deadline (monotonic ms).
        var unconfirmed: [UInt64: (key: String, deadline: Int64)] = [:]

        mutating func release(_ key: String) {
            let left = openStreams[key, default: 1] - 1
            openStreams[key] = left > 0 ? left : nil
        }
    }

    static let channel = CommitObservers.channel
    /// The subject of the notification a node sends when it starts, so that the others notify it from then on.
    static let hello = "+"
    /// Events read per query; a subscriber catching up reads at most `catchUpPages` pages per pass, so one large
    /// backlog never stalls the others.
    static let pageSize = 200
    static let catchUpPages = 5
    static let pingFrame = Array(": ping\n\n".utf8)
    /// What a draining node writes last on each stream: reconnect soon (a client that honours `retry:` waits this
    /// long; the stream's first frame said 3 s, for failures), to another node, where `Last-Event-ID` resumes it.
    static let drainRetryMillis = 500
    static let drainFrame = Array("retry: \(drainRetryMillis)\n\n".utf8)
    /// How long after its streams ended a draining node keeps their presence rows: their users reconnect elsewhere
    /// within the retry hint, so settling the rows afterwards finds them online there and announces no change,
    /// instead of an `offline` and an `online` a second apart.
    static let presenceHandoverMillis: Int64 = 2_000
    static let reservationTimeoutMillis: Int64 = 30_000

    let heartbeatMillis: Int
    private let logger: Logger
    private let nodeID = String(UInt64.random(in: 0...UInt64.max), radix: 36)
    private let inbox = WorkerInbox(Inbox())
    private let listener = LockedValue<PostgresListener?>(nil)
    /// Set by `start`, cleared by `stop`: the pool and clock the presence writes use.
    private let services = LockedValue<Services?>(nil)
    /// Set by `start`: applies the user streams' opens and closes to presence, many per transaction.
    private let presenceWriter = LockedValue<StreamPresenceWriter?>(nil)
    /// Set by ``endStreams()``: when (monotonic ms) the hub was told to end its streams, and, once it has, how many
    /// it ended, and how many of them were user streams with presence (their rows are settled together by `stop`,
    /// after the handover).
    private struct Drain {
        var startedAt: Int64
        var ended: (streams: Int, presence: Int)?
    }
    private let drain = LockedValue<Drain?>(nil)
    private var isDraining: Bool { drain.withLock { $0 != nil } }
    static let heartbeatIntervalMillis: Int64 = 5_000

    /// Told, on the listener's thread, of each app another node says has new events (the node wires the readers that
    /// keep their own cursors, the webhook dispatcher and the push bridge, so they need not wait for their poll).
    private let remoteEvents: @Sendable (_ appID: String) -> Void
    /// Told when the listener has reconnected: notices sent while it was away are lost.
    private let notificationsMissed: @Sendable () -> Void

    /// Whether the node's descriptors allow one more stream (docs/scaling.md#open-files).
    package let capacity: StreamCapacity
    /// Reads of the log that caught streams up (backlogs of new and resumed streams), since start: one per page,
    /// shared by every stream that page serves.
    package let replayQueries = Atomic<Int>(0)
    /// The catch-up reads so far (the `parley_sse_replay_reads_total` metric).
    package var replayReads: Int { replayQueries.load(ordering: .relaxed) }

    package init(
        heartbeatMillis: Int, logger: Logger, descriptorReserve: Int = 0,
        remoteEvents: @escaping @Sendable (_ appID: String) -> Void = { _ in },
        notificationsMissed: @escaping @Sendable () -> Void = {}
    ) {
        self.heartbeatMillis = heartbeatMillis
        capacity = StreamCapacity(reserve: descriptorReserve)
        self.logger = logger
        self.remoteEvents = remoteEvents
        self.notificationsMissed = notificationsMissed
    }

    // MARK: - Any thread

    /// Counts a new stream against `limit` open streams under `key`; nil when the cap is reached. The stream
    /// must then `subscribe` with the returned reservation; one that never does (its client vanished before the
    /// response head went out) is released after `reservationTimeoutMillis`.
    func reserve(_ key: String, limit: Int) -> Reservation? {
        // Nothing for the hub thread to do yet: no wake-up.
        inbox.ifRunning { inbox -> Reservation? in
            let open = inbox.openStreams[key, default: 0]
            guard open < limit else { return nil }
            inbox.openStreams[key] = open + 1
            defer { inbox.nextID += 1 }
            let reservation = Reservation(id: inbox.nextID, key: key)
            inbox.unconfirmed[reservation.id] = (key, EventLoop.monotonicMillis() + Self.reservationTimeoutMillis)
            return reservation
        } ?? nil
    }

    /// A counted, not yet started stream.
    struct Reservation: Sendable {
        let id: UInt64
        let key: String
    }

    /// Starts delivering `subscription` to `stream`, under a reservation from `reserve` that is released when
    /// the stream closes. A user stream is also recorded for presence while it is open.
    func subscribe(_ subscription: Subscription, on stream: ResponseStream, reservation: Reservation) {
        let id = reservation.id
        let key = reservation.key
        if isDraining {
            // Opened on a connection the drain let finish: the client is told to come back soon, to another node.
            inbox.withState { inbox in
                if inbox.unconfirmed.removeValue(forKey: id) != nil { inbox.release(key) }
            }
            stream.write(Self.drainFrame)
            stream.close()
            return
        }
        let presence = subscription.userID.flatMap { userID in
            presenceWriter.withLock { $0 }.map { UserStreamPresence(userID: userID, streamID: "\(nodeID):\(id)", writer: $0) }
        }
        // The hub is woken once the stream's close handler is in place (below).
        let confirmed = inbox.ifRunning { inbox -> Bool in
            guard inbox.unconfirmed.removeValue(forKey: id) != nil else { return false }
            let subscriber = Subscriber(subscription: subscription, stream: stream, presence: presence, cursor: subscription.after)
            inbox.round.newcomers.append((id, subscriber))
            return true
        }
        guard confirmed == true else {
            // Reserved too long ago (its count was already released), or the hub has stopped and would never serve it.
            if confirmed == nil {
                inbox.withState { inbox in
                    if inbox.unconfirmed.removeValue(forKey: id) != nil { inbox.release(key) }
                }
            }
            stream.close()
            return
        }
        presence?.open(subscription, nodeID: nodeID)
        stream.onClose { [self] in
            // Released during and after a stop too (the stop closes every stream).
            inbox.withState { inbox in
                inbox.round.departed.append((subscription.appID, id))
                inbox.release(key)
            }
            // A draining node settles its streams' presence together, after the handover (`stop`).
            if !isDraining { presence?.close(appID: subscription.appID) }
            inbox.poke()
        }
        inbox.poke()
    }

    /// Open streams on this node: user streams and app-level streams (for `/metrics` and `/v1/stats`).
    package func openStreams(appID: String? = nil) -> (user: Int, app: Int) {
        inbox.withState { inbox in
            var user = 0
            var app = 0
            for (key, count) in inbox.openStreams {
                if key.hasPrefix("a:") {
                    if appID == nil || key == "a:\(appID!)" { app += count }
                } else if appID == nil || key.hasPrefix("u:\(appID!):") {
                    user += count
                }
            }
            return (user, app)
        }
    }

    /// Says that `appID` may have new events: a request or timer of this node committed (`local`), or another
    /// node notified.
    package func poke(_ appID: String, local: Bool = true) {
        inbox.post { inbox in
            inbox.round.dirty.insert(appID)
            if local { inbox.round.writtenHere.insert(appID) }
        }
    }

    /// Events the message writer of this node has just committed: delivered from memory when they follow what the
    /// streams have seen (nothing reads back what this node wrote), from the log otherwise; the other nodes are told.
    package func committed(_ events: CommittedEvents) {
        guard !events.events.isEmpty else { return }
        inbox.post { inbox in
            inbox.round.local[events.appID, default: []].append(contentsOf: events.events)
            inbox.round.writtenHere.insert(events.appID)
        }
    }

    /// The sequencer of this node numbered events of `appID` (a request's or timer's commit): read from the log.
    package func stored(appID: String) { poke(appID) }

    /// Nothing to do: another node's notice reaches the other readers through the hub's own listener, which has
    /// already poked the streams (`start`).
    package func storedElsewhere(appID: String) {}

    // MARK: - Lifecycle

    /// Starts the hub thread (reading on its own connection to `database`) and the listener for other nodes.
    package func start(database: PostgresConfiguration, pgLogger: PostgresLogger, services: Services) {
        self.services.withLock { $0 = services }
        presenceWriter.withLock { $0 = StreamPresenceWriter(services: services) }
        inbox.start(name: "parley-hub") { [self] _ in
            run(DedicatedConnection(database, applicationName: "parley-hub", logger: pgLogger))
        }
        let nodeID = self.nodeID
        let notified = PostgresListener(
            configuration: database, channels: [Self.channel, EphemeralEvents.channel], logger: pgLogger,
            onReconnect: { [self] in
                notificationsMissed()
                pokeAll()
            },
            onNotification: { [self] channel, payload in
                if channel == EphemeralEvents.channel {
                    guard let event = EphemeralEvents.parse(payload) else { return }
                    inbox.post { $0.round.ephemeral.append(event) }
                    return
                }
                // "<node> <app>", or "<node> +" from a node that has just started: our own are already handled.
                guard let space = payload.firstIndex(of: " "), payload[..<space] != nodeID else { return }
                let subject = payload[payload.index(after: space)...]
                if subject == Self.hello {
                    inbox.withState { $0.round.peerAppeared = true }
                    return
                }
                let appID = String(subject)
                poke(appID, local: false)
                remoteEvents(appID)
            })
        listener.withLock { $0 = notified }
        // The first round at once: the hello, and the first heartbeat that tells whether other nodes listen.
        inbox.poke()
    }

    /// The first step of a node's drain (docs/operations.md#shutdown): ends every open stream with a short `retry:`
    /// hint, so its client reconnects at once through the balancer (to another node) and resumes with `Last-Event-ID`;
    /// streams that open from now on end the same way. The hub keeps running (in-flight requests' events still reach
    /// the other nodes' hubs by its notifications) until `stop`. Returns the number of streams ended, once the hub has
    /// ended them (within 2 s).
    @discardableResult
    package func endStreams() -> Int {
        drain.withLock { $0 = $0 ?? Drain(startedAt: EventLoop.monotonicMillis()) }
        guard inbox.post({ $0.round.endStreams = true }) else { return 0 }
        var waits = 0
        while waits < 200, drain.withLock({ $0?.ended == nil }) {
            usleep(10_000)
            waits += 1
        }
        return drain.withLock { $0?.ended?.streams } ?? 0
    }

    /// Closes every stream (clients resume with `Last-Event-ID`), stops the thread, and leaves the cluster: this node's
    /// stream rows are settled for presence (after the handover, when it drained) and its heartbeat row removed, so
    /// the other nodes stop counting it at once rather than after ``StreamPresence/nodeTimeoutMillis``.
    package func stop() {
        listener.withLock { $0.take() }?.stop()
        inbox.stop()
        guard let services = services.withLock({ $0.take() }) else { return }
        if let drained = drain.withLock({ $0 }), (drained.ended?.presence ?? 0) > 0 {
            let wait = drained.startedAt + Self.presenceHandoverMillis - EventLoop.monotonicMillis()
            if wait > 0 { usleep(UInt32(min(wait, Self.presenceHandoverMillis)) * 1000) }
        }
        let started = EventLoop.monotonicMillis()
        do {
            // The closed streams' own presence updates may find the pool gone: settle this node's rows now.
            try StreamPresence.nodeGone(nodeID, services: services)
            try services.pool.withConnection { try StreamPresence.leave(nodeID: nodeID, on: $0) }
            logger.info("msg=\"left the cluster\" node=\(nodeID) ms=\(EventLoop.monotonicMillis() - started)")
        } catch {
            logger.warning("msg=\"stream presence not settled at shutdown\" error=\"\(error)\"")
        }
    }

    /// Says that any app may have new events (timers fired; the listener reconnected and may have missed some).
    func pokeAll() {
        inbox.post { _ = $0.round.dirty.insert("*") }
    }

    // MARK: - The hub thread

    /// One open stream as the hub sees it. A class, so the hub's per-event loop over thousands of them touches one
    /// reference each instead of copying their fields.
    ///
    /// Owner: made by `subscribe` and handed over through the inbox; after that only the hub thread reads or moves
    /// `cursor` (hence `@unchecked`: the other fields are immutable and Sendable).
    private final class Subscriber: @unchecked Sendable {
        let subscription: Subscription
        let stream: ResponseStream
        let presence: UserStreamPresence?
        /// The last event id this subscriber has passed (delivered or filtered out).
        var cursor: Int64

        init(subscription: Subscription, stream: ResponseStream, presence: UserStreamPresence?, cursor: Int64) {
            self.subscription = subscription
            self.stream = stream
            self.presence = presence
            self.cursor = cursor
        }
    }

    private struct Feed {
        var head: Int64
        var subscribers: [UInt64: Subscriber] = [:]
        /// Every subscriber whose cursor may be below the head (new and resumed ones; ids of closed ones until the next
        /// pump prunes them): the catch-up looks only at these, not at the thousands of streams already at the head.
        var catchingUp: Set<UInt64> = []
    }

    private func run(_ connection: DedicatedConnection) {
        var feeds: [String: Feed] = [:]
        var audience = MemberAudience()
        var db = connection
        var outage = OutageLog(logger: logger, what: "live hub read")
        // Heartbeats go out a slice of the streams at a time, one slice a second, so every stream still gets one per
        // `heartbeatMillis` but 19,000 streams are not pinged in one burst (each burst delayed a node's requests by up
        // to a second; docs/scaling.md#idle-streams-at-scale).
        let heartbeatSlices = max(1, heartbeatMillis / 1000)
        var heartbeatSlice = 0
        var nextHeartbeat = EventLoop.monotonicMillis() + Int64(heartbeatMillis / heartbeatSlices)
        var nextSweep = EventLoop.monotonicMillis() + 1000
        var nextNodeBeat: Int64 = 0
        var retry: Set<String> = []
        var sweep = false
        // Whether other nodes listen: a node alone sends no NOTIFY (each is a transaction of its own, and this node's
        // listener would only receive its own). Learnt from the heartbeats, and at once from a starting node's hello.
        var peersUntil: Int64 = 0
        var greeted = false
        var streamsEnded = false
        while true {
            let now = EventLoop.monotonicMillis()
            let taken = inbox.take(waitMillis: Int(max(0, min(nextHeartbeat, nextSweep) - now))) { inbox in
                defer { inbox.round = Round() }
                return inbox.round
            }
            guard let batch = taken else {
                // Also the streams that subscribed after this thread's last round: none may stay open unserved.
                let newcomers = inbox.withState { inbox in
                    defer { inbox.round.newcomers = [] }
                    return inbox.round.newcomers
                }
                for (_, subscriber) in newcomers { subscriber.stream.close() }
                for feed in feeds.values { for subscriber in feed.subscribers.values { subscriber.stream.close() } }
                return
            }
            for (appID, id) in batch.departed {
                feeds[appID]?.subscribers[id] = nil
                if feeds[appID]?.subscribers.isEmpty == true {
                    feeds[appID] = nil
                    audience.forget(appID: appID)
                }
            }
            var apps = batch.dirty.union(retry)
            for (id, subscriber) in batch.newcomers where !subscriber.stream.isClosed {
                let appID = subscriber.subscription.appID
                feeds[appID, default: Feed(head: subscriber.subscription.head)].subscribers[id] = subscriber
                feeds[appID]!.catchingUp.insert(id)
                apps.insert(appID)
            }
            if batch.endStreams && !streamsEnded {
                streamsEnded = true
                let ended = endAll(&feeds)
                audience = MemberAudience()
                drain.withLock { $0?.ended = ended }
                logger.info(
                    "msg=\"streams ended for the drain\" streams=\(ended.streams) presence_streams=\(ended.presence) retry_ms=\(Self.drainRetryMillis)"
                )
            } else if streamsEnded && !feeds.isEmpty {
                // A stream that subscribed as the drain began.
                _ = endAll(&feeds)
            }
            if apps.contains("*") || EventLoop.monotonicMillis() >= nextSweep {
                apps.formUnion(feeds.keys)
                releaseExpiredReservations()
                sweep = true
                nextSweep = EventLoop.monotonicMillis() + 1000
            }
            retry = []
            for event in batch.ephemeral { deliverEphemeral(event, to: feeds[event.appID]) }
            do {
                let connection = try db.get()
                for appID in apps.union(batch.local.keys) where feeds[appID] != nil {
                    let local = (batch.local[appID] ?? []).map { LiveEvent($0, appID: appID) }
                    if try pump(&feeds[appID]!, appID: appID, local: local, readLog: apps.contains(appID), audience: &audience, db: connection) {
                        retry.insert(appID)
                    }
                }
                if sweep {
                    try closeLapsed(&feeds, on: connection)
                    sweep = false
                }
                if !greeted {
                    try connection.notify(channel: Self.channel, payload: "\(nodeID) \(Self.hello)")
                    greeted = true
                }
                if batch.peerAppeared { peersUntil = EventLoop.monotonicMillis() + Self.peerMemoryMillis }
                if EventLoop.monotonicMillis() >= nextNodeBeat {
                    if try beat(on: connection) { peersUntil = EventLoop.monotonicMillis() + Self.peerMemoryMillis }
                    nextNodeBeat = EventLoop.monotonicMillis() + Self.heartbeatIntervalMillis
                }
                if !batch.writtenHere.isEmpty && EventLoop.monotonicMillis() < peersUntil {
                    try notify(batch.writtenHere.sorted(), on: connection)
                }
                outage.succeeded()
            } catch {
                outage.failed(error)
                db.dropIfBroken()
                retry = apps
                Wakeup.sleep(millis: 200)
            }
            if EventLoop.monotonicMillis() >= nextHeartbeat {
                for feed in feeds.values {
                    for (id, subscriber) in feed.subscribers where id % UInt64(heartbeatSlices) == UInt64(heartbeatSlice) {
                        subscriber.stream.write(Self.pingFrame)
                    }
                }
                heartbeatSlice = (heartbeatSlice + 1) % heartbeatSlices
                nextHeartbeat = EventLoop.monotonicMillis() + Int64(heartbeatMillis / heartbeatSlices)
            }
            if !retry.isEmpty { inbox.poke() }
        }
    }

    /// Ends every stream with the drain's retry hint; returns how many, and how many of them made their user online.
    private func endAll(_ feeds: inout [String: Feed]) -> (streams: Int, presence: Int) {
        var ended = (streams: 0, presence: 0)
        for feed in feeds.values {
            for subscriber in feed.subscribers.values {
                subscriber.stream.write(Self.drainFrame)
                subscriber.stream.close()
                ended.streams += 1
                if subscriber.subscription.countsPresence { ended.presence += 1 }
            }
        }
        feeds = [:]
        return ended
    }

    /// Catches subscribers up to the feed head, then reads and delivers the app's new events. Returns true when a
    /// subscriber is still behind (its next pages come in the next pass).
    ///
    /// Each page is observed whole by the audience cache first (its answers for an event do not depend on having seen
    /// only the events before it: membership intervals carry their event ids), then delivered stream by stream: a
    /// stream gets the frames of a page it may see as one write, so a busy room sends each of its thousands of member
    /// streams one chunk and one socket write per page instead of one per event, and the busier the hub the more each
    /// write carries.
    ///
    /// `local`: events this node has just committed (in id order). Those that follow the feed's head are delivered as
    /// they are, without reading the log; the log is read after the head when `readLog` (another writer or node may
    /// have written, a newcomer joined, the sweep) or when `local` does not follow the head (something committed in
    /// between).
    private func pump(
        _ feed: inout Feed, appID: String, local: [LiveEvent], readLog: Bool, audience: inout MemberAudience, db: PostgresConnection
    ) throws -> Bool {
        // The backlogs of new and resumed subscribers, coalesced: the subscribers behind, sorted by cursor once per pass,
        // are walked as a wave. Each read starts at the wave's cursor (or the lowest cursor not reached yet) and serves
        // every subscriber whose cursor lies inside the page it returns; those it moves on form the wave of the next
        // read. So a reconnect storm of streams resuming from nearby places costs one query per page and pass, not one
        // per stream, and no subscriber is looked at twice per page (docs/scaling.md#reconnect-storms). Each subscriber
        // still takes at most `catchUpPages` pages per pass, so one large backlog stalls no one.
        let waiting = feed.catchingUp.compactMap { id -> (id: UInt64, subscriber: Subscriber)? in
            guard let subscriber = feed.subscribers[id], subscriber.cursor < feed.head else { return nil }
            return (id, subscriber)
        }.sorted { $0.subscriber.cursor < $1.subscriber.cursor }
        var reached = 0
        var wave: [(id: UInt64, subscriber: Subscriber, pages: Int)] = []
        while let from = wave.first?.subscriber.cursor ?? (reached < waiting.count ? waiting[reached].subscriber.cursor : nil) {
            let page = try EventLog.readLive(appID: appID, after: from, upTo: feed.head, limit: Self.pageSize, on: db)
            replayQueries.add(1, ordering: .relaxed)
            // A short page read everything up to the head; a full one up to its last event.
            let complete = page.count < Self.pageSize
            let end = complete ? feed.head : page[page.count - 1].id
            while reached < waiting.count, waiting[reached].subscriber.cursor < end {
                wave.append((waiting[reached].id, waiting[reached].subscriber, 0))
                reached += 1
            }
            let members = try observe(page, appID: appID, audience: &audience, db: db)
            var userFrames = UserFrames(page)
            let reach = StreamDelivery.Reach(page)
            var moved: [(id: UInt64, subscriber: Subscriber, pages: Int)] = []
            for (id, subscriber, pages) in wave where feed.subscribers[id] != nil {
                deliver(page, members, reach, &userFrames, to: id, subscriber, in: &feed)
                guard feed.subscribers[id] != nil else { continue }
                if complete { subscriber.cursor = feed.head }
                // Every subscriber of the wave was at `from`: those still behind are now at `end`, together.
                if subscriber.cursor < feed.head && pages + 1 < Self.catchUpPages { moved.append((id, subscriber, pages + 1)) }
            }
            wave = moved
        }
        // Those at the head now follow it with everyone else (``deliverToAll``); closed ones are forgotten.
        let head = feed.head
        let subscribers = feed.subscribers
        feed.catchingUp = feed.catchingUp.filter { id in subscribers[id].map { $0.cursor < head } ?? false }
        let behind = !feed.catchingUp.isEmpty
        // The run of local events that follows the head without a gap: anything after a gap comes from the log.
        let (run, gapFollows) = StreamDelivery.localRun(local, after: feed.head)
        for start in stride(from: 0, to: run.count, by: Self.pageSize) {
            try deliverToAll(Array(run[start..<min(start + Self.pageSize, run.count)]), appID: appID, in: &feed, audience: &audience, db: db)
        }
        let mustRead = readLog || gapFollows
        guard mustRead else { return behind }
        while true {
            let page = try EventLog.readLive(appID: appID, after: feed.head, upTo: nil, limit: Self.pageSize, on: db)
            try deliverToAll(page, appID: appID, in: &feed, audience: &audience, db: db)
            if page.count < Self.pageSize { return behind }
        }
    }

    /// Delivers a page of new events (after the feed's head) to every subscriber and moves the head past it.
    private func deliverToAll(_ page: [LiveEvent], appID: String, in feed: inout Feed, audience: inout MemberAudience, db: PostgresConnection)
        throws
    {
        // The sweep reads every feed each second and mostly finds nothing: no pass over its streams then (at 19,000
        // idle streams the empty passes were most of a node's idle CPU; docs/scaling.md#idle-streams-at-scale).
        guard !page.isEmpty else { return }
        let members = try observe(page, appID: appID, audience: &audience, db: db)
        // One set of user-view frames for the page, shared by every subscriber.
        var userFrames = UserFrames(page)
        // A copy of the table: delivering may close (remove) subscribers. A subscriber still catching up (its cursor
        // below the head) gets these events from the log with its backlog, in order, on a later pass.
        let head = feed.head
        let reach = StreamDelivery.Reach(page)
        for (id, subscriber) in feed.subscribers where subscriber.cursor >= head {
            deliver(page, members, reach, &userFrames, to: id, subscriber, in: &feed)
        }
        if let last = page.last { feed.head = last.id }
    }

    /// Shows a page to the audience cache, then resolves the members of each event written to members once (every
    /// subscriber asks about the same event).
    private func observe(_ page: [LiveEvent], appID: String, audience: inout MemberAudience, db: PostgresConnection) throws
        -> [MemberAudience.Members?]
    {
        for event in page { audience.observe(event, appID: appID) }
        return try page.map { try audience.members(of: $0, appID: appID, on: db) }
    }

    /// Hands one subscriber, as one write, the events of `page` past its cursor that it may see (`members`: each
    /// event's members, from ``observe(_:appID:audience:db:)``): an app stream the app view frames, a user stream its
    /// user's view (docs/events.md#two-views-of-the-same-event) from `userFrames`; applies the closing rules (the
    /// frames before a closing event, and that event's own, are written before the stream closes).
    private func deliver(
        _ page: [LiveEvent], _ members: [MemberAudience.Members?], _ reach: StreamDelivery.Reach, _ userFrames: inout UserFrames,
        to id: UInt64, _ subscriber: Subscriber, in feed: inout Feed
    ) {
        guard let last = page.last else { return }
        // A stream the page cannot touch would only move its cursor: no pass (``StreamDelivery/Reach``).
        guard reach.mayTouch(subscriber.subscription) else {
            subscriber.cursor = max(subscriber.cursor, last.id)
            return
        }
        let pass = StreamDelivery.pass(page, after: subscriber.cursor, to: subscriber.subscription, userFrames: &userFrames) { index, userID in
            members[index]?.contains(userID) ?? false
        }
        subscriber.cursor = pass.cursor
        // Most streams of an app see none of a page's events (another user's message): no write, no lock taken.
        if !pass.frames.isEmpty { subscriber.stream.write(pass.frames) }
        guard pass.closes else { return }
        subscriber.presence?.endedByLogout()
        subscriber.stream.close()
        feed.subscribers[id] = nil
    }

    /// Writes an ephemeral event (``EphemeralEvents``) to the open user streams of its users that select its type. It
    /// has no id and moves no cursor: it may go out between two pages of a stream's backlog.
    private func deliverEphemeral(_ event: EphemeralEvents.Received, to feed: Feed?) {
        guard let feed else { return }
        for subscriber in feed.subscribers.values {
            guard let userID = subscriber.subscription.userID, event.userIDs.contains(userID),
                subscriber.subscription.filter.types.matches(event.type)
            else { continue }
            subscriber.stream.write(event.frame)
        }
    }

    /// Closes the streams whose credential lapsed (docs/events.md#live-streams-server-sent-events): the user token
    /// expired, the app key was revoked, or the app was deleted. Clients reconnect with `Last-Event-ID` and a valid
    /// credential.
    private func closeLapsed(_ feeds: inout [String: Feed], on db: PostgresConnection) throws {
        guard let clock = services.withLock({ $0?.clock }) else { return }
        let now = clock.now()
        for appID in Array(feeds.keys) {
            let keyIDs = Set(feeds[appID]!.subscribers.values.compactMap(\.subscription.appKeyID))
            let row = try db.query(
                """
                SELECT EXISTS (SELECT 1 FROM apps WHERE app_id = \(appID)),
                       ARRAY(SELECT key_id FROM app_keys WHERE app_id = \(appID) AND key_id = ANY(\(Array(keyIDs))::text[]) AND revoked_at IS NULL)
                """
            ).decodeFirst((Bool, [String]).self)
            let appExists = row?.0 ?? false
            let activeKeys = Set(row?.1 ?? [])
            for (id, subscriber) in feeds[appID]!.subscribers {
                let subscription = subscriber.subscription
                let lapsed =
                    !appExists || (subscription.expiresAt.map { $0 <= now } ?? false)
                    || (subscription.appKeyID.map { !activeKeys.contains($0) } ?? false)
                if lapsed {
                    subscriber.stream.close()
                    feeds[appID]!.subscribers[id] = nil
                }
            }
        }
    }

    /// How long after the last sign of another node this one keeps notifying: past two of its heartbeats.
    static let peerMemoryMillis: Int64 = 3 * heartbeatIntervalMillis

    /// Tells the other nodes that `apps` have new events: one statement for all of them.
    private func notify(_ apps: [String], on db: PostgresConnection) throws {
        let payloads = apps.map { "\(nodeID) \($0)" }
        try db.query("SELECT pg_notify(\(Self.channel), p) FROM unnest(\(payloads)::text[]) AS p", prepared: false)
    }

    /// Refreshes this node's heartbeat and settles the presence of nodes that stopped beating; true when another node
    /// beats.
    private func beat(on db: PostgresConnection) throws -> Bool {
        try StreamPresence.heartbeat(nodeID: nodeID, on: db)
        let peers = try StreamPresence.otherLiveNodes(than: nodeID, on: db)
        guard let services = services.withLock({ $0 }) else { return peers > 0 }
        for dead in try StreamPresence.deadNodes(on: db) {
            logger.info("msg=\"a node stopped beating; closing its streams for presence\" node=\(dead)")
            services.pool.submit({ try? StreamPresence.nodeGone(dead, services: services) }, rejected: {})
        }
        return peers > 0
    }

    private func releaseExpiredReservations() {
        let now = EventLoop.monotonicMillis()
        inbox.withState { inbox in
            for (id, reservation) in inbox.unconfirmed where reservation.deadline < now {
                inbox.unconfirmed[id] = nil
                inbox.release(reservation.key)
            }
        }
    }
}
