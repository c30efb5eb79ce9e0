import ParleyAPI
import ParleyCore
import ParleyPostgres

/// `POST /v1/messages/import` (docs/messages.md#import-and-export): NDJSON lines validated one by one, then written
/// set-based, many lines per statement and transaction, with no events, hooks, webhooks or pushes.
///
/// Seqs: each statement upserts the `conversation_seqs` rows of its conversations once (in key order, like
/// ``MessageWrite``), which locks them until commit, so imports and concurrent sends never share a seq and lines take
/// their conversation's next seqs in line order. Dedupe keys live in `message_keys` with sends' keys: (`from`,
/// `client_msg_id`), or (`from`, `"import:" + message_id`), with the send's content hash
/// (docs/messages.md#deduplication-with-client_msg_id), so a re-run answers `duplicate: true` and a changed line
/// `7000203`.
///
/// Conversation entries (docs/messages.md#import-and-export): imported messages raise no unread. A peer entry is
/// created with everything read; an existing entry (peer, or a group member's entry following the group head,
/// Migrations/0009) whose `read_seq` was at the previous `last_seq` moves to the new one, and one that had unread
/// messages keeps its `read_seq`.
struct MessageImport {
    /// The import route's request limits (docs/messages.md#import-and-export).
    static let maxLines = 10_000
    static let maxBytes = 32 * 1024 * 1024
    /// Lines per statement (and transaction): large enough that per-statement costs vanish, small enough that a
    /// batch's locks on busy conversations' seq rows are short.
    static let linesPerStatement = 1_000

    let appID: String
    let now: Int64
    let textMaxBytes: Int

    /// One validated line, ready for the statement.
    struct Line {
        var ord: Int
        var conversationType: ConversationType
        var threadID: String
        var from: String
        var to: String
        var messageID: String
        var clientMsgID: String?
        /// `client_msg_id`, or `"import:" + message_id`.
        var dedupeKey: String
        var contentHash: String
        var type: Int64
        /// The stored body JSON (nil for a tombstone).
        var body: [UInt8]?
        var extendedData: String
        var mentionIDs: [String]
        var mentionAll: Bool
        var priority: Int64
        var needReceipt: Bool
        var deleted: Bool
        /// A revoke record's `original_text`, kept in its column (shown only to the sender and the app).
        var originalText: String?
        var timestamp: Int64
        /// The body names uploaded files (``fillingFiles(_:urls:on:)``): the statement's transaction records which.
        var namesFiles = false
        /// An exported targeted group message's members (docs/messages.md#targeted-group-messages): kept, so a round
        /// trip shows it to no one else.
        var visibleTo: [String]? = nil
    }

    /// What a line came to: its message, or its problem.
    enum Outcome {
        case written(messageID: String, seq: Int64, duplicate: Bool)
        case failed(APIError)
    }

    // MARK: - Lines

