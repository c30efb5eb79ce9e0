import ParleyAPI
import ParleyCore
import ParleyPostgres

/// SQL of bulk removal (docs/jobs.md#removing-a-users-messages): the messages it matches, and the hide. No rules here.
enum MessageBulkRemovalStore {
    /// Which messages a removal matches: `userID`'s stored messages with `from <= timestamp < to`, not deleted for
    /// everyone and not tips (type 32: a group's notices, which name their operator as sender), in one conversation
    /// when `conversation` is set (its type and `conv_id`).
    struct Selection: Sendable {
        var userID: String
        var from: Int64
        var to: Int64
        var conversation: (type: String, id: String)?
    }

    /// The part of a statement that picks `selection`'s messages (alias `m`); the sender's index leads.
    private static func matching(appID: String, _ selection: Selection) -> PostgresQuery {
        var query: PostgresQuery = """
            WHERE m.app_id = \(appID) AND m.sender = \(selection.userID) AND m.timestamp >= \(selection.from) AND m.timestamp < \(selection.to)
              AND NOT m.deleted AND m.type <> 32
            """
        if let (type, id) = selection.conversation { query += " AND m.conv_type = \(type) AND m.conv_id = \(id)" }
        return query
    }

    /// How many messages `selection` matches; with `held`, only those a legal hold covers.
    static func count(appID: String, _ selection: Selection, held: Bool = false, on db: PostgresConnection) throws -> Int64 {
        var query = "SELECT count(*) FROM messages m " + matching(appID: appID, selection)
        if held { query += " AND parley_message_held(m.app_id, m.conv_type, m.conv_id, m.sender)" }
        return try db.query(query).decodeFirst(Int64.self) ?? 0
    }

    /// The next `limit` matching messages after the position (timestamp, message_id) `after`, in that order.
    static func next(
        appID: String, _ selection: Selection, after: (Int64, String), limit: Int, on db: PostgresConnection
    ) throws -> [(messageID: String, timestamp: Int64)] {
        let query =
            "SELECT m.message_id, m.timestamp FROM messages m " + matching(appID: appID, selection)
            + " AND (m.timestamp, m.message_id) > (\(after.0), \(after.1)) ORDER BY m.timestamp, m.message_id LIMIT \(limit)"
        return try db.query(query).decode((String, Int64).self).map { ($0.0, $0.1) }
    }

    /// Hides messages from everyone but their sender (and the app): suppressed as `moderation`, as a silent blacklist
    /// suppresses a send. Messages already suppressed or deleted are left as they are. Returns the ids it changed.
    static func hide(appID: String, messageIDs: [String], on db: PostgresConnection) throws -> [String] {
        if messageIDs.isEmpty { return [] }
        return try db.query(
            """
            UPDATE messages SET suppressed = 'moderation'
            WHERE app_id = \(appID) AND message_id = ANY(\(messageIDs)::text[]) AND suppressed IS NULL AND NOT deleted
            RETURNING message_id
            """
        ).decode(String.self)
    }
}
