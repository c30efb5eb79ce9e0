import Dispatch
import ParleyHTTP
import ParleyTesting
import Synchronization
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Users (docs/users.md) end to end: real HTTP against a real server and database.
@Suite("Users", .inProcess)
struct UsersTests {
    // MARK: - Helpers

    /// The events of `type` in the app's log (optionally only those whose audience includes `user`).
    static func events(_ app: TestApp, _ type: String, audience user: String? = nil) throws -> [JSONValue] {
        try app.events(query: "types=\(type)" + (user.map { "&user_id=\($0)" } ?? ""))
    }

    /// The field names listed in a 400 problem's `errors[]`.
    static func errorFields(_ r: TestResponse) -> [String] {
        r.json?["errors"]?.arrayValue?.compactMap { $0["field"]?.stringValue } ?? []
    }

    static func keys(_ value: JSONValue?) -> Set<String> { Set(value?.objectValue?.keys ?? []) }

    static func advance(_ server: TestServer, seconds: Int) throws {
        let r = try server.request(.post, "/v1/test/clock/advance", bearer: server.adminKey, json: "{\"ms\":\(seconds * 1000)}")
        #expect(r.status == 200, "clock advance: \(r.text)")
    }

    static func now(_ server: TestServer) throws -> Int64 {
        try server.request(.get, "/v1/test/clock", bearer: server.adminKey).json?["now"]?.intValue ?? 0
    }

    /// `count` users `prefix0000`… imported in batches of 100.
    static func importUsers(_ app: TestApp, prefix: String, count: Int, name: (Int) -> String = { "n\($0)" }) throws -> [String] {
        var ids: [String] = []
        for start in stride(from: 0, to: count, by: 100) {
            let batch = (start..<min(count, start + 100)).map { i in (prefix + String(1000 + i), name(i)) }
            let json = batch.map { "{\"user_id\":\"\($0.0)\",\"name\":\"\($0.1)\"}" }.joined(separator: ",")
            let r = try app.request(.post, "/v1/users/import", json: "{\"users\":[\(json)]}")
            #expect(r.status == 200)
            #expect(r.json?["results"]?.arrayValue?.allSatisfy { $0["ok"] == .bool(true) } == true)
            ids += batch.map(\.0)
        }
        return ids
    }

    static let user = Set(["user_id", "name", "avatar_url", "extended_data", "created_at", "updated_at", "muted_until", "banned_until"])

    // MARK: - Create