    /// Validates one line (the field and body rules of a send, types 31 and 32 and tombstones as export writes them).
    /// Every problem is `6000001`: the statement decides existence and dedupe.
    func line(_ bytes: ArraySlice<UInt8>, ord: Int) throws(APIError) -> Line {
        let parsed = try BodyReader.parse(Array(bytes), path: "")
        // `null` counts as absent (an exported Message carries many nulls).
        var r = BodyReader(JSONObject(parsed.object.filter { !$0.value.isNull }.map { ($0.key, $0.value) }), path: "")
        let conversationType = r.enumeration("conversation_type", ConversationType.self, required: true) ?? .peer
        let from = r.id("from", .userID, required: true) ?? ""
        let kind: IdentifierKind = conversationType == .group ? .groupID : conversationType == .room ? .roomID : .userID
        let to = r.id("to", kind, required: true) ?? ""
        if conversationType == .peer && to == from && !to.isEmpty { r.addError("to", "must differ from from") }
        let type = r.int("type", required: true) ?? 0
        let timestamp = r.int("timestamp", required: true, range: 0...now)
        let clientMsgID = r.id("client_msg_id", .clientMsgID)
        let sourceID = r.id("message_id", .opaque)
        if clientMsgID == nil && sourceID == nil { r.addError("client_msg_id", "client_msg_id or message_id is required") }
        let extendedData = r.string("extended_data", maxBytes: 1024) ?? ""
        var mentionIDs: [String] = []
        var mentionAll = false
        if r.contains("mentions") {
            _ = r.object("mentions") { m in
                mentionIDs = m.stringArray("user_ids", maxItems: 50, itemKind: .userID) ?? []
                mentionAll = m.bool("all") ?? false
            }
        }
        let priority = r.int("priority", range: 1...3) ?? 2
        let needReceipt = r.bool("need_receipt") ?? false
        let deleted = r.bool("deleted") ?? false
        let visibleTo = r.stringArray("visible_to", minItems: 1, maxItems: 100, itemKind: .userID)
        if visibleTo != nil && conversationType != .group { r.addError("visible_to", "applies to group messages only") }
        let bodyValue = r.value("body")
        try r.check()

        var originalText: String?
        let body: MessageBody
        switch MessageType(rawValue: type) {
        case .command?, .barrage?:
            throw APIError.invalidParam("type", "type \(type) is never stored: it cannot be imported")
        case let messageType? where deleted:
            // A tombstone keeps only its envelope.
            if bodyValue != nil { throw APIError.invalidParam("body", "a deleted message has no body") }
            body = MessageBody(type: messageType, json: .null)
        case let messageType? where messageType == .revoke || messageType == .tips || messageType == .combine:
            // Server-produced bodies (a combine as stored, without its snapshots): kept as exported.
            guard case .object(var object)? = bodyValue else { throw APIError.invalidParam("body", "expected object") }
            if messageType == .revoke, let text = object["original_text"] {
                guard case .string(let text) = text else { throw APIError.invalidParam("body.original_text", "expected string") }
                originalText = text
                object["original_text"] = nil
            }
            body = MessageBody(type: messageType, json: .object(object))
        default:
            do {
                body = try MessageBodyValidator.validate(type: type, body: bodyValue, textMaxBytes: textMaxBytes)
            } catch {
                // Any violation of the field or body rules is a per-line 6000001, whatever its code in a send.
                throw error.code == .invalidParams ? error : APIError(.invalidParams, error.detail)
            }
        }
        let dedupeKey = clientMsgID ?? "import:" + (sourceID ?? "")
        var seen: Set<String> = []
        return Line(
            ord: ord, conversationType: conversationType, threadID: MessageStore.thread(conversationType, from, to), from: from, to: to,
            messageID: MessageService.newMessageID(stored: true, now: now), clientMsgID: clientMsgID, dedupeKey: dedupeKey,
            contentHash: SendRequest.contentHash(conversationType: conversationType, to: to, body: body, extendedData: extendedData),
            type: type, body: deleted ? nil : body.json.serialized(), extendedData: extendedData,
            mentionIDs: conversationType == .room ? [] : mentionIDs.filter { seen.insert($0).inserted },
            mentionAll: conversationType != .room && mentionAll, priority: priority, needReceipt: needReceipt && conversationType != .room,
            deleted: deleted, originalText: originalText, timestamp: timestamp ?? now,
            visibleTo: visibleTo.map { ids in
                var unique: Set<String> = []
                return ids.filter { unique.insert($0).inserted }
            })
    }

    /// `line` with the files its body names filled in from this app's files (docs/files.md#files-in-messages): an
    /// exported message names its files by `file_id`, and imports where those files exist (404 `6000211` where not).
    func fillingFiles(_ line: Line, urls: FileURLSigner.Issued, on db: PostgresConnection) throws -> Line {
        guard !line.deleted, let bytes = line.body, let type = MessageType(rawValue: line.type), type.isMedia || type == .multiple,
            let json = try? JSONValue.parse(bytes)
        else { return line }
        var body = MessageBody(type: type, json: json)
        guard !body.fileIDs.isEmpty else { return line }
        try MessageFiles.fill(&body, from: line.from, use: FileUse(urls: urls, byApp: true), appID: appID, now: now, on: db)
        var filled = line
        filled.body = body.json.serialized()
        filled.namesFiles = true
        return filled
    }

    // MARK: - Batches

