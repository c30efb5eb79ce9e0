import ParleyAPI
import ParleyCore

/// Validates and normalises the `type` and `body` of a message (the body and length rules of docs/messages.md#sending)
/// for every path that accepts one: send, batch send, broadcast, import, edit and hook patches.
///
/// Problems are ranked as validation ranks them in a send (docs/messages.md#sending), first kind wins: field, enum and
/// JSON-type problems → 400 `6000001` listing every invalid field; a `text`/`data` over its byte limit → 413 `7000201`;
/// a media extension the type does not allow → 422 `6000213`; an item type not allowed in type 10 → 422 `6000013`.
/// Which types a conversation kind accepts (barrage in rooms only …) is the caller's check.
enum MessageBodyValidator {
    // Limits of message bodies that are not app settings (text and custom `data` use `text_max_bytes`).
    static let fileNameMaxBytes = 255
    /// File ids are `f_` + 22 characters; anything longer names no file.
    static let fileIDMaxBytes = 64
    /// Not a documented API limit: RFC 6838 caps a media type's name at 127 + 1 + 127 characters.
    static let mimeTypeMaxBytes = 255
    static let commandMaxBytes = 5120
    static let barrageMaxBytes = 5120
    static let customSubTypes: ClosedRange<Int64> = 0...200
    static let searchedContentMaxBytes = 64
    static let combineTitleMaxBytes = 128
    static let combineSummaryMaxBytes = 512
    static let combineMaxMessages = 100
    static let multipleMaxItems = 20
    static let multipleMaxImages = 10

    /// Validates `body` for `type`.
    ///
    /// Field paths are `type`, `body`, `body.text`, `body.items[2].body.url` (type-10 items are `{type, body}`).
    /// - Parameter textMaxBytes: the app setting `text_max_bytes` (limit of text bodies and custom `data`).
    /// - Throws: the highest-ranked problem (see the type's documentation). Types 31 and 32 (server-produced
    ///   only), 0, 30 and unknown types → 400 `6000001` naming `type`.
    static func validate(type: Int64, body: JSONValue?, textMaxBytes: Int) throws(APIError) -> MessageBody {
        let outcome = evaluate(
            type: type, typePath: "type", body: body, bodyPath: "body", textMaxBytes: textMaxBytes)
        if !outcome.fieldErrors.isEmpty { throw .invalidParams(outcome.fieldErrors) }
        if let problem = outcome.problem { throw problem }
        guard let messageBody = outcome.body else { throw .internalError }
        return messageBody
    }

    /// Reads the members `type` and `body` of a send-shaped request with the caller's reader, so that one 400
    /// lists the body's invalid fields together with the request's other ones.
    ///
    /// Call it after reading every other field, then ``BodyReader/check()``: field errors go to `reader` (and
    /// nil is returned); a 413/422 is thrown only when `reader` has no field error at all, because every 400
    /// outranks it (the validation order of docs/messages.md#sending).
    static func read(from reader: inout BodyReader, textMaxBytes: Int) throws(APIError) -> MessageBody? {
        guard let type = reader.int("type", required: true) else {
            _ = reader.value("body", required: true)
            return nil
        }
        let outcome = evaluate(
            type: type, typePath: reader.fieldPath("type"), body: reader.value("body"),
            bodyPath: reader.fieldPath("body"), textMaxBytes: textMaxBytes)
        for error in outcome.fieldErrors { reader.addError(path: error.field, error.message) }
        guard reader.errors.isEmpty else { return nil }
        if let problem = outcome.problem { throw problem }
        return outcome.body
    }

    // MARK: - Evaluation

    /// The problems that rank after every field error, each kept as its first occurrence in reading order.
    private struct LaterProblems {
        var tooLarge: String?
        var badExtension: String?
        var unsupportedItem: String?

        mutating func tooLarge(_ path: String, bytes: Int, limit: Int, what: String = "") {
            if tooLarge == nil { tooLarge = "\(path) is \(bytes)\(what) bytes, over the limit of \(limit) bytes" }
        }

