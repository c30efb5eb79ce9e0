import ParleyAPI
import ParleyCore

/// Message `type` (docs/messages.md#sending): the ZIM `ZIMMessageType` numbers, sent and stored as JSON integers.
///
/// 0 (unknown) and 30 (system, deprecated in ZIM) are never produced or accepted, so they have no case.
enum MessageType: Int64, Sendable, CaseIterable {
    case text = 1
    case command = 2
    case multiple = 10
    case image = 11
    case file = 12
    case audio = 13
    case video = 14
    case barrage = 20
    case revoke = 31
    case tips = 32
    case combine = 100
    case custom = 200

    /// The lowercase name used in problem details ("type 13 (audio)").
    package var name: String {
        switch self {
        case .text: "text"
        case .command: "command"
        case .multiple: "multiple"
        case .image: "image"
        case .file: "file"
        case .audio: "audio"
        case .video: "video"
        case .barrage: "barrage"
        case .revoke: "revoke"
        case .tips: "tips"
        case .combine: "combine"
        case .custom: "custom"
        }
    }

    /// Whether a send request may carry this type. Revoke and tips bodies are written by the server only
    /// (types 31 and 32 in a send request → 400).
    var isSendable: Bool { self != .revoke && self != .tips }

    /// Whether an item of a type-10 message may have this type (ZIM `ZIMMultipleMessage`: text, image, file,
    /// audio, video and custom only).
    var isAllowedInMultiple: Bool {
        switch self {
        case .text, .image, .file, .audio, .video, .custom: true
        default: false
        }
    }

    /// Whether the body references a media file by URL (image, file, audio, video).
    var isMedia: Bool {
        switch self {
        case .image, .file, .audio, .video: true
        default: false
        }
    }

    /// The file-name extensions a media type accepts (lowercase), nil when any extension is allowed, or for types
    /// without a file (the media body rules of docs/messages.md#sending; extensions are compared case-insensitively).
    var allowedExtensions: Set<String>? {
        switch self {
        case .image: ["jpg", "jpeg", "png", "bmp", "gif", "tiff"]
        case .audio: ["mp3"]
        case .video: ["mp4", "mov"]
        default: nil
        }
    }

    /// "type 13 (audio)", for problem details.
    var label: String { "type \(rawValue) (\(name))" }
}
