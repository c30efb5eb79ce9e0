import ParleyHTTP
import ParleyPostgres
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// The moderation log (docs/moderation.md#the-moderation-log) and automatic escalation
/// (docs/moderation.md#automatic-escalation): real HTTP against a real server and database; blocklist hits are handed
/// to ``ReportHooks`` directly, as blocklist evaluation will.
@Suite("Moderation log and automatic escalation", .inProcess)
struct ModerationLogTests: ProblemAssertions {
    static func log(_ app: TestApp, _ query: String = "") throws -> TestResponse {
        let r = try app.request(.get, "/v1/moderation/log\(query)")
        #expect(r.status == 200, "\(r.text)")
        return r
    }

    static func entries(_ app: TestApp, _ query: String = "") throws -> [JSONValue] {
        try log(app, query).json?["items"]?.arrayValue ?? []
    }

    static func actions(_ app: TestApp, _ query: String = "") throws -> [String] {
        try entries(app, query).compactMap { $0["action"]?.stringValue }
    }

    /// Hands a blocklist hit to the reports domain, as blocklist evaluation does, at the server clock.
    static func hit(
        _ server: TestServer, _ app: TestApp, user: String?, action: BlocklistHit.Action, flagged: [String] = [],
        target: BlocklistHit.Target = .refusedSend
    ) {
        let services = server.app.services
        let hooks = ReportHooks.blocklistHooks(services: services)
        hooks.hit(
            BlocklistHit(
                appID: app.appID, userID: user, action: action, blocklists: flagged.isEmpty ? ["words"] : flagged, flagged: flagged,
                target: target, at: services.clock.now()))
        services.sequencer.publishAndWait(app.appID)
    }

    // MARK: - The user routes

    @Test func userRoutesAreLoggedWithSourceAPI() throws {
        try withApp(testClock: true) { server, app in
            for id in ["u1", "u2", "u3"] { try app.createUser(id) }
            #expect(try app.request(.post, "/v1/users/u1/mute", json: #"{"duration_s":60}"#).status == 200)
            try server.advanceClock(ms: 1000)
            #expect(try app.request(.post, "/v1/users/u1/mute", json: #"{"duration_s":0}"#).status == 200)
            // Lifting no mute logs nothing.
            #expect(try app.request(.post, "/v1/users/u1/mute", json: #"{"duration_s":0}"#).status == 200)
            try server.advanceClock(ms: 1000)
            #expect(try app.request(.post, "/v1/users/u2/ban", json: #"{"duration_s":-1,"reason":"spam"}"#).status == 200)
            try server.advanceClock(ms: 1000)
            #expect(try app.request(.post, "/v1/users/u2/unban").status == 200)
            #expect(try app.request(.post, "/v1/users/u2/unban").status == 200)
            try server.advanceClock(ms: 1000)
            #expect(try app.request(.post, "/v1/users/u3/kick", json: #"{"platforms":["web"],"revoke_tokens":false}"#).status == 200)
            try server.advanceClock(ms: 1000)
            #expect(try app.request(.delete, "/v1/users/u3?mode=hard").status == 204)
            // A refused request logs nothing.
            #expect(try app.request(.post, "/v1/users/ghost/ban", json: #"{"duration_s":60}"#).status == 404)

            let all = try Self.entries(app)
            #expect(all.compactMap { $0["action"]?.stringValue } == ["delete_user", "kick", "unban", "ban", "unmute", "mute"])
            #expect(all.allSatisfy { $0["source"] == .string("api") && $0["moderator"] == .null })
            #expect(Set(all.first?.objectValue?.keys ?? []) == ["action_id", "action", "target", "params", "moderator", "source", "at"])
            #expect(all[0]["params"] == .object(["mode": .string("hard")]))
            #expect(all[1]["params"] == .object(["platforms": .array([.string("web")]), "revoke_tokens": .bool(false)]))
            #expect(all[3]["params"] == .object(["duration_s": .int(-1), "reason": .string("spam")]))
            #expect(all[5]["params"] == .object(["duration_s": .int(60)]))
            #expect(all[5]["target"] == .object(["type": .string("user"), "id": .string("u1")]))
            let times = all.compactMap { $0["at"]?.intValue }
            #expect(times == times.sorted(by: >))

            // Filters.
            #expect(try Self.actions(app, "?user_id=u2") == ["unban", "ban"])
            #expect(try Self.actions(app, "?action=kick") == ["kick"])
            #expect(try Self.actions(app, "?moderator=nobody").isEmpty)
            let banAt = all[3]["at"]?.intValue ?? 0
            #expect(try Self.actions(app, "?from=\(banAt)") == ["delete_user", "kick", "unban", "ban"])
            #expect(try Self.actions(app, "?to=\(banAt)") == ["unmute", "mute"])
            #expect(try Self.actions(app, "?from=\(banAt)&to=\(banAt + 1)") == ["ban"])

            // Paging, two at a time.
            var seen: [String] = []
            var cursor: String? = nil
            repeat {
                let page = try Self.log(app, "?limit=2" + (cursor.map { "&cursor=\($0)" } ?? ""))
                #expect((page.json?["items"]?.arrayValue?.count ?? 0) <= 2)
                seen += page.json?["items"]?.arrayValue?.compactMap { $0["action"]?.stringValue } ?? []
                cursor = page.json?["next_cursor"]?.stringValue
            } while cursor != nil && seen.count < 20
            #expect(seen == ["delete_user", "kick", "unban", "ban", "unmute", "mute"])

            // Bad inputs and access.
            Self.expectProblem(try app.request(.get, "/v1/moderation/log?cursor=junk"), 400, .invalidCursor)
            Self.expectProblem(try app.request(.get, "/v1/moderation/log?from=abc"), 400, .invalidParams)
            Self.expectProblem(try app.request(.get, "/v1/moderation/log?limit=0"), 400, .invalidParams)
            try app.createUser("u4")
            let token = try app.token(for: "u4")
            #expect(try server.request(.get, "/v1/moderation/log", bearer: token).status == 403)
            // Another app's log is its own, and an app's log and reports go with the app.
            let other = try server.createApp()
            #expect(try Self.entries(other).isEmpty)
            #expect(
                try app.request(.post, "/v1/reports", json: #"{"reporter_id":"u4","target":{"type":"user","user_id":"u1"},"reason":"spam"}"#).status
                    == 201)
            #expect(try server.request(.delete, "/v1/apps/\(app.appID)", bearer: server.adminKey).status == 204)
            #expect(try server.count("SELECT count(*) FROM moderation_actions WHERE app_id = $1", [app.appID]) == 0)
            #expect(try server.count("SELECT count(*) FROM reports WHERE app_id = $1", [app.appID]) == 0)
        }
    }

