import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Files (docs/files.md): HTTP ↔ ``FileService`` for the rules and ``FileTransfer`` for the bytes.
package enum FileRoutes {
    /// `readableThroughMessages`: whether a user reads a message naming a file (the app layer asks the messages).
    package static func register(on api: inout API, readableThroughMessages: @escaping FileService.ReadableThroughMessages) {
        api.addUpload(.post, "/v1/files", .appOrUser, "uploadFile", maxBodyBytes: FileLimits.largestUpload, upload)

        api.add(.get, "/v1/files", .app, "listFiles") { ctx in
            var query = ctx.query()
            let limit = query.limit()
            let ownerID = query.id("user_id", .userID)
            let kind = query.choice("kind", FileKind.allCases.map(\.rawValue)).flatMap(FileKind.init(rawValue:))
            let cursor = query.cursor()
            try query.check()
            let list = "files|\(ctx.appID)|\(ownerID ?? "")|\(kind?.rawValue ?? "")"
            let after = try ctx.timeAndIDCursor(cursor, list: list)
            let files = try FileService(ctx).list(ownerID: ownerID, kind: kind, after: after, limit: limit + 1)
            let urls = issue(ctx)
            return ListPage.page(files, limit: limit, list: list, ctx: ctx, { [.int($0.createdAt), .string($0.fileID)] }) {
                $0.json(urls: urls)
            }
        }

        api.add(.get, "/v1/files/{file_id}/meta", .appOrUser, "getFileMeta") { ctx in
            let fileID = try ctx.pathID("file_id", .opaque)
            return Reply.json(
                try FileService(ctx).readable(fileID, byUser: ctx.tokenUserID, throughMessages: readableThroughMessages).json(urls: issue(ctx)))
        }

        api.add(.get, "/v1/files/{file_id}", .appOrUser, "downloadFile", signedRequest: signedDownload) { ctx in
            let fileID = try ctx.pathID("file_id", .opaque)
            var query = ctx.query()
            let variant = readVariant(&query)
            try query.check()
            let file = try FileService(ctx).readable(fileID, byUser: ctx.tokenUserID, throughMessages: readableThroughMessages)
            return try download(file, variant: variant, request: ctx.request, transfer: FileTransfer(services: ctx.services, appID: ctx.appID))
        }

        api.add(.delete, "/v1/files/{file_id}", .appOrUser, "deleteFile") { ctx in
            let fileID = try ctx.pathID("file_id", .opaque)
            let objects = try FileService(ctx).delete(fileID, byUser: ctx.tokenUserID)
            FileTransfer(services: ctx.services, appID: ctx.appID).removeObjects(objects)
            return Reply.noContent()
        }

        TusRoutes.register(on: &api)
    }

    /// URLs for this answer, valid for the app's `file_url_ttl_s`.
    private static func issue(_ ctx: APIContext) -> FileURLSigner.Issued { FileURLSigner.issued(for: ctx) }

    // MARK: - Upload

    /// `POST /v1/files`: the checks that need no body (owner, kind; for a raw body also the name and the declared
    /// length), then the body on the transfer thread. A raw body names the file in `Parley-File-Name` (percent-encoded
    /// UTF-8); a `multipart/form-data` body carries it in the part named `file` (`curl -F file=@photo.jpg`).
    private static func upload(_ ctx: APIContext) throws -> Response {
        var query = ctx.query()
        let kind = query.choice("kind", FileKind.allCases.map(\.rawValue)).flatMap(FileKind.init(rawValue:))
        let givenOwner = query.id("user_id", .userID)
        try query.check()
        let ownerID = ctx.tokenUserID ?? givenOwner
        if let tokenUser = ctx.tokenUserID, let givenOwner, givenOwner != tokenUser {
            throw APIError.forbidden("a user token uploads only its own files")
        }
        guard let stream = ctx.request.bodyStream else { throw APIError(.payloadTooLarge, "request body too large") }
        let headers = ctx.request.headers
        let policy = try FileService(ctx).uploadPolicy(kind: kind, ownerID: ownerID, settings: ctx.app.settings)
        let transfer = FileTransfer(services: ctx.services, appID: ctx.appID)
        let urls = issue(ctx)
        let request = ctx.request
        if let contentType = headers["Content-Type"], let boundary = MultipartFormReader.boundary(fromContentType: contentType) {
            // The file's name and type are in its part's headers: the transfer reads them first.
            return .later { respond in
                respond(transfer.receiveForm(policy, boundary: boundary, body: stream, urls: urls, request: request))
            }
        }
        guard let rawName = headers["Parley-File-Name"] else {
            throw APIError.invalidParam("header Parley-File-Name", "is required (the file's name, percent-encoded)")
        }
        let plan = try policy.plan(
            fileName: try fileName(PercentDecoding.decode(Substring(rawName)), field: "header Parley-File-Name"),
            claimedMimeType: FileSniffing.normalised(headers["Content-Type"]), declaredLength: ctx.request.head.contentLength)
        return .later { respond in
            respond(transfer.receive(plan, pieces: { try stream.next() }, urls: urls, request: request))
        }
    }

    /// A file name as stored: its last path component, 1–255 bytes of UTF-8 without control characters.
    static func fileName(_ given: String?, field: String) throws -> String {
        guard let given else { throw APIError.invalidParam(field, "must be percent-encoded UTF-8") }
        let name = String(given.split(whereSeparator: { $0 == "/" || $0 == "\\" }).last ?? "")
        guard !name.isEmpty, name.utf8.count <= FileLimits.fileNameMaxBytes, name != ".", name != "..",
            !name.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F })
        else {
            throw APIError.invalidParam(field, "must be a file name of 1–\(FileLimits.fileNameMaxBytes) bytes without control characters")
        }
        return name
    }

    // MARK: - Download

    private static func readVariant(_ query: inout QueryReader) -> FileURLSigner.Variant {
        query.choice("variant", FileURLSigner.Variant.allCases.map(\.rawValue)).flatMap(FileURLSigner.Variant.init(rawValue:)) ?? .original
    }

    /// A download through a signed URL (`signature` in the query and no `Authorization`): the URL proves it, so no
    /// credential is asked for; a wrong or expired one is 403 `6000216`. Nil for any other request.
    @Sendable private static func signedDownload(_ request: Request, _ services: Services) -> Response? {
        guard request.headers["Authorization"] == nil, let signature = request.queryValue("signature") else { return nil }
        do {
            var query = QueryReader(request.query)
            let appID = query.string("app_id") ?? ""
            let expires = query.int("expires", range: 0...Int64.max) ?? 0
            let variant = readVariant(&query)
            try query.check()
            let fileID = request.pathParameters["file_id"] ?? ""
            let signer = FileURLSigner(services: services)
            guard
                signer.verify(
                    appID: appID, fileID: fileID, variant: variant, expires: expires, signature: signature,
                    nowSeconds: services.clock.now() / 1000)
            else { throw APIError(.filePermissionDenied, "the URL's signature is wrong or expired") }
            let file = try services.pool.withConnection { db in
                try FileService(db: db, appID: appID, now: services.clock.now()).signed(fileID)
            }
            return try download(file, variant: variant, request: request, transfer: FileTransfer(services: services, appID: appID))
        } catch {
            return ProblemRendering.handlerError(error, request: request, logger: services.logger)
        }
    }

    /// The answer to a download of `file`: 304 when the client has it, 416 for a range outside it, else 200 or 206
    /// with the bytes streamed from storage (docs/files.md#downloading).
    static func download(_ file: StoredFile, variant: FileURLSigner.Variant, request: Request, transfer: FileTransfer) throws -> Response {
        guard let served = file.served(variant) else { throw APIError(.fileNotFound, "file \(file.fileID) has no \(variant.rawValue) variant") }
        let etag = "\"\(served.sha256)\""
        var headers = HTTPHeaders()
        headers.add("ETag", etag)
        headers.add("Cache-Control", "private, max-age=31536000, immutable")
        headers.add("Accept-Ranges", "bytes")
        headers.add("X-Content-Type-Options", "nosniff")
        // Whatever a file claims to be, it never runs as a page of this origin.
        headers.add("Content-Security-Policy", "default-src 'none'; sandbox")
        if let given = request.headers["If-None-Match"], DownloadHeaders.matches(given, etag: etag) {
            return Response(status: 304, headers: headers)
        }
        headers.add("Content-Type", served.mimeType)
        if file.kind == .file { headers.add("Content-Disposition", DownloadHeaders.attachment(file.fileName)) }
        var status = 200
        var span = FileTransfer.Span(start: 0, end: served.size)
        switch DownloadHeaders.range(request.headers["Range"], size: served.size) {
        case .whole: break
        case .part(let start, let end):
            status = 206
            span = FileTransfer.Span(start: start, end: end)
            headers.add("Content-Range", "bytes \(start)-\(end - 1)/\(served.size)")
        case .unsatisfiable:
            var error = APIError(.uploadProtocolError, "the range is outside the file's \(served.size) bytes")
            error.extraHeaders = [("Content-Range", "bytes */\(served.size)")]
            throw error
        }
        headers.add("Content-Length", String(span.count))
        let (blobID, sent) = (served.blobID, span)
        let transfers = transfer.services.transfers
        return Response(status: status, headers: headers) { stream in
            transfers.execute({ transfer.send(blobID: blobID, span: sent, to: stream) }, rejected: { stream.close() })
        }
    }
}

