import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains

/// `async=true` on message export and import (docs/messages.md#import-and-export): the export's job writes a file with
/// exactly the bytes the streamed export sends; the import's job answers what the synchronous import answers, lines
/// spread over several steps; problems before a job is created; and an async import whose node stops mid-way.
@Suite("Async message export and import")
struct AsyncTransferTests: ProblemAssertions {
    /// `POST /v1/messages/import` with an NDJSON body and `query`.
    static func importBody(_ app: TestApp, _ body: String, query: String = "") throws -> TestResponse {
        var headers = HTTPHeaders()
        headers.add("Content-Type", "application/x-ndjson")
        return try app.request(.post, "/v1/messages/import" + (query.isEmpty ? "" : "?" + query), json: body, headers: headers)
    }

    /// A job answered 202 of `kind`, waited for until it succeeds.
    static func finished(_ r: TestResponse, kind: String, app: TestApp) throws -> JSONValue {
        guard r.status == 202, let jobID = r.json?["job_id"]?.stringValue else { throw TestFailure("not accepted: \(r.status) \(r.text)") }
        #expect(r.json?["kind"] == .string(kind))
        return try JobsTests.awaitState(app, jobID, "succeeded", timeout: .seconds(120))
    }

    @Test func anAsyncExportWritesWhatTheStreamedExportSends() throws {
        try withApp { server, app in
            for id in ["alice", "bob"] { try app.createUser(id) }
            // 2,500 messages: three pages of the export, so three steps.
            try JobsTests.importTexts(app, from: "alice", to: "bob", count: 1300, start: JobsTests.base)
            try JobsTests.importTexts(app, from: "bob", to: "alice", count: 1200, start: JobsTests.base + 5000, tag: "b")
            for query in ["conversation_type=peer&user_id=alice&peer_id=bob", "conversation_type=peer&user_id=bob&peer_id=alice&after_seq=700"] {
                let streamed = try app.request(.get, "/v1/messages/export?" + query)
                #expect(streamed.status == 200)
                let job = try Self.finished(try app.request(.get, "/v1/messages/export?async=true&" + query), kind: "export_messages", app: app)
                let fileID = try #require(job["result"]?["file_id"]?.stringValue)
                let file = try Files.get(server, "/v1/files/\(fileID)", bearer: app.key)
                #expect(file.status == 200)
                #expect(file.body == streamed.body, "\(file.body.count) vs \(streamed.body.count) bytes")
                #expect(job["result"]?["file_size"] == .int(Int64(streamed.body.count)))
                #expect(job["result"]?["mime_type"] == .string("application/x-ndjson"))
                #expect(job["result"]?["messages"] == .int(Int64(streamed.body.split(separator: 0x0A).count)))
                #expect(job["progress"]?["done"] == job["result"]?["messages"])
                let meta = try app.request(.get, "/v1/files/\(fileID)/meta")
                #expect(meta.json?["kind"] == .string("file") && meta.json?["owner_id"] == .null)
            }
            // `async=false` is the streamed export.
            #expect(try app.request(.get, "/v1/messages/export?async=false&conversation_type=peer&user_id=alice&peer_id=bob").status == 200)
        }
    }

    @Test func problemsComeBeforeAnyJob() throws {
        try withApp { server, app in
            for id in ["alice", "bob"] { try app.createUser(id) }
            Self.expectProblem(
                try app.request(.get, "/v1/messages/export?async=true&conversation_type=group&conversation_id=nope"), 404, .targetNotFound)
            let badAsync = try app.request(.get, "/v1/messages/export?async=yes&conversation_type=peer&user_id=alice&peer_id=bob")
            Self.expectProblem(badAsync, 400, .invalidParams)
            #expect(Self.fields(badAsync) == ["async"])
            Self.expectProblem(try app.request(.get, "/v1/messages/export?async=true&conversation_type=peer&user_id=alice"), 400, .invalidParams)
            Self.expectProblem(try Self.importBody(app, "{}\n", query: "async=maybe"), 400, .invalidParams)
            let tooMany = String(repeating: "\n", count: 10_001)
            Self.expectProblem(try Self.importBody(app, tooMany, query: "async=true"), 400, .invalidParams)
            #expect(try app.request(.get, "/v1/jobs").json?["items"] == .array([]))
            #expect(try server.request(.get, "/v1/messages/export?async=true", bearer: try app.token(for: "alice")).status == 403)
        }
    }

