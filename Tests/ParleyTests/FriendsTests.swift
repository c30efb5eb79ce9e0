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

/// Friends and friend applications (docs/social.md#friends) end to end: real HTTP against a real server and database.
@Suite("Friends", .inProcess)
struct FriendsTests: ProblemAssertions {
    // MARK: - Helpers

    /// The events of `type` in the app's log (optionally only those whose audience includes `user`).
    static func events(_ app: TestApp, _ type: String, audience user: String? = nil) throws -> [JSONValue] {
        try app.events(query: "types=\(type)" + (user.map { "&user_id=\($0)" } ?? ""))
    }

    static func ids(_ ids: [String], mode: String? = nil) -> String {
        "{\"user_ids\":[" + ids.map { "\"\($0)\"" }.joined(separator: ",") + "]" + (mode.map { ",\"mode\":\"\($0)\"" } ?? "") + "}"
    }

    static func results(_ r: TestResponse) -> [JSONValue] { r.json?["results"]?.arrayValue ?? [] }

    /// The per-item error codes of a batch response (nil for successful items).
    static func codes(_ r: TestResponse) -> [Int?] {
        results(r).map { $0["ok"] == .bool(true) ? nil : $0["error"]?["code"]?.intValue.map(Int.init) }
    }

    /// The friend ids of `owner`'s list (one page of `query`).
    static func friends(_ app: TestApp, _ owner: String, query: String = "") throws -> [String] {
        let r = try app.request(.get, "/v1/users/\(owner)/friends\(query)")
        #expect(r.status == 200, "\(r.text)")
        return r.json?["items"]?.arrayValue?.compactMap { $0["user_id"]?.stringValue } ?? []
    }

    static func add(_ app: TestApp, _ owner: String, _ friend: String, extra: String = "") throws -> TestResponse {
        try app.request(.post, "/v1/users/\(owner)/friends", json: "{\"friend_id\":\"\(friend)\"\(extra)}")
    }

    static func apply(_ app: TestApp, _ from: String, _ to: String, extra: String = "") throws -> TestResponse {
        try app.request(.post, "/v1/users/\(from)/friend_applications", json: "{\"to\":\"\(to)\"\(extra)}")
    }

    static func answer(_ app: TestApp, _ owner: String, _ id: String, _ action: String, json: String = "{}") throws -> TestResponse {
        try app.request(.post, "/v1/users/\(owner)/friend_applications/\(id)/\(action)", json: json)
    }

    // MARK: - Direct add, read, update

