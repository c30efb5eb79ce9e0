import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The SQL of resumable uploads (Migrations/0026_tus_uploads.sql) and of their staging chunks. No rules: ``TusUploads``
/// decides.
enum TusStore {
    private static let columns =
        "upload_id, owner_id, kind, file_name, mime_claim, metadata, length, upload_offset, blob_id, completing, expires_at"

    /// The upload and its staging blob (state `staging`, which the abandoned-upload sweep leaves alone), in one transaction.
    static func create(_ upload: TusUpload, appID: String, now: Int64, on db: PostgresConnection) throws {
        try db.transaction { db in
            try db.query(
                "INSERT INTO file_blobs (app_id, blob_id, state, created_at) VALUES (\(appID), \(upload.blobID), 'staging', \(now))")
            try db.query(
                """
                INSERT INTO file_uploads (app_id, upload_id, owner_id, kind, file_name, mime_claim, metadata, length, upload_offset,
                    blob_id, created_at, expires_at)
                VALUES (\(appID), \(upload.uploadID), \(upload.ownerID), \(upload.kind.rawValue), \(upload.fileName), \(upload.mimeClaim),
                    \(upload.metadata), \(upload.length), 0, \(upload.blobID), \(now), \(upload.expiresAt))
                """)
        }
    }

    static func fetch(appID: String, uploadID: String, on db: PostgresConnection) throws -> TusUpload? {
        let row = try db.query(
            "SELECT \(unsafeSQL: columns) FROM file_uploads WHERE app_id = \(appID) AND upload_id = \(uploadID)"
        ).decodeFirst((String, String?, String, String, String?, String?, Int64, Int64, String, Bool, Int64).self)
        guard let (uploadID, ownerID, kind, fileName, mimeClaim, metadata, length, offset, blobID, completing, expiresAt) = row else {
            return nil
        }
        return TusUpload(
            uploadID: uploadID, ownerID: ownerID, kind: FileKind(rawValue: kind) ?? .file, fileName: fileName, mimeClaim: mimeClaim,
            metadata: metadata, length: length, offset: offset, blobID: blobID, completing: completing, expiresAt: expiresAt)
    }

    /// Stores `chunks` as chunks `first`, `first + 1`, … of the staging blob (a partial last chunk rewritten whole) and
    /// moves the offset from `from` to `to`, in one transaction; false (nothing written) when the offset is no longer
    /// `from` (another request appended) or the upload is being completed. The conditional update comes first: it
    /// locks the row, so of two requests appending at once the second waits, then finds the offset moved.
    static func append(
        appID: String, uploadID: String, blobID: String, from: Int64, to: Int64, expiresAt: Int64, first: Int, _ chunks: [[UInt8]],
        on db: PostgresConnection
    ) throws -> Bool {
        try db.transaction { db in
            let moved = try db.query(
                """
                UPDATE file_uploads SET upload_offset = \(to), expires_at = \(expiresAt)
                WHERE app_id = \(appID) AND upload_id = \(uploadID) AND upload_offset = \(from) AND NOT completing
                RETURNING upload_id
                """
            ).rows.count
            guard moved == 1 else { return false }
            for (index, chunk) in chunks.enumerated() {
                // The chunk as a binary parameter, as FileStore.writeChunks writes them.
                try db.queryBinary(
                    sql: """
                        INSERT INTO file_chunks (app_id, blob_id, n, data) VALUES ($1, $2, $3, $4)
                        ON CONFLICT (app_id, blob_id, n) DO UPDATE SET data = excluded.data
                        """, [appID, blobID, first + index], bytes: chunk)
            }
            return true
        }
    }

    /// Marks the upload as being made a file, when every byte is there and no other request does it; false otherwise.
    static func claimCompletion(appID: String, uploadID: String, on db: PostgresConnection) throws -> Bool {
        try db.query(
            """
            UPDATE file_uploads SET completing = true
            WHERE app_id = \(appID) AND upload_id = \(uploadID) AND upload_offset = length AND NOT completing RETURNING upload_id
            """
        ).rows.count == 1
    }

    /// Lets a later request try the completion again (this one failed for a reason that may pass).
    static func releaseCompletion(appID: String, uploadID: String, on db: PostgresConnection) throws {
        try db.query("UPDATE file_uploads SET completing = false WHERE app_id = \(appID) AND upload_id = \(uploadID)")
    }

    /// Deletes the upload: its staging blob, whose chunks and upload row go with it (ON DELETE CASCADE).
    static func delete(appID: String, blobID: String, on db: PostgresConnection) throws {
        try db.query("DELETE FROM file_blobs WHERE app_id = \(appID) AND blob_id = \(blobID) AND state = 'staging'")
    }

    /// Uploads that expired before `now`, oldest first, locked so that nodes sweeping together take each once.
    static func expired(before now: Int64, limit: Int, on db: PostgresConnection) throws -> [(appID: String, blobID: String)] {
        try db.query(
            """
            SELECT app_id, blob_id FROM file_uploads WHERE expires_at <= \(now)
            ORDER BY expires_at LIMIT \(limit) FOR UPDATE SKIP LOCKED
            """
        ).decode((String, String).self).map { (appID: $0.0, blobID: $0.1) }
    }
}