        /// The highest-ranked problem: 413 `7000201`, then 422 `6000213`, then 422 `6000013`.
        var first: APIError? {
            if let tooLarge { return APIError(.messageTooLarge, tooLarge) }
            if let badExtension { return APIError(.fileTypeUnsupported, badExtension) }
            if let unsupportedItem { return APIError(.unsupportedOperation, unsupportedItem) }
            return nil
        }
    }

    private static func evaluate(
        type: Int64, typePath: String, body: JSONValue?, bodyPath: String, textMaxBytes: Int
    ) -> (body: MessageBody?, fieldErrors: [FieldError], problem: APIError?) {
        var shapeErrors: [FieldError] = []
        let messageType = MessageType(rawValue: type)
        if messageType == nil {
            shapeErrors.append(FieldError(field: typePath, message: "unsupported message type \(type)"))
        } else if let messageType, !messageType.isSendable {
            shapeErrors.append(
                FieldError(field: typePath, message: "\(messageType.label) is produced by the server only"))
        }
        guard case .object(let object)? = body else {
            let message = body.map { "expected object, got \($0.typeName)" } ?? "is required"
            shapeErrors.append(FieldError(field: bodyPath, message: message))
            return (nil, shapeErrors, nil)
        }
        guard let messageType, shapeErrors.isEmpty else { return (nil, shapeErrors, nil) }

        var reader = BodyReader(object, path: bodyPath)
        var later = LaterProblems()
        var combineIDs: [String] = []
        let json: JSONObject
        switch messageType {
        case .multiple: json = readMultiple(&reader, &later, textMaxBytes: textMaxBytes)
        case .combine: json = readCombine(&reader, combineIDs: &combineIDs)
        default: json = readSingle(messageType, &reader, &later, textMaxBytes: textMaxBytes)
        }
        if !reader.errors.isEmpty { return (nil, reader.errors, nil) }
        if let problem = later.first { return (nil, [], problem) }
        return (MessageBody(type: messageType, json: .object(json), combineMessageIDs: combineIDs), [], nil)
    }

    // MARK: - Per type

    /// The body of every type that may also be an item of type 10 (1, 11–14, 200), plus 2 and 20.
    private static func readSingle(
        _ type: MessageType, _ r: inout BodyReader, _ later: inout LaterProblems, textMaxBytes: Int
    ) -> JSONObject {
        var out = JSONObject()
        switch type {
        case .text:
            out["text"] = sizedText("text", &r, &later, minBytes: 1, maxBytes: textMaxBytes).map(JSONValue.string)
        case .barrage:
            out["text"] = sizedText("text", &r, &later, minBytes: 1, maxBytes: barrageMaxBytes).map(JSONValue.string)
        case .command:
            out["data"] = commandData(&r, &later).map(JSONValue.string)
        case .custom:
            out["data"] = sizedText("data", &r, &later, minBytes: 0, maxBytes: textMaxBytes).map(JSONValue.string)
            out["sub_type"] = r.int("sub_type", required: true, range: customSubTypes).map(JSONValue.int)
            out["searched_content"] = r.string("searched_content", maxBytes: searchedContentMaxBytes)
                .map(JSONValue.string)
        case .image, .file, .audio, .video:
            // A body naming an uploaded file (`file_id`, docs/files.md#files-in-messages) needs no `url`, `file_name` or
            // `duration_ms`: the server fills them from the file once it has read it (``MessageFiles``).
            let fileID = r.string("file_id", minBytes: 1, maxBytes: fileIDMaxBytes)
            if let fileID { out["file_id"] = .string(fileID) }
            let fromFile = fileID != nil
            for (key, kind) in mediaLayout(type) {
                let value: JSONValue?
                switch kind {
                case .url(let required): value = r.httpURL(key, required: required && !fromFile).map(JSONValue.string)
                case .fileName: value = fileName(type, &r, &later, required: !fromFile).map(JSONValue.string)
                case .size: value = r.int(key, range: 0...Int64.max).map(JSONValue.int)
                case .duration: value = r.int(key, required: !fromFile, range: 1...Int64.max).map(JSONValue.int)
                case .mimeType: value = r.string(key, maxBytes: mimeTypeMaxBytes).map(JSONValue.string)
                }
                out[key] = value
            }
        case .multiple, .combine, .revoke, .tips:
            // Never reached: evaluate() and readMultiple() route these types elsewhere or reject them first.
            break
        }
        return out
    }

