import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// The receiving side of blocklist hits (docs/moderation.md#automatic-escalation): the automatic report of a `flag`,
/// and the strikes that mute or ban a user who keeps sending blocked or flagged content.
package enum ReportHooks {
    /// The hooks the app layer hands to blocklist evaluation (App/Routes.swift). `hit` runs one transaction of its own
    /// and blocks the calling thread for it: call it on a pool worker (a request's handler) or a background thread,
    /// never on an event loop, and outside any open transaction (inside one it would become a savepoint of it, and
    /// a refused send's rollback would take the strike with it).
    package static func blocklistHooks(services: Services) -> BlocklistHooks {
        BlocklistHooks(hit: { hit in
            do {
                if let escalation = try handle(hit, services: services) { ReportMetrics.automodAction(escalation) }
            } catch {
                services.logger.warning("msg=\"blocklist hit not recorded\" app=\(hit.appID) error=\"\(error)\"")
            }
        })
    }

    /// Files the hit's automatic report and counts its strike, in one transaction at the server clock; returns the
    /// escalation it did (`automod_mute` / `automod_ban`), if any.
    static func handle(_ hit: BlocklistHit, services: Services) throws -> String? {
        try services.pool.transaction { db in
            guard let app = try services.apps.app(hit.appID, db: db) else { return nil }
            let now = services.clock.now()
            if !hit.flagged.isEmpty, let (target, userID, snapshot) = reportable(hit) {
                try ReportService(db: db, appID: hit.appID, now: now).fileAutomatic(
                    target: target, targetUserID: userID, snapshot: snapshot, comment: "blocklists: " + hit.flagged.joined(separator: ", "), on: db)
            }
            guard hit.action == .block || !hit.flagged.isEmpty, let userID = hit.userID else { return nil }
            return try strike(userID, settings: app.settings, appID: hit.appID, now: now, on: db)
        }
    }

    /// The report target of a hit: the stored message, the user, the group (a refused send has none).
    private static func reportable(_ hit: BlocklistHit) -> (ModerationReport.Target, String?, [UInt8])? {
        switch hit.target {
        case .message(let messageID, let snapshot):
            return (ModerationReport.Target(type: .message, id: messageID), hit.userID, JSONValue.object(snapshot).serialized())
        case .user(let userID, let snapshot):
            return (ModerationReport.Target(type: .user, id: userID), userID, JSONValue.object(snapshot).serialized())
        case .group(let groupID, let snapshot):
            return (ModerationReport.Target(type: .group, id: groupID), nil, JSONValue.object(snapshot).serialized())
        case .refusedSend:
            return nil
        }
    }

    /// Counts a strike of `userID` (its row locked, so nodes count one at a time) and escalates when its strikes
    /// not yet acted on within `automod_window_s` reach `automod_block_threshold` (0: off).
    private static func strike(_ userID: String, settings: AppSettings, appID: String, now: Int64, on db: PostgresConnection) throws -> String? {
        let threshold = settings.int("automod_block_threshold")
        guard threshold > 0 else { return nil }
        guard (try? UserService.requireActive(userID, appID: appID, forUpdate: true, on: db)) != nil else { return nil }
        let windowStart = now - settings.int("automod_window_s") * 1000
        try ReportStore.addStrike(appID: appID, userID: userID, now: now, windowStart: windowStart, on: db)
        guard try ReportStore.pendingStrikes(appID: appID, userID: userID, windowStart: windowStart, on: db) >= threshold else { return nil }
        try ReportStore.markEscalated(appID: appID, userID: userID, on: db)
        let users = UserService(db: db, appID: appID, now: now)
        if settings.string("automod_action") == "ban" {
            let entry = ModerationLogStore.Entry(
                action: "automod_ban", targetType: "user", targetID: userID, params: ["strikes": .int(threshold)], moderator: "automod",
                source: .automod)
            _ = try users.ban(userID, durationSeconds: -1, reason: "automod", logAs: entry)
            return entry.action
        }
        let muteS = settings.int("automod_mute_s")
        let entry = ModerationLogStore.Entry(
            action: "automod_mute", targetType: "user", targetID: userID, params: ["duration_s": .int(muteS), "strikes": .int(threshold)],
            moderator: "automod", source: .automod)
        _ = try users.mute(userID, durationSeconds: muteS, logAs: entry)
        return entry.action
    }
}
