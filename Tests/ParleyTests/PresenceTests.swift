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

/// Presence (docs/users.md#presence) end to end: real HTTP against a real server and database, events read back from
/// the log. The batch, clock and SQL fixture helpers are the blacklist suite's.
@Suite("Presence", .inProcess)
struct PresenceTests: ProblemAssertions {
    typealias B = BlacklistTests

    // MARK: - Helpers

    static let statusKeys: Set<String> = [
        "user_id", "online_status", "online_platforms", "custom_status", "custom_status_expires_at", "last_updated_at",
        "last_online_status_updated_at", "last_custom_status_updated_at",
    ]

    static func setCustom(_ app: TestApp, _ userID: String, _ body: String, bearer: String? = nil) throws -> TestResponse {
        try app.server.request(.put, "/v1/users/\(userID)/status/custom", bearer: bearer ?? app.key, json: body)
    }

    static func subscribe(_ app: TestApp, _ subscriber: String, _ targets: [String], minutes: Int) throws -> TestResponse {
        let ids = targets.map { "\"\($0)\"" }.joined(separator: ",")
        return try app.request(
            .post, "/v1/users/\(subscriber)/status/subscriptions", json: "{\"user_ids\":[\(ids)],\"duration_min\":\(minutes)}")
    }

    /// The target ids of one page of `subscriber`'s subscriptions.
    static func subscribed(_ app: TestApp, _ subscriber: String, query: String = "") throws -> [String] {
        let r = try app.request(.get, "/v1/users/\(subscriber)/status/subscriptions\(query)")
        #expect(r.status == 200, "\(r.text)")
        return r.json?["items"]?.arrayValue?.compactMap { $0["user_id"]?.stringValue } ?? []
    }

    static func statusEvents(_ app: TestApp, audience user: String? = nil) throws -> [JSONValue] {
        try B.events(app, "user.status_updated", audience: user)
    }

    // MARK: - Reading statuses

    @Test func freshUserHasDefaultStatusAndUnknownUsersAre404() throws {
        try withApp { server, app in
            for id in ["u1", "u2", "gone"] { try app.createUser(id) }

            let r = try app.request(.get, "/v1/users/u1/status")
            #expect(r.status == 200, "\(r.text)")
            #expect(Set(r.json?.objectValue?.keys ?? []) == Self.statusKeys)
            #expect(r.json?["user_id"] == .string("u1"))
            #expect(r.json?["online_status"] == .string("offline"))
            #expect(r.json?["online_platforms"] == .array([]))
            #expect(r.json?["custom_status"] == .string(""))
            for key in ["custom_status_expires_at", "last_updated_at", "last_online_status_updated_at", "last_custom_status_updated_at"] {
                #expect(r.json?[key] == .int(0), "\(key)")
            }

            // U·r: any user token of the app reads any user's status.
            let token = try app.token(for: "u2")
            let other = try server.request(.get, "/v1/users/u1/status", bearer: token)
            #expect(other.status == 200, "\(other.text)")
            #expect(other.json == r.json)

            Self.expectProblem(try app.request(.get, "/v1/users/ghost/status"), 404, .userNotFound)
            Self.expectProblem(try server.request(.get, "/v1/users/ghost/status", bearer: token), 404, .userNotFound)
            #expect(try app.request(.delete, "/v1/users/gone").status == 204)
            Self.expectProblem(try app.request(.get, "/v1/users/gone/status"), 404, .userNotFound)
            Self.expectInvalid(try app.request(.get, "/v1/users/bad%20id/status"), field: "user_id")
        }
    }

