import Dispatch
import ParleyHTTP
import ParleyPostgres
import ParleyTesting
import Synchronization
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Reports, the review queue and report actions (docs/moderation.md) end to end: real HTTP against a real server and
/// database.
@Suite("Reports", .inProcess)
struct ReportsTests: GroupTestSupport {
    // MARK: - Helpers

    static func q(_ s: String) -> String { JSONValue.string(s).description }

    static func messageTarget(_ id: String) -> String { "{\"type\":\"message\",\"message_id\":\(q(id))}" }
    static func userTarget(_ id: String) -> String { "{\"type\":\"user\",\"user_id\":\(q(id))}" }
    static func groupTarget(_ id: String) -> String { "{\"type\":\"group\",\"group_id\":\(q(id))}" }

    /// `POST /v1/reports` with the app key for `reporter`.
    @discardableResult
    static func report(_ app: TestApp, _ reporter: String, _ target: String, reason: String = "spam", comment: String? = nil) throws -> TestResponse {
        var json = "{\"reporter_id\":\(q(reporter)),\"target\":\(target),\"reason\":\(q(reason))"
        if let comment { json += ",\"comment\":\(q(comment))" }
        return try app.request(.post, "/v1/reports", json: json + "}")
    }

    /// Files a report (201 expected) and returns its id.
    static func reportID(_ app: TestApp, _ reporter: String, _ target: String, reason: String = "spam") throws -> String {
        let r = try report(app, reporter, target, reason: reason)
        guard r.status == 201, let id = r.json?["report_id"]?.stringValue else { throw TestFailure("report failed: \(r.status) \(r.text)") }
        return id
    }

    @discardableResult
    static func act(_ app: TestApp, _ reportID: String, _ json: String) throws -> TestResponse {
        try app.request(.post, "/v1/reports/\(reportID)/actions", json: json)
    }

    static func items(_ r: TestResponse) -> [JSONValue] { r.json?["items"]?.arrayValue ?? [] }

    static func log(_ app: TestApp, _ query: String = "") throws -> [JSONValue] {
        let r = try app.request(.get, "/v1/moderation/log\(query)")
        #expect(r.status == 200, "\(r.text)")
        return items(r)
    }

    static func messageID(_ sent: JSONValue) -> String { sent["message_id"]?.stringValue ?? "" }

    // MARK: - Filing

    @Test func fileReadAndListReports() throws {
        try withApp(testClock: true) { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id, name: "N" + id) }
            let sent = try MessageActions.send(app, "a", "b", "buy my stuff")
            let mid = Self.messageID(sent)