    // MARK: - Automatic escalation

    @Test func flaggedContentFilesAutomaticReports() throws {
        try withApp(testClock: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let sent = try MessageActions.send(app, "a", "b", "cheap pills")
            let mid = sent["message_id"]?.stringValue ?? ""
            Self.hit(
                server, app, user: "a", action: .flag, flagged: ["pharma"],
                target: .message(messageID: mid, snapshot: ["message_id": .string(mid), "text": .string("cheap pills")]))
            Self.hit(
                server, app, user: "a", action: .mask, flagged: ["links"],
                target: .user(userID: "a", snapshot: ["user_id": .string("a"), "name": .string("pills")]))
            Self.hit(server, app, user: nil, action: .flag, flagged: ["names"], target: .group(groupID: "g1", snapshot: ["group_id": .string("g1")]))
            // A refused send has nothing to report; a block with no flag files nothing either.
            Self.hit(server, app, user: "a", action: .block, flagged: ["pharma"])
            Self.hit(server, app, user: "a", action: .block, target: .message(messageID: "m-none", snapshot: [:]))

            let list = try app.request(.get, "/v1/reports?reason=automod")
            let reports = list.json?["items"]?.arrayValue ?? []
            #expect(reports.count == 3, "\(list.text)")
            #expect(reports.allSatisfy { $0["reporter_id"] == .null && $0["reason"] == .string("automod") })
            let message = reports.first { $0["target"]?["type"] == .string("message") }
            #expect(message?["target"]?["message_id"] == .string(mid))
            #expect(message?["target_snapshot"]?["text"] == .string("cheap pills"))
            #expect(message?["comment"] == .string("blocklists: pharma"))
            #expect(reports.first { $0["target"]?["type"] == .string("user") }?["target_snapshot"]?["name"] == .string("pills"))
            #expect(reports.first { $0["target"]?["type"] == .string("group") }?["target"]?["group_id"] == .string("g1"))
            // user_id finds the message's sender and the user.
            #expect(try app.request(.get, "/v1/reports?user_id=a").json?["items"]?.arrayValue?.count == 2)
            #expect(try app.events(query: "types=report.created").count == 3)
            // Threshold 0 (the default): strikes are not even counted, nobody is muted.
            #expect(try server.count("SELECT count(*) FROM automod_strikes WHERE app_id = $1", [app.appID]) == 0)
            #expect(try app.request(.get, "/v1/users/a").json?["muted_until"] == .int(0))
            #expect(try Self.entries(app).isEmpty)
        }
    }

