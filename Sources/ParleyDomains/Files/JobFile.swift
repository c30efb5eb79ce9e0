import ParleyAPI
import ParleyCore
import ParleyPostgres

/// A file a job writes step by step (docs/privacy.md#how-the-archive-is-built): the bytes of each step are appended to a blob
/// of the database's chunk store in the step's own transaction, so they commit together with the job's checkpoint. A
/// node that dies mid-way leaves the blob exactly as the last committed step left it, and the node that resumes the job
/// appends from there: the file comes out byte for byte the same.
///
/// The blob lives in PostgreSQL whatever the configured backend (an object store cannot take part in the step's
/// transaction); downloads read each blob from where it is, so the file is served like any other. Until the last step
/// makes it a file, the blob is an upload in progress: a job that fails or is cancelled leaves it to the sweep of
/// abandoned uploads (a day later), and every step restarts that clock.
///
/// The value is the part of a job's checkpoint that names the blob and how many bytes it holds.
package struct JobFile: Sendable, Equatable {
    package var blobID: String
    package var size: Int64

    /// Starts an empty file (the first step of the job that writes it).
    package static func start(appID: String, now: Int64, on db: PostgresConnection) throws -> JobFile {
        let blobID = IdentifierKind.generateID(prefix: "b_", length: 22)
        try FileStore.createBlob(appID: appID, blobID: blobID, storage: .postgres, now: now, on: db)
        return JobFile(blobID: blobID, size: 0)
    }

    package init(blobID: String, size: Int64) {
        self.blobID = blobID
        self.size = size
    }

    /// The file as a checkpoint keeps it.
    package var json: JSONObject { ["blob_id": .string(blobID), "size": .int(size)] }

    /// The file back from a checkpoint's member.
    package init(_ json: JSONValue?) throws {
        guard let object = json?.objectValue, let blobID = object["blob_id"]?.stringValue, let size = object["size"]?.intValue else {
            throw APIError(.internalError, "malformed job file in a checkpoint")
        }
        self.init(blobID: blobID, size: size)
    }

    /// Appends `bytes`: the last chunk, when partial, is read back and rewritten with them, so every chunk but the last
    /// holds ``FileLimits/chunkBytes`` (downloads find a byte's chunk by division).
    package mutating func append(_ bytes: [UInt8], appID: String, now: Int64, on db: PostgresConnection) throws {
        guard !bytes.isEmpty else { return }
        let chunkBytes = Int64(FileLimits.chunkBytes)
        let first = Int(size / chunkBytes)
        var pending: [UInt8] = []
        if size % chunkBytes != 0 {
            pending = try FileStore.readChunks(appID: appID, blobID: blobID, from: first, to: first + 1, on: db).first ?? []
            try FileStore.deleteChunks(appID: appID, blobID: blobID, from: first, on: db)
        }
        pending += bytes
        var chunks: [[UInt8]] = []
        var offset = 0
        while offset < pending.count {
            let end = min(pending.count, offset + FileLimits.chunkBytes)
            chunks.append(Array(pending[offset..<end]))
            offset = end
        }
        try FileStore.writeChunks(appID: appID, blobID: blobID, first: first, chunks, on: db)
        try FileStore.touchBlob(appID: appID, blobID: blobID, now: now, on: db)
        size += Int64(bytes.count)
    }

    /// Bytes `start..<end` of what was written so far (a job that reads back what an earlier step wrote).
    package func read(from start: Int64, to end: Int64, appID: String, on db: PostgresConnection) throws -> [UInt8] {
        let end = min(end, size)
        guard start < end else { return [] }
        let chunkBytes = Int64(FileLimits.chunkBytes)
        let first = Int(start / chunkBytes)
        let chunks = try FileStore.readChunks(appID: appID, blobID: blobID, from: first, to: Int((end - 1) / chunkBytes) + 1, on: db)
        let joined = chunks.flatMap { $0 }
        let from = Int(start - Int64(first) * chunkBytes)
        return Array(joined[from..<min(joined.count, from + Int(end - start))])
    }

    /// Makes the blob a file of `kind` named `fileName`, owned by `ownerID` (nil: the app), in the finishing step: its
    /// SHA-256 is computed by reading it back a few chunks at a time (a hash cannot be carried from step to step in a
    /// checkpoint), then it is recorded as an upload is (deduplicated against the app's blobs, counted in its usage
    /// and quota; over the quota → the job fails with 413 `6000214`).
    package func finish(
        appID: String, now: Int64, kind: FileKind, fileName: String, mimeType: String, ownerID: String?, quotaBytes: Int64,
        on db: PostgresConnection
    ) throws -> StoredFile {
        let hasher = Crypto.SHA256Hasher()
        let chunkCount = Int((size + Int64(FileLimits.chunkBytes) - 1) / Int64(FileLimits.chunkBytes))
        var next = 0
        while next < chunkCount {
            let end = min(chunkCount, next + FileLimits.chunksPerRoundTrip)
            for chunk in try FileStore.readChunks(appID: appID, blobID: blobID, from: next, to: end, on: db) { hasher.update(chunk) }
            next = end
        }
        let blob = FileService.NewBlob(blobID: blobID, sha256: Crypto.hex(hasher.finish()), size: size)
        let plan = FileService.UploadPlan(
            kind: kind, fileName: fileName, claimedMimeType: mimeType, ownerID: ownerID, maxBytes: .max, maxPixels: 0, quotaBytes: quotaBytes)
        let upload = FileService.Upload(uploadedSHA256: blob.sha256, uploadedSize: size, original: blob, mimeType: mimeType)
        // This blob is in PostgreSQL: a dedupe that drops it leaves no object to delete.
        return try FileService(db: db, appID: appID, now: now).record(upload, plan: plan, fileID: IdentifierKind.generateID(prefix: "f_", length: 22))
            .file
    }
}

extension JobFile {
    /// Deletes the blob of a file a job no longer needs (an async import's body, once imported), in the step that
    /// finishes it: it never becomes a file, and need not wait a day for the sweep.
    package func discard(appID: String, on db: PostgresConnection) throws {
        try FileStore.deleteBlob(appID: appID, blobID: blobID, on: db)
    }
}

extension FileTransfer {
    /// The bytes of `file` as uploaded (its original variant), whatever backend holds them, read whole: for a job that
    /// copies files into an archive, one bounded file at a time.
    package func originalBytes(of file: StoredFile, on db: PostgresConnection) throws -> [UInt8] {
        switch try FileStore.storage(appID: appID, blobID: file.blobID, on: db) {
        case .s3?:
            return try S3BlobStorage.client(services).getObject(
                key: S3Client.key(appID: appID, blobID: file.blobID), start: 0, end: file.variants[.original]?.size ?? file.size)
        case .postgres?, nil:
            let chunks = Int(((file.variants[.original]?.size ?? file.size) + Int64(FileLimits.chunkBytes) - 1) / Int64(FileLimits.chunkBytes))
            return try FileStore.readChunks(appID: appID, blobID: file.blobID, from: 0, to: chunks, on: db).flatMap { $0 }
        }
    }
}
