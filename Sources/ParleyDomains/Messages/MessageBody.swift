import ParleyAPI
import ParleyCore

/// A validated, normalised message body (docs/messages.md#sending), with the views the send pipeline needs:
/// the texts the sensitive-word filter reads and rewrites, the default push content and the search text.
///
/// Built by ``MessageBodyValidator``, or from a stored body (the JSON the validator produced earlier). A value
/// type with no shared state: each request owns its copy.
struct MessageBody: Sendable {
    package let type: MessageType
    /// The body as stored and returned: only the fields of the type's table row, in table order, without unknown
    /// keys; optional fields the sender left out are absent (not `null`). Type 10 items are `{type, body}` with
    /// each item body normalised the same way. For type 100 this is the validated send form (`title`, `summary`,
    /// `message_ids`); the stored form is ``combineStored(combineID:messageCount:)``.
    var json: JSONValue
    /// For type 100: the validated `message_ids` to snapshot, in request order and without duplicates (the caller
    /// resolves them; 404 `7000210` is its check). Empty for other types.
    let combineMessageIDs: [String]

    init(type: MessageType, json: JSONValue, combineMessageIDs: [String] = []) {
        self.type = type
        self.json = json
        self.combineMessageIDs = combineMessageIDs
    }

    /// The uploaded files the body names by `file_id` (docs/files.md#files-in-messages): a media body's own, or its
    /// media items' (type 10), in order, each once.
    var fileIDs: [String] { Self.fileIDs(in: json, type: type) }

    /// The `file_id`s of a body of `type` (validated or stored).
    static func fileIDs(in json: JSONValue, type: MessageType) -> [String] {
        var ids: [String] = []
        for media in mediaBodies(json, type: type) {
            if let id = media["file_id"]?.stringValue, !ids.contains(id) { ids.append(id) }
        }
        return ids
    }

    /// The media bodies (types 11–14) of a body of `type`: itself, or the media items of type 10, with their types.
    static func mediaBodies(_ json: JSONValue, type: MessageType) -> [JSONValue] {
        switch type {
        case .image, .file, .audio, .video: return [json]
        case .multiple:
            return (json["items"]?.arrayValue ?? []).compactMap { item in
                guard let raw = item["type"]?.intValue, let itemType = MessageType(rawValue: raw), itemType.isMedia else { return nil }
                return item["body"]
            }
        default: return []
        }
    }

    /// `json` (a body of `type`) with each media body (itself, or the media items of type 10) replaced by `transform`
    /// of it and its type; everything else as it was.
    static func mappingMedia(
        of json: JSONValue, type: MessageType, _ transform: (MessageType, JSONObject) throws -> JSONObject
    ) rethrows -> JSONValue {
        switch type {
        case .image, .file, .audio, .video:
            guard case .object(let media) = json else { return json }
            return .object(try transform(type, media))
        case .multiple:
            guard case .object(var body) = json, case .array(var items)? = body["items"] else { return json }
            for i in items.indices {
                guard case .object(var item) = items[i], let raw = item["type"]?.intValue, let itemType = MessageType(rawValue: raw),
                    itemType.isMedia, case .object(let media)? = item["body"]
                else { continue }
                item["body"] = .object(try transform(itemType, media))
                items[i] = .object(item)
            }
            body["items"] = .array(items)
            return .object(body)
        default:
            return json
        }
    }

    /// The push content default for text is cut to this many characters (docs/push.md#what-is-pushed-to-whom).
    static let pushSummaryMaxCharacters = 100

    /// The stored body of a type-100 message once its snapshot `combineID` holds `messageCount` messages.
    func combineStored(combineID: String, messageCount: Int) -> JSONValue {
        [
            "combine_id": .string(combineID),
            "title": json["title"] ?? "",
            "summary": json["summary"] ?? "",
            "message_count": .int(Int64(messageCount)),
        ]
    }

