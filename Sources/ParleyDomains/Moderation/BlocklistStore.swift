import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The SQL of blocklists (docs/blocklists.md): the lists and the app's blocklist version.
enum BlocklistStore {
    private static let columns = "name, type, action, applies_to, entries, revision, created_at, updated_at"

    /// Every list of the app, by name; `entries: false` reads them without their entries (an empty array).
    static func all(appID: String, entries: Bool = true, on db: PostgresConnection) throws -> [Blocklist] {
        let rows = try db.query(
            """
            SELECT name, type, action, applies_to, \(unsafeSQL: entries ? "entries" : "'{}'::text[]"), revision, created_at, updated_at,
                   cardinality(entries)
            FROM blocklists WHERE app_id = \(appID) ORDER BY name
            """)
        return try rows.map { row in
            let (name, type, action, appliesTo, list, revision, createdAt, updatedAt, count) = try row.decode(
                (String, String, String, [String], [String], Int64, Int64, Int64, Int64).self)
            var blocklist = try blocklist(name, type, action, appliesTo, list, revision, createdAt, updatedAt)
            if !entries { blocklist.entries = [String](repeating: "", count: Int(count)) }
            return blocklist
        }
    }

    static func fetch(appID: String, name: String, forUpdate: Bool = false, on db: PostgresConnection) throws -> Blocklist? {
        guard
            let row = try db.query(
                """
                SELECT \(unsafeSQL: columns) FROM blocklists WHERE app_id = \(appID) AND name = \(name) \(unsafeSQL: forUpdate ? "FOR UPDATE" : "")
                """
            ).first
        else { return nil }
        let (n, type, action, appliesTo, entries, revision, createdAt, updatedAt) = try row.decode(
            (String, String, String, [String], [String], Int64, Int64, Int64).self)
        return try blocklist(n, type, action, appliesTo, entries, revision, createdAt, updatedAt)
    }

    static func count(appID: String, on db: PostgresConnection) throws -> Int {
        Int(try db.query("SELECT count(*) FROM blocklists WHERE app_id = \(appID)").decodeFirst(Int64.self) ?? 0)
    }

    /// Inserts `list`; false when the name is taken.
    static func insert(_ list: Blocklist, appID: String, on db: PostgresConnection) throws -> Bool {
        let rows = try db.query(
            """
            INSERT INTO blocklists (app_id, name, type, action, applies_to, entries, revision, created_at, updated_at)
            VALUES (\(appID), \(list.name), \(list.kind.rawValue), \(list.action.rawValue), \(list.appliesTo.map(\.rawValue)),
                    \(list.entries), \(list.revision), \(list.createdAt), \(list.updatedAt))
            ON CONFLICT (app_id, name) DO NOTHING RETURNING 1
            """)
        return rows.rowCount == 1
    }

    static func update(_ list: Blocklist, appID: String, on db: PostgresConnection) throws {
        try db.query(
            """
            UPDATE blocklists SET type = \(list.kind.rawValue), action = \(list.action.rawValue), applies_to = \(list.appliesTo.map(\.rawValue)),
                   entries = \(list.entries), revision = \(list.revision), updated_at = \(list.updatedAt)
            WHERE app_id = \(appID) AND name = \(list.name)
            """)
    }

    /// Deletes the list; false when there was none.
    static func delete(appID: String, name: String, on db: PostgresConnection) throws -> Bool {
        try db.query("DELETE FROM blocklists WHERE app_id = \(appID) AND name = \(name) RETURNING 1").rowCount == 1
    }

    /// Takes the app's next blocklist version (locking its row until commit, so the app's changes are serialised).
    static func bumpVersion(appID: String, on db: PostgresConnection) throws -> Int64 {
        try db.query(
            """
            INSERT INTO blocklist_versions (app_id, version) VALUES (\(appID), 1)
            ON CONFLICT (app_id) DO UPDATE SET version = blocklist_versions.version + 1 RETURNING version
            """
        ).decodeFirst(Int64.self) ?? 0
    }

    /// The app's blocklist version; 0 when it never had a list.
    static func version(appID: String, on db: PostgresConnection) throws -> Int64 {
        try db.query("SELECT version FROM blocklist_versions WHERE app_id = \(appID)").decodeFirst(Int64.self) ?? 0
    }

    private static func blocklist(
        _ name: String, _ type: String, _ action: String, _ appliesTo: [String], _ entries: [String], _ revision: Int64,
        _ createdAt: Int64, _ updatedAt: Int64
    ) throws -> Blocklist {
        guard let kind = Blocklist.Kind(rawValue: type), let act = Blocklist.Action(rawValue: action) else {
            throw APIError(.internalError, "blocklist \(name) has an unknown type or action")
        }
        return Blocklist(
            name: name, kind: kind, action: act, appliesTo: appliesTo.compactMap(Blocklist.Scope.init(rawValue:)), entries: entries,
            revision: revision, createdAt: createdAt, updatedAt: updatedAt)
    }
}
