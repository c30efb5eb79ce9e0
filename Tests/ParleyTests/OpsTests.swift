import Dispatch
import Foundation
import Glibc
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

/// Operations routes, statistics, the test clock (docs/operations.md) and the polling event log
/// (docs/events.md#polling-the-log) end to end.
@Suite("Ops, stats, test clock and event log")
struct OpsTests: ProblemAssertions {
    // MARK: - Helpers (namespaced so they never clash with other test files of the module)

    /// Wall-clock milliseconds since the Unix epoch.
    static func wallMillis() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }

    /// One page of the app's event log.
    struct LogPage {
        var status: Int
        var ids: [String]
        var items: [JSONValue]
        var nextCursor: JSONValue?
        var previous: String?
        var response: TestResponse
    }

    static func log(_ app: TestApp, _ query: String = "") throws -> LogPage {
        let r = try app.request(.get, "/v1/events/log" + (query.isEmpty ? "" : "?" + query))
        let items = r.json?["items"]?.arrayValue ?? []
        return LogPage(
            status: r.status, ids: items.compactMap { $0["id"]?.stringValue }, items: items, nextCursor: r.json?["next_cursor"],
            previous: r.json?["previous_event_id"]?.stringValue, response: r)
    }

    /// Writes `count` `app.settings_updated` events (each patch changes `revoke_window_s`).
    static func writeSettingsEvents(_ app: TestApp, count: Int, startingAt value: Int = 1) throws {
        for i in 0..<count {
            let r = try app.request(.patch, "/v1/settings", json: #"{"revoke_window_s":\#(value + i)}"#)
            #expect(r.status == 200, "\(r.text)")
        }
    }

    // MARK: - First statistics

    /// A fresh database's tables get their first statistics once they hold rows, not a minute later at autovacuum's
    /// first pass: the pool's generic plans are made on the statistics of the moment (docs/scaling.md), and each table
    /// is analyzed once.
    @Test func tablesGetTheirFirstStatisticsOnceTheyHoldRows() throws {
        try withTestServer { server in
            let services = server.app.services
            func analyzed() throws -> Bool {
                try services.pool.withConnection { db in
                    try db.query("SELECT last_analyze IS NOT NULL FROM pg_stat_user_tables WHERE relname = 'live_nodes'")
                        .decodeFirst(Bool.self) ?? false
                }
            }
            #expect(try !analyzed())
            try services.pool.withConnection { db in
                try db.query("INSERT INTO live_nodes (node_id, seen_at) SELECT 'first-statistics-' || g, 0 FROM generate_series(1, 1500) g")
                try db.simpleQuery("SELECT pg_stat_force_next_flush()")  // the row counts reach the shared statistics when idle
            }
            var fired = 0
            #expect(
                try eventually(timeout: .seconds(10), every: .milliseconds(100)) {
                    if try analyzed() { return true }
                    fired += try FirstStatistics.kind.fire(services, 0)
                    return false
                })
            #expect(try analyzed())
            #expect(fired >= 1)
            // Analyzed once: the next passes leave it (and the still empty tables) alone.
            #expect(try FirstStatistics.kind.fire(services, 0) == 0)
        }
    }

    // MARK: - Health, readiness, metrics, OpenAPI

    @Test func healthAndReadiness() throws {
        try withTestServer { server in
            let health = try server.request(.get, "/healthz")
            #expect(health.status == 200)
            // A database handed in (or DATABASE_URL) is not Parley's to supervise: liveness does not depend on it.
            #expect(health.json == ["status": "ok", "database": "external"])
            #expect(health.headers["Content-Type"]?.hasPrefix("application/json") == true)
            let ready = try server.request(.get, "/readyz")
            #expect(ready.status == 200, "\(ready.text)")
            #expect(ready.json == ["status": "ready"])
            #expect(ready.headers["Content-Type"]?.hasPrefix("application/json") == true)
            // No credential is needed, and a bad one is not looked at.
            #expect(try server.request(.get, "/healthz", bearer: "garbage").status == 200)
            #expect(try server.request(.get, "/readyz", bearer: "garbage").status == 200)
        }
    }

    @Test func metricsExposeRequestCountsByRouteAndThePool() throws {
        try withApp { server, app in
            #expect(try app.request(.get, "/v1/settings").status == 200)
            #expect(try server.request(.get, "/v1/settings").status == 401)
            #expect(try server.request(.get, "/v1/apps/\(app.appID)", bearer: server.adminKey).status == 200)
            try app.createUser("a")
            try app.createUser("b")
            let text1 = #"{"from":"a","conversation_type":"peer","to":"b","type":1,"body":{"text":"x"},"client_msg_id":"k1"}"#
            #expect(try app.request(.post, "/v1/messages", json: text1).status == 201)
            #expect(try app.request(.post, "/v1/messages", json: text1).status == 200)  // a duplicate is not a new message
            let command = #"{"from":"a","conversation_type":"peer","to":"b","type":2,"body":{"data":"ping"}}"#
            #expect(try app.request(.post, "/v1/messages", json: command).status == 201)
            let wanted = [
                #"parley_messages_total{conversation_type="peer",stored="true"} 1"#,
                #"parley_messages_total{conversation_type="peer",stored="false"} 1"#,
                #"parley_http_requests_total{method="GET",route="/v1/settings",status="200"} "#,
                #"parley_http_requests_total{method="GET",route="/v1/settings",status="401"} "#,
                #"parley_http_requests_total{method="GET",route="/v1/apps/{app_id}",status="200"} "#,
            ]
            // Requests are counted when their response completes: poll briefly.
            var text = ""
            var metrics: TestResponse?
            try eventually(timeout: .seconds(1), every: .milliseconds(20)) {
                metrics = try server.request(.get, "/metrics")
                text = metrics?.text ?? ""
                return wanted.allSatisfy { text.contains($0) }
            }
            #expect(metrics?.status == 200)
            #expect(metrics?.headers["Content-Type"]?.hasPrefix("text/plain") == true, "\(metrics?.headers["Content-Type"] ?? "none")")
            #expect(metrics?.headers["Content-Type"]?.contains("version=0.0.4") == true)
            for line in wanted { #expect(text.contains(line), "missing \(line)") }
            #expect(text.contains("# TYPE parley_http_requests_total counter"))
            #expect(text.contains("# TYPE parley_http_request_duration_seconds histogram"))
            #expect(text.contains(#"parley_http_request_duration_seconds_bucket{le="+Inf"} "#))
            #expect(text.contains("parley_event_log_head{app_id=\"\(app.appID)\"} "))
            let pool = text.split(separator: "\n").first { $0.hasPrefix("parley_db_pool_in_use ") }
            #expect(pool != nil, "parley_db_pool_in_use missing")
            if let pool { #expect(Int(pool.split(separator: " ").last ?? "") != nil, "\(pool)") }
            // Every sample line is `name{labels} value` or `name value` with a numeric value.
            for line in text.split(separator: "\n") where !line.hasPrefix("#") {
                let value = line.split(separator: " ").last.map(String.init) ?? ""
                #expect(Double(value) != nil, "bad sample line: \(line)")
            }
        }
    }

    @Test func metricsNeedTheMetricsTokenWhenOneIsSet() throws {
        var configuration = Configuration()
        configuration.listenHost = "127.0.0.1"
        configuration.listenPort = 0
        configuration.adminKey = "test-admin-key-metrics"
        configuration.poolSize = 2
        configuration.logLevel = .warning
        configuration.metricsToken = "metrics-secret"
        let app = try ParleyApp(configuration: configuration, database: try TestDatabase.shared().makeDatabase(), output: { _ in })
        defer { app.shutdown() }
        func get(_ authorization: String?) throws -> HTTPClientResponse {
            let connection = try HTTPClientConnection(host: "127.0.0.1", port: app.port, timeout: .seconds(30))
            defer { connection.close() }
            var headers = HTTPHeaders()
            if let authorization { headers.add("Authorization", authorization) }
            return try connection.send(method: .get, path: "/metrics", headers: headers)
        }
        for authorization in [nil, "Bearer wrong", "Bearer metrics-secretx", "Basic metrics-secret"] as [String?] {
            let r = try get(authorization)
            #expect(r.status == 401, "\(authorization ?? "none")")
            #expect((try? JSONValue.parse(r.body))?["code"]?.intValue.map(Int.init) == ErrorCode.unauthenticated.code)
            #expect(r.headers["Content-Type"]?.hasPrefix("application/problem+json") == true)
            #expect(r.headers["WWW-Authenticate"] == "Bearer", "\(authorization ?? "none")")
        }
        let ok = try get("Bearer metrics-secret")
        #expect(ok.status == 200)
        #expect(ok.text.contains("parley_db_pool_in_use "))
    }

    @Test func theOpenAPIDocumentIsServed() throws {
        try withTestServer { server in
            // The repository ships openapi/openapi.json, so the document must be served (not 404).
            let r = try server.request(.get, "/openapi.json")
            #expect(r.status == 200, "\(r.text.prefix(300))")
            #expect(r.headers["Content-Type"]?.hasPrefix("application/json") == true)
            let version = r.json?["openapi"]?.stringValue ?? ""
            #expect(version.hasPrefix("3.1"), "openapi \(version)")
            #expect(r.json?["paths"]?["/v1/apps"] != nil)
            #expect(r.json?["paths"]?["/v1/events/log"] != nil)
        }
    }

    // MARK: - Stats

    static let statsFields: Set<String> = [
        "users_total", "users_online", "groups_total", "rooms_active", "messages_stored_total", "messages_24h", "calls_active",
        "streams_open", "event_log_head", "event_log_trim_point", "webhook_pending", "webhook_dead_24h", "push_sent_24h",
        "push_failed_24h", "files_total", "file_bytes_total", "generated_at",
    ]

    @Test func statsHaveEveryFieldWithTheEventLogHeadAsAString() throws {
        try withApp { server, app in
            let before = Self.wallMillis()
            let r = try app.request(.get, "/v1/stats")
            #expect(r.status == 200, "\(r.text)")
            #expect(Set(r.json?.objectValue?.keys ?? []) == Self.statsFields)
            for field in Self.statsFields where field != "event_log_head" && field != "event_log_trim_point" {
                #expect(r.json?[field]?.intValue != nil, "\(field) must be an integer: \(r.text)")
            }
            #expect(r.json?["users_total"]?.intValue == 0)
            #expect(r.json?["event_log_head"] == "0")
            #expect(r.json?["event_log_trim_point"] == "0")
            let generatedAt = r.json?["generated_at"]?.intValue ?? 0
            #expect(abs(generatedAt - before) < 60_000, "generated_at \(generatedAt) vs wall \(before)")

            try Self.writeSettingsEvents(app, count: 2)
            let after = try app.request(.get, "/v1/stats")
            #expect(after.json?["event_log_head"] == "2", "\(after.text)")
            #expect(after.json?["event_log_trim_point"] == "0")
            // Per app: another app's head is its own.
            let other = try server.createApp()
            #expect(try other.request(.get, "/v1/stats").json?["event_log_head"] == "0")
            // Who: A (admin needs Parley-App-Id).
            Self.expectProblem(try server.request(.get, "/v1/stats", bearer: server.adminKey), 400, .invalidParams)
            let asApp = try server.request(.get, "/v1/stats", bearer: server.adminKey, headers: ["Parley-App-Id": app.appID])
            #expect(asApp.json?["event_log_head"] == "2")
            Self.expectProblem(try server.request(.get, "/v1/stats"), 401, .unauthenticated)
        }
    }

    @Test func statsCountTheUsersCreated() throws {
        try withApp { server, app in
            let other = try server.createApp()
            for id in ["u1", "u2", "u3"] { try app.createUser(id) }
            try other.createUser("x1")
            let r = try app.request(.get, "/v1/stats")
            #expect(r.status == 200, "\(r.text)")
            #expect(r.json?["users_total"]?.intValue == 3, "\(r.text)")
            #expect(try other.request(.get, "/v1/stats").json?["users_total"]?.intValue == 1)
        }
    }

    // MARK: - Test clock

    @Test func theTestClockRoutesAre404WhenDisabled() throws {
        try withTestServer(testClock: false) { server in
            Self.expectProblem(try server.request(.get, "/v1/test/clock", bearer: server.adminKey), 404, .notFound)
            Self.expectProblem(
                try server.request(.post, "/v1/test/clock/advance", bearer: server.adminKey, json: #"{"ms":60000}"#), 404, .notFound)
            Self.expectProblem(
                try server.request(.post, "/v1/test/clock/advance", bearer: server.adminKey, json: #"{"ms":0}"#), 404, .notFound)
            // The server clock was not moved.
            let app = try server.createApp()
            let createdAt = try server.request(.get, "/v1/apps/\(app.appID)", bearer: server.adminKey).json?["created_at"]?.intValue ?? 0
            #expect(abs(createdAt - Self.wallMillis()) < 30_000)
        }
    }

    @Test func theTestClockAdvancesTheServerClock() throws {
        try withTestServer(testClock: true) { server in
            let wall = Self.wallMillis()
            let initial = try server.request(.get, "/v1/test/clock", bearer: server.adminKey)
            #expect(initial.status == 200, "\(initial.text)")
            #expect(Set(initial.json?.objectValue?.keys ?? []) == ["now", "offset_ms"])
            #expect(initial.json?["offset_ms"]?.intValue == 0)
            let now0 = initial.json?["now"]?.intValue ?? 0
            #expect(abs(now0 - wall) < 30_000, "now \(now0) vs wall \(wall)")

            let advanced = try server.request(.post, "/v1/test/clock/advance", bearer: server.adminKey, json: #"{"ms":60000}"#)
            #expect(advanced.status == 200, "\(advanced.text)")
            #expect(advanced.json?["offset_ms"]?.intValue == 60000)
            #expect((advanced.json?["now"]?.intValue ?? 0) >= now0 + 60000)
            let read = try server.request(.get, "/v1/test/clock", bearer: server.adminKey)
            #expect(read.json?["offset_ms"]?.intValue == 60000)
            #expect((read.json?["now"]?.intValue ?? 0) >= now0 + 60000)
            let more = try server.request(.post, "/v1/test/clock/advance", bearer: server.adminKey, json: #"{"ms":1}"#)
            #expect(more.json?["offset_ms"]?.intValue == 60001)

            // Everything the server stamps uses the moved clock.
            let app = try server.createApp()
            let created = try server.request(.get, "/v1/apps/\(app.appID)", bearer: server.adminKey).json?["created_at"]?.intValue ?? 0
            #expect(created >= wall + 60000, "created_at \(created) must include the offset")
            try Self.writeSettingsEvents(app, count: 1)
            let event = try app.events().first
            #expect((event?["created_at"]?.intValue ?? 0) >= wall + 60000)
            #expect((try app.request(.get, "/v1/stats").json?["generated_at"]?.intValue ?? 0) >= wall + 60000)

            // Invalid advances: ms ≥ 1, an integer, required.
            for body in [#"{"ms":0}"#, #"{"ms":-1}"#, "{}", #"{"ms":"5"}"#, #"{"ms":1.5}"#, #"{"ms":null}"#] {
                let r = try server.request(.post, "/v1/test/clock/advance", bearer: server.adminKey, json: body)
                Self.expectProblem(r, 400, .invalidParams, body)
                #expect(r.json?["errors"]?[0]?["field"]?.stringValue == "body.ms", "\(body): \(r.text)")
            }
            #expect(try server.request(.get, "/v1/test/clock", bearer: server.adminKey).json?["offset_ms"]?.intValue == 60001)

            // Only the server admin key.
            Self.expectProblem(try app.request(.get, "/v1/test/clock"), 403, .forbidden)
            Self.expectProblem(try app.request(.post, "/v1/test/clock/advance", json: #"{"ms":1}"#), 403, .forbidden)
            Self.expectProblem(try server.request(.get, "/v1/test/clock"), 401, .unauthenticated)
            #expect(try server.request(.get, "/v1/test/clock", bearer: server.adminKey).json?["offset_ms"]?.intValue == 60001)
        }
    }

    // MARK: - Event log (docs/events.md#polling-the-log)

    @Test func anEmptyLogStartsAtZero() throws {
        try withApp { server, app in
            for query in ["", "after=earliest", "after=0"] {
                let page = try Self.log(app, query)
                #expect(page.status == 200, "\(query): \(page.response.text)")
                #expect(page.items.isEmpty)
                #expect(page.nextCursor?.isNull == true)
                #expect(page.previous == "0")
                #expect(Set(page.response.json?.objectValue?.keys ?? []) == ["items", "next_cursor", "previous_event_id"])
            }
            Self.expectProblem(try Self.log(app, "after=1").response, 400, .invalidLastEventId, "after beyond an empty log")
        }
    }

    @Test func theLogListsEventsInIdOrderAfterAPosition() throws {
        try withApp { server, app in
            try Self.writeSettingsEvents(app, count: 3)

            let all = try Self.log(app, "after=earliest")
            #expect(all.status == 200, "\(all.response.text)")
            #expect(all.ids == ["1", "2", "3"])
            #expect(all.previous == "0")
            #expect(all.nextCursor == "3")
            for item in all.items {
                #expect(Set(item.objectValue?.keys ?? []) == ["id", "type", "app_id", "created_at", "data"], "\(item)")
                #expect(item["type"] == "app.settings_updated")
                #expect(item["app_id"]?.stringValue == app.appID)
                #expect(item["created_at"]?.intValue != nil)
                #expect(item["data"] == ["changed": ["revoke_window_s"]])
            }
            let times = all.items.compactMap { $0["created_at"]?.intValue }
            #expect(times == times.sorted())

            // No `after`: only events after the head; previous_event_id is the head.
            let head = try Self.log(app)
            #expect(head.status == 200)
            #expect(head.items.isEmpty)
            #expect(head.previous == "3")
            #expect(head.nextCursor?.isNull == true)

            let cases: [(String, [String], String)] = [
                ("after=0", ["1", "2", "3"], "0"), ("after=1", ["2", "3"], "1"), ("after=2", ["3"], "2"), ("after=3", [], "3"),
                ("after=0002", ["3"], "2"),
            ]
            for (query, ids, previous) in cases {
                let page = try Self.log(app, query)
                #expect(page.status == 200, "\(query): \(page.response.text)")
                #expect(page.ids == ids, "\(query)")
                #expect(page.previous == previous, "\(query)")
                #expect(page.nextCursor == (ids.last.map { JSONValue.string($0) } ?? .null), "\(query)")
            }

            // Another app's log is its own, with its own ids.
            let other = try server.createApp()
            #expect(try Self.log(other, "after=earliest").ids.isEmpty)
            try Self.writeSettingsEvents(other, count: 1)
            #expect(try Self.log(other, "after=earliest").ids == ["1"])
            #expect(try Self.log(app, "after=earliest").ids == ["1", "2", "3"])
        }
    }

    @Test(arguments: ["abc", "-1", "%2B5", "+5", "1.5", "%201", "1%20", "4", "99999999999999999999999", "0x1", "1e2", "EARLIEST", "earliest1"])
    func invalidAfterValuesAre7000012(_ after: String) throws {
        try withApp { server, app in
            try Self.writeSettingsEvents(app, count: 3)
            let page = try Self.log(app, "after=\(after)")
            Self.expectProblem(page.response, 400, .invalidLastEventId, "after=\(after)")
            #expect(page.response.json?["title"]?.stringValue == "invalid_last_event_id")
        }
    }

    @Test func typeFiltersAndLimitPaging() throws {
        try withApp { server, app in
            try Self.writeSettingsEvents(app, count: 3)

            let filters: [(String, [String])] = [
                ("types=app.*", ["1", "2", "3"]), ("types=app.settings_updated", ["1", "2", "3"]), ("types=*", ["1", "2", "3"]),
                ("types=user.*", []), ("types=message.sent", []), ("types=user.*,app.*", ["1", "2", "3"]),
                ("types=message.sent,app.settings_updated", ["1", "2", "3"]), ("types=app", []), ("types=app.settings", []),
                ("user_id=u1", []),
            ]
            for (filter, ids) in filters {
                let page = try Self.log(app, "after=earliest&" + filter)
                #expect(page.status == 200, "\(filter): \(page.response.text)")
                #expect(page.ids == ids, "\(filter)")
                #expect(page.previous == "0", "\(filter): filters never change positions")
                #expect(page.nextCursor == (ids.last.map { JSONValue.string($0) } ?? .null), "\(filter)")
            }

            // limit=1 paging with next_cursor as the next `after`.
            var after = "earliest"
            var visited: [String] = []
            var previous: [String] = []
            for _ in 0..<10 {
                let page = try Self.log(app, "after=\(after)&limit=1&types=app.*")
                #expect(page.status == 200, "\(page.response.text)")
                #expect(page.items.count <= 1)
                visited += page.ids
                previous.append(page.previous ?? "?")
                guard let next = page.nextCursor?.stringValue else {
                    #expect(page.nextCursor?.isNull == true)
                    break
                }
                after = next
            }
            #expect(visited == ["1", "2", "3"])
            #expect(previous == ["0", "1", "2", "3"])

            // limit bounds (docs/api.md).
            for limit in ["0", "101", "-1", "x"] {
                let r = try Self.log(app, "after=earliest&limit=\(limit)").response
                Self.expectProblem(r, 400, .invalidParams, "limit=\(limit)")
            }
            #expect(try Self.log(app, "after=earliest&limit=100").ids.count == 3)
            // Default limit 20.
            try Self.writeSettingsEvents(app, count: 22, startingAt: 100)
            let page = try Self.log(app, "after=earliest")
            #expect(page.ids == (1...20).map(String.init))
            #expect(page.nextCursor == "20")
            #expect(try Self.log(app, "after=20").ids == (21...25).map(String.init))
            #expect(try Self.log(app, "after=earliest&limit=2").ids == ["1", "2"])
            #expect(try Self.log(app, "after=earliest&limit=2").nextCursor == "2")
        }
    }

    @Test func aPollerNeverSeesAnOlderIdAfterANewerOneUnderConcurrentWrites() throws {
        try withApp(poolSize: 8) { server, app in
            let writers = 4
            let perWriter = 10
            let done = Atomic<Int>(0)
            let group = DispatchGroup()
            for w in 0..<writers {
                group.enter()
                Thread {
                    for i in 0..<perWriter {
                        _ = try? app.request(.patch, "/v1/settings", json: #"{"revoke_window_s":\#(w * 1000 + i + 1)}"#)
                    }
                    done.add(1, ordering: .sequentiallyConsistent)
                    group.leave()
                }.start()
            }
            var seen: [Int] = []
            var after = "0"
            var polls = 0
            while true {
                let finished = done.load(ordering: .sequentiallyConsistent) == writers
                let page = try Self.log(app, "after=\(after)&limit=100")
                #expect(page.status == 200)
                seen += page.ids.compactMap { Int($0) }
                if let next = page.nextCursor?.stringValue { after = next }
                polls += 1
                if finished && page.ids.isEmpty { break }
                if polls > 5000 { break }
            }
            group.wait()
            // Polling from the last id seen visits every event exactly once, in increasing id order, with no gap.
            #expect(seen == Array(1...(writers * perWriter)), "seen \(seen)")
        }
    }

    @Test func logFiltersValidateTheirIDs() throws {
        // An ID that violates its format → 400 6000001 naming it, query parameters included.
        try withApp { server, app in
            let cases = [
                ("user_id=" + String(repeating: "u", count: 33), "user_id"), ("user_id=a%20b", "user_id"),
                ("group_id=%23g1", "group_id"), ("room_id=" + String(repeating: "r", count: 33), "room_id"),
            ]
            for (query, field) in cases {
                let r = try Self.log(app, "after=earliest&" + query).response
                #expect(r.status == 400 && r.code == ErrorCode.invalidParams.code, "\(query): \(r.status) \(r.text.prefix(200))")
                let fields = r.json?["errors"]?.arrayValue?.compactMap { $0["field"]?.stringValue } ?? []
                #expect(fields.contains(field), "\(query): \(r.text)")
            }
        }
    }

    @Test func theLogIsForAppCredentials() throws {
        try withApp { server, app in
            Self.expectProblem(try server.request(.get, "/v1/events/log"), 401, .unauthenticated)
            Self.expectProblem(try server.request(.get, "/v1/events/log", bearer: server.adminKey), 400, .invalidParams)
            let asApp = try server.request(.get, "/v1/events/log?after=earliest", bearer: server.adminKey, headers: ["Parley-App-Id": app.appID])
            #expect(asApp.status == 200, "\(asApp.text)")
            #expect(asApp.json?["previous_event_id"] == "0")
        }
    }
}
