import Glibc
import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Presence from open user streams (docs/users.md#presence, docs/events.md#live-streams-server-sent-events), end to
/// end.
@Suite("Presence from streams")
struct LivePresenceTests: ProblemAssertions {

    @Test func aStreamMakesTheUserOnlineAndItsCloseOffline() throws {
        try withApp { server, app in
            try app.createUser("alice")
            try app.createUser("bob")
            let r = try app.request(.post, "/v1/users/bob/status/subscriptions", json: #"{"user_ids":["alice"],"duration_min":10}"#)
            #expect(r.status == 200, "\(r.text)")
            let token = try app.token(for: "alice")
            let ios = try LiveStreams.open(server, "/v1/users/alice/events?platform=ios", bearer: token)
            var online = try OnlineStatus.status(app, "alice") { $0["online_status"] == .string("online") }
            #expect(OnlineStatus.platforms(online) == ["ios"])
            #expect(online["last_online_status_updated_at"]?.intValue ?? 0 > 0)
            let web = try LiveStreams.open(server, "/v1/users/alice/events?platform=web", bearer: token)
            online = try OnlineStatus.status(app, "alice") { OnlineStatus.platforms($0).count == 2 }
            #expect(OnlineStatus.platforms(online) == ["ios", "web"], "sorted by ZIM number")
            web.close()
            online = try OnlineStatus.status(app, "alice") { OnlineStatus.platforms($0) == ["ios"] }
            #expect(online["online_status"] == .string("online"))
            ios.close()
            let offline = try OnlineStatus.status(app, "alice") { $0["online_status"] == .string("offline") }
            #expect(offline["online_status"] == .string("offline"))
            #expect(OnlineStatus.platforms(offline).isEmpty)
            // Bob, a subscriber, heard every change. A stream's close is no request that waits for the sequencer: its
            // event reaches the log a moment after the status commits.
            var heard: [String] = []
            try eventually(every: .milliseconds(50)) {
                heard = try app.events(query: "types=user.status_updated&user_id=bob").compactMap {
                    $0["data"]?["status"]?["online_status"]?.stringValue
                }
                return heard.count >= 4
            }
            #expect(heard == ["online", "online", "online", "offline"])
        }
    }

    @Test func onlyPresenceCountingStreamsCount() throws {
        try withApp { server, app in
            try app.createUser("alice")
            let watcher = try LiveStreams.open(server, "/v1/users/alice/events", bearer: app.key)
            defer { watcher.close() }
            // Deliberate: a window in which the uncounted stream must not make alice online.
            usleep(300_000)
            #expect(try app.request(.get, "/v1/users/alice/status").json?["online_status"] == .string("offline"))
            let counted = try LiveStreams.open(server, "/v1/users/alice/events?presence=true&platform=linux", bearer: app.key)
            defer { counted.close() }
            let online = try OnlineStatus.status(app, "alice") { $0["online_status"] == .string("online") }
            #expect(OnlineStatus.platforms(online) == ["linux"])
            Self.expectProblem(try app.request(.get, "/v1/users/alice/events?platform=fax"), 400, .invalidParams)
        }
    }

    @Test func aKickLogsOutAndOldTokensStopWorking() throws {
        try withApp { server, app in
            try app.createUser("alice")
            let token = try app.token(for: "alice")
            let stream = try LiveStreams.open(server, "/v1/users/alice/events?platform=android", bearer: token)
            defer { stream.close() }
            _ = try OnlineStatus.status(app, "alice") { $0["online_status"] == .string("online") }
            let kick = try app.request(.post, "/v1/users/alice/kick", json: "{}")
            #expect(kick.json?["closed_streams"] == .int(1))
            let kicked = try #require(try LiveStreams.nextEvent(stream))
            #expect(kicked.event == "user.kicked")
            #expect(try LiveStreams.nextEvent(stream) == nil)
            let status = try OnlineStatus.status(app, "alice") { $0["online_status"] != .string("online") }
            #expect(status["online_status"] == .string("logout"))
            Self.expectProblem(try server.request(.get, "/v1/users/alice/events", bearer: token), 401, .tokenInvalid)
        }
    }

    @Test func aKickOnOnePlatformLeavesTheOthersOpen() throws {
        try withApp { server, app in
            try app.createUser("alice")
            let token = try app.token(for: "alice")
            let phone = try LiveStreams.open(server, "/v1/users/alice/events?platform=ios", bearer: token)
            defer { phone.close() }
            let desk = try LiveStreams.open(server, "/v1/users/alice/events?platform=macos", bearer: token)
            defer { desk.close() }
            _ = try OnlineStatus.status(app, "alice") { OnlineStatus.platforms($0).count == 2 }
            let kick = try app.request(.post, "/v1/users/alice/kick", json: #"{"platforms":["ios"],"revoke_tokens":false}"#)
            #expect(kick.json?["closed_streams"] == .int(1), "\(kick.text)")
            #expect(try LiveStreams.nextEvent(phone)?.event == "user.kicked")
            #expect(try LiveStreams.nextEvent(phone) == nil)
            #expect(try LiveStreams.nextEvent(desk)?.event == "user.kicked", "the desktop hears it and stays open")
            let status = try OnlineStatus.status(app, "alice") { OnlineStatus.platforms($0) == ["macos"] }
            #expect(status["online_status"] == .string("online"))
            #expect(OnlineStatus.platforms(status) == ["macos"])
        }
    }

    /// A node that stops takes its streams' presence with it (here gracefully; a crashed node's rows are
    /// settled by the others after its heartbeat lapses).
    @Test func aStoppedNodesStreamsGoOffline() throws {
        try withTestServer { nodeA in
            let nodeB = try TestServer.start(database: nodeA.database)
            let app = try nodeA.createApp()
            try app.createUser("alice")
            let stream = try LiveStreams.open(nodeB, "/v1/users/alice/events", bearer: try app.token(for: "alice"))
            defer { stream.close() }
            _ = try OnlineStatus.status(app, "alice") { $0["online_status"] == .string("online") }
            nodeB.stop()
            let status = try OnlineStatus.status(app, "alice") { $0["online_status"] == .string("offline") }
            #expect(status["online_status"] == .string("offline"))
        }
    }

    @Test func statsAndMetricsCountOpenStreamsAndOnlineUsers() throws {
        try withApp { server, app in
            try app.createUser("alice")
            let user = try LiveStreams.open(server, "/v1/users/alice/events", bearer: try app.token(for: "alice"))
            defer { user.close() }
            let whole = try LiveStreams.open(server, "/v1/events", bearer: app.key)
            defer { whole.close() }
            _ = try OnlineStatus.status(app, "alice") { $0["online_status"] == .string("online") }
            let stats = try app.request(.get, "/v1/stats").json
            #expect(stats?["users_online"] == .int(1))
            #expect(stats?["streams_open"] == .int(2))
            let metrics = try server.request(.get, "/metrics", bearer: nil).text
            #expect(metrics.contains("parley_sse_streams_open{kind=\"user\"} 1"))
            #expect(metrics.contains("parley_sse_streams_open{kind=\"app\"} 1"))
        }
    }
}
