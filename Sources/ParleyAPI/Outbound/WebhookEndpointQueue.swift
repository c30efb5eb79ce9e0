import ParleyCore

/// An event taken from the log (or handed over in memory) for an endpoint's deliveries: what its request and its
/// delivery row need.
struct TakenEvent: Sendable, Equatable {
    let id: Int64
    let type: String
    let orderKey: String
    /// Server-clock ms: the event's `created_at`, and its delivery's.
    let createdAt: Int64
    /// The request body: the Event JSON in the app view, identical on every attempt.
    let body: [UInt8]

    /// The Event JSON of an event the node has just committed, byte for byte what the log renders for it
    /// (``WebhookCursors/read(appID:after:patterns:limit:on:)``): `{"id":"…","type":…,"app_id":…,"created_at":…,"data":…}`.
    static func body(id: Int64, type: String, appID: String, createdAt: Int64, data: [UInt8]) -> [UInt8] {
        var w = JSONWriter()
        w.beginObject()
        w.key("id")
        w.writeString(String(id))
        w.key("type")
        w.writeString(type)
        w.key("app_id")
        w.writeString(appID)
        w.key("created_at")
        w.writeInt(createdAt)
        w.key("data")
        w.writeRaw(data)
        w.endObject()
        return w.bytes
    }
}

/// One held endpoint's deliveries between the event log and the delivery table (docs/webhooks.md): which taken events
/// to attempt from memory now, which to write as `pending` rows, and how far the endpoint's cursor may move.
///
/// The ordering rule holds across both paths: an event is attempted from memory only while its key has no open
/// (`pending` or `failed`) row and no attempt in flight; otherwise it waits in memory behind the attempt in flight,
/// or is written as a `pending` row behind the open ones, which the table path attempts in event order.
///
/// A value owned by the dispatcher thread; no I/O.
struct WebhookEndpointQueue {
    /// What an attempt of this endpoint needs, as last read from its row.
    struct Config: Sendable, Equatable {
        var url: String
        var eventTypes: [String]
        var secret: String
        var previousSecret: String?
        var previousSecretUntil: Int64?

        /// The secrets that sign an attempt at `now` (server clock), new first (during a rotation).
        func secrets(at now: Int64) -> [String] {
            if let previousSecret, let until = previousSecretUntil, now < until { return [secret, previousSecret] }
            return [secret]
        }
    }

    let appID: String
    let webhookID: String
    var config: Config
    /// Durable: every selected event ≤ `cursor` has its delivery row.
    private(set) var cursor: Int64
    /// The newest event id taken in (≥ `cursor`): the next log read starts after it.
    private(set) var taken: Int64
    /// Open rows per ordering key, as the table holds them (kept up to date by this thread, refreshed from the table).
    var openKeys: [String: Int] = [:]
    /// Events waiting in memory for their key's attempt in flight, per key, in id order.
    private var waiting: [String: [TakenEvent]] = [:]
    private var waitingOrder: [String] = []
    private(set) var waitingCount = 0
    /// Keys with an attempt from memory in flight.
    private(set) var inFlightKeys: Set<String> = []
    /// Ids taken and not written yet (waiting, in flight, or finished and not recorded), ascending.
    private var unwritten: [Int64] = []
    private var unwrittenHead = 0
    private var written: Set<Int64> = []
    /// At most this many events wait in memory; later ones are written as `pending` rows.
    let maxWaiting: Int

    init(appID: String, webhookID: String, config: Config, cursor: Int64, maxWaiting: Int = 4096) {
        self.appID = appID
        self.webhookID = webhookID
        self.config = config
        self.cursor = cursor
        self.taken = cursor
        self.maxWaiting = maxWaiting
    }

    var endpoint: String { appID + "\u{0}" + webhookID }

    /// Nothing taken is left unwritten and nothing is in flight.
    var isSettled: Bool { unwrittenHead == unwritten.count && inFlightKeys.isEmpty }

    /// Takes `events` (ascending ids; those ≤ `taken` are skipped): the endpoint's selected ones wait for an attempt,
    /// or are returned to be written as `pending` rows (their key has open rows, or too many wait).
    mutating func take(_ events: some Sequence<TakenEvent>) -> [TakenEvent] {
        var rows: [TakenEvent] = []
        for event in events where event.id > taken {
            taken = event.id
            guard WebhookEventTypes.selects(config.eventTypes, event.type) else { continue }
            unwritten.append(event.id)
            if openKeys[event.orderKey, default: 0] > 0 || waitingCount >= maxWaiting {
                openKeys[event.orderKey, default: 0] += 1
                rows.append(event)
            } else {
                if waiting[event.orderKey] == nil { waitingOrder.append(event.orderKey) }
                waiting[event.orderKey, default: []].append(event)
                waitingCount += 1
            }
        }
        return rows
    }

