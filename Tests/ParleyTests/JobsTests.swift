import Glibc
import ParleyHTTP
import ParleyPostgres
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Jobs (docs/jobs.md) end to end: the routes and their problems, progress, cancelling, `job.finished`, a job resumed
/// by another node after its node stopped mid-way, and two nodes on one database never running a job twice. The jobs
/// are bulk removals (`remove_messages`), the kind the server has.
@Suite("Jobs", .inProcess)
struct JobsTests: ProblemAssertions {
    // MARK: - Helpers

    /// Imports `count` texts from `from` to `to`, one ms apart from `start` (import writes no events and no unread).
    static func importTexts(_ app: TestApp, from: String, to: String, count: Int, start: Int64, tag: String = "x") throws {
        var done = 0
        while done < count {
            let n = min(5000, count - done)
            let lines = (done..<(done + n)).map { i in
                "{\"conversation_type\":\"peer\",\"from\":\"\(from)\",\"to\":\"\(to)\",\"type\":1,\"body\":{\"text\":\"m\(i)\"},"
                    + "\"timestamp\":\(start + Int64(i)),\"client_msg_id\":\"\(tag)-\(from)-\(to)-\(i)\"}"
            }
            var headers = HTTPHeaders()
            headers.add("Content-Type", "application/x-ndjson")
            let r = try app.request(.post, "/v1/messages/import", json: lines.joined(separator: "\n") + "\n", headers: headers)
            guard r.status == 200 else { throw TestFailure("import failed: \(r.status) \(r.text.prefix(300))") }
            done += n
        }
    }

    /// `POST /v1/moderation/remove_messages` (202 expected): the Job.
    static func removal(_ app: TestApp, _ json: String) throws -> JSONValue {
        let r = try app.request(.post, "/v1/moderation/remove_messages", json: json)
        guard r.status == 202, let job = r.json else { throw TestFailure("removal not accepted: \(r.status) \(r.text)") }
        return job
    }

    static func job(_ app: TestApp, _ jobID: String) throws -> JSONValue? {
        let r = try app.request(.get, "/v1/jobs/\(jobID)")
        return r.status == 200 ? r.json : nil
    }

    /// Waits for the job to reach `state` and returns it.
    static func awaitState(_ app: TestApp, _ jobID: String, _ state: String, timeout: Duration = .seconds(60)) throws -> JSONValue {
        var last: JSONValue?
        let reached = try eventually(timeout: timeout, every: .milliseconds(20)) {
            last = try job(app, jobID)
            return last?["state"] == .string(state)
        }
        guard reached, let last else { throw TestFailure("job \(jobID) did not reach \(state): \(String(describing: last))") }
        return last
    }

    /// Every event of the app's log of `type` (every page).
    static func allEvents(_ app: TestApp, _ type: String) throws -> [JSONValue] {
        // A job's events commit with its step but are numbered into the log a moment later (the runner pokes the
        // sequencer), so a job seen finished may not have its events in the log yet. A write request of the app
        // numbers every committed event of the app before it answers: after it, the log holds them all.
        #expect(try app.request(.patch, "/v1/settings", json: "{}").status == 200)
        var all: [JSONValue] = []
        var after = "earliest"
        while true {
            let page = try app.events(after: after, query: "types=\(type)")
            all += page
            guard page.count == 100, let last = page.last?["id"]?.stringValue else { return all }
            after = last
        }
    }

    /// The message ids of every `message.deleted` event, in log order.
    static func deletedIDs(_ app: TestApp) throws -> [String] {
        try allEvents(app, "message.deleted").flatMap { $0["data"]?["message_ids"]?.arrayValue?.compactMap(\.stringValue) ?? [] }
    }

    static func removeAll(_ user: String, mode: String = "delete", dryRun: Bool = false) -> String {
        "{\"user_id\":\"\(user)\",\"from\":0,\"to\":9000000000000,\"mode\":\"\(mode)\",\"dry_run\":\(dryRun)}"
    }

    static let base: Int64 = 1_700_000_000_000

    // MARK: - Routes

