import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// A resumable upload (Migrations/0026_tus_uploads.sql): what the file will be, how many bytes are staged, until when.
struct TusUpload: Sendable {
    var uploadID: String
    var ownerID: String?
    var kind: FileKind
    var fileName: String
    /// The MIME type the client claimed (`filetype` metadata), normalised.
    var mimeClaim: String?
    /// `Upload-Metadata` as the client sent it.
    var metadata: String?
    var length: Int64
    /// Bytes stored so far.
    var offset: Int64
    /// The staging blob holding them.
    var blobID: String
    /// A request is making the file.
    var completing: Bool
    var expiresAt: Int64
}

/// The rules of resumable uploads (tus 1.0.0, docs/files.md#resumable-uploads-tus): what an upload may be (checked at
/// creation, before any byte), who may touch it, when it expires. The bytes are ``TusTransfer``'s business.
package struct TusUploads: DomainService {
    let db: PostgresConnection
    let appID: String
    let now: Int64

    package init(db: PostgresConnection, appID: String, now: Int64) {
        self.db = db
        self.appID = appID
        self.now = now
    }

    /// An upload expires this long after its last PATCH (or its creation).
    static let expiryMillis: Int64 = 24 * 3_600_000
    /// An expired upload stays this long before the sweep deletes it, answering 410 (a client learns its upload
    /// expired, and starts over, rather than hearing of an unknown one).
    static let goneMillis: Int64 = 3_600_000

    /// A refusal of the protocol: `7000905` with the status tus gives it (404, 409, 410, 412, 415).
    package static func protocolError(_ status: Int, _ detail: String) -> APIError {
        var error = APIError(.uploadProtocolError, detail)
        error.statusOverride = status
        return error
    }

    /// `Upload-Metadata`: comma-separated `key base64(value)` pairs (the value may be left out). Nil for a header that
    /// is not that.
    package static func parseMetadata(_ header: String) -> [String: String]? {
        var out: [String: String] = [:]
        for pair in header.split(separator: ",") {
            let parts = pair.split(separator: " ", omittingEmptySubsequences: true)
            guard let key = parts.first, parts.count <= 2 else { return nil }
            if parts.count == 1 {
                out[String(key)] = ""
                continue
            }
            guard let bytes = Crypto.base64Decode(String(parts[1])), let value = String(validating: bytes, as: UTF8.self) else { return nil }
            out[String(key)] = value
        }
        return out
    }

    /// Creates an upload of `length` bytes named `fileName`: the kind must take the name, `length` must be within the
    /// kind's limit and the app's quota (413 `6000214` before any byte is sent).
    func create(
        length: Int64, fileName: String, claimedMimeType: String?, metadata: String?, policy: FileService.UploadPolicy
    ) throws -> TusUpload {
        if length == 0 { throw APIError.invalidParam("header Upload-Length", "the file is empty") }
        let plan = try policy.plan(fileName: fileName, claimedMimeType: claimedMimeType, declaredLength: Int(clamping: length))
        if plan.quotaBytes > 0 {
            let used = try FileStore.usage(appID: appID, on: db).bytes
            if used + length > plan.quotaBytes {
                var error = APIError(.fileSizeInvalid, "storing \(length) more bytes would pass the app's quota of \(plan.quotaBytes) bytes")
                error.extraMembers = [("quota", plan.quotaBytes)]
                throw error
            }
        }
        let upload = TusUpload(
            uploadID: IdentifierKind.generateID(prefix: "up_", length: 22), ownerID: plan.ownerID, kind: plan.kind,
            fileName: plan.fileName, mimeClaim: plan.claimedMimeType, metadata: metadata, length: length, offset: 0,
            blobID: IdentifierKind.generateID(prefix: "b_", length: 22), completing: false, expiresAt: now + Self.expiryMillis)
        try TusStore.create(upload, appID: appID, now: now, on: db)
        return upload
    }

    /// The upload for a caller: any of the app's for an app key, its own for a user token (else 403 `6000216`);
    /// 404 `7000905` when there is no such upload, 410 once it expired.
    func upload(_ uploadID: String, byUser userID: String?) throws -> TusUpload {
        guard let upload = try TusStore.fetch(appID: appID, uploadID: uploadID, on: db) else {
            throw Self.protocolError(404, "upload \(uploadID) does not exist")
        }
        if let userID, upload.ownerID != userID { throw APIError(.filePermissionDenied, "user \(userID) did not create upload \(uploadID)") }
        if upload.expiresAt <= now { throw Self.protocolError(410, "upload \(uploadID) expired") }
        return upload
    }

    /// Terminates an upload: it and its staged bytes are deleted.
    package func delete(_ uploadID: String, byUser userID: String?) throws {
        let upload = try upload(uploadID, byUser: userID)
        try TusStore.delete(appID: appID, blobID: upload.blobID, on: db)
    }

    /// Deletes uploads that expired over ``goneMillis`` ago, a batch at a time; returns how many went.
    static func sweepExpired(now: Int64, on db: PostgresConnection) throws -> Int {
        try db.transaction { db in
            let expired = try TusStore.expired(before: now - goneMillis, limit: 100, on: db)
            for upload in expired { try TusStore.delete(appID: upload.appID, blobID: upload.blobID, on: db) }
            return expired.count
        }
    }
}

