import ParleyAPI
import ParleyCore
import ParleyPostgres

/// One push attempt row (docs/push.md#the-attempt-log) as the planner writes it and the routes read it.
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
    /// When a pending attempt is next due (server clock).
    var nextAttemptAt: Int64?
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
            SELECT \(unsafeSQL: DeviceStore.columns) FROM devices WHERE app_id = \(appID) AND user_id = ANY(\(userIDs))
            ORDER BY user_id, created_at, device_id
            """
        ).rows.map(DeviceStore.device)
        return Dictionary(grouping: devices, by: \.userID)
    }

    /// The recipients among `userIDs` that have devices, each with its devices (in `created_at` order), the platforms
    /// it has an open presence-counting user stream on (any node) and its offline push rule: what the push decision
    /// reads, in one statement.
    static func recipients(appID: String, userIDs: [String], on db: PostgresConnection) throws -> [String: PushRecipient] {
        guard !userIDs.isEmpty else { return [:] }
        var out: [String: PushRecipient] = [:]
        for row in try db.query(
            """
            SELECT d.device_id, d.user_id, d.platform, d.provider, d.push_key, d.push_app_id, d.voip, d.apptype, d.lang, d.created_at,
                   d.updated_at, d.last_push_at,
                   ARRAY(SELECT DISTINCT s.platform FROM user_streams s
                         WHERE s.app_id = d.app_id AND s.user_id = d.user_id AND s.counts_presence),
                   r.online_platforms, r.not_to_receive_offline_push_platforms
            FROM devices d LEFT JOIN push_rules r ON r.app_id = d.app_id AND r.user_id = d.user_id
            WHERE d.app_id = \(appID) AND d.user_id = ANY(\(userIDs))
            ORDER BY d.user_id, d.created_at, d.device_id
            """
        ).rows {
            // The device's columns (``DeviceStore/Columns``), then the user's stream platforms and push rule (NULL
            // without one; its two arrays are NOT NULL).
            let (d0, d1, d2, d3, d4, d5, d6, d7, d8, d9, d10, d11, streams, online, muted) = try row.decode(
                (String, String, String, String, String, String, Bool, Int64, String, Int64, Int64, Int64?, [String], [String]?, [String]?).self)
            let device = try DeviceStore.device((d0, d1, d2, d3, d4, d5, d6, d7, d8, d9, d10, d11))
            if out[device.userID] == nil {
                let rule = online.map {
                    PushRule(
                        onlinePlatforms: $0.compactMap(Device.Platform.init), mutedPlatforms: (muted ?? []).compactMap(Device.Platform.init))
                }
                out[device.userID] = PushRecipient(userID: device.userID, devices: [], onlinePlatforms: Set(streams), rule: rule)
            }
            out[device.userID]?.devices.append(device)
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
        // One primary-key probe per entry, whatever the number of the app's conversations.
        return Set(
            try db.query(
                """
                SELECT c.user_id, c.conv_type, c.conv_id
                FROM unnest(\(entries.map(\.userID))::text[], \(entries.map(\.conversationType))::text[], \(entries.map(\.conversationID))::text[])
                     AS e(user_id, conv_type, conv_id)
                CROSS JOIN LATERAL (
                    SELECT c.user_id, c.conv_type, c.conv_id FROM conversations c
                    WHERE c.app_id = \(appID) AND c.user_id = e.user_id AND c.conv_type = e.conv_type AND c.conv_id = e.conv_id
                      AND c.notification_status = 'do_not_disturb'
                ) c
                """
            ).decode((String, String, String).self).map { conversationKey($0.0, $0.1, $0.2) })
    }

    /// Display names of `userIDs` (those that exist).
    static func userNames(appID: String, userIDs: [String], on db: PostgresConnection) throws -> [String: String] {
        var out: [String: String] = [:]
        for (userID, name) in try db.query("SELECT user_id, name FROM users WHERE app_id = \(appID) AND user_id = ANY(\(userIDs))").decode(
            (String, String).self)
        {
            out[userID] = name
        }
        return out
    }

    // MARK: - Attempts

    /// Inserts attempts: pending ones due now, or with `sentByCaller` never due (the caller tries it itself: a real
    /// test push, so the bridge cannot send it a second time meanwhile).
    static func insert(_ rows: [PushAttemptRow], appID: String, sentByCaller: Bool = false, on db: PostgresConnection) throws {
        guard !rows.isEmpty else { return }
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

    /// Records in one statement what a round of the bridge finished: the attempts it planned whose first try ended
    /// (or that needed none), each with its final status or `pending` with its retry time and body; the
    /// `last_push_at` of the devices they reached; and the apps' cursors moved forward (never back: turning push on
    /// may have moved one past). A message push whose message was revoked or deleted while it was tried is recorded
    /// `failed` (`revoked`), as if the revoke had stopped it (the revoke saw no attempt to stop). Rejected keys are the
    /// caller's (``deviceEffects(of:now:on:)``).
    static func recordFinished(
        _ rows: [(appID: String, row: PushAttemptRow)], cursors: [(appID: String, cursor: PushPosition)], now: Int64, on db: PostgresConnection
    ) throws {
        let r = rows.map(\.row)
        var reached: (apps: [String], users: [String], devices: [String]) = ([], [], [])
        for (appID, row) in rows where row.status == "sent" || row.status == "rejected" {
            let refused = Set(row.rejectedPushKeys)
            for (device, key) in zip(row.deviceIDs, row.pushKeys) where !refused.contains(key) {
                reached.apps.append(appID)
                reached.users.append(row.userID)
                reached.devices.append(device)
            }
        }
        try db.query(
            """
            WITH inserted AS (
                INSERT INTO push_attempts (app_id, attempt_id, kind, user_id, message_id, call_id, device_ids, push_keys, status, reason,
                                           gateway_status, rejected_push_keys, tries, url, format, body, next_attempt_at, created_at, updated_at)
                SELECT r.app_id, r.attempt_id, r.kind, r.user_id, r.message_id, r.call_id, r.device_ids::text[], r.push_keys::text[],
                       CASE WHEN m.gone THEN 'failed' ELSE r.status END, CASE WHEN m.gone THEN 'revoked' ELSE r.reason END, r.code,
                       r.rejected::text[], r.tries, r.url, r.format,
                       CASE WHEN m.gone THEN NULL ELSE r.body END, CASE WHEN m.gone THEN NULL ELSE r.next_at END, r.created_at, r.updated_at
                FROM unnest(\(rows.map(\.appID))::text[], \(r.map(\.attemptID))::text[], \(r.map(\.kind))::text[], \(r.map(\.userID))::text[],
                            \(r.map(\.messageID))::text[], \(r.map(\.callID))::text[], \(r.map { arrayLiteral($0.deviceIDs) })::text[],
                            \(r.map { arrayLiteral($0.pushKeys) })::text[], \(r.map(\.status))::text[], \(r.map(\.reason))::text[],
                            \(r.map(\.gatewayStatus))::int[], \(r.map { arrayLiteral($0.rejectedPushKeys) })::text[], \(r.map(\.tries))::int[],
                            \(r.map(\.url))::text[], \(r.map(\.format))::text[], \(r.map(\.body))::text[], \(r.map(\.nextAttemptAt))::bigint[],
                            \(r.map(\.createdAt))::bigint[], \(r.map(\.updatedAt))::bigint[])
                     AS r(app_id, attempt_id, kind, user_id, message_id, call_id, device_ids, push_keys, status, reason, code, rejected, tries,
                          url, format, body, next_at, created_at, updated_at)
                LEFT JOIN LATERAL (
                    SELECT (m.type = 31 OR m.deleted) AS gone FROM messages m
                    WHERE r.kind = 'message' AND r.status IN ('sent', 'rejected', 'pending') AND m.app_id = r.app_id AND m.message_id = r.message_id
                ) m ON true
            ),
            touched AS (
                UPDATE devices d SET last_push_at = \(now)
                FROM unnest(\(reached.apps)::text[], \(reached.users)::text[], \(reached.devices)::text[]) AS u(app_id, user_id, device_id)
                WHERE d.app_id = u.app_id AND d.user_id = u.user_id AND d.device_id = u.device_id
            )
            UPDATE push_cursors c SET event_id = u.event_id, user_after = u.user_after
            FROM unnest(\(cursors.map(\.appID))::text[], \(cursors.map(\.cursor.eventID))::bigint[], \(cursors.map(\.cursor.userAfter))::text[])
                 AS u(app_id, event_id, user_after)
            WHERE c.app_id = u.app_id AND c.event_id <= u.event_id
            """)
    }

    /// A PostgreSQL array literal of `values` (`{"a","b"}`): arrays of arrays are not rectangular in PostgreSQL, so
    /// each row's device ids and keys travel as one text, cast back per row.
    static func arrayLiteral(_ values: [String]) -> String {
        var out = "{"
        for (i, value) in values.enumerated() {
            if i > 0 { out += "," }
            out += "\""
            for c in value.unicodeScalars {
                if c == "\"" || c == "\\" { out += "\\" }
                out.unicodeScalars.append(c)
            }
            out += "\""
        }
        return out + "}"
    }

    /// An attempt whose try ended, as its devices' effects need it.
    struct Tried {
        let appID: String
        let userID: String
        let deviceIDs: [String]
        let pushKeys: [String]
        let rejectedKeys: [String]
        let status: String
    }

    /// After tries that reached the gateway (`sent`, `rejected`): the rejected keys' devices are deleted
    /// (`device.removed`, reason `rejected`), the others get `last_push_at` unless `rejectedOnly`. Returns the apps
    /// that got events.
    static func deviceEffects(of tried: [Tried], rejectedOnly: Bool = false, now: Int64, on db: PostgresConnection) throws -> [String] {
        var pushed: (apps: [String], users: [String], devices: [String]) = ([], [], [])
        var rejected: (apps: [String], users: [String], devices: [String]) = ([], [], [])
        for attempt in tried where attempt.status == "sent" || attempt.status == "rejected" {
            let refused = Set(attempt.rejectedKeys)
            for (device, key) in zip(attempt.deviceIDs, attempt.pushKeys) {
                if refused.contains(key) {
                    rejected.apps.append(attempt.appID)
                    rejected.users.append(attempt.userID)
                    rejected.devices.append(device)
                } else {
                    pushed.apps.append(attempt.appID)
                    pushed.users.append(attempt.userID)
                    pushed.devices.append(device)
                }
            }
        }
        if !pushed.apps.isEmpty && !rejectedOnly {
            try db.query(
                """
                UPDATE devices d SET last_push_at = \(now)
                FROM unnest(\(pushed.apps)::text[], \(pushed.users)::text[], \(pushed.devices)::text[]) AS u(app_id, user_id, device_id)
                WHERE d.app_id = u.app_id AND d.user_id = u.user_id AND d.device_id = u.device_id
                """)
        }
        guard !rejected.apps.isEmpty else { return [] }
        let removed = try db.query(
            """
            DELETE FROM devices d
            USING unnest(\(rejected.apps)::text[], \(rejected.users)::text[], \(rejected.devices)::text[]) AS u(app_id, user_id, device_id)
            WHERE d.app_id = u.app_id AND d.user_id = u.user_id AND d.device_id = u.device_id
            RETURNING d.app_id, d.user_id, d.device_id
            """
        ).decode((String, String, String).self).map { (appID: $0.0, userID: $0.1, deviceID: $0.2) }
        let byApp = Dictionary(grouping: removed, by: \.appID)
        for (appID, devices) in byApp {
            try EventLog.append(
                devices.map { Device.removedEvent(userID: $0.userID, deviceID: $0.deviceID, reason: "rejected") }, appID: appID, now: now, on: db)
        }
        return byApp.keys.sorted()
    }

    /// Arrays of arrays are not rectangular in PostgreSQL: device ids and keys travel as JSON arrays.
    private static func jsonArray(_ values: [String]) -> String {
        String(decoding: JSONValue.array(values.map(JSONValue.string)).serialized(), as: UTF8.self)
    }

    // MARK: - Cursors and the log

    /// Takes the session advisory lock that makes this connection's node the planner of `appID` (not waiting).
    static func tryLock(appID: String, lockClass: Int32, on db: PostgresConnection) throws -> Bool {
        try db.query("SELECT pg_try_advisory_lock(\(Int(lockClass))::int, hashtext(\(appID)))").decodeFirst(Bool.self) ?? false
    }

    static func unlock(appID: String, lockClass: Int32, on db: PostgresConnection) throws {
        try db.query("SELECT pg_advisory_unlock(\(Int(lockClass))::int, hashtext(\(appID)))")
    }

    /// The app's push cursor, created at the start of its log when it has none; nil when the app does not exist.
    static func cursor(appID: String, on db: PostgresConnection) throws -> PushPosition? {
        for _ in 0..<2 {
            if let (eventID, userAfter) = try db.query("SELECT event_id, user_after FROM push_cursors WHERE app_id = \(appID)").decodeFirst(
                (Int64, String?).self)
            {
                return PushPosition(eventID: eventID, userAfter: userAfter)
            }
            // From the apps row: an app deleted meanwhile gets no cursor (and no foreign-key error).
            let created = try db.query(
                """
                INSERT INTO push_cursors (app_id, event_id) SELECT app_id, 0 FROM apps WHERE app_id = \(appID)
                ON CONFLICT DO NOTHING RETURNING event_id
                """)
            if created.first != nil { return PushPosition(eventID: 0, userAfter: nil) }
            if try db.query("SELECT 1 FROM apps WHERE app_id = \(appID)").first == nil { return nil }
        }
        return nil
    }

    /// Which of `appIDs` still exist.
    static func existingApps(_ appIDs: [String], on db: PostgresConnection) throws -> [String] {
        try db.query("SELECT app_id FROM apps WHERE app_id = ANY(\(appIDs))").decode(String.self)
    }

    /// The apps with push configured whose log head is past their cursor, with the head.
    static func behind(on db: PostgresConnection) throws -> [(appID: String, head: Int64)] {
        try db.query(
            """
            SELECT h.app_id, h.head FROM event_heads h JOIN apps a ON a.app_id = h.app_id LEFT JOIN push_cursors c ON c.app_id = h.app_id
            WHERE (h.head > coalesce(c.event_id, 0) OR c.user_after IS NOT NULL) AND \(unsafeSQL: configuredSQL("a.settings"))
            """
        ).decode((String, Int64).self).map { (appID: $0.0, head: $0.1) }
    }

    /// The pushable-type events of `appID` after `after` and up to `upTo` (or the head), at most `limit`, with where
    /// the read ends (`through`: the last event read when there may be more, else `upTo` or the head) and the head,
    /// all in one snapshot.
    static func log(
        appID: String, after: Int64, upTo: Int64?, limit: Int, on db: PostgresConnection
    ) throws -> (events: [PushLogEvent], through: Int64, head: Int64) {
        let rows = try db.query(
            """
            SELECT h.head, e.id, e.type, e.data FROM event_heads h
            LEFT JOIN LATERAL (
                SELECT id, type, data FROM events
                WHERE app_id = \(appID) AND id > \(after) AND id <= least(h.head, \(upTo ?? Int64.max))
                  AND type = ANY(\(PushPlanner.pushableEventTypes))
                ORDER BY id LIMIT \(limit)
            ) e ON true
            WHERE h.app_id = \(appID)
            """
        ).decode((Int64, Int64?, String?, PostgresTextBytes?).self)
        guard let head = rows.first?.0 else { return ([], after, after) }
        // An event's columns are all set (NOT NULL in `events`), or all NULL on the head's row when there is none.
        let events = rows.compactMap { (_, id, type, data) -> PushLogEvent? in
            guard let id, let type, let data else { return nil }
            return PushLogEvent(id: id, type: type, data: data.bytes, fromLog: true)
        }
        let through = events.count == limit ? events.last!.id : min(head, upTo ?? head)
        return (events, max(through, after), head)
    }

    /// Which of `messageIDs` are still stored, not revoked and not deleted.
    static func stillPushable(appID: String, messageIDs: [String], on db: PostgresConnection) throws -> Set<String> {
        Set(
            try db.query(
                """
                SELECT message_id FROM messages WHERE app_id = \(appID) AND message_id = ANY(\(messageIDs)) AND type <> 31 AND NOT deleted
                """
            ).decode(String.self))
    }

    /// Display names of users and groups (those that exist), in one query.
    static func names(appID: String, users: [String], groups: [String], on db: PostgresConnection) throws -> (
        users: [String: String], groups: [String: String]
    ) {
        var out: (users: [String: String], groups: [String: String]) = ([:], [:])
        for row in try db.query(
            """
            SELECT true, user_id, name FROM users WHERE app_id = \(appID) AND user_id = ANY(\(users))
            UNION ALL
            SELECT false, group_id, name FROM groups WHERE app_id = \(appID) AND group_id = ANY(\(groups))
            """
        ).decode((Bool, String, String).self) {
            if row.0 { out.users[row.1] = row.2 } else { out.groups[row.1] = row.2 }
        }
        return out
    }

    /// The columns ``attempt(_:)`` decodes.
    private static let columns = """
        attempt_id, kind, user_id, message_id, call_id, device_ids, push_keys, status, reason, gateway_status, rejected_push_keys,
        tries, url, format, body, created_at, updated_at
        """

    static func attempt(_ row: PostgresRow) throws -> PushAttemptRow {
        let (
            attemptID, kind, userID, messageID, callID, deviceIDs, pushKeys, status, reason, gatewayStatus, rejectedPushKeys,
            tries, url, format, body, createdAt, updatedAt
        ) = try row.decode(
            (
                String, String, String, String?, String?, [String], [String], String, String?, Int?, [String],
                Int, String?, String?, String?, Int64, Int64
            ).self)
        var a = PushAttemptRow(
            attemptID: attemptID, kind: kind, userID: userID, messageID: messageID, callID: callID, deviceIDs: deviceIDs,
            pushKeys: pushKeys, status: status, reason: reason, url: url, format: format, body: body, createdAt: createdAt)
        a.gatewayStatus = gatewayStatus
        a.rejectedPushKeys = rejectedPushKeys
        a.tries = tries
        a.updatedAt = updatedAt
        return a
    }

    static func fetch(appID: String, attemptID: String, on db: PostgresConnection) throws -> PushAttemptRow? {
        try db.query("SELECT \(unsafeSQL: columns) FROM push_attempts WHERE app_id = \(appID) AND attempt_id = \(attemptID)").first.map(attempt)
    }

    /// Attempts by `created_at` desc, then `attempt_id` desc, after `after`.
    static func list(
        appID: String, filter: PushAttemptFilter, after: (createdAt: Int64, attemptID: String)?, limit: Int, on db: PostgresConnection
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
            "SELECT \(unsafeSQL: columns) FROM push_attempts WHERE \(conditions) ORDER BY created_at DESC, attempt_id DESC LIMIT \(limit)"
        ).rows.map(attempt)
    }

    /// A revoked message's pushes (docs/push.md#what-is-pushed-to-whom): its pending attempts fail (`revoked`), in the
    /// same statement that reads the devices each recipient's `sent` (or partly rejected) push went to, which the
    /// revoke push then follows.
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
        ).decode((String, [String], [String], [String]).self) {
            let (userID, devices, keys, rejected) = (row.0, row.1, row.2, Set(row.3))
            let kept = zip(devices, keys).filter { !rejected.contains($0.1) }.map(\.0)
            out[userID, default: []].formUnion(kept)
        }
        return out
    }

    /// `push_sent_24h`, `push_failed_24h` of `GET /v1/stats`.
    static func counts(appID: String, since: Int64, on db: PostgresConnection) throws -> (sent: Int64, failed: Int64) {
        try db.query(
            """
            SELECT count(*) FILTER (WHERE status = 'sent'), count(*) FILTER (WHERE status = 'failed') FROM push_attempts
            WHERE app_id = \(appID) AND created_at >= \(since)
            """
        ).decodeFirst((Int64, Int64).self) ?? (0, 0)
    }
}

/// The filters of `GET /v1/push/attempts`.
struct PushAttemptFilter {
    var userID: String?
    var messageID: String?
    var callID: String?
    var kind: String?
    var status: String?
}
