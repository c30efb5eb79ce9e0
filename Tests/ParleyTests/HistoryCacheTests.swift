import Foundation
import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains

/// The history cache (docs/scaling.md#history-cache): the newest page of a conversation is served without a query,
/// and never as it was before a change that alters it — every kind of change, through the HTTP API, on one node and
/// from another node.
@Suite("History cache", .inProcess)
struct HistoryCacheTests: GroupTestSupport {

    // MARK: - The rules, without a server

    @Test func eventsDropTheirConversationNothingOrTheWholeApp() {
        #expect(HistoryCache.scope(type: "message.sent", orderKey: "peer:a b") == .conversation("peer:a b"))
        #expect(HistoryCache.scope(type: "message.reactions_updated", orderKey: "group:g") == .conversation("group:g"))
        #expect(HistoryCache.scope(type: "group.member_left", orderKey: "group:g") == .conversation("group:g"))
        #expect(HistoryCache.scope(type: "conversation.read", orderKey: "peer:a b") == .conversation("peer:a b"))
        // A delete for one user is ordered by that user; a broadcast by its app: neither names a conversation.
        #expect(HistoryCache.scope(type: "message.deleted", orderKey: "peer:a b") == .app)
        #expect(HistoryCache.scope(type: "message.broadcast", orderKey: "app1") == .app)
        #expect(HistoryCache.scope(type: "message.edited", orderKey: "someone") == .app)
        #expect(HistoryCache.scope(type: "user.status_updated", orderKey: "a") == .none)
        #expect(HistoryCache.scope(type: "friend.added", orderKey: "a") == .none)
        for type in ["user.deleted", "conversation.updated", "conversation.deleted", "retention.purged", "job.finished", "app.settings_updated"] {
            #expect(HistoryCache.scope(type: type, orderKey: "app") == .app, "\(type)")
        }
        #expect(HistoryCache.scope(type: "something.new", orderKey: "peer:a b") == .app, "a type added later drops the app")
    }

    @Test func aReadThatAChangeOvertookIsNotKept() {
        let cache = HistoryCache(budgetBytes: 1 << 20)
        let key = HistoryCache.Key(appID: "x", conversation: "peer:a b", view: "v")
        var reads = 0
        func read(changing: Bool) -> [UInt8] {
            cache.page(key) {
                reads += 1
                // The change commits while the page is read: the database may have answered before it.
                if changing { cache.invalidate(appID: "x", changes: [(type: "message.edited", orderKey: "peer:a b")]) }
                return (Array("page \(reads)".utf8), true)
            }
        }
        #expect(read(changing: true) == Array("page 1".utf8))
        #expect(read(changing: false) == Array("page 2".utf8), "the overtaken read was not kept")
        #expect(read(changing: false) == Array("page 2".utf8), "this one was")
        #expect(reads == 2)
        // Another conversation's change and a pageless event leave it; the app's drop takes it.
        cache.invalidate(appID: "x", changes: [(type: "message.sent", orderKey: "peer:a c"), (type: "user.status_updated", orderKey: "a")])
        #expect(read(changing: false) == Array("page 2".utf8))
        cache.storedElsewhere(appID: "x")
        #expect(read(changing: false) == Array("page 3".utf8))
        #expect(cache.figures.hits == 2 && cache.figures.misses == 3)
    }

    @Test func theBudgetBoundsWhatIsKeptAndTheRecentlyServedStay() {
        let cache = HistoryCache(budgetBytes: 40_000)
        let page = [UInt8](repeating: 0x61, count: 1_000)
        let hot = HistoryCache.Key(appID: "x", conversation: "peer:hot", view: "v")
        var hotReads = 0
        for i in 0..<200 {
            _ = cache.page(HistoryCache.Key(appID: "x", conversation: "peer:\(i)", view: "v")) { (page, true) }
            _ = cache.page(hot) {
                hotReads += 1
                return (page, true)
            }
            #expect(cache.figures.bytes <= 40_000)
        }
        #expect(hotReads == 1, "the page served every time is never the one evicted")
        // A page bigger than a quarter of the budget is served but not kept.
        var bigReads = 0
        for _ in 0..<2 {
            _ = cache.page(HistoryCache.Key(appID: "x", conversation: "peer:big", view: "v")) {
                bigReads += 1
                return ([UInt8](repeating: 0x62, count: 20_000), true)
            }
        }
        #expect(bigReads == 2)
        // Off: every read reads.
        let off = HistoryCache(budgetBytes: 0)
        var offReads = 0
        for _ in 0..<3 {
            _ = off.page(hot) {
                offReads += 1
                return (page, true)
            }
        }
        #expect(offReads == 3 && off.figures.misses == 0)
    }

