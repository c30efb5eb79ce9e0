import ParleyAPI
import ParleyCore
import ParleyPostgres

/// One push attempt row (API.md §2 PushAttempt) as the planner writes it and the routes read it.
struct PushAttemptRow: Sendable {
    var attemptID: String
    var kind: String
    var userID: String
    var messageID: String?
    var callID: String?
    var deviceIDs: [String]
    var pushKeys: [String]
    var status: String
    var reason: String?
    var gatewayStatus: Int?
    var rejectedPushKeys: [String] = []
    var tries = 0
    var url: String?
    var format: String?
    var body: String?
    var createdAt: Int64
    var updatedAt: Int64

    init(
        attemptID: String, kind: String, userID: String, messageID: String?, callID: String?, deviceIDs: [String], pushKeys: [String],
        status: String, reason: String?, url: String?, format: String?, body: String?, createdAt: Int64
    ) {
        self.attemptID = attemptID
        self.kind = kind
        self.userID = userID
        self.messageID = messageID
        self.callID = callID
        self.deviceIDs = deviceIDs
        self.pushKeys = pushKeys
        self.status = status
        self.reason = reason
        self.url = url
        self.format = format
        self.body = body
        self.createdAt = createdAt
        updatedAt = createdAt
    }

    /// The PushAttempt JSON object.
    func json() -> [UInt8] {
        var o = JSONObjectWriter(capacity: 384)
        o["attempt_id"] = attemptID
        o["kind"] = kind
        o["user_id"] = userID
        o["message_id"] = messageID
        o["call_id"] = callID
        o["device_ids"] = JSONValue.array(deviceIDs.map(JSONValue.string))
        o["status"] = status
        o["reason"] = reason
        o["gateway_status"] = gatewayStatus.map { Int64($0) }
        o["rejected_push_keys"] = JSONValue.array(rejectedPushKeys.map(JSONValue.string))
        o["tries"] = Int64(tries)
        o["created_at"] = createdAt
        o["updated_at"] = updatedAt
        return o.finish()
    }
}

/// SQL of the push bridge: recipients' state, attempts, and the sender's leases and outcomes. No rules here.
enum PushStore {
    // MARK: - Recipients

    /// The SQL condition "push is configured" (enabled, with a gateway) on an `apps.settings` expression: the
    /// condition of ``PushSettings/configured``, which Migrations/functions/parley_push_turned_on.sql repeats.
    static func configuredSQL(_ settings: String) -> String {
        "coalesce((\(settings)->'push'->>'enabled')::boolean, false) AND coalesce(\(settings)->'push'->>'gateway_url', '') <> ''"
    }

    /// The app's `push` settings as stored now.
    static func settings(appID: String, on db: PostgresConnection) throws -> PushSettings {
        let text = try db.query("SELECT (settings->'push')::text FROM apps WHERE app_id = \(appID)").decodeFirst(String?.self) ?? nil
        return PushSettings(push: text.flatMap { try? JSONValue.parse($0) }?.objectValue ?? JSONObject())
    }

    /// The devices of `userIDs` that have any, by user, each user's in `created_at` order.
    static func devices(appID: String, userIDs: [String], on db: PostgresConnection) throws -> [String: [Device]] {
        guard !userIDs.isEmpty else { return [:] }
        let devices = try db.query(
            """
            SELECT \(sql: DeviceStore.columns) FROM devices WHERE app_id = \(appID) AND user_id = ANY(\(userIDs))
            ORDER BY user_id, created_at, device_id
            """
        ).rows.map(DeviceStore.device)
        return Dictionary(grouping: devices, by: \.userID)
    }

    /// The platforms each of `userIDs` has an open presence-counting user stream on (any node; API.md §14.2).
    static func onlinePlatforms(appID: String, userIDs: [String], on db: PostgresConnection) throws -> [String: Set<String>] {
        var out: [String: Set<String>] = [:]
        for row in try db.query(
            "SELECT DISTINCT user_id, platform FROM user_streams WHERE app_id = \(appID) AND user_id = ANY(\(userIDs)) AND counts_presence"
        ).rows {
            out[try row[0].string, default: []].insert(try row[1].string)
        }
        return out
    }

