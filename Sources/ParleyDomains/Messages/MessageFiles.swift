import ParleyAPI
import ParleyCore
import ParleyPostgres

/// How a send may use uploaded files (docs/files.md#files-in-messages): the download URLs it writes into the body, and
/// whether any file of the app may be sent (the app key) or only the sender's own.
struct FileUse: Sendable {
    let urls: FileURLSigner.Issued
    let byApp: Bool

    init(_ caller: some AppCaller) {
        urls = FileURLSigner.issued(for: caller)
        byApp = caller.isApp
    }

    init(urls: FileURLSigner.Issued, byApp: Bool) {
        self.urls = urls
        self.byApp = byApp
    }
}

/// Media messages that name uploaded files by `file_id` (docs/files.md#files-in-messages): the server fills the body
/// from the file, keeps the `file_id` in the stored body, answers every read with freshly signed URLs, lets the
/// message's readers download the file, and deletes files only a revoked or deleted message used.
package enum MessageFiles {
    /// The URL members of media bodies and the variant each one serves.
    static let urlVariants: [(key: String, variant: FileURLSigner.Variant)] = [
        ("url", .original), ("large_image_url", .large), ("thumbnail_url", .thumbnail), ("first_frame_url", .firstFrame),
    ]
    /// A given `duration_ms` may differ from the one read from the file by this much (encoders round differently).
    static let durationToleranceMillis: Int64 = 2000

    // MARK: - Send

    /// Fills every media body of `body` that names a file: its URLs (signed for this answer), size, type, dimensions,
    /// variants and duration from the stored file; `file_name` and `duration_ms` from the sender when given.
    ///
    /// - Throws: 404 `6000211` for a file this app does not have (or no longer has); 403 `6000216` for a user's send of
    ///   a file it did not upload; 422 `6000213` for a file of a kind the message type does not take; 422 `6000215`
    ///   for a `duration_ms` more than two seconds off the file's; 400 `6000001` for audio or video whose duration was
    ///   neither given nor read.
    static func fill(_ body: inout MessageBody, from: String, use: FileUse, appID: String, now: Int64, on db: PostgresConnection) throws {
        let ids = body.fileIDs
        guard !ids.isEmpty else { return }
        let service = FileService(db: db, appID: appID, now: now)
        var files: [String: StoredFile] = [:]
        for id in ids {
            let file = try service.signed(id)
            if !use.byApp && file.ownerID != from {
                throw APIError(.filePermissionDenied, "user \(from) did not upload file \(id): a user sends only its own files")
            }
            files[id] = file
        }
        body.json = try MessageBody.mappingMedia(of: body.json, type: body.type) { type, media in
            guard let id = media["file_id"]?.stringValue, let file = files[id] else { return media }
            return try filled(media, type: type, file: file, urls: use.urls)
        }
    }

    /// One media body of `type` filled from `file`, in the body's documented member order after `file_id`.
    private static func filled(_ media: JSONObject, type: MessageType, file: StoredFile, urls: FileURLSigner.Issued) throws -> JSONObject {
        let takes: FileKind? =
            switch type {
            case .image: .image
            case .audio: .audio
            case .video: .video
            default: nil  // a file message may carry a file of any kind
            }
        if let takes, file.kind != takes {
            throw APIError(
                .fileTypeUnsupported, "file \(file.fileID) is of kind \(file.kind.rawValue); \(type.label) takes \(takes.rawValue) files")
        }
        var duration = media["duration_ms"]?.intValue
        if type == .audio || type == .video {
            if let given = duration, let read = file.durationMillis, abs(given - read) > durationToleranceMillis {
                throw APIError(
                    .fileDurationInvalid, "duration_ms \(given) contradicts the \(read) ms read from file \(file.fileID)")
            }
            duration = duration ?? file.durationMillis
            if duration == nil {
                throw APIError.invalidParam("body.duration_ms", "is required: the duration of file \(file.fileID) could not be read")
            }
        }
        let large = file.variants[.large]
        let thumbnail = file.variants[.thumbnail]
        let frame = file.variants[.firstFrame]
        let fromFile: [String: JSONValue?] = [
            "url": .string(urls.url(fileID: file.fileID, variant: .original)),
            "file_name": .string(media["file_name"]?.stringValue ?? file.fileName),
            "file_size": .int(file.size),
            "mime_type": .string(file.mimeType),
            "width": file.width.map(JSONValue.int),
            "height": file.height.map(JSONValue.int),
            "thumbnail_url": thumbnail.map { _ in .string(urls.url(fileID: file.fileID, variant: .thumbnail)) },
            "thumbnail_width": thumbnail?.width.map(JSONValue.int),
            "thumbnail_height": thumbnail?.height.map(JSONValue.int),
            "large_image_url": large.map { _ in .string(urls.url(fileID: file.fileID, variant: .large)) },
            "large_width": large?.width.map(JSONValue.int),
            "large_height": large?.height.map(JSONValue.int),
            "first_frame_url": frame.map { _ in .string(urls.url(fileID: file.fileID, variant: .firstFrame)) },
            "first_frame_width": frame?.width.map(JSONValue.int),
            "first_frame_height": frame?.height.map(JSONValue.int),
            "duration_ms": duration.map(JSONValue.int),
        ]
        var out = JSONObject()
        out["file_id"] = .string(file.fileID)
        for key in MessageBodyValidator.mediaKeys(type) {
            // What the server read wins over what the sender claimed (a URL or size of someone else's file would be a lie
            // told to every reader); a member the file has no value for keeps the sender's.
            if let value = fromFile[key] ?? nil { out[key] = value } else if let given = media[key] { out[key] = given }
        }
        return out
    }

    // MARK: - Reads

    /// `body` (a stored body of message type `type`) with URLs signed for the request being answered
    /// (``AnsweringScope``) for every file it names, or nil when it names none or no request is being answered (the
    /// body is then answered as stored, with the URLs signed when it was sent). Only media bodies that contain
    /// `"file_id"` are parsed.
    static func refreshed(_ body: UnsafeBufferPointer<UInt8>, type: Int64) -> [UInt8]? {
        guard let messageType = MessageType(rawValue: type), messageType.isMedia || messageType == .multiple,
            contains(body, Self.fileIDKey), let urls = FileURLSigner.forAnsweredRequest,
            let json = try? JSONValue.parse(Array(body))
        else { return nil }
        let fresh = MessageBody.mappingMedia(of: json, type: messageType) { _, media in
            guard let id = media["file_id"]?.stringValue else { return media }
            var out = media
            for (key, variant) in urlVariants where out[key] != nil {
                out[key] = .string(urls.url(fileID: id, variant: variant))
            }
            return out
        }
        return fresh.serialized()
    }

    private static let fileIDKey = Array("\"file_id\"".utf8)

    /// Whether `needle` occurs in `bytes`.
    private static func contains(_ bytes: UnsafeBufferPointer<UInt8>, _ needle: [UInt8]) -> Bool {
        guard bytes.count >= needle.count else { return false }
        var i = 0
        while i <= bytes.count - needle.count {
            if bytes[i] == needle[0] && bytes[i..<i + needle.count].elementsEqual(needle) { return true }
            i += 1
        }
        return false
    }

    /// Whether user `userID` can read a stored message that names file `fileID` (then it may download the file,
    /// docs/files.md#who-may-download).
    package static func readable(fileID: String, byUser userID: String, appID: String, now: Int64, on db: PostgresConnection) throws -> Bool {
        let service = MessageService(db: db, appID: appID, now: now)
        for messageID in try MessageFileStore.messages(naming: fileID, appID: appID, on: db) {
            guard let message = try MessageStore.fetch(appID: appID, messageID: messageID, on: db), !message.deleted else { continue }
            if message.isVisible(to: .user(userID)), try service.isVisible(message, to: .user(userID), on: db) { return true }
        }
        return false
    }

    // MARK: - Revoke and delete for everyone

    /// Deletes the stored objects (S3) of blobs `blobIDs` of app `appID` whose rows a committed transaction deleted.
    typealias ObjectRemover = @Sendable (_ appID: String, _ blobIDs: [String]) -> Void

    /// The node's ``ObjectRemover``.
    static func objectRemover(_ services: Services) -> ObjectRemover {
        { appID, blobIDs in S3BlobStorage.removeObjects(appID: appID, blobIDs: blobIDs, services: services) }
    }

    /// Forgets which files message `messageID` named (it was revoked or deleted for everyone) and, with the app setting
    /// `delete_files_with_messages`, deletes those no other message names. Runs in the caller's transaction; the
    /// deleted files' objects in S3 go once it has committed (`removeObjects`).
    static func messageRemoved(
        _ messageID: String, appID: String, deleteFiles: Bool, removeObjects: @escaping ObjectRemover, now: Int64, on db: PostgresConnection
    ) throws {
        let named = try MessageFileStore.forget(messageID: messageID, appID: appID, on: db)
        guard !named.isEmpty, deleteFiles else { return }
        try release(named, appID: appID, removeObjects: removeObjects, now: now, on: db)
    }

    /// Deletes those of `fileIDs` (the files of messages that went) that no stored message names any more; returns
    /// how many it deleted. Runs in the caller's transaction; their S3 objects go once it has committed.
    @discardableResult
    static func release(
        _ fileIDs: [String], appID: String, removeObjects: @escaping ObjectRemover, now: Int64, on db: PostgresConnection
    ) throws -> Int {
        let files = FileService(db: db, appID: appID, now: now)
        var objects: [String] = []
        var deleted = 0
        for fileID in fileIDs {
            if try MessageFileStore.isNamed(fileID: fileID, appID: appID, on: db) { continue }
            do {
                objects += try files.delete(fileID, byUser: nil)
                deleted += 1
            } catch let error as APIError where error.code == .fileNotFound {
                continue  // deleted already
            }
        }
        if !objects.isEmpty { db.afterCommit { removeObjects(appID, objects) } }
        return deleted
    }
}