    // MARK: - End to end, one node

    /// The newest pages of the views that a change may alter; each compared with the same page read past the cache
    /// (`before_seq` set: not the newest-page form, so never cached).
    struct Views {
        let app: TestApp
        let group: String
        let tokens: [String: String]

        var paths: [(label: String, path: String, token: String?)] {
            [
                ("a's peer history", "/v1/users/a/conversations/peer/b/messages", nil),
                ("b's peer history as b", "/v1/users/b/conversations/peer/a/messages", tokens["b"]),
                ("the group as the app", "/v1/groups/\(group)/messages", nil),
                ("the group as member c", "/v1/groups/\(group)/messages", tokens["c"]),
                ("c's group history", "/v1/users/c/conversations/group/\(group)/messages?limit=5", nil),
            ]
        }

        func get(_ path: String, _ token: String?) throws -> TestResponse {
            if let token { return try app.server.request(.get, path, bearer: token) }
            return try app.request(.get, path)
        }

        /// Every view twice (the second from the cache), then checked against the database.
        func warm() throws {
            for view in paths {
                _ = try get(view.path, view.token)
                _ = try get(view.path, view.token)
            }
        }

        func expectFresh(_ change: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
            for view in paths {
                let cached = try get(view.path, view.token)
                let separator = view.path.contains("?") ? "&" : "?"
                let fresh = try get(view.path + separator + "before_seq=9223372036854775807", view.token)
                #expect(cached.status == fresh.status, "\(change): \(view.label)", sourceLocation: sourceLocation)
                let items = { (r: TestResponse) in r.status == 200 ? r.json?["items"] : r.json?["code"] }
                #expect(items(cached) == items(fresh), "\(change): \(view.label)", sourceLocation: sourceLocation)
            }
        }
    }

    static func ok(_ r: TestResponse, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(r.status < 300, "\(r.status) \(r.text)", sourceLocation: sourceLocation)
    }

    static func cacheFigure(_ server: TestServer, _ name: String) throws -> Int64 {
        let text = try server.request(.get, "/metrics").text
        for line in text.split(separator: "\n") where line.hasPrefix(name + " ") {
            return Int64(line.split(separator: " ").last ?? "") ?? -1
        }
        return -1
    }

