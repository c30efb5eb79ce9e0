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

/// The blacklist (docs/social.md#blacklists) end to end: real HTTP against a real server and database.
@Suite("Blacklist", .inProcess)
struct BlacklistTests: ProblemAssertions {
    // MARK: - Helpers

    /// The events of `type` in the app's log (optionally only those whose audience includes `user`).
    static func events(_ app: TestApp, _ type: String, audience user: String? = nil) throws -> [JSONValue] {
        try app.events(query: "types=\(type)" + (user.map { "&user_id=\($0)" } ?? ""))
    }

    static func ids(_ body: [String]) -> String {
        "{\"user_ids\":[" + body.map { "\"\($0)\"" }.joined(separator: ",") + "]}"
    }

    static func results(_ r: TestResponse) -> [JSONValue] { r.json?["results"]?.arrayValue ?? [] }

    /// The per-item error codes of a batch response (nil for successful items).
    static func codes(_ r: TestResponse) -> [Int?] {
        results(r).map { $0["ok"] == .bool(true) ? nil : $0["error"]?["code"]?.intValue.map(Int.init) }
    }

    static func userIDs(_ event: JSONValue?) -> [String] {
        event?["data"]?["user_ids"]?.arrayValue?.compactMap(\.stringValue) ?? []
    }

    static func listed(_ app: TestApp, _ owner: String, query: String = "") throws -> [String] {
        let r = try app.request(.get, "/v1/users/\(owner)/blacklist\(query)")
        #expect(r.status == 200, "\(r.text)")
        return r.json?["items"]?.arrayValue?.compactMap { $0["user_id"]?.stringValue } ?? []
    }

    // MARK: - Success paths

