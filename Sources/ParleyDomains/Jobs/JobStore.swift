import ParleyAPI
import ParleyCore
import ParleyPostgres

/// SQL of the `jobs` table (docs/jobs.md). No rules here.
enum JobStore {
    private static let columns = """
        job_id, kind, state, params::text, checkpoint::text, progress_done, progress_total, result::text, problem::text, created_at,
        started_at, finished_at, cancel_requested, attempt::bigint
        """

    /// ``columns`` of the table aliased `j`.
    private static let qualifiedColumns = """
        j.job_id, j.kind, j.state, j.params::text, j.checkpoint::text, j.progress_done, j.progress_total, j.result::text, j.problem::text,
        j.created_at, j.started_at, j.finished_at, j.cancel_requested, j.attempt::bigint
        """

    /// The database's clock in ms: leases are on it, so nodes whose clocks disagree still agree on who holds a job.
    private static let databaseNow = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"

    private static func text(_ object: JSONObject) -> String { String(decoding: JSONValue.object(object).serialized(), as: UTF8.self) }

    private static func object(_ text: String?) -> JSONObject? {
        guard let text else { return nil }
        return (try? JSONValue.parse(Array(text.utf8)))?.objectValue
    }

    private static func job(_ row: PostgresRow) throws -> BackgroundJob { try job(row, at: 0) }

    private static func job(_ row: PostgresRow, at offset: Int) throws -> BackgroundJob {
        let (
            jobID, kind, state, params, checkpoint, done, total, result, problem, createdAt, startedAt, finishedAt, cancelRequested, attempt
        ) = try row.decode(
            (String, String, String, String, String, Int64, Int64?, String?, String?, Int64, Int64?, Int64?, Bool, Int64).self, at: offset)
        guard let state = BackgroundJob.State(rawValue: state) else { throw APIError(.internalError, "job \(jobID) has state \(state)") }
        return BackgroundJob(
            jobID: jobID, kind: kind, state: state, params: object(params) ?? [:], checkpoint: object(checkpoint) ?? [:], done: done,
            total: total, result: object(result), problem: object(problem), createdAt: createdAt, startedAt: startedAt,
            finishedAt: finishedAt, cancelRequested: cancelRequested, attempt: attempt)
    }

    static func insert(appID: String, _ job: BackgroundJob, on db: PostgresConnection) throws {
        try db.query(
            """
            INSERT INTO jobs (app_id, job_id, kind, state, params, checkpoint, progress_total, created_at)
            VALUES (\(appID), \(job.jobID), \(job.kind), \(job.state.rawValue), \(text(job.params))::jsonb, \(text(job.checkpoint))::jsonb,
                    \(job.total), \(job.createdAt))
            """)
    }

    static func fetch(appID: String, jobID: String, forUpdate: Bool = false, on db: PostgresConnection) throws -> BackgroundJob? {
        try db.query(
            """
            SELECT \(unsafeSQL: columns) FROM jobs WHERE app_id = \(appID) AND job_id = \(jobID) \(unsafeSQL: forUpdate ? "FOR UPDATE" : "")
            """
        ).first.map(job)
    }

    /// `GET /v1/jobs`: newest first (created_at, then job_id, descending), after the cursor position `before`.
    static func list(
        appID: String, kind: String?, state: BackgroundJob.State?, before: (Int64, String)?, limit: Int, on db: PostgresConnection
    ) throws -> [BackgroundJob] {
        var query: PostgresQuery = "SELECT \(unsafeSQL: columns) FROM jobs WHERE app_id = \(appID)"
        if let kind { query += " AND kind = \(kind)" }
        if let state {
            // Queued and running jobs are few beside the finished ones an app keeps: the constant predicate lets the
            // plan walk the partial index `jobs_unfinished` (a generic plan cannot prove it from the parameter alone)
            // instead of every job of the app (1 M jobs: 0.05 ms against 137 ms for an app with none running).
            if state == .queued || state == .running { query += " AND state IN ('queued', 'running')" }
            query += " AND state = \(state.rawValue)"
        }
        if let (t, id) = before { query += " AND (created_at, job_id) < (\(t), \(id))" }
        query += " ORDER BY created_at DESC, job_id DESC LIMIT \(limit)"
        return try db.query(query).rows.map(job)
    }