    @Test func directAddReadAndUpdate() throws {
        try withApp(testClock: true) { server, app in
            for id in ["u1", "u2", "u3"] { try app.createUser(id, name: "N" + id) }

            let add = try Self.add(app, "u1", "u2", extra: #","wording":"hi","alias":"Bob","attributes":{"k0":"a","k4":"e","k1":""}"#)
            #expect(add.status == 201, "\(add.text)")
            let entry = add.json
            #expect(
                Set(entry?.objectValue?.keys ?? [])
                    == ["user_id", "name", "avatar_url", "alias", "attributes", "wording", "created_at", "updated_at"])
            #expect(entry?["user_id"] == .string("u2"))
            #expect(entry?["name"] == .string("Nu2"))
            #expect(entry?["alias"] == .string("Bob"))
            #expect(entry?["attributes"] == .object(["k0": .string("a"), "k4": .string("e")]))
            #expect(entry?["wording"] == .string("hi"))
            let t0 = entry?["created_at"]?.intValue ?? 0
            #expect(t0 > 0 && entry?["updated_at"]?.intValue == t0)

            // The friend got an entry for the owner with empty alias and attributes.
            let reverse = try app.request(.get, "/v1/users/u2/friends/u1")
            #expect(reverse.status == 200, "\(reverse.text)")
            #expect(reverse.json?["alias"] == .string(""))
            #expect(reverse.json?["attributes"] == .object([:]))
            #expect(reverse.json?["name"] == .string("Nu1"))

            // One friend.added, to both users, ordered by the owner.
            let added = try Self.events(app, "friend.added")
            #expect(added.count == 1)
            #expect(added.first?["data"] == .object(["user_id": .string("u1"), "friend_id": .string("u2"), "via": .string("direct")]))
            #expect(try Self.events(app, "friend.added", audience: "u1").count == 1)
            #expect(try Self.events(app, "friend.added", audience: "u2").count == 1)
            #expect(try Self.events(app, "friend.added", audience: "u3").isEmpty)

            // Errors in check order.
            Self.expectProblem(try Self.add(app, "u1", "u1"), 422, .cannotFriendSelf)
            Self.expectProblem(try Self.add(app, "u1", "ghost"), 404, .userNotFound)
            Self.expectProblem(try Self.add(app, "ghost", "u1"), 404, .userNotFound)
            Self.expectProblem(try Self.add(app, "u1", "u2"), 409, .alreadyFriends)
            // u2 has u1 already (the reverse entry) → also already friends from that side.
            Self.expectProblem(try Self.add(app, "u2", "u1"), 409, .alreadyFriends)
            Self.expectInvalid(try Self.add(app, "u1", "u3", extra: #","attributes":{"k5":"x"}"#), field: "body.attributes.k5")
            Self.expectInvalid(try Self.add(app, "u1", "u3", extra: #","attributes":{"k0":7}"#), field: "body.attributes.k0")
            let long = String(repeating: "x", count: 257)
            Self.expectInvalid(try Self.add(app, "u1", "u3", extra: ",\"alias\":\"\(long)\""), field: "body.alias")
            Self.expectInvalid(try Self.add(app, "u1", "u3", extra: ",\"wording\":\"\(long)\""), field: "body.wording")
            Self.expectInvalid(try app.request(.post, "/v1/users/u1/friends", json: "{}"), field: "body.friend_id")
            #expect(try Self.events(app, "friend.added").count == 1)

            // GET and PATCH: merged attributes, "" removes a key.
            Self.expectProblem(try app.request(.get, "/v1/users/u1/friends/u3"), 404, .notFriends)
            try server.advanceClock(ms: 1000)
            let patch = try app.request(.patch, "/v1/users/u1/friends/u2", json: #"{"alias":"Robert","attributes":{"k0":"","k2":"c"}}"#)
            #expect(patch.status == 200, "\(patch.text)")
            #expect(patch.json?["alias"] == .string("Robert"))
            #expect(patch.json?["attributes"] == .object(["k2": .string("c"), "k4": .string("e")]))
            #expect(patch.json?["created_at"]?.intValue == t0)
            #expect((patch.json?["updated_at"]?.intValue ?? 0) >= t0 + 1000)
            let updated = try Self.events(app, "friend.updated")
            #expect(updated.count == 1)
            #expect(updated.first?["data"]?["user_id"] == .string("u1"))
            #expect(updated.first?["data"]?["friend"]?["alias"] == .string("Robert"))
            #expect(updated.first?["data"]?["friend"]?["user_id"] == .string("u2"))
            #expect(try Self.events(app, "friend.updated", audience: "u2").isEmpty)
            #expect(try app.request(.get, "/v1/users/u1/friends/u2").json == patch.json)

            // A patch that changes nothing writes no event.
            #expect(try app.request(.patch, "/v1/users/u1/friends/u2", json: #"{"alias":"Robert"}"#).status == 200)
            #expect(try Self.events(app, "friend.updated").count == 1)
            Self.expectInvalid(
                try app.request(.patch, "/v1/users/u1/friends/u2", json: #"{"attributes":{"k0":"x","k9":"y"}}"#), field: "body.attributes.k9")
            Self.expectProblem(try app.request(.patch, "/v1/users/u1/friends/u3", json: #"{"alias":"x"}"#), 404, .notFriends)
            Self.expectProblem(try app.request(.patch, "/v1/users/ghost/friends/u2", json: #"{"alias":"x"}"#), 404, .userNotFound)
        }
    }

    // MARK: - Applications

    @Test func applicationSendRepeatListAcceptAndReject() throws {
        try withApp(testClock: true) { server, app in
            for id in ["u1", "u2", "u3"] { try app.createUser(id) }

            let push = #","push":{"title":"Friend request","badge_increment":2}"#
            let send = try Self.apply(app, "u1", "u2", extra: #","wording":"hello","alias":"Two","attributes":{"k1":"b"}"# + push)
            #expect(send.status == 201, "\(send.text)")
            let application = send.json
            let id = application?["application_id"]?.stringValue ?? ""
            #expect(!id.isEmpty && id.utf8.count <= 32)
            #expect(
                Set(application?.objectValue?.keys ?? [])
                    == ["application_id", "from", "to", "wording", "state", "created_at", "updated_at", "expires_at"])
            #expect(application?["from"] == .string("u1"))
            #expect(application?["to"] == .string("u2"))
            #expect(application?["state"] == .string("waiting"))
            let created = application?["created_at"]?.intValue ?? 0
            #expect(application?["expires_at"]?.intValue == created + 604_800_000)
            // The push config is validated and stored for the push bridge.
            let stored = try server.app.services.pool.withConnection { db in
                try db.query(sql: "SELECT push::text FROM friend_applications WHERE application_id = $1", [id]).first?[0].string
            }
            let storedPush = try stored.map { try JSONValue.parse($0) }
            #expect(storedPush?["title"] == .string("Friend request"))
            #expect(storedPush?["badge_increment"] == .int(2))
            #expect(storedPush?["enable"] == .bool(true))
            Self.expectInvalid(try Self.apply(app, "u1", "u3", extra: #","push":{"badge_increment":100}"#), field: "body.push.badge_increment")

            var createdEvents = try Self.events(app, "friend.application_created")
            #expect(createdEvents.count == 1)
            #expect(createdEvents.first?["data"]?["application"] == application)
            #expect(try Self.events(app, "friend.application_created", audience: "u2").count == 1)
            #expect(try Self.events(app, "friend.application_created", audience: "u1").count == 1)

            // A repeated send while waiting: 200, the same application with the new wording.
            try server.advanceClock(ms: 1000)
            let again = try Self.apply(app, "u1", "u2", extra: #","wording":"hello again""#)
            #expect(again.status == 200, "\(again.text)")
            #expect(again.json?["application_id"] == .string(id))
            #expect(again.json?["wording"] == .string("hello again"))
            #expect((again.json?["updated_at"]?.intValue ?? 0) >= created + 1000)
            #expect(again.json?["created_at"]?.intValue == created)
            createdEvents = try Self.events(app, "friend.application_created")
            #expect(createdEvents.count == 1)
            #expect(try Self.events(app, "friend.application_updated").last?["data"]?["application"]?["wording"] == .string("hello again"))

            // Errors of a send.
            Self.expectProblem(try Self.apply(app, "u1", "u1"), 422, .cannotFriendSelf)
            Self.expectProblem(try Self.apply(app, "u1", "ghost"), 404, .userNotFound)
            Self.expectInvalid(try app.request(.post, "/v1/users/u1/friend_applications", json: "{}"), field: "body.to")

            // Lists: direction as seen by the path user; filter by direction and state.
            try server.advanceClock(ms: 1000)
            let second = try Self.apply(app, "u3", "u1")
            #expect(second.status == 201)
            let secondID = second.json?["application_id"]?.stringValue ?? ""
            let all = try app.request(.get, "/v1/users/u1/friend_applications")
            #expect(all.status == 200, "\(all.text)")
            let items = all.json?["items"]?.arrayValue ?? []
            #expect(items.compactMap { $0["application_id"]?.stringValue } == [secondID, id])
            #expect(items.compactMap { $0["direction"]?.stringValue } == ["received", "sent"])
            #expect(all.json?["next_cursor"] == .null)
            let sent = try app.request(.get, "/v1/users/u1/friend_applications?direction=sent").json?["items"]?.arrayValue ?? []
            #expect(sent.compactMap { $0["application_id"]?.stringValue } == [id])
            let received = try app.request(.get, "/v1/users/u2/friend_applications?direction=received").json?["items"]?.arrayValue ?? []
            #expect(received.compactMap { $0["application_id"]?.stringValue } == [id])
            #expect(received.first?["direction"] == .string("received"))
            Self.expectProblem(try app.request(.get, "/v1/users/u1/friend_applications?direction=up"), 400, .invalidParams)
            Self.expectProblem(try app.request(.get, "/v1/users/u1/friend_applications?state=gone"), 400, .invalidParams)
            Self.expectProblem(try app.request(.get, "/v1/users/ghost/friend_applications"), 404, .userNotFound)

            // Accept: only the respondent; the application's alias/attributes go to the applicant's entry.
            Self.expectProblem(try Self.answer(app, "u1", id, "accept"), 404, .notFound)
            Self.expectProblem(try Self.answer(app, "u3", id, "accept"), 404, .notFound)
            Self.expectProblem(try Self.answer(app, "u2", "nope", "accept"), 404, .notFound)
            let accept = try Self.answer(app, "u2", id, "accept", json: #"{"alias":"One","attributes":{"k3":"d"},"push":{"enable":false}}"#)
            #expect(accept.status == 200, "\(accept.text)")
            #expect(accept.json?["user_id"] == .string("u1"))
            #expect(accept.json?["alias"] == .string("One"))
            #expect(accept.json?["attributes"] == .object(["k3": .string("d")]))
            #expect(accept.json?["wording"] == .string("hello again"))
            let applicantEntry = try app.request(.get, "/v1/users/u1/friends/u2").json
            #expect(applicantEntry?["alias"] == .string("Two"))
            #expect(applicantEntry?["attributes"] == .object(["k1": .string("b")]))
            // application_updated then friend.added, both to both users.
            let log = try app.events(query: "types=friend.application_updated,friend.added")
            #expect(log.suffix(2).compactMap { $0["type"]?.stringValue } == ["friend.application_updated", "friend.added"])
            #expect(log.suffix(2).first?["data"]?["application"]?["state"] == .string("accepted"))
            #expect(
                log.last?["data"] == .object(["user_id": .string("u2"), "friend_id": .string("u1"), "via": .string("application")]))
            #expect(try Self.events(app, "friend.added", audience: "u1").count == 1)
            let acceptedList = try app.request(.get, "/v1/users/u2/friend_applications?state=accepted").json?["items"]?.arrayValue ?? []
            #expect(acceptedList.compactMap { $0["application_id"]?.stringValue } == [id])

            // Accept twice → not waiting; reject of an accepted one too; a send between friends → already friends.
            Self.expectProblem(try Self.answer(app, "u2", id, "accept"), 409, .applicationNotWaiting)
            Self.expectProblem(try Self.answer(app, "u2", id, "reject"), 409, .applicationNotWaiting)
            Self.expectProblem(try Self.apply(app, "u1", "u2"), 409, .alreadyFriends)

            // Reject: the state changes, nobody becomes a friend.
            let reject = try Self.answer(app, "u1", secondID, "reject", json: #"{"push":{"title":"no"}}"#)
            #expect(reject.status == 200, "\(reject.text)")
            #expect(reject.json?["state"] == .string("rejected"))
            #expect(reject.json?["application_id"] == .string(secondID))
            #expect(try Self.events(app, "friend.application_updated", audience: "u3").last?["data"]?["application"]?["state"] == .string("rejected"))
            #expect(try Self.friends(app, "u3").isEmpty)
            Self.expectProblem(try Self.answer(app, "u1", secondID, "reject"), 409, .applicationNotWaiting)
            Self.expectProblem(try Self.answer(app, "u1", secondID, "accept"), 409, .applicationNotWaiting)
            Self.expectInvalid(try Self.answer(app, "u1", secondID, "reject", json: #"{"push":{"title":7}}"#), field: "body.push.title")

            // After a rejection a new send creates a new application.
            let third = try Self.apply(app, "u3", "u1")
            #expect(third.status == 201)
            #expect(third.json?["application_id"]?.stringValue != secondID)
        }
    }

    @Test func applicationsExpireOnTheServerClock() throws {
        try withApp(testClock: true, settings: #"{"application_expiry_s":60}"#) { server, app in
            for id in ["u1", "u2", "u3"] { try app.createUser(id) }

            let send = try Self.apply(app, "u1", "u2", extra: #","wording":"w""#)
            #expect(send.status == 201)
            let id = send.json?["application_id"]?.stringValue ?? ""
            let expiresAt = send.json?["expires_at"]?.intValue ?? 0
            #expect(expiresAt == (send.json?["created_at"]?.intValue ?? 0) + 60_000)
            let other = try Self.apply(app, "u3", "u2")
            let otherID = other.json?["application_id"]?.stringValue ?? ""

            try server.advanceClock(ms: 59_000)
            #expect(try Self.events(app, "friend.application_updated").isEmpty)
            try server.advanceClock(ms: 1_000)

            // The timer fired before the advance answered: one expiry event per application, to both users.
            let expired = try Self.events(app, "friend.application_updated")
            #expect(expired.count == 2)
            let first = expired.first { $0["data"]?["application"]?["application_id"] == .string(id) }
            #expect(first?["data"]?["application"]?["state"] == .string("expired"))
            #expect(first?["data"]?["application"]?["updated_at"]?.intValue == expiresAt)
            #expect(try Self.events(app, "friend.application_updated", audience: "u1").count == 1)
            #expect(try Self.events(app, "friend.application_updated", audience: "u2").count == 2)

            Self.expectProblem(try Self.answer(app, "u2", id, "accept"), 409, .applicationExpired)
            Self.expectProblem(try Self.answer(app, "u2", otherID, "reject"), 409, .applicationExpired)
            #expect(try Self.friends(app, "u2").isEmpty)
            let list = try app.request(.get, "/v1/users/u2/friend_applications?state=expired").json?["items"]?.arrayValue ?? []
            #expect(Set(list.compactMap { $0["application_id"]?.stringValue }) == [id, otherID])
            #expect(try app.request(.get, "/v1/users/u2/friend_applications?state=waiting").json?["items"]?.arrayValue?.isEmpty == true)

            // Further advances write nothing more; a new send makes a new application.
            try server.advanceClock(ms: 120_000)
            #expect(try Self.events(app, "friend.application_updated").count == 2)
            let again = try Self.apply(app, "u1", "u2")
            #expect(again.status == 201)
            #expect(again.json?["application_id"]?.stringValue != id)
        }
    }

    @Test func overdueApplicationsReadAsExpiredBeforeTheTimerRuns() throws {
        try withApp(testClock: true) { server, app in
            for id in ["u1", "u2"] { try app.createUser(id) }
            let send = try Self.apply(app, "u1", "u2")
            let id = send.json?["application_id"]?.stringValue ?? ""
            // Overdue in the database, but still stored as waiting (as between a due time and the next sweep).
            try server.sql("UPDATE friend_applications SET expires_at = 1 WHERE application_id = $1", [id])

            let list = try app.request(.get, "/v1/users/u2/friend_applications").json?["items"]?.arrayValue ?? []
            #expect(list.first?["state"] == .string("expired"))
            Self.expectProblem(try Self.answer(app, "u2", id, "accept"), 409, .applicationExpired)
            // A new send replaces the overdue one (its expiry written first).
            let again = try Self.apply(app, "u1", "u2")
            #expect(again.status == 201, "\(again.text)")
            #expect(again.json?["application_id"]?.stringValue != id)
            let states = try server.count("SELECT count(*) FROM friend_applications WHERE app_id = $1 AND state = 'expired'", [app.appID])
            #expect(states == 1)
            let expiredEvents = try Self.events(app, "friend.application_updated").filter {
                $0["data"]?["application"]?["application_id"] == .string(id)
            }
            #expect(expiredEvents.count == 1)
            #expect(expiredEvents.first?["data"]?["application"]?["state"] == .string("expired"))
        }
    }

    @Test func concurrentExpirySweepsExpireEachApplicationOnce() throws {
        try withTestServer(testClock: true, poolSize: 4) { server in
            let apps = [try server.createApp(), try server.createApp()]
            for (i, app) in apps.enumerated() {
                try app.createUser("u1")
                let n = 150 * (i + 1)
                try server.sql(
                    "INSERT INTO users (app_id, user_id, created_at, updated_at) SELECT $1, 'x' || g, 1, 1 FROM generate_series(1, $2::int) g",
                    [app.appID, n])
                try server.sql(
                    """
                    INSERT INTO friend_applications (app_id, application_id, from_id, to_id, state, created_at, updated_at, expires_at)
                    SELECT $1, 'fa' || g, 'x' || g, 'u1', 'waiting', 1, 1, 2 + g FROM generate_series(1, $2::int) g
                    """, [app.appID, n])
            }
            // Several sweeps at once (plus the background one): every application expires, each with one event.
            let services = server.app.services
            let now = services.clock.now()
            let fired = Atomic<Int>(0)
            DispatchQueue.concurrentPerform(iterations: 4) { _ in
                fired.add((try? FriendApplicationExpiry.kind.fire(services, now)) ?? 0, ordering: .relaxed)
            }
            #expect(fired.load(ordering: .relaxed) <= 450)
            for app in apps { services.sequencer.publishAndWait(app.appID) }
            for (i, app) in apps.enumerated() {
                let n = Int64(150 * (i + 1))
                #expect(try server.count("SELECT count(*) FROM friend_applications WHERE app_id = $1 AND state = 'expired'", [app.appID]) == n)
                let events = "FROM events WHERE app_id = $1 AND type = 'friend.application_updated'"
                #expect(try server.count("SELECT count(*) " + events, [app.appID]) == n)
                #expect(try server.count("SELECT count(DISTINCT data::json->'application'->>'application_id') " + events, [app.appID]) == n)
                // Stored as expired at their due time.
                let first = try Self.events(app, "friend.application_updated").first
                #expect(first?["data"]?["application"]?["state"] == .string("expired"))
                #expect(first?["data"]?["application"]?["updated_at"]?.intValue == first?["data"]?["application"]?["expires_at"]?.intValue)
            }
        }
    }

    // MARK: - Blacklist and limits

    @Test func theBlacklistBlocksAddsAndApplications() throws {
        try withApp(testClock: true) { server, app in
            for id in ["u1", "u2"] { try app.createUser(id) }
            #expect(try app.request(.post, "/v1/users/u2/blacklist", json: Self.ids(["u1"])).status == 200)

            Self.expectProblem(try Self.add(app, "u1", "u2"), 403, .blockedByRecipient)
            Self.expectProblem(try Self.apply(app, "u1", "u2"), 403, .blockedByRecipient)
            #expect(try Self.friends(app, "u1").isEmpty)
            #expect(try Self.friends(app, "u2").isEmpty)
            #expect(try Self.events(app, "friend.added").isEmpty)
            #expect(try Self.events(app, "friend.application_created").isEmpty)

            // Removed from the blacklist, the same requests succeed.
            #expect(try app.request(.delete, "/v1/users/u2/blacklist/u1").status == 204)
            #expect(try Self.apply(app, "u1", "u2").status == 201)
            #expect(try Self.add(app, "u1", "u2").status == 201)
        }
    }

    @Test func friendListsStopAt3000() throws {
        try withApp(testClock: true) { server, app in
            for id in ["u1", "u2", "u3"] { try app.createUser(id) }
            try server.sql(
                "INSERT INTO users (app_id, user_id, created_at, updated_at) SELECT $1, 'x' || g, 1, 1 FROM generate_series(1, 3000) g",
                [app.appID])
            try server.sql(
                """
                INSERT INTO friends (app_id, user_id, friend_id, created_at, updated_at)
                SELECT $1, 'u1', 'x' || g, g, g FROM generate_series(1, 3000) g
                """, [app.appID])

            // The owner's list is full, or the friend's list would be.
            Self.expectProblem(try Self.add(app, "u1", "u2"), 422, .friendLimit)
            Self.expectProblem(try Self.add(app, "u2", "u1"), 422, .friendLimit)
            let send = try Self.apply(app, "u2", "u1")
            #expect(send.status == 201)
            Self.expectProblem(try Self.answer(app, "u1", send.json?["application_id"]?.stringValue ?? "", "accept"), 422, .friendLimit)
            // An existing entry is no new entry: u1 already lists x1, so x1 adding u1 only fills x1's list.
            #expect(try Self.add(app, "x1", "u1").status == 201)
            #expect(try server.count("SELECT count(*) FROM friends WHERE app_id = $1 AND user_id = 'u1'", [app.appID]) == 3000)

            // One removed: room for one again.
            #expect(try app.request(.delete, "/v1/users/u1/friends/x2?mode=single").status == 204)
            #expect(try Self.add(app, "u1", "u2").status == 201)
            Self.expectProblem(try Self.add(app, "u1", "u3"), 422, .friendLimit)
            #expect(try Self.events(app, "friend.added").count == 2)
        }
    }

    // MARK: - Lists

    @Test func searchByKeywordsAndAlias() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("owner")
            try app.createUser("alice01", name: "Alice Smith")
            try app.createUser("bob02", name: "Bob Stone")
            try app.createUser("carol03", name: "Ça Va")
            #expect(try Self.add(app, "owner", "alice01", extra: #","alias":"Work Buddy""#).status == 201)
            try server.advanceClock(ms: 10)
            #expect(try Self.add(app, "owner", "bob02", extra: #","alias":"Gym""#).status == 201)
            try server.advanceClock(ms: 10)
            #expect(try Self.add(app, "owner", "carol03").status == 201)

            #expect(try Self.friends(app, "owner") == ["carol03", "bob02", "alice01"])
            #expect(try Self.friends(app, "owner", query: "?q=SMITH") == ["alice01"])
            #expect(try Self.friends(app, "owner", query: "?q=s") == ["bob02", "alice01"])
            #expect(try Self.friends(app, "owner", query: "?q=s%20bob") == ["bob02"])
            #expect(try Self.friends(app, "owner", query: "?q=0") == ["carol03", "bob02", "alice01"])
            #expect(try Self.friends(app, "owner", query: "?q=%C3%A7a") == ["carol03"])
            #expect(try Self.friends(app, "owner", query: "?q=buddy").isEmpty)
            #expect(try Self.friends(app, "owner", query: "?q=buddy&match_alias=true") == ["alice01"])
            #expect(try Self.friends(app, "owner", query: "?q=gym%20bob&match_alias=true") == ["bob02"])
            #expect(try Self.friends(app, "owner", query: "?q=") == ["carol03", "bob02", "alice01"])
            Self.expectInvalid(try app.request(.get, "/v1/users/owner/friends?q=a%20b%20c%20d%20e%20f"), field: "q")
            Self.expectInvalid(try app.request(.get, "/v1/users/owner/friends?match_alias=yes"), field: "match_alias")
            Self.expectProblem(try app.request(.get, "/v1/users/owner/friends?limit=0"), 400, .invalidParams)
            Self.expectProblem(try app.request(.get, "/v1/users/ghost/friends"), 404, .userNotFound)

            // A soft-deleted friend is hidden from the list and reads, and comes back with restore.
            #expect(try app.request(.delete, "/v1/users/bob02").status == 204)
            #expect(try Self.friends(app, "owner") == ["carol03", "alice01"])
            Self.expectProblem(try app.request(.get, "/v1/users/owner/friends/bob02"), 404, .notFriends)
            #expect(try app.request(.post, "/v1/users/bob02/restore").status == 200)
            #expect(try Self.friends(app, "owner") == ["carol03", "bob02", "alice01"])
        }
    }

    @Test func cursorWalkVisitsEachFriendOnce() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("u1")
            try app.createUser("u2")
            try server.sql(
                "INSERT INTO users (app_id, user_id, created_at, updated_at) SELECT $1, 'y' || (100 + g), 1, 1 FROM generate_series(1, 23) g",
                [app.appID])
            // Ties: entry g at (g / 4) * 10, so equal created_at are ordered by id.
            try server.sql(
                """
                INSERT INTO friends (app_id, user_id, friend_id, created_at, updated_at)
                SELECT $1, 'u1', 'y' || (100 + g), (g / 4) * 10, 1 FROM generate_series(1, 23) g
                """, [app.appID])
            var pairs: [(id: String, t: Int)] = (1...23).map { (id: "y\(100 + $0)", t: ($0 / 4) * 10) }
            pairs.sort { a, b in a.t != b.t ? a.t > b.t : a.id > b.id }

            var seen: [String] = []
            var cursor: String?
            var pages = 0
            repeat {
                let r = try app.request(.get, "/v1/users/u1/friends?limit=5" + (cursor.map { "&cursor=\($0)" } ?? ""))
                #expect(r.status == 200, "\(r.text)")
                seen += r.json?["items"]?.arrayValue?.compactMap { $0["user_id"]?.stringValue } ?? []
                cursor = r.json?["next_cursor"]?.stringValue
                pages += 1
            } while cursor != nil && pages < 20
            #expect(seen == pairs.map(\.id))
            #expect(pages == 5)

            // A cursor belongs to its owner and filter.
            let first = try app.request(.get, "/v1/users/u1/friends?limit=5").json?["next_cursor"]?.stringValue ?? ""
            Self.expectProblem(try app.request(.get, "/v1/users/u2/friends?cursor=\(first)"), 400, .invalidCursor)
            Self.expectProblem(try app.request(.get, "/v1/users/u1/friends?q=y&cursor=\(first)"), 400, .invalidCursor)
            Self.expectProblem(try app.request(.get, "/v1/users/u1/friends?cursor=nonsense"), 400, .invalidCursor)

            // Applications page the same way.
            for i in 0..<7 {
                try app.createUser("s\(i)")
                #expect(try Self.apply(app, "s\(i)", "u2").status == 201)
            }
            var applications: [String] = []
            cursor = nil
            pages = 0
            repeat {
                let r = try app.request(.get, "/v1/users/u2/friend_applications?limit=3" + (cursor.map { "&cursor=\($0)" } ?? ""))
                #expect(r.status == 200, "\(r.text)")
                applications += r.json?["items"]?.arrayValue?.compactMap { $0["from"]?.stringValue } ?? []
                cursor = r.json?["next_cursor"]?.stringValue
                pages += 1
            } while cursor != nil && pages < 10
            #expect(applications.sorted() == (0..<7).map { "s\($0)" })
            #expect(Set(applications).count == 7)
            #expect(pages == 3)
        }
    }

    // MARK: - Check and delete

    @Test func checkReportsAllSixRelations() throws {
        try withApp(testClock: true) { server, app in
            for id in ["o", "mutual", "mine", "theirs", "none", "gone"] { try app.createUser(id) }
            #expect(try Self.add(app, "o", "mutual").status == 201)
            #expect(try Self.add(app, "o", "mine").status == 201)
            #expect(try app.request(.delete, "/v1/users/mine/friends/o?mode=single").status == 204)
            #expect(try Self.add(app, "theirs", "o").status == 201)
            #expect(try app.request(.delete, "/v1/users/o/friends/theirs?mode=single").status == 204)
            #expect(try app.request(.delete, "/v1/users/gone").status == 204)

            func relations(_ r: TestResponse) -> [String?] {
                Self.results(r).map { $0["data"]?["relation"]?.stringValue }
            }
            let people = ["mutual", "mine", "theirs", "none", "ghost", "gone", "mine"]
            let both = try app.request(.post, "/v1/users/o/friends/check", json: Self.ids(people))
            #expect(both.status == 200, "\(both.text)")
            #expect(relations(both) == ["both_all_have", "both_self_have", "both_other_have", "both_all_no", nil, nil, nil])
            #expect(Self.codes(both) == [nil, nil, nil, nil, ErrorCode.userNotFound.code, ErrorCode.userNotFound.code, ErrorCode.invalidParams.code])
            #expect(Self.results(both).first?["data"] == .object(["user_id": .string("mutual"), "relation": .string("both_all_have")]))
            let explicit = try app.request(.post, "/v1/users/o/friends/check", json: Self.ids(people, mode: "both"))
            #expect(relations(explicit) == relations(both))
            let single = try app.request(.post, "/v1/users/o/friends/check", json: Self.ids(people, mode: "single"))
            #expect(relations(single) == ["single_have", "single_have", "single_no", "single_no", nil, nil, nil])

            Self.expectInvalid(try app.request(.post, "/v1/users/o/friends/check", json: Self.ids(["a"], mode: "half")), field: "body.mode")
            let tooMany = Self.ids((0..<101).map { "x\($0)" })
            Self.expectInvalid(try app.request(.post, "/v1/users/o/friends/check", json: tooMany), field: "body.user_ids")
            Self.expectInvalid(try app.request(.post, "/v1/users/o/friends/delete", json: tooMany), field: "body.user_ids")
            Self.expectInvalid(try app.request(.post, "/v1/users/o/friends/check", json: #"{"user_ids":[]}"#), field: "body.user_ids")
            Self.expectProblem(try app.request(.post, "/v1/users/ghost/friends/check", json: Self.ids(["o"])), 404, .userNotFound)
        }
    }

    @Test func deleteSingleBothAndBatch() throws {
        try withApp(testClock: true) { server, app in
            for id in ["u1", "a", "b", "c", "d"] { try app.createUser(id) }
            for id in ["a", "b", "c", "d"] { #expect(try Self.add(app, "u1", id).status == 201) }

            // single: only the owner's entry goes; the event reaches the owner only.
            #expect(try app.request(.delete, "/v1/users/u1/friends/a?mode=single").status == 204)
            #expect(try Self.friends(app, "a") == ["u1"])
            var deleted = try Self.events(app, "friend.deleted")
            #expect(deleted.count == 1)
            #expect(deleted.first?["data"] == .object(["user_id": .string("u1"), "friend_id": .string("a"), "mode": .string("single")]))
            #expect(try Self.events(app, "friend.deleted", audience: "a").isEmpty)

            // both (the default): both entries go; the event reaches both.
            let delete = try app.request(.delete, "/v1/users/u1/friends/b")
            #expect(delete.status == 204)
            #expect(delete.body.isEmpty)
            #expect(try Self.friends(app, "b").isEmpty)
            deleted = try Self.events(app, "friend.deleted", audience: "b")
            #expect(deleted.count == 1)
            #expect(deleted.first?["data"]?["mode"] == .string("both"))

            Self.expectProblem(try app.request(.delete, "/v1/users/u1/friends/b"), 404, .notFriends)
            Self.expectProblem(try app.request(.delete, "/v1/users/u1/friends/u1"), 422, .cannotDeleteSelf)
            Self.expectProblem(try app.request(.delete, "/v1/users/u1/friends/c?mode=half"), 400, .invalidParams)
            Self.expectProblem(try app.request(.delete, "/v1/users/ghost/friends/c"), 404, .userNotFound)

            // Batch: per-item results in input order, one event per removed friend.
            let batch = try app.request(.post, "/v1/users/u1/friends/delete", json: #"{"user_ids":["c","u1","b","c","a b",5,"d"],"mode":"both"}"#)
            #expect(batch.status == 200, "\(batch.text)")
            #expect(
                Self.codes(batch) == [
                    nil, ErrorCode.cannotDeleteSelf.code, ErrorCode.notFriends.code, ErrorCode.invalidParams.code, ErrorCode.invalidParams.code,
                    ErrorCode.invalidParams.code, nil,
                ])
            #expect(Self.results(batch).map { $0["id"]?.stringValue } == ["c", "u1", "b", "c", "a b", "", "d"])
            #expect(Self.results(batch).first?["data"] == nil)
            #expect(try Self.friends(app, "u1").isEmpty)
            #expect(try Self.friends(app, "c").isEmpty)
            #expect(try Self.friends(app, "d").isEmpty)
            deleted = try Self.events(app, "friend.deleted")
            #expect(deleted.count == 4)
            #expect(deleted.suffix(2).compactMap { $0["data"]?["friend_id"]?.stringValue } == ["c", "d"])

            // single in a batch keeps the friends' entries.
            #expect(try Self.add(app, "a", "u1").status == 409)
            #expect(try Self.add(app, "u1", "a").status == 201)
            let single = try app.request(.post, "/v1/users/u1/friends/delete", json: Self.ids(["a"], mode: "single"))
            #expect(Self.codes(single) == [nil])
            #expect(try Self.friends(app, "a") == ["u1"])
        }
    }

    // MARK: - Credentials and deletion

    @Test func userTokenActsOnlyOnItsOwnList() throws {
        try withApp(testClock: true) { server, app in
            for id in ["u1", "u2", "u3", "u4"] { try app.createUser(id) }
            #expect(try Self.add(app, "u2", "u3").status == 201)
            let send = try Self.apply(app, "u4", "u2")
            #expect(send.status == 201)
            let id = send.json?["application_id"]?.stringValue ?? ""
            let token = try app.token(for: "u1")

            let cases: [(HTTPMethod, String, String?)] = [
                (.post, "/v1/users/u2/friends", #"{"friend_id":"u1"}"#),
                (.get, "/v1/users/u2/friends", nil),
                (.get, "/v1/users/u2/friends/u3", nil),
                (.patch, "/v1/users/u2/friends/u3", #"{"alias":"x"}"#),
                (.delete, "/v1/users/u2/friends/u3", nil),
                (.post, "/v1/users/u2/friends/delete", Self.ids(["u3"])),
                (.post, "/v1/users/u2/friends/check", Self.ids(["u3"])),
                (.post, "/v1/users/u2/friend_applications", #"{"to":"u1"}"#),
                (.get, "/v1/users/u2/friend_applications", nil),
                (.post, "/v1/users/u2/friend_applications/\(id)/accept", "{}"),
                (.post, "/v1/users/u2/friend_applications/\(id)/reject", "{}"),
            ]
            for (method, path, body) in cases {
                Self.expectProblem(try server.request(method, path, bearer: token, json: body), 403, .forbidden, "\(method) \(path)")
            }
            #expect(try Self.friends(app, "u2") == ["u3"])

            // Its own list works with the token, and so does an application to another user.
            let apply = try server.request(.post, "/v1/users/u1/friend_applications", bearer: token, json: #"{"to":"u2"}"#)
            #expect(apply.status == 201, "\(apply.text)")
            let u2Token = try app.token(for: "u2")
            let accept = try server.request(
                .post, "/v1/users/u2/friend_applications/\(apply.json?["application_id"]?.stringValue ?? "")/accept", bearer: u2Token, json: "{}")
            #expect(accept.status == 200, "\(accept.text)")
            let mine = try server.request(.get, "/v1/users/u1/friends", bearer: token)
            #expect(mine.json?["items"]?.arrayValue?.compactMap { $0["user_id"]?.stringValue } == ["u2"])
        }
    }

    @Test func hardDeletingAUserRemovesFriendsAndApplicationsBothWays() throws {
        try withApp(testClock: true) { server, app in
            for id in ["u1", "u2", "u3", "u4"] { try app.createUser(id) }
            #expect(try Self.add(app, "u1", "u2").status == 201)
            #expect(try Self.add(app, "u3", "u1").status == 201)
            #expect(try Self.apply(app, "u1", "u4").status == 201)
            #expect(try Self.apply(app, "u4", "u3").status == 201)
            #expect(try Self.apply(app, "u2", "u1").status == 409)
            #expect(try Self.apply(app, "u3", "u4").status == 201)

            #expect(try app.request(.delete, "/v1/users/u1?mode=hard").status == 204)
            #expect(try Self.friends(app, "u2").isEmpty)
            #expect(try Self.friends(app, "u3").isEmpty)
            let rows = try server.count("SELECT count(*) FROM friends WHERE app_id = $1 AND (user_id = 'u1' OR friend_id = 'u1')", [app.appID])
            #expect(rows == 0)
            let applications = try server.count(
                "SELECT count(*) FROM friend_applications WHERE app_id = $1 AND (from_id = 'u1' OR to_id = 'u1')", [app.appID])
            #expect(applications == 0)
            #expect(try app.request(.get, "/v1/users/u4/friend_applications").json?["items"]?.arrayValue?.count == 2)

            #expect(try app.request(.delete, "/v1/users/u4?mode=hard").status == 204)
            #expect(try server.count("SELECT count(*) FROM friend_applications WHERE app_id = $1", [app.appID]) == 0)

            // Created again, the id starts with a clean slate.
            try app.createUser("u1")
            #expect(try Self.friends(app, "u1").isEmpty)
            #expect(try app.request(.get, "/v1/users/u1/friend_applications").json?["items"]?.arrayValue?.isEmpty == true)
        }
    }

    // MARK: - Concurrency

    @Test func crossedAcceptsAtTheSameMomentEndAsOneFriendship() throws {
        try withApp(testClock: true, poolSize: 4) { server, app in
            for round in 0..<20 {
                let a = "a\(round)"
                let b = "b\(round)"
                try app.createUser(a)
                try app.createUser(b)
                let ab = try Self.apply(app, a, b).json?["application_id"]?.stringValue ?? ""
                let ba = try Self.apply(app, b, a).json?["application_id"]?.stringValue ?? ""
                let statuses = Mutex<[Int]>([])
                DispatchQueue.concurrentPerform(iterations: 2) { i in
                    let r = i == 0 ? try? Self.answer(app, b, ab, "accept") : try? Self.answer(app, a, ba, "accept")
                    statuses.withLock { $0.append(r?.status ?? 0) }
                }
                #expect(statuses.withLock { $0 } == [200, 200], "round \(round)")
                #expect(try Self.friends(app, a) == [b])
                #expect(try Self.friends(app, b) == [a])
                let rows = try server.count("SELECT count(*) FROM friends WHERE app_id = $1 AND user_id IN ($2, $3)", [app.appID, a, b])
                #expect(rows == 2, "round \(round)")
                let check = try app.request(.post, "/v1/users/\(a)/friends/check", json: Self.ids([b]))
                #expect(Self.results(check).first?["data"]?["relation"] == .string("both_all_have"))
            }
            // One friendship made per round: one friend.added each.
            #expect(try Self.events(app, "friend.added").count == 20)
        }
    }
}
