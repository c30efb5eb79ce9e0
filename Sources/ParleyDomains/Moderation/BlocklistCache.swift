import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres
import ParleySync

/// The node's compiled blocklists, per app (docs/blocklists.md#caching-and-propagation), and the hooks a hit is handed
/// to. Made once by the app layer and handed to the routes that evaluate content (sends, edits, profiles).
///
/// A cached app is trusted for `ttlMillis` (2 s, like the app directory's settings); after that the next evaluation
/// reads the app's one-row blocklist version and reloads the lists only when it moved, compiling again only the lists
/// whose revision changed. A change made on this node is seen at once (``invalidate(appID:)``), on another node within
/// the TTL. Owner: `apps` behind its lock; no I/O and no compiling under it.
package final class BlocklistCache: Sendable {
    package let hooks: BlocklistHooks
    private let metrics: Metrics?
    private let ttlMillis: Int64 = 2000

    private struct Entry {
        let snapshot: BlocklistSnapshot
        let checkedAt: Int64
    }

    private let apps = LockedValue<[String: Entry]>([:])

    package init(hooks: BlocklistHooks, metrics: Metrics?) {
        self.hooks = hooks
        self.metrics = metrics
    }

    private static let empty = BlocklistSnapshot(version: 0, lists: [])

    /// The app's compiled lists. Without a connection, ``NeedsConnection`` when the cached copy is due for a check.
    package func snapshot(appID: String, db: PostgresConnection?) throws -> BlocklistSnapshot {
        let now = EventLoop.monotonicMillis()
        let cached = apps.withLock { $0[appID] }
        if let cached, now - cached.checkedAt < ttlMillis { return cached.snapshot }
        guard let db else { throw NeedsConnection() }
        let version = try BlocklistStore.version(appID: appID, on: db)
        var snapshot = cached?.snapshot ?? Self.empty
        if version != snapshot.version {
            snapshot = try load(appID: appID, version: version, reusing: snapshot, on: db)
        }
        let fresh = snapshot
        apps.withLock { $0[appID] = Entry(snapshot: fresh, checkedAt: now) }
        return fresh
    }

    /// Marks the app's cached lists as due (a change on this node): the next evaluation reads the version and reloads,
    /// reusing the compiled lists that did not change.
    package func invalidate(appID: String) {
        apps.withLock { apps in
            if let entry = apps[appID] { apps[appID] = Entry(snapshot: entry.snapshot, checkedAt: Int64.min / 2) }
        }
    }

    private func load(appID: String, version: Int64, reusing old: BlocklistSnapshot, on db: PostgresConnection) throws -> BlocklistSnapshot {
        let lists = try BlocklistStore.all(appID: appID, on: db)
        let reusable = Dictionary(old.lists.map { ($0.list.name, $0) }, uniquingKeysWith: { a, _ in a })
        var compiled: [CompiledBlocklist] = []
        for list in lists {
            if let same = reusable[list.name], same.list.revision == list.revision {
                compiled.append(same)
            } else if case .success(let fresh) = CompiledBlocklist.compile(list) {
                compiled.append(fresh)
            }
        }
        return BlocklistSnapshot(version: version, lists: compiled)
    }

    /// Counts `hit` (`parley_blocklist_hits_total`) and hands it to the hooks (reports, escalation); the hook's own
    /// failures are its to log.
    package func report(_ hit: BlocklistHit) {
        metrics?.blocklistHit(action: hit.action.rawValue)
        hooks.hit(hit)
    }
}

/// The outcome of evaluating one piece of content (a message body, a profile) against an app's blocklists
/// (docs/blocklists.md#actions): texts are checked one by one, masked where a `mask` list matched, and the strongest
/// action of every list that matched wins.
package struct BlocklistCheck: Sendable {
    package let snapshot: BlocklistSnapshot
    /// Matching list names with their action, in the order first matched.
    private var matched: [(name: String, action: Blocklist.Action)] = []

    package init(_ snapshot: BlocklistSnapshot) {
        self.snapshot = snapshot
    }

    /// `text` checked against the lists that apply to `scope`: the matches are recorded, and the text comes back with
    /// the characters matched by `mask` lists replaced by `*` (unchanged when none matched).
    package mutating func check(_ text: String, _ scope: Blocklist.Scope) -> String {
        if text.isEmpty || !snapshot.applies(to: scope) { return text }
        let normalised = BlocklistText(text)
        let matches = snapshot.matches(in: normalised) { $0.appliesTo.contains(scope) }
        if matches.isEmpty { return text }
        var masked: [Range<Int>] = []
        for match in matches {
            let list = snapshot.lists[match.list].list
            if !matched.contains(where: { $0.name == list.name }) { matched.append((list.name, list.action)) }
            if list.action == .mask { masked.append(match.original) }
        }
        return masked.isEmpty ? text : Self.mask(text, masked)
    }

    /// The strongest action of the lists that matched; nil when none did.
    package var action: Blocklist.Action? {
        matched.map(\.action).max { $0.strength < $1.strength }
    }

    /// Whether the content must be refused.
    package var blocks: Bool { action == .block }

    /// The names of the lists that matched, strongest action first.
    package var blocklists: [String] {
        matched.enumerated().sorted { ($0.element.action.strength, -$0.offset) > ($1.element.action.strength, -$1.offset) }.map(\.element.name)
    }

    /// The 422 of a blocked send or write: names the list, never the entry.
    package var problem: APIError {
        APIError(.contentBlocked, "the content is blocked by blocklist \(BlocklistLimits.quoted(blocklists.first ?? ""))")
    }

    /// The hit to hand to the hooks; nil when nothing matched.
    package func hit(appID: String, userID: String?, target: BlocklistHit.Target, at: Int64) -> BlocklistHit? {
        guard let action else { return nil }
        return BlocklistHit(
            appID: appID, userID: userID, action: action.hit, blocklists: blocklists,
            flagged: matched.filter { $0.action == .flag }.map(\.name), target: target, at: at)
    }

    /// `text` with every character overlapping one of `ranges` (UTF-8 offsets) replaced by `*`.
    static func mask(_ text: String, _ ranges: [Range<Int>]) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        var offset = 0
        for character in text {
            let length = character.utf8.count
            let here = offset..<(offset + length)
            out.append(ranges.contains { $0.overlaps(here) } ? "*" : character)
            offset += length
        }
        return out
    }
}

extension BlocklistCache {
    /// Profile fields checked by the lists that apply to `scope` (`user_profile`, `group_profile`;
    /// docs/blocklists.md#profiles): the fields come back masked where a `mask` list matched. `block` and
    /// `shadow_block` refuse the write (a profile is seen by everyone, so it cannot be shown to its author alone): the
    /// hit is reported with the attempted fields (`target`) and 422 `content_blocked` thrown. Nil fields are absent.
    package func screen(
        _ fields: [String?], scope: Blocklist.Scope, appID: String, userID: String?, now: Int64, on db: PostgresConnection,
        target: (_ screened: [String?]) -> BlocklistHit.Target
    ) throws -> (fields: [String?], check: BlocklistCheck?) {
        let snapshot = try snapshot(appID: appID, db: db)
        guard snapshot.applies(to: scope) else { return (fields, nil) }
        var check = BlocklistCheck(snapshot)
        let screened = fields.map { $0.map { check.check($0, scope) } }
        guard let action = check.action else { return (fields, nil) }
        if action == .block || action == .shadowBlock {
            if let hit = check.hit(appID: appID, userID: userID, target: target(screened), at: now) { report(hit) }
            throw check.problem
        }
        return (screened, check)
    }
}
