import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Moves file bytes between a client and storage on a transfer thread (``Services/transfers``), in bounded memory:
/// an upload's body is cut into chunks as it arrives and written a few chunks per borrowed connection; a download
/// reads a few chunks per borrowed connection and writes them as fast as the client takes them. A slow client holds
/// a transfer thread, never a database connection.
package struct FileTransfer: Sendable {
    let services: Services
    let appID: String

    package init(services: Services, appID: String) {
        self.services = services
        self.appID = appID
    }

    // MARK: - Upload

    /// Reads the body from `pieces` (nil at its end), stores it as a new blob and records the file; the 201 answer, or
    /// the problem. Nothing of a failed upload stays: its blob is deleted (or, if this node dies first, swept a day
    /// later).
    package func receive(
        _ plan: FileService.UploadPlan, pieces: () throws -> [UInt8]?, urls: FileURLSigner.Issued, request: Request
    ) -> Response {
        let blobID = IdentifierKind.generateID(prefix: "b_", length: 22)
        do {
            try services.pool.withConnection { db in
                try FileStore.createBlob(appID: appID, blobID: blobID, now: services.clock.now(), on: db)
            }
        } catch {
            return problem(error, request: request)
        }
        do {
            let blob = try write(blobID: blobID, plan: plan, pieces: pieces)
            let fileID = IdentifierKind.generateID(prefix: "f_", length: 22)
            let file = try services.pool.withConnection { db in
                try FileService(db: db, appID: appID, now: services.clock.now()).record(blob, plan: plan, fileID: fileID)
            }
            services.metrics.fileUploaded(kind: plan.kind.rawValue, bytes: blob.size)
            return Reply.created(file.json(urls: urls))
        } catch {
            try? services.pool.withConnection { db in try FileStore.deleteBlob(appID: appID, blobID: blobID, on: db) }
            return problem(error, request: request)
        }
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

    /// Writes the body as the chunks of `blobID`, hashing it on the way; returns what it stored.
    private func write(blobID: String, plan: FileService.UploadPlan, pieces: () throws -> [UInt8]?) throws -> FileService.UploadedBlob {
        let hasher = Crypto.SHA256Hasher()
        var size: Int64 = 0
        var head: [UInt8] = []
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
        while let piece = try Self.nextPiece(pieces) {
            size += Int64(piece.count)
            if size > plan.maxBytes { throw FileService.tooLarge(kind: plan.kind, maxBytes: plan.maxBytes) }
            hasher.update(piece)
            if head.count < FileSniffing.headBytes { head += piece.prefix(FileSniffing.headBytes - head.count) }
            pending += piece
            while pending.count >= FileLimits.chunkBytes {
                ready.append(Array(pending[0..<FileLimits.chunkBytes]))
                pending.removeFirst(FileLimits.chunkBytes)
                if ready.count == FileLimits.chunksPerRoundTrip { try flush() }
            }
        }
        if size == 0 { throw APIError.invalidParam("body", "the file is empty") }
        if !pending.isEmpty { ready.append(pending) }
        try flush()
        let mimeType = try FileSniffing.mimeType(kind: plan.kind, head: head, claimed: plan.claimedMimeType, fileName: plan.fileName)
        return FileService.UploadedBlob(
            blobID: blobID, sha256: Crypto.hex(hasher.finish()), size: size, mimeType: mimeType, width: nil, height: nil)
    }

    /// The next piece of the body.
    private static func nextPiece(_ pieces: () throws -> [UInt8]?) throws -> [UInt8]? { try readingBody(pieces) }

    /// Runs a read of the body, with the ways a body ends early or malformed turned into the API's problems.
    private static func readingBody<T>(_ read: () throws -> T) throws -> T {
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

    private func problem(_ error: any Error, request: Request) -> Response {
        if let error = error as? PostgresError, error.isConnectionFailure || error.isTimeout {
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
}