            // A user token reports as itself.
            let token = try app.token(for: "b")
            let created = try server.request(
                .post, "/v1/reports", bearer: token, json: "{\"target\":\(Self.messageTarget(mid)),\"reason\":\"spam\",\"comment\":\"ads\"}")
            #expect(created.status == 201, "\(created.text)")
            let report = created.json
            #expect(report?["status"] == .string("open"))
            #expect(report?["reason"] == .string("spam"))
            #expect(report?["comment"] == .string("ads"))
            #expect(report?["reporter_id"] == .string("b"))
            #expect(report?["target"] == .object(["type": .string("message"), "message_id": .string(mid)]))
            #expect(report?["target_snapshot"]?["body"]?["text"] == .string("buy my stuff"))
            #expect(report?["target_snapshot"]?["from"] == .string("a"))
            #expect(report?["resolved_at"] == .null)
            #expect(report?["actions"] == .array([]))
            #expect(report?["report_count"] == .int(1))
            #expect(
                Set(report?.objectValue?.keys ?? []) == [
                    "report_id", "status", "reason", "comment", "reporter_id", "target", "target_snapshot", "created_at", "resolved_at", "actions",
                    "report_count",
                ])
            let first = report?["report_id"]?.stringValue ?? ""

            // A user token naming another reporter → 403.
            let other = try server.request(
                .post, "/v1/reports", bearer: token, json: "{\"reporter_id\":\"c\",\"target\":\(Self.userTarget("a")),\"reason\":\"spam\"}")
            #expect(other.status == 403)

            // The app reports for another user (a user and a group target too).
            try server.advanceClock(ms: 10)
            let second = try Self.reportID(app, "c", Self.userTarget("a"), reason: "abuse")
            let gid = try Self.createGroup(app, "a", members: ["b"])
            try server.advanceClock(ms: 10)
            let third = try Self.reportID(app, "c", Self.groupTarget(gid), reason: "other")
            try server.advanceClock(ms: 10)
            let dup = try Self.reportID(app, "b", Self.userTarget("a"))

            // GET one: the reports on the same target, newest first.
            let one = try app.request(.get, "/v1/reports/\(second)")
            #expect(one.status == 200, "\(one.text)")
            #expect(one.json?["reports"]?.arrayValue?.compactMap { $0["report_id"]?.stringValue } == [dup, second])
            #expect(one.json?["report_count"] == .int(2))
            #expect(one.json?["target_snapshot"]?["user_id"] == .string("a"))

            // The queue: open ones, oldest first, with filters.
            let all = try app.request(.get, "/v1/reports")
            #expect(all.status == 200, "\(all.text)")
            #expect(Self.items(all).compactMap { $0["report_id"]?.stringValue } == [first, second, third, dup])
            #expect(Self.items(try app.request(.get, "/v1/reports?target_type=group")).compactMap { $0["report_id"]?.stringValue } == [third])
            #expect(Self.items(try app.request(.get, "/v1/reports?reason=abuse")).compactMap { $0["report_id"]?.stringValue } == [second])
            // user_id: the reported user, or a reported message's sender.
            #expect(Self.items(try app.request(.get, "/v1/reports?user_id=a")).count == 3)
            #expect(Self.items(try app.request(.get, "/v1/reports?status=resolved")).isEmpty)

            // Paging: two at a time covers all four exactly once.
            var seen: [String] = []
            var cursor: String? = nil
            repeat {
                let page = try app.request(.get, "/v1/reports?limit=2" + (cursor.map { "&cursor=\($0)" } ?? ""))
                #expect(page.status == 200, "\(page.text)")
                seen += Self.items(page).compactMap { $0["report_id"]?.stringValue }
                cursor = page.json?["next_cursor"]?.stringValue
            } while cursor != nil && seen.count < 10
            #expect(seen == [first, second, third, dup])
            // Closed reports come after the open ones; a status filter pages through its own part.
            #expect(try Self.act(app, second, "{\"action\":\"dismiss\"}").status == 200)
            #expect(Self.items(try app.request(.get, "/v1/reports")).compactMap { $0["report_id"]?.stringValue } == [first, third, second, dup])
            seen = []
            cursor = nil
            repeat {
                let page = try app.request(.get, "/v1/reports?status=open&limit=1" + (cursor.map { "&cursor=\($0)" } ?? ""))
                #expect(page.status == 200, "\(page.text)")
                seen += Self.items(page).compactMap { $0["report_id"]?.stringValue }
                cursor = page.json?["next_cursor"]?.stringValue
            } while cursor != nil && seen.count < 10
            #expect(seen == [first, third])
            #expect(Self.items(try app.request(.get, "/v1/reports?status=dismissed")).compactMap { $0["report_id"]?.stringValue } == [second, dup])
            Self.expectProblem(try app.request(.get, "/v1/reports?cursor=junk"), 400, .invalidCursor)
            Self.expectProblem(try app.request(.get, "/v1/reports?status=closed"), 400, .invalidParams)

            // report.created goes to the app's log only (no user audience).
            #expect(try Self.events(app, "report.created").count == 4)
            #expect(try Self.events(app, "report.created", user: "a").isEmpty)
            #expect(try Self.events(app, "report.created", user: "b").isEmpty)
            // Reads are for the app key only.
            #expect(try server.request(.get, "/v1/reports", bearer: token).status == 403)
            #expect(try server.request(.get, "/v1/reports/\(first)", bearer: token).status == 403)
        }
    }

    @Test func reportErrors() throws {
        try withApp { server, app in
            for id in ["a", "b", "c", "x"] { try app.createUser(id) }
            let mid = Self.messageID(try MessageActions.send(app, "a", "b", "hello"))
            // A user reports only what it can read: c is not in the a–b conversation.
            Self.expectProblem(try Self.report(app, "c", Self.messageTarget(mid)), 404, .messageNotFound)
            let token = try app.token(for: "c")
            Self.expectProblem(
                try server.request(.post, "/v1/reports", bearer: token, json: "{\"target\":\(Self.messageTarget(mid)),\"reason\":\"spam\"}"), 404,
                .messageNotFound)
            Self.expectProblem(try Self.report(app, "b", Self.messageTarget("nope")), 404, .messageNotFound)
            // A message b deleted for itself is no longer readable by b.
            let hidden = Self.messageID(try MessageActions.send(app, "a", "b", "gone for b"))
            #expect(
                try app.request(.post, "/v1/messages/delete", json: "{\"scope\":\"self\",\"user_id\":\"b\",\"message_ids\":[\"\(hidden)\"]}").status
                    == 200)
            Self.expectProblem(try Self.report(app, "b", Self.messageTarget(hidden)), 404, .messageNotFound)
            // Group messages: members only.
            let gid = try Self.createGroup(app, "a", members: ["b"])
            let gm = Self.messageID(try MessageActions.sendGroup(app, "a", gid, "group text"))
            Self.expectProblem(try Self.report(app, "c", Self.messageTarget(gm)), 404, .messageNotFound)
            #expect(try Self.report(app, "b", Self.messageTarget(gm)).status == 201)

            Self.expectProblem(try Self.report(app, "b", Self.userTarget("ghost")), 404, .userNotFound)
            Self.expectProblem(try Self.report(app, "ghost", Self.userTarget("a")), 404, .userNotFound)
            Self.expectProblem(try Self.report(app, "b", Self.groupTarget("nogroup")), 404, .groupNotFound)

            // The same reporter, the same open target → 409; another reporter is fine.
            #expect(try Self.report(app, "b", Self.userTarget("a")).status == 201)
            Self.expectProblem(try Self.report(app, "b", Self.userTarget("a"), reason: "abuse"), 409, .reportExists)
            #expect(try Self.report(app, "c", Self.userTarget("a")).status == 201)

            // Bad inputs.
            Self.expectProblem(try Self.report(app, "b", Self.userTarget("c"), reason: "automod"), 400, .invalidParams)
            Self.expectProblem(try Self.report(app, "b", Self.userTarget("c"), reason: "meh"), 400, .invalidParams)
            Self.expectProblem(try Self.report(app, "b", Self.userTarget("c"), comment: String(repeating: "é", count: 513)), 400, .invalidParams)
            #expect(try Self.report(app, "b", Self.userTarget("c"), comment: String(repeating: "é", count: 512)).status == 201)
            Self.expectProblem(try Self.report(app, "b", "{\"type\":\"user\"}"), 400, .invalidParams)
            Self.expectProblem(try Self.report(app, "b", "{\"type\":\"channel\",\"user_id\":\"c\"}"), 400, .invalidParams)
            Self.expectProblem(
                try app.request(.post, "/v1/reports", json: "{\"target\":\(Self.userTarget("c")),\"reason\":\"spam\"}"), 400, .invalidParams)
            Self.expectProblem(try app.request(.get, "/v1/reports/rp_unknown"), 404, .reportNotFound)
            Self.expectProblem(try Self.act(app, "rp_unknown", "{\"action\":\"dismiss\"}"), 404, .reportNotFound)
        }
    }

    @Test func snapshotSurvivesEditAndDelete() throws {
        try withApp { _, app in
            for id in ["a", "b", "c"] { try app.createUser(id, name: "N" + id) }
            let gid = try Self.createGroup(app, "a", members: ["b", "c"])
            let mid = Self.messageID(try MessageActions.sendGroup(app, "a", gid, "original text"))
            let first = try Self.reportID(app, "b", Self.messageTarget(mid))
            #expect(
                try app.request(.patch, "/v1/messages/\(mid)", json: "{\"operator\":\"a\",\"body\":{\"text\":\"edited text\"}}").status == 200)
            // A second report while the first is open shares the first snapshot.
            let second = try Self.reportID(app, "c", Self.messageTarget(mid))
            let read = try app.request(.get, "/v1/reports/\(second)").json
            #expect(read?["target_snapshot"]?["body"]?["text"] == .string("original text"))
            #expect(read?["report_count"] == .int(2))
            // Deleted for everyone: the snapshot stays.
            #expect(try app.request(.post, "/v1/messages/delete", json: "{\"scope\":\"everyone\",\"message_ids\":[\"\(mid)\"]}").status == 200)
            #expect(try app.request(.get, "/v1/reports/\(first)").json?["target_snapshot"]?["body"]?["text"] == .string("original text"))
            // delete_message on a message already gone still closes the reports.
            let done = try Self.act(app, first, "{\"action\":\"delete_message\",\"moderator\":\"m\"}")
            #expect(done.status == 200, "\(done.text)")
            #expect(try app.request(.get, "/v1/reports/\(second)").json?["status"] == .string("resolved"))
            // The user's profile snapshot too.
            let userReport = try Self.reportID(app, "b", Self.userTarget("c"))
            #expect(try app.request(.patch, "/v1/users/c", json: "{\"name\":\"Renamed\"}").status == 200)
            #expect(try app.request(.get, "/v1/reports/\(userReport)").json?["target_snapshot"]?["name"] == .string("Nc"))
        }
    }

    // MARK: - Actions

    /// Semantics 65: `ban_user` resolves every open report on the target and appears in the moderation log.
    @Test func banResolvesEveryOpenReportAndIsLogged() throws {
        try withApp { server, app in
            for id in ["a", "b", "c", "d"] { try app.createUser(id) }
            let token = try app.token(for: "a")
            let r1 = try Self.reportID(app, "b", Self.userTarget("a"))
            let r2 = try Self.reportID(app, "c", Self.userTarget("a"), reason: "abuse")
            let r3 = try Self.reportID(app, "d", Self.userTarget("a"), reason: "other")
            let elsewhere = try Self.reportID(app, "b", Self.userTarget("c"))

            let banned = try Self.act(app, r2, "{\"action\":\"ban_user\",\"duration_s\":0,\"note\":\"spam wave\",\"moderator\":\"alice\"}")
            #expect(banned.status == 200, "\(banned.text)")
            #expect(banned.json?["status"] == .string("resolved"))
            #expect(banned.json?["report_count"] == .int(0))
            #expect((banned.json?["resolved_at"]?.intValue ?? 0) > 0)
            let action = banned.json?["actions"]?.arrayValue?.first
            #expect(action?["action"] == .string("ban_user"))
            #expect(action?["params"] == .object(["duration_s": .int(0)]))
            #expect(action?["note"] == .string("spam wave"))
            #expect(action?["moderator"] == .string("alice"))
            for id in [r1, r3] {
                let other = try app.request(.get, "/v1/reports/\(id)").json
                #expect(other?["status"] == .string("resolved"))
                #expect(other?["actions"]?.arrayValue?.count == 1)
            }
            #expect(try app.request(.get, "/v1/reports/\(elsewhere)").json?["status"] == .string("open"))
            #expect(Self.items(try app.request(.get, "/v1/reports?status=resolved")).count == 3)
            // Closed now: 409.
            Self.expectProblem(try Self.act(app, r1, "{\"action\":\"dismiss\"}"), 409, .reportClosed)

            // The effect: a permanent ban refuses the user's token.
            #expect(try app.request(.get, "/v1/users/a").json?["banned_until"] == .int(-1))
            let refused = try server.request(.get, "/v1/users/a", bearer: token)
            Self.expectProblem(refused, 403, .userBanned)

            // Logged once, as ban_user from the report (not also as an api ban).
            let entries = try Self.log(app)
            #expect(entries.count == 1)
            #expect(entries.first?["action"] == .string("ban_user"))
            #expect(entries.first?["source"] == .string("report"))
            #expect(entries.first?["moderator"] == .string("alice"))
            #expect(entries.first?["target"] == .object(["type": .string("user"), "id": .string("a")]))
            #expect(entries.first?["params"]?["report_id"] == .string(r2))
            // One report.resolved per report closed.
            let resolved = try Self.events(app, "report.resolved")
            #expect(Set(resolved.compactMap { $0["data"]?["report"]?["report_id"]?.stringValue }) == [r1, r2, r3])
        }
    }

    @Test func muteWarnDismissAndRemoveFromGroup() throws {
        try withApp { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }
            // mute_user on a message report mutes its sender.
            let mid = Self.messageID(try MessageActions.send(app, "a", "b", "rude"))
            let muteReport = try Self.reportID(app, "b", Self.messageTarget(mid))
            Self.expectProblem(try Self.act(app, muteReport, "{\"action\":\"mute_user\"}"), 400, .invalidParams)
            let muted = try Self.act(app, muteReport, "{\"action\":\"mute_user\",\"duration_s\":600,\"moderator\":\"m1\"}")
            #expect(muted.status == 200, "\(muted.text)")
            Self.expectProblem(try PeerMessages.sendText(app, "a", "b", "again"), 403, .senderMuted)

            // warn_user writes user.warned to the user's stream.
            let warnReport = try Self.reportID(app, "c", Self.userTarget("b"))
            Self.expectProblem(try Self.act(app, warnReport, "{\"action\":\"warn_user\"}"), 400, .invalidParams)
            let warned = try Self.act(app, warnReport, "{\"action\":\"warn_user\",\"text\":\"Be nice.\"}")
            #expect(warned.status == 200, "\(warned.text)")
            let events = try Self.events(app, "user.warned", user: "b")
            #expect(events.count == 1)
            #expect(events.first?["data"] == .object(["user_id": .string("b"), "text": .string("Be nice.")]))
            #expect(try Self.events(app, "user.warned", user: "c").isEmpty)

            // dismiss → dismissed.
            let dismissReport = try Self.reportID(app, "a", Self.userTarget("c"))
            let dismissed = try Self.act(app, dismissReport, "{\"action\":\"dismiss\",\"note\":\"fine\"}")
            #expect(dismissed.json?["status"] == .string("dismissed"))
            #expect(Self.items(try app.request(.get, "/v1/reports?status=dismissed")).count == 1)

            // remove_from_group: the message's sender leaves the message's group.
            let gid = try Self.createGroup(app, "b", members: ["a", "c"])
            let gm = Self.messageID(try MessageActions.sendGroup(app, "c", gid, "group spam"))
            let groupReport = try Self.reportID(app, "a", Self.messageTarget(gm))
            let removed = try Self.act(app, groupReport, "{\"action\":\"remove_from_group\"}")
            #expect(removed.status == 200, "\(removed.text)")
            #expect(try Self.member(app, gid, "c") == nil)
            // A user report names the group; without it → 400; an unknown group → the group's error, nothing closes.
            let userReport = try Self.reportID(app, "b", Self.userTarget("a"))
            Self.expectProblem(try Self.act(app, userReport, "{\"action\":\"remove_from_group\"}"), 400, .invalidParams)
            Self.expectProblem(try Self.act(app, userReport, "{\"action\":\"remove_from_group\",\"group_id\":\"nogroup\"}"), 404, .groupNotFound)
            #expect(try app.request(.get, "/v1/reports/\(userReport)").json?["status"] == .string("open"))
            #expect(try Self.act(app, userReport, "{\"action\":\"remove_from_group\",\"group_id\":\"\(gid)\"}").status == 200)
            #expect(try Self.member(app, gid, "a") == nil)

            // delete_message deletes it for everyone.
            let other = Self.messageID(try MessageActions.send(app, "c", "b", "bad link"))
            let deleteReport = try Self.reportID(app, "b", Self.messageTarget(other))
            #expect(try Self.act(app, deleteReport, "{\"action\":\"delete_message\"}").status == 200)
            #expect(try MessageActions.get(app, other)?["deleted"] == .bool(true))
            #expect(try Self.events(app, "message.deleted").count == 1)

            // Actions that do not fit the target → 422.
            let groupTarget = try Self.reportID(app, "a", Self.groupTarget(gid))
            for json in [
                "{\"action\":\"mute_user\",\"duration_s\":60}", "{\"action\":\"ban_user\"}", "{\"action\":\"warn_user\",\"text\":\"x\"}",
                "{\"action\":\"remove_from_group\"}", "{\"action\":\"delete_message\"}",
            ] {
                Self.expectProblem(try Self.act(app, groupTarget, json), 422, .unsupportedOperation, json)
            }
            let peerReport = try Self.reportID(app, "b", Self.messageTarget(Self.messageID(try MessageActions.send(app, "c", "b", "x"))))
            Self.expectProblem(try Self.act(app, peerReport, "{\"action\":\"remove_from_group\"}"), 422, .unsupportedOperation)
            let onUser = try Self.reportID(app, "c", Self.userTarget("a"))
            Self.expectProblem(try Self.act(app, onUser, "{\"action\":\"delete_message\"}"), 422, .unsupportedOperation)
            // Bad inputs.
            Self.expectProblem(try Self.act(app, onUser, "{\"action\":\"explode\"}"), 400, .invalidParams)
            Self.expectProblem(
                try Self.act(app, onUser, "{\"action\":\"dismiss\",\"moderator\":\"\(String(repeating: "m", count: 65))\"}"), 400, .invalidParams)
            Self.expectProblem(
                try Self.act(app, onUser, "{\"action\":\"dismiss\",\"note\":\"\(String(repeating: "n", count: 1025))\"}"), 400, .invalidParams)
            Self.expectProblem(try Self.act(app, onUser, "{\"action\":\"ban_user\",\"duration_s\":-1}"), 400, .invalidParams)
            #expect(try app.request(.get, "/v1/reports/\(onUser)").json?["status"] == .string("open"))
            // Users cannot act.
            let token = try app.token(for: "b")
            #expect(try server.request(.post, "/v1/reports/\(onUser)/actions", bearer: token, json: "{\"action\":\"dismiss\"}").status == 403)

            // Every action in the log, source report.
            let actions = try Self.log(app, "?limit=100").compactMap { $0["action"]?.stringValue }
            #expect(actions == ["delete_message", "remove_from_group", "remove_from_group", "dismiss", "warn_user", "mute_user"])
        }
    }

    /// Two moderators act at once on two reports of one target: one action wins and closes both, the other gets 409.
    @Test func concurrentActionsOnOneTargetCloseItOnce() throws {
        try withApp { _, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }
            for round in 0..<5 {
                let target = Self.userTarget("a")
                let first = try Self.reportID(app, "b", target)
                let second = try Self.reportID(app, "c", target)
                let statuses = Mutex<[Int]>([])
                DispatchQueue.concurrentPerform(iterations: 2) { i in
                    let action = i == 0 ? #"{"action":"dismiss","moderator":"m1"}"# : #"{"action":"warn_user","text":"t","moderator":"m2"}"#
                    let status = (try? Self.act(app, i == 0 ? first : second, action).status) ?? 0
                    statuses.withLock { $0.append(status) }
                }
                #expect(statuses.withLock { $0.sorted() } == [200, 409], "round \(round)")
                let a = try app.request(.get, "/v1/reports/\(first)").json
                let b = try app.request(.get, "/v1/reports/\(second)").json
                #expect(a?["status"] != .string("open") && a?["status"] == b?["status"])
                #expect(a?["actions"]?.arrayValue?.count == 1 && b?["actions"]?.arrayValue?.count == 1)
            }
            // One log entry per winning action.
            #expect(try Self.log(app, "?limit=100").count == 5)
        }
    }

    @Test func reportEventsReachWebhooksShape() throws {
        try withApp { _, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let id = try Self.reportID(app, "b", Self.userTarget("a"))
            #expect(try Self.act(app, id, "{\"action\":\"dismiss\"}").status == 200)
            let created = try Self.events(app, "report.created")
            #expect(created.count == 1)
            #expect(created.first?["data"]?["report"]?["report_id"] == .string(id))
            #expect(created.first?["data"]?["report"]?["status"] == .string("open"))
            let resolved = try Self.events(app, "report.resolved")
            #expect(resolved.count == 1)
            #expect(resolved.first?["data"]?["report"]?["status"] == .string("dismissed"))
            #expect(resolved.first?["data"]?["report"]?["actions"]?.arrayValue?.count == 1)
        }
    }

    @Test func metricsCountOpenReports() throws {
        try withApp { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            _ = try Self.reportID(app, "b", Self.userTarget("a"))
            let metrics = try server.request(.get, "/metrics")
            #expect(metrics.status == 200)
            #expect(metrics.text.contains("parley_reports_open{app_id=\"\(app.appID)\"} 1"))
            #expect(metrics.text.contains("parley_automod_actions_total{action=\"automod_mute\"}"))
        }
    }
}