    /// The same body imported synchronously into one app and asynchronously into another (same users) answers the
    /// same results — line numbers, indexes, per-line errors, seqs, duplicates — over several steps of 1,000 lines.
    @Test func anAsyncImportAnswersWhatTheSynchronousImportAnswers() throws {
        try withApp { server, sync in
            let async = try server.createApp()
            for app in [sync, async] { for id in ["alice", "bob"] { try app.createUser(id) } }
            var lines: [String] = []
            for i in 0..<2600 {
                switch i % 500 {
                case 7: lines.append("")  // an empty line: no result, but it counts for the numbering
                case 9: lines.append("{not json")
                case 11:
                    lines.append(
                        "{\"conversation_type\":\"peer\",\"from\":\"ghost\",\"to\":\"bob\",\"type\":1,\"body\":{\"text\":\"x\"},\"timestamp\":1,\"message_id\":\"g\(i)\"}"
                    )
                case 13: lines.append(lines[lines.count - 3])  // a duplicate of an earlier line
                default:
                    let (from, to) = i % 2 == 0 ? ("alice", "bob") : ("bob", "alice")
                    lines.append(
                        "{\"conversation_type\":\"peer\",\"from\":\"\(from)\",\"to\":\"\(to)\",\"type\":1,\"body\":{\"text\":\"m\(i)\"},"
                            + "\"timestamp\":\(JobsTests.base + Int64(i)),\"message_id\":\"k\(i)\"}\r")
                }
            }
            let body = lines.joined(separator: "\n")  // no final newline: the last line ends the body
            let expected = try Self.importBody(sync, body)
            #expect(expected.status == 200)
            let job = try Self.finished(try Self.importBody(async, body, query: "async=true"), kind: "import_messages", app: async)
            #expect(job["progress"]?["total"] == .int(2600) && job["progress"]?["done"] == .int(2600))
            let results = try #require(job["result"]?["results"]?.arrayValue)
            let wanted = try #require(expected.json?["results"]?.arrayValue)
            #expect(results.count == wanted.count && results.count > 2500)
            // message_ids are the server's own; everything else is the same.
            func comparable(_ result: JSONValue) -> JSONValue {
                guard case .object(var o) = result else { return result }
                if case .object(var data)? = o["data"] {
                    data["message_id"] = .null
                    o["data"] = .object(data)
                }
                if case .object(var error)? = o["error"] { error["message"] = .null; o["error"] = .object(error) }
                return .object(o)
            }
            #expect(results.map(comparable) == wanted.map(comparable))
            #expect(results.contains { $0["data"]?["duplicate"] == .bool(true) })
            // The kept body went with the job that imported it.
            #expect(try server.count("SELECT count(*) FROM file_blobs WHERE app_id = $1", [async.appID]) == 0)
            let a = try server.count("SELECT count(*) FROM messages WHERE app_id = $1", [async.appID])
            #expect(a == (try server.count("SELECT count(*) FROM messages WHERE app_id = $1", [sync.appID])) && a > 2500)

            // Run again: every line is a duplicate now, as a synchronous re-run says.
            let rerun = try Self.finished(try Self.importBody(async, body, query: "async=true"), kind: "import_messages", app: async)
            let again = try #require(rerun["result"]?["results"]?.arrayValue)
            #expect(again.filter { $0["ok"] == .bool(true) }.allSatisfy { $0["data"]?["duplicate"] == .bool(true) })
            #expect(try server.count("SELECT count(*) FROM messages WHERE app_id = $1", [async.appID]) == a)
        }
    }

    /// The node running an async import stops mid-way: another node resumes it, and every line is imported once with
    /// the answer an uninterrupted import gives (no line turned into a duplicate of itself).
    @Test func anAsyncImportInterruptedMidWayResumes() throws {
        let first = try TestServer.start(configure: {
            $0.jobLeaseMillis = 1000
            $0.jobStepPauseMillis = 500
        })
        let app = try first.createApp()
        for id in ["alice", "bob"] { try app.createUser(id) }
        let body =
            (0..<5000).map { i in
                "{\"conversation_type\":\"peer\",\"from\":\"alice\",\"to\":\"bob\",\"type\":1,\"body\":{\"text\":\"m\(i)\"},"
                    + "\"timestamp\":\(JobsTests.base + Int64(i)),\"client_msg_id\":\"c\(i)\"}"
            }.joined(separator: "\n") + "\n"
        let r = try Self.importBody(app, body, query: "async=true")
        let jobID = try #require(r.json?["job_id"]?.stringValue)
        #expect(try eventually(timeout: .seconds(60)) { (try JobsTests.job(app, jobID)?["progress"]?["done"]?.intValue ?? 0) >= 1000 })
        first.stop()

        let second = try TestServer.start(database: first.database) { $0.jobLeaseMillis = 1000 }
        defer { second.stop() }
        let again = TestApp(server: second, appID: app.appID, key: app.key)
        let job = try JobsTests.awaitState(again, jobID, "succeeded", timeout: .seconds(120))
        let results = try #require(job["result"]?["results"]?.arrayValue)
        #expect(results.count == 5000)
        #expect(results.enumerated().allSatisfy { i, result in result["index"] == .int(Int64(i)) && result["id"] == .string(String(i)) })
        #expect(results.allSatisfy { $0["ok"] == .bool(true) && $0["data"]?["duplicate"] == .bool(false) })
        #expect(results.compactMap { $0["data"]?["seq"]?.intValue } == Array(1...5000))
        #expect(try second.count("SELECT count(*) FROM messages WHERE app_id = $1", [app.appID]) == 5000)
        #expect(try second.count("SELECT attempt FROM jobs WHERE app_id = $1 AND job_id = $2", [app.appID, jobID]) == 2)
    }
}
