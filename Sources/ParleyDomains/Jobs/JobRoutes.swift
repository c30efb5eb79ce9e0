import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Jobs (docs/jobs.md): HTTP ↔ ``JobService``. The routes that create jobs belong to their domains
/// (`POST /v1/moderation/remove_messages` to Messages) and answer 202 with ``Reply/accepted(_:)``.
package enum JobRoutes {
    package static func register(on api: inout API) {
        api.add(.get, "/v1/jobs", .app, "listJobs") { ctx in
            var query = ctx.query()
            let limit = query.limit()
            let kind = query.string("kind", maxBytes: 64)
            let stateName = query.string("state")
            let cursor = query.cursor()
            var state: BackgroundJob.State?
            if let stateName {
                state = BackgroundJob.State(rawValue: stateName)
                if state == nil { query.addError("state", "expected one of " + BackgroundJob.State.allCases.map(\.rawValue).joined(separator: ", ")) }
            }
            try query.check()
            let list = "jobs|\(ctx.appID)|\(kind ?? "")|\(stateName ?? "")"
            let before = try ctx.timeAndIDCursor(cursor, list: list)
            let jobs = try JobService(ctx).list(kind: kind, state: state, before: before, limit: limit + 1)
            return ListPage.page(jobs, limit: limit, list: list, ctx: ctx, { [.int($0.createdAt), .string($0.jobID)] }) { $0.json() }
        }

        api.add(.get, "/v1/jobs/{job_id}", .app, "getJob") { ctx in
            let jobID = try ctx.pathID("job_id", .opaque)
            return Reply.json(try JobService(ctx).get(jobID).json())
        }

        api.add(.delete, "/v1/jobs/{job_id}", .app, "cancelJob") { ctx in
            let jobID = try ctx.pathID("job_id", .opaque)
            return Reply.json(try JobService(ctx).cancel(jobID).json())
        }
    }
}

extension Reply {
    /// 202 with the Job a request created (docs/jobs.md#the-job-object).
    package static func accepted(_ job: BackgroundJob) -> Response { Reply.json(job.json(), status: 202) }
}
