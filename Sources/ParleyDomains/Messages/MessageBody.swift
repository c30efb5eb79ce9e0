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