    @Test func batchQueryHasPerItemErrorsAndBounds() throws {
        try withApp { server, app in
            for id in ["u1", "u2"] { try app.createUser(id) }
            #expect(try Self.setCustom(app, "u2", "{\"custom_status\":\"away\"}").status == 200)

            let r = try app.request(.post, "/v1/users/status/query", json: "{\"user_ids\":[\"u1\",\"ghost\",\"u1\",\"u2\",\"bad id\",7]}")
            #expect(r.status == 200, "\(r.text)")
            #expect(
                B.codes(r) == [
                    nil, ErrorCode.userNotFound.code, ErrorCode.invalidParams.code, nil, ErrorCode.invalidParams.code, ErrorCode.invalidParams.code,
                ])
            let results = B.results(r)
            #expect(results.map { $0["id"]?.stringValue } == ["u1", "ghost", "u1", "u2", "bad id", ""])
            #expect(Set(results[0]["data"]?.objectValue?.keys ?? []) == Self.statusKeys)
            #expect(results[0]["data"]?["custom_status"] == .string(""))
            #expect(results[3]["data"]?["custom_status"] == .string("away"))

            // A user token may query too (U·r).
            let token = try app.token(for: "u1")
            let byUser = try server.request(.post, "/v1/users/status/query", bearer: token, json: "{\"user_ids\":[\"u2\"]}")
            #expect(byUser.status == 200, "\(byUser.text)")
            #expect(B.codes(byUser) == [nil])

            // 1–100 ids.
            Self.expectInvalid(try app.request(.post, "/v1/users/status/query", json: "{\"user_ids\":[]}"), field: "body.user_ids")
            Self.expectInvalid(try app.request(.post, "/v1/users/status/query", json: "{}"), field: "body.user_ids")
            let hundred = (1...100).map { "x\($0)" }
            let ok = try app.request(.post, "/v1/users/status/query", json: B.ids(hundred))
            #expect(ok.status == 200)
            #expect(B.codes(ok) == Array(repeating: ErrorCode.userNotFound.code, count: 100))
            Self.expectInvalid(try app.request(.post, "/v1/users/status/query", json: B.ids(hundred + ["x101"])), field: "body.user_ids")
        }
    }

    // MARK: - Custom status

    @Test func settingACustomStatusNotifiesTheUserAndUnexpiredSubscribers() throws {
        try withApp(testClock: true) { server, app in
            for id in ["u1", "s1", "s2", "s3"] { try app.createUser(id) }
            #expect(B.codes(try Self.subscribe(app, "s1", ["u1"], minutes: 10)) == [nil])
            #expect(B.codes(try Self.subscribe(app, "s2", ["u1"], minutes: 1)) == [nil])
            try server.advanceClock(ms: 120_000)  // s2's subscription has expired

            let token = try app.token(for: "u1")
            let r = try Self.setCustom(app, "u1", "{\"custom_status\":\"in a meeting\",\"expires_in_s\":3600}", bearer: token)
            #expect(r.status == 200, "\(r.text)")
            #expect(Set(r.json?.objectValue?.keys ?? []) == Self.statusKeys)
            #expect(r.json?["custom_status"] == .string("in a meeting"))
            let setAt = r.json?["last_custom_status_updated_at"]?.intValue ?? 0
            #expect(setAt > 0)
            #expect(r.json?["custom_status_expires_at"]?.intValue == setAt + 3_600_000)
            #expect(r.json?["last_updated_at"]?.intValue == setAt)
            #expect(r.json?["online_status"] == .string("offline"))
            #expect(try app.request(.get, "/v1/users/u1/status").json == r.json)

            let events = try Self.statusEvents(app)
            #expect(events.count == 1)
            #expect(events.first?["data"]?["status"] == r.json)
            #expect(Set(events.first?["data"]?.objectValue?.keys ?? []) == ["status"])
            #expect(try Self.statusEvents(app, audience: "u1").count == 1)
            #expect(try Self.statusEvents(app, audience: "s1").count == 1)
            #expect(try Self.statusEvents(app, audience: "s2").isEmpty)
            #expect(try Self.statusEvents(app, audience: "s3").isEmpty)

            // The default expiry is 86400 s.
            let plain = try Self.setCustom(app, "u1", "{\"custom_status\":\"busy\"}")
            #expect(plain.status == 200)
            let plainAt = plain.json?["last_custom_status_updated_at"]?.intValue ?? 0
            #expect(plain.json?["custom_status_expires_at"]?.intValue == plainAt + 86_400_000)

            // "" clears: expiry 0, and the clear is announced too.
            try server.advanceClock(ms: 1000)
            let cleared = try Self.setCustom(app, "u1", "{\"custom_status\":\"\",\"expires_in_s\":60}")
            #expect(cleared.status == 200, "\(cleared.text)")
            #expect(cleared.json?["custom_status"] == .string(""))
            #expect(cleared.json?["custom_status_expires_at"] == .int(0))
            #expect((cleared.json?["last_custom_status_updated_at"]?.intValue ?? 0) >= plainAt + 1000)
            let all = try Self.statusEvents(app, audience: "s1")
            #expect(all.count == 3)
            #expect(all.last?["data"]?["status"] == cleared.json)
        }
    }

    @Test func customStatusValidationAndPermissions() throws {
        try withApp { server, app in
            for id in ["u1", "u2"] { try app.createUser(id) }

            // 64 bytes (32 two-byte characters) are fine; 65 are not.
            let max = String(repeating: "é", count: 32)
            let ok = try Self.setCustom(app, "u1", "{\"custom_status\":\"\(max)\"}")
            #expect(ok.status == 200, "\(ok.text)")
            #expect(ok.json?["custom_status"] == .string(max))
            Self.expectInvalid(try Self.setCustom(app, "u1", "{\"custom_status\":\"\(max)a\"}"), field: "body.custom_status")
            Self.expectInvalid(try Self.setCustom(app, "u1", "{}"), field: "body.custom_status")
            Self.expectInvalid(try Self.setCustom(app, "u1", "{\"custom_status\":5}"), field: "body.custom_status")
            for bad in ["0", "86401", "1.5", "\"60\""] {
                Self.expectInvalid(
                    try Self.setCustom(app, "u1", "{\"custom_status\":\"x\",\"expires_in_s\":\(bad)}"), field: "body.expires_in_s", bad)
            }
            #expect(try Self.setCustom(app, "u1", "{\"custom_status\":\"x\",\"expires_in_s\":86400}").status == 200)
            #expect(try Self.setCustom(app, "u1", "{\"custom_status\":\"x\",\"expires_in_s\":1}").status == 200)
            Self.expectProblem(try Self.setCustom(app, "ghost", "{\"custom_status\":\"x\"}"), 404, .userNotFound)
            // Failed requests write no event: only the three successful sets above.
            #expect(try Self.statusEvents(app).count == 3)

            // A user token acts only on its own status and subscriptions.
            let token = try app.token(for: "u1")
            Self.expectProblem(try Self.setCustom(app, "u2", "{\"custom_status\":\"x\"}", bearer: token), 403, .forbidden)
            let subscribe = "{\"user_ids\":[\"u1\"],\"duration_min\":5}"
            Self.expectProblem(
                try server.request(.post, "/v1/users/u2/status/subscriptions", bearer: token, json: subscribe), 403, .forbidden)
            Self.expectProblem(
                try server.request(.post, "/v1/users/u2/status/subscriptions/delete", bearer: token, json: B.ids(["u1"])), 403,
                .forbidden)
            Self.expectProblem(try server.request(.get, "/v1/users/u2/status/subscriptions", bearer: token), 403, .forbidden)
            let own = try server.request(
                .post, "/v1/users/u1/status/subscriptions", bearer: token, json: "{\"user_ids\":[\"u2\"],\"duration_min\":5}")
            #expect(own.status == 200, "\(own.text)")
            #expect(B.codes(own) == [nil])
            let list = try server.request(.get, "/v1/users/u1/status/subscriptions", bearer: token)
            #expect(list.status == 200)
            #expect(list.json?["items"]?.arrayValue?.count == 1)
        }
    }

    @Test func customStatusExpiresOnTheTestClockWithAnEvent() throws {
        try withApp(testClock: true) { server, app in
            for id in ["u1", "s1"] { try app.createUser(id) }
            #expect(B.codes(try Self.subscribe(app, "s1", ["u1"], minutes: 60)) == [nil])
            let set = try Self.setCustom(app, "u1", "{\"custom_status\":\"brb\",\"expires_in_s\":60}")
            #expect(set.status == 200)
            let expiresAt = set.json?["custom_status_expires_at"]?.intValue ?? 0

            try server.advanceClock(ms: 59_000)
            #expect(try app.request(.get, "/v1/users/u1/status").json?["custom_status"] == .string("brb"))
            try server.advanceClock(ms: 1000)

            let r = try app.request(.get, "/v1/users/u1/status")
            #expect(r.json?["custom_status"] == .string(""))
            #expect(r.json?["custom_status_expires_at"] == .int(0))
            #expect(r.json?["last_custom_status_updated_at"]?.intValue == expiresAt)
            #expect(r.json?["last_updated_at"]?.intValue == expiresAt)
            // The timer stored the revert and announced it once, to the user and the subscriber.
            #expect(try server.count("SELECT count(*) FROM user_statuses WHERE app_id = $1 AND custom_status <> ''", [app.appID]) == 0)
            let events = try Self.statusEvents(app, audience: "s1")
            #expect(events.count == 2)
            #expect(events.last?["data"]?["status"] == r.json)
            #expect(try Self.statusEvents(app, audience: "u1").count == 2)
            try server.advanceClock(ms: 60_000)
            #expect(try Self.statusEvents(app).count == 2)
        }
    }

    @Test func readsTreatAnOverdueCustomStatusAsClearedBeforeTheTimerRuns() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("u1")
            let set = try Self.setCustom(app, "u1", "{\"custom_status\":\"brb\"}")
            #expect(set.status == 200)
            // White box: make the stored status overdue without moving the clock, so no timer has fired for it.
            try server.sql("UPDATE user_statuses SET custom_status_expires_at = 5 WHERE app_id = $1 AND user_id = 'u1'", [app.appID])
            let r = try app.request(.get, "/v1/users/u1/status")
            #expect(r.json?["custom_status"] == .string(""))
            #expect(r.json?["custom_status_expires_at"] == .int(0))
            #expect(r.json?["last_custom_status_updated_at"] == .int(5))
        }
    }

    @Test func concurrentExpirySweepsAnnounceEachStatusOnce() throws {
        try withApp(testClock: true) { server, app in
            try server.sql(
                "INSERT INTO users (app_id, user_id, created_at, updated_at) SELECT $1, 'x' || g, 1, 1 FROM generate_series(1, 300) g",
                [app.appID])
            try server.sql(
                """
                INSERT INTO user_statuses (app_id, user_id, custom_status, custom_status_expires_at, last_custom_status_updated_at)
                SELECT $1, 'x' || g, 'due', 10 + g, 1 FROM generate_series(1, 300) g
                """, [app.appID])
            let services = server.app.services
            let now = services.clock.now()
            let fired = Atomic<Int>(0)
            DispatchQueue.concurrentPerform(iterations: 4) { _ in
                fired.add((try? CustomStatusExpiry.kind.fire(services, now)) ?? -1000, ordering: .relaxed)
            }
            // The background sweep may have taken some of them too; together every status fired exactly once.
            #expect(fired.load(ordering: .relaxed) <= 300)
            services.sequencer.publishAndWait(app.appID)
            #expect(try server.count("SELECT count(*) FROM user_statuses WHERE app_id = $1 AND custom_status <> ''", [app.appID]) == 0)
            let events = try (0..<4).reduce(into: [JSONValue]()) { all, _ in
                all += try app.events(after: all.last?["id"]?.stringValue ?? "earliest", query: "types=user.status_updated")
            }
            #expect(events.count == 300)
            #expect(Set(events.compactMap { $0["data"]?["status"]?["user_id"]?.stringValue }).count == 300)
        }
    }

    // MARK: - Subscriptions

    @Test func subscribeResubscribeListExpireAndUnsubscribe() throws {
        try withApp(testClock: true) { server, app in
            for id in ["u1", "u2", "u3", "u4"] { try app.createUser(id) }
            #expect(try Self.setCustom(app, "u3", "{\"custom_status\":\"hi\"}").status == 200)

            let r = try Self.subscribe(app, "u1", ["u3", "u2", "u1", "ghost", "u2", "bad id"], minutes: 10)
            #expect(r.status == 200, "\(r.text)")
            #expect(
                B.codes(r) == [
                    nil, nil, ErrorCode.invalidParams.code, ErrorCode.userNotFound.code, ErrorCode.invalidParams.code, ErrorCode.invalidParams.code,
                ])
            let first = B.results(r)[0]["data"]
            #expect(Set(first?.objectValue?.keys ?? []) == ["user_id", "expires_at", "status"])
            #expect(first?["user_id"] == .string("u3"))
            #expect(first?["status"]?["custom_status"] == .string("hi"))
            #expect(Set(first?["status"]?.objectValue?.keys ?? []) == Self.statusKeys)
            let expires = first?["expires_at"]?.intValue ?? 0
            #expect(B.results(r)[1]["data"]?["expires_at"]?.intValue == expires)
            // Subscribing writes no event.
            #expect(try Self.statusEvents(app).count == 1)

            // Re-subscribing replaces expires_at (now + duration).
            try server.advanceClock(ms: 1000)
            let again = try Self.subscribe(app, "u1", ["u2"], minutes: 20)
            #expect(B.codes(again) == [nil])
            // The test clock also runs in real time, so "now" moved by at least the 1 s advance.
            let renewed = B.results(again)[0]["data"]?["expires_at"]?.intValue ?? 0
            #expect(renewed >= expires + 600_000 + 1000 && renewed < expires + 600_000 + 60_000)

            // List by target user_id asc, with cursor and filter.
            let list = try app.request(.get, "/v1/users/u1/status/subscriptions")
            #expect(list.status == 200)
            let items = list.json?["items"]?.arrayValue ?? []
            #expect(items.compactMap { $0["user_id"]?.stringValue } == ["u2", "u3"])
            #expect(items.last == first)
            #expect(list.json?["next_cursor"] == .null)
            let page1 = try app.request(.get, "/v1/users/u1/status/subscriptions?limit=1")
            #expect(page1.json?["items"]?.arrayValue?.compactMap { $0["user_id"]?.stringValue } == ["u2"])
            let cursor = page1.json?["next_cursor"]?.stringValue ?? ""
            #expect(!cursor.isEmpty)
            let page2 = try app.request(.get, "/v1/users/u1/status/subscriptions?limit=1&cursor=\(cursor)")
            #expect(page2.json?["items"]?.arrayValue?.compactMap { $0["user_id"]?.stringValue } == ["u3"])
            #expect(page2.json?["next_cursor"] == .null)
            #expect(try Self.subscribed(app, "u1", query: "?user_ids=u3,u4") == ["u3"])
            Self.expectProblem(try app.request(.get, "/v1/users/u1/status/subscriptions?cursor=nope"), 400, .invalidCursor)
            Self.expectProblem(try app.request(.get, "/v1/users/u2/status/subscriptions?cursor=\(cursor)"), 400, .invalidCursor)
            Self.expectInvalid(try app.request(.get, "/v1/users/u1/status/subscriptions?limit=0"), field: "limit")
            Self.expectProblem(try app.request(.get, "/v1/users/ghost/status/subscriptions"), 404, .userNotFound)

            // Duration is required, 1–43200.
            for body in ["{\"user_ids\":[\"u4\"]}", "{\"user_ids\":[\"u4\"],\"duration_min\":0}", "{\"user_ids\":[\"u4\"],\"duration_min\":43201}"] {
                Self.expectInvalid(try app.request(.post, "/v1/users/u1/status/subscriptions", json: body), field: "body.duration_min", body)
            }
            #expect(B.codes(try Self.subscribe(app, "u4", ["u1"], minutes: 43200)) == [nil])
            Self.expectProblem(try Self.subscribe(app, "ghost", ["u1"], minutes: 5), 404, .userNotFound)

            // After 10 minutes u3's subscription is gone (the timer removed it silently); u2's lasts 20.
            try server.advanceClock(ms: 600_000)
            #expect(try Self.subscribed(app, "u1") == ["u2"])
            #expect(
                try server.count("SELECT count(*) FROM status_subscriptions WHERE app_id = $1 AND subscriber_id = 'u1'", [app.appID]) == 1)
            #expect(try Self.statusEvents(app).count == 1)

            // Unsubscribe: per item not_found when there was no (unexpired) subscription.
            let removed = try app.request(.post, "/v1/users/u1/status/subscriptions/delete", json: B.ids(["u2", "u3", "u4", "u2"]))
            #expect(removed.status == 200, "\(removed.text)")
            #expect(B.codes(removed) == [nil, ErrorCode.notFound.code, ErrorCode.notFound.code, ErrorCode.invalidParams.code])
            #expect(B.results(removed)[0]["data"] == nil)
            #expect(try Self.subscribed(app, "u1").isEmpty)
            Self.expectInvalid(try app.request(.post, "/v1/users/u1/status/subscriptions/delete", json: "{\"user_ids\":[]}"), field: "body.user_ids")
        }
    }

    @Test func subscriptionCapOf1000CountsOnlyUnexpiredOnes() throws {
        try withApp(testClock: true) { server, app in
            for id in ["u1", "c1", "c2"] { try app.createUser(id) }
            try server.sql(
                "INSERT INTO users (app_id, user_id, created_at, updated_at) SELECT $1, 'x' || g, 1, 1 FROM generate_series(1, 1000) g",
                [app.appID])
            try server.sql(
                """
                INSERT INTO status_subscriptions (app_id, subscriber_id, target_id, created_at, expires_at)
                SELECT $1, 'u1', 'x' || g, 1, 9000000000000 FROM generate_series(1, 1000) g
                """, [app.appID])

            // Full: a new target fails, a re-subscribe still works.
            let full = try Self.subscribe(app, "u1", ["c1", "x5", "u1"], minutes: 5)
            #expect(full.status == 200, "\(full.text)")
            #expect(B.codes(full) == [ErrorCode.subscriptionLimit.code, nil, ErrorCode.invalidParams.code])
            #expect(
                try server.count("SELECT count(*) FROM status_subscriptions WHERE app_id = $1 AND subscriber_id = 'u1'", [app.appID]) == 1000)

            // x5 now expires in 5 minutes: after that there is room for exactly one more.
            try server.advanceClock(ms: 300_000)
            let room = try Self.subscribe(app, "u1", ["c1", "c2"], minutes: 5)
            #expect(B.codes(room) == [nil, ErrorCode.subscriptionLimit.code])
            #expect(try Self.subscribed(app, "u1", query: "?user_ids=c1,c2,x5") == ["c1"])
        }
    }

    @Test func hardDeleteRemovesStatusAndSubscriptionsInBothDirections() throws {
        try withApp(testClock: true) { server, app in
            for id in ["u1", "u2", "u3"] { try app.createUser(id) }
            #expect(try Self.setCustom(app, "u1", "{\"custom_status\":\"hi\"}").status == 200)
            #expect(B.codes(try Self.subscribe(app, "u1", ["u2"], minutes: 5)) == [nil])
            #expect(B.codes(try Self.subscribe(app, "u3", ["u1", "u2"], minutes: 5)) == [nil, nil])

            // A soft delete keeps the rows but hides the user from reads and lists.
            #expect(try app.request(.delete, "/v1/users/u1").status == 204)
            #expect(try Self.subscribed(app, "u3") == ["u2"])
            Self.expectProblem(try Self.subscribe(app, "u1", ["u3"], minutes: 5), 404, .userNotFound)
            #expect(B.codes(try Self.subscribe(app, "u2", ["u1"], minutes: 5)) == [ErrorCode.userNotFound.code])
            #expect(try app.request(.post, "/v1/users/u1/restore").status == 200)
            #expect(try Self.subscribed(app, "u3") == ["u1", "u2"])

            #expect(try app.request(.delete, "/v1/users/u1?mode=hard").status == 204)
            let sql = "SELECT count(*) FROM status_subscriptions WHERE app_id = $1 AND (subscriber_id = 'u1' OR target_id = 'u1')"
            #expect(try server.count(sql, [app.appID]) == 0)
            #expect(try server.count("SELECT count(*) FROM user_statuses WHERE app_id = $1 AND user_id = 'u1'", [app.appID]) == 0)
            #expect(try Self.subscribed(app, "u3") == ["u2"])

            // Created again, the id starts from the defaults.
            try app.createUser("u1")
            let fresh = try app.request(.get, "/v1/users/u1/status")
            #expect(fresh.json?["custom_status"] == .string(""))
            #expect(fresh.json?["last_custom_status_updated_at"] == .int(0))
            #expect(try Self.subscribed(app, "u1").isEmpty)
        }
    }
}