    @Test func strikesInsideTheWindowMuteOnce() throws {
        let settings = #"{"automod_block_threshold":3,"automod_window_s":60,"automod_action":"mute","automod_mute_s":600}"#
        try withApp(testClock: true, settings: settings) { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }
            // Two strikes, then the window passes: they no longer count.
            Self.hit(server, app, user: "a", action: .block)
            Self.hit(server, app, user: "a", action: .block)
            try server.advanceClock(ms: 61_000)
            Self.hit(server, app, user: "a", action: .block)
            Self.hit(server, app, user: "a", action: .flag, flagged: ["f"], target: .user(userID: "a", snapshot: ["user_id": .string("a")]))
            // Shadow blocks and masks are no strikes; another user's strikes are its own.
            Self.hit(server, app, user: "a", action: .shadowBlock, target: .message(messageID: "m1", snapshot: [:]))
            Self.hit(server, app, user: "a", action: .mask, target: .message(messageID: "m2", snapshot: [:]))
            Self.hit(server, app, user: "c", action: .block)
            Self.hit(server, app, user: "c", action: .block)
            #expect(try app.request(.get, "/v1/users/a").json?["muted_until"] == .int(0))
            #expect(try Self.entries(app).isEmpty)

            // The third strike inside the window mutes for automod_mute_s.
            let before = server.app.services.clock.now()
            Self.hit(server, app, user: "a", action: .block)
            let after = server.app.services.clock.now()
            let mutedUntil = try app.request(.get, "/v1/users/a").json?["muted_until"]?.intValue ?? 0
            #expect((before + 600_000...after + 600_000).contains(mutedUntil))
            Self.expectProblem(try PeerMessages.sendText(app, "a", "b", "hi"), 403, .senderMuted)
            var log = try Self.entries(app)
            #expect(log.count == 1)
            #expect(log.first?["action"] == .string("automod_mute"))
            #expect(log.first?["moderator"] == .string("automod"))
            #expect(log.first?["source"] == .string("automod"))
            #expect(log.first?["target"] == .object(["type": .string("user"), "id": .string("a")]))
            #expect(log.first?["params"]?["duration_s"] == .int(600))

            // The same strikes never escalate again: two more are not enough.
            Self.hit(server, app, user: "a", action: .block)
            Self.hit(server, app, user: "a", action: .block)
            #expect(try Self.entries(app).count == 1)
            // A third new one within the window is.
            Self.hit(server, app, user: "a", action: .block)
            log = try Self.entries(app, "?moderator=automod")
            #expect(log.count == 2)
            #expect(try Self.entries(app, "?user_id=c").isEmpty)

            let metrics = try server.request(.get, "/metrics").text
            #expect(metrics.contains("parley_automod_actions_total{action=\"automod_mute\"}"))
        }
    }

    @Test func banEscalation() throws {
        let settings = #"{"automod_block_threshold":2,"automod_window_s":10,"automod_action":"ban"}"#
        try withApp(testClock: true, settings: settings) { server, app in
            try app.createUser("a")
            let token = try app.token(for: "a")
            Self.hit(server, app, user: "a", action: .block)
            try server.advanceClock(ms: 9_000)
            Self.hit(server, app, user: "a", action: .block)
            #expect(try app.request(.get, "/v1/users/a").json?["banned_until"] == .int(-1))
            Self.expectProblem(try server.request(.get, "/v1/users/a", bearer: token), 403, .userBanned)
            let log = try Self.entries(app)
            #expect(log.compactMap { $0["action"]?.stringValue } == ["automod_ban"])
            #expect(log.first?["source"] == .string("automod"))
            // An unknown user's hits are dropped quietly.
            Self.hit(server, app, user: "ghost", action: .block)
            Self.hit(server, app, user: "ghost", action: .block)
            #expect(try Self.entries(app).count == 1)
        }
    }
}