    // MARK: - Sensitive-word filter

    /// The texts the sensitive-word filter applies to (docs/messages.md#sending): the `text` of types 1 and 20 and of
    /// the text items of type 10. Command (2) and custom (200) data are opaque to the server and never filtered.
    var filterableTexts: [String] {
        switch type {
        case .text, .barrage:
            return json["text"]?.stringValue.map { [$0] } ?? []
        case .multiple:
            return (json["items"]?.arrayValue ?? []).compactMap { item in
                item["type"]?.intValue == MessageType.text.rawValue ? item["body"]?["text"]?.stringValue : nil
            }
        default:
            return []
        }
    }

    /// Rewrites every filterable text with `transform` (masking, the app setting `sensitive_word_action`), keeping
    /// everything else, including the order of keys and items.
    mutating func mapFilterableTexts(_ transform: (String) -> String) {
        switch type {
        case .text, .barrage:
            json = Self.mappingText(of: json, transform)
        case .multiple:
            guard case .object(var body) = json, case .array(var items)? = body["items"] else { return }
            for i in items.indices where items[i]["type"]?.intValue == MessageType.text.rawValue {
                guard case .object(var item) = items[i], let itemBody = item["body"] else { continue }
                item["body"] = Self.mappingText(of: itemBody, transform)
                items[i] = .object(item)
            }
            body["items"] = .array(items)
            json = .object(body)
        default:
            break
        }
    }

    private static func mappingText(of body: JSONValue, _ transform: (String) -> String) -> JSONValue {
        guard case .object(var object) = body, let text = object["text"]?.stringValue else { return body }
        object["text"] = .string(transform(text))
        return .object(object)
    }

    // MARK: - Push and search

    /// The default push content (docs/push.md#what-is-pushed-to-whom): the text cut to 100 characters for type 1,
    /// otherwise `[Image]`, `[File]`, `[Audio]`, `[Video]` or `[Message]`.
    ///
    /// "Characters" are Swift `Character`s (extended grapheme clusters), so the cut never splits an emoji, a flag
    /// or a letter with combining marks; no ellipsis is added.
    var pushSummary: String {
        switch type {
        case .text: String((json["text"]?.stringValue ?? "").prefix(Self.pushSummaryMaxCharacters))
        case .image: "[Image]"
        case .file: "[File]"
        case .audio: "[Audio]"
        case .video: "[Video]"
        default: "[Message]"
        }
    }

    /// The field values message search matches (docs/messages.md#search), in body order: type 1 `text`; 200
    /// `searched_content`; 11–14 `file_name`; 100 `title` and `summary`; 10 its text items and file names.
    /// Empty values are left out.
    var searchableFields: [String] {
        var out: [String] = []
        Self.collectSearchable(type, json, into: &out)
        return out.filter { !$0.isEmpty }
    }

    /// ``searchableFields`` joined by newlines, for a single search column. A keyword cannot match across two
    /// fields unless it contains a newline itself, which search keywords (split on spaces, docs/messages.md#search)
    /// rarely do.
    var searchableText: String { searchableFields.joined(separator: "\n") }

    private static func collectSearchable(_ type: MessageType, _ body: JSONValue, into out: inout [String]) {
        func add(_ key: String) {
            if let s = body[key]?.stringValue { out.append(s) }
        }
        switch type {
        case .text: add("text")
        case .custom: add("searched_content")
        case .image, .file, .audio, .video: add("file_name")
        case .combine:
            add("title")
            add("summary")
        case .multiple:
            for item in body["items"]?.arrayValue ?? [] {
                guard let raw = item["type"]?.intValue, let itemType = MessageType(rawValue: raw),
                    itemType == .text || itemType.isMedia,
                    let itemBody = item["body"]
                else { continue }
                collectSearchable(itemType, itemBody, into: &out)
            }
        case .command, .barrage, .revoke, .tips: break
        }
    }
}
