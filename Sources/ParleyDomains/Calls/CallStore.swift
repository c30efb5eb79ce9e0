import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The SQL of calls (Migrations/0016_calls.sql). No rules: ``CallService`` decides, locks and writes events.
package enum CallStore {
    private static let callColumns =
        "call_id, mode, caller_id, state, end_reason, extended_data, timeout_s, not_received_check, created_at, ended_at"
    private static let userColumns =
        "user_id, position, state, inviter_id, extended_data, invited_at, updated_at, accepted_at, quit_at"

    /// The call with its users; `forUpdate` locks the call row (every change of a call holds it).
    static func fetch(appID: String, callID: String, forUpdate: Bool = false, on db: PostgresConnection) throws -> Call? {
        guard
            let row = try db.query(
                """
                SELECT \(unsafeSQL: callColumns) FROM calls WHERE app_id = \(appID) AND call_id = \(callID) \(unsafeSQL: forUpdate ? "FOR UPDATE" : "")
                """
            ).first
        else { return nil }
        var call = try self.call(row)
        call.users = try users(appID: appID, callIDs: [callID], on: db)[callID] ?? []
        return call
    }

    /// The calls `callIDs` with their users, locked in `call_id` order (so concurrent sweeps never deadlock), returned
    /// in `callIDs` order (missing ones left out).
    static func fetchMany(appID: String, callIDs: [String], on db: PostgresConnection) throws -> [Call] {
        if callIDs.isEmpty { return [] }
        let rows = try db.query(
            """
            SELECT \(unsafeSQL: callColumns) FROM calls WHERE app_id = \(appID) AND call_id = ANY(\(callIDs)::text[])
            ORDER BY call_id FOR UPDATE
            """
        ).rows.map(call)
        return try withUsers(rows, in: callIDs, appID: appID, on: db)
    }

    /// `calls` with their users, in the order of `order` (ids missing from `calls` left out).
    private static func withUsers(_ calls: [Call], in order: [String], appID: String, on db: PostgresConnection) throws -> [Call] {
        let users = try self.users(appID: appID, callIDs: calls.map(\.callID), on: db)
        var byID: [String: Call] = [:]
        for var call in calls {
            call.users = users[call.callID] ?? []
            byID[call.callID] = call
        }
        return order.compactMap { byID[$0] }
    }

    private static func users(appID: String, callIDs: [String], on db: PostgresConnection) throws -> [String: [CallUser]] {
        var out: [String: [CallUser]] = [:]
        for row in try db.query(
            """
            SELECT call_id, \(unsafeSQL: userColumns) FROM call_users WHERE app_id = \(appID) AND call_id = ANY(\(callIDs)::text[])
            ORDER BY call_id, position
            """
        ).decode((String, String, Int, String, String?, String, Int64?, Int64, Int64?, Int64?).self) {
            let (callID, userID, position, state, inviterID, extendedData, invitedAt, updatedAt, acceptedAt, quitAt) = row
            out[callID, default: []].append(
                CallUser(
                    userID: userID, position: position, state: CallUser.State(rawValue: state) ?? .ended, inviterID: inviterID,
                    extendedData: extendedData, invitedAt: invitedAt, updatedAt: updatedAt, acceptedAt: acceptedAt, quitAt: quitAt))
        }
        return out
    }

    /// A row of ``callColumns``.
    private static func call(_ row: PostgresRow) throws -> Call {
        let (callID, mode, callerID, state, endReason, extendedData, timeoutS, notReceivedCheck, createdAt, endedAt) = try row.decode(
            (String, String, String, String, String?, String, Int64, Bool, Int64, Int64?).self)
        return Call(
            callID: callID, mode: Call.Mode(rawValue: mode) ?? .general, callerID: callerID, ended: state == "ended",
            endReason: endReason.flatMap { Call.EndReason(rawValue: $0) }, extendedData: extendedData, timeoutS: timeoutS,
            notReceivedCheck: notReceivedCheck, createdAt: createdAt, endedAt: endedAt, users: [])
    }

    static func insert(appID: String, call: Call, on db: PostgresConnection) throws {
        try db.query(
            """
            INSERT INTO calls (app_id, call_id, mode, caller_id, state, extended_data, timeout_s, not_received_check, created_at)
            VALUES (\(appID), \(call.callID), \(call.mode.rawValue), \(call.callerID), 'started', \(call.extendedData), \(call.timeoutS),
                    \(call.notReceivedCheck), \(call.createdAt))
            """)
    }

    /// Stores the call's state (`state`, `end_reason`, `ended_at`). An ended call has no timer left: the change that
    /// ended it left no user pending, and ``save(appID:call:users:on:)`` clears the due times of every user it moves.
    static func saveState(appID: String, call: Call, on db: PostgresConnection) throws {
        try db.query(
            """
            UPDATE calls SET state = \(call.ended ? "ended" : "started"), end_reason = \(call.endReason?.rawValue), ended_at = \(call.endedAt)
            WHERE app_id = \(appID) AND call_id = \(call.callID)
            """)
    }

    /// Writes `users` of `call` (new or changed), with the due times of their timers.
    static func save(appID: String, call: Call, users: [CallUser], on db: PostgresConnection) throws {
        for user in users {
            let timeoutAt = user.state.isPending ? user.invitedAt.map { $0 + call.timeoutS * 1000 } : nil
            let checkAt =
                user.state == .inviting && call.notReceivedCheck ? user.invitedAt.map { $0 + CallLimits.notReceivedCheckMillis } : nil
            try db.query(
                """
                INSERT INTO call_users (app_id, call_id, user_id, position, state, inviter_id, extended_data, invited_at, updated_at,
                                        accepted_at, quit_at, call_created_at, timeout_at, check_at)
                VALUES (\(appID), \(call.callID), \(user.userID), \(user.position), \(user.state.rawValue), \(user.inviterID),
                        \(user.extendedData), \(user.invitedAt), \(user.updatedAt), \(user.acceptedAt), \(user.quitAt), \(call.createdAt),
                        \(timeoutAt), \(checkAt))
                ON CONFLICT (app_id, call_id, user_id) DO UPDATE SET
                    state = EXCLUDED.state, inviter_id = EXCLUDED.inviter_id, extended_data = EXCLUDED.extended_data,
                    invited_at = EXCLUDED.invited_at, updated_at = EXCLUDED.updated_at, accepted_at = EXCLUDED.accepted_at,
                    quit_at = EXCLUDED.quit_at, timeout_at = EXCLUDED.timeout_at, check_at = EXCLUDED.check_at
                """)
        }
    }

    // MARK: - What the checks read

    /// The active (not soft-deleted) users among `userIDs`, locked `FOR SHARE` in user-id order: a stream opening
    /// (which locks its user `FOR UPDATE`) then either commits before this transaction reads the streams, or waits for
    /// it and finds its invitations (the `received` state, docs/calls.md#the-call-object).
    static func lockActiveUsers(appID: String, userIDs: [String], on db: PostgresConnection) throws -> Set<String> {
        if userIDs.isEmpty { return [] }
        let rows = try db.query(
            """
            SELECT user_id, deleted_at IS NULL FROM users WHERE app_id = \(appID) AND user_id = ANY(\(userIDs)::text[])
            ORDER BY user_id FOR SHARE
            """)
        return Set(try rows.decode((String, Bool).self).filter { $0.1 }.map { $0.0 })
    }

    /// The users among `userIDs` whose blacklist holds `inviter`.
    static func blocking(appID: String, userIDs: [String], inviter: String, on db: PostgresConnection) throws -> Set<String> {
        if userIDs.isEmpty { return [] }
        return Set(
            try db.query(
                "SELECT user_id FROM blacklist WHERE app_id = \(appID) AND user_id = ANY(\(userIDs)::text[]) AND blocked_id = \(inviter)"
            ).decode(String.self))
    }

    /// The users among `userIDs` with a presence-counting stream open (Migrations/0008 `user_streams`).
    static func online(appID: String, userIDs: [String], on db: PostgresConnection) throws -> Set<String> {
        if userIDs.isEmpty { return [] }
        return Set(
            try db.query(
                """
                SELECT DISTINCT user_id FROM user_streams WHERE app_id = \(appID) AND user_id = ANY(\(userIDs)::text[]) AND counts_presence
                """
            ).decode(String.self))
    }

    /// The calls in which `userID` has an invitation still `inviting` or `not_yet_received`, oldest first.
    static func unreceived(appID: String, userID: String, on db: PostgresConnection) throws -> [String] {
        try db.query(
            """
            SELECT call_id FROM call_users
            WHERE app_id = \(appID) AND user_id = \(userID) AND state IN ('inviting', 'not_yet_received') ORDER BY call_id
            """
        ).decode(String.self)
    }

    /// The calls (started ones first by nature) that `userID` is in, for a hard delete.
    static func callsOf(appID: String, userID: String, on db: PostgresConnection) throws -> [String] {
        try db.query(
            """
            SELECT cu.call_id FROM call_users cu JOIN calls c ON c.app_id = cu.app_id AND c.call_id = cu.call_id
            WHERE cu.app_id = \(appID) AND cu.user_id = \(userID) AND c.state = 'started' ORDER BY cu.call_id
            """
        ).decode(String.self)
    }

    /// `GET /v1/users/{user_id}/calls`: by created_at desc, then call_id desc (byte order).
    static func list(
        appID: String, userID: String, ended: Bool?, after: (Int64, String)?, limit: Int, on db: PostgresConnection
    ) throws -> [Call] {
        // The state is read per listed row (a correlated probe of the call's primary key), so the walk follows the
        // user's index in order and stops at the page: a join let the generic plan hash every started call of the app
        // (4.4 ms at 4,000 started calls, growing with them).
        var query: PostgresQuery = """
            SELECT cu.call_id FROM call_users cu
            WHERE cu.app_id = \(appID) AND cu.user_id = \(userID)
            """
        if let ended {
            query += """
                 AND (SELECT c.state FROM calls c WHERE c.app_id = cu.app_id AND c.call_id = cu.call_id) = \(ended ? "ended" : "started")
                """
        }
        if let (t, id) = after {
            query += " AND (cu.call_created_at, cu.call_id COLLATE \"C\") < (\(t), \(id) COLLATE \"C\")"
        }
        query += " ORDER BY cu.call_created_at DESC, cu.call_id COLLATE \"C\" DESC LIMIT \(limit)"
        let ids = try db.query(query).decode(String.self)
        if ids.isEmpty { return [] }
        let rows = try db.query(
            "SELECT \(unsafeSQL: callColumns) FROM calls WHERE app_id = \(appID) AND call_id = ANY(\(ids)::text[])"
        ).rows.map(call)
        return try withUsers(rows, in: ids, appID: appID, on: db)
    }

    /// Calls with a user whose timeout or not-received check is due at `now`, in any app, earliest due first.
    static func due(now: Int64, limit: Int, on db: PostgresConnection) throws -> [(appID: String, callID: String)] {
        try db.query(
            """
            SELECT app_id, call_id FROM (
                SELECT app_id, call_id, timeout_at AS due FROM call_users WHERE timeout_at <= \(now)
                UNION ALL
                SELECT app_id, call_id, check_at FROM call_users WHERE check_at <= \(now)
            ) d GROUP BY app_id, call_id ORDER BY min(due), app_id, call_id LIMIT \(limit)
            """
        ).decode((String, String).self).map { (appID: $0.0, callID: $0.1) }
    }

    /// The app's calls in progress (`/v1/stats` `calls_active`).
    package static func activeCount(appID: String, on db: PostgresConnection) throws -> Int64 {
        try db.query("SELECT count(*) FROM calls WHERE app_id = \(appID) AND state = 'started'").decodeFirst(Int64.self) ?? 0
    }
}