    /// Claims the oldest runnable job of any app — queued, or running with its lease expired (its node died or
    /// stopped) — skipping the ones another node is claiming: it becomes `running` under a new `attempt` held by
    /// `node` for `leaseMillis` of the database's clock. Returns its app and the job.
    static func claim(node: String, leaseMillis: Int64, now: Int64, on db: PostgresConnection) throws -> (appID: String, job: BackgroundJob)? {
        let result = try db.query(
            """
            WITH next AS (
                SELECT app_id, job_id FROM jobs
                WHERE state IN ('queued', 'running') AND (lease_until IS NULL OR lease_until < \(unsafeSQL: databaseNow))
                ORDER BY created_at, job_id LIMIT 1 FOR UPDATE SKIP LOCKED)
            UPDATE jobs j SET state = 'running', node = \(node), attempt = j.attempt + 1,
                   lease_until = \(unsafeSQL: databaseNow) + \(leaseMillis), started_at = coalesce(j.started_at, \(now))
            FROM next WHERE j.app_id = next.app_id AND j.job_id = next.job_id
            RETURNING j.app_id, \(unsafeSQL: qualifiedColumns)
            """)
        guard let row = result.first else { return nil }
        return (try row.decode(String.self, at: 0), try job(row, at: 1))
    }

    /// Writes a step's checkpoint and progress and renews the lease (the row is locked by the step).
    static func advance(
        appID: String, jobID: String, checkpoint: JSONObject, progress: Int64, leaseMillis: Int64, on db: PostgresConnection
    ) throws {
        try db.query(
            """
            UPDATE jobs SET checkpoint = \(text(checkpoint))::jsonb, progress_done = progress_done + \(progress),
                   lease_until = \(unsafeSQL: databaseNow) + \(leaseMillis)
            WHERE app_id = \(appID) AND job_id = \(jobID)
            """)
    }

    /// Ends a job (locked) in `state` with its result or problem; returns it as it is now.
    static func finish(
        appID: String, jobID: String, state: BackgroundJob.State, progress: Int64, result: JSONObject?, problem: JSONObject?, now: Int64,
        on db: PostgresConnection
    ) throws -> BackgroundJob? {
        try db.query(
            """
            UPDATE jobs SET state = \(state.rawValue), progress_done = progress_done + \(progress), result = \(result.map(text))::jsonb,
                   problem = \(problem.map(text))::jsonb, finished_at = \(now), lease_until = NULL
            WHERE app_id = \(appID) AND job_id = \(jobID)
            RETURNING \(unsafeSQL: columns)
            """
        ).first.map(job)
    }

    /// Marks a running job (locked) for cancelling before its next step.
    static func requestCancel(appID: String, jobID: String, on db: PostgresConnection) throws {
        try db.query("UPDATE jobs SET cancel_requested = true WHERE app_id = \(appID) AND job_id = \(jobID)")
    }

    /// Gives up the lease of a job this node stops running (shutdown, a database outage): another node (or this one)
    /// takes it at once instead of after the lease.
    static func release(appID: String, jobID: String, attempt: Int64, on db: PostgresConnection) throws {
        try db.query(
            "UPDATE jobs SET lease_until = NULL WHERE app_id = \(appID) AND job_id = \(jobID) AND attempt = \(attempt) AND state = 'running'")
    }

    /// The unfinished jobs of every app by kind and state (`/metrics`).
    static func unfinishedCounts(on db: PostgresConnection) throws -> [(kind: String, state: String, count: Int64)] {
        try db.query("SELECT kind, state, count(*) FROM jobs WHERE state IN ('queued', 'running') GROUP BY kind, state ORDER BY kind, state")
            .decode((String, String, Int64).self).map { ($0.0, $0.1, $0.2) }
    }
}
