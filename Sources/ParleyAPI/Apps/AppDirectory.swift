import ParleyCore
import ParleyHTTP
import ParleyPostgres
import ParleySync
import Synchronization

/// An app as the request pipeline needs it: settings and the user-token secret.
public struct AppRecord: Sendable {
    public let appID: String
    public let name: String
    public let settings: AppSettings
    package let tokenSecret: [UInt8]
    public let createdAt: Int64
    public let updatedAt: Int64
    /// The enabled endpoint serving each before-event hook type (docs/webhooks.md#before-event-hooks), so a request
    /// learns whether to call a hook without a query (a change on another node is seen within the cache's TTL).
    package let beforeHooks: [String: HookEndpoint]
}

/// Per-node cache of apps and app keys, so authenticating a request costs no query most of the time.
///
/// Entries live `ttl` (2 s): a change made on this node invalidates at once, a change made on another node is
/// seen within the TTL. Owner: `state` behind its `LockedValue`; no I/O under the lock.
public final class AppDirectory: Sendable {
    struct KeyEntry {
        let appID: String
        let keyID: String
        let fetchedAt: Int64
        var lastUsedWrittenAt: Int64
    }

    struct AppEntry {
        let record: AppRecord?
        let fetchedAt: Int64
    }

    private struct State {
        /// By the SHA-256 of the key (what the database stores) …
        var keys: [String: KeyEntry] = [:]
        /// … and by the presented bearer value itself, so a repeat caller costs one dictionary lookup instead of
        /// parsing and hashing its key (entries expire with the TTL like the others; kept only in memory).
        var presented: [String: String] = [:]
        var apps: [String: AppEntry] = [:]
    }

    private let state = LockedValue(State())
    private let ttlMillis: Int64 = 2000
    /// How often `last_used_at` of a key is written (not on every request).
    private let lastUsedEveryMillis: Int64 = 60_000

    public init() {}

    /// The app, from cache or database; nil if it does not exist. Without a connection, ``NeedsConnection`` when the
    /// cache has no fresh entry.
    package func app(_ appID: String, db: PostgresConnection?) throws -> AppRecord? {
        let now = EventLoop.monotonicMillis()
        if let entry = state.withLock({ $0.apps[appID] }), now - entry.fetchedAt < ttlMillis { return entry.record }
        guard let db else { throw NeedsConnection() }
        let record = try AppStore.fetchRecord(appID: appID, on: db)
        state.withLock { $0.apps[appID] = AppEntry(record: record, fetchedAt: now) }
        return record
    }

    /// The (app, key id) of an active app key, or nil when unknown or revoked. Without a connection,
    /// ``NeedsConnection`` when the cache has no fresh entry or the key's `last_used_at` is due.
    func key(hash: String, now serverNow: Int64, db: PostgresConnection?) throws -> (appID: String, keyID: String)? {
        let now = EventLoop.monotonicMillis()
        if var entry = state.withLock({ $0.keys[hash] }), now - entry.fetchedAt < ttlMillis {
            if now - entry.lastUsedWrittenAt >= lastUsedEveryMillis {
                guard let db else { throw NeedsConnection() }
                entry.lastUsedWrittenAt = now
                let updated = entry
                state.withLock { $0.keys[hash] = updated }
                try AppStore.touchKey(appID: entry.appID, keyID: entry.keyID, at: serverNow, on: db)
            }
            return (entry.appID, entry.keyID)
        }
        guard let db else { throw NeedsConnection() }
        guard let found = try AppStore.activeKey(hash: hash, on: db) else {
            state.withLock { $0.keys[hash] = nil }
            return nil
        }
        try AppStore.touchKey(appID: found.appID, keyID: found.keyID, at: serverNow, on: db)
        state.withLock { $0.keys[hash] = KeyEntry(appID: found.appID, keyID: found.keyID, fetchedAt: now, lastUsedWrittenAt: now) }
        return found
    }

    /// The key-hash a bearer value was verified under recently, if any (skips parsing and hashing it again).
    func knownHash(ofPresented token: String) -> String? {
        state.withLock { $0.presented[token] }
    }

    /// Remembers that `token` hashes to `hash` (after a successful lookup).
    func remember(presented token: String, hash: String) {
        state.withLock { s in
            if s.presented.count > 10_000 { s.presented.removeAll() }
            s.presented[token] = hash
        }
    }

    /// Forgets an app and its keys (after an update, a revoke or a delete on this node).
    package func invalidate(appID: String) {
        state.withLock { s in
            s.apps[appID] = nil
            s.keys = s.keys.filter { $0.value.appID != appID }
            s.presented.removeAll()
        }
    }
}

/// Thrown by code on the event-loop path of a route that needs the database after all (a cache entry to refresh, a
/// lookup the request asks for; the app directory is the first such reader): nothing has been done yet, and the
/// request starts again on a worker.
package struct NeedsConnection: Error {
    package init() {}
}
