import ParleySync

/// This node's 4xx and 5xx answers per app and minute, not yet added to `stats_minutes` (docs/operations.md#activity-series).
///
/// Only a node knows the answers it gave, so each node counts its own in memory and the stats sampler's timer, which
/// runs on every node, adds them to the database with an upsert that adds (``take()``, then ``giveBack(_:)`` when that
/// write failed). Counted for every answer the request pipeline gave in an identified app (a credential of the app, or
/// the admin key with `Parley-App-Id`); answers before an app is known (a bad credential, an unknown route) are not.
///
/// Owner: `counts` behind its lock; recorded from the event loops and workers, taken by the sampler.
package final class AppErrorTally: Sendable {
    /// One counter: the app, the start of the minute (server-clock ms) and the metric (`http_4xx` or `http_5xx`).
    package struct Key: Hashable, Sendable {
        package let appID: String
        package let minute: Int64
        package let metric: String
    }

    /// At most this many counters are kept while the database does not take them (the oldest minutes go first).
    static let maxKeys = 100_000

    private let counts = LockedValue<[Key: Int64]>([:])

    package init() {}

    /// Counts one answer with `status` in `appID` at `now` (server-clock ms); statuses below 400 are not counted.
    package func record(appID: String, status: Int, now: Int64) {
        guard status >= 400 else { return }
        let key = Key(appID: appID, minute: now - now % 60_000, metric: status >= 500 ? "http_5xx" : "http_4xx")
        counts.withLock { $0[key, default: 0] += 1 }
    }

    /// Takes every counter (they start again from zero).
    package func take() -> [Key: Int64] {
        counts.withLock { counts in
            defer { counts = [:] }
            return counts
        }
    }

    /// Puts back counters that were taken but could not be written, added to those counted since.
    package func giveBack(_ taken: [Key: Int64]) {
        counts.withLock { counts in
            counts.merge(taken, uniquingKeysWith: +)
            if counts.count > Self.maxKeys {
                let keep = counts.keys.sorted { $0.minute > $1.minute }.prefix(Self.maxKeys)
                counts = Dictionary(uniqueKeysWithValues: keep.map { ($0, counts[$0]!) })
            }
        }
    }
}