    @Test func addListCheckAndRemoveWithEvents() throws {
        try withApp(testClock: true) { server, app in
            for id in ["u1", "b1", "b2", "b3"] { try app.createUser(id, name: "N" + id) }

            let add = try app.request(.post, "/v1/users/u1/blacklist", json: Self.ids(["b1", "b2"]))
            #expect(add.status == 200, "\(add.text)")
            let items = Self.results(add)
            #expect(items.count == 2)
            #expect(items.map { $0["index"]?.intValue } == [0, 1])
            #expect(items.map { $0["id"]?.stringValue } == ["b1", "b2"])
            #expect(items.allSatisfy { $0["ok"] == .bool(true) })
            #expect(items[0]["data"]?["user_id"] == .string("b1"))
            let t1 = items[0]["data"]?["created_at"]?.intValue ?? 0
            #expect(t1 > 0)
            #expect(Set(items[0]["data"]?.objectValue?.keys ?? []) == ["user_id", "created_at"])

            var added = try Self.events(app, "blacklist.added")
            #expect(added.count == 1)
            #expect(added.first?["data"]?["user_id"] == .string("u1"))
            #expect(Self.userIDs(added.first) == ["b1", "b2"])
            // Audience: the owner only; the blocked users are never told.
            #expect(try Self.events(app, "blacklist.added", audience: "u1").count == 1)
            #expect(try Self.events(app, "blacklist.added", audience: "b1").isEmpty)

            try server.advanceClock(ms: 5000)
            #expect(try app.request(.post, "/v1/users/u1/blacklist", json: Self.ids(["b3"])).status == 200)
            added = try Self.events(app, "blacklist.added")
            #expect(added.count == 2)
            #expect(Self.userIDs(added.last) == ["b3"])

            // Newest first, equal times by user_id desc; public profile fields only.
            let list = try app.request(.get, "/v1/users/u1/blacklist")
            #expect(list.status == 200)
            let entries = list.json?["items"]?.arrayValue ?? []
            #expect(entries.compactMap { $0["user_id"]?.stringValue } == ["b3", "b2", "b1"])
            #expect(list.json?["next_cursor"] == .null)
            #expect(Set(entries.first?.objectValue?.keys ?? []) == ["user_id", "name", "avatar_url", "created_at"])
            #expect(entries.first?["name"] == .string("Nb3"))
            #expect(entries.first?["avatar_url"] == .string(""))
            #expect((entries.first?["created_at"]?.intValue ?? 0) >= t1 + 5000)
            #expect(entries.last?["created_at"]?.intValue == t1)

            // Check: true, false, and 404 for an unknown user.
            let yes = try app.request(.get, "/v1/users/u1/blacklist/b1")
            #expect(yes.status == 200)
            #expect(yes.json == .object(["user_id": .string("b1"), "blocked": .bool(true)]))
            let no = try app.request(.get, "/v1/users/b1/blacklist/u1")
            #expect(no.status == 200)
            #expect(no.json?["blocked"] == .bool(false))
            Self.expectProblem(try app.request(.get, "/v1/users/u1/blacklist/ghost"), 404, .userNotFound)
            Self.expectProblem(try app.request(.get, "/v1/users/ghost/blacklist/b1"), 404, .userNotFound)

            // Batch remove: one event listing only what was removed.
            let remove = try app.request(.post, "/v1/users/u1/blacklist/delete", json: Self.ids(["b1", "b9", "b1"]))
            #expect(remove.status == 200, "\(remove.text)")
            #expect(Self.codes(remove) == [nil, ErrorCode.notInBlacklist.code, ErrorCode.invalidParams.code])
            #expect(Self.results(remove).first?["data"] == nil)
            var removed = try Self.events(app, "blacklist.removed", audience: "u1")
            #expect(removed.count == 1)
            #expect(removed.first?["data"]?["user_id"] == .string("u1"))
            #expect(Self.userIDs(removed.first) == ["b1"])
            #expect(try app.request(.get, "/v1/users/u1/blacklist/b1").json?["blocked"] == .bool(false))

            // Nothing removed: no event.
            #expect(Self.codes(try app.request(.post, "/v1/users/u1/blacklist/delete", json: Self.ids(["b1"]))) == [ErrorCode.notInBlacklist.code])
            #expect(try Self.events(app, "blacklist.removed").count == 1)

            // Single delete: 204 and its event; then 404.
            let delete = try app.request(.delete, "/v1/users/u1/blacklist/b2")
            #expect(delete.status == 204)
            #expect(delete.body.isEmpty)
            removed = try Self.events(app, "blacklist.removed")
            #expect(removed.count == 2)
            #expect(Self.userIDs(removed.last) == ["b2"])
            #expect(removed.last?["data"]?["user_id"] == .string("u1"))
            Self.expectProblem(try app.request(.delete, "/v1/users/u1/blacklist/b2"), 404, .notInBlacklist)
            #expect(try Self.events(app, "blacklist.removed").count == 2)
            #expect(try Self.listed(app, "u1") == ["b3"])
        }
    }

    // MARK: - Errors

