import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The SQL of a user's data export (docs/privacy.md#user-data-export) that no other domain has: the user's own
/// reactions and read receipts, a page at a time, and its earlier exports. Reads only; ``UserExport`` decides.
enum UserExportStore {
    /// The user's reactions after (message_id, reaction_type) `after`, in that order. The table has no index by user:
    /// each page scans the app's reactions (an export is rare; a page is large).
    static func reactions(
        appID: String, userID: String, after: (String, String), limit: Int, on db: PostgresConnection
    ) throws -> [(messageID: String, reactionType: String, reactedAt: Int64)] {
        try db.query(
            """
            SELECT message_id, reaction_type, reacted_at FROM message_reactions
            WHERE app_id = \(appID) AND user_id = \(userID) AND (message_id, reaction_type) > (\(after.0), \(after.1))
            ORDER BY message_id, reaction_type LIMIT \(limit)
            """
        ).decode((String, String, Int64).self).map { (messageID: $0.0, reactionType: $0.1, reactedAt: $0.2) }
    }

    /// The messages the user marked read (receipts) after `after`, by message id (no index by user either).
    static func receipts(
        appID: String, userID: String, after: String, limit: Int, on db: PostgresConnection
    ) throws -> [(messageID: String, readAt: Int64)] {
        try db.query(
            """
            SELECT message_id, read_at FROM message_receipt_reads
            WHERE app_id = \(appID) AND user_id = \(userID) AND message_id > \(after)
            ORDER BY message_id LIMIT \(limit)
            """
        ).decode((String, Int64).self).map { (messageID: $0.0, readAt: $0.1) }
    }

    /// The archives of the user's earlier exports (the files its finished `user_export` jobs name): an export leaves
    /// them out, or each would hold all the ones before it.
    static func earlierArchives(appID: String, userID: String, kind: String, on db: PostgresConnection) throws -> Set<String> {
        Set(
            try db.query(
                """
                SELECT result->>'file_id' FROM jobs
                WHERE app_id = \(appID) AND kind = \(kind) AND state = 'succeeded' AND params->>'user_id' = \(userID)
                  AND result->>'file_id' IS NOT NULL
                """
            ).decode(String.self))
    }
}