/// The report events on live streams (docs/moderation.md#events): over real sockets, as SSE needs.
@Suite("Report streams")
struct ReportStreamTests: ProblemAssertions {
    @Test func reportEventsReachTheAppStreamAndWarningsTheUsersStream() throws {
        try withApp { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let appStream = try LiveStreams.open(server, "/v1/events?types=report.*", bearer: app.key)
            defer { appStream.close() }
            let aStream = try LiveStreams.open(server, "/v1/users/a/events", bearer: try app.token(for: "a"))
            defer { aStream.close() }
            #expect(appStream.status == 200)

            let reportID = try ReportsTests.reportID(app, "b", ReportsTests.userTarget("a"))
            let created = try #require(try LiveStreams.nextEvent(appStream))
            #expect(created.event == "report.created")
            #expect(try JSONValue.parse(created.data)["data"]?["report"]?["report_id"] == .string(reportID))
            let warned = try ReportsTests.act(app, reportID, #"{"action":"warn_user","text":"Careful."}"#)
            #expect(warned.status == 200, "\(warned.text)")
            let resolved = try #require(try LiveStreams.nextEvent(appStream))
            #expect(resolved.event == "report.resolved")
            #expect(try JSONValue.parse(resolved.data)["data"]?["report"]?["status"] == .string("resolved"))

            // The warned user's stream gets user.warned; no user's stream or log has report events.
            let warning = try #require(try LiveStreams.nextEvent(aStream))
            #expect(warning.event == "user.warned")
            #expect(try JSONValue.parse(warning.data)["data"]?["text"] == .string("Careful."))
            #expect(try app.events(query: "types=report.*&user_id=b").isEmpty)
            #expect(try app.events(query: "types=report.*&user_id=a").isEmpty)
        }
    }
}
