import ParleyAPI
import ParleyCore

/// A send that passed validation (docs/messages.md#sending): the fields of `POST /v1/messages`, or
/// of one recipient of a batch send, with the body validated by ``MessageBodyValidator`` and the type/target/option
/// rules applied.
struct SendRequest: Sendable {
    var from: String
    var conversationType: ConversationType
    var to: String
    var body: MessageBody
    var clientMsgID: String?
    var extendedData: String
    var mentionIDs: [String]
    var mentionAll: Bool
    var notifyMentioned: Bool
    var replyTo: String?
    var priority: Int64
    var needReceipt: Bool
    var noUnread: Bool
    var onlineOnly: Bool
    /// Rooms only: store the message with a room seq (never with barrage).
    var storage: Bool
    /// Rooms only: keep the message in the room's recent cache (stored or not).
    var cache: Bool
    var repeatCount: Int64
    var push: JSONValue?
    var skipChecks: Bool
    var skipHooks: Bool
    /// A targeted group message (docs/messages.md#targeted-group-messages): the 1–100 distinct members who see it
    /// besides the sender; nil for every other send.
    var visibleTo: [String]?
    /// The files the body may name and the URLs it gets for them (docs/files.md#files-in-messages); nil when the body
    /// names none.
    let fileUse: FileUse?

    /// Types a peer or group message may have (docs/messages.md#sending); rooms add barrage (20).
    static let conversationTypes: Set<Int64> = [1, 2, 10, 11, 12, 13, 14, 100, 200]

    /// "Stored or not" (docs/messages.md#sending): stored unless command (2), barrage (20) or `online_only`, and in a
    /// room only with `storage: true`.
    var stored: Bool {
        body.type != .command && body.type != .barrage && !onlineOnly && (conversationType != .room || storage)
    }

    /// The dedupe content hash (docs/messages.md#deduplication-with-client_msg_id): conversation, type, body and
    /// extended_data as sent, before masking.
    let contentHash: String

    /// Reads and validates a send body. `batchRecipient` is set for one item of a batch send (`to_user_ids` replace
    /// `conversation_type`/`to`; the dedupe key is `client_msg_id:recipient`).
    init(_ r: inout BodyReader, ctx: some AppCaller, settings: AppSettings, batchRecipient: String? = nil) throws {
        let from = try ctx.actingUser(r.id("from", .userID), field: r.fieldPath("from"))
        skipChecks = try ctx.appOnlyFlag(r.bool("skip_checks"))
        skipHooks = try ctx.appOnlyFlag(r.bool("skip_hooks"))
        var conversationType = ConversationType.peer
        var to = batchRecipient ?? ""
        if batchRecipient == nil {
            conversationType = r.enumeration("conversation_type", ConversationType.self, required: true) ?? .peer
            let kind: IdentifierKind = conversationType == .group ? .groupID : conversationType == .room ? .roomID : .userID
            to = r.id("to", kind, required: true) ?? ""
            if conversationType == .peer && to == from { r.addError("to", "must differ from from") }
        }
        clientMsgID = r.id("client_msg_id", .clientMsgID)
        extendedData = r.string("extended_data", maxBytes: 1024) ?? ""
        var mentionIDs: [String] = []
        var mentionAll = false
        if r.contains("mentions") && !r.isNull("mentions") {
            _ = r.object("mentions") { m in
                mentionIDs = m.stringArray("user_ids", maxItems: 50, itemKind: .userID) ?? []
                mentionAll = m.bool("all") ?? false
            }
        }
        notifyMentioned = r.bool("notify_mentioned") ?? true
        replyTo = r.id("reply_to", .opaque)
        priority = r.int("priority", range: 1...3) ?? 2
        needReceipt = r.bool("need_receipt") ?? false
        noUnread = r.bool("no_unread") ?? false
        onlineOnly = r.bool("online_only") ?? false
        storage = r.bool("storage") ?? false
        cache = r.bool("cache") ?? false
        repeatCount = r.int("repeat_count", range: 1...1000) ?? 1
        push = PushConfig.read(from: &r, key: "push")
        visibleTo = nil
        if r.contains("visible_to") && !r.isNull("visible_to"),
            let ids = r.stringArray("visible_to", minItems: 1, maxItems: 100, itemKind: .userID)
        {
            var seen: Set<String> = []
            for (i, id) in ids.enumerated() where !seen.insert(id).inserted {
                r.addError(path: "\(r.fieldPath("visible_to"))[\(i)]", "duplicate user id \(id)")
            }
            visibleTo = ids
        }

        // The body is read last, so one 400 lists its invalid fields with the request's other ones.
        let validated = try MessageBodyValidator.read(from: &r, textMaxBytes: Int(settings.int("text_max_bytes")))
        try r.check()
        guard let body = validated else { throw APIError.internalError }
        fileUse = body.fileIDs.isEmpty ? nil : FileUse(ctx)
        let type: Int64? = body.type.rawValue

        // Type, target and option compatibility (422 unsupported_operation for a type or option that does not fit the
        // target).
        if conversationType == .room {
            if type != MessageType.barrage.rawValue && !Self.conversationTypes.contains(type ?? 0) {
                throw APIError(.unsupportedOperation, "type \(type ?? 0) cannot be sent to a room")
            }
            if storage && body.type == .barrage { throw APIError(.unsupportedOperation, "barrage (20) messages are never stored") }
        } else {
            if !Self.conversationTypes.contains(type ?? 0) {
                throw APIError(.unsupportedOperation, "type \(type ?? 0) cannot be sent to a \(conversationType.rawValue) conversation")
            }
            if storage || cache { throw APIError(.unsupportedOperation, "storage and cache apply to room messages only") }
        }
        if visibleTo != nil && conversationType != .group {
            throw APIError(.unsupportedOperation, "visible_to applies to group messages only")
        }
        if visibleTo != nil && mentionAll {
            throw APIError(.unsupportedOperation, "a targeted message (visible_to) cannot mention all members")
        }
        if conversationType == .peer && repeatCount != 1 {
            throw APIError(.unsupportedOperation, "repeat_count other than 1 applies to group and room messages only")
        }
        self.from = from
        self.conversationType = conversationType
        self.to = to
        self.body = body
        self.mentionAll = conversationType == .room ? false : mentionAll
        // Ids that are not participants are ignored (peer: the two users); mentions do not apply to rooms.
        var seen: Set<String> = []
        self.mentionIDs =
            conversationType == .room
            ? [] : mentionIDs.filter { (conversationType != .peer || $0 == to || $0 == from) && seen.insert($0).inserted }
        // Stored peer and group messages only (docs/messages.md#receipts).
        if needReceipt && (conversationType == .room || body.type == .command || body.type == .barrage || onlineOnly) {
            throw APIError(.unsupportedOperation, "need_receipt applies to stored peer and group messages only")
        }
        if let key = clientMsgID, let recipient = batchRecipient { clientMsgID = key + ":" + recipient }
        // Only a dedupe key needs the hash.
        contentHash =
            clientMsgID == nil
            ? "" : Self.contentHash(conversationType: conversationType, to: to, body: body, extendedData: extendedData)
    }

    /// SHA-256 (hex) of the conversation, type, body and extended_data.
    static func contentHash(conversationType: ConversationType, to: String, body: MessageBody, extendedData: String) -> String {
        var hashInput = JSONWriter(capacity: 256)
        hashInput.array { w in
            w.writeString(conversationType.rawValue)
            w.writeString(to)
            w.writeInt(body.type.rawValue)
            w.write(body.json)
            w.writeString(extendedData)
        }
        return Crypto.hex(Crypto.sha256(hashInput.bytes))
    }
}
