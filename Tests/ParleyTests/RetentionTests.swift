import ParleyHTTP
import ParleyPostgres
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Retention policies, legal holds and purge runs (docs/retention.md) end to end: the routes and their problems, the
/// most specific policy winning, `history_retention_days` as the app policy, holds surviving purges, deletes for
/// everyone, revokes and bulk removals, dry runs, the run log, `retention.purged` and the metrics.
@Suite("Retention", .inProcess)
struct RetentionTests: ProblemAssertions {
    static let day: Int = 86_400_000

    static func post(_ app: TestApp, _ path: String, _ json: String) throws -> TestResponse {
        try app.request(.post, path, json: json)
    }

    static func policy(_ app: TestApp, _ json: String, status: Int = 201) throws -> JSONValue {
        let r = try post(app, "/v1/retention/policies", json)
        #expect(r.status == status, "\(json): \(r.text)")
        return try #require(r.json)
    }

    static func hold(_ app: TestApp, _ scope: String) throws -> String {
        let r = try post(app, "/v1/retention/holds", "{\"scope\":\(scope),\"reason\":\"litigation\"}")
        #expect(r.status == 201, "\(r.text)")
        return try #require(r.json?["hold_id"]?.stringValue)
    }

    static func send(_ app: TestApp, _ from: String, _ to: String, _ text: String) throws -> String {
        let r = try PeerMessages.sendText(app, from, to, text)
        return try #require(r.json?["message_id"]?.stringValue, "\(r.text)")
    }

    static func readable(_ app: TestApp, _ messageID: String) throws -> Bool {
        try app.request(.get, "/v1/messages/\(messageID)").status == 200
    }

    static func runs(_ app: TestApp) throws -> [JSONValue] {
        try app.request(.get, "/v1/retention/runs").json?["items"]?.arrayValue ?? []
    }

    // MARK: - Routes

