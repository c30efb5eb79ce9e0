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
    /// The stored bytes served for each variant other than a plain file's original: an image's `original` (its bytes
    /// without metadata, not the bytes as uploaded), `large` and `thumbnail`.
    var variants: [FileURLSigner.Variant: FileVariant] = [:]

    /// What a download of `variant` serves; nil when the file has no such variant.
    func served(_ variant: FileURLSigner.Variant) -> FileVariant? {
        if let stored = variants[variant] { return stored }
        guard variant == .original else { return nil }
        return FileVariant(blobID: blobID, sha256: sha256, size: size, mimeType: mimeType, width: width, height: height)
    }

    /// The File object, with download URLs signed by `urls`.
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
            for variant in [FileURLSigner.Variant.large, .thumbnail] {
                let stored = variants[variant]
                o["\(variant.rawValue)_url"] = stored.map { _ in urls.url(fileID: fileID, variant: variant) }
                o["\(variant.rawValue)_width"] = stored?.width
                o["\(variant.rawValue)_height"] = stored?.height
            }
        case .video:
            let frame = variants[.firstFrame]
            o["first_frame_url"] = frame.map { _ in urls.url(fileID: fileID, variant: .firstFrame) }
            o["first_frame_width"] = frame?.width
            o["first_frame_height"] = frame?.height
            o["duration_ms"] = durationMillis
        case .audio:
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

/// Bytes a file serves for one variant: a stored blob with its hash (the download's `ETag`), size, type and, for
/// images, dimensions.
package struct FileVariant: Sendable, Equatable {
    var blobID: String
    var sha256: String
    var size: Int64
    var mimeType: String
    var width: Int64?
    var height: Int64?

    /// The `variants` column: `{"large": {"blob_id", "sha256", "size", "mime_type", "width", "height"}, …}`.
    static func json(_ variants: [FileURLSigner.Variant: FileVariant]) -> String {
        var o = JSONObjectWriter(capacity: 128 * variants.count + 2)
        for (name, variant) in variants.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            var v = JSONObjectWriter(capacity: 192)
            v["blob_id"] = variant.blobID
            v["sha256"] = variant.sha256
            v["size"] = variant.size
            v["mime_type"] = variant.mimeType
            v["width"] = variant.width
            v["height"] = variant.height
            o.raw(name.rawValue, v.finish())
        }
        return String(decoding: o.finish(), as: UTF8.self)
    }

    /// Reads the `variants` column back; entries that do not read are left out (a download of them is then 404).
    static func parse(_ json: String) -> [FileURLSigner.Variant: FileVariant] {
        guard let object = (try? JSONValue.parse(Array(json.utf8)))?.objectValue else { return [:] }
        var out: [FileURLSigner.Variant: FileVariant] = [:]
        for (name, value) in object {
            guard let variant = FileURLSigner.Variant(rawValue: name), let blobID = value["blob_id"]?.stringValue,
                let sha256 = value["sha256"]?.stringValue, let size = value["size"]?.intValue, let mimeType = value["mime_type"]?.stringValue
            else { continue }
            out[variant] = FileVariant(
                blobID: blobID, sha256: sha256, size: size, mimeType: mimeType, width: value["width"]?.intValue,
                height: value["height"]?.intValue)
        }
        return out
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
