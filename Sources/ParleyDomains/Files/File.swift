import ParleyAPI
import ParleyCore

/// What a file is for (docs/files.md#the-file-object): it decides the size limit, the extensions allowed and what
/// the server derives from it.
package enum FileKind: String, CaseIterable, Sendable {
    case image, file, audio, video

    /// File-name extensions the kind accepts (lowercase), nil for any: the extensions media messages of the same kind
    /// accept (docs/messages.md#sending).
    package var allowedExtensions: Set<String>? {
        switch self {
        case .image: ["jpg", "jpeg", "png", "bmp", "gif", "tiff"]
        case .audio: ["mp3"]
        case .video: ["mp4", "mov"]
        case .file: nil
        }
    }

    /// The kind of a file named with `fileExtension` when the upload does not say (`file` when no media kind takes it).
    static func guessed(fromExtension fileExtension: String) -> FileKind {
        let lowered = fileExtension.lowercased()
        return [.image, .audio, .video].first { $0.allowedExtensions?.contains(lowered) == true } ?? .file
    }
}

/// One stored file (docs/files.md#the-file-object): its metadata; the bytes are a blob shared by every file of the app
/// with the same content.
package struct StoredFile: Sendable {
    var fileID: String
    var kind: FileKind
    var fileName: String
    var mimeType: String
    var size: Int64
    /// Lower-case hex SHA-256 of the bytes as uploaded (the download's `ETag`).
    var sha256: String
    var blobID: String
    var ownerID: String?
    var createdAt: Int64
    var width: Int64?
    var height: Int64?
    var durationMillis: Int64?

    /// The File object, with download URLs signed by `urls` (nil: the file's own URL only is left out, for events).
    func json(urls: FileURLSigner.Issued) -> [UInt8] {
        var o = JSONObjectWriter(capacity: 512 + fileName.utf8.count)
        o["file_id"] = fileID
        o["kind"] = kind.rawValue
        o["file_name"] = fileName
        o["mime_type"] = mimeType
        o["file_size"] = size
        o["sha256"] = sha256
        o["owner_id"] = ownerID
        o["created_at"] = createdAt
        o["url"] = urls.url(fileID: fileID, variant: .original)
        switch kind {
        case .image:
            o["width"] = width
            o["height"] = height
        case .video, .audio:
            o["duration_ms"] = durationMillis
        case .file: break
        }
        return o.finish()
    }

    /// The extension of `fileName` (after its last dot), "" when it has none.
    static func fileExtension(of fileName: String) -> String {
        guard let dot = fileName.lastIndex(of: "."), dot != fileName.startIndex else { return "" }
        return String(fileName[fileName.index(after: dot)...])
    }
}

/// Limits of the file domain that are not app settings.
package enum FileLimits {
    /// Bytes per stored chunk: small enough that a chunk is one modest bytea value, large enough that a 100 MiB file
    /// is 400 rows.
    static let chunkBytes = 256 * 1024
    /// Chunks written or read per round trip (one transaction of writes, one statement of reads).
    static let chunksPerRoundTrip = 4
    /// The largest `file_max_bytes` allows: every upload route accepts a body this large, and the app's own setting
    /// cuts it shorter.
    static let largestUpload = 2_147_483_648
    /// File names: 1–255 bytes of UTF-8 without control characters or path separators.
    static let fileNameMaxBytes = 255
    /// An upload's blob still `uploading` this long after it started was abandoned (its node died mid-upload).
    static let abandonedUploadMillis: Int64 = 24 * 3_600_000
}
