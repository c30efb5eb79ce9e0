import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The moderation log (docs/moderation.md#the-moderation-log): every moderation action, whatever decided it.
///
/// It sits at the bottom of the domains so that the user routes (mute, ban, kick, delete), the report actions,
/// automatic escalation and bulk removals all write it in the transaction that does the action.
package enum ModerationLogStore {
    /// Who or what decided an action.
    package enum Source: String, Sendable {
        case api, report, automod, job
    }

    /// One action to record.
    package struct Entry: Sendable {
        /// `mute`, `unmute`, `ban`, `unban`, `kick`, `delete_user`, a report action name (`dismiss`,
        /// `delete_message`, `mute_user`, `ban_user`, `warn_user`, `remove_from_group`), `automod_mute`,
        /// `automod_ban` or `remove_messages`.
        package var action: String
        /// `user`, `message`, `group` or `conversation`.
        package var targetType: String
        package var targetID: String
        package var params: JSONObject
        /// Free text naming who decided (a report action's `moderator`, `automod`), or nil.
        package var moderator: String?
        package var source: Source

        package init(action: String, targetType: String, targetID: String, params: JSONObject = [:], moderator: String?, source: Source) {
            self.action = action
            self.targetType = targetType
            self.targetID = targetID
            self.params = params
            self.moderator = moderator
            self.source = source
        }
    }

    /// Records `entry` at `now` on `db` (inside the caller's transaction).
    package static func record(_ entry: Entry, appID: String, now: Int64, on db: PostgresConnection) throws {
        try db.query(
            """
            INSERT INTO moderation_actions (app_id, action, target_type, target_id, params, moderator, source, at)
            VALUES (\(appID), \(entry.action), \(entry.targetType), \(entry.targetID), \(String(decoding: JSONValue.object(entry.params).serialized(), as: UTF8.self))::jsonb,
                    \(entry.moderator), \(entry.source.rawValue), \(now))
            """)
    }
}

// MARK: - Reading the log

extension ModerationLogStore {
    /// One recorded action as `GET /v1/moderation/log` lists it.
    package struct LoggedAction: Sendable {
        package var actionID: Int64
        package var action: String
        package var targetType: String
        package var targetID: String
        /// The params as stored (JSON).
        package var params: String
        package var moderator: String?
        package var source: String
        package var at: Int64

        /// `{action_id, action, target: {type, id}, params, moderator, source, at}`.
        package func json() -> [UInt8] {
            var o = JSONObjectWriter(capacity: 256 + params.utf8.count)
            o["action_id"] = actionID
            o["action"] = action
            var target = JSONObjectWriter(capacity: 64)
            target["type"] = targetType
            target["id"] = targetID
            o.raw("target", target.finish())
            o.raw("params", Array(params.utf8))
            o["moderator"] = moderator
            o["source"] = source
            o["at"] = at
            return o.finish()
        }
    }

    /// The log's filters; `from` inclusive, `to` exclusive (ms).
    package struct Filter: Sendable {
        package var userID: String?
        package var action: String?
        package var moderator: String?
        package var from: Int64?
        package var to: Int64?

        package init(userID: String? = nil, action: String? = nil, moderator: String? = nil, from: Int64? = nil, to: Int64? = nil) {
            self.userID = userID
            self.action = action
            self.moderator = moderator
            self.from = from
            self.to = to
        }
    }

    /// Up to `limit` actions matching `filter`, newest first, strictly before `before` (`at`, `action_id`).
    /// `userID` matches the actions whose target is that user.
    package static func list(appID: String, filter: Filter, before: (at: Int64, id: Int64)?, limit: Int, on db: PostgresConnection) throws
        -> [LoggedAction]
    {
        var q: PostgresQuery = """
            SELECT action_id, action, target_type, target_id, params::text, moderator, source, at FROM moderation_actions
            WHERE app_id = \(appID)
            """
        if let userID = filter.userID { q += " AND target_type = 'user' AND target_id = \(userID)" }
        if let action = filter.action { q += " AND action = \(action)" }
        if let moderator = filter.moderator { q += " AND moderator = \(moderator)" }
        if let from = filter.from { q += " AND at >= \(from)" }
        if let to = filter.to { q += " AND at < \(to)" }
        if let before { q += " AND (at, action_id) < (\(before.at)::bigint, \(before.id)::bigint)" }
        q += " ORDER BY at DESC, action_id DESC LIMIT \(limit)"
        return try db.query(q).decode((Int64, String, String, String, String, String?, String, Int64).self).map {
            LoggedAction(actionID: $0.0, action: $0.1, targetType: $0.2, targetID: $0.3, params: $0.4, moderator: $0.5, source: $0.6, at: $0.7)
        }
    }
}
