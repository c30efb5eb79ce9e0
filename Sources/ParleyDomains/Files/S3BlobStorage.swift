import ParleyAPI
import ParleyCore
import ParleyHTTP

/// The `s3` storage backend's side of ``FileTransfer`` (docs/files.md#storage): each blob is one object,
/// `<app_id>/<blob_id>`, written in parts and read in ranges, so memory holds at most one part per upload and one
/// range per download whatever the file's size. Its metadata (state, hash, size, references) stays in `file_blobs`.
enum S3BlobStorage {
    /// The size of a multipart upload's parts (S3 wants at least 5 MiB for all but the last); a body up to this size
    /// is one `PUT`.
    static let partBytes = 8 * 1024 * 1024
    /// The bytes one ranged `GET` of a download asks for.
    static let rangeBytes = 4 * 1024 * 1024

    /// A client for the configured bucket, or the error of a blob in S3 on a node configured without one.
    static func client(_ services: Services) throws -> S3Client {
        guard let settings = services.configuration.fileStorage.s3 else {
            throw S3Error(description: "a blob is stored in S3 but this node has no PARLEY_FILES_S3_ENDPOINT")
        }
        return S3Client(settings: settings)
    }

    /// Deletes the objects of blobs whose rows are gone (committed). Best effort: an object that cannot be deleted
    /// now stays in the bucket, unreferenced, and the log names it.
    static func removeObjects(appID: String, blobIDs: [String], services: Services) {
        guard !blobIDs.isEmpty else { return }
        let client: S3Client
        do { client = try Self.client(services) } catch {
            for blobID in blobIDs { logLeft(appID: appID, blobID: blobID, error: error, services: services) }
            return
        }
        for blobID in blobIDs {
            do { try client.deleteObject(key: S3Client.key(appID: appID, blobID: blobID)) } catch {
                logLeft(appID: appID, blobID: blobID, error: error, services: services)
            }
        }
    }

    private static func logLeft(appID: String, blobID: String, error: any Error, services: Services) {
        services.logger.warning(
            "msg=\"file object left in the bucket\" app=\(appID) blob=\(blobID) key=\(S3Client.key(appID: appID, blobID: blobID)) error=\"\(error)\"")
    }
}

/// Writes one blob's bytes to S3 as they arrive: a single `PUT` when they fit one part, else a multipart upload of
/// ``S3BlobStorage/partBytes`` parts, each signed with its own SHA-256 (the store checks what it received). `abort()`
/// drops the parts of a failed upload.
final class S3BlobWriter {
    private let client: S3Client
    private let key: String
    private var pending: [UInt8] = []
    private var uploadID: String?
    private var etags: [String] = []

    init(client: S3Client, key: String) {
        self.client = client
        self.key = key
    }

    func append(_ piece: [UInt8]) throws {
        var offset = 0
        while offset < piece.count {
            let take = min(piece.count - offset, S3BlobStorage.partBytes - pending.count)
            // One buffer of a part's size, kept from part to part (no copy per part, no doubling past it); a small
            // body never reserves it.
            if pending.count + take > 1 << 20 && pending.capacity < S3BlobStorage.partBytes {
                pending.reserveCapacity(S3BlobStorage.partBytes)
            }
            pending += piece[offset..<offset + take]
            offset += take
            if pending.count == S3BlobStorage.partBytes {
                try upload(pending)
                pending.removeAll(keepingCapacity: true)
            }
        }
    }

    /// Stores what is left: the last part and the completion, or the whole object.
    func finish() throws {
        guard let uploadID else { return try client.putObject(key: key, body: pending) }
        if !pending.isEmpty { try upload(pending) }
        pending = []
        try client.completeMultipartUpload(key: key, uploadID: uploadID, etags: etags)
    }

    /// Drops the parts uploaded so far (best effort: a store that does not answer keeps them until its lifecycle rule
    /// for incomplete multipart uploads, docs/files.md#storage).
    func abort() {
        guard let uploadID else { return }
        try? client.abortMultipartUpload(key: key, uploadID: uploadID)
    }

    private func upload(_ part: [UInt8]) throws {
        if uploadID == nil { uploadID = try client.createMultipartUpload(key: key) }
        etags.append(try client.uploadPart(key: key, uploadID: uploadID!, number: etags.count + 1, body: part))
    }
}
