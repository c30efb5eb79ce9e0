import ParleyHTTP
import ParleySync

/// The newest page of each active conversation's history, rendered, per view (docs/scaling.md#history-cache): what a
/// chat client reads every time it opens a conversation, served without a query while nothing that could change it
/// has happened.
///
/// What can change a page is told by the event log: every change a page shows writes an event in the transaction of
/// the change (sends, edits, revokes, deletes, reactions, pins, receipts, membership, clearing, user deletion,
/// retention), and every event of this node reaches the cache before the request that wrote it is answered — the
/// message writer's in memory (``committed(_:)``), the sequencer's with their types and ordering keys
/// (``invalidate(appID:changes:)``). So a client that has its answer never reads the page as it was before its change
/// on this node. An event about one conversation (its ordering key names it: `peer:<a> <b>`, `group:<id>`,
/// `room:<id>`) drops that conversation's pages; an event known to show in no page drops nothing; any other drops
/// every page of its app. Another node's events are known here only as "app X has new events" (its NOTIFY): they
/// drop the app's pages. The few changes written without an event (an import, a job's step, a retention batch) drop
/// their app's pages and notify the other nodes the same way (``CommitObservers/changedWithoutEvents(appID:cache:on:)``).
/// When the listener reconnects, notices may have been missed: everything goes. A page is served at most
/// ``maxAgeMillis`` after it was read, which bounds what a notice never sent could leave behind.
///
/// A read that misses fills the entry with what it read, unless something dropped the conversation while it read
/// (the database may have answered before that change committed): each fill is registered while it runs and is
/// spoiled by any drop that covers it.
///
/// Memory: at most `budgetBytes` of rendered pages (the `PARLEY_HISTORY_CACHE_MB` setting; 0 turns the cache off);
/// past it the least recently served quarter goes.
///
/// Owner: `state` (any thread; short, synchronous bodies).
package final class HistoryCache: CommitObserver {
    /// One page: its app, conversation (as an event's ordering key names it) and view (viewer, reader, options).
    package struct Key: Hashable, Sendable {
        package let appID: String
        package let conversation: String
        package let view: String

        package init(appID: String, conversation: String, view: String) {
            self.appID = appID
            self.conversation = conversation
            self.view = view
        }
    }

    /// What an event does to the cached pages.
    package enum Scope: Equatable, Sendable {
        /// Shows in no page.
        case none
        /// Changes pages of the conversation named (an ordering key).
        case conversation(String)
        /// May change any page of its app.
        case app
    }

    private struct Page {
        var bytes: [UInt8]
        var filledAt: Int64
        var lastServed: UInt64
    }

    private struct Fill {
        let appID: String
        let conversation: String
        var spoiled = false
    }

    private struct State {
        /// app → conversation → view → page.
        var pages: [String: [String: [String: Page]]] = [:]
        var bytes = 0
        var tick: UInt64 = 0
        var fills: [UInt64: Fill] = [:]
        var nextFill: UInt64 = 1
        var hits = 0
        var misses = 0

        mutating func dropApp(_ appID: String) {
            if let conversations = pages.removeValue(forKey: appID) {
                for views in conversations.values { bytes -= views.values.reduce(0) { $0 + $1.bytes.count } }
            }
            for (id, fill) in fills where fill.appID == appID { fills[id]?.spoiled = true }
        }

        mutating func dropConversation(_ appID: String, _ conversation: String) {
            if let views = pages[appID]?.removeValue(forKey: conversation) {
                bytes -= views.values.reduce(0) { $0 + $1.bytes.count }
                if pages[appID]?.isEmpty == true { pages[appID] = nil }
            }
            for (id, fill) in fills where fill.appID == appID && fill.conversation == conversation { fills[id]?.spoiled = true }
        }
    }

    /// How long after its read a page may still be served (ms): the bound on what a notice never sent leaves behind —
    /// a node learns that another has started listening from its hello or, failing that, from the heartbeats (every
    /// 5 s), and notifies it only from then on.
    package static let maxAgeMillis: Int64 = 5_000

    package let budgetBytes: Int
    private let state = LockedValue(State())

    package init(budgetBytes: Int) {
        self.budgetBytes = budgetBytes
    }

    package var isEnabled: Bool { budgetBytes > 0 }

    /// The page of `key` when it is kept and fresh (a hit); nil otherwise, counting nothing: the read that follows
    /// (``page(_:read:)``) counts the miss.
    package func cached(_ key: Key) -> [UInt8]? {
        guard isEnabled else { return nil }
        let now = EventLoop.monotonicMillis()
        return state.withLock { state -> [UInt8]? in
            guard let page = state.pages[key.appID]?[key.conversation]?[key.view], now - page.filledAt < Self.maxAgeMillis else { return nil }
            state.tick += 1
            state.pages[key.appID]?[key.conversation]?[key.view]?.lastServed = state.tick
            state.hits += 1
            return page.bytes
        }
    }

    /// The page of `key`: cached, or `read` (which returns the page and whether it may be kept; it runs outside the
    /// lock) and kept when nothing dropped it meanwhile.
    package func page(_ key: Key, read: () throws -> (bytes: [UInt8], keep: Bool)) rethrows -> [UInt8] {
        guard isEnabled else { return try read().bytes }
        if let page = cached(key) { return page }
        let now = EventLoop.monotonicMillis()
        let fill = state.withLock { state -> UInt64 in
            state.misses += 1
            defer { state.nextFill += 1 }
            state.fills[state.nextFill] = Fill(appID: key.appID, conversation: key.conversation)
            return state.nextFill
        }
        let result: (bytes: [UInt8], keep: Bool)
        do {
            result = try read()
        } catch {
            _ = state.withLock { $0.fills.removeValue(forKey: fill) }
            throw error
        }
        let over = state.withLock { state -> Bool in
            guard let registered = state.fills.removeValue(forKey: fill), !registered.spoiled, result.keep,
                result.bytes.count <= budgetBytes / 4
            else { return false }
            if let old = state.pages[key.appID]?[key.conversation]?[key.view] { state.bytes -= old.bytes.count }
            state.pages[key.appID, default: [:]][key.conversation, default: [:]][key.view] = Page(
                bytes: result.bytes, filledAt: now, lastServed: state.tick)
            state.bytes += result.bytes.count
            return state.bytes > budgetBytes
        }
        if over { evict() }
        return result.bytes
    }

    /// Drops the least recently served pages until a quarter of the budget is free: one sort per many fills.
    private func evict() {
        // Listed under the lock, sorted outside it: the message writer's invalidations wait on this lock, and a large
        // budget holds hundreds of thousands of pages.
        var all = state.withLock { state in
            var all: [(served: UInt64, appID: String, conversation: String, view: String)] = []
            for (appID, conversations) in state.pages {
                for (conversation, views) in conversations {
                    for (view, page) in views { all.append((page.lastServed, appID, conversation, view)) }
                }
            }
            return all
        }
        all.sort { $0.served < $1.served }
        let target = budgetBytes - budgetBytes / 4
        state.withLock { state in
            for entry in all {
                if state.bytes <= target { break }
                // Served again since it was listed: it is no longer among the least recently served.
                guard let page = state.pages[entry.appID]?[entry.conversation]?[entry.view], page.lastServed == entry.served else { continue }
                state.pages[entry.appID]?[entry.conversation]?[entry.view] = nil
                if state.pages[entry.appID]?[entry.conversation]?.isEmpty == true { state.pages[entry.appID]?[entry.conversation] = nil }
                if state.pages[entry.appID]?.isEmpty == true { state.pages[entry.appID] = nil }
                state.bytes -= page.bytes.count
            }
        }
    }

    // MARK: - Invalidation

    /// Applies events of `appID` this node numbered, as (type, ordering key) pairs.
    package func invalidate(appID: String, changes: some Sequence<(type: String, orderKey: String)>) {
        guard isEnabled else { return }
        var conversations: Set<String> = []
        for change in changes {
            switch Self.scope(type: change.type, orderKey: change.orderKey) {
            case .none: continue
            case .conversation(let key): conversations.insert(key)
            case .app:
                dropApp(appID)
                return
            }
        }
        if conversations.isEmpty { return }
        state.withLock { state in
            for conversation in conversations { state.dropConversation(appID, conversation) }
        }
    }

    /// Drops every page of `appID`.
    package func dropApp(_ appID: String) {
        guard isEnabled else { return }
        state.withLock { $0.dropApp(appID) }
    }

    /// What an event of `type` with ordering key `orderKey` does to the pages. Conversation-scoped are the events whose
    /// ordering key is always their conversation: a stored message's (`message.*`, but for `message.deleted`, whose
    /// `scope=self` form is ordered by its user, and `message.broadcast`, by its app), a group's and a room's, and
    /// `conversation.read`. Known to show in no page: presence, profile, friends and blacklists, devices, calls,
    /// webhooks and reports. Anything else (user deletion, clearing, retention, settings, jobs, a type added later)
    /// may change any page of the app.
    package static func scope(type: String, orderKey: String) -> Scope {
        if type.hasPrefix("message.") {
            return type == "message.deleted" || type == "message.broadcast" ? .app : conversation(orderKey)
        }
        if type.hasPrefix("group.") || type.hasPrefix("room.") || type == "conversation.read" { return conversation(orderKey) }
        if Self.pageless.contains(type) || Self.pagelessPrefixes.contains(where: { type.hasPrefix($0) }) { return .none }
        return .app
    }

    /// `orderKey` as a conversation, or the whole app when it does not name one.
    private static func conversation(_ orderKey: String) -> Scope {
        orderKey.hasPrefix("peer:") || orderKey.hasPrefix("group:") || orderKey.hasPrefix("room:") ? .conversation(orderKey) : .app
    }

    private static let pageless: Set<String> = [
        "user.created", "user.updated", "user.status_updated", "user.push_rule_updated", "user.kicked", "user.warned",
        "conversation.signal",
    ]
    private static let pagelessPrefixes = ["friend.", "blacklist.", "device.", "call.", "webhook.", "report."]

    // MARK: - CommitObserver

    /// This node's message writer committed `events` (before their sends are answered).
    package func committed(_ events: CommittedEvents) {
        invalidate(appID: events.appID, changes: events.events.lazy.map { (type: $0.event.type, orderKey: $0.event.orderKey) })
    }

    /// The sequencer numbered events of `appID`: it told ``invalidate(appID:changes:)`` which, before this.
    package func stored(appID: String) {}

    /// Another node has events of `appID`; which, it does not say.
    package func storedElsewhere(appID: String) { dropApp(appID) }

    /// Other nodes' notices may have been lost: nothing kept can be trusted.
    package func notificationsMissed() {
        guard isEnabled else { return }
        state.withLock { state in
            state.pages = [:]
            state.bytes = 0
            for id in state.fills.keys { state.fills[id]?.spoiled = true }
        }
    }

    // MARK: - Figures

    /// Pages served from the cache and read from the database since start, and the bytes held now.
    package var figures: (hits: Int, misses: Int, bytes: Int) {
        state.withLock { ($0.hits, $0.misses, $0.bytes) }
    }
}
