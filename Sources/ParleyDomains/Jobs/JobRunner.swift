import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres
import ParleySync

/// The node's job runner (docs/jobs.md#guarantees): one thread that claims runnable jobs of any app and runs them, a
/// step per transaction, borrowing a pool connection for each step only (requests get the connection back between
/// steps).
///
/// Exactly once across nodes: a job is claimed with `FOR UPDATE SKIP LOCKED` under a lease on the database's clock,
/// renewed by every step; each step locks the job row, checks that its claim is still the current one and commits its
/// effects with its checkpoint and progress. A node that dies or stops mid-job (a stop waits for the running step, then
/// leaves the job as it is) loses the lease when it expires, and whichever node claims the job next resumes it from the
/// last committed checkpoint; a step of the old claim that still runs then commits nothing.
///
/// Owner: `ticks` holds the thread (its wait is the poll interval and the pause between steps; a stop ends it once the
/// running step committed); `finished` counts the jobs this node finished, by "kind state" (`/metrics`). The kinds are
/// fixed at construction.
package final class JobRunner: Sendable {
    private let kinds: [String: JobKind]
    /// This process's name in `jobs.node` (diagnostics only: claims are told apart by `attempt`).
    let node: String
    private let leaseMillis: Int64
    private let stepPauseMillis: Int
    private let ticks = WorkerInbox<Void>(())
    private let finished = LockedValue<[String: Int]>([:])

    /// `kinds`: every job kind of the server (the app layer lists them, App/Routes.swift). `leaseMillis`: how long a
    /// claim holds without a step (a dead node's job is resumed that long after its last step). `stepPauseMillis`: a
    /// pause after each step, leaving the database to requests.
    package init(kinds: [JobKind], leaseMillis: Int64 = 30_000, stepPauseMillis: Int = 0) {
        self.kinds = Dictionary(kinds.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        node = "node-" + String(UInt64.random(in: 0...UInt64.max), radix: 36)
        self.leaseMillis = leaseMillis
        self.stepPauseMillis = stepPauseMillis
    }

    /// The kind registered as `name` (the routes that create jobs of it take it from here).
    package func kind(_ name: String) -> JobKind? { kinds[name] }

    /// Starts the runner: it looks for runnable jobs every `intervalMillis` (and at once after ``poke()``).
    package func start(services: Services, intervalMillis: Int = 250) {
        guard !kinds.isEmpty else { return }
        ticks.start(name: "parley-jobs") { [self] _ in
            while ticks.take(waitMillis: intervalMillis, { _ in }) != nil {
                if services.pool.configuration.circuit?.isOpen == true { continue }
                // Run jobs back to back while there are runnable ones.
                while ticks.ifRunning({ _ in true }) == true, runOne(services: services) {}
            }
        }
    }

    /// A job was created: look now rather than at the next interval.
    package func poke() { ticks.poke() }

    /// Stops the runner after its running step (the job stays claimed until its lease expires, then resumes on any
    /// node) and waits for its thread.
    package func stop() { ticks.stop() }

    /// Claims one runnable job and runs it until it ends, the runner stops, or the claim is lost; false when there was
    /// none to claim (or the database did not answer).
    private func runOne(services: Services) -> Bool {
        let claimed: (appID: String, job: BackgroundJob)?
        do {
            claimed = try services.pool.transaction { db in
                try JobStore.claim(node: node, leaseMillis: leaseMillis, now: services.clock.now(), on: db)
            }
        } catch {
            services.logger.warning("msg=\"job claim failed\" error=\"\(error)\"")
            return false
        }
        guard let (appID, job) = claimed else { return false }
        services.logger.info("msg=\"job claimed\" app_id=\(appID) job_id=\(job.jobID) kind=\(job.kind) attempt=\(job.attempt)")
        guard let kind = kinds[job.kind] else {
            fail(services: services, appID: appID, job: job, APIError(.internalError, "this server does not know job kind \(job.kind)"))
            return true
        }
        while true {
            let result: JobService.StepResult
            let stepStart = EventLoop.monotonicMillis()
            do {
                result = try services.pool.withConnection { db in
                    let result = try JobService(db: db, appID: appID, now: services.clock.now()).step(
                        job.jobID, attempt: job.attempt, kind: kind, leaseMillis: leaseMillis)
                    // The step committed; it may have changed history without an event (a moderation job's hiding, an
                    // import's messages): the notice goes on the same connection.
                    if case .lost = result {} else { CommitObservers.changedWithoutEvents(appID: appID, cache: services.historyCache, on: db) }
                    return result
                }
            } catch let error as APIError {
                fail(services: services, appID: appID, job: job, error)
                return true
            } catch let error as PostgresError where error.isConnectionFailure || error.kind == .poolTimeout || error.kind == .poolClosed {
                // The database is away (or this node is stopping): the claim lapses and the job resumes from its last
                // checkpoint, here or elsewhere.
                services.logger.warning("msg=\"job step interrupted\" app_id=\(appID) job_id=\(job.jobID) error=\"\(error)\"")
                return false
            } catch {
                services.logger.error("msg=\"job step failed\" app_id=\(appID) job_id=\(job.jobID) error=\"\(error)\"")
                fail(services: services, appID: appID, job: job, APIError(.internalError, "the job failed on an internal error"))
                return true
            }
            services.sequencer.poke(appID)
            switch result {
            case .advanced:
                // The kind's rest (a share of the step's time), or the configured pause when longer.
                let stepMillis = EventLoop.monotonicMillis() - stepStart
                let rest = max(stepPauseMillis, min(JobKind.maxRestMillis, Int(Double(stepMillis) * kind.restRatio)))
                let running = rest > 0 ? ticks.take(waitMillis: rest, { _ in }) != nil : ticks.ifRunning({ _ in true }) != nil
                if !running { return false }
            case .finished(let ended):
                count(ended)
                return true
            case .lost:
                services.logger.info("msg=\"job claim lost\" app_id=\(appID) job_id=\(job.jobID)")
                return true
            }
        }
    }

    private func fail(services: Services, appID: String, job: BackgroundJob, _ error: APIError) {
        do {
            let failed = try services.pool.withConnection { db in
                try JobService(db: db, appID: appID, now: services.clock.now()).fail(
                    job.jobID, attempt: job.attempt, problem: BackgroundJob.problem(error))
            }
            services.sequencer.poke(appID)
            if let failed { count(failed) }
        } catch {
            services.logger.warning("msg=\"job failure not recorded\" app_id=\(appID) job_id=\(job.jobID) error=\"\(error)\"")
        }
    }

    private func count(_ job: BackgroundJob) {
        finished.withLock { $0["\(job.kind) \(job.state.rawValue)", default: 0] += 1 }
    }

    /// The runner's part of `/metrics`: jobs not finished in the database by kind and state (every node reports the
    /// same), and the jobs this node finished by kind and state.
    package func metrics(pool: PostgresPool) -> String {
        var text = Metrics.family("parley_jobs_unfinished", "gauge", "Queued and running jobs of every app, by kind and state.")
        if let counts = try? pool.withConnection({ db in try JobStore.unfinishedCounts(on: db) }) {
            for (kind, state, count) in counts {
                text += "parley_jobs_unfinished{kind=\"\(Metrics.escape(kind))\",state=\"\(state)\"} \(count)\n"
            }
        }
        text += Metrics.family("parley_jobs_finished_total", "counter", "Jobs this node finished, by kind and final state.")
        for (key, count) in finished.withLock({ $0 }).sorted(by: { $0.key < $1.key }) {
            let parts = key.split(separator: " ")
            text += "parley_jobs_finished_total{kind=\"\(Metrics.escape(String(parts[0])))\",state=\"\(parts[1])\"} \(count)\n"
        }
        return text
    }
}
