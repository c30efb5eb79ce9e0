import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Resumable uploads (docs/files.md#resumable-uploads-tus): the tus 1.0.0 protocol (core, creation,
/// creation-with-upload, termination, expiration) at /v1/uploads. HTTP ↔ ``TusUploads`` for the rules and
/// ``TusTransfer`` for the bytes.
package enum TusRoutes {
    static let version = "1.0.0"
    /// The extensions served; `creation-defer-length` is not: an upload says its length when it is created.
    static let extensions = "creation,creation-with-upload,termination,expiration"
    /// The only media type of the bytes a PATCH (or a creation with upload) carries.
    static let bytesMediaType = "application/offset+octet-stream"

    package static func register(on api: inout API) {
        // Discovery: tus clients ask before any credential is involved, so this one answers without one.
        api.builder.add(.options, "/v1/uploads", options: RouteOptions(runsOnEventLoop: true, operationID: "describeUploads")) { _ in
            var headers = tusHeaders()
            headers.add("Tus-Version", version)
            headers.add("Tus-Extension", extensions)
            headers.add("Tus-Max-Size", String(FileLimits.largestUpload))
            return Response(status: 204, headers: headers)
        }
        api.addUpload(.post, "/v1/uploads", .appOrUser, "createUpload", maxBodyBytes: FileLimits.largestUpload) { ctx in
            tus(ctx, create)
        }
        api.add(.head, "/v1/uploads/{upload_id}", .appOrUser, "getUploadOffset") { ctx in tus(ctx, offset) }
        api.addUpload(.patch, "/v1/uploads/{upload_id}", .appOrUser, "appendToUpload", maxBodyBytes: FileLimits.largestUpload) { ctx in
            tus(ctx, append)
        }
        api.add(.delete, "/v1/uploads/{upload_id}", .appOrUser, "deleteUpload") { ctx in
            tus(ctx) { ctx in
                try TusUploads(ctx).delete(try ctx.pathID("upload_id", .opaque), byUser: ctx.tokenUserID)
                return Response(status: 204)
            }
        }
    }

    /// Headers every tus answer carries.
    private static func tusHeaders() -> HTTPHeaders {
        var headers = HTTPHeaders()
        headers.add("Tus-Resumable", version)
        return headers
    }

    /// Runs a tus request: 412 unless the client speaks tus 1.0.0; `Tus-Resumable` on whatever it answers, problems
    /// included.
    private static func tus(_ ctx: APIContext, _ handler: (APIContext) throws -> Response) -> Response {
        let response: Response
        do {
            guard ctx.request.headers["Tus-Resumable"] == version else {
                var error = TusUploads.protocolError(412, "this server speaks tus \(version): send Tus-Resumable: \(version)")
                error.extraHeaders = [("Tus-Version", version)]
                throw error
            }
            response = try handler(ctx)
        } catch {
            response = FileTransfer(services: ctx.services, appID: ctx.appID).problem(error, request: ctx.request)
        }
        return response.whenSettled { settled in
            var settled = settled
            settled.headers.replace("Tus-Resumable", version)
            return settled
        }
    }

    /// `Upload-Expires`: an HTTP date (RFC 9110, section 5.6.7).
    private static func expires(_ millis: Int64) -> String { Timestamp.httpDate(seconds: millis / 1000) }

    /// Whether a request carries a body (a declared length above 0, or chunked framing).
    private static func hasBody(_ request: Request) -> Bool {
        (request.head.contentLength ?? 0) > 0 || request.headers["Transfer-Encoding"] != nil
    }

    private static func requireBytesMediaType(_ request: Request) throws {
        let given = request.headers["Content-Type"].map { String($0.split(separator: ";").first ?? "").trimmingCharacters(in: " ").lowercased() }
        guard given == bytesMediaType else { throw TusUploads.protocolError(415, "the bytes of an upload are sent as \(bytesMediaType)") }
    }

    // MARK: - Creation

    /// `POST /v1/uploads`: an upload of `Upload-Length` bytes named by `Upload-Metadata` (`filename`, optional `kind`,
    /// `user_id` for an app key, `filetype`); checked against the kind's limit and the quota before any byte. A body
    /// (creation-with-upload) is its first bytes.
    private static func create(_ ctx: APIContext) throws -> Response {
        let given = ctx.request.headers
        if given["Upload-Defer-Length"] != nil {
            throw APIError.invalidParam("header Upload-Defer-Length", "is not supported: send Upload-Length")
        }
        guard let rawLength = given["Upload-Length"], let length = Int64(rawLength), length >= 0 else {
            throw APIError.invalidParam("header Upload-Length", "is required: the file's size in bytes")
        }
        guard let metadata = TusUploads.parseMetadata(given["Upload-Metadata"] ?? "") else {
            throw APIError.invalidParam("header Upload-Metadata", "must be comma-separated pairs of a key and a base64 value")
        }
        guard let givenName = metadata["filename"] else {
            throw APIError.invalidParam("header Upload-Metadata", "needs filename (the file's name)")
        }
        let fileName = try FileRoutes.fileName(givenName, field: "Upload-Metadata filename")
        var kind: FileKind?
        if let given = metadata["kind"] {
            guard let known = FileKind(rawValue: given) else {
                throw APIError.invalidParam("Upload-Metadata kind", "must be one of \(FileKind.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            kind = known
        }
        var givenOwner: String?
        if let given = metadata["user_id"] {
            guard IdentifierKind.userID.isValid(given) else { throw APIError.invalidParam("Upload-Metadata user_id", "is not a user id") }
            givenOwner = given
        }
        if let tokenUser = ctx.tokenUserID, let givenOwner, givenOwner != tokenUser {
            throw APIError.forbidden("a user token uploads only its own files")
        }
        let withBytes = hasBody(ctx.request)
        if withBytes { try requireBytesMediaType(ctx.request) }
        if let declared = ctx.request.head.contentLength, Int64(declared) > length {
            throw APIError.invalidParam("body", "the body is longer than Upload-Length")
        }
        let policy = try FileService(ctx).uploadPolicy(kind: kind, ownerID: ctx.tokenUserID ?? givenOwner, settings: ctx.app.settings)
        let upload = try TusUploads(ctx).create(
            length: length, fileName: fileName, claimedMimeType: FileSniffing.normalised(metadata["filetype"]),
            metadata: given["Upload-Metadata"], policy: policy)
        var headers = tusHeaders()
        let base = ctx.services.configuration.publicURL ?? FileURLSigner.base(of: ctx.request)
        headers.add("Location", "\(base)/v1/uploads/\(upload.uploadID)")
        headers.add("Upload-Expires", expires(upload.expiresAt))
        let created = headers
        guard withBytes else { return Response(status: 201, headers: created) }
        guard let stream = ctx.request.bodyStream else { throw APIError(.payloadTooLarge, "request body too large") }
        let plan = try policy.plan(fileName: upload.fileName, claimedMimeType: upload.mimeClaim, declaredLength: nil)
        let transfer = TusTransfer(services: ctx.services, appID: ctx.appID)
        let request = ctx.request
        return .later { respond in
            respond(
                receive(upload, plan: plan, pieces: { try stream.next() }, transfer: transfer, request: request, status: 201, headers: created))
        }
    }

    // MARK: - Core

    /// `HEAD /v1/uploads/{upload_id}`: where the upload stands.
    private static func offset(_ ctx: APIContext) throws -> Response {
        let upload = try TusUploads(ctx).upload(try ctx.pathID("upload_id", .opaque), byUser: ctx.tokenUserID)
        var headers = tusHeaders()
        headers.add("Upload-Offset", String(upload.offset))
        headers.add("Upload-Length", String(upload.length))
        if let metadata = upload.metadata, !metadata.isEmpty { headers.add("Upload-Metadata", metadata) }
        headers.add("Upload-Expires", expires(upload.expiresAt))
        headers.add("Cache-Control", "no-store")
        return Response(status: 200, headers: headers)
    }

    /// `PATCH /v1/uploads/{upload_id}`: bytes from `Upload-Offset`, which must be where the upload stands (409 else).
    /// The request that brings the last byte makes the file and answers its id in `Parley-File-Id`.
    private static func append(_ ctx: APIContext) throws -> Response {
        try requireBytesMediaType(ctx.request)
        guard let rawOffset = ctx.request.headers["Upload-Offset"], let offset = Int64(rawOffset), offset >= 0 else {
            throw APIError.invalidParam("header Upload-Offset", "is required: the offset the bytes start at")
        }
        let upload = try TusUploads(ctx).upload(try ctx.pathID("upload_id", .opaque), byUser: ctx.tokenUserID)
        if upload.completing { throw TusUploads.protocolError(409, "upload \(upload.uploadID) is being completed") }
        guard offset == upload.offset else {
            throw TusUploads.protocolError(409, "upload \(upload.uploadID) stands at offset \(upload.offset), not \(offset)")
        }
        if let declared = ctx.request.head.contentLength, Int64(declared) > upload.length - upload.offset {
            throw APIError.invalidParam("body", "the bytes pass the upload's Upload-Length of \(upload.length)")
        }
        guard let stream = ctx.request.bodyStream else { throw APIError(.payloadTooLarge, "request body too large") }
        let policy = try FileService(ctx).uploadPolicy(kind: upload.kind, ownerID: upload.ownerID, settings: ctx.app.settings)
        let plan = try policy.plan(fileName: upload.fileName, claimedMimeType: upload.mimeClaim, declaredLength: nil)
        let transfer = TusTransfer(services: ctx.services, appID: ctx.appID)
        let request = ctx.request
        return .later { respond in
            respond(
                receive(upload, plan: plan, pieces: { try stream.next() }, transfer: transfer, request: request, status: 204, headers: tusHeaders()))
        }
    }

    /// Stages the body, then makes the file when the upload is complete; answers `status` with `headers`, the new
    /// `Upload-Offset` and `Upload-Expires`, and `Parley-File-Id` when a file was made. Runs on the transfer thread.
    private static func receive(
        _ upload: TusUpload, plan: FileService.UploadPlan, pieces: () throws -> [UInt8]?, transfer: TusTransfer, request: Request,
        status: Int, headers: HTTPHeaders
    ) -> Response {
        do {
            var headers = headers
            let offset = try transfer.append(upload, pieces: pieces)
            headers.add("Upload-Offset", String(offset))
            if offset == upload.length {
                let file = try transfer.complete(upload, plan: plan)
                headers.add("Parley-File-Id", file.fileID)
            } else {
                headers.replace("Upload-Expires", expires(transfer.services.clock.now() + TusUploads.expiryMillis))
            }
            return Response(status: status, headers: headers)
        } catch {
            return FileTransfer(services: transfer.services, appID: transfer.appID).problem(error, request: request)
        }
    }
}
