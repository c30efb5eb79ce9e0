import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The file rules (docs/files.md): what an upload may be, who may read and delete a file, and how an uploaded blob
/// becomes a file (dedupe, quota, usage) in one transaction.
///
/// A value made per request (or per piece of a transfer, on the connection it borrowed); it owns nothing mutable.
/// Transaction bodies are re-runnable.
package struct FileService: DomainService {
    let db: PostgresConnection
    let appID: String
    let now: Int64

    package init(db: PostgresConnection, appID: String, now: Int64) {
        self.db = db
        self.appID = appID
        self.now = now
    }

    static func notFound(_ fileID: String) -> APIError { APIError(.fileNotFound, "file \(fileID) does not exist") }

    // MARK: - Uploads

    /// The rules an upload meets, known before its body is read (docs/files.md#uploading): its owner, the kind asked
    /// for, the app's limits.
    package struct UploadPolicy: Sendable {
        var kind: FileKind?
        var ownerID: String?
        var imageMaxBytes: Int64
        var fileMaxBytes: Int64
        var imageMaxPixels: Int64
        var quotaBytes: Int64

        /// The upload of a file named `fileName`: its kind (`kind`, else guessed from the name's extension), which
        /// must allow the extension, and its size limit; a `declaredLength` over it is refused before any byte is read.
        package func plan(fileName: String, claimedMimeType: String?, declaredLength: Int?) throws -> UploadPlan {
            let fileExtension = StoredFile.fileExtension(of: fileName)
            let kind = kind ?? FileKind.guessed(fromExtension: fileExtension)
            if let allowed = kind.allowedExtensions, !allowed.contains(fileExtension.lowercased()) {
                throw APIError(
                    .fileTypeUnsupported,
                    "a file of kind \(kind.rawValue) must be named .\(allowed.sorted().joined(separator: ", .")); got \"\(fileName)\"")
            }
            let maxBytes = kind == .image ? imageMaxBytes : fileMaxBytes
            if let declaredLength, Int64(declaredLength) > maxBytes { throw FileService.tooLarge(kind: kind, maxBytes: maxBytes) }
            return UploadPlan(
                kind: kind, fileName: fileName, claimedMimeType: claimedMimeType, ownerID: ownerID, maxBytes: maxBytes,
                maxPixels: imageMaxPixels, quotaBytes: quotaBytes)
        }
    }

    /// What an upload will be once its file is named.
    package struct UploadPlan: Sendable {
        var kind: FileKind
        var fileName: String
        /// The type the client gave (raw `Content-Type` or the part's), normalised; images are sniffed instead.
        var claimedMimeType: String?
        var ownerID: String?
        /// The kind's size limit for this app.
        var maxBytes: Int64
        /// The largest decoded image (width × height).
        var maxPixels: Int64
        /// The app's storage quota (0: none).
        var quotaBytes: Int64
    }

    /// The policy of an upload by the caller: the owner must be an active user of the app.
    package func uploadPolicy(kind: FileKind?, ownerID: String?, settings: AppSettings) throws -> UploadPolicy {
        if let ownerID { try UserService.requireActive(ownerID, appID: appID, on: db) }
        return UploadPolicy(
            kind: kind, ownerID: ownerID, imageMaxBytes: settings.int("image_max_bytes"), fileMaxBytes: settings.int("file_max_bytes"),
            imageMaxPixels: settings.int("image_max_pixels"), quotaBytes: settings.int("app_storage_quota_bytes"))
    }

    static func tooLarge(kind: FileKind, maxBytes: Int64) -> APIError {
        APIError(.fileSizeInvalid, "a file of kind \(kind.rawValue) may hold at most \(maxBytes) bytes in this app")
    }

    /// Bytes an upload stored as a new blob, not yet recorded.
    struct NewBlob: Sendable {
        var blobID: String
        var sha256: String
        var size: Int64
    }

    /// A variant an upload derived and stored (an image's original without metadata, its large and thumbnail copies).
    struct DerivedBlob: Sendable {
        var variant: FileURLSigner.Variant
        var blob: NewBlob
        var mimeType: String
        var width: Int64
        var height: Int64
    }

    /// What an upload stored: the file as uploaded (hash and size), the blob its original serves, what it is, and
    /// any derived variants.
    struct Upload: Sendable {
        var uploadedSHA256: String
        var uploadedSize: Int64
        var original: NewBlob
        var mimeType: String
        var width: Int64? = nil
        var height: Int64? = nil
        var durationMillis: Int64? = nil
        var derived: [DerivedBlob] = []
    }

    /// Makes an upload a file: the app's usage row locked (uploads of one app record one at a time, so the quota
    /// holds), each new blob deduplicated against what the app stores (when the app already stores those bytes, the
    /// new blob is deleted and the file references the stored one), the quota checked against the bytes really added,
    /// the file and usage written. Returns the file and the new blobs whose bytes are S3 objects the dedupe dropped
    /// (the caller deletes them once this committed).
    func record(_ upload: Upload, plan: UploadPlan, fileID: String) throws -> (file: StoredFile, droppedObjects: [String]) {
        try db.transaction { db in
            let usedBytes = try FileStore.lockUsage(appID: appID, on: db)
            var addedBytes: Int64 = 0
            var droppedObjects: [String] = []
            func keep(_ blob: NewBlob) throws -> String {
                if let stored = try FileStore.storedBlob(appID: appID, sha256: blob.sha256, on: db) {
                    try FileStore.addReference(appID: appID, blobID: stored.blobID, on: db)
                    if try FileStore.deleteBlob(appID: appID, blobID: blob.blobID, on: db) == .s3 { droppedObjects.append(blob.blobID) }
                    return stored.blobID
                }
                try FileStore.markStored(appID: appID, blobID: blob.blobID, sha256: blob.sha256, size: blob.size, on: db)
                addedBytes += blob.size
                return blob.blobID
            }
            let originalID = try keep(upload.original)
            var variants: [FileURLSigner.Variant: FileVariant] = [:]
            for derived in upload.derived {
                let blobID = derived.variant == .original ? originalID : try keep(derived.blob)
                variants[derived.variant] = FileVariant(
                    blobID: blobID, sha256: derived.blob.sha256, size: derived.blob.size, mimeType: derived.mimeType, width: derived.width,
                    height: derived.height)
            }
            if plan.quotaBytes > 0, usedBytes + addedBytes > plan.quotaBytes {
                var error = APIError(.fileSizeInvalid, "storing \(addedBytes) more bytes would pass the app's quota of \(plan.quotaBytes) bytes")
                error.extraMembers = [("quota", plan.quotaBytes)]
                throw error
            }
            let file = StoredFile(
                fileID: fileID, kind: plan.kind, fileName: plan.fileName, mimeType: upload.mimeType, size: upload.uploadedSize,
                sha256: upload.uploadedSHA256, blobID: originalID, ownerID: plan.ownerID, createdAt: now, width: upload.width,
                height: upload.height, durationMillis: upload.durationMillis, variants: variants)
            try FileStore.insert(file, appID: appID, on: db)
            try FileStore.addUsage(appID: appID, bytes: addedBytes, files: 1, on: db)
            return (file, droppedObjects)
        }
    }

    // MARK: - Reads and deletes

    /// Whether user `userID` can read a message that names file `fileID` (docs/files.md#who-may-download); wired by
    /// the app layer to the messages (Messages sit above Files).
    package typealias ReadableThroughMessages =
        @Sendable (_ db: PostgresConnection, _ appID: String, _ fileID: String, _ userID: String, _ now: Int64) throws -> Bool

    /// The file for a caller: any file of the app for an app key; for a user token, a file it uploaded or one a message
    /// it can read names (docs/files.md#who-may-download), else 403 `6000216`.
    package func readable(_ fileID: String, byUser userID: String?, throughMessages: ReadableThroughMessages) throws -> StoredFile {
        guard let file = try FileStore.fetch(appID: appID, fileID: fileID, on: db) else { throw Self.notFound(fileID) }
        if let userID, file.ownerID != userID, try !throughMessages(db, appID, fileID, userID, now) {
            throw APIError(.filePermissionDenied, "user \(userID) did not upload file \(fileID) and reads no message that names it")
        }
        return file
    }

    /// The file a signed URL names (the signature was checked): no caller rule applies.
    package func signed(_ fileID: String) throws -> StoredFile {
        guard let file = try FileStore.fetch(appID: appID, fileID: fileID, on: db) else { throw Self.notFound(fileID) }
        return file
    }

    package func list(ownerID: String?, kind: FileKind?, after: (Int64, String)?, limit: Int) throws -> [StoredFile] {
        try FileStore.list(appID: appID, ownerID: ownerID, kind: kind, after: after, limit: limit, on: db)
    }

    /// Deletes a file: the app, or the user who uploaded it. Its blob goes with its last file; the app's usage follows;
    /// `file.deleted` tells the owner. Returns the blobs that went whose bytes are S3 objects: the caller deletes them
    /// after the commit, so no transaction waits on the object store.
    package func delete(_ fileID: String, byUser userID: String?) throws -> [String] {
        try db.transaction { db in
            var objects: [String] = []
            guard let file = try FileStore.fetch(appID: appID, fileID: fileID, forUpdate: true, on: db) else { throw Self.notFound(fileID) }
            if let userID, file.ownerID != userID {
                throw APIError(.filePermissionDenied, "only the app or the user who uploaded file \(fileID) may delete it")
            }
            _ = try FileStore.lockUsage(appID: appID, on: db)
            try FileStore.delete(appID: appID, fileID: fileID, on: db)
            var freed = try FileStore.dropReference(appID: appID, blobID: file.blobID, objects: &objects, on: db)
            // The original variant is the file's own blob, dropped above.
            for (variant, stored) in file.variants where variant != .original {
                freed += try FileStore.dropReference(appID: appID, blobID: stored.blobID, objects: &objects, on: db)
            }
            try FileStore.addUsage(appID: appID, bytes: -freed, files: -1, on: db)
            if let owner = file.ownerID {
                var data = JSONObjectWriter(capacity: 64)
                data["file_id"] = fileID
                try EventLog.append(
                    [NewEvent(type: "file.deleted", data: data.finish(), audience: [owner], orderKey: "user:\(owner)")], appID: appID, now: now,
                    on: db)
            }
            return objects
        }
    }

    /// One step of the retention sweep (the app's `file_retention_days`, docs/files.md#retention): scans the next
    /// `limit` files created before `horizon` after `after`, and deletes those no stored message names, each in a
    /// transaction of its own as ``delete(_:byUser:)`` does (the app's usage row is locked for one file at a time, not a
    /// batch). Returns how many it scanned, where the scan stopped, how many went and the blobs whose S3 objects the
    /// caller deletes (after these commits).
    func deleteExpired(
        olderThan horizon: Int64, after: (Int64, String), limit: Int
    ) throws -> (scanned: Int, last: (Int64, String)?, deleted: Int, objects: [String]) {
        let candidates = try FileStore.retentionCandidates(appID: appID, before: horizon, after: after, limit: limit, on: db)
        var deleted = 0
        var objects: [String] = []
        for candidate in candidates where !candidate.named {
            do {
                objects += try delete(candidate.fileID, byUser: nil)
                deleted += 1
            } catch let error as APIError where error.code == .fileNotFound {
                continue  // another node's sweep, or its owner, deleted it first
            }
        }
        return (candidates.count, candidates.last.map { ($0.createdAt, $0.fileID) }, deleted, objects)
    }

    /// The app's files and stored bytes (/v1/stats).
    package func usage() throws -> (files: Int64, bytes: Int64) { try FileStore.usage(appID: appID, on: db) }

    // MARK: - Abandoned uploads

    /// Deletes blobs whose upload started over a day ago and never finished (the node that ran it died), a batch at a
    /// time; returns how many went and those whose bytes are S3 objects (the caller deletes them after the commit).
    static func sweepAbandoned(now: Int64, on db: PostgresConnection) throws -> (count: Int, objects: [(appID: String, blobID: String)]) {
        try db.transaction { db in
            let abandoned = try FileStore.abandonedBlobs(before: now - FileLimits.abandonedUploadMillis, limit: 100, on: db)
            var objects: [(appID: String, blobID: String)] = []
            for blob in abandoned where try FileStore.deleteBlob(appID: blob.appID, blobID: blob.blobID, on: db) == .s3 {
                objects.append(blob)
            }
            return (abandoned.count, objects)
        }
    }
}
