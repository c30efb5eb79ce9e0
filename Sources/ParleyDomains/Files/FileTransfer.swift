import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Moves file bytes between a client and storage on a transfer thread (``Services/transfers``), in bounded memory.
/// With the `postgres` backend an upload's body is cut into chunks as it arrives and written a few chunks per
/// borrowed connection, and a download reads a few chunks per borrowed connection; with `s3` (``S3BlobStorage``) an
/// upload goes to the bucket a part at a time and a download reads it a range at a time. Either way the client is
/// written to as fast as it takes the bytes: a slow client holds a transfer thread, never a database connection.
package struct FileTransfer: Sendable {
    let services: Services
    let appID: String

    package init(services: Services, appID: String) {
        self.services = services
        self.appID = appID
    }

    // MARK: - Upload

    /// Reads the body from `pieces` (nil at its end), stores it and records the file; the 201 answer, or the problem.
    /// A file's bytes go to storage as they arrive; an image's are kept in memory (at most `image_max_bytes`), decoded,
    /// and only what Parley derives from them is stored — its original without metadata, its large and thumbnail copies
    /// (docs/files.md#images) — so the bytes as uploaded, GPS tags and all, are never kept. Nothing of a failed upload
    /// stays: its blobs are deleted (or, if this node dies first, swept a day later).
    package func receive(
        _ plan: FileService.UploadPlan, pieces: () throws -> [UInt8]?, urls: FileURLSigner.Issued, request: Request
    ) -> Response {
        do {
            return Reply.created(try store(plan, pieces: pieces).json(urls: urls))
        } catch {
            return problem(error, request: request)
        }
    }

    /// What ``receive(_:pieces:urls:request:)`` does, with the file recorded returned and the failure thrown: for a
    /// caller that answers in its own way (a tus upload's last request, docs/files.md#resumable-uploads-tus).
    package func store(_ plan: FileService.UploadPlan, pieces: () throws -> [UInt8]?) throws -> StoredFile {
        var created: [String] = []
        do {
            let upload =
                try plan.kind == .image ? receiveImage(plan, pieces: pieces, created: &created) : receiveFile(plan, pieces: pieces, created: &created)
            let fileID = IdentifierKind.generateID(prefix: "f_", length: 22)
            let (file, droppedObjects) = try services.pool.withConnection { db in
                try FileService(db: db, appID: appID, now: services.clock.now()).record(upload, plan: plan, fileID: fileID)
            }
            // Bytes the app already stored: the new copy's object goes, now that nothing can reference it.
            S3BlobStorage.removeObjects(appID: appID, blobIDs: droppedObjects, services: services)
            services.metrics.fileUploaded(kind: plan.kind.rawValue, bytes: upload.uploadedSize)
            return file
        } catch {
            discard(created)
            throw error
        }
    }

    /// Deletes the blobs of a failed upload: their rows (and chunks), then the objects of those in S3.
    private func discard(_ blobIDs: [String]) {
        guard !blobIDs.isEmpty else { return }
        var objects: [String] = []
        try? services.pool.withConnection { db in
            for blobID in blobIDs where try FileStore.deleteBlob(appID: appID, blobID: blobID, on: db) == .s3 { objects.append(blobID) }
        }
        S3BlobStorage.removeObjects(appID: appID, blobIDs: objects, services: services)
    }

    /// Deletes the S3 objects of blobs a committed delete removed (``FileService/delete(_:byUser:)``).
    package func removeObjects(_ blobIDs: [String]) {
        S3BlobStorage.removeObjects(appID: appID, blobIDs: blobIDs, services: services)
    }

    /// A file (not an image): streamed into one blob as it arrives. Audio and video are also copied to a private
    /// temporary file, which FFmpeg reads for the duration and a video's first frame (``MediaProbe``) once the body is
    /// stored; a file it cannot read is stored all the same.
    private func receiveFile(
        _ plan: FileService.UploadPlan, pieces: () throws -> [UInt8]?, created: inout [String]
    ) throws -> FileService.Upload {
        let media = plan.kind == .audio || plan.kind == .video ? try MediaProbe.temporaryFile() : nil
        defer { if let media { MediaProbe.discard(media) } }
        let blob = try storeBlob(
            pieces: {
                let piece = try Self.readingBody(pieces)
                if let piece, let media { try MediaProbe.write(piece, to: media.fd) }
                return piece
            }, maxBytes: plan.maxBytes, tooLarge: FileService.tooLarge(kind: plan.kind, maxBytes: plan.maxBytes), created: &created)
        let mimeType = FileSniffing.mimeType(kind: plan.kind, claimed: plan.claimedMimeType, fileName: plan.fileName)
        var upload = FileService.Upload(uploadedSHA256: blob.sha256, uploadedSize: blob.size, original: blob, mimeType: mimeType)
        guard let media else { return upload }
        let probed = MediaProbe.probe(path: media.path, video: plan.kind == .video)
        upload.durationMillis = probed.durationMillis
        if let frame = probed.firstFrame, let image = try? derive(frame, maxPixels: plan.maxPixels) {
            let stored = try storeBlob(bytes: image.original.bytes, created: &created)
            upload.derived.append(
                FileService.DerivedBlob(
                    variant: .firstFrame, blob: stored, mimeType: image.original.mimeType, width: Int64(image.width),
                    height: Int64(image.height)))
        }
        return upload
    }

    /// An image: read whole, decoded and derived (bounded by `image_max_pixels` before any pixel is allocated), and
    /// its three derived variants stored.
    private func receiveImage(
        _ plan: FileService.UploadPlan, pieces: () throws -> [UInt8]?, created: inout [String]
    ) throws -> FileService.Upload {
        var uploaded: [UInt8] = []
        while let piece = try Self.readingBody(pieces) {
            if Int64(uploaded.count + piece.count) > plan.maxBytes { throw FileService.tooLarge(kind: plan.kind, maxBytes: plan.maxBytes) }
            uploaded += piece
        }
        if uploaded.isEmpty { throw APIError.invalidParam("body", "the file is empty") }
        let image: DerivedImage
        do { image = try derive(uploaded, maxPixels: plan.maxPixels) } catch let error as ImageDerivationError {
            switch error {
            case .notAnImage: throw APIError(.fileTypeUnsupported, "the content of \"\(plan.fileName)\" is no image format Parley reads")
            case .overMaxPixels(let message), .cannotDecode(let message): throw APIError(.fileError, message)
            }
        }
        var derived: [FileService.DerivedBlob] = []
        for (variant, output) in [(FileURLSigner.Variant.original, image.original), (.large, image.large), (.thumbnail, image.thumbnail)] {
            let blob = try storeBlob(bytes: output.bytes, created: &created)
            derived.append(
                FileService.DerivedBlob(
                    variant: variant, blob: blob, mimeType: output.mimeType, width: Int64(output.width), height: Int64(output.height)))
        }
        return FileService.Upload(
            uploadedSHA256: Crypto.hex(Crypto.sha256(uploaded)), uploadedSize: Int64(uploaded.count), original: derived[0].blob,
            mimeType: image.original.mimeType, width: Int64(image.width), height: Int64(image.height), derived: derived)
    }

    /// ``ImageDerivation/derive(source:maxPixels:)``, timed for `/metrics` (`parley_file_derivation_seconds`).
    private func derive(_ source: [UInt8], maxPixels: Int64) throws -> DerivedImage {
        let started = ContinuousClock.now
        defer {
            let elapsed = ContinuousClock.now - started
            services.metrics.fileDerived(seconds: Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
        }
        return try ImageDerivation.derive(source: source, maxPixels: maxPixels)
    }

    /// Reads a `multipart/form-data` body: the part named `file` is the upload, named by its `filename`; other parts
    /// are skipped (docs/files.md#uploading).
    package func receiveForm(
        _ policy: FileService.UploadPolicy, boundary: String, body: RequestBodyStream, urls: FileURLSigner.Issued, request: Request
    ) -> Response {
        do {
            let form = try MultipartFormReader(boundary: boundary, body: body)
            while let part = try Self.readingBody({ try form.nextPart() }) {
                guard part.name == "file" else { continue }
                guard let given = part.filename else { throw APIError.invalidParam("body.file", "needs a filename") }
                let plan = try policy.plan(
                    fileName: try FileRoutes.fileName(given, field: "body.file"), claimedMimeType: FileSniffing.normalised(part.contentType),
                    declaredLength: nil)
                let response = receive(plan, pieces: { try part.readPiece() }, urls: urls, request: request)
                // The rest of the form (more parts, the epilogue) is read, so the connection can carry another request.
                while (try? form.nextPart()) != nil {}
                return response
            }
            throw APIError.invalidParam("body", "a multipart/form-data upload needs a part named file")
        } catch {
            return problem(error, request: request)
        }
    }

    /// Stores bytes in memory (a derived variant) as a new blob.
    private func storeBlob(bytes: [UInt8], created: inout [String]) throws -> FileService.NewBlob {
        var once: [UInt8]? = bytes
        return try storeBlob(
            pieces: {
                defer { once = nil }
                return once
            }, maxBytes: nil, tooLarge: nil, created: &created)
    }

    /// Stores `pieces` as a new blob in the configured backend, hashing them on the way. The blob's id joins `created`
    /// as soon as its row exists (the object, in S3, may exist from then on too).
    private func storeBlob(
        pieces: () throws -> [UInt8]?, maxBytes: Int64?, tooLarge: APIError?, created: inout [String]
    ) throws -> FileService.NewBlob {
        let blobID = IdentifierKind.generateID(prefix: "b_", length: 22)
        let storage = services.configuration.fileStorage.backend
        try services.pool.withConnection { db in
            try FileStore.createBlob(appID: appID, blobID: blobID, storage: storage, now: services.clock.now(), on: db)
        }
        created.append(blobID)
        let hasher = Crypto.SHA256Hasher()
        var size: Int64 = 0
        func next() throws -> [UInt8]? {
            guard let piece = try pieces() else { return nil }
            size += Int64(piece.count)
            if let maxBytes, size > maxBytes, let tooLarge { throw tooLarge }
            hasher.update(piece)
            return piece
        }
        let empty = APIError.invalidParam("body", "the file is empty")
        switch storage {
        case .postgres:
            try writeChunks(blobID: blobID, next)
            if size == 0 { throw empty }
        case .s3:
            let writer = S3BlobWriter(client: try S3BlobStorage.client(services), key: S3Client.key(appID: appID, blobID: blobID))
            do {
                while let piece = try next() { try writer.append(piece) }
                if size == 0 { throw empty }
                try writer.finish()
            } catch {
                writer.abort()
                throw error
            }
        }
        return FileService.NewBlob(blobID: blobID, sha256: Crypto.hex(hasher.finish()), size: size)
    }

    /// The `postgres` backend: `pieces` cut into chunks, a few written per borrowed connection.
    private func writeChunks(blobID: String, _ pieces: () throws -> [UInt8]?) throws {
        var pending: [UInt8] = []
        var ready: [[UInt8]] = []
        var written = 0
        func flush() throws {
            guard !ready.isEmpty else { return }
            let (chunks, first) = (ready, written)
            try services.pool.withConnection { db in try FileStore.writeChunks(appID: appID, blobID: blobID, first: first, chunks, on: db) }
            written += chunks.count
            ready = []
        }
        while let piece = try pieces() {
            pending += piece
            while pending.count >= FileLimits.chunkBytes {
                ready.append(Array(pending[0..<FileLimits.chunkBytes]))
                pending.removeFirst(FileLimits.chunkBytes)
                if ready.count == FileLimits.chunksPerRoundTrip { try flush() }
            }
        }
        if !pending.isEmpty { ready.append(pending) }
        try flush()
    }

    /// Runs a read of the body, with the ways a body ends early or malformed turned into the API's problems.
    static func readingBody<T>(_ read: () throws -> T) throws -> T {
        do { return try read() } catch let error as RequestBodyError {
            switch error {
            case .tooLarge: throw APIError(.payloadTooLarge, "request body too large")
            case .malformed: throw APIError(.badRequest, "malformed request body framing")
            case .timedOut: throw APIError(.requestTimeout, "the body did not arrive in time")
            case .closed, .abandoned: throw APIError(.badRequest, "the body ended early: the client went away")
            }
        } catch let error as MultipartError {
            throw APIError.invalidParam("body", "malformed multipart/form-data: \(error)")
        }
    }

    func problem(_ error: any Error, request: Request) -> Response {
        if let error = error as? PostgresError, error.isConnectionFailure || error.isTimeout {
            services.metrics.fileStoreFailed()
            return ProblemRendering.response(APIError(.fileStorageUnavailable, "the file store does not answer"), requestID: request.requestID)
        }
        if let error = error as? S3Error {
            services.metrics.fileStoreFailed()
            services.logger.warning("msg=\"file storage failed\" app=\(appID) error=\"\(error)\"")
            return ProblemRendering.response(APIError(.fileStorageUnavailable, "the file store does not answer"), requestID: request.requestID)
        }
        return ProblemRendering.handlerError(error, request: request, logger: services.logger)
    }

    // MARK: - Download

    /// Which bytes of a stored file a download sends: all, or one range (`Range`, docs/files.md#downloading).
    package struct Span: Sendable {
        var start: Int64
        var end: Int64  // exclusive
        var count: Int64 { end - start }
    }

    /// Writes `span` of blob `blobID` to `stream` and closes it; stops when the client goes away. Runs on a transfer
    /// thread; the stream's backlog paces the reads, so memory holds at most a few chunks.
    package func send(blobID: String, span: Span, to stream: ResponseStream) {
        defer { stream.close() }
        let storage: FileBackend?
        do { storage = try services.pool.withConnection { db in try FileStore.storage(appID: appID, blobID: blobID, on: db) } } catch {
            services.logger.warning("msg=\"file download cut short\" app=\(appID) blob=\(blobID) error=\"\(error)\"")
            return
        }
        switch storage {
        case .s3: sendObject(blobID: blobID, span: span, to: stream)
        case .postgres, nil: sendChunks(blobID: blobID, span: span, to: stream)
        }
    }

    /// The `postgres` backend: a few chunks read per borrowed connection.
    private func sendChunks(blobID: String, span: Span, to stream: ResponseStream) {
        let chunk = Int64(FileLimits.chunkBytes)
        var next = Int(span.start / chunk)
        let last = Int((span.end - 1) / chunk)
        var sent: Int64 = 0
        while next <= last && !stream.isClosed {
            let end = min(last + 1, next + FileLimits.chunksPerRoundTrip)
            let first = next
            guard
                let chunks = try? services.pool.withConnection({ db in
                    try FileStore.readChunks(appID: appID, blobID: blobID, from: first, to: end, on: db)
                }), chunks.count == end - first
            else {
                // Storage failed mid-body: the client sees the connection close short of Content-Length.
                services.metrics.fileStoreFailed()
                services.logger.warning("msg=\"file download cut short\" app=\(appID) blob=\(blobID)")
                return
            }
            for (offset, bytes) in chunks.enumerated() {
                let chunkStart = Int64(first + offset) * chunk
                let from = max(span.start, chunkStart) - chunkStart
                let to = min(span.end, chunkStart + Int64(bytes.count)) - chunkStart
                guard from < to else { continue }
                stream.waitForBacklog(below: 2 * FileLimits.chunkBytes)
                if stream.isClosed { return }
                stream.write(from == 0 && to == Int64(bytes.count) ? bytes : Array(bytes[Int(from)..<Int(to)]))
                sent += to - from
            }
            next = end
        }
        services.metrics.fileDownloaded(bytes: sent)
    }

    /// The `s3` backend: one ranged `GET` of ``S3BlobStorage/rangeBytes`` at a time, written in chunk-sized slices as
    /// the client takes them.
    private func sendObject(blobID: String, span: Span, to stream: ResponseStream) {
        var sent: Int64 = 0
        do {
            let client = try S3BlobStorage.client(services)
            let key = S3Client.key(appID: appID, blobID: blobID)
            var next = span.start
            while next < span.end && !stream.isClosed {
                let end = min(span.end, next + Int64(S3BlobStorage.rangeBytes))
                let bytes = try client.getObject(key: key, start: next, end: end)
                var offset = 0
                while offset < bytes.count {
                    stream.waitForBacklog(below: 2 * FileLimits.chunkBytes)
                    if stream.isClosed { return }
                    let slice = min(bytes.count, offset + FileLimits.chunkBytes)
                    stream.write(Array(bytes[offset..<slice]))
                    sent += Int64(slice - offset)
                    offset = slice
                }
                next = end
            }
        } catch {
            // Storage failed mid-body: the client sees the connection close short of Content-Length.
            services.logger.warning("msg=\"file download cut short\" app=\(appID) blob=\(blobID) error=\"\(error)\"")
            return
        }
        services.metrics.fileDownloaded(bytes: sent)
    }
}
