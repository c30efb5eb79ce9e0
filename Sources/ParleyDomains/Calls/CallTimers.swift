import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The call timers on the server clock (docs/calls.md, docs/operations.md#test-clock): invitation timeouts and the 5 s
/// not-received check.
///
/// Owns nothing: each batch locks calls with due users and re-reads them under the lock, so a background sweep, a
/// test-clock advance and other nodes never fire the same timer twice, and a timer whose user answered meanwhile
/// finds nothing to do. It waits for a call another transaction holds instead of skipping it (`SKIP LOCKED` would let
/// a test-clock advance answer before every due timer fired, docs/operations.md#test-clock); requests hold a call for
/// one short transaction, and requests that change a call fire its due timers themselves first.
package enum CallTimers {
    package static let kind = TimerKind(name: "call_timers", everyMillis: 0) { services, now in
        var fired = 0
        var previous: [String] = []
        while true {
            let due = try services.pool.withConnection { db in try CallStore.due(now: now, limit: batchSize, on: db) }
            if due.isEmpty { return fired }
            var claimed = 0
            for (appID, callIDs) in Dictionary(grouping: due, by: \.appID).sorted(by: { $0.key < $1.key }) {
                claimed += try services.pool.transaction { db in
                    let service = CallService(db: db, appID: appID, now: now)
                    var events: [NewEvent] = []
                    var count = 0
                    // In due order (the order `due` returned them).
                    for var call in try CallStore.fetchMany(appID: appID, callIDs: callIDs.map(\.callID), on: db) {
                        let fired = try service.fireDue(&call, on: db)
                        events += fired
                        if !fired.isEmpty { count += 1 }
                    }
                    try EventLog.append(events, appID: appID, now: now, on: db)
                    return count
                }
            }
            fired += claimed
            if due.count < batchSize { return fired }
            // A batch another sweep fired while this one waited for its locks is done; the calls due behind it are
            // not, so go on (a test-clock advance must not answer before them, docs/operations.md#test-clock), even
            // when the other sweep keeps winning batch after batch. The same batch found again with nothing to fire
            // means rows no change needs (none should exist): stop rather than spin.
            let ids = due.map { $0.appID + "/" + $0.callID }
            if claimed == 0 && ids == previous { return fired }
            previous = ids
        }
    }

    /// Calls claimed per transaction.
    static let batchSize = 200
}