    /// Type 10: 1–20 `{type, body}` items of types 1, 11–14 and 200, each with that type's rules.
    private static func readMultiple(_ r: inout BodyReader, _ later: inout LaterProblems, textMaxBytes: Int)
        -> JSONObject
    {
        var counts: [MessageType: Int] = [:]
        let items = r.objectArray("items", required: true, minItems: 1, maxItems: multipleMaxItems) {
            item, _ -> JSONValue in
            var out = JSONObject()
            guard let raw = item.int("type", required: true) else {
                _ = item.value("body", required: true)
                return .object(out)
            }
            guard let itemType = MessageType(rawValue: raw) else {
                item.addError("type", "unsupported message type \(raw)")
                return .object(out)
            }
            out["type"] = .int(raw)
            guard itemType.isAllowedInMultiple else {
                if later.unsupportedItem == nil {
                    later.unsupportedItem =
                        "\(item.fieldPath("type")): \(itemType.label) is not allowed in a type-10 message "
                        + "(allowed: 1, 11, 12, 13, 14, 200)"
                }
                return .object(out)
            }
            counts[itemType, default: 0] += 1
            let body = item.object("body", required: true) { body in
                readSingle(itemType, &body, &later, textMaxBytes: textMaxBytes)
            }
            out["body"] = body.map(JSONValue.object)
            return .object(out)
        }
        // ZIM's limits per multiple message: ≤ 10 images, ≤ 1 each of file, audio, video and custom.
        var excess: [String] = []
        if counts[.image, default: 0] > multipleMaxImages { excess.append("more than \(multipleMaxImages) images") }
        for type in [MessageType.file, .audio, .video, .custom] where counts[type, default: 0] > 1 {
            excess.append("more than one \(type.name) item")
        }
        if !excess.isEmpty { r.addError("items", "has " + excess.joined(separator: " and ")) }
        var out = JSONObject()
        out["items"] = items.map(JSONValue.array)
        return out
    }

    /// Type 100 in its send form; `message_ids` also go to `combineIDs`.
    private static func readCombine(_ r: inout BodyReader, combineIDs: inout [String]) -> JSONObject {
        var out = JSONObject()
        out["title"] = r.string("title", required: true, minBytes: 1, maxBytes: combineTitleMaxBytes)
            .map(JSONValue.string)
        out["summary"] = .string(r.string("summary", maxBytes: combineSummaryMaxBytes) ?? "")
        let ids = r.stringArray(
            "message_ids", required: true, minItems: 1, maxItems: combineMaxMessages, itemKind: .opaque)
        if let ids {
            // A repeated id would snapshot one message twice; like a repeated batch item it is a 400
            // (docs/errors.md#problems-rfc-9457).
            var firstIndex: [String: Int] = [:]
            for (i, id) in ids.enumerated() {
                if let first = firstIndex[id] {
                    r.addError(path: "\(r.fieldPath("message_ids"))[\(i)]", "repeats message_ids[\(first)]")
                } else {
                    firstIndex[id] = i
                }
            }
            combineIDs = ids
            out["message_ids"] = .array(ids.map(JSONValue.string))
        }
        return out
    }

    // MARK: - Fields

    private enum MediaField {
        case url(required: Bool)
        case fileName
        case size
        case duration
        case mimeType
    }