    @Test func addReportsPerItemErrors() throws {
        try withApp(testClock: true) { server, app in
            for id in ["u1", "b1", "b2", "gone"] { try app.createUser(id) }
            #expect(try app.request(.delete, "/v1/users/gone").status == 204)

            let r = try app.request(.post, "/v1/users/u1/blacklist", json: #"{"user_ids":["u1","b1","b1","ghost","gone","a b",7,"b2"]}"#)
            #expect(r.status == 200, "\(r.text)")
            #expect(
                Self.codes(r) == [
                    ErrorCode.cannotBlacklistSelf.code, nil, ErrorCode.invalidParams.code, ErrorCode.userNotFound.code, ErrorCode.userNotFound.code,
                    ErrorCode.invalidParams.code, ErrorCode.invalidParams.code, nil,
                ])
            #expect(Self.results(r).map { $0["id"]?.stringValue } == ["u1", "b1", "b1", "ghost", "gone", "a b", "", "b2"])
            #expect(Self.results(r).map { $0["index"]?.intValue } == (0..<8).map { Int64($0) })
            let added = try Self.events(app, "blacklist.added")
            #expect(added.count == 1)
            #expect(Self.userIDs(added.first) == ["b1", "b2"])

            // Already on the list: per item 6000804, and no event when nothing was added.
            let again = try app.request(.post, "/v1/users/u1/blacklist", json: Self.ids(["b1", "b2"]))
            #expect(Self.codes(again) == [ErrorCode.alreadyBlacklisted.code, ErrorCode.alreadyBlacklisted.code])
            #expect(Self.results(again).first?["error"]?["message"]?.stringValue?.isEmpty == false)
            #expect(try Self.events(app, "blacklist.added").count == 1)

            // Request-level problems.
            let tooMany = Self.ids((0..<101).map { "x\($0)" })
            Self.expectInvalid(try app.request(.post, "/v1/users/u1/blacklist", json: tooMany), field: "body.user_ids")
            Self.expectInvalid(try app.request(.post, "/v1/users/u1/blacklist/delete", json: tooMany), field: "body.user_ids")
            Self.expectInvalid(try app.request(.post, "/v1/users/u1/blacklist", json: #"{"user_ids":[]}"#), field: "body.user_ids")
            Self.expectInvalid(try app.request(.post, "/v1/users/u1/blacklist", json: #"{}"#), field: "body.user_ids")
            Self.expectInvalid(try app.request(.post, "/v1/users/u1/blacklist", json: #"{"user_ids":"b1"}"#), field: "body.user_ids")
            Self.expectProblem(try app.request(.get, "/v1/users/u1/blacklist?limit=0"), 400, .invalidParams)
            Self.expectProblem(try app.request(.get, "/v1/users/u1/blacklist?limit=101"), 400, .invalidParams)

            // The owner must exist and not be soft-deleted.
            for path in ["/v1/users/ghost/blacklist", "/v1/users/gone/blacklist"] {
                Self.expectProblem(try app.request(.post, path, json: Self.ids(["b1"])), 404, .userNotFound, path)
                Self.expectProblem(try app.request(.post, path + "/delete", json: Self.ids(["b1"])), 404, .userNotFound, path)
                Self.expectProblem(try app.request(.delete, path + "/b1"), 404, .userNotFound, path)
                Self.expectProblem(try app.request(.get, path), 404, .userNotFound, path)
                Self.expectProblem(try app.request(.get, path + "/b1"), 404, .userNotFound, path)
            }
            #expect(try Self.events(app, "blacklist.added").count == 1)
            #expect(try Self.events(app, "blacklist.removed").isEmpty)
        }
    }

    @Test func userTokenActsOnlyOnItsOwnList() throws {
        try withApp(testClock: true) { server, app in
            for id in ["u1", "u2", "b1"] { try app.createUser(id) }
            let token = try app.token(for: "u1")

            let cases: [(HTTPMethod, String, String?)] = [
                (.post, "/v1/users/u2/blacklist", Self.ids(["b1"])),
                (.post, "/v1/users/u2/blacklist/delete", Self.ids(["b1"])),
                (.delete, "/v1/users/u2/blacklist/b1", nil),
                (.get, "/v1/users/u2/blacklist", nil),
                (.get, "/v1/users/u2/blacklist/b1", nil),
            ]
            for (method, path, body) in cases {
                Self.expectProblem(try server.request(method, path, bearer: token, json: body), 403, .forbidden, "\(method) \(path)")
            }
            #expect(try Self.listed(app, "u2").isEmpty)

            // Its own list works with the token.
            let add = try server.request(.post, "/v1/users/u1/blacklist", bearer: token, json: Self.ids(["b1"]))
            #expect(Self.codes(add) == [nil])
            let list = try server.request(.get, "/v1/users/u1/blacklist", bearer: token)
            #expect(list.json?["items"]?.arrayValue?.first?["user_id"] == .string("b1"))
            #expect(try server.request(.get, "/v1/users/u1/blacklist/b1", bearer: token).json?["blocked"] == .bool(true))
            #expect(try server.request(.delete, "/v1/users/u1/blacklist/b1", bearer: token).status == 204)
            let remove = try server.request(.post, "/v1/users/u1/blacklist/delete", bearer: token, json: Self.ids(["b1"]))
            #expect(Self.codes(remove) == [ErrorCode.notInBlacklist.code])
        }
    }

    // MARK: - Limit

    @Test func limitOf1000CountsExistingAndAddedInOrder() throws {
        try withApp(testClock: true) { server, app in
            for id in ["u1", "c1", "c2", "c3"] { try app.createUser(id) }
            try server.sql(
                """
                INSERT INTO users (app_id, user_id, created_at, updated_at) SELECT $1, 'x' || g, 1, 1 FROM generate_series(1, 999) g;
                """, [app.appID])
            try server.sql(
                "INSERT INTO blacklist (app_id, user_id, blocked_id, created_at) SELECT $1, 'u1', 'x' || g, g FROM generate_series(1, 999) g",
                [app.appID])

            let r = try app.request(.post, "/v1/users/u1/blacklist", json: Self.ids(["x5", "c1", "c2", "u1", "c3"]))
            #expect(r.status == 200)
            #expect(
                Self.codes(r) == [
                    ErrorCode.alreadyBlacklisted.code, nil, ErrorCode.blacklistLimit.code, ErrorCode.cannotBlacklistSelf.code,
                    ErrorCode.blacklistLimit.code,
                ])
            let added = try Self.events(app, "blacklist.added")
            #expect(added.count == 1)
            #expect(Self.userIDs(added.first) == ["c1"])
            #expect(try server.count("SELECT count(*) FROM blacklist WHERE app_id = $1 AND user_id = 'u1'", [app.appID]) == 1000)

            // Full: nothing added, no event; after a removal there is room for one.
            #expect(Self.codes(try app.request(.post, "/v1/users/u1/blacklist", json: Self.ids(["c2"]))) == [ErrorCode.blacklistLimit.code])
            #expect(try Self.events(app, "blacklist.added").count == 1)
            #expect(try app.request(.delete, "/v1/users/u1/blacklist/x1").status == 204)
            #expect(
                Self.codes(try app.request(.post, "/v1/users/u1/blacklist", json: Self.ids(["c2", "c3"]))) == [nil, ErrorCode.blacklistLimit.code])
        }
    }

    @Test func concurrentAddsNeverPassTheLimit() throws {
        try withApp(testClock: true, poolSize: 4) { server, app in
            try app.createUser("u1")
            try server.sql(
                "INSERT INTO users (app_id, user_id, created_at, updated_at) SELECT $1, 'x' || g, 1, 1 FROM generate_series(1, 1010) g",
                [app.appID])
            try server.sql(
                "INSERT INTO blacklist (app_id, user_id, blocked_id, created_at) SELECT $1, 'u1', 'x' || g, g FROM generate_series(1, 995) g",
                [app.appID])
            let okCount = Atomic<Int>(0)
            DispatchQueue.concurrentPerform(iterations: 3) { i in
                let ids = (0..<5).map { "x\(996 + i * 5 + $0)" }
                let r = try? app.request(.post, "/v1/users/u1/blacklist", json: Self.ids(ids))
                okCount.add(Self.codes(r ?? TestResponse(status: 0, headers: HTTPHeaders(), body: [])).filter { $0 == nil }.count, ordering: .relaxed)
            }
            #expect(okCount.load(ordering: .relaxed) == 5)
            #expect(try server.count("SELECT count(*) FROM blacklist WHERE app_id = $1 AND user_id = 'u1'", [app.appID]) == 1000)
        }
    }

    // MARK: - List

    @Test func cursorWalkVisitsEachEntryOnce() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("u1")
            try app.createUser("u2")
            try server.sql(
                "INSERT INTO users (app_id, user_id, name, created_at, updated_at) SELECT $1, 'y' || (100 + g), 'n' || g, 1, 1 FROM generate_series(1, 23) g",
                [app.appID])
            // Times with ties: entry g at (g / 4) * 10, so groups of equal created_at ordered by id.
            try server.sql(
                "INSERT INTO blacklist (app_id, user_id, blocked_id, created_at) SELECT $1, 'u1', 'y' || (100 + g), (g / 4) * 10 FROM generate_series(1, 23) g",
                [app.appID])
            var pairs: [(id: String, t: Int)] = []
            for g in 1...23 { pairs.append((id: "y\(100 + g)", t: (g / 4) * 10)) }
            pairs.sort { a, b in a.t != b.t ? a.t > b.t : a.id > b.id }
            let expected: [String] = pairs.map { $0.id }

            var seen: [String] = []
            var cursor: String?
            var pages = 0
            repeat {
                let q = "?limit=5" + (cursor.map { "&cursor=\($0)" } ?? "")
                let r = try app.request(.get, "/v1/users/u1/blacklist\(q)")
                #expect(r.status == 200, "\(r.text)")
                let items = r.json?["items"]?.arrayValue ?? []
                #expect(items.count <= 5)
                seen += items.compactMap { $0["user_id"]?.stringValue }
                cursor = r.json?["next_cursor"]?.stringValue
                pages += 1
            } while cursor != nil && pages < 20
            #expect(seen == expected)
            #expect(pages == 5)
            #expect(try Self.listed(app, "u1", query: "?limit=100") == expected)

            // Tampered, malformed, or from another owner's list → 400 7000007.
            let first = try app.request(.get, "/v1/users/u1/blacklist?limit=5").json?["next_cursor"]?.stringValue ?? ""
            #expect(!first.isEmpty)
            var tampered = Array(first)
            tampered[3] = tampered[3] == "A" ? "B" : "A"
            Self.expectProblem(try app.request(.get, "/v1/users/u1/blacklist?cursor=\(String(tampered))"), 400, .invalidCursor)
            Self.expectProblem(try app.request(.get, "/v1/users/u1/blacklist?cursor=nonsense"), 400, .invalidCursor)
            Self.expectProblem(try app.request(.get, "/v1/users/u2/blacklist?cursor=\(first)"), 400, .invalidCursor)
            #expect(try app.request(.get, "/v1/users/u1/blacklist?cursor=\(first)").status == 200)
        }
    }

    // MARK: - Deletion of users

    @Test func hardDeletingAUserRemovesItsEntriesInBothDirections() throws {
        try withApp(testClock: true) { server, app in
            for id in ["u1", "u2", "b1", "b2"] { try app.createUser(id) }
            #expect(Self.codes(try app.request(.post, "/v1/users/u1/blacklist", json: Self.ids(["b1", "b2"]))) == [nil, nil])
            #expect(Self.codes(try app.request(.post, "/v1/users/b1/blacklist", json: Self.ids(["u1", "u2"]))) == [nil, nil])
            #expect(Self.codes(try app.request(.post, "/v1/users/u2/blacklist", json: Self.ids(["b1"]))) == [nil])

            // Soft delete hides the blocked user from the list but keeps the entry.
            #expect(try app.request(.delete, "/v1/users/b2").status == 204)
            #expect(try Self.listed(app, "u1") == ["b1"])
            #expect(try server.count("SELECT count(*) FROM blacklist WHERE app_id = $1 AND blocked_id = 'b2'", [app.appID]) == 1)

            #expect(try app.request(.delete, "/v1/users/b1?mode=hard").status == 204)
            #expect(try Self.listed(app, "u1").isEmpty)
            #expect(try Self.listed(app, "u2").isEmpty)
            #expect(
                try server.count("SELECT count(*) FROM blacklist WHERE app_id = $1 AND (user_id = 'b1' OR blocked_id = 'b1')", [app.appID]) == 0)

            // Created again, the id starts with a clean slate on both sides.
            try app.createUser("b1")
            #expect(try app.request(.get, "/v1/users/u1/blacklist/b1").json?["blocked"] == .bool(false))
            #expect(try Self.listed(app, "b1").isEmpty)
        }
    }
}