    @Test func everyChangeToAPageShowsInTheNextReadOnThisNode() throws {
        try withApp(settings: #"{"rate_limit_user_rps":100000}"#, unthrottled: true) { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }
            let group = try Self.createGroup(app, "a", members: ["b", "c"])
            let views = Views(app: app, group: group, tokens: ["b": try app.token(for: "b"), "c": try app.token(for: "c")])
            var ids: [String] = []
            for i in 0..<4 {
                ids.append(try MessageActions.send(app, "a", "b", "peer \(i)")["message_id"]?.stringValue ?? "")
                ids.append(try MessageActions.sendGroup(app, "a", group, "group \(i)")["message_id"]?.stringValue ?? "")
            }
            let hitsBefore = try Self.cacheFigure(server, "parley_history_cache_hits_total")
            try views.warm()
            #expect(try Self.cacheFigure(server, "parley_history_cache_hits_total") - hitsBefore >= 5, "the second reads were served")
            try views.expectFresh("nothing changed")

            let changes: [(String, () throws -> Void)] = [
                ("a peer send", { _ = try MessageActions.send(app, "b", "a", "new") }),
                ("a group send", { _ = try MessageActions.sendGroup(app, "b", group, "new") }),
                (
                    "an edit",
                    {
                        try Self.ok(app.request(.patch, "/v1/messages/\(ids[6])", json: #"{"operator":"a","body":{"text":"edited"}}"#))
                    }
                ),
                (
                    "a reaction",
                    {
                        try Self.ok(app.request(.post, "/v1/messages/\(ids[7])/reactions", json: #"{"user_id":"c","reaction_type":"like"}"#))
                    }
                ),
                ("a pin", { try Self.ok(app.request(.post, "/v1/messages/\(ids[7])/pin", json: "{}")) }),
                ("a revoke", { try Self.ok(MessageActions.revoke(app, ids[4])) }),
                (
                    "a delete for b alone",
                    {
                        let r = try app.request(
                            .post, "/v1/messages/delete", json: "{\"scope\":\"self\",\"user_id\":\"b\",\"message_ids\":[\"\(ids[2])\"]}")
                        #expect(Self.codes(r) == [nil])
                    }
                ),
                (
                    "a delete for c alone, in the group",
                    {
                        let r = try app.request(
                            .post, "/v1/messages/delete", json: "{\"scope\":\"self\",\"user_id\":\"c\",\"message_ids\":[\"\(ids[5])\"]}")
                        #expect(Self.codes(r) == [nil])
                    }
                ),
                (
                    "a delete for everyone",
                    {
                        let r = try app.request(
                            .post, "/v1/messages/delete", json: "{\"scope\":\"everyone\",\"message_ids\":[\"\(ids[0])\",\"\(ids[3])\"]}")
                        #expect(Self.codes(r) == [nil, nil])
                    }
                ),
                (
                    "an import (no event)",
                    {
                        var headers = HTTPHeaders()
                        headers.add("Content-Type", "application/x-ndjson")
                        let line =
                            #"{"conversation_type":"peer","from":"a","to":"b","type":1,"body":{"text":"imported"},"timestamp":\#(Int64(Date().timeIntervalSince1970 * 1000) - 1_000),"client_msg_id":"imp-1"}"#
                        let r = try app.request(.post, "/v1/messages/import", json: line + "\n", headers: headers)
                        #expect(r.status == 200, "\(r.text)")
                        #expect(Self.codes(r) == [nil], "\(r.text)")
                    }
                ),
                (
                    "b clears its history",
                    {
                        try Self.ok(app.request(.delete, "/v1/users/b/conversations/peer/a?delete_messages=true"))
                    }
                ),
                (
                    "a moderation job hides a's messages (no event per message)",
                    {
                        let r = try app.request(
                            .post, "/v1/moderation/remove_messages", json: #"{"user_id":"a","from":0,"to":9000000000000,"mode":"hide"}"#)
                        #expect(r.status == 202, "\(r.text)")
                        let jobID = r.json?["job_id"]?.stringValue ?? ""
                        #expect(
                            try eventually(timeout: .seconds(30), every: .milliseconds(20)) {
                                try app.request(.get, "/v1/jobs/\(jobID)").json?["state"] == .string("succeeded")
                            })
                    }
                ),
                (
                    "c is kicked from the group",
                    {
                        try Self.ok(app.request(.post, "/v1/groups/\(group)/members/kick", json: #"{"user_ids":["c"]}"#))
                    }
                ),
                ("b is deleted", { try Self.ok(app.request(.delete, "/v1/users/b")) }),
            ]
            for (name, change) in changes {
                try views.warm()
                try change()
                try views.expectFresh(name)
            }
        }
    }

    /// The cached newest page answers only the read it is: a bad parameter, another form of the read or a caller
    /// not allowed gets what the database path answers, however warm the cache.
    @Test func aWarmCacheAnswersOnlyTheReadItHolds() throws {
        try withApp(settings: #"{"rate_limit_user_rps":100000}"#, unthrottled: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            for i in 0..<3 { _ = try MessageActions.send(app, "a", "b", "m\(i)") }
            let path = "/v1/users/a/conversations/peer/b/messages"
            for _ in 0..<3 { #expect(try app.request(.get, path).status == 200) }
            #expect(try app.request(.get, path + "?include_hidden=true").status == 200)
            Self.expectProblem(try app.request(.get, path + "?limit=0"), 400, .invalidParams)
            Self.expectProblem(try app.request(.get, path + "?limit=abc"), 400, .invalidParams)
            Self.expectProblem(try app.request(.get, path + "?include_hidden=maybe"), 400, .invalidParams)
            Self.expectProblem(try app.request(.get, "/v1/users/a/conversations/room/b/messages"), 400, .invalidParams)
            // Another form of the read is not the cached page: a limit of one, a forward read.
            #expect(try app.request(.get, path + "?limit=1").json?["items"]?.arrayValue?.count == 1)
            let forward = try app.request(.get, path + "?direction=forward").json?["items"]?.arrayValue ?? []
            #expect(forward.compactMap { $0["seq"]?.intValue } == [1, 2, 3])
            // A user's own token may read its view, never another's, and never include_hidden.
            let tokenA = try app.token(for: "a")
            #expect(try app.server.request(.get, path, bearer: tokenA).status == 200)
            #expect(try app.server.request(.get, "/v1/users/b/conversations/peer/a/messages", bearer: tokenA).status == 403)
            #expect(try app.server.request(.get, path + "?include_hidden=true", bearer: tokenA).status == 403)
            #expect(try app.server.request(.get, path, bearer: "not-a-token").status == 401)
        }
    }

    // MARK: - Two nodes

    /// Pages cached on one node go when another node changes the app (its notification), with an event or without
    /// one, well before they would age out, and the next read there is the database's.
    @Test func aChangeOnAnotherNodeDropsThisNodesPages() throws {
        let first = try TestServer.start()
        defer { first.stop() }
        let second = try TestServer.start(database: first.database)
        defer { second.stop() }
        let app = try first.createApp()
        let there = TestApp(server: second, appID: app.appID, key: app.key)
        for id in ["a", "b"] { try app.createUser(id) }
        let sent = try MessageActions.send(app, "a", "b", "before")
        let id = sent["message_id"]?.stringValue ?? ""
        let path = "/v1/users/b/conversations/peer/a/messages"
        for _ in 0..<3 { #expect(try there.request(.get, path).status == 200) }
        #expect(try Self.cacheFigure(second, "parley_history_cache_bytes") > 0)
        let changedAt = ContinuousClock.now
        try Self.ok(app.request(.patch, "/v1/messages/\(id)", json: #"{"operator":"a","body":{"text":"after"}}"#))
        // Dropped without a read on the second node (an aged page would only go when read).
        #expect(try eventually(timeout: .seconds(5), every: .milliseconds(5)) { try Self.cacheFigure(second, "parley_history_cache_bytes") == 0 })
        print("HistoryCacheTests: the other node dropped its pages \(ContinuousClock.now - changedAt) after the change was answered")
        let items = try there.request(.get, path).json?["items"]?.arrayValue ?? []
        #expect(items.first?["body"]?["text"] == .string("after"))
        // A change without an event (an import) on the first node: its notice drops the second node's pages too.
        for _ in 0..<2 { #expect(try there.request(.get, path).status == 200) }
        #expect(try Self.cacheFigure(second, "parley_history_cache_bytes") > 0)
        var headers = HTTPHeaders()
        headers.add("Content-Type", "application/x-ndjson")
        let line =
            #"{"conversation_type":"peer","from":"a","to":"b","type":1,"body":{"text":"imported"},"timestamp":\#(Int64(Date().timeIntervalSince1970 * 1000) - 1_000),"client_msg_id":"imp-2"}"#
        #expect(Self.codes(try app.request(.post, "/v1/messages/import", json: line + "\n", headers: headers)) == [nil])
        #expect(try eventually(timeout: .seconds(5), every: .milliseconds(5)) { try Self.cacheFigure(second, "parley_history_cache_bytes") == 0 })
        #expect(try there.request(.get, path).json?["items"]?.arrayValue?.first?["body"]?["text"] == .string("imported"))
        // A send there is seen here too.
        _ = try MessageActions.send(TestApp(server: second, appID: app.appID, key: app.key), "b", "a", "from the second node")
        for _ in 0..<2 { _ = try app.request(.get, path) }
        #expect(
            try eventually(timeout: .seconds(5), every: .milliseconds(5)) {
                try app.request(.get, path).json?["items"]?.arrayValue?.first?["body"]?["text"] == .string("from the second node")
            })
    }
}
