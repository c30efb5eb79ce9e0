import ParleyHTTP
import ParleyPostgres
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Erasing a user (docs/privacy.md#erasure) end to end: the request's problems, a dry run that changes nothing, and an
/// erasure that leaves nothing of the user readable but the messages a legal hold covers, which stay as they were.
@Suite("Erasure")
struct ErasureTests: ProblemAssertions {
    /// `POST /v1/users/{user_id}/erase`, run to its end: the finished Job.
    static func erase(_ app: TestApp, _ userID: String, _ json: String) throws -> JSONValue {
        let r = try app.request(.post, "/v1/users/\(userID)/erase", json: json)
        guard r.status == 202, let job = r.json else { throw TestFailure("erase not accepted: \(r.status) \(r.text)") }
        #expect(job["kind"] == .string("user_erase"))
        return try JobsTests.awaitState(app, try #require(job["job_id"]?.stringValue), "succeeded")
    }

    static func text(_ app: TestApp, _ messageID: String) throws -> JSONValue? {
        try app.request(.get, "/v1/messages/\(messageID)").json?["body"]?["text"]
    }

    @Test func refusedRequestsCreateNoJob() throws {
        try withApp { _, app in
            Self.expectProblem(try app.request(.post, "/v1/users/nobody/erase", json: "{}"), 404, .userNotFound)
            try app.createUser("a")
            let r = try app.request(.post, "/v1/users/a/erase", json: #"{"dry_run":"no"}"#)
            Self.expectProblem(r, 400, .invalidParams)
            #expect(Self.fields(r).contains("body.dry_run"))
            #expect(try app.request(.get, "/v1/jobs").json?["items"] == .array([]))
        }
    }

    @Test func aDryRunChangesNothing() throws {
        try withApp { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let ids = try (0..<3).map { try RetentionTests.send(app, "a", "b", "m\($0)") }
            #expect(try Files.upload(server, [1, 2, 3], name: "a.bin", bearer: try app.token(for: "a")).status == 201)
            let done = try Self.erase(app, "a", "{}")
            #expect(done["result"] == .object(["messages_deleted": 3, "files_purged": 1, "held_kept": 0]), "\(done)")
            #expect(try app.request(.get, "/v1/users/a").status == 200)
            for (i, id) in ids.enumerated() { #expect(try Self.text(app, id) == .string("m\(i)")) }
            #expect(try server.count("SELECT count(*) FROM files WHERE app_id = $1", [app.appID]) == 1)
        }
    }

    @Test func anErasureLeavesNothingReadableButHeldMessages() throws {
        try withApp { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }
            let gone = try (0..<2).map { try RetentionTests.send(app, "a", "b", "gone \($0)") }
            let kept = try RetentionTests.send(app, "a", "c", "kept")
            let reply = try RetentionTests.send(app, "b", "a", "b's own")
            _ = try RetentionTests.hold(app, #"{"type":"peer","user_ids":["a","c"]}"#)
            #expect(try Files.upload(server, [1, 2, 3], name: "a.bin", bearer: try app.token(for: "a")).status == 201)
            let dry = try Self.erase(app, "a", #"{"dry_run":true}"#)
            #expect(dry["result"] == .object(["messages_deleted": 2, "files_purged": 1, "held_kept": 1]), "\(dry)")
            let done = try Self.erase(app, "a", #"{"dry_run":false}"#)
            #expect(done["result"] == .object(["messages_deleted": 2, "files_purged": 1, "held_kept": 1]), "\(done)")
            Self.expectProblem(try app.request(.get, "/v1/users/a"), 404, .userNotFound)
            for id in gone { #expect(try Self.text(app, id) == nil) }
            #expect(try Self.text(app, kept) == .string("kept"))
            #expect(try Self.text(app, reply) == .string("b's own"))
            #expect(try server.count("SELECT count(*) FROM files WHERE app_id = $1", [app.appID]) == 0)
            let readable = try server.count(
                "SELECT count(*) FROM messages WHERE app_id = $1 AND sender = 'a' AND NOT deleted", [app.appID])
            #expect(readable == 1)
        }
    }
}