/// The SQL of `message_files` (Migrations/0025_message_files.sql); the send statement writes its rows
/// (``MessageWrite``).
enum MessageFileStore {
    /// Stored messages naming file `fileID`, at most `limit` (a download checks whether any of them is readable).
    static func messages(naming fileID: String, appID: String, limit: Int = 100, on db: PostgresConnection) throws -> [String] {
        try db.query("SELECT message_id FROM message_files WHERE app_id = \(appID) AND file_id = \(fileID) LIMIT \(limit)").decode(String.self)
    }

    /// Removes the rows of message `messageID`; returns the files it named.
    static func forget(messageID: String, appID: String, on db: PostgresConnection) throws -> [String] {
        try db.query("DELETE FROM message_files WHERE app_id = \(appID) AND message_id = \(messageID) RETURNING file_id").decode(String.self)
    }

    /// Whether any message still names file `fileID`.
    static func isNamed(fileID: String, appID: String, on db: PostgresConnection) throws -> Bool {
        try db.query("SELECT 1 FROM message_files WHERE app_id = \(appID) AND file_id = \(fileID) LIMIT 1").rows.isEmpty == false
    }

    /// The rows of stored messages `messageIDs` that name files, read from their stored bodies (an import's messages).
    static func record(messageIDs: [String], appID: String, on db: PostgresConnection) throws {
        guard !messageIDs.isEmpty else { return }
        try db.query(
            """
            INSERT INTO message_files (app_id, file_id, message_id)
            SELECT DISTINCT m.app_id, f.id #>> '{}', m.message_id
            FROM messages m CROSS JOIN LATERAL jsonb_path_query(m.body::jsonb, 'lax $.**.file_id') AS f(id)
            WHERE m.app_id = \(appID) AND m.message_id = ANY(\(messageIDs)) AND m.type IN (10, 11, 12, 13, 14) AND m.body IS NOT NULL
            ON CONFLICT DO NOTHING
            """)
    }
}
