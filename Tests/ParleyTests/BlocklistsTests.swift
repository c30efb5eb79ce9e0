import Foundation
import ParleyHTTP
import ParleyPostgres
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Blocklists (docs/blocklists.md) end to end: the routes and their codes, matching, and evaluation on sends, edits
/// and profiles over real HTTP against a real server and database.
@Suite("Blocklists", .inProcess)
struct BlocklistsTests: GroupTestSupport {
    // MARK: - Helpers

    static func q(_ s: String) -> String { JSONValue.string(s).description }

    /// Creates a list (201 expected) and returns it.
    @discardableResult
    static func create(
        _ app: TestApp, _ name: String, type: String = "word", action: String = "block", entries: [String], appliesTo: [String]? = nil
    ) throws -> JSONValue {
        let r = try app.request(.post, "/v1/blocklists", json: body(name, type: type, action: action, entries: entries, appliesTo: appliesTo))
        #expect(r.status == 201, "\(r.text)")
        return r.json ?? .null
    }

    static func body(_ name: String, type: String = "word", action: String = "block", entries: [String], appliesTo: [String]? = nil) -> String {
        var o = "{\"name\":\(q(name)),\"type\":\(q(type)),\"action\":\(q(action)),\"entries\":[\(entries.map(q).joined(separator: ","))]"
        if let appliesTo { o += ",\"applies_to\":[\(appliesTo.map(q).joined(separator: ","))]" }
        return o + "}"
    }

    /// The dry run of `text` (optionally against `names`).
    static func test(_ app: TestApp, _ text: String, names: [String]? = nil) throws -> JSONValue {
        let r = try app.request(
            .post, "/v1/blocklists/test",
            json: "{\"text\":\(q(text))" + (names.map { ",\"names\":[\($0.map(q).joined(separator: ","))]" } ?? "") + "}")
        #expect(r.status == 200, "\(r.text)")
        return r.json ?? .null
    }

    /// The `(entry, start, end)` of every match of the dry run.
    static func matches(_ app: TestApp, _ text: String, names: [String]? = nil) throws -> [String] {
        try test(app, text, names: names)["matches"]?.arrayValue?.map {
            "\($0["entry"]?.stringValue ?? "")@\($0["start"]?.intValue ?? -1)-\($0["end"]?.intValue ?? -1)"
        } ?? []
    }

    static func hits(_ server: TestServer, _ action: String) throws -> Int {
        let text = try server.request(.get, "/metrics").text
        let prefix = "parley_blocklist_hits_total{action=\"\(action)\"} "
        return text.split(separator: "\n").first { $0.hasPrefix(prefix) }.flatMap { Int($0.dropFirst(prefix.count)) } ?? -1
    }

    // MARK: - Routes