    @Test func routesProblemsAndTheFinishedEvent() throws {
        try withApp { server, app in
            for id in ["alice", "bob"] { try app.createUser(id) }
            try Self.importTexts(app, from: "alice", to: "bob", count: 3, start: Self.base)

            Self.expectProblem(try app.request(.get, "/v1/jobs/job_nope"), 404, .jobNotFound)
            Self.expectProblem(try app.request(.delete, "/v1/jobs/job_nope"), 404, .jobNotFound)
            var list = try app.request(.get, "/v1/jobs")
            #expect(list.status == 200)
            #expect(list.json?["items"] == .array([]))

            let created = try Self.removal(app, "{\"user_id\":\"alice\",\"from\":0,\"to\":9000000000000,\"mode\":\"delete\"}")
            #expect(
                Set(created.objectValue?.keys ?? []) == ["job_id", "kind", "state", "progress", "created_at", "finished_at", "result", "problem"])
            #expect(created["kind"] == .string("remove_messages"))
            #expect(created["state"] == .string("queued"))
            #expect(created["progress"] == .object(["done": 0, "total": 3]))
            #expect(created["finished_at"] == .null && created["result"] == .null && created["problem"] == .null)
            let jobID = try #require(created["job_id"]?.stringValue)

            let done = try Self.awaitState(app, jobID, "succeeded")
            #expect(done["progress"] == .object(["done": 3, "total": 3]))
            #expect(done["result"]?["matched"] == .int(3) && done["result"]?["changed"] == .int(0) && done["result"]?["held"] == .int(0))
            #expect(done["result"]?["sample_message_ids"]?.arrayValue?.count == 3)
            #expect((done["finished_at"]?.intValue ?? 0) >= (done["created_at"]?.intValue ?? .max))

            // A finished job cannot be cancelled.
            Self.expectProblem(try app.request(.delete, "/v1/jobs/\(jobID)"), 409, .jobFinished)

            // job.finished: once, with the Job, to the app only (no user's log has it).
            let finished = try Self.allEvents(app, "job.finished")
            #expect(finished.count == 1)
            #expect(finished.first?["data"]?["job_id"] == .string(jobID))
            #expect(finished.first?["data"]?["state"] == .string("succeeded"))
            #expect(try app.events(query: "types=job.finished&user_id=alice").isEmpty)

            // Lists: newest first, filters, pages.
            let second = try Self.removal(app, Self.removeAll("bob", dryRun: true))
            let secondID = try #require(second["job_id"]?.stringValue)
            _ = try Self.awaitState(app, secondID, "succeeded")
            list = try app.request(.get, "/v1/jobs")
            #expect(list.json?["items"]?.arrayValue?.compactMap { $0["job_id"]?.stringValue } == [secondID, jobID])
            let page = try app.request(.get, "/v1/jobs?limit=1")
            #expect(page.json?["items"]?.arrayValue?.compactMap { $0["job_id"]?.stringValue } == [secondID])
            let cursor = try #require(page.json?["next_cursor"]?.stringValue)
            let next = try app.request(.get, "/v1/jobs?limit=1&cursor=\(cursor)")
            #expect(next.json?["items"]?.arrayValue?.compactMap { $0["job_id"]?.stringValue } == [jobID])
            #expect(next.json?["next_cursor"] == .null)
            #expect(try app.request(.get, "/v1/jobs?kind=remove_messages&state=succeeded").json?["items"]?.arrayValue?.count == 2)
            #expect(try app.request(.get, "/v1/jobs?kind=user_export").json?["items"] == .array([]))
            #expect(try app.request(.get, "/v1/jobs?state=running").json?["items"] == .array([]))
            let badState = try app.request(.get, "/v1/jobs?state=done")
            Self.expectProblem(badState, 400, .invalidParams)
            #expect(Self.fields(badState) == ["state"])
            Self.expectProblem(try app.request(.get, "/v1/jobs?limit=0"), 400, .invalidParams)
            Self.expectProblem(try app.request(.get, "/v1/jobs?cursor=bogus"), 400, .invalidCursor)

            // Another app sees none of them; a user token may not list jobs.
            let other = try server.createApp()
            Self.expectProblem(try other.request(.get, "/v1/jobs/\(jobID)"), 404, .jobNotFound)
            #expect(try other.request(.get, "/v1/jobs").json?["items"] == .array([]))
            let token = try app.token(for: "alice")
            #expect(try server.request(.get, "/v1/jobs", bearer: token).status == 403)

            // Metrics: the finished jobs by kind and state.
            let metrics = try server.request(.get, "/metrics")
            #expect(
                metrics.text.contains("parley_jobs_finished_total{kind=\"remove_messages\",state=\"succeeded\"} 2"), "\(metrics.text.suffix(600))")
            #expect(metrics.text.contains("# TYPE parley_jobs_unfinished gauge"))
        }
    }

    /// A job this server has no kind for fails with its problem (the step-failure path): state `failed`, `problem` an
    /// error's members, `job.finished` written once.
    @Test func aJobThatFailsCarriesItsProblem() throws {
        try withApp { server, app in
            try server.sql(
                "INSERT INTO jobs (app_id, job_id, kind, state, created_at) VALUES ($1, 'job_unknown_kind', 'no_such_kind', 'queued', 1)",
                [app.appID])
            let failed = try Self.awaitState(app, "job_unknown_kind", "failed")
            #expect(failed["kind"] == .string("no_such_kind"))
            #expect(failed["result"] == .null)
            #expect(failed["problem"]?["code"] == .int(Int64(ErrorCode.internalError.code)))
            #expect(failed["problem"]?["status"] == .int(500))
            #expect(failed["problem"]?["request_id"] == nil)
            #expect(failed["finished_at"] != .null)
            #expect(try Self.allEvents(app, "job.finished").compactMap { $0["data"]?["state"]?.stringValue } == ["failed"])
            Self.expectProblem(try app.request(.delete, "/v1/jobs/job_unknown_kind"), 409, .jobFinished)
            #expect(try app.request(.get, "/v1/jobs?state=failed").json?["items"]?.arrayValue?.count == 1)
        }
    }

    // MARK: - Progress and cancelling

    @Test func progressAndCancel() throws {
        // A pause after each step keeps the job running long enough to watch and cancel it.
        try withApp(configure: { $0.jobStepPauseMillis = 400 }) { server, app in
            for id in ["alice", "bob", "carol"] { try app.createUser(id) }
            try Self.importTexts(app, from: "alice", to: "bob", count: 2600, start: Self.base)
            try Self.importTexts(app, from: "carol", to: "bob", count: 3, start: Self.base)

            let running = try Self.removal(app, Self.removeAll("alice"))
            let runningID = try #require(running["job_id"]?.stringValue)
            // The node runs one job at a time: the second waits, queued.
            let queued = try Self.removal(app, Self.removeAll("carol"))
            let queuedID = try #require(queued["job_id"]?.stringValue)

            var seen: [Int64] = []
            #expect(
                try eventually(timeout: .seconds(30)) {
                    let job = try Self.job(app, runningID)
                    if let done = job?["progress"]?["done"]?.intValue, seen.last != done { seen.append(done) }
                    return seen.count >= 3
                }, "progress moved through \(seen)")
            let job = try #require(try Self.job(app, runningID))
            #expect(job["state"] == .string("running"))
            #expect(job["progress"]?["total"] == .int(2600))
            #expect(seen == seen.sorted() && seen.allSatisfy { $0 % 500 == 0 }, "\(seen)")

            // Cancelling the queued job ends it at once; the running one stops before its next step.
            let cancelledQueued = try app.request(.delete, "/v1/jobs/\(queuedID)")
            #expect(cancelledQueued.status == 200)
            #expect(cancelledQueued.json?["state"] == .string("cancelled"))
            #expect(cancelledQueued.json?["progress"]?["done"] == .int(0))
            let cancelRunning = try app.request(.delete, "/v1/jobs/\(runningID)")
            #expect(cancelRunning.status == 200)
            #expect(cancelRunning.json?["job_id"] == .string(runningID))
            let cancelled = try Self.awaitState(app, runningID, "cancelled")
            let done = cancelled["progress"]?["done"]?.intValue ?? -1
            #expect(done >= 1000 && done < 2600, "\(done)")
            #expect(cancelled["result"] == .null)
            Self.expectProblem(try app.request(.delete, "/v1/jobs/\(runningID)"), 409, .jobFinished)

            // Exactly the steps that committed took effect: `done` messages deleted, the rest untouched; carol's none.
            let deleted = try server.count(
                "SELECT count(*) FROM messages WHERE app_id = $1 AND sender = 'alice' AND deleted", [app.appID])
            #expect(deleted == done)
            #expect(try Self.deletedIDs(app).count == Int(done))
            #expect(try server.count("SELECT count(*) FROM messages WHERE app_id = $1 AND sender = 'carol' AND deleted", [app.appID]) == 0)
            let finished = try Self.allEvents(app, "job.finished").compactMap { $0["data"]?["state"]?.stringValue }
            #expect(finished == ["cancelled", "cancelled"])
            // No moderation log entry for a removal that did not finish.
            #expect(try server.count("SELECT count(*) FROM moderation_actions WHERE app_id = $1", [app.appID]) == 0)
        }
    }

    // MARK: - Nodes

    /// A node stops in the middle of a job (between steps, keeping its claim, as a node that dies does): once the
    /// lease expires a second node on the same database takes the job over and resumes it from the last checkpoint,
    /// finishing it once with the full result and no message deleted twice.
    @Test func resumedByAnotherNodeAfterItsNodeStops() throws {
        let first = try TestServer.start(configure: {
            $0.jobLeaseMillis = 1000
            $0.jobStepPauseMillis = 500
        })
        let app = try first.createApp()
        for id in ["alice", "bob"] { try app.createUser(id) }
        try Self.importTexts(app, from: "alice", to: "bob", count: 2200, start: Self.base)
        let created = try Self.removal(app, Self.removeAll("alice"))
        let jobID = try #require(created["job_id"]?.stringValue)
        #expect(try eventually(timeout: .seconds(30)) { (try Self.job(app, jobID)?["progress"]?["done"]?.intValue ?? 0) >= 500 })
        first.stop()

        let second = try TestServer.start(database: first.database) { $0.jobLeaseMillis = 1000 }
        defer { second.stop() }
        let again = TestApp(server: second, appID: app.appID, key: app.key)
        let atTakeover = try #require(try Self.job(again, jobID))
        let doneBefore = atTakeover["progress"]?["done"]?.intValue ?? -1
        #expect(doneBefore >= 500 && doneBefore < 2200, "\(atTakeover)")

        let finished = try Self.awaitState(again, jobID, "succeeded")
        #expect(finished["progress"] == .object(["done": 2200, "total": 2200]))
        #expect(finished["result"]?["matched"] == .int(2200))
        #expect(finished["result"]?["changed"] == .int(2200))
        let ids = try Self.deletedIDs(again)
        #expect(ids.count == 2200 && Set(ids).count == 2200)
        #expect(try second.count("SELECT attempt FROM jobs WHERE app_id = $1 AND job_id = $2", [app.appID, jobID]) == 2)
        #expect(try Self.allEvents(again, "job.finished").count == 1)
        #expect(
            try second.count(
                "SELECT count(*) FROM moderation_actions WHERE app_id = $1 AND action = 'remove_messages' AND source = 'job'", [app.appID]) == 1)
    }

    /// Two nodes on one database, both running jobs: every job runs once (one claim, one `job.finished`), and every
    /// message is deleted once.
    @Test func twoNodesNeverRunTheSameJobTwice() throws {
        let first = try TestServer.start()
        defer { first.stop() }
        let second = try TestServer.start(database: first.database)
        defer { second.stop() }
        let app = try first.createApp()
        let other = TestApp(server: second, appID: app.appID, key: app.key)
        let senders = (0..<8).map { "s\($0)" }
        for id in senders + ["bob"] { try app.createUser(id) }
        for sender in senders { try Self.importTexts(app, from: sender, to: "bob", count: 700, start: Self.base) }

        var jobIDs: [String] = []
        for (i, sender) in senders.enumerated() {
            let job = try Self.removal(i % 2 == 0 ? app : other, Self.removeAll(sender))
            jobIDs.append(try #require(job["job_id"]?.stringValue))
        }
        for jobID in jobIDs {
            let done = try Self.awaitState(app, jobID, "succeeded")
            #expect(done["result"]?["changed"] == .int(700))
        }
        #expect(try first.count("SELECT count(*) FROM jobs WHERE app_id = $1 AND attempt <> 1", [app.appID]) == 0)
        let finished = try Self.allEvents(app, "job.finished").compactMap { $0["data"]?["job_id"]?.stringValue }
        #expect(finished.sorted() == jobIDs.sorted())
        let ids = try Self.deletedIDs(app)
        #expect(ids.count == 5600 && Set(ids).count == 5600)
        let nodes = try first.count("SELECT count(DISTINCT node) FROM jobs WHERE app_id = $1", [app.appID])
        print("JobsTests: 8 jobs ran on \(nodes) node(s)")
    }
}
