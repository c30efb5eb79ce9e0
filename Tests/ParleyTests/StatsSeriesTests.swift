import Dispatch
import ParleyCore
import ParleyHTTP
import ParleyTesting
import Synchronization
import Testing

@testable import Parley
@testable import ParleyAPI

/// `GET /v1/stats/series` and the activity sampler behind it (docs/operations.md#activity-series).
@Suite("Activity series")
struct StatsSeriesTests: ProblemAssertions {
    static let metrics = [
        "messages", "active_users", "streams_open", "webhook_backlog", "webhook_latency_ms", "push_sent", "push_failed", "http_4xx",
        "http_5xx",
    ]

    /// A server whose sampler runs at every timer sweep (100 ms), with the test clock.
    static func withSampledApp(_ body: (TestServer, TestApp) throws -> Void) throws {
        try withApp(testClock: true, configure: { $0.statsSampleMillis = 100 }, body)
    }

    /// Moves the server clock to one second past the next whole hour, so the activity of the test falls in one minute
    /// and one hour (the current buckets of both ranges) however long it takes, up to 59 s.
    static func alignToTheHour(_ server: TestServer) throws {
        let now = server.app.services.clock.now()
        try server.advanceClock(ms: Int(3_600_000 - now % 3_600_000 + 1000))
    }

    static func series(_ app: TestApp, _ query: String = "") throws -> JSONValue {
        let r = try app.request(.get, "/v1/stats/series" + query)
        #expect(r.status == 200, "\(r.text)")
        return try #require(r.json, "no JSON: \(r.text)")
    }

    /// The values of one metric (nil for null).
    static func values(_ series: JSONValue, _ metric: String) -> [Int64?] {
        (series["series"]?[metric]?.arrayValue ?? []).map { $0.intValue }
    }

    /// The last (current) bucket of a metric.
    static func current(_ series: JSONValue, _ metric: String) -> Int64? { values(series, metric).last ?? nil }

