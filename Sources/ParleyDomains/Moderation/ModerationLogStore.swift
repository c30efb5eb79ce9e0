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