    @Test func createUserReturnsUserAndWritesEvent() throws {
        try withApp(testClock: true) { server, app in
            let now = try Self.now(server)
            let r = try app.request(.post, "/v1/users", json: #"{"user_id":"u1","name":"Alice","extended_data":"x"}"#)
            #expect(r.status == 201)
            let u = r.json
            #expect(Self.keys(u) == Self.user.union(["deleted_at"]))
            #expect(u?["user_id"] == .string("u1"))
            #expect(u?["name"] == .string("Alice"))
            #expect(u?["avatar_url"] == .string(""))
            #expect(u?["extended_data"] == .string("x"))
            #expect(u?["muted_until"] == .int(0))
            #expect(u?["banned_until"] == .int(0))
            #expect(u?["deleted_at"] == .null)
            let createdAt = u?["created_at"]?.intValue ?? 0
            #expect(createdAt >= now && createdAt < now + 60_000)
            #expect(u?["updated_at"]?.intValue == createdAt)

            let events = try Self.events(app, "user.created")
            #expect(events.count == 1)
            #expect(events.first?["data"]?["user"]?["user_id"] == .string("u1"))
            #expect(events.first?["data"]?["user"]?["name"] == .string("Alice"))
            // No audience: the user's own stream does not get it.
            #expect(try Self.events(app, "user.created", audience: "u1").isEmpty)

            // Defaults, and an id with reserved URL characters read back through a percent-encoded path.
            #expect(try app.request(.post, "/v1/users", json: #"{"user_id":"a#b%c:d@e"}"#).status == 201)
            let odd = try app.request(.get, "/v1/users/a%23b%25c%3Ad%40e")
            #expect(odd.status == 200)
            #expect(odd.json?["user_id"] == .string("a#b%c:d@e"))
            #expect(odd.json?["name"] == .string(""))
        }
    }

    @Test func createUserRejectsDuplicatesAndBadInput() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("u1")
            let dup = try app.request(.post, "/v1/users", json: #"{"user_id":"u1"}"#)
            #expect(dup.status == 409)
            #expect(dup.code == ErrorCode.userAlreadyExists.code)

            // A soft-deleted id is still taken.
            try app.createUser("gone")
            #expect(try app.request(.delete, "/v1/users/gone").status == 204)
            #expect(try app.request(.post, "/v1/users", json: #"{"user_id":"gone"}"#).code == ErrorCode.userAlreadyExists.code)

            let long = String(repeating: "a", count: 33)
            let cases: [(String, String)] = [
                (#"{}"#, "body.user_id"),
                (#"{"user_id":""}"#, "body.user_id"),
                ("{\"user_id\":\"\(long)\"}", "body.user_id"),
                (#"{"user_id":"a b"}"#, "body.user_id"),
                (#"{"user_id":"a/b"}"#, "body.user_id"),
                (#"{"user_id":"é"}"#, "body.user_id"),
                (#"{"user_id":5}"#, "body.user_id"),
                ("{\"user_id\":\"u2\",\"name\":\"\(String(repeating: "n", count: 257))\"}", "body.name"),
                ("{\"user_id\":\"u2\",\"name\":\"\(String(repeating: "é", count: 129))\"}", "body.name"),
                ("{\"user_id\":\"u2\",\"avatar_url\":\"\(String(repeating: "a", count: 501))\"}", "body.avatar_url"),
                ("{\"user_id\":\"u2\",\"extended_data\":\"\(String(repeating: "a", count: 4097))\"}", "body.extended_data"),
                (#"{"user_id":"u2","name":1}"#, "body.name"),
                (#"{"user_id":"u2","name":null}"#, "body.name"),
            ]
            for (body, field) in cases {
                let r = try app.request(.post, "/v1/users", json: body)
                #expect(r.status == 400, "\(body)")
                #expect(r.code == ErrorCode.invalidParams.code, "\(body)")
                #expect(Self.errorFields(r).contains(field), "\(body): \(r.text)")
            }
            let many = try app.request(.post, "/v1/users", json: #"{"user_id":"","name":7}"#)
            #expect(Set(Self.errorFields(many)) == ["body.user_id", "body.name"])
            #expect(try app.request(.post, "/v1/users", json: "[1]").code == ErrorCode.invalidParams.code)
            #expect(try app.request(.post, "/v1/users", json: "{").code == ErrorCode.invalidParams.code)

            // Exactly at the limits is fine (and 32 bytes of id).
            let atLimit =
                "{\"user_id\":\"\(String(repeating: "b", count: 32))\",\"name\":\"\(String(repeating: "n", count: 256))\","
                + "\"avatar_url\":\"\(String(repeating: "a", count: 500))\",\"extended_data\":\"\(String(repeating: "e", count: 4096))\"}"
            #expect(try app.request(.post, "/v1/users", json: atLimit).status == 201)

            // Only the failed requests wrote nothing: two creates so far, plus the one above.
            #expect(try Self.events(app, "user.created").count == 3)

            // A user token may not create users.
            let token = try app.token(for: "u1")
            let forbidden = try server.request(.post, "/v1/users", bearer: token, json: #"{"user_id":"u9"}"#)
            #expect(forbidden.status == 403)
            #expect(forbidden.code == ErrorCode.forbidden.code)
        }
    }

    @Test func concurrentCreatesOfOneIDYieldOneUser() throws {
        try withApp(testClock: true) { server, app in
            let statuses = Mutex<[Int]>([])
            DispatchQueue.concurrentPerform(iterations: 8) { i in
                let status = (try? app.request(.post, "/v1/users", json: "{\"user_id\":\"same\",\"name\":\"n\(i)\"}").status) ?? 0
                statuses.withLock { $0.append(status) }
            }
            let all = statuses.withLock { $0 }
            #expect(all.filter { $0 == 201 }.count == 1)
            #expect(all.filter { $0 == 409 }.count == 7)
            let created = try Self.events(app, "user.created")
            #expect(created.count == 1)
        }
    }

    // MARK: - Read

    @Test func getUserViewsAndTenancy() throws {
        try withApp(testClock: true) { server, app in
            let other = try server.createApp()
            try app.createUser("u1", name: "One")
            try app.createUser("u2", name: "Two")

            let full = try app.request(.get, "/v1/users/u1")
            #expect(full.status == 200)
            #expect(Self.keys(full.json) == Self.user.union(["deleted_at"]))
            // The admin key acting as the app sees the same.
            let admin = try server.request(.get, "/v1/users/u1", bearer: server.adminKey, headers: ["Parley-App-Id": app.appID])
            #expect(admin.status == 200)
            #expect(admin.body == full.body)

            // Another app's key does not see this app's users.
            let foreign = try other.request(.get, "/v1/users/u1")
            #expect(foreign.status == 404)
            #expect(foreign.code == ErrorCode.userNotFound.code)

            let missing = try app.request(.get, "/v1/users/nobody")
            #expect(missing.status == 404)
            #expect(missing.code == ErrorCode.userNotFound.code)
            let bad = try app.request(.get, "/v1/users/" + String(repeating: "a", count: 33))
            #expect(bad.status == 400)
            #expect(Self.errorFields(bad) == ["user_id"])
            #expect(try app.request(.get, "/v1/users/u1?include_deleted=yes").code == ErrorCode.invalidParams.code)

            let token = try app.token(for: "u1")
            let me = try server.request(.get, "/v1/users/u1", bearer: token)
            #expect(me.status == 200)
            #expect(Self.keys(me.json) == Self.user)
            let them = try server.request(.get, "/v1/users/u2", bearer: token)
            #expect(them.status == 200)
            #expect(Self.keys(them.json) == ["user_id", "name", "avatar_url", "extended_data", "created_at"])
            #expect(them.json?["name"] == .string("Two"))
            let noDeleted = try server.request(.get, "/v1/users/u2?include_deleted=true", bearer: token)
            #expect(noDeleted.status == 403)
            #expect(noDeleted.code == ErrorCode.forbidden.code)

            // Soft-deleted users are hidden unless the app asks for them.
            #expect(try app.request(.delete, "/v1/users/u2").status == 204)
            #expect(try app.request(.get, "/v1/users/u2").code == ErrorCode.userNotFound.code)
            #expect(try server.request(.get, "/v1/users/u2", bearer: token).code == ErrorCode.userNotFound.code)
            let shown = try app.request(.get, "/v1/users/u2?include_deleted=true")
            #expect(shown.status == 200)
            #expect(shown.json?["deleted_at"]?.intValue != nil)
        }
    }

    @Test func queryUsersBatch() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("u1", name: "One")
            try app.createUser("u2", name: "Two")
            try app.createUser("u3")
            #expect(try app.request(.delete, "/v1/users/u3").status == 204)

            let r = try app.request(.post, "/v1/users/query", json: #"{"user_ids":["u2","nobody","u1","u3","u2","bad id",7]}"#)
            #expect(r.status == 200)
            let results = r.json?["results"]?.arrayValue ?? []
            #expect(results.count == 7)
            #expect(results.map { $0["index"]?.intValue } == [0, 1, 2, 3, 4, 5, 6])
            #expect(results.map { $0["ok"]?.boolValue } == [true, false, true, false, false, false, false])
            #expect(results.map { $0["id"]?.stringValue } == ["u2", "nobody", "u1", "u3", "u2", "bad id", ""])
            #expect(
                results.map { $0["error"]?["code"]?.intValue.map(Int.init) } == [
                    nil, ErrorCode.userNotFound.code, nil, ErrorCode.userNotFound.code, ErrorCode.invalidParams.code, ErrorCode.invalidParams.code,
                    ErrorCode.invalidParams.code,
                ])
            #expect(results[0]["data"]?["name"] == .string("Two"))
            #expect(Self.keys(results[0]["data"]) == Self.user.union(["deleted_at"]))

            // A user token reads itself in full and others reduced.
            let token = try app.token(for: "u1")
            let asUser = try server.request(.post, "/v1/users/query", bearer: token, json: #"{"user_ids":["u1","u2"]}"#)
            let items = asUser.json?["results"]?.arrayValue ?? []
            #expect(Self.keys(items.first?["data"]) == Self.user)
            #expect(Self.keys(items.last?["data"]) == ["user_id", "name", "avatar_url", "extended_data", "created_at"])

            let tooMany = (0...100).map { "\"u\($0)\"" }.joined(separator: ",")
            #expect(try app.request(.post, "/v1/users/query", json: "{\"user_ids\":[\(tooMany)]}").code == ErrorCode.invalidParams.code)
            #expect(try app.request(.post, "/v1/users/query", json: #"{"user_ids":[]}"#).code == ErrorCode.invalidParams.code)
            #expect(try app.request(.post, "/v1/users/query", json: #"{"user_ids":"u1"}"#).code == ErrorCode.invalidParams.code)
        }
    }

    // MARK: - Import

    @Test func importHundredWithThreeBadItems() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("taken")
            var items = (0..<100).map { "{\"user_id\":\"imp\($0)\",\"name\":\"N\($0)\"}" }
            items[10] = "{\"user_id\":\"\(String(repeating: "x", count: 33))\"}"
            items[50] = #"{"user_id":"taken"}"#
            items[99] = #"{"user_id":"imp3","name":"again"}"#
            let r = try app.request(.post, "/v1/users/import", json: "{\"users\":[\(items.joined(separator: ","))]}")
            #expect(r.status == 200)
            let results = r.json?["results"]?.arrayValue ?? []
            #expect(results.count == 100)
            #expect(results.enumerated().allSatisfy { $0.element["index"]?.intValue == Int64($0.offset) })
            let failed = results.filter { $0["ok"] == .bool(false) }
            #expect(failed.map { $0["index"]?.intValue } == [10, 50, 99])
            #expect(
                failed.map { $0["error"]?["code"]?.intValue.map(Int.init) } == [
                    ErrorCode.invalidParams.code, ErrorCode.userAlreadyExists.code, ErrorCode.invalidParams.code,
                ])
            #expect(results.filter { $0["ok"] == .bool(true) }.count == 97)
            #expect(results[3]["data"]?["name"] == .string("N3"))
            #expect(results[50]["id"] == .string("taken"))

            // 97 created events after the one for "taken", in input order.
            let created = try Self.events(app, "user.created")
            #expect(created.count == 98)
            #expect(created.dropFirst().first?["data"]?["user"]?["user_id"] == .string("imp0"))
            #expect(created.last?["data"]?["user"]?["user_id"] == .string("imp98"))
            #expect(try app.request(.get, "/v1/users/imp3").json?["name"] == .string("N3"))

            // Request-level problems.
            let tooMany = (0...100).map { "{\"user_id\":\"z\($0)\"}" }.joined(separator: ",")
            #expect(try app.request(.post, "/v1/users/import", json: "{\"users\":[\(tooMany)]}").code == ErrorCode.invalidParams.code)
            #expect(try app.request(.post, "/v1/users/import", json: #"{"users":[]}"#).code == ErrorCode.invalidParams.code)
            #expect(
                try app.request(.post, "/v1/users/import", json: #"{"users":[{"user_id":"a"}],"upsert":"yes"}"#).code == ErrorCode.invalidParams.code)
        }
    }

    @Test func importUpsertUpdatesAndReportsChanges() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("u1", name: "Old")
            try app.createUser("u2", name: "Same")
            let r = try app.request(
                .post, "/v1/users/import",
                json: #"{"upsert":true,"users":[{"user_id":"u1","name":"New","avatar_url":"http://a"},{"user_id":"u2","name":"Same"},"#
                    + #"{"user_id":"u3","name":"Three"},{"user_id":"u4","name":5},"x"]}"#)
            #expect(r.status == 200)
            let results = r.json?["results"]?.arrayValue ?? []
            #expect(results.map { $0["ok"]?.boolValue } == [true, true, true, false, false])
            #expect(results[0]["data"]?["name"] == .string("New"))
            #expect(results[0]["data"]?["avatar_url"] == .string("http://a"))
            #expect(results[1]["data"]?["name"] == .string("Same"))
            #expect(results[2]["data"]?["name"] == .string("Three"))
            #expect(results[3]["error"]?["code"] == .int(Int64(ErrorCode.invalidParams.code)))
            #expect(results[4]["id"] == .string(""))

            // One update event (u2 did not change), addressed to u1; one created event for u3.
            let updated = try Self.events(app, "user.updated", audience: "u1")
            #expect(updated.count == 1)
            #expect(Set(updated.first?["data"]?["changed"]?.arrayValue?.compactMap(\.stringValue) ?? []) == ["name", "avatar_url"])
            #expect(try Self.events(app, "user.updated").count == 1)
            #expect(try Self.events(app, "user.created").count == 3)

            // Without upsert an existing id fails per item and changes nothing.
            let again = try app.request(.post, "/v1/users/import", json: #"{"users":[{"user_id":"u1","name":"Nope"}]}"#)
            #expect(again.json?["results"]?[0]?["error"]?["code"] == .int(Int64(ErrorCode.userAlreadyExists.code)))
            #expect(try app.request(.get, "/v1/users/u1").json?["name"] == .string("New"))
        }
    }

    // MARK: - Update

    @Test func patchUser() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("u1", name: "One")
            try app.createUser("u2")
            try Self.advance(server, seconds: 5)

            let r = try app.request(.patch, "/v1/users/u1", json: #"{"name":"Uno","extended_data":"e"}"#)
            #expect(r.status == 200)
            #expect(r.json?["name"] == .string("Uno"))
            #expect(r.json?["extended_data"] == .string("e"))
            #expect((r.json?["updated_at"]?.intValue ?? 0) > (r.json?["created_at"]?.intValue ?? 0))
            var events = try Self.events(app, "user.updated", audience: "u1")
            #expect(events.count == 1)
            #expect(Set(events.last?["data"]?["changed"]?.arrayValue?.compactMap(\.stringValue) ?? []) == ["name", "extended_data"])
            #expect(events.last?["data"]?["user"]?["name"] == .string("Uno"))

            // Nothing changes: no event. "" clears a field.
            #expect(try app.request(.patch, "/v1/users/u1", json: #"{"name":"Uno"}"#).status == 200)
            #expect(try app.request(.patch, "/v1/users/u1", json: "").status == 200)
            #expect(try Self.events(app, "user.updated").count == 1)
            let cleared = try app.request(.patch, "/v1/users/u1", json: #"{"extended_data":""}"#)
            #expect(cleared.json?["extended_data"] == .string(""))
            events = try Self.events(app, "user.updated")
            #expect(events.count == 2)
            #expect(events.last?["data"]?["changed"] == .array([.string("extended_data")]))

            // A user token patches itself only.
            let token = try app.token(for: "u1")
            let mine = try server.request(.patch, "/v1/users/u1", bearer: token, json: #"{"avatar_url":"https://x/y.png"}"#)
            #expect(mine.status == 200)
            #expect(Self.keys(mine.json) == Self.user)
            let theirs = try server.request(.patch, "/v1/users/u2", bearer: token, json: #"{"name":"hacked"}"#)
            #expect(theirs.status == 403)
            #expect(theirs.code == ErrorCode.forbidden.code)
            #expect(try app.request(.get, "/v1/users/u2").json?["name"] == .string(""))

            let tooLong = try app.request(.patch, "/v1/users/u1", json: "{\"name\":\"\(String(repeating: "n", count: 257))\"}")
            #expect(tooLong.status == 400)
            #expect(Self.errorFields(tooLong) == ["body.name"])
            #expect(try app.request(.patch, "/v1/users/u1", json: #"{"avatar_url":false}"#).code == ErrorCode.invalidParams.code)
            #expect(try app.request(.patch, "/v1/users/nobody", json: #"{"name":"a"}"#).code == ErrorCode.userNotFound.code)
            #expect(try app.request(.patch, "/v1/users/" + String(repeating: "a", count: 33), json: "{}").code == ErrorCode.invalidParams.code)
        }
    }

    // MARK: - Delete and restore

    @Test func softDeleteRestoreAndHardDelete() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("u1", name: "One")
            let token = try app.token(for: "u1")
            #expect(try server.request(.get, "/v1/users/u1", bearer: token).status == 200)

            #expect(try app.request(.delete, "/v1/users/u1").status == 204)
            let dead = try server.request(.get, "/v1/users/u1", bearer: token)
            #expect(dead.status == 401)
            #expect(dead.code == ErrorCode.tokenInvalid.code)
            #expect(try app.request(.delete, "/v1/users/u1").code == ErrorCode.userNotFound.code)
            #expect(try app.request(.post, "/v1/users/u1/tokens", json: "{}").code == ErrorCode.userNotFound.code)
            #expect(try app.request(.patch, "/v1/users/u1", json: #"{"name":"x"}"#).code == ErrorCode.userNotFound.code)
            var deleted = try Self.events(app, "user.deleted")
            #expect(deleted.count == 1)
            #expect(deleted.first?["data"] == .object(["user_id": .string("u1"), "mode": .string("soft")]))

            // Restore brings the user (and its profile) back; tokens minted before the deletion stay revoked.
            let restored = try app.request(.post, "/v1/users/u1/restore")
            #expect(restored.status == 200)
            #expect(restored.json?["deleted_at"] == .null)
            #expect(restored.json?["name"] == .string("One"))
            let updated = try Self.events(app, "user.updated", audience: "u1")
            #expect(updated.count == 1)
            #expect(updated.first?["data"]?["changed"] == .array([.string("deleted_at")]))
            #expect(try app.request(.post, "/v1/users/u1/restore").code == ErrorCode.userNotFound.code)
            #expect(try app.request(.post, "/v1/users/nobody/restore").code == ErrorCode.userNotFound.code)
            #expect(try server.request(.get, "/v1/users/u1", bearer: token).code == ErrorCode.tokenInvalid.code)
            let fresh = try app.token(for: "u1")
            #expect(try server.request(.get, "/v1/users/u1", bearer: fresh).status == 200)

            // Hard delete removes the row; the id can be created again, and old tokens never work for the new user.
            #expect(try app.request(.delete, "/v1/users/u1?mode=hard").status == 204)
            #expect(try app.request(.get, "/v1/users/u1?include_deleted=true").code == ErrorCode.userNotFound.code)
            deleted = try Self.events(app, "user.deleted")
            #expect(deleted.last?["data"] == .object(["user_id": .string("u1"), "mode": .string("hard")]))
            try app.createUser("u1")
            #expect(try app.request(.get, "/v1/users/u1").json?["name"] == .string(""))
            #expect(try server.request(.get, "/v1/users/u1", bearer: fresh).code == ErrorCode.tokenInvalid.code)

            // Hard delete also purges a soft-deleted user.
            #expect(try app.request(.delete, "/v1/users/u1?mode=soft").status == 204)
            #expect(try app.request(.delete, "/v1/users/u1?mode=hard").status == 204)
            #expect(try app.request(.delete, "/v1/users/u1?mode=hard").code == ErrorCode.userNotFound.code)
            #expect(try app.request(.delete, "/v1/users/u1?mode=gone").code == ErrorCode.invalidParams.code)
            #expect(try app.request(.delete, "/v1/users/nobody").code == ErrorCode.userNotFound.code)
        }
    }

    // MARK: - Tokens

    @Test func tokensClaimsTTLAndExpiry() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("u1")
            let now = try Self.now(server)

            let r = try app.request(.post, "/v1/users/u1/tokens", json: #"{"ttl_s":60}"#)
            #expect(r.status == 201)
            #expect(r.json?["user_id"] == .string("u1"))
            let expiresAt = r.json?["expires_at"]?.intValue ?? 0
            #expect(expiresAt > now + 58_000 && expiresAt <= now + 61_000)
            let token = r.json?["token"]?.stringValue ?? ""
            let claims = UserToken.decodeUnverified(token)?.claims
            #expect(claims?["iss"] == .string(app.appID))
            #expect(claims?["sub"] == .string("u1"))
            let iat = claims?["iat"]?.intValue ?? 0
            #expect(abs(iat - now / 1000) <= 2)
            #expect(claims?["exp"]?.intValue == iat + 60)
            #expect(expiresAt == (iat + 60) * 1000)
            #expect(claims?["gen"]?.intValue != nil)

            // Default lifetime comes from the app settings.
            let d = try app.request(.post, "/v1/users/u1/tokens")
            #expect(d.status == 201)
            let dClaims = UserToken.decodeUnverified(d.json?["token"]?.stringValue ?? "")?.claims
            #expect((dClaims?["exp"]?.intValue ?? 0) - (dClaims?["iat"]?.intValue ?? 0) == 86400)
            let custom = try server.createApp(settings: #"{"token_default_ttl_s":120}"#)
            try custom.createUser("c1")
            let c = try custom.request(.post, "/v1/users/c1/tokens", json: "{}")
            let cClaims = UserToken.decodeUnverified(c.json?["token"]?.stringValue ?? "")?.claims
            #expect((cClaims?["exp"]?.intValue ?? 0) - (cClaims?["iat"]?.intValue ?? 0) == 120)

            for body in [#"{"ttl_s":59}"#, #"{"ttl_s":2592001}"#, #"{"ttl_s":"60"}"#, #"{"ttl_s":60.5}"#] {
                let bad = try app.request(.post, "/v1/users/u1/tokens", json: body)
                #expect(bad.status == 400, "\(body)")
                #expect(Self.errorFields(bad) == ["body.ttl_s"], "\(body)")
            }
            #expect(try app.request(.post, "/v1/users/u1/tokens", json: #"{"ttl_s":2592000}"#).status == 201)
            #expect(try app.request(.post, "/v1/users/nobody/tokens").code == ErrorCode.userNotFound.code)
            let byUser = try server.request(.post, "/v1/users/u1/tokens", bearer: token, json: "{}")
            #expect(byUser.code == ErrorCode.forbidden.code)

            // The token works until its expiry on the server clock.
            #expect(try server.request(.get, "/v1/users/u1", bearer: token).status == 200)
            try Self.advance(server, seconds: 61)
            let expired = try server.request(.get, "/v1/users/u1", bearer: token)
            #expect(expired.status == 401)
            #expect(expired.code == ErrorCode.tokenExpired.code)
            #expect(expired.headers["WWW-Authenticate"] == "Bearer")
        }
    }

    // MARK: - Kick

    @Test func kickRevokesTokens() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("u1")
            let token = try app.token(for: "u1")

            // Without revoke_tokens the token keeps working.
            let soft = try app.request(.post, "/v1/users/u1/kick", json: #"{"platforms":["web","ios","web"],"revoke_tokens":false}"#)
            #expect(soft.status == 200)
            #expect(soft.json == .object(["closed_streams": .int(0)]))
            #expect(try server.request(.get, "/v1/users/u1", bearer: token).status == 200)

            let r = try app.request(.post, "/v1/users/u1/kick")
            #expect(r.status == 200)
            let kicked = try server.request(.get, "/v1/users/u1", bearer: token)
            #expect(kicked.status == 401)
            #expect(kicked.code == ErrorCode.tokenInvalid.code)
            #expect(try server.request(.get, "/v1/users/u1", bearer: try app.token(for: "u1")).status == 200)

            let events = try Self.events(app, "user.kicked", audience: "u1")
            #expect(events.count == 2)
            #expect(events.first?["data"]?["platforms"] == .array([.string("ios"), .string("web")]))
            #expect(events.first?["data"]?["revoke_tokens"] == .bool(false))
            #expect(events.last?["data"]?["user_id"] == .string("u1"))
            #expect(events.last?["data"]?["platforms"]?.arrayValue?.count == 10)
            #expect(events.last?["data"]?["revoke_tokens"] == .bool(true))

            let bad = try app.request(.post, "/v1/users/u1/kick", json: #"{"platforms":["ios","symbian"]}"#)
            #expect(bad.status == 400)
            #expect(Self.errorFields(bad) == ["body.platforms[1]"])
            #expect(try app.request(.post, "/v1/users/u1/kick", json: #"{"revoke_tokens":1}"#).code == ErrorCode.invalidParams.code)
            #expect(try app.request(.post, "/v1/users/nobody/kick").code == ErrorCode.userNotFound.code)
            #expect(try Self.events(app, "user.kicked").count == 2)
        }
    }

    // MARK: - Mute and ban

    @Test func muteWithDurationsAndExpiry() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("m1")
            try app.createUser("m2")
            try app.createUser("m3")
            let now = try Self.now(server)

            let timed = try app.request(.post, "/v1/users/m1/mute", json: #"{"duration_s":60}"#)
            #expect(timed.status == 200)
            let until = timed.json?["muted_until"]?.intValue ?? 0
            #expect(until >= now + 60_000 && until < now + 70_000)
            #expect(try app.request(.post, "/v1/users/m2/mute", json: #"{"duration_s":-1}"#).json?["muted_until"] == .int(-1))

            func muted() throws -> [String] {
                try app.request(.get, "/v1/users?state=muted").json?["items"]?.arrayValue?.compactMap { $0["user_id"]?.stringValue } ?? []
            }
            #expect(try muted() == ["m1", "m2"])
            try Self.advance(server, seconds: 61)
            #expect(try muted() == ["m2"])

            // Unmute; unmuting again changes nothing and writes no event.
            #expect(try app.request(.post, "/v1/users/m2/mute", json: #"{"duration_s":0}"#).json?["muted_until"] == .int(0))
            #expect(try app.request(.post, "/v1/users/m3/mute", json: #"{"duration_s":0}"#).status == 200)
            #expect(try muted().isEmpty)
            let events = try Self.events(app, "user.updated")
            #expect(events.count == 3)
            #expect(events.allSatisfy { $0["data"]?["changed"] == .array([.string("muted_until")]) })
            #expect(events.last?["data"]?["user"]?["user_id"] == .string("m2"))

            for body in [#"{}"#, #"{"duration_s":-2}"#, #"{"duration_s":31536001}"#, #"{"duration_s":1.5}"#, #"{"duration_s":"60"}"#] {
                let bad = try app.request(.post, "/v1/users/m1/mute", json: body)
                #expect(bad.status == 400, "\(body)")
                #expect(Self.errorFields(bad) == ["body.duration_s"], "\(body)")
            }
            #expect(try app.request(.post, "/v1/users/m1/mute", json: #"{"duration_s":31536000}"#).status == 200)
            #expect(try app.request(.post, "/v1/users/nobody/mute", json: #"{"duration_s":5}"#).code == ErrorCode.userNotFound.code)
        }
    }

    @Test func banBlocksTokensUntilExpiryOrUnban() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("b1")
            try app.createUser("b2")
            let token = try app.token(for: "b1")

            let r = try app.request(.post, "/v1/users/b1/ban", json: #"{"duration_s":120,"reason":"spam"}"#)
            #expect(r.status == 200)
            #expect((r.json?["banned_until"]?.intValue ?? 0) > 0)
            let banned = try server.request(.get, "/v1/users/b1", bearer: token)
            #expect(banned.status == 403)
            #expect(banned.code == ErrorCode.userBanned.code)
            let mint = try app.request(.post, "/v1/users/b1/tokens")
            #expect(mint.status == 403)
            #expect(mint.code == ErrorCode.userBanned.code)

            let updated = try Self.events(app, "user.updated", audience: "b1")
            #expect(updated.count == 1)
            #expect(updated.first?["data"]?["changed"] == .array([.string("banned_until")]))
            let kicked = try Self.events(app, "user.kicked", audience: "b1")
            #expect(kicked.count == 1)
            #expect(kicked.first?["data"]?["revoke_tokens"] == .bool(false))

            #expect(try app.request(.post, "/v1/users/b2/ban", json: #"{"duration_s":-1}"#).json?["banned_until"] == .int(-1))
            func bannedIDs() throws -> [String] {
                try app.request(.get, "/v1/users?state=banned").json?["items"]?.arrayValue?.compactMap { $0["user_id"]?.stringValue } ?? []
            }
            #expect(try bannedIDs() == ["b1", "b2"])

            // The timed ban runs out on the server clock: the old token works again.
            try Self.advance(server, seconds: 121)
            #expect(try server.request(.get, "/v1/users/b1", bearer: token).status == 200)
            #expect(try bannedIDs() == ["b2"])

            // Unban lifts the permanent ban; a second unban changes nothing.
            let lifted = try app.request(.post, "/v1/users/b2/unban")
            #expect(lifted.status == 200)
            #expect(lifted.json?["banned_until"] == .int(0))
            #expect(try app.request(.post, "/v1/users/b2/unban").status == 200)
            #expect(try app.request(.post, "/v1/users/b2/tokens").status == 201)
            #expect(try bannedIDs().isEmpty)
            let b2Updates = try Self.events(app, "user.updated", audience: "b2")
            #expect(b2Updates.count == 2)  // ban, unban

            for body in [#"{}"#, #"{"duration_s":0}"#, #"{"duration_s":-5}"#, #"{"duration_s":31536001}"#, #"{"duration_s":"1"}"#] {
                let bad = try app.request(.post, "/v1/users/b1/ban", json: body)
                #expect(bad.status == 400, "\(body)")
                #expect(Self.errorFields(bad) == ["body.duration_s"], "\(body)")
            }
            let reason = try app.request(.post, "/v1/users/b1/ban", json: "{\"duration_s\":5,\"reason\":\"\(String(repeating: "r", count: 257))\"}")
            #expect(Self.errorFields(reason) == ["body.reason"])
            #expect(try app.request(.post, "/v1/users/nobody/ban", json: #"{"duration_s":5}"#).code == ErrorCode.userNotFound.code)
            #expect(try app.request(.post, "/v1/users/nobody/unban").code == ErrorCode.userNotFound.code)
        }
    }

    // MARK: - List

    @Test func cursorWalkVisitsEveryUserOnce() throws {
        try withApp(testClock: true) { server, app in
            let ids = try Self.importUsers(app, prefix: "w", count: 250)

            var seen: [String] = []
            var cursor: String?
            var pages = 0
            repeat {
                let path = "/v1/users?limit=100" + (cursor.map { "&cursor=\($0)" } ?? "")
                let r = try app.request(.get, path)
                #expect(r.status == 200)
                seen += r.json?["items"]?.arrayValue?.compactMap { $0["user_id"]?.stringValue } ?? []
                cursor = r.json?["next_cursor"]?.stringValue
                pages += 1
            } while cursor != nil && pages < 10
            #expect(pages == 3)
            #expect(seen == ids.sorted())
            #expect(Set(seen).count == 250)

            let first = try app.request(.get, "/v1/users")
            #expect(first.json?["items"]?.arrayValue?.count == 20)
            let next = first.json?["next_cursor"]?.stringValue ?? ""
            #expect(try app.request(.get, "/v1/users?cursor=\(next)").json?["items"]?[0]?["user_id"] == .string(ids[20]))

            // A cursor is bound to its filter and to this server's key.
            let otherFilter = try app.request(.get, "/v1/users?state=all&cursor=\(next)")
            #expect(otherFilter.status == 400)
            #expect(otherFilter.code == ErrorCode.invalidCursor.code)
            #expect(try app.request(.get, "/v1/users?q=w1&cursor=\(next)").code == ErrorCode.invalidCursor.code)
            #expect(try app.request(.get, "/v1/users?cursor=abc").code == ErrorCode.invalidCursor.code)
            // Tampering with the payload (its first character encodes the leading `{`) breaks the MAC.
            #expect(next.first == "e")
            #expect(try app.request(.get, "/v1/users?cursor=f\(next.dropFirst())").code == ErrorCode.invalidCursor.code)
            for limit in ["0", "101", "-1", "x"] {
                #expect(try app.request(.get, "/v1/users?limit=\(limit)").code == ErrorCode.invalidParams.code)
            }
            #expect(try app.request(.get, "/v1/users?state=sleepy").code == ErrorCode.invalidParams.code)
        }
    }

    @Test func listFiltersByQueryAndState() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("alice", name: "Wonderland")
            try app.createUser("ALBERT", name: "Einstein")
            try app.createUser("bob", name: "Alicia Keys")
            try app.createUser("carol", name: "Carol")
            try app.createUser("dave", name: "Dave")
            try app.createUser("emile", name: "ÉMILE Über")
            try app.createUser("pct", name: "100%_done")
            #expect(try app.request(.delete, "/v1/users/dave").status == 204)

            func list(_ query: String) throws -> [String] {
                let r = try app.request(.get, "/v1/users?" + query)
                #expect(r.status == 200, "\(query): \(r.text)")
                return r.json?["items"]?.arrayValue?.compactMap { $0["user_id"]?.stringValue } ?? []
            }
            #expect(try list("") == ["ALBERT", "alice", "bob", "carol", "emile", "pct"])
            // Unicode lowercasing on both sides.
            #expect(try list("q=%C3%A9mile") == ["emile"])
            #expect(try list("q=%C3%BCB") == ["emile"])
            // Prefix of user_id or substring of name, case-insensitively.
            #expect(try list("q=AL") == ["ALBERT", "alice", "bob"])
            #expect(try list("q=alb") == ["ALBERT"])
            #expect(try list("q=alic") == ["alice", "bob"])
            #expect(try list("q=RLAN") == ["alice"])
            #expect(try list("q=ob") == [])
            #expect(try list("q=") == ["ALBERT", "alice", "bob", "carol", "emile", "pct"])
            #expect(try list("q=dav") == [])
            // LIKE metacharacters are plain text.
            #expect(try list("q=%25_") == ["pct"])
            #expect(try list("q=_") == ["pct"])
            #expect(try list("state=deleted") == ["dave"])
            #expect(try list("state=deleted&q=DAVE") == ["dave"])
            #expect(try list("state=all") == ["ALBERT", "alice", "bob", "carol", "dave", "emile", "pct"])
            #expect(try list("state=active&limit=2") == ["ALBERT", "alice"])
            let deleted = try app.request(.get, "/v1/users?state=deleted").json?["items"]?[0]
            #expect(deleted?["deleted_at"]?.intValue != nil)

            let token = try app.token(for: "bob")
            let r = try server.request(.get, "/v1/users", bearer: token)
            #expect(r.status == 403)
            #expect(r.code == ErrorCode.forbidden.code)
            let other = try server.createApp()
            #expect(try other.request(.get, "/v1/users").json?["items"]?.arrayValue?.isEmpty == true)
        }
    }
}