    /// Moves `taken` to `id` when no event after it can be missing (a log read came back short of its limit).
    mutating func caughtUp(through id: Int64) { taken = max(taken, id) }

    /// The attempts to start now, in at most `slots` chunks of about `perChunk` events: every waiting key whose attempt
    /// is not in flight, each key's events in one chunk in id order (a chunk is sent one request after another on one
    /// thread: a few per chunk cost a few ms of latency and save a thread hand-off each).
    mutating func nextChunks(slots: Int, perChunk: Int = 8, maxPerChunk: Int) -> [[TakenEvent]] {
        guard slots > 0, !waitingOrder.isEmpty else { return [] }
        let ready = waitingOrder.filter { !inFlightKeys.contains($0) && openKeys[$0, default: 0] == 0 }
        if ready.isEmpty { return [] }
        let events = ready.reduce(0) { $0 + (waiting[$1]?.count ?? 0) }
        var chunks: [[TakenEvent]] = Array(repeating: [], count: min(slots, ready.count, max(1, (events + perChunk - 1) / perChunk)))
        var next = 0
        var started: Set<String> = []
        for key in ready {
            // Fill the chunks round robin; a key whose events would overflow a full chunk waits for the next round.
            var tries = 0
            while chunks[next].count >= maxPerChunk && tries < chunks.count {
                next = (next + 1) % chunks.count
                tries += 1
            }
            if chunks[next].count >= maxPerChunk { break }
            let events = waiting.removeValue(forKey: key) ?? []
            waitingCount -= events.count
            chunks[next] += events
            started.insert(key)
            inFlightKeys.insert(key)
            next = (next + 1) % chunks.count
        }
        waitingOrder.removeAll { started.contains($0) }
        return chunks.filter { !$0.isEmpty }
    }

    /// A chunk came back: `failedKeys` are the keys whose attempt failed (their row is written `failed`, so the key
    /// is open), `unattempted` the events behind a failure in the chunk. Returns the events to write as `pending`
    /// rows: the unattempted ones and those of failed keys that waited meanwhile.
    mutating func finished(keys: Set<String>, failedKeys: Set<String>, unattempted: [TakenEvent]) -> [TakenEvent] {
        inFlightKeys.subtract(keys)
        var rows = unattempted
        for key in failedKeys {
            openKeys[key, default: 0] += 1
            if let behind = waiting.removeValue(forKey: key) {
                waitingCount -= behind.count
                waitingOrder.removeAll { $0 == key }
                openKeys[key, default: 0] += behind.count
                rows += behind
            }
        }
        for event in unattempted { openKeys[event.orderKey, default: 0] += 1 }
        return rows.sorted { $0.id < $1.id }
    }

    /// Every waiting event, to be written as `pending` rows (the endpoint was disabled or is let go).
    mutating func takeAllWaiting() -> [TakenEvent] {
        let rows = waiting.values.joined().sorted { $0.id < $1.id }
        for event in rows { openKeys[event.orderKey, default: 0] += 1 }
        waiting = [:]
        waitingOrder = []
        waitingCount = 0
        return rows
    }

    /// An open row of `key` (leased from the table) reached `succeeded` or `dead`.
    mutating func rowClosed(key: String) {
        guard let count = openKeys[key] else { return }
        openKeys[key] = count > 1 ? count - 1 : nil
    }

    /// Where the cursor would be once `ids` have their rows (written in the transaction about to commit).
    func cursor(afterWriting ids: Set<Int64>) -> Int64 {
        var index = unwrittenHead
        while index < unwritten.count, written.contains(unwritten[index]) || ids.contains(unwritten[index]) { index += 1 }
        return index < unwritten.count ? unwritten[index] - 1 : taken
    }

    /// `ids` have their rows (the transaction that wrote them committed): the cursor moves up to the first id still
    /// unwritten, or to `taken`. Returns the new cursor.
    @discardableResult
    mutating func wrote(_ ids: some Sequence<Int64>) -> Int64 {
        written.formUnion(ids)
        while unwrittenHead < unwritten.count, written.remove(unwritten[unwrittenHead]) != nil { unwrittenHead += 1 }
        if unwrittenHead > 1024, unwrittenHead * 2 > unwritten.count {
            unwritten.removeFirst(unwrittenHead)
            unwrittenHead = 0
        }
        cursor = unwrittenHead < unwritten.count ? unwritten[unwrittenHead] - 1 : taken
        return cursor
    }
}