    /// The batch results of `lines` (each with its 0-based line number; empty lines take no result), their `index`
    /// counted from `firstIndex`: every line validated, its files filled in, then the valid ones written. The request
    /// does it for the whole body; a job of `async=true` (``MessageImportJob``) for one slice of lines per step.
    func results(
        _ lines: ArraySlice<(number: Int, bytes: ArraySlice<UInt8>)>, firstIndex: Int, urls: FileURLSigner.Issued, on db: PostgresConnection
    ) throws -> [BatchResult] {
        // (line number, validated line or its problem) for every non-empty line.
        var parsed: [(number: Int, line: Result<Line, APIError>)] = []
        for (number, bytes) in lines where !bytes.isEmpty {
            var line = Result { () throws(APIError) in try self.line(bytes, ord: number) }
            if case .success(let valid) = line {
                do { line = .success(try fillingFiles(valid, urls: urls, on: db)) } catch let error as APIError {
                    line = .failure(error)
                }
            }
            parsed.append((number, line))
        }
        let valid = parsed.compactMap { try? $0.line.get() }
        var written = try write(valid, on: db)[...]
        var results: [BatchResult] = []
        results.reserveCapacity(parsed.count)
        for (index, item) in parsed.enumerated() {
            let outcome: BatchResult.Outcome
            switch item.line {
            case .failure(let error):
                outcome = .failed(error.code, error.detail)
            case .success:
                switch written.removeFirst() {
                case .written(let messageID, let seq, let duplicate):
                    var w = JSONWriter(capacity: 80)
                    w.object { w in
                        w.key(static: "message_id")
                        w.writeString(messageID)
                        w.key(static: "seq")
                        w.writeInt(seq)
                        w.key(static: "duplicate")
                        w.writeBool(duplicate)
                    }
                    outcome = .ok(w.bytes)
                case .failed(let error):
                    outcome = .failed(error.code, error.detail)
                }
            }
            results.append(BatchResult(index: firstIndex + index, id: String(item.number), outcome: outcome))
        }
        return results
    }

    // MARK: - Writing

    /// Writes `lines` in statements of ``linesPerStatement``, each in its own transaction; returns each line's outcome in
    /// order. A key repeated within the request starts a new statement, where it finds the first line's key.
    func write(_ lines: [Line], on db: PostgresConnection) throws -> [Outcome] {
        var outcomes: [Outcome] = []
        outcomes.reserveCapacity(lines.count)
        var batch: [Line] = []
        var keys: Set<String> = []
        func flush() throws {
            if batch.isEmpty { return }
            outcomes += try writeBatch(batch, on: db)
            batch = []
            keys = []
        }
        for line in lines {
            if batch.count == Self.linesPerStatement || !keys.insert(line.from + "\u{0}" + line.dedupeKey).inserted {
                try flush()
                keys.insert(line.from + "\u{0}" + line.dedupeKey)
            }
            batch.append(line)
        }
        try flush()
        return outcomes
    }

    private func writeBatch(_ batch: [Line], on db: PostgresConnection) throws -> [Outcome] {
        var retries = 0
        while true {
            do {
                let rows = try db.transaction { db in
                    let rows = try db.run(
                        PostgresStatement(
                            PostgresQuery(sql: Self.statement, binds: [appID, Self.lineRecords.json(batch, capacity: 400 * batch.count), now]),
                            rows: (MessageWrite.Outcome, String?, Int64?).self))
                    let naming = zip(batch, rows).compactMap { line, row in line.namesFiles && row.0 == .sent ? row.1 : nil }
                    try MessageFileStore.record(messageIDs: naming, appID: appID, on: db)
                    return rows
                }
                return try zip(batch, rows).map { line, row in try outcome(line, row) }
            } catch let error as PostgresError where error.sqlState == "23505" && retries < 3 {
                // A concurrent send or import took one of these keys first: the next run answers it as a duplicate.
                retries += 1
            }
        }
    }

    private func outcome(_ line: Line, _ row: (MessageWrite.Outcome, String?, Int64?)) throws -> Outcome {
        let name = line.conversationType == .peer ? "user" : line.conversationType.rawValue
        let (outcome, messageID, seq) = row
        switch outcome {
        case .sent, .duplicate:
            guard let messageID, let seq else { throw APIError(.internalError, "an imported message came back without its seq") }
            return .written(messageID: messageID, seq: seq, duplicate: outcome == .duplicate)
        case .conflict: return .failed(APIError(.clientMsgIdConflict, "the dedupe key \(line.dedupeKey) was used for another message"))
        case .fromNotFound: return .failed(UserService.notFound(line.from))
        case .toNotFound: return .failed(APIError(.targetNotFound, "\(name) \(line.to) does not exist"))
        case .groupDismissed: return .failed(.groupDismissed(line.to))
        default: throw APIError(.internalError, "the import statement answered \(outcome.rawValue)")
        }
    }