/// The conditional and range headers of downloads (RFC 9110, sections 13.1.2 and 14).
enum DownloadHeaders {
    enum RangeAnswer: Equatable {
        case whole
        /// Bytes `start..<end`.
        case part(Int64, Int64)
        case unsatisfiable
    }

    /// One byte range of a `Range` header; several ranges, other units or bad syntax are answered whole, as RFC 9110
    /// lets a server do.
    static func range(_ header: String?, size: Int64) -> RangeAnswer {
        guard let header, header.hasPrefix("bytes=") else { return .whole }
        let spec = header.dropFirst(6).trimmingCharacters(in: " ")
        if spec.contains(",") { return .whole }
        let parts = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return .whole }
        let (first, last) = (parts[0], parts[1])
        if first.isEmpty {
            // The last N bytes.
            guard let suffix = Int64(last), suffix >= 0 else { return .whole }
            if suffix == 0 { return .unsatisfiable }
            return .part(max(0, size - suffix), size)
        }
        guard let start = Int64(first), start >= 0 else { return .whole }
        if start >= size { return .unsatisfiable }
        if last.isEmpty { return .part(start, size) }
        guard let end = Int64(last), end >= start else { return .whole }
        return .part(start, min(end + 1, size))
    }

    /// Whether an `If-None-Match` value names `etag` (weak comparison: `W/` ignored) or is `*`.
    static func matches(_ header: String, etag: String) -> Bool {
        header.split(separator: ",").contains { candidate in
            var tag = candidate.trimmingCharacters(in: " ")
            if tag.hasPrefix("W/") { tag.removeFirst(2) }
            return tag == "*" || tag == etag
        }
    }

    /// `attachment` with an ASCII fallback name and the exact name as RFC 8187 `filename*`.
    static func attachment(_ fileName: String) -> String {
        let fallback = String(
            fileName.unicodeScalars.map { $0.isASCII && $0.value >= 0x20 && $0 != "\"" && $0 != "\\" ? Character($0) : "_" })
        var encoded = ""
        for byte in fileName.utf8 {
            let unreserved =
                (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                || [UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~")].contains(byte)
            encoded += unreserved ? String(UnicodeScalar(byte)) : "%" + (byte < 16 ? "0" : "") + String(byte, radix: 16, uppercase: true)
        }
        return "attachment; filename=\"\(fallback)\"; filename*=UTF-8''\(encoded)"
    }
}
