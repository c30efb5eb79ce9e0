import ParleyCore
import ParleyHTTP
import ParleyPostgres
import ParleySync
import Synchronization

/// One kind of scheduled work: everything of that kind whose due time on the server clock has passed
/// (application expiries, custom status expiries, mutes, call timeouts …).
package struct TimerKind: Sendable {
    package let name: String
    /// In the background sweep the kind runs at most once per `everyMillis` of real time (0: every sweep, four times
    /// a second, for timers that must fire within a second of due, such as call timeouts); a test-clock advance runs
    /// every kind.
    var everyMillis: Int64 = 1000
    /// Fires every item due at `now` in every app and returns how many fired. Runs on a pool worker.
    ///
    /// It may run concurrently with itself (the background sweep and a test-clock advance, or several nodes),
    /// so it must claim items atomically: a conditional `UPDATE … WHERE <still due> RETURNING` or
    /// `FOR UPDATE SKIP LOCKED`, with the events appended in the same transaction.
    let fire: @Sendable (_ services: Services, _ now: Int64) throws -> Int

    package init(
        name: String, everyMillis: Int64 = 1000, fire: @escaping @Sendable (_ services: Services, _ now: Int64) throws -> Int
    ) {
        self.name = name
        self.everyMillis = everyMillis
        self.fire = fire
    }
}

/// Fires due timers: about once a second in the background, and synchronously when the test clock moves
/// (docs/operations.md#test-clock: "every timer that became due fires before the answer").
///
/// Reads never depend on a timer having fired: domain code treats an item whose due time has passed as
/// expired, so the background sweep only has to make the state (and its event) durable soon after.
///
/// Owner: `sweepQueued` is the one flag keeping at most one background sweep queued on the pool; `ticks` holds the
/// ticking thread (it carries no work: its wait is the interval, and a stop ends it at once). The kinds are fixed at
/// construction.
package final class Timers: Sendable {
    let kinds: [TimerKind]
    private let sweepQueued = Atomic<Bool>(false)
    /// When each throttled kind last ran in the background sweep (monotonic ms, by kind name).
    private let lastRun = LockedValue<[String: Int64]>([:])
    private let ticks = WorkerInbox<Void>()

    /// `kinds`: every timer kind of the server (the app layer lists them: App/TimerKinds.swift).
    init(kinds: [TimerKind]) { self.kinds = kinds }

    /// Fires every kind at `now` (with `throttled`, only the kinds whose interval has passed). A kind that throws is logged and the others still run; returns the number
    /// of items fired.
    @discardableResult
    package func fireDue(services: Services, now: Int64, throttled: Bool = false) -> Int {
        var fired = 0
        let monotonic = EventLoop.monotonicMillis()
        for kind in kinds {
            if throttled && kind.everyMillis > 0 {
                let due = lastRun.withLock { last -> Bool in
                    guard monotonic - last[kind.name, default: .min / 2] >= kind.everyMillis else { return false }
                    last[kind.name] = monotonic
                    return true
                }
                if !due { continue }
            }
            do {
                fired += try kind.fire(services, now)
            } catch let error as PostgresError where error.isConnectionFailure {
                // The database is down or stalled: the other kinds would fail the same way; the next sweep retries.
                services.logger.warning("msg=\"timers skipped: database unavailable\" timer=\(kind.name) error=\"\(error)\"")
                break
            } catch {
                services.logger.error("msg=\"timer failed\" timer=\(kind.name) error=\"\(error)\"")
            }
        }
        // Timers append events in any app: have every app with pending events sequenced.
        if fired > 0 { services.sequencer.pokeAll() }
        return fired
    }

    /// Starts the background sweep (every `intervalMillis` of real time; each kind then runs by its `everyMillis`).
    package func start(services: Services, intervalMillis: Int = 250) {
        guard !kinds.isEmpty else { return }
        ticks.start(name: "parley-timers") { [self] _ in
            // Nothing is ever posted: each take waits the whole interval, and returns nil once stopped.
            while ticks.take(waitMillis: intervalMillis, { _ in }) != nil {
                // Skip a tick while the database is not answering (the serving connections' circuit is open): a sweep
                // would fail at once, and one refused inside its transaction costs its connection a reconnect, which
                // then becomes the circuit's probe when the database wakes and holds every request back meanwhile.
                if services.pool.configuration.circuit?.isOpen == true { continue }
                // Skip a tick while the previous sweep is still queued or running.
                guard !sweepQueued.exchange(true, ordering: .acquiringAndReleasing) else { continue }
                services.pool.submit(
                    { [self] in
                        fireDue(services: services, now: services.clock.now(), throttled: true)
                        sweepQueued.store(false, ordering: .releasing)
                    },
                    rejected: { [self] in sweepQueued.store(false, ordering: .releasing) })
            }
        }
    }

    /// Stops the background sweep and waits for its thread (a queued sweep still runs or is rejected).
    package func stop() {
        ticks.stop()
    }
}

extension TimerKind {
    /// A kind that expires due items in batches of `batchSize`, one transaction each: `claim` atomically marks up to
    /// `limit` items due at `now` in any app (reading whatever their events need) and returns how many it claimed
    /// and their events by app, each app's in order. The events are appended last, apps in a stable order, so
    /// concurrent sweeps take the apps' event-head locks in the same order.
    package static func batchedExpiry(
        name: String, batchSize: Int = 500,
        claim:
            @escaping @Sendable (_ db: PostgresConnection, _ now: Int64, _ limit: Int) throws -> (
                count: Int, events: [String: [NewEvent]]
            )
    ) -> TimerKind {
        TimerKind(name: name) { services, now in
            var fired = 0
            while true {
                let count = try services.pool.transaction { db in
                    let claimed = try claim(db, now, batchSize)
                    for appID in claimed.events.keys.sorted() {
                        try EventLog.append(claimed.events[appID, default: []], appID: appID, now: now, on: db)
                    }
                    return claimed.count
                }
                fired += count
                if count < batchSize { return fired }
            }
        }
    }
}