/// The bytes of resumable uploads, on a transfer thread (``Services/transfers``): a PATCH's body is staged in chunks as
/// it arrives, a batch per short transaction on a borrowed connection, so a slow client holds no connection and no
/// lock; the last byte makes the file through ``FileTransfer/store(_:pieces:)``, as POST /v1/files does.
package struct TusTransfer: Sendable {
    let services: Services
    let appID: String

    package init(services: Services, appID: String) {
        self.services = services
        self.appID = appID
    }

    /// Appends `pieces` to `upload`, which holds `upload.offset` bytes; returns the new offset. Bytes are committed a
    /// few chunks at a time with the offset they bring; a body cut off keeps what arrived (committed before the error
    /// is thrown), so the client resumes from there. 409 when another request appended meanwhile.
    func append(_ upload: TusUpload, pieces: () throws -> [UInt8]?) throws -> Int64 {
        let chunkBytes = FileLimits.chunkBytes
        let start = upload.offset
        var committed = start
        // The chunk the next commit writes first; a partial last chunk is read back and rewritten with the new bytes
        // after it, so every chunk but the last holds exactly `chunkBytes`.
        var firstChunk = Int(start / Int64(chunkBytes))
        var pending: [UInt8] = []
        if start % Int64(chunkBytes) != 0 {
            let first = firstChunk
            pending =
                try services.pool.withConnection { db in
                    try FileStore.readChunks(appID: appID, blobID: upload.blobID, from: first, to: first + 1, on: db)
                }.first ?? []
            guard pending.count == Int(start % Int64(chunkBytes)) else {
                throw APIError(.internalError, "upload \(upload.uploadID) has \(pending.count) bytes in its last chunk")
            }
        }
        var received = start
        func commit(final: Bool) throws {
            var chunks: [[UInt8]] = []
            var used = 0
            while pending.count - used >= chunkBytes {
                chunks.append(Array(pending[used..<used + chunkBytes]))
                used += chunkBytes
            }
            if final && used < pending.count {
                chunks.append(Array(pending[used...]))
                used = pending.count
            }
            guard !chunks.isEmpty else { return }
            let to = Int64(firstChunk) * Int64(chunkBytes) + Int64(used)
            guard to > committed else { return }
            let (from, first, expiresAt) = (committed, firstChunk, services.clock.now() + TusUploads.expiryMillis)
            let appended = try services.pool.withConnection { db in
                try TusStore.append(
                    appID: appID, uploadID: upload.uploadID, blobID: upload.blobID, from: from, to: to, expiresAt: expiresAt, first: first, chunks,
                    on: db)
            }
            guard appended else { throw TusUploads.protocolError(409, "upload \(upload.uploadID) moved past offset \(from) meanwhile") }
            committed = to
            // A partial chunk written by a final commit is rewritten by the next request; nothing follows it here.
            firstChunk += used / chunkBytes
            pending.removeFirst(used - used % chunkBytes)
        }
        do {
            while let piece = try FileTransfer.readingBody(pieces) {
                if received + Int64(piece.count) > upload.length {
                    throw APIError.invalidParam("body", "the bytes pass the upload's Upload-Length of \(upload.length)")
                }
                pending += piece
                received += Int64(piece.count)
                if pending.count >= chunkBytes * FileLimits.chunksPerRoundTrip { try commit(final: false) }
            }
            try commit(final: true)
        } catch {
            // What arrived is kept: that is what a resumable upload is for (the client asks HEAD and goes on).
            if let error = error as? APIError, error.code == .uploadProtocolError { throw error }
            try? commit(final: true)
            throw error
        }
        return committed
    }

    /// Makes the complete upload a file through `plan` (derived variants, deduplication, quota), then deletes the
    /// upload and its staged bytes. A refusal of the bytes (not an image, over the quota…) deletes the upload too: the
    /// same bytes would be refused again; a failure of storage leaves it to a later PATCH (empty, at its length).
    func complete(_ upload: TusUpload, plan: FileService.UploadPlan) throws -> StoredFile {
        let claimed = try services.pool.withConnection { db in try TusStore.claimCompletion(appID: appID, uploadID: upload.uploadID, on: db) }
        guard claimed else { throw TusUploads.protocolError(409, "upload \(upload.uploadID) is being completed by another request") }
        let chunkCount = Int((upload.length + Int64(FileLimits.chunkBytes) - 1) / Int64(FileLimits.chunkBytes))
        var next = 0
        var batch: [[UInt8]] = []
        do {
            let file = try FileTransfer(services: services, appID: appID).store(
                plan,
                pieces: {
                    if batch.isEmpty && next < chunkCount {
                        let (first, end) = (next, min(chunkCount, next + FileLimits.chunksPerRoundTrip))
                        batch = try services.pool.withConnection { db in
                            try FileStore.readChunks(appID: appID, blobID: upload.blobID, from: first, to: end, on: db)
                        }
                        guard batch.count == end - first else { throw TusUploads.protocolError(404, "upload \(upload.uploadID) was deleted") }
                        next = end
                        batch.reverse()
                    }
                    return batch.popLast()
                })
            try? services.pool.withConnection { db in try TusStore.delete(appID: appID, blobID: upload.blobID, on: db) }
            return file
        } catch {
            let status = (error as? APIError)?.status ?? 500
            try? services.pool.withConnection { db in
                if status >= 500 || status == 408 {
                    try TusStore.releaseCompletion(appID: appID, uploadID: upload.uploadID, on: db)
                } else {
                    try TusStore.delete(appID: appID, blobID: upload.blobID, on: db)
                }
            }
            throw error
        }
    }
}