    /// The columns the statement reads from the lines JSON (`$2`); the JSON and the column list both come from here.
    static let lineFields: [JSONRecordset<Line>.Field] = [
        .init(name: "ord", type: "int") { w, line, _ in w.writeInt(line.ord) },
        .init(name: "conv_type", type: "text") { w, line, _ in w.writeString(line.conversationType.rawValue) },
        .init(name: "conv_id", type: "text") { w, line, _ in w.writeString(line.threadID) },
        .init(name: "sender", type: "text") { w, line, _ in w.writeString(line.from) },
        .init(name: "recipient", type: "text") { w, line, _ in w.writeString(line.to) },
        .init(name: "message_id", type: "text") { w, line, _ in w.writeString(line.messageID) },
        .init(name: "client_msg_id", type: "text") { w, line, _ in
            if let id = line.clientMsgID { w.writeString(id) } else { w.writeNull() }
        },
        .init(name: "dedupe_key", type: "text") { w, line, _ in w.writeString(line.dedupeKey) },
        .init(name: "content_hash", type: "text") { w, line, _ in w.writeString(line.contentHash) },
        .init(name: "type", type: "int") { w, line, _ in w.writeInt(line.type) },
        // As a JSON string: PostgreSQL stores the body's exact bytes.
        .init(name: "body", type: "text") { w, line, _ in
            if let body = line.body { body.withUnsafeBufferPointer { w.writeString(utf8: $0) } } else { w.writeNull() }
        },
        .init(name: "extended_data", type: "text") { w, line, _ in w.writeString(line.extendedData) },
        .init(name: "mention_ids", type: "text[]") { w, line, _ in w.array { w in for id in line.mentionIDs { w.writeString(id) } } },
        .init(name: "mention_all", type: "boolean") { w, line, _ in w.writeBool(line.mentionAll) },
        .init(name: "priority", type: "smallint") { w, line, _ in w.writeInt(line.priority) },
        .init(name: "need_receipt", type: "boolean") { w, line, _ in w.writeBool(line.needReceipt) },
        .init(name: "deleted", type: "boolean") { w, line, _ in w.writeBool(line.deleted) },
        .init(name: "original_text", type: "text") { w, line, _ in
            if let text = line.originalText { w.writeString(text) } else { w.writeNull() }
        },
        .init(name: "ts", type: "bigint") { w, line, _ in w.writeInt(line.timestamp) },
        .init(name: "visible_to", type: "text[]") { w, line, _ in
            if let ids = line.visibleTo { w.array { w in for id in ids { w.writeString(id) } } } else { w.writeNull() }
        },
    ]

    /// The lines as the JSON array the statement reads.
    static let lineRecords = JSONRecordset(lineFields)

