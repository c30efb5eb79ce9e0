import ParleyAPI
import ParleyCore
import ParleyPostgres

/// A blocklist match that blocked or flagged content (docs/moderation.md#blocklists), handed to the moderation
/// domain above (reports, automatic escalation) through ``BlocklistHooks``: Users, Messages and Groups evaluate
/// blocklists but never name reports.
package struct BlocklistHit: Sendable {
    package enum Action: String, Sendable {
        case flag
        case block
        case shadowBlock = "shadow_block"
        case mask
    }
    /// What the content was.
    package enum Target: Sendable {
        /// A stored message (flag, shadow block, mask): the Message in the app view as stored.
        case message(messageID: String, snapshot: JSONObject)
        /// A refused send (block): nothing was stored.
        case refusedSend
        /// A user's profile (`user_profile`): the User as written.
        case user(userID: String, snapshot: JSONObject)
        /// A group's profile (`group_profile`): the Group as written.
        case group(groupID: String, snapshot: JSONObject)
    }

    package var appID: String
    /// The user who sent or wrote the content; nil when the app key wrote a profile with no acting user.
    package var userID: String?
    /// The strongest action of the match.
    package var action: Action
    /// Every blocklist that matched (names), strongest first.
    package var blocklists: [String]
    /// The matching blocklists whose action is `flag` (a flag beside a stronger action still files its report).
    package var flagged: [String]
    package var target: Target
    package var at: Int64

    package init(appID: String, userID: String?, action: Action, blocklists: [String], flagged: [String], target: Target, at: Int64) {
        self.appID = appID
        self.userID = userID
        self.action = action
        self.blocklists = blocklists
        self.flagged = flagged
        self.target = target
        self.at = at
    }
}

/// What blocklist evaluation needs from the moderation domain above, wired by the app layer (App/Routes.swift).
package struct BlocklistHooks: Sendable {
    /// Called after a hit that blocked, shadow-blocked, masked or flagged content: for a refused send before the 422
    /// is answered, for stored content after it committed. Files the automatic report of a `flag` and counts the hit
    /// toward automatic escalation (`automod_block_threshold`). Errors are logged, never answered to the sender.
    package var hit: @Sendable (BlocklistHit) -> Void

    package init(hit: @escaping @Sendable (BlocklistHit) -> Void) {
        self.hit = hit
    }

    /// Hooks that do nothing (tests of a domain alone).
    package static let none = BlocklistHooks(hit: { _ in })
}