    @Test func policiesAreCreatedReplacedListedAndDeleted() throws {
        try withApp { server, app in
            for (json, field) in [
                (#"{"max_age_days":3}"#, "scope"), (#"{"scope":{"type":"channel"},"max_age_days":3}"#, "scope.type"),
                (#"{"scope":{"type":"user","user_id":"a"},"max_age_days":3}"#, "scope.type"), (#"{"scope":{"type":"app"}}"#, "max_age_days"),
                (#"{"scope":{"type":"app"},"max_age_days":0}"#, "max_age_days"), (#"{"scope":{"type":"app"},"max_age_days":3651}"#, "max_age_days"),
                (#"{"scope":{"type":"app"},"max_age_days":3,"purge_files":"yes"}"#, "purge_files"),
                (#"{"scope":{"type":"peer","user_ids":["a"]},"max_age_days":3}"#, "scope.user_ids"),
                (#"{"scope":{"type":"peer","user_ids":["a","a"]},"max_age_days":3}"#, "scope.user_ids"),
            ] {
                let r = try Self.post(app, "/v1/retention/policies", json)
                Self.expectProblem(r, 400, .invalidParams, json)
                #expect(Self.fields(r).contains("body." + field), "\(json): \(Self.fields(r))")
            }
            let app1 = try Self.policy(app, #"{"scope":{"type":"app"},"max_age_days":30}"#)
            #expect(app1["max_age_days"] == .int(30) && app1["purge_files"] == .bool(true) && app1["scope"]?["type"] == .string("app"))
            let replaced = try Self.policy(app, #"{"scope":{"type":"app"},"max_age_days":7,"purge_files":false}"#, status: 200)
            #expect(replaced["policy_id"] == app1["policy_id"] && replaced["max_age_days"] == .int(7) && replaced["purge_files"] == .bool(false))
            let peer = try Self.policy(app, #"{"scope":{"type":"peer","user_ids":["zed","amy"]},"max_age_days":90}"#)
            #expect(peer["scope"]?["user_ids"] == .array(["amy", "zed"]))
            _ = try Self.policy(app, #"{"scope":{"type":"group","group_id":"g1"},"max_age_days":5}"#)
            _ = try Self.policy(app, #"{"scope":{"type":"room"},"max_age_days":5}"#)
            let page = try #require(app.request(.get, "/v1/retention/policies?limit=2").json)
            #expect(page["items"]?.arrayValue?.count == 2)
            let cursor = try #require(page["next_cursor"]?.stringValue)
            let rest = try #require(app.request(.get, "/v1/retention/policies?limit=10&cursor=\(cursor)").json)
            #expect(rest["items"]?.arrayValue?.count == 2 && rest["next_cursor"] == .null)
            let id = try #require(peer["policy_id"]?.stringValue)
            #expect(try app.request(.delete, "/v1/retention/policies/\(id)").status == 204)
            Self.expectProblem(try app.request(.delete, "/v1/retention/policies/\(id)"), 404, .notFound)
            #expect(try app.request(.get, "/v1/retention/policies").json?["items"]?.arrayValue?.count == 3)
            try app.createUser("amy")
            let token = try app.token(for: "amy")
            #expect(try server.request(.get, "/v1/retention/policies", bearer: token).status == 403)
        }
    }

    @Test func holdsAreCreatedListedAndDeleted() throws {
        try withApp { _, app in
            for (json, field) in [
                (#"{"reason":"x"}"#, "scope"), (#"{"scope":{"type":"app"}}"#, "scope.type"), (#"{"scope":{"type":"user"}}"#, "scope.user_id"),
                (#"{"scope":{"type":"group","group_id":7}}"#, "scope.group_id"), (#"{"scope":{"type":"user","user_id":"a"},"reason":5}"#, "reason"),
            ] {
                let r = try Self.post(app, "/v1/retention/holds", json)
                Self.expectProblem(r, 400, .invalidParams, json)
                #expect(Self.fields(r).contains("body." + field), "\(json): \(Self.fields(r))")
            }
            let id = try Self.hold(app, #"{"type":"user","user_id":"amy"}"#)
            _ = try Self.hold(app, #"{"type":"room","room_id":"r1"}"#)
            let items = try app.request(.get, "/v1/retention/holds").json?["items"]?.arrayValue ?? []
            #expect(items.count == 2)
            #expect(items.first?["scope"] == .object(["type": "user", "user_id": "amy"]) && items.first?["reason"] == .string("litigation"))
            #expect(try app.request(.delete, "/v1/retention/holds/\(id)").status == 204)
            Self.expectProblem(try app.request(.delete, "/v1/retention/holds/\(id)"), 404, .notFound)
            Self.expectProblem(try Self.post(app, "/v1/retention/runs", #"{"dry_run":"no"}"#), 400, .invalidParams)
        }
    }

    // MARK: - Purge

    @Test func theMostSpecificPolicyWins() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b", "c", "d"] { try app.createUser(id) }
            _ = try Self.policy(app, #"{"scope":{"type":"app"},"max_age_days":1}"#)
            _ = try Self.policy(app, #"{"scope":{"type":"peer"},"max_age_days":3}"#)
            _ = try Self.policy(app, #"{"scope":{"type":"peer","user_ids":["a","c"]},"max_age_days":30}"#)
            let ab = try Self.send(app, "a", "b", "ab")
            let ac = try Self.send(app, "a", "c", "ac")
            try server.advanceClock(ms: 2 * Self.day)
            // The peer policy (3 days) wins over the app's (1 day).
            #expect(try Self.readable(app, ab) && Self.readable(app, ac))
            try server.advanceClock(ms: 2 * Self.day)
            // a–b is past its type's 3 days; a–c has its own 30.
            #expect(try !Self.readable(app, ab))
            #expect(try Self.readable(app, ac))
            // The advance's run is finished; the background sweep may have started one at the same clock time, which
            // may still be running when the list is read.
            var runs: [JSONValue] = []
            try eventually(timeout: .seconds(30), every: .milliseconds(20)) {
                runs = try Self.runs(app)
                return runs.allSatisfy { $0["finished_at"]?.intValue != nil }
            }
            let run = try #require(runs.first)
            #expect(run["dry_run"] == .bool(false) && run["error"] == .null && run["finished_at"]?.intValue != nil)
            #expect(run["policies"]?.arrayValue?.count == 3)
        }
    }

    @Test func historyRetentionDaysActsAsTheAppPolicy() throws {
        try withApp(testClock: true, settings: #"{"history_retention_days":1}"#, unthrottled: true) { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }
            _ = try Self.policy(app, #"{"scope":{"type":"peer","user_ids":["a","c"]},"max_age_days":30}"#)
            let ab = try Self.send(app, "a", "b", "ab")
            let ac = try Self.send(app, "a", "c", "ac")
            try server.advanceClock(ms: 2 * Self.day)
            #expect(try !Self.readable(app, ab))
            #expect(try Self.readable(app, ac))
            let purged = try Self.runs(app).reduce(0) { $0 + ($1["messages_purged"]?.intValue ?? 0) }
            #expect(purged == 1)
            // An app policy replaces the setting.
            _ = try Self.policy(app, #"{"scope":{"type":"app"},"max_age_days":100}"#)
            let kept = try Self.send(app, "a", "b", "kept")
            try server.advanceClock(ms: 2 * Self.day)
            #expect(try Self.readable(app, kept))
        }
    }

    @Test func aPurgeSkipsHeldMessagesAndRecordsItsRun() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }
            _ = try Self.hold(app, #"{"type":"user","user_id":"a"}"#)
            let fromA = try Self.send(app, "a", "b", "held: a sent it")
            let toA = try Self.send(app, "c", "a", "held: a peer conversation of a")
            let free = try Self.send(app, "c", "b", "not held")
            try server.advanceClock(ms: 2 * Self.day)
            _ = try Self.policy(app, #"{"scope":{"type":"app"},"max_age_days":1}"#)
            let r = try Self.post(app, "/v1/retention/runs", #"{"dry_run":false}"#)
            #expect(r.status == 202, "\(r.text)")
            let runID = try #require(r.json?["run_id"]?.stringValue)
            #expect(r.json?["dry_run"] == .bool(false))
            var run: JSONValue?
            #expect(
                try eventually(timeout: .seconds(60), every: .milliseconds(20)) {
                    run = try Self.runs(app).first { $0["run_id"]?.stringValue == runID }
                    return run?["finished_at"] != nil && run?["finished_at"] != .null
                })
            #expect(run?["held_skipped"] == .int(2) && run?["error"] == .null, "\(String(describing: run))")
            // The hourly timer may have run too: the runs together purged the one message not held.
            #expect(try Self.runs(app).reduce(0) { $0 + ($1["messages_purged"]?.intValue ?? 0) } == 1)
            #expect(try Self.readable(app, fromA) && Self.readable(app, toA))
            #expect(try !Self.readable(app, free))
            let events = try JobsTests.allEvents(app, "retention.purged")
            let event = try #require(events.first { $0["data"]?["run"]?["run_id"]?.stringValue == runID })
            #expect(event["data"]?["run"]?["held_skipped"] == .int(2))
            let metrics = try server.request(.get, "/metrics").text
            #expect(metrics.contains("parley_retention_purged_messages_total"))
        }
    }

    @Test func aDryRunChangesNothing() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let old = try Self.send(app, "a", "b", "old")
            try server.advanceClock(ms: 2 * Self.day)
            let fresh = try Self.send(app, "a", "b", "fresh")
            _ = try Self.policy(app, #"{"scope":{"type":"app"},"max_age_days":1}"#)
            for body in ["{}", #"{"dry_run":true}"#] {
                let r = try Self.post(app, "/v1/retention/runs", body)
                #expect(r.status == 200, "\(r.text)")
                #expect(r.json?["dry_run"] == .bool(true) && r.json?["messages_purged"] == .int(1) && r.json?["held_skipped"] == .int(0))
            }
            #expect(try Self.readable(app, old) && Self.readable(app, fresh))
            #expect(try JobsTests.allEvents(app, "retention.purged").isEmpty)
            #expect(try Self.runs(app).count == 2)
        }
    }

    // MARK: - Holds against deletes

    @Test func aHeldMessageIsNotDeletedForEveryoneUntilTheHoldGoes() throws {
        try withApp { _, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let holdID = try Self.hold(app, #"{"type":"peer","user_ids":["b","a"]}"#)
            let id = try Self.send(app, "a", "b", "evidence")
            let delete = #"{"scope":"everyone","message_ids":["\#(id)"]}"#
            let refused = try Self.post(app, "/v1/messages/delete", delete)
            #expect(refused.status == 200)
            let result = refused.json?["results"]?[0]
            #expect(result?["ok"] == .bool(false) && result?["error"]?["code"] == .int(7_000_901), "\(refused.text)")
            Self.expectProblem(try Self.post(app, "/v1/messages/\(id)/revoke", "{}"), 409, .legalHold)
            #expect(try app.request(.get, "/v1/messages/\(id)").json?["body"]?["text"] == .string("evidence"))
            #expect(try app.request(.delete, "/v1/retention/holds/\(holdID)").status == 204)
            let deleted = try Self.post(app, "/v1/messages/delete", delete)
            #expect(deleted.json?["results"]?[0]?["ok"] == .bool(true), "\(deleted.text)")
        }
    }

    @Test func bulkRemovalSkipsAndCountsHeldMessages() throws {
        try withApp { _, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }
            _ = try Self.hold(app, #"{"type":"peer","user_ids":["a","b"]}"#)
            let held = try (0..<3).map { try Self.send(app, "a", "b", "held \($0)") }
            let free = try (0..<2).map { try Self.send(app, "a", "c", "free \($0)") }
            for dryRun in [true, false] {
                let job = try JobsTests.removal(app, JobsTests.removeAll("a", dryRun: dryRun))
                let done = try JobsTests.awaitState(app, try #require(job["job_id"]?.stringValue), "succeeded")
                let result = done["result"]
                #expect(result?["matched"] == .int(5) && result?["held"] == .int(3), "\(String(describing: result))")
                #expect(result?["changed"] == .int(dryRun ? 0 : 2))
            }
            for id in held { #expect(try Self.readable(app, id)) }
            for id in free { #expect(try app.request(.get, "/v1/messages/\(id)").json?["body"]?["text"] == nil) }
        }
    }
}