    @Test func bothRangesHaveOneValuePerAlignedBucketOfEveryMetric() throws {
        try Self.withSampledApp { server, app in
            for (query, range, step, buckets) in [("", "1h", Int64(60), 60), ("?range=1h", "1h", 60, 60), ("?range=7d", "7d", 3600, 168)] {
                let before = server.app.services.clock.now()
                let s = try Self.series(app, query)
                let after = server.app.services.clock.now()
                #expect(Set(s.objectValue?.keys ?? []) == ["range", "step_s", "from", "to", "generated_at", "series"], "\(s)")
                #expect(s["range"]?.stringValue == range)
                #expect(s["step_s"]?.intValue == step)
                let from = s["from"]?.intValue ?? -1
                let to = s["to"]?.intValue ?? -1
                let generatedAt = s["generated_at"]?.intValue ?? -1
                #expect(from % (step * 1000) == 0 && to % (step * 1000) == 0, "buckets aligned to the \(range) step: \(from) \(to)")
                #expect(to - from == step * 1000 * Int64(buckets))
                #expect(generatedAt >= before && generatedAt <= after)
                // The last bucket is the current one: it holds generated_at.
                #expect(to - step * 1000 <= generatedAt && generatedAt < to, "\(generatedAt) in [\(to - step * 1000), \(to))")
                #expect(Set(s["series"]?.objectValue?.keys ?? []) == Set(Self.metrics))
                for metric in Self.metrics {
                    let array = s["series"]?[metric]?.arrayValue ?? []
                    #expect(array.count == buckets, "\(metric): \(array.count) values")
                    #expect(array.allSatisfy { $0 == .null || $0.intValue != nil }, "\(metric): numbers or null")
                }
                // A fresh database has no figures a week back: a gap, not a zero.
                if range == "7d" { #expect(Self.values(s, "messages").first == .some(nil)) }
            }
            // A subset, in the order of the contract.
            let subset = try Self.series(app, "?metrics=http_4xx,messages&range=7d")
            #expect(Set(subset["series"]?.objectValue?.keys ?? []) == ["messages", "http_4xx"])
            #expect(subset["series"]?["messages"]?.arrayValue?.count == 168)
        }
    }

    @Test func knownActivityShowsInTheCurrentBucketAfterASamplerPass() throws {
        try Self.withSampledApp { server, app in
            try Self.alignToTheHour(server)
            _ = try app.createUser("alice")
            _ = try app.createUser("bob")
            for i in 0..<3 {
                let r = try PeerMessages.sendText(app, "alice", "bob", "m\(i)")
                #expect(r.status == 200 || r.status == 201, "\(r.text)")
            }
            for _ in 0..<2 { #expect(try app.request(.get, "/v1/users/nobody").status == 404) }
            var last = JSONValue.null
            let shown = try eventually(timeout: .seconds(15), every: .milliseconds(100)) {
                last = try Self.series(app)
                return Self.current(last, "messages") == 3 && Self.current(last, "http_4xx") == 2
            }
            #expect(shown, "the current minute: \(last)")
            #expect(Self.current(last, "http_5xx") == 0, "sampled: a zero, not a gap")
            #expect(Self.current(last, "push_failed") == 0)
            #expect(Self.current(last, "webhook_latency_ms") == nil, "no delivery: no latency")
            // Before the clock moved the server did not sample those minutes: gaps.
            #expect(Self.values(last, "messages").dropLast().contains(nil))
            // The hour holds the minute's counts.
            let week = try Self.series(app, "?range=7d")
            #expect(Self.current(week, "messages") == 3, "\(week)")
            #expect(Self.current(week, "http_4xx") == 2)
        }
    }

    @Test func oneAppNeverSeesAnothersFigures() throws {
        try Self.withSampledApp { server, app in
            try Self.alignToTheHour(server)
            let other = try server.createApp()
            for a in [app, other] {
                _ = try a.createUser("alice")
                _ = try a.createUser("bob")
            }
            for _ in 0..<2 { try PeerMessages.sendText(app, "alice", "bob") }
            try PeerMessages.sendText(other, "alice", "bob")
            #expect(try app.request(.get, "/v1/users/nobody").status == 404)
            let shown = try eventually(timeout: .seconds(15), every: .milliseconds(100)) {
                try Self.current(Self.series(app), "messages") == 2 && Self.current(Self.series(other), "messages") == 1
                    && Self.current(Self.series(app), "http_4xx") == 1
            }
            #expect(shown)
            #expect(Self.current(try Self.series(other), "http_4xx") == 0)
            // The admin key reads the app it names.
            let asOther = try server.request(
                .get, "/v1/stats/series?metrics=messages", bearer: server.adminKey, headers: ["Parley-App-Id": other.appID])
            #expect(asOther.status == 200, "\(asOther.text)")
            #expect(asOther.json.map { Self.current($0, "messages") } == 1)
        }
    }

    @Test func badInputsAre400NamingTheParameter() throws {
        try withApp { server, app in
            Self.expectInvalid(try app.request(.get, "/v1/stats/series?range=2h"), field: "range")
            Self.expectInvalid(try app.request(.get, "/v1/stats/series?metrics=nope"), field: "metrics")
            Self.expectInvalid(try app.request(.get, "/v1/stats/series?metrics=messages,nope"), field: "metrics")
            Self.expectInvalid(try app.request(.get, "/v1/stats/series?metrics="), field: "metrics")
            let both = try app.request(.get, "/v1/stats/series?range=1d&metrics=nope")
            Self.expectInvalid(both, field: "range")
            #expect(Set(Self.fields(both)) == ["range", "metrics"])
            // Who: A (the admin key needs Parley-App-Id).
            Self.expectProblem(try server.request(.get, "/v1/stats/series", bearer: server.adminKey), 400, .invalidParams)
            Self.expectProblem(try server.request(.get, "/v1/stats/series"), 401, .unauthenticated)
        }
    }

    @Test func figuresOlderThanSevenDaysAreTrimmed() throws {
        try withApp { server, app in
            let services = server.app.services
            let now = services.clock.now()
            let minute = now - now % 60_000
            let old = minute - 7 * 86_400_000 - 60_000
            let kept = minute - 6 * 86_400_000
            for at in [old, kept] {
                try server.sql(
                    "INSERT INTO stats_minutes (app_id, minute, metric, value) VALUES ($1, $2, 'messages', 5)", [app.appID, at])
                try server.sql("INSERT INTO stats_samples (minute, sampled_at, node) VALUES ($1, $1, 'test')", [at])
            }
            // A pass in a minute no node sampled yet (the background sampler claims the present one).
            #expect(try StatsSampler(everyMillis: 60_000).pass(services: services, now: now + 120_000))
            let rows = "SELECT count(*) FROM stats_minutes WHERE app_id = $1 AND minute = $2"
            #expect(try server.count(rows, [app.appID, old]) == 0)
            #expect(try server.count(rows, [app.appID, kept]) == 1)
            #expect(try server.count("SELECT count(*) FROM stats_samples WHERE minute = $1", [old]) == 0)
            #expect(try server.count("SELECT count(*) FROM stats_samples WHERE minute = $1", [kept]) == 1)
        }
    }

    @Test func twoNodesOnOneDatabaseSampleOnceAnIntervalAndAddTheirErrorCounts() throws {
        try withApp { first, app in
            let second = try TestServer.start(database: first.database)
            defer { second.stop() }
            let nodes = [first, second].map { StatsSampler(everyMillis: 60_000, node: "node-\($0.port)") }
            let services = [first.app.services, second.app.services]
            let base = first.app.services.clock.now()
            // Minutes ahead of the background samplers: both nodes try each at once, one samples.
            for k in 1...5 {
                let now = base + Int64(k) * 60_000
                let sampled = Atomic<Int>(0)
                let failed = Atomic<Int>(0)
                DispatchQueue.concurrentPerform(iterations: 2) { i in
                    do {
                        if try nodes[i].pass(services: services[i], now: now) { sampled.add(1, ordering: .relaxed) }
                    } catch {
                        failed.add(1, ordering: .relaxed)
                    }
                }
                #expect(failed.load(ordering: .relaxed) == 0)
                #expect(sampled.load(ordering: .relaxed) == 1, "minute \(k): one node samples")
                // Later in the same interval neither samples again.
                #expect(try !nodes[0].pass(services: services[0], now: now + 5_000))
                #expect(try !nodes[1].pass(services: services[1], now: now + 5_000))
            }
            // Each node's 4xx answers are added to the app's figures, whoever writes them.
            let onSecond = TestApp(server: second, appID: app.appID, key: app.key)
            for _ in 0..<2 { #expect(try app.request(.get, "/v1/users/nobody").status == 404) }
            #expect(try onSecond.request(.get, "/v1/users/nobody").status == 404)
            for s in services { try StatsSampler.flushErrors(services: s) }
            let total = "SELECT coalesce(sum(value), 0)::bigint FROM stats_minutes WHERE app_id = $1 AND metric = 'http_4xx'"
            #expect(try first.count(total, [app.appID]) == 3)
        }
    }
}
