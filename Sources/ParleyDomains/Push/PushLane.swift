import ParleyAPI
import ParleyCore

/// Where the bridge stands in one app's event log: every event before `eventID` is planned, and so is event
/// `eventID` itself up to recipient `userAfter` (nil: all of it). The `push_cursors` row holds the durable one.
struct PushPosition: Sendable, Equatable {
    var eventID: Int64
    var userAfter: String?
}

/// One event the bridge may plan: from this node's writer (in memory) or read from the log.
struct PushLogEvent: Sendable {
    let id: Int64
    let type: String
    let data: [UInt8]
    /// Read from the log (not handed over right after its commit): its message is checked against the table before
    /// it is pushed, since it may have been revoked or deleted meanwhile.
    let fromLog: Bool
}

/// One app's planning on this node, while this node owns it (a session advisory lock on the bridge's connection):
/// the events this node's writer hands over in memory follow one another without a read, and the log is read only
/// for what lies between them (another writer's events, another node's) and what nobody handed over.
///
/// Events are planned in id order; what is planned is sent at once and recorded when its tries end, in any order, but
/// the durable cursor only moves over the planned steps whose every attempt is recorded, so a crash re-plans (and may
/// push twice) only what was not recorded.
///
/// Owner: the bridge thread (a value in its loop's state).
struct PushLane {
    let appID: String
    /// Everything up to here is planned.
    var planned: PushPosition
    /// What `push_cursors` holds.
    var durable: PushPosition
    /// Every event up to this id is planned or in `ready`.
    var known: Int64
    /// Events after `planned` (its own event first while `planned.userAfter` is set), in id order, not planned yet.
    var ready: [PushLogEvent] = []
    /// Batches handed over in memory that do not follow `known` yet, by their first id.
    var held: [[PushLogEvent]] = []
    /// The log may hold events after `known` that nobody handed over (another writer, another node).
    var wantsLog = false
    /// When the first batch after a gap was held (monotonic ms): the gap is read from the log once it outlives a
    /// hand-off in flight.
    var gapSince: Int64?
    /// The head the last poll saw for this app, while `known` was below it.
    var polledHead: Int64?
    /// Planned steps, oldest first: where each one ends and how many of its attempts are not recorded yet.
    var steps: [(id: Int, end: PushPosition, open: Int)] = []
    var nextStep = 0
    /// Monotonic ms of the last event taken or attempt finished (idle lanes are let go).
    var lastActive: Int64

    init(appID: String, cursor: PushPosition, now: Int64) {
        self.appID = appID
        planned = cursor
        durable = cursor
        known = cursor.eventID
        lastActive = now
        // Part of the cursor's event is left to plan: it is read again from the log.
        if cursor.userAfter != nil {
            known = cursor.eventID - 1
            wantsLog = true
        }
    }

    /// In-memory events stay bounded: past this many (a gateway slower than the sends), they are dropped and read
    /// from the log once the lane has caught up.
    static let maxBuffered = 4096

    var buffered: Int { ready.count + held.reduce(0) { $0 + $1.count } }

    /// Takes a batch handed over in memory (ids increasing): what follows `known` joins `ready`, the rest waits in
    /// `held` for the events between.
    mutating func receive(_ events: [PushLogEvent], now: Int64) {
        let fresh = events.filter { $0.id > known }
        guard let first = fresh.first else { return }
        lastActive = now
        if buffered + fresh.count > Self.maxBuffered {
            held = []
            wantsLog = true
            return
        }
        let index = held.firstIndex { $0[0].id > first.id } ?? held.endIndex
        held.insert(fresh, at: index)
        joinHeld()
    }

    /// Moves the held batches that now follow `known` into `ready`.
    private mutating func joinHeld() {
        while let batch = held.first {
            let rest = batch.filter { $0.id > known }
            if rest.isEmpty {
                held.removeFirst()
                continue
            }
            guard rest[0].id == known + 1 else { break }
            held.removeFirst()
            ready += rest
            known = rest.last!.id
        }
        if held.isEmpty { gapSince = nil }
    }

    /// The range the log is to be read for now, (`known`, `upTo`] with `upTo` nil for "up to the head", or nil when
    /// nothing is to be read: a gap held longer than `gapMillis`, or `wantsLog`.
    func logRange(now: Int64, gapMillis: Int64) -> (after: Int64, upTo: Int64?)? {
        if let next = held.first?.first?.id {
            guard wantsLog || now - (gapSince ?? now) >= gapMillis else { return nil }
            return (known, next - 1)
        }
        return wantsLog ? (known, nil) : nil
    }

    /// A gap appeared (or stays): remember since when.
    mutating func noteGap(now: Int64) {
        if !held.isEmpty && gapSince == nil { gapSince = now }
    }

    /// Takes what the log holds in (`known`, `through`] (its pushable events, in order).
    mutating func take(log events: [PushLogEvent], through: Int64, reachedHead: Bool) {
        ready += events.filter { $0.id > known }
        known = max(known, through)
        if reachedHead { wantsLog = false }
        polledHead = nil
        joinHeld()
    }

    /// A planning step that took the lane to `planned` and dispatched `open` attempts; returns its id.
    mutating func stepPlanned(open: Int) -> Int {
        nextStep += 1
        steps.append((nextStep, planned, open))
        return nextStep
    }

    /// One attempt of step `id` is recorded (or about to be, in the same transaction as the cursor).
    mutating func finished(step id: Int, now: Int64) {
        lastActive = now
        if let i = steps.firstIndex(where: { $0.id == id }) { steps[i].open -= 1 }
    }

    /// The cursor to write with this round's records: the end of the steps whose attempts are all recorded (or
    /// recorded by then), oldest first; nil when it does not move.
    mutating func cursorToWrite() -> PushPosition? {
        while let step = steps.first, step.open <= 0 {
            unwritten = step.end
            steps.removeFirst()
        }
        return unwritten
    }

    /// The cursor of the completed steps, until a record writes it.
    var unwritten: PushPosition?

    /// The round's record committed `cursor`.
    mutating func wrote(_ cursor: PushPosition) {
        durable = cursor
        if unwritten == cursor { unwritten = nil }
    }

    /// Nothing to plan, send or record, and the cursor is where the lane is.
    var isSettled: Bool { ready.isEmpty && held.isEmpty && !wantsLog && steps.isEmpty && durable == planned }

    /// Has work to do in a round (ready events, or a log read that may come due).
    var hasWork: Bool { !ready.isEmpty || !held.isEmpty || wantsLog }
}
