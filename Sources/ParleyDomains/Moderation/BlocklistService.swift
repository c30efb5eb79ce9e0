import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The blocklist rules (docs/blocklists.md): names unique per app, at most 50 lists, entries normalised and compiled
/// when saved (a bad one is refused, naming it), and every change bumping the app's blocklist version so each node's
/// cache reloads.
struct BlocklistService: DomainService {
    let db: PostgresConnection
    let appID: String
    let now: Int64

    /// What a create or change asks for.
    struct Draft {
        var kind: Blocklist.Kind?
        var action: Blocklist.Action?
        var appliesTo: [Blocklist.Scope]?
        var entries: [String]?
    }

    func create(name: String, _ draft: Draft) throws -> Blocklist {
        guard let kind = draft.kind, let action = draft.action, let given = draft.entries else { throw APIError.internalError }
        let entries = try Self.compiled(given, kind: kind, name: name)
        return try db.transaction { db in
            let version = try BlocklistStore.bumpVersion(appID: appID, on: db)
            if try BlocklistStore.fetch(appID: appID, name: name, on: db) != nil { throw Self.exists(name) }
            if try BlocklistStore.count(appID: appID, on: db) >= BlocklistLimits.maxLists {
                throw APIError(.blocklistLimit, "an app has at most \(BlocklistLimits.maxLists) blocklists")
            }
            let list = Blocklist(
                name: name, kind: kind, action: action, appliesTo: draft.appliesTo ?? [.text, .custom], entries: entries,
                revision: version, createdAt: now, updatedAt: now)
            guard try BlocklistStore.insert(list, appID: appID, on: db) else { throw Self.exists(name) }
            return list
        }
    }

    func get(_ name: String) throws -> Blocklist {
        guard let list = try BlocklistStore.fetch(appID: appID, name: name, on: db) else { throw Self.notFound(name) }
        return list
    }

    func list() throws -> [Blocklist] {
        try BlocklistStore.all(appID: appID, entries: false, on: db)
    }

    func update(name: String, _ draft: Draft) throws -> Blocklist {
        // Entries are compiled before the transaction when the type is known; a type change alone recompiles the
        // stored entries inside it.
        let current = try get(name)
        let kind = draft.kind ?? current.kind
        let entries = try draft.entries.map { try Self.compiled($0, kind: kind, name: name) }
        if entries == nil && kind != current.kind {
            _ = try Self.compiled(current.entries, kind: kind, name: name)
        }
        return try db.transaction { db in
            let version = try BlocklistStore.bumpVersion(appID: appID, on: db)
            guard var list = try BlocklistStore.fetch(appID: appID, name: name, forUpdate: true, on: db) else { throw Self.notFound(name) }
            if entries == nil && kind != list.kind {
                _ = try Self.compiled(list.entries, kind: kind, name: name)
            }
            list.kind = kind
            if let action = draft.action { list.action = action }
            if let appliesTo = draft.appliesTo { list.appliesTo = appliesTo }
            if let entries { list.entries = entries }
            list.revision = version
            list.updatedAt = now
            try BlocklistStore.update(list, appID: appID, on: db)
            return list
        }
    }

    func delete(_ name: String) throws {
        try db.transaction { db in
            _ = try BlocklistStore.bumpVersion(appID: appID, on: db)
            guard try BlocklistStore.delete(appID: appID, name: name, on: db) else { throw Self.notFound(name) }
        }
    }

    /// The dry run: every match of `text` against the app's lists (or those named), whatever they apply to, with
    /// UTF-8 offsets into `text` as given, and the action that would win.
    func test(_ text: String, names: [String]?, cache: BlocklistCache) throws -> [UInt8] {
        let snapshot = try cache.snapshot(appID: appID, db: db)
        if let names {
            let known = Set(snapshot.lists.map(\.list.name))
            if let unknown = names.first(where: { !known.contains($0) }) { throw Self.notFound(unknown) }
        }
        let selected = names.map(Set.init)
        let normalised = BlocklistText(text)
        let matches = snapshot.matches(in: normalised) { selected?.contains($0.name) ?? true }
        var strongest: Blocklist.Action?
        var w = JSONWriter(capacity: 64 + matches.count * 96)
        w.object { w in
            w.key("matches")
            w.array { w in
                for match in matches {
                    let list = snapshot.lists[match.list].list
                    if strongest == nil || list.action.strength > strongest!.strength { strongest = list.action }
                    w.object { w in
                        w.key("blocklist")
                        w.writeString(list.name)
                        w.key("entry")
                        w.writeString(list.entries[match.entry])
                        w.key("start")
                        w.writeInt(match.original.lowerBound)
                        w.key("end")
                        w.writeInt(match.original.upperBound)
                    }
                }
            }
            w.key("action")
            if let strongest { w.writeString(strongest.rawValue) } else { w.writeNull() }
        }
        return w.bytes
    }

    /// `entries` normalised and compiled as a list of `kind`: a problem (422 `invalid_blocklist_entry`) names the
    /// entry refused.
    static func compiled(_ given: [String], kind: Blocklist.Kind, name: String) throws -> [String] {
        let (entries, problem) = BlocklistLimits.normalised(given, kind: kind)
        if let problem { throw APIError(.invalidBlocklistEntry, problem) }
        let probe = Blocklist(
            name: name, kind: kind, action: .flag, appliesTo: [], entries: entries, revision: 0, createdAt: 0, updatedAt: 0)
        switch CompiledBlocklist.compile(probe) {
        case .success: return entries
        case .failure(let error):
            let which = error.entryIndex.map { "entries[\(given.firstIndex(of: entries[$0]) ?? $0)] \(BlocklistLimits.quoted(entries[$0])) " } ?? ""
            throw APIError(.invalidBlocklistEntry, "\(which)does not compile: \(error.message)")
        }
    }

    static func notFound(_ name: String) -> APIError {
        APIError(.notFound, "blocklist \(BlocklistLimits.quoted(name)) not found")
    }

    static func exists(_ name: String) -> APIError {
        APIError(.blocklistExists, "a blocklist named \(BlocklistLimits.quoted(name)) already exists")
    }
}