    /// The offline push rules of those of `userIDs` that set one.
    static func pushRules(appID: String, userIDs: [String], on db: PostgresConnection) throws -> [String: PushRule] {
        var out: [String: PushRule] = [:]
        for row in try db.query(
            """
            SELECT user_id, online_platforms, not_to_receive_offline_push_platforms FROM push_rules
            WHERE app_id = \(appID) AND user_id = ANY(\(userIDs))
            """
        ).rows {
            out[try row[0].string] = PushRule(
                onlinePlatforms: try row[1].stringArray.compactMap(Device.Platform.init),
                mutedPlatforms: try row[2].stringArray.compactMap(Device.Platform.init))
        }
        return out
    }

    /// The key of one user's conversation in ``doNotDisturb(appID:entries:on:)``'s answer.
    static func conversationKey(_ userID: String, _ conversationType: String, _ conversationID: String) -> String {
        userID + "\u{0}" + conversationType + "\u{0}" + conversationID
    }

    /// Which of the (user, conversation) entries are set to `do_not_disturb` (``conversationKey(_:_:_:)`` each).
    static func doNotDisturb(
        appID: String, entries: [(userID: String, conversationType: String, conversationID: String)], on db: PostgresConnection
    ) throws -> Set<String> {
        guard !entries.isEmpty else { return [] }
        return Set(
            try db.query(
                """
                SELECT c.user_id, c.conv_type, c.conv_id FROM conversations c
                JOIN unnest(\(entries.map(\.userID))::text[], \(entries.map(\.conversationType))::text[], \(entries.map(\.conversationID))::text[])
                     AS e(user_id, conv_type, conv_id)
                  ON c.app_id = \(appID) AND c.user_id = e.user_id AND c.conv_type = e.conv_type AND c.conv_id = e.conv_id
                WHERE c.notification_status = 'do_not_disturb'
                """
            ).rows.map { conversationKey(try $0[0].string, try $0[1].string, try $0[2].string) })
    }

    /// Display names of `userIDs` (those that exist).
    static func userNames(appID: String, userIDs: [String], on db: PostgresConnection) throws -> [String: String] {
        var out: [String: String] = [:]
        for row in try db.query("SELECT user_id, name FROM users WHERE app_id = \(appID) AND user_id = ANY(\(userIDs))").rows {
            out[try row[0].string] = try row[1].string
        }
        return out
    }

    // MARK: - Attempts

    /// Inserts attempts: pending ones due now, or with `sentByCaller` never due (the caller tries it itself: a real
    /// test push, so the bridge cannot send it a second time meanwhile).
    static func insert(_ rows: [PushAttemptRow], appID: String, sentByCaller: Bool = false, on db: PostgresConnection) throws {
        guard !rows.isEmpty else { return }
        // Arrays of arrays are not rectangular in PostgreSQL: the device ids and keys travel as JSON arrays.
        func jsonArray(_ values: [String]) -> String { String(decoding: JSONValue.array(values.map(JSONValue.string)).serialized(), as: UTF8.self) }
        try db.query(
            """
            INSERT INTO push_attempts (app_id, attempt_id, kind, user_id, message_id, call_id, device_ids, push_keys, status, reason,
                                       url, format, body, next_attempt_at, created_at, updated_at)
            SELECT \(appID), r.attempt_id, r.kind, r.user_id, r.message_id, r.call_id,
                   ARRAY(SELECT json_array_elements_text(r.device_ids::json)), ARRAY(SELECT json_array_elements_text(r.push_keys::json)),
                   r.status, r.reason, r.url, r.format, r.body, CASE WHEN r.status = 'pending' AND NOT \(sentByCaller) THEN r.created_at END, r.created_at, r.created_at
            FROM unnest(\(rows.map(\.attemptID))::text[], \(rows.map(\.kind))::text[], \(rows.map(\.userID))::text[],
                        \(rows.map(\.messageID))::text[], \(rows.map(\.callID))::text[], \(rows.map { jsonArray($0.deviceIDs) })::text[],
                        \(rows.map { jsonArray($0.pushKeys) })::text[], \(rows.map(\.status))::text[], \(rows.map(\.reason))::text[],
                        \(rows.map(\.url))::text[], \(rows.map(\.format))::text[], \(rows.map(\.body))::text[], \(rows.map(\.createdAt))::bigint[])
                 AS r(attempt_id, kind, user_id, message_id, call_id, device_ids, push_keys, status, reason, url, format, body, created_at)
            """)
    }

    /// The columns ``attempt(_:)`` decodes.
    private static let columns = """
        attempt_id, kind, user_id, message_id, call_id, device_ids, push_keys, status, reason, gateway_status, rejected_push_keys,
        tries, url, format, body, created_at, updated_at
        """