    private static let imageLayout: [(String, MediaField)] = [
        ("url", .url(required: true)), ("file_name", .fileName), ("file_size", .size), ("mime_type", .mimeType),
        ("width", .size), ("height", .size), ("thumbnail_url", .url(required: false)), ("thumbnail_width", .size),
        ("thumbnail_height", .size), ("large_image_url", .url(required: false)), ("large_width", .size),
        ("large_height", .size),
    ]
    private static let fileLayout: [(String, MediaField)] = [
        ("url", .url(required: true)), ("file_name", .fileName), ("file_size", .size), ("mime_type", .mimeType),
    ]
    private static let audioLayout: [(String, MediaField)] = [
        ("url", .url(required: true)), ("file_name", .fileName), ("duration_ms", .duration), ("file_size", .size),
    ]
    private static let videoLayout: [(String, MediaField)] = [
        ("url", .url(required: true)), ("file_name", .fileName), ("duration_ms", .duration), ("file_size", .size),
        ("first_frame_url", .url(required: false)), ("first_frame_width", .size), ("first_frame_height", .size),
    ]

    /// The members of a media body of `type` in documented order (after `file_id`), which is also the order of the
    /// stored body.
    static func mediaKeys(_ type: MessageType) -> [String] { mediaLayout(type).map(\.0) }

    /// The fields of a media body in documented order, which is also the order of the stored body.
    private static func mediaLayout(_ type: MessageType) -> [(String, MediaField)] {
        switch type {
        case .image: imageLayout
        case .audio: audioLayout
        case .video: videoLayout
        default: fileLayout
        }
    }

    /// A `text`/`data` member under the length rules of a message body: below `minBytes` (an empty text) is a field
    /// error, over `maxBytes` a 413.
    private static func sizedText(
        _ key: String, _ r: inout BodyReader, _ later: inout LaterProblems, minBytes: Int, maxBytes: Int
    ) -> String? {
        guard let text = r.string(key, required: true, minBytes: minBytes) else { return nil }
        let bytes = text.utf8.count
        if bytes > maxBytes {
            later.tooLarge(r.fieldPath(key), bytes: bytes, limit: maxBytes)
            return nil
        }
        return text
    }

    /// Command `data`: standard base64 (padding optional) of 1–5120 bytes, stored in canonical padded form.
    private static func commandData(_ r: inout BodyReader, _ later: inout LaterProblems) -> String? {
        guard let text = r.string("data", required: true) else { return nil }
        guard let bytes = decodeBase64(text) else {
            r.addError("data", "must be standard base64")
            return nil
        }
        if bytes.isEmpty {
            r.addError("data", "must not be empty")
            return nil
        }
        if bytes.count > commandMaxBytes {
            later.tooLarge(r.fieldPath("data"), bytes: bytes.count, limit: commandMaxBytes, what: " decoded")
            return nil
        }
        return Crypto.base64Encode(bytes)
    }

    /// Standard base64 with or without its `=` padding (senders differ; both mean the same bytes).
    static func decodeBase64(_ text: String) -> [UInt8]? {
        switch text.utf8.count % 4 {
        case 2: Crypto.base64Decode(text + "==")
        case 3: Crypto.base64Decode(text + "=")
        default: Crypto.base64Decode(text)
        }
    }

    /// `file_name`: 1–255 bytes with an extension the type allows (compared case-insensitively). A disallowed
    /// extension is a 422 `6000213`; a file (type 12) without any extension is a field error.
    private static func fileName(_ type: MessageType, _ r: inout BodyReader, _ later: inout LaterProblems, required: Bool) -> String? {
        guard let name = r.string("file_name", required: required, minBytes: 1, maxBytes: fileNameMaxBytes) else {
            return nil
        }
        let ext = fileExtension(name)
        if let allowed = type.allowedExtensions {
            if ext.map(allowed.contains) != true, later.badExtension == nil {
                let found = ext.map { "extension .\($0)" } ?? "no extension"
                later.badExtension =
                    "\(r.fieldPath("file_name")) has \(found); \(type.label) accepts "
                    + allowed.sorted().map { ".\($0)" }.joined(separator: ", ")
            }
        } else if ext == nil {
            r.addError("file_name", "must have an extension")
            return nil
        }
        return name
    }

    /// The lowercased text after the last `.` of `name`, or nil when there is none (no dot, a trailing dot, or
    /// only a leading dot as in `.profile`).
    static func fileExtension(_ name: String) -> String? {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return nil }
        let ext = name[name.index(after: dot)...]
        return ext.isEmpty ? nil : ext.lowercased()
    }
}
