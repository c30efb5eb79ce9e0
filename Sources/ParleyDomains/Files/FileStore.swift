import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The SQL of files, their blobs and the blobs' chunks (Migrations/0024_files.sql, 0027_file_blob_storage.sql). No rules: ``FileService`` and
/// ``FileTransfer`` decide.
package enum FileStore {
    private static let fileColumns =
        "file_id, kind, file_name, mime_type, size, sha256, blob_id, owner_id, created_at, width, height, duration_ms, variants::text"

    // MARK: - Blobs and chunks

    /// A new blob an upload writes its bytes under, in state `uploading`, in `storage`.
    static func createBlob(appID: String, blobID: String, storage: FileBackend, now: Int64, on db: PostgresConnection) throws {
        try db.query(
            """
            INSERT INTO file_blobs (app_id, blob_id, state, created_at, storage)
            VALUES (\(appID), \(blobID), 'uploading', \(now), \(storage.rawValue))
            """)
    }

    /// Where blob `blobID`'s bytes are; nil when the blob is gone (or its storage is one this binary does not know).
    static func storage(appID: String, blobID: String, on db: PostgresConnection) throws -> FileBackend? {
        try db.query("SELECT storage FROM file_blobs WHERE app_id = \(appID) AND blob_id = \(blobID)").decodeFirst(String.self)
            .flatMap(FileBackend.init(rawValue:))
    }

    /// Writes `chunks` of blob `blobID` as chunks `first`, `first + 1`, … in one transaction (one commit, one WAL flush,
    /// for the lot).
    static func writeChunks(appID: String, blobID: String, first: Int, _ chunks: [[UInt8]], on db: PostgresConnection) throws {
        guard !chunks.isEmpty else { return }
        try db.transaction { db in
            // The chunk as a binary parameter: no hex encoding here, no hex decoding in the server.
            for (offset, chunk) in chunks.enumerated() {
                try db.queryBinary(
                    sql: "INSERT INTO file_chunks (app_id, blob_id, n, data) VALUES ($1, $2, $3, $4)", [appID, blobID, first + offset],
                    bytes: chunk)
            }
        }
    }

    /// Chunks `first..<end` of blob `blobID`, in order.
    static func readChunks(appID: String, blobID: String, from first: Int, to end: Int, on db: PostgresConnection) throws -> [[UInt8]] {
        // In binary format: the bytes as stored, with no hex text to decode.
        try db.queryBinary(
            sql: "SELECT data FROM file_chunks WHERE app_id = $1 AND blob_id = $2 AND n >= $3 AND n < $4 ORDER BY n", [appID, blobID, first, end]
        ).decode(PostgresCell.self).map { try $0.bytes }
    }

    /// Deletes chunks `first` and later of blob `blobID` (a job's file rewrites its last, partial chunk as it grows).
    static func deleteChunks(appID: String, blobID: String, from first: Int, on db: PostgresConnection) throws {
        try db.query("DELETE FROM file_chunks WHERE app_id = \(appID) AND blob_id = \(blobID) AND n >= \(first)")
    }

    /// Restarts the clock of a blob still `uploading` (a job's file, growing step by step), so the sweep of abandoned
    /// uploads leaves it alone while its job makes progress.
    static func touchBlob(appID: String, blobID: String, now: Int64, on db: PostgresConnection) throws {
        try db.query("UPDATE file_blobs SET created_at = \(now) WHERE app_id = \(appID) AND blob_id = \(blobID) AND state = 'uploading'")
    }

    /// The stored blob of the app holding bytes with hash `sha256`, locked (a file is about to reference it).
    static func storedBlob(appID: String, sha256: String, on db: PostgresConnection) throws -> (blobID: String, size: Int64)? {
        try db.query(
            "SELECT blob_id, size FROM file_blobs WHERE app_id = \(appID) AND sha256 = \(sha256) FOR UPDATE"
        ).decodeFirst((String, Int64).self).map { (blobID: $0.0, size: $0.1) }
    }

    /// Records an uploaded blob as stored with its hash and size, referenced once.
    static func markStored(appID: String, blobID: String, sha256: String, size: Int64, on db: PostgresConnection) throws {
        try db.query(
            """
            UPDATE file_blobs SET state = 'stored', sha256 = \(sha256), size = \(size), refs = 1
            WHERE app_id = \(appID) AND blob_id = \(blobID)
            """)
    }

    /// One more file references the blob.
    static func addReference(appID: String, blobID: String, on db: PostgresConnection) throws {
        try db.query("UPDATE file_blobs SET refs = refs + 1 WHERE app_id = \(appID) AND blob_id = \(blobID)")
    }

    /// One file fewer references the blob; returns the bytes freed when that was the last reference (the blob and its
    /// chunks are then deleted, and an S3 blob joins `objects`, whose objects go after the commit), else 0.
    static func dropReference(appID: String, blobID: String, objects: inout [String], on db: PostgresConnection) throws -> Int64 {
        let refs = try db.query(
            "UPDATE file_blobs SET refs = refs - 1 WHERE app_id = \(appID) AND blob_id = \(blobID) RETURNING refs, size"
        ).decodeFirst((Int64, Int64).self)
        guard let (left, size) = refs, left <= 0 else { return 0 }
        if try deleteBlob(appID: appID, blobID: blobID, on: db) == .s3 { objects.append(blobID) }
        return size
    }

    /// Deletes a blob and its chunks (an abandoned or duplicate upload, or the last reference gone); returns where its
    /// bytes were (an S3 object is the caller's to delete, once the transaction committed), nil when it was gone.
    @discardableResult
    static func deleteBlob(appID: String, blobID: String, on db: PostgresConnection) throws -> FileBackend? {
        try db.query("DELETE FROM file_blobs WHERE app_id = \(appID) AND blob_id = \(blobID) RETURNING storage").decodeFirst(String.self)
            .flatMap(FileBackend.init(rawValue:))
    }

    /// Blobs still `uploading` that started before `before`, oldest first (uploads whose node died).
    static func abandonedBlobs(before: Int64, limit: Int, on db: PostgresConnection) throws -> [(appID: String, blobID: String)] {
        try db.query(
            """
            SELECT app_id, blob_id FROM file_blobs WHERE state = 'uploading' AND created_at < \(before)
            ORDER BY created_at LIMIT \(limit) FOR UPDATE SKIP LOCKED
            """
        ).decode((String, String).self).map { (appID: $0.0, blobID: $0.1) }
    }

    // MARK: - Files

    static func insert(_ file: StoredFile, appID: String, on db: PostgresConnection) throws {
        try db.query(
            """
            INSERT INTO files (app_id, file_id, kind, file_name, mime_type, size, sha256, blob_id, owner_id, created_at, width, height,
                               duration_ms, variants)
            VALUES (\(appID), \(file.fileID), \(file.kind.rawValue), \(file.fileName), \(file.mimeType), \(file.size), \(file.sha256),
                    \(file.blobID), \(file.ownerID), \(file.createdAt), \(file.width), \(file.height), \(file.durationMillis),
                    \(FileVariant.json(file.variants))::jsonb)
            """)
    }

    /// The file `fileID`; `forUpdate` locks its row (a delete holds it).
    static func fetch(appID: String, fileID: String, forUpdate: Bool = false, on db: PostgresConnection) throws -> StoredFile? {
        try db.query(
            """
            SELECT \(unsafeSQL: fileColumns) FROM files WHERE app_id = \(appID) AND file_id = \(fileID) \(unsafeSQL: forUpdate ? "FOR UPDATE" : "")
            """
        ).rows.first.map(file)
    }

    /// Files newest first, optionally of one owner and one kind, after the cursor `(createdAt, fileID)`.
    static func list(
        appID: String, ownerID: String?, kind: FileKind?, after: (Int64, String)?, limit: Int, on db: PostgresConnection
    ) throws -> [StoredFile] {
        var q: PostgresQuery = "SELECT \(unsafeSQL: fileColumns) FROM files WHERE app_id = \(appID)"
        if let ownerID { q += " AND owner_id = \(ownerID)" }
        if let kind { q += " AND kind = \(kind.rawValue)" }
        if let (createdAt, fileID) = after { q += " AND (created_at, file_id) < (\(createdAt), \(fileID))" }
        q += " ORDER BY created_at DESC, file_id DESC LIMIT \(limit)"
        return try db.query(q).rows.map(file)
    }

    /// The next `limit` files of the app created before `before`, after `after` in (created time, id) order, each with
    /// whether a stored message names it (the retention sweep's scan: bounded work per batch, however many old files
    /// messages keep; EXPLAIN on 1,000,000 files with 285,000 old ones named: 4 ms per 1,000 scanned, where asking for
    /// the first 100 unnamed ones took 1.1 s).
    static func retentionCandidates(
        appID: String, before: Int64, after: (Int64, String), limit: Int, on db: PostgresConnection
    ) throws -> [(createdAt: Int64, fileID: String, named: Bool)] {
        try db.query(
            """
            WITH scanned AS (
                SELECT created_at, file_id FROM files
                WHERE app_id = \(appID) AND created_at < \(before) AND (created_at, file_id) > (\(after.0), \(after.1))
                ORDER BY created_at, file_id LIMIT \(limit)
            )
            SELECT s.created_at, s.file_id,
                   EXISTS (SELECT 1 FROM message_files m WHERE m.app_id = \(appID) AND m.file_id = s.file_id)
            FROM scanned s ORDER BY s.created_at, s.file_id
            """
        ).decode((Int64, String, Bool).self).map { (createdAt: $0.0, fileID: $0.1, named: $0.2) }
    }

    /// The apps with a `file_retention_days` and its value.
    static func appsWithFileRetention(on db: PostgresConnection) throws -> [(String, Int64)] {
        try db.query(
            """
            SELECT app_id, (settings->>'file_retention_days')::bigint FROM apps
            WHERE coalesce((settings->>'file_retention_days')::bigint, 0) > 0 ORDER BY app_id
            """, prepared: false
        ).decode((String, Int64).self)
    }

    static func delete(appID: String, fileID: String, on db: PostgresConnection) throws {
        try db.query("DELETE FROM files WHERE app_id = \(appID) AND file_id = \(fileID)")
    }

    // MARK: - Usage

    /// The app's stored bytes, its usage row locked (uploads of one app record their bytes one at a time, so the quota
    /// holds under concurrent uploads).
    static func lockUsage(appID: String, on db: PostgresConnection) throws -> Int64 {
        try db.query("INSERT INTO file_usage (app_id) VALUES (\(appID)) ON CONFLICT DO NOTHING")
        return try db.query("SELECT bytes FROM file_usage WHERE app_id = \(appID) FOR UPDATE").decodeFirst(Int64.self) ?? 0
    }

    /// Adds `bytes` stored bytes and `files` files to the app's usage (negative to remove).
    static func addUsage(appID: String, bytes: Int64, files: Int64, on db: PostgresConnection) throws {
        try db.query(
            """
            INSERT INTO file_usage AS u (app_id, bytes, files) VALUES (\(appID), \(bytes), \(files))
            ON CONFLICT (app_id) DO UPDATE SET bytes = u.bytes + excluded.bytes, files = u.files + excluded.files
            """)
    }

    /// The app's files and stored bytes (/v1/stats).
    static func usage(appID: String, on db: PostgresConnection) throws -> (files: Int64, bytes: Int64) {
        try db.query("SELECT files, bytes FROM file_usage WHERE app_id = \(appID)").decodeFirst((Int64, Int64).self)
            .map { (files: $0.0, bytes: $0.1) } ?? (0, 0)
    }

    private static func file(_ row: PostgresRow) throws -> StoredFile {
        let (fileID, kind, fileName, mimeType, size, sha256, blobID, ownerID, createdAt, width, height, duration, variants) = try row.decode(
            (String, String, String, String, Int64, String, String, String?, Int64, Int64?, Int64?, Int64?, String).self)
        return StoredFile(
            fileID: fileID, kind: FileKind(rawValue: kind) ?? .file, fileName: fileName, mimeType: mimeType, size: size, sha256: sha256,
            blobID: blobID, ownerID: ownerID, createdAt: createdAt, width: width, height: height, durationMillis: duration,
            variants: FileVariant.parse(variants))
    }
}