    static func attempt(_ row: PostgresRow) throws -> PushAttemptRow {
        var a = PushAttemptRow(
            attemptID: try row[0].string, kind: try row[1].string, userID: try row[2].string,
            messageID: row[3].isNull ? nil : try row[3].string, callID: row[4].isNull ? nil : try row[4].string,
            deviceIDs: try row[5].stringArray, pushKeys: try row[6].stringArray, status: try row[7].string,
            reason: row[8].isNull ? nil : try row[8].string, url: row[12].isNull ? nil : try row[12].string,
            format: row[13].isNull ? nil : try row[13].string, body: row[14].isNull ? nil : try row[14].string,
            createdAt: try row[15].int64)
        a.gatewayStatus = row[9].isNull ? nil : try row[9].int
        a.rejectedPushKeys = try row[10].stringArray
        a.tries = try row[11].int
        a.updatedAt = try row[16].int64
        return a
    }

    static func fetch(appID: String, attemptID: String, on db: PostgresConnection) throws -> PushAttemptRow? {
        try db.query("SELECT \(sql: columns) FROM push_attempts WHERE app_id = \(appID) AND attempt_id = \(attemptID)").first.map(attempt)
    }

    /// The filters of `GET /v1/push/attempts`.
    struct Filter {
        var userID: String?
        var messageID: String?
        var callID: String?
        var kind: String?
        var status: String?
    }

    /// Attempts by `created_at` desc, then `attempt_id` desc, after `after`.
    static func list(
        appID: String, filter: Filter, after: (createdAt: Int64, attemptID: String)?, limit: Int, on db: PostgresConnection
    ) throws -> [PushAttemptRow] {
        // Only the filters given are in the statement (one prepared statement per combination), and the cursor is one
        // always-present bound in the list index's columns (none: after every row's time): with `$1 IS NULL OR …`
        // the generic plans walked the retention index and sorted every row (62 ms at 200,000 attempts).
        let bound = after ?? (createdAt: Int64.max, attemptID: "")
        var conditions: PostgresQuery = "app_id = \(appID) AND (created_at, attempt_id) < (\(bound.createdAt), \(bound.attemptID))"
        if let userID = filter.userID { conditions += " AND user_id = \(userID)" }
        if let messageID = filter.messageID { conditions += " AND message_id = \(messageID)" }
        if let callID = filter.callID { conditions += " AND call_id = \(callID)" }
        if let kind = filter.kind { conditions += " AND kind = \(kind)" }
        if let status = filter.status { conditions += " AND status = \(status)" }
        return try db.query(
            "SELECT \(sql: columns) FROM push_attempts WHERE \(conditions) ORDER BY created_at DESC, attempt_id DESC LIMIT \(limit)"
        ).rows.map(attempt)
    }

    /// A revoked message's pushes (§16.1): its pending attempts fail (`revoked`), in the same statement that reads the
    /// devices each recipient's `sent` (or partly rejected) push went to, which the revoke push then follows.
    static func revokeAttempts(appID: String, messageID: String, now: Int64, on db: PostgresConnection) throws -> [String: Set<String>] {
        var out: [String: Set<String>] = [:]
        for row in try db.query(
            """
            WITH failed AS (
                UPDATE push_attempts SET status = 'failed', reason = 'revoked', next_attempt_at = NULL, leased_until = NULL,
                    updated_at = \(now)
                WHERE app_id = \(appID) AND message_id = \(messageID) AND kind = 'message' AND status = 'pending')
            SELECT user_id, device_ids, push_keys, rejected_push_keys FROM push_attempts
            WHERE app_id = \(appID) AND message_id = \(messageID) AND kind = 'message' AND status = 'sent'
            """
        ).rows {
            let (devices, keys, rejected) = (try row[1].stringArray, try row[2].stringArray, Set(try row[3].stringArray))
            let kept = zip(devices, keys).filter { !rejected.contains($0.1) }.map(\.0)
            out[try row[0].string, default: []].formUnion(kept)
        }
        return out
    }

    /// `push_sent_24h`, `push_failed_24h` of `GET /v1/stats`.
    static func counts(appID: String, since: Int64, on db: PostgresConnection) throws -> (sent: Int64, failed: Int64) {
        guard
            let row = try db.query(
                """
                SELECT count(*) FILTER (WHERE status = 'sent'), count(*) FILTER (WHERE status = 'failed') FROM push_attempts
                WHERE app_id = \(appID) AND created_at >= \(since)
                """
            ).first
        else { return (0, 0) }
        return (try row[0].int64, try row[1].int64)
    }
}