    @Test func createListGetPatchDelete() throws {
        try withApp { _, app in
            let created = try Self.create(app, "slurs", entries: ["  Ｂａｄ ", "ﬁsh", "bad", "Two Words"])
            #expect(created["name"] == "slurs")
            #expect(created["type"] == "word")
            #expect(created["action"] == "block")
            #expect(created["applies_to"] == ["text", "custom"], "the default")
            #expect(created["entries"] == ["bad", "fish", "two words"], "normalised, trimmed, repeats dropped")
            #expect(created["entry_count"] == 3)
            #expect((created["created_at"]?.intValue ?? 0) > 0)

            let got = try app.request(.get, "/v1/blocklists/slurs")
            #expect(got.status == 200)
            #expect(got.json?["entries"] == ["bad", "fish", "two words"])

            try Self.create(app, "links", type: "domain", action: "flag", entries: ["Example.COM"], appliesTo: ["text", "user_profile"])
            let list = try app.request(.get, "/v1/blocklists")
            #expect(list.status == 200)
            let items = list.json?["items"]?.arrayValue ?? []
            #expect(items.map { $0["name"]?.stringValue } == ["links", "slurs"])
            #expect(items.allSatisfy { $0["entries"] == nil }, "the list leaves entries out")
            #expect(items.first?["entry_count"] == 1)

            let patched = try app.request(.patch, "/v1/blocklists/slurs", json: #"{"action":"mask","entries":["worse"],"applies_to":["file_name"]}"#)
            #expect(patched.status == 200, "\(patched.text)")
            #expect(patched.json?["action"] == "mask")
            #expect(patched.json?["entries"] == ["worse"])
            #expect(patched.json?["applies_to"] == ["file_name"])
            #expect(patched.json?["type"] == "word")

            #expect(try app.request(.delete, "/v1/blocklists/slurs").status == 204)
            Self.expectProblem(try app.request(.get, "/v1/blocklists/slurs"), 404, .notFound)
            Self.expectProblem(try app.request(.delete, "/v1/blocklists/slurs"), 404, .notFound)
            Self.expectProblem(try app.request(.patch, "/v1/blocklists/slurs", json: #"{"action":"flag"}"#), 404, .notFound)
        }
    }

    @Test func refusals() throws {
        try withApp { server, app in
            try Self.create(app, "a", entries: ["x"])
            Self.expectProblem(try app.request(.post, "/v1/blocklists", json: Self.body("a", entries: ["y"])), 409, .blocklistExists)
            // Bad inputs.
            Self.expectProblem(try app.request(.post, "/v1/blocklists", json: Self.body("", entries: ["y"])), 400, .invalidParams)
            Self.expectProblem(
                try app.request(.post, "/v1/blocklists", json: Self.body(String(repeating: "n", count: 65), entries: ["y"])), 400, .invalidParams)
            Self.expectProblem(try app.request(.post, "/v1/blocklists", json: Self.body("b", type: "phrase", entries: ["y"])), 400, .invalidParams)
            Self.expectProblem(try app.request(.post, "/v1/blocklists", json: Self.body("b", action: "nuke", entries: ["y"])), 400, .invalidParams)
            Self.expectProblem(try app.request(.post, "/v1/blocklists", json: Self.body("b", entries: [])), 400, .invalidParams)
            Self.expectProblem(
                try app.request(.post, "/v1/blocklists", json: Self.body("b", entries: ["y"], appliesTo: ["text", "bio"])), 400, .invalidParams)
            let tooMany = (0...10_000).map { "w\($0)" }
            Self.expectProblem(try app.request(.post, "/v1/blocklists", json: Self.body("b", entries: tooMany)), 400, .invalidParams)
            Self.expectProblem(try app.request(.post, "/v1/blocklists", json: Self.body("b", entries: ["  "])), 422, .invalidBlocklistEntry)
            Self.expectProblem(
                try app.request(.post, "/v1/blocklists", json: Self.body("b", type: "domain", entries: ["a@b.com"])), 422, .invalidBlocklistEntry)
            // A bad regex names the entry.
            let bad = try app.request(.post, "/v1/blocklists", json: Self.body("b", type: "regex", entries: ["ok+", "(unclosed"]))
            Self.expectProblem(bad, 422, .invalidBlocklistEntry)
            #expect(bad.json?["detail"]?.stringValue?.contains("(unclosed") == true, "\(bad.text)")
            let long = try app.request(.post, "/v1/blocklists", json: Self.body("b", type: "regex", entries: [String(repeating: "a", count: 257)]))
            Self.expectProblem(long, 422, .invalidBlocklistEntry)
            // Backreferences are refused when saved.
            let backref = try app.request(.post, "/v1/blocklists", json: Self.body("b", type: "regex", entries: [#"(a)\1"#]))
            Self.expectProblem(backref, 422, .invalidBlocklistEntry)
            #expect(backref.json?["detail"]?.stringValue?.contains(#"(a)\\1"#) == true, "\(backref.text)")
            // A bad PATCH changes nothing.
            Self.expectProblem(
                try app.request(.patch, "/v1/blocklists/a", json: #"{"type":"regex","entries":["[z"]}"#), 422, .invalidBlocklistEntry)
            #expect(try app.request(.get, "/v1/blocklists/a").json?["type"] == "word")
            // Unknown names in the dry run.
            Self.expectProblem(try app.request(.post, "/v1/blocklists/test", json: #"{"text":"x","names":["nope"]}"#), 404, .notFound)
            Self.expectProblem(try app.request(.post, "/v1/blocklists/test", json: #"{"names":["a"]}"#), 400, .invalidParams)
            // App key only.
            try app.createUser("u")
            let token = try app.token(for: "u")
            #expect(try server.request(.get, "/v1/blocklists", bearer: token).status == 403)
            #expect(try server.request(.post, "/v1/blocklists/test", bearer: token, json: #"{"text":"x"}"#).status == 403)
        }
    }

    @Test func fiftyListsAtMost() throws {
        try withApp { _, app in
            for i in 0..<50 { try Self.create(app, "l\(i)", entries: ["w\(i)"]) }
            Self.expectProblem(try app.request(.post, "/v1/blocklists", json: Self.body("l50", entries: ["x"])), 422, .blocklistLimit)
            #expect(try app.request(.delete, "/v1/blocklists/l0").status == 204)
            try Self.create(app, "l50", entries: ["x"])
        }
    }

    // MARK: - Matching

    @Test func wordsMatchNormalisedWholeWords() throws {
        try withApp { _, app in
            try Self.create(app, "w", entries: ["bad", "fish", "ß"])
            #expect(try Self.matches(app, "BAD news") == ["bad@0-3"])
            #expect(try Self.matches(app, "so Ｂａｄ!") == ["bad@3-12"], "full-width letters, offsets into the text as given")
            #expect(try Self.matches(app, "ﬁsh") == ["fish@0-5"], "the ligature (3 bytes) counts as f and i")
            #expect(try Self.matches(app, "badminton abad bad_ x") == [], "whole words only")
            #expect(try Self.matches(app, "(bad)") == ["bad@1-4"])
            #expect(try Self.matches(app, "née bad") == ["bad@5-8"], "offsets after a non-ASCII letter")
            #expect(try Self.test(app, "nothing here")["action"] == .null)
            #expect(try Self.test(app, "bad")["action"] == "block")
            #expect(try Self.test(app, "bad")["matches"]?[0]?["blocklist"] == "w")
        }
    }

    @Test func domainsMatchAtOrBelow() throws {
        try withApp { _, app in
            try Self.create(app, "d", type: "domain", entries: ["example.com"])
            #expect(try Self.matches(app, "see http://a.example.com/x now") == ["example.com@13-24"])
            #expect(try Self.matches(app, "example.com") == ["example.com@0-11"])
            #expect(try Self.matches(app, "visit EXAMPLE.com.") == ["example.com@6-17"], "a full stop ends the host")
            #expect(try Self.matches(app, "badexample.com") == [])
            #expect(try Self.matches(app, "example.com.evil.org") == [], "a host under another domain")
            #expect(try Self.matches(app, "example.community") == [])
        }
    }

    @Test func emailsMatchAddressesOrDomains() throws {
        try withApp { _, app in
            try Self.create(app, "e", type: "email", entries: ["bob@x.com", "@spam.com"])
            #expect(try Self.matches(app, "mail Bob@X.com now") == ["bob@x.com@5-14"])
            #expect(try Self.matches(app, "alice.bob@x.com") == [], "another address")
            #expect(try Self.matches(app, "bob@x.com.au") == [])
            #expect(try Self.matches(app, "to a.b@spam.com!") == ["@spam.com@3-15"], "the whole address, reported by the domain entry")
            #expect(try Self.matches(app, "c@mail.spam.com") == ["@spam.com@0-15"], "a subdomain's address")
            #expect(try Self.matches(app, "spam.com and @spam.com") == [], "a bare domain is no address")
        }
    }

    @Test func regexesAndSelectedNames() throws {
        try withApp { _, app in
            try Self.create(app, "r", type: "regex", action: "flag", entries: [#"b[a4]d+"#, #"\d{3}-\d{4}"#])
            try Self.create(app, "w", entries: ["call"])
            #expect(try Self.matches(app, "so B4DDD, call 555-1234") == ["b[a4]d+@3-8", "\\d{3}-\\d{4}@15-23", "call@10-14"])
            #expect(try Self.matches(app, "so bad, call", names: ["r"]) == ["b[a4]d+@3-6"])
            #expect(try Self.test(app, "bad call")["action"] == "block", "the strongest action wins")
            #expect(try Self.test(app, "bad")["action"] == "flag")
        }
    }

    @Test func adversarialRegexIsLinear() throws {
        try withApp { _, app in
            // Exponential in a backtracking engine; Hyperscan compiles these to automata and scans once.
            try Self.create(app, "evil", type: "regex", entries: [#"(a+)+$"#, #"(a|aa)+b"#])
            let text = String(repeating: "a", count: 10_000) + "!"
            let started = DispatchTime.now().uptimeNanoseconds
            let result = try Self.test(app, text)
            let elapsed = Double(DispatchTime.now().uptimeNanoseconds - started) / 1e6
            #expect(result["action"] == .null, "no match: neither ends the text with a or has a b")
            // A backtracking engine would not finish this in any lifetime; the bound only has to tell linear from
            // exponential, with room for a request on a loaded machine running the whole suite in parallel.
            #expect(elapsed < 2_000, "\(elapsed) ms for the whole request")
        }
    }

    /// Two nodes on one database: a change is used at once on the node that made it, and on the other within the
    /// 2 s its copy is trusted (then one version read reloads it).
    @Test func aChangeOnOneNodeReachesAnother() throws {
        try withTestServer { nodeA in
            let nodeB = try TestServer.start(database: nodeA.database)
            defer { nodeB.stop() }
            let app = try nodeA.createApp(settings: #"{"rate_limit_app_rps":100000}"#)
            let onB = TestApp(server: nodeB, appID: app.appID, key: app.key)
            try app.createUser("a")
            try app.createUser("b")
            #expect(try PeerMessages.sendText(onB, "a", "b", "secret").status == 201, "node B caches the app without lists")
            try Self.create(app, "w", entries: ["secret"])
            let changed = ContinuousClock.now
            Self.expectProblem(try PeerMessages.sendText(app, "a", "b", "secret"), 422, .contentBlocked)
            var status = 201
            while status == 201 && ContinuousClock.now - changed < .seconds(10) {
                status = try PeerMessages.sendText(onB, "a", "b", "secret").status
                if status == 201 { usleep(50_000) }
            }
            #expect(status == 422)
            // 2 s of trust, then one version read; the slack is for sends on a machine running the whole suite.
            #expect(ContinuousClock.now - changed < .seconds(5), "within the 2 s a node trusts its copy")
        }
    }

    /// What the hooks get (the reports side files `flagged`): every matching list strongest first, the flag lists
    /// apart, the winning action; and the masked text. No server: the check a send runs, on compiled lists.
    @Test func theHitHandedToTheHooks() throws {
        func list(_ name: String, _ action: Blocklist.Action, _ entries: [String]) throws -> CompiledBlocklist {
            try CompiledBlocklist.compile(
                Blocklist(
                    name: name, kind: .word, action: action, appliesTo: [.text], entries: entries, revision: 1, createdAt: 0, updatedAt: 0)
            ).get()
        }
        let snapshot = BlocklistSnapshot(version: 1, lists: [try list("f", .flag, ["watch"]), try list("m", .mask, ["darn"])])
        var check = BlocklistCheck(snapshot)
        #expect(check.check("watch it, DARN", .text) == "watch it, ****")
        #expect(check.check("darn", .custom) == "darn", "no list applies to custom")
        let hit = try #require(check.hit(appID: "app", userID: "u", target: .refusedSend, at: 7))
        #expect(hit.action == .mask)
        #expect(hit.blocklists == ["m", "f"])
        #expect(hit.flagged == ["f"], "a flag beside a stronger action still files its report")
        #expect(hit.userID == "u" && hit.at == 7)
        var clean = BlocklistCheck(snapshot)
        _ = clean.check("all good", .text)
        #expect(clean.hit(appID: "app", userID: nil, target: .refusedSend, at: 0) == nil)
    }

    // MARK: - Evaluation on sends

    @Test func blockRefusesAndStoresNothing() throws {
        try withApp(unthrottled: true) { server, app in
            try app.createUser("a")
            try app.createUser("b")
            try Self.create(app, "bad-words", entries: ["secret"])
            let r = try PeerMessages.sendText(app, "a", "b", "the SECRET plan")
            Self.expectProblem(r, 422, .contentBlocked)
            #expect(r.json?["detail"]?.stringValue?.contains("bad-words") == true)
            #expect(r.json?["detail"]?.stringValue?.contains("secret") == false, "never the entry")
            #expect(try PeerMessages.history(app, "a", "b").isEmpty)
            #expect(try PeerMessages.history(app, "b", "a").isEmpty)
            #expect(try PeerMessages.events(app, "message.sent").isEmpty)
            #expect(try Self.hits(server, "block") == 1)
            // A user token's send is refused the same way; skip_checks bypasses blocklists.
            let token = try app.token(for: "a")
            let userSend = try server.request(
                .post, "/v1/messages", bearer: token, json: #"{"conversation_type":"peer","to":"b","type":1,"body":{"text":"secret"}}"#)
            Self.expectProblem(userSend, 422, .contentBlocked)
            #expect(try PeerMessages.sendText(app, "a", "b", "secret", extra: "\"skip_checks\":true").status == 201)
            // Batch sends fail the item.
            let batch = try app.request(
                .post, "/v1/messages/batch", json: #"{"from":"a","to_user_ids":["b"],"type":1,"body":{"text":"secret"}}"#)
            #expect(batch.status == 200, "\(batch.text)")
            #expect(batch.json?["results"]?[0]?["error"]?["code"]?.intValue == Int64(ErrorCode.contentBlocked.code))
            #expect(try Self.hits(server, "block") == 3)
        }
    }

    @Test func shadowBlockReachesOnlyTheSender() throws {
        try PushFixtures.withScene { server, app, gateway in
            try PushFixtures.configure(app, gateway)
            try PushFixtures.device(app, "bob", key: "key-bob")
            try Self.create(app, "quiet", action: "shadow_block", entries: ["spam"])
            let sent = try app.request(
                .post, "/v1/messages", json: #"{"from":"alice","conversation_type":"peer","to":"bob","type":1,"body":{"text":"buy spam"}}"#)
            #expect(sent.status == 201, "\(sent.text)")
            let id = sent.json?["message_id"]?.stringValue ?? ""
            #expect(try app.request(.get, "/v1/messages/\(id)").json?["suppressed"] == "shadow_block")
            // The sender sees it (its token's view does not tell), the recipient does not.
            let alice = try server.request(.get, "/v1/messages/\(id)", bearer: try app.token(for: "alice"))
            #expect(alice.status == 200)
            #expect(alice.json?["suppressed"] == nil)
            Self.expectProblem(try server.request(.get, "/v1/messages/\(id)", bearer: try app.token(for: "bob")), 404, .messageNotFound)
            #expect(try PeerMessages.history(app, "alice", "bob").count == 1)
            #expect(try PeerMessages.history(app, "bob", "alice").isEmpty)
            #expect(try PeerMessages.conversation(app, "bob", "alice") == nil, "no conversation, no unread count")
            #expect(try app.request(.get, "/v1/users/bob/unread_count").json?["unread_count"] == 0)
            #expect(try PeerMessages.events(app, "message.sent", audience: "bob").isEmpty, "nothing on bob's streams")
            #expect(try PeerMessages.events(app, "message.sent", audience: "alice").count == 1)
            PushFixtures.drain(server)
            #expect(try PushFixtures.attempts(app).isEmpty, "no push")
            #expect(try Self.hits(server, "shadow_block") == 1)

            // A group member does not see it either.
            try app.createUser("carol")
            let groupID = try Self.createGroup(app, "alice", members: ["carol"])
            let inGroup = try app.request(
                .post, "/v1/messages", json: #"{"from":"alice","conversation_type":"group","to":"\#(groupID)","type":1,"body":{"text":"spam!"}}"#)
            #expect(inGroup.status == 201, "\(inGroup.text)")
            let carol = try server.request(.get, "/v1/groups/\(groupID)/messages", bearer: try app.token(for: "carol"))
            #expect(carol.json?["items"]?.arrayValue?.contains { $0["type"] == 1 } == false, "\(carol.text)")
            let aliceView = try server.request(.get, "/v1/groups/\(groupID)/messages", bearer: try app.token(for: "alice"))
            #expect(aliceView.json?["items"]?.arrayValue?.contains { $0["message_id"] == inGroup.json?["message_id"] } == true)
            let carolEvents = try PeerMessages.events(app, "message.sent", audience: "carol")
            #expect(!carolEvents.contains { $0["data"]?["message"]?["message_id"] == inGroup.json?["message_id"] })

            // The same send without the list is delivered and pushed.
            #expect(try app.request(.delete, "/v1/blocklists/quiet").status == 204)
            _ = try PushFixtures.send(app)
            PushFixtures.drain(server)
            #expect(try PushFixtures.attempts(app).count == 1)
        }
    }

    @Test func hookPatchedBodiesAreChecked() throws {
        let f = try BeforeHookTests.Fixture()
        try Self.create(f.app, "w", entries: ["forbidden"])
        f.answer(#"{"action":"modify","patch":{"body":{"text":"now forbidden"}}}"#)
        Self.expectProblem(try f.send("innocent"), 422, .contentBlocked)
        #expect(try f.history().isEmpty, "nothing stored")
        #expect(try PeerMessages.history(f.app, "a", "b").isEmpty)
        // The hook is not asked about a send a list already refuses.
        f.answer(#"{"action":"allow"}"#)
        let before = f.receiver.requests.count
        Self.expectProblem(try f.send("forbidden"), 422, .contentBlocked)
        #expect(f.receiver.requests.count == before)
    }

    @Test func maskAndFlag() throws {
        try withApp(unthrottled: true) { server, app in
            try app.createUser("a")
            try app.createUser("b")
            try Self.create(app, "m", action: "mask", entries: ["darn"])
            try Self.create(app, "f", action: "flag", entries: ["watch"])
            let r = try PeerMessages.sendText(app, "a", "b", "Ｄａｒｎ it, watch out")
            #expect(r.status == 201, "\(r.text)")
            #expect(r.json?["body"]?["text"] == "**** it, watch out", "one star per character as given")
            #expect(try PeerMessages.history(app, "b", "a").first?["body"]?["text"] == "**** it, watch out")
            #expect(try Self.hits(server, "mask") == 1, "the strongest action counts the hit")
            let flagged = try PeerMessages.sendText(app, "a", "b", "watch this")
            #expect(flagged.status == 201)
            #expect(flagged.json?["body"]?["text"] == "watch this", "flag delivers unchanged")
            #expect(try PeerMessages.history(app, "b", "a").count == 2)
            #expect(try Self.hits(server, "flag") == 1)
        }
    }

    @Test func customDataFileNamesAndEdits() throws {
        try withApp(unthrottled: true) { server, app in
            try app.createUser("a")
            try app.createUser("b")
            try Self.create(app, "c", entries: ["forbidden"], appliesTo: ["custom"])
            try Self.create(app, "files", action: "mask", entries: ["leak"], appliesTo: ["file_name"])
            try Self.create(app, "t", action: "block", entries: ["nope"])
            Self.expectProblem(
                try PeerMessages.send(app, "a", "b", type: 200, body: #"{"sub_type":1,"data":"{\"x\":\"forbidden\"}"}"#), 422, .contentBlocked)
            #expect(try PeerMessages.sendText(app, "a", "b", "forbidden").status == 201, "the custom list does not apply to text")
            let file = try PeerMessages.send(
                app, "a", "b", type: 12, body: #"{"url":"https://cdn.example.com/f","file_name":"the leak.pdf","file_size":10}"#)
            #expect(file.status == 201, "\(file.text)")
            #expect(file.json?["body"]?["file_name"] == "the ****.pdf")
            // Edits are checked too.
            let sent = try PeerMessages.sendText(app, "a", "b", "fine")
            let id = sent.json?["message_id"]?.stringValue ?? ""
            let edit = try app.request(.patch, "/v1/messages/\(id)", json: #"{"body":{"text":"nope"}}"#)
            Self.expectProblem(edit, 422, .contentBlocked)
            #expect(try app.request(.get, "/v1/messages/\(id)").json?["body"]?["text"] == "fine", "nothing stored")
            #expect(try Self.hits(server, "block") == 2)
        }
    }

    @Test func profiles() throws {
        try withApp(unthrottled: true) { server, app in
            try Self.create(app, "names", entries: ["admin"], appliesTo: ["user_profile", "group_profile"])
            try Self.create(app, "soft", action: "mask", entries: ["heck"], appliesTo: ["user_profile", "group_profile"])
            try Self.create(app, "hidden", action: "shadow_block", entries: ["ghost"], appliesTo: ["user_profile"])
            Self.expectProblem(try app.request(.post, "/v1/users", json: #"{"user_id":"u1","name":"The Admin"}"#), 422, .contentBlocked)
            Self.expectProblem(try app.request(.get, "/v1/users/u1"), 404, .userNotFound)
            Self.expectProblem(try app.request(.post, "/v1/users", json: #"{"user_id":"u1","name":"ghost"}"#), 422, .contentBlocked)
            let created = try app.request(.post, "/v1/users", json: #"{"user_id":"u1","name":"heck yes"}"#)
            #expect(created.status == 201, "\(created.text)")
            #expect(created.json?["name"] == "**** yes")
            Self.expectProblem(try app.request(.patch, "/v1/users/u1", json: #"{"name":"admin"}"#), 422, .contentBlocked)
            #expect(try app.request(.get, "/v1/users/u1").json?["name"] == "**** yes")
            // Groups: name and notice.
            let group = try app.request(.post, "/v1/groups", json: #"{"operator":"u1","name":"admin club"}"#)
            Self.expectProblem(group, 422, .contentBlocked)
            let groupID = try Self.createGroup(app, "u1", extra: #","name":"heck club""#)
            #expect(try Self.group(app, groupID)?["name"] == "**** club")
            Self.expectProblem(try app.request(.patch, "/v1/groups/\(groupID)", json: #"{"notice":"ask the admin"}"#), 422, .contentBlocked)
            #expect(try Self.hits(server, "block") == 4)
            #expect(try Self.hits(server, "mask") == 2)
        }
    }
}
