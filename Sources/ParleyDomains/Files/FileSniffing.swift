import ParleyAPI
import ParleyCore

/// The `Content-Type` a file is stored and served with (docs/files.md#the-file-object): for images, what their decoded
/// content is (``ImageDerivation``), never the client's claim (a `.jpg` that is not an image is refused); for audio and video, the
/// client's type when it is one of that kind, else the extension's; for other files, the client's type. Downloads also
/// carry `X-Content-Type-Options: nosniff` and a sandboxing `Content-Security-Policy`, so a claimed `text/html` is
/// never run as a page of this origin.
enum FileSniffing {
    /// The type a file that is not an image is stored with (images get theirs from their decoded content,
    /// ``ImageDerivation``).
    static func mimeType(kind: FileKind, claimed: String?, fileName: String) -> String {
        switch kind {
        case .audio, .video:
            if let claimed, claimed.hasPrefix(kind.rawValue + "/") { return claimed }
            return byExtension[StoredFile.fileExtension(of: fileName).lowercased()] ?? "application/octet-stream"
        case .file, .image:
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
