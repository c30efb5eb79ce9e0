import ParleyAPI
import ParleyCore

/// The `Content-Type` a file is stored and served with (docs/files.md#the-file-object): for images, what its first
/// bytes say it is, never the client's claim (a `.jpg` that is not an image is refused); for audio and video, the
/// client's type when it is one of that kind, else the extension's; for other files, the client's type. Downloads also
/// carry `X-Content-Type-Options: nosniff` and a sandboxing `Content-Security-Policy`, so a claimed `text/html` is
/// never run as a page of this origin.
enum FileSniffing {
    /// Bytes of the head kept for sniffing.
    static let headBytes = 64

    /// The image format that `head` starts with, as a MIME type; nil for none Parley reads.
    static func imageMimeType(_ head: [UInt8]) -> String? {
        func starts(_ prefix: [UInt8], at offset: Int = 0) -> Bool {
            head.count >= offset + prefix.count && Array(head[offset..<offset + prefix.count]) == prefix
        }
        if starts([0xFF, 0xD8, 0xFF]) { return "image/jpeg" }
        if starts([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return "image/png" }
        if starts(Array("GIF87a".utf8)) || starts(Array("GIF89a".utf8)) { return "image/gif" }
        if starts(Array("BM".utf8)) && head.count >= 26 { return "image/bmp" }
        if starts([0x49, 0x49, 0x2A, 0x00]) || starts([0x4D, 0x4D, 0x00, 0x2A]) { return "image/tiff" }
        if starts(Array("RIFF".utf8)) && starts(Array("WEBP".utf8), at: 8) { return "image/webp" }
        return nil
    }

    static func mimeType(kind: FileKind, head: [UInt8], claimed: String?, fileName: String) throws -> String {
        switch kind {
        case .image:
            guard let sniffed = imageMimeType(head) else {
                throw APIError(.fileTypeUnsupported, "the content of \"\(fileName)\" is no image format Parley reads")
            }
            return sniffed
        case .audio, .video:
            if let claimed, claimed.hasPrefix(kind.rawValue + "/") { return claimed }
            return byExtension[StoredFile.fileExtension(of: fileName).lowercased()] ?? "application/octet-stream"
        case .file:
            return claimed ?? "application/octet-stream"
        }
    }

    private static let byExtension = ["mp3": "audio/mpeg", "mp4": "video/mp4", "mov": "video/quicktime"]

    /// A client's `Content-Type` as a bare lower-case `type/subtype` (parameters dropped), nil when it is not one.
    static func normalised(_ contentType: String?) -> String? {
        guard let contentType else { return nil }
        let essence = contentType.split(separator: ";", maxSplits: 1).first.map { $0.trimmingCharacters(in: " \t") } ?? ""
        let parts = essence.lowercased().split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, parts.allSatisfy({ !$0.isEmpty && $0.utf8.count <= 64 && $0.utf8.allSatisfy(isTokenByte) }) else { return nil }
        return parts.joined(separator: "/")
    }

    private static func isTokenByte(_ c: UInt8) -> Bool {
        switch c {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "&"), UInt8(ascii: "-"), UInt8(ascii: "^"),
            UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "+"):
            true
        default: false
        }
    }
}

extension StringProtocol {
    /// The text without the characters of `set` at either end.
    func trimmingCharacters(in set: String) -> String {
        var s = Substring(self)
        while let first = s.first, set.contains(first) { s.removeFirst() }
        while let last = s.last, set.contains(last) { s.removeLast() }
        return String(s)
    }
}