    /// One statement per batch: checks (outcomes named as a send's, ``MessageWrite/Outcome``), seq heads, dedupe keys, the message
    /// rows (the only INSERT INTO messages of an import) and conversation entries. `$1` app, `$2` lines, `$3` now.
    static let statement = """
        WITH i AS (
            SELECT $1::text AS app_id, * FROM json_to_recordset($2::json) AS i(
                \(lineRecords.columnList))
        ), checked AS (
            SELECT i.*,
                CASE
                    \(MessageWrite.dedupeRule)
                    WHEN u.found IS NULL THEN \(MessageWrite.Outcome.fromNotFound.sql)
                    WHEN i.conv_type = 'peer' AND r.found IS NULL THEN \(MessageWrite.Outcome.toNotFound.sql)
                    WHEN i.conv_type = 'group' AND g.group_id IS NULL THEN \(MessageWrite.Outcome.toNotFound.sql)
                    WHEN i.conv_type = 'group' AND g.dismissed_at IS NOT NULL THEN \(MessageWrite.Outcome.groupDismissed.sql)
                    WHEN i.conv_type = 'room' AND ro.found IS NULL THEN \(MessageWrite.Outcome.toNotFound.sql)
                    ELSE \(MessageWrite.Outcome.sent.sql)
                END AS outcome,
                -- A receipt's recipients as a send fixes them (Migrations/0020; a targeted message's: its members).
                CASE WHEN i.need_receipt THEN CASE
                    WHEN i.conv_type = 'group' AND i.visible_to IS NOT NULL THEN cardinality(array_remove(i.visible_to, i.sender))
                    WHEN i.conv_type = 'group' THEN greatest(g.member_count - 1, 0) ELSE 1 END
                END AS receipt_recipients,
                k.message_id AS original_id, k.seq AS original_seq
            FROM i
            -- Primary-key probes per line (LATERAL + LIMIT keeps them index look-ups, as in MessageWrite).
            \(MessageWrite.dedupeProbe(keyColumn: "dedupe_key"))
            LEFT JOIN LATERAL (
                SELECT true AS found FROM users u WHERE u.app_id = $1 AND u.user_id = i.sender AND u.deleted_at IS NULL LIMIT 1
            ) u ON true
            LEFT JOIN LATERAL (
                SELECT true AS found FROM users r
                WHERE i.conv_type = 'peer' AND r.app_id = $1 AND r.user_id = i.recipient AND r.deleted_at IS NULL LIMIT 1
            ) r ON true
            LEFT JOIN LATERAL (
                SELECT g.group_id, g.dismissed_at, g.member_count FROM groups g
                WHERE i.conv_type = 'group' AND g.app_id = $1 AND g.group_id = i.recipient LIMIT 1
            ) g ON true
            LEFT JOIN LATERAL (
                SELECT true AS found FROM rooms ro WHERE i.conv_type = 'room' AND ro.app_id = $1 AND ro.room_id = i.recipient LIMIT 1
            ) ro ON true
        ), sent AS (
            SELECT * FROM checked WHERE outcome = \(MessageWrite.Outcome.sent.sql)
        ), \(MessageWrite.seqHeads(from: "sent", time: "ts")), placed AS (
            SELECT s.*, h.last_seq - c.n + row_number() OVER (PARTITION BY s.conv_type, s.conv_id ORDER BY s.ord) AS seq,
                   h.last_seq AS head, h.last_seq - c.n AS old_head
            FROM sent s
            JOIN counts c ON c.conv_type = s.conv_type AND c.conv_id = s.conv_id
            JOIN heads h ON h.conv_type = s.conv_type AND h.conv_id = s.conv_id
        ), keyed AS (
            INSERT INTO message_keys (app_id, sender, client_msg_id, content_hash, message_id, conv_type, conv_id, recipient, type, seq,
                                      timestamp)
            SELECT $1, sender, dedupe_key, content_hash, message_id, conv_type, conv_id, recipient, type, seq, ts FROM placed
        ), stored AS (
            INSERT INTO messages (app_id, conv_type, conv_id, seq, message_id, client_msg_id, sender, recipient, type, body,
                                  extended_data, mention_ids, mention_all, mention_notify, priority, need_receipt, receipt_recipients,
                                  no_unread, repeat_count, deleted, original_text, timestamp, search_text, visible_to)
            SELECT $1, conv_type, conv_id, seq, message_id, client_msg_id, sender, recipient, type, body, extended_data,
                   coalesce(mention_ids, '{}'), mention_all, false, priority, need_receipt, receipt_recipients, false, 1, deleted,
                   original_text, ts, parley_search_text(type, body), visible_to
            FROM placed ORDER BY ord
        ), peer_entries AS (
            -- Both sides of each pair, aggregated per row. New entries start read; an entry that was read up to its
            -- last_seq stays read; one with unread messages keeps its read_seq.
            INSERT INTO conversations AS c (app_id, user_id, conv_type, conv_id, thread_id, read_seq, last_seq, last_ts, order_key,
                                            created_at, updated_at)
            SELECT $1, e.user_id, 'peer', e.other, e.thread, max(e.seq), max(e.seq), max(e.ts), max(e.ts), $3, $3
            FROM (SELECT sender AS user_id, recipient AS other, conv_id AS thread, seq, ts FROM placed WHERE conv_type = 'peer'
                  UNION ALL
                  SELECT recipient, sender, conv_id, seq, ts FROM placed WHERE conv_type = 'peer') e
            GROUP BY e.user_id, e.other, e.thread
            ORDER BY e.user_id, e.other
            ON CONFLICT (app_id, user_id, conv_type, conv_id) DO UPDATE SET
                read_seq = CASE WHEN c.read_seq >= c.last_seq THEN greatest(c.last_seq, excluded.last_seq) ELSE c.read_seq END,
                last_seq = greatest(c.last_seq, excluded.last_seq),
                last_ts = greatest(c.last_ts, excluded.last_ts),
                order_key = greatest(c.order_key, excluded.last_ts),
                deleted = false,
                updated_at = excluded.updated_at
        ), group_read AS (
            -- Members' entries follow the group head (Migrations/0009): those read up to the old head move to the new one.
            -- Found through the members (primary-key probes): conversations has no index by group.
            UPDATE conversations c SET read_seq = h.head, updated_at = $3
            FROM (SELECT conv_id, max(head) AS head, min(old_head) AS old_head FROM placed WHERE conv_type = 'group'
                  GROUP BY conv_id) h
            JOIN group_members gm ON gm.app_id = $1 AND gm.group_id = h.conv_id
            WHERE c.app_id = $1 AND c.user_id = gm.user_id AND c.conv_type = 'group' AND c.conv_id = h.conv_id AND c.follows_group
              AND c.read_seq >= h.old_head
        )
        SELECT c.outcome, coalesce(p.message_id, c.original_id), coalesce(p.seq, c.original_seq)
        FROM checked c LEFT JOIN placed p ON p.ord = c.ord
        ORDER BY c.ord
        """
}
