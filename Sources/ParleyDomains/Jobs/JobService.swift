import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The job rules (docs/jobs.md): creating a job of a kind, reading and listing, cancelling, and how a step and the end
/// of a job are written (for ``JobRunner``).
package struct JobService: DomainService {
    package let db: PostgresConnection
    package let appID: String
    package let now: Int64

    package init(db: PostgresConnection, appID: String, now: Int64) {
        self.db = db
        self.appID = appID
        self.now = now
    }

    static func notFound(_ jobID: String) -> APIError { APIError(.jobNotFound, "job \(jobID) does not exist") }

    /// Creates a `queued` job of `kind` for `params` (the request, as its kind reads it): the kind's `plan` validates it
    /// and counts the work in the same transaction, so a refused request creates no job. A runner of any node picks it
    /// up within a quarter of a second.
    package func create(_ kind: JobKind, params: JSONObject, settings: AppSettings) throws -> BackgroundJob {
        try db.transaction { db in
            let plan = try kind.plan(params, settings, JobKind.Context(db: db, appID: appID, now: now))
            let job = BackgroundJob(
                jobID: IdentifierKind.generateSortableID(prefix: "job", timestampMs: now), kind: kind.name, state: .queued, params: params,
                checkpoint: plan.checkpoint, done: 0, total: plan.total, result: nil, problem: nil, createdAt: now, startedAt: nil,
                finishedAt: nil, cancelRequested: false, attempt: 0)
            try JobStore.insert(appID: appID, job, on: db)
            return job
        }
    }

    package func get(_ jobID: String) throws -> BackgroundJob {
        guard let job = try JobStore.fetch(appID: appID, jobID: jobID, on: db) else { throw Self.notFound(jobID) }
        return job
    }

    /// Newest first; `before` is the cursor position (created_at, job_id) of the previous page's last job.
    package func list(kind: String?, state: BackgroundJob.State?, before: (Int64, String)?, limit: Int) throws -> [BackgroundJob] {
        try JobStore.list(appID: appID, kind: kind, state: state, before: before, limit: limit, on: db)
    }

    /// `DELETE /v1/jobs/{job_id}` (docs/jobs.md#cancelling): a queued job is cancelled at once (with its
    /// `job.finished`); a running one is marked and its runner stops before its next step, so it answers still
    /// `running`. A finished job → 409 `job_finished`.
    package func cancel(_ jobID: String) throws -> BackgroundJob {
        try db.transaction { db in
            guard var job = try JobStore.fetch(appID: appID, jobID: jobID, forUpdate: true, on: db) else { throw Self.notFound(jobID) }
            switch job.state {
            case .succeeded, .failed, .cancelled:
                throw APIError(.jobFinished, "job \(jobID) has already finished (\(job.state.rawValue))")
            case .queued:
                return try finish(job, .cancelled, progress: 0, result: nil, problem: nil, on: db)
            case .running:
                try JobStore.requestCancel(appID: appID, jobID: jobID, on: db)
                job.cancelRequested = true
                return job
            }
        }
    }

    /// Ends `job` (locked) in `state` and appends its `job.finished` (docs/jobs.md#events): audience none, to the app's
    /// streams and webhooks, ordered by the app.
    func finish(
        _ job: BackgroundJob, _ state: BackgroundJob.State, progress: Int64, result: JSONObject?, problem: JSONObject?, on db: PostgresConnection
    ) throws -> BackgroundJob {
        guard
            let finished = try JobStore.finish(
                appID: appID, jobID: job.jobID, state: state, progress: progress, result: result, problem: problem, now: now, on: db)
        else { throw Self.notFound(job.jobID) }
        try EventLog.append([NewEvent(type: "job.finished", data: finished.json(), orderKey: "app")], appID: appID, now: now, on: db)
        return finished
    }

    /// What a step of the runner found.
    enum StepResult {
        /// The step committed; more steps follow.
        case advanced
        /// The job finished (succeeded, or cancelled before this step).
        case finished(BackgroundJob)
        /// The job is no longer this claim's: another node took it over, or it finished meanwhile. Nothing was written.
        case lost
    }

    /// One step of `jobID` under claim `attempt`, in one transaction: locks the job, checks the claim is still the
    /// current one (a node that lost its lease writes nothing), stops a job whose cancel was requested, runs the kind's
    /// step and writes its checkpoint and progress — or the result and `job.finished` — with the step's own writes.
    func step(_ jobID: String, attempt: Int64, kind: JobKind, leaseMillis: Int64) throws -> StepResult {
        try db.transaction { db in
            guard let job = try JobStore.fetch(appID: appID, jobID: jobID, forUpdate: true, on: db), job.state == .running,
                job.attempt == attempt
            else { return .lost }
            if job.cancelRequested { return .finished(try finish(job, .cancelled, progress: 0, result: nil, problem: nil, on: db)) }
            let outcome = try kind.step(job.params, job.checkpoint, JobKind.Context(db: db, appID: appID, now: now))
            if let checkpoint = outcome.checkpoint {
                try JobStore.advance(
                    appID: appID, jobID: jobID, checkpoint: checkpoint, progress: outcome.progress, leaseMillis: leaseMillis, on: db)
                return .advanced
            }
            return .finished(try finish(job, .succeeded, progress: outcome.progress, result: outcome.result ?? [:], problem: nil, on: db))
        }
    }

    /// Fails `jobID` (still under claim `attempt`) with `problem`: the step that threw rolled back.
    func fail(_ jobID: String, attempt: Int64, problem: JSONObject) throws -> BackgroundJob? {
        try db.transaction { db in
            guard let job = try JobStore.fetch(appID: appID, jobID: jobID, forUpdate: true, on: db), job.state == .running,
                job.attempt == attempt
            else { return nil }
            return try finish(job, .failed, progress: 0, result: nil, problem: problem, on: db)
        }
    }
}
