import Glibc
import ParleyAPI
import ParleyCore
import ParleyPostgres
import Synchronization

/// The purge (docs/retention.md#runs): deletes the messages older than their policy allows, except those a legal
/// hold covers, and records each run. The only purge of messages: the app setting `history_retention_days` is the
/// app policy when the app has none.
///
/// Sequences are untouched, so numbering continues after a purge and seqs are never reused
/// (docs/messages.md#sequence-numbers); `client_msg_id` keys stay, so a retried send of a purged message answers with
/// its tombstone (docs/messages.md#deduplication-with-client_msg_id). The combine snapshots of purged type-100
/// messages go with them.
///
/// Deletes in batches of ``batchSize`` rows, each one statement in its own transaction: a batch locks the message rows
/// it deletes only (never a conversation's sequence head, which sends lock), so sends and reads of the same
/// conversations go on; concurrent runs only delete the same rows once. Not a job: a run derives its work from the
/// messages' ages, so a run cut short loses nothing the next hourly run does not do (docs/retention.md#runs).
package enum RetentionPurge {
    static let batchSize = 1_000
    /// A run still unfinished this long after it started was cut short (its node stopped).
    static let staleMillis: Int64 = 6 * 3_600_000

    /// Hourly, every app with a policy or a `history_retention_days`: one real run each.
    package static let kind = TimerKind(name: "retention_purge", everyMillis: 3_600_000, fire: fire)

    private static func fire(services: Services, now: Int64) throws -> Int {
        let apps = try services.pool.withConnection { db in try RetentionStore.appsWithRetention(on: db) }
        var purged: Int64 = 0
        for appID in apps {
            let done = try services.pool.withConnection { db -> RetentionRun in
                try RetentionStore.failStale(
                    appID: appID, before: now - staleMillis, error: "interrupted: the node running it stopped; later runs purge what it left",
                    now: now, on: db)
                return try run(RetentionRun(runID: newRunID(), startedAt: now, dryRun: false), appID: appID, services: services, now: now, on: db)
            }
            purged += done.messagesPurged
        }
        return Int(purged)
    }

    private static func rest(after took: Duration) {
        let millis = min(Int64(JobKind.maxRestMillis), took.components.seconds * 1000 + took.components.attoseconds / 1_000_000_000_000_000)
        if millis > 0 { usleep(useconds_t(millis * 1000)) }
    }

    static func newRunID() -> String { IdentifierKind.generateID(prefix: "rr_", length: 22) }

    /// `POST /v1/retention/runs` with `dry_run: false`: records the run started now and runs it on a pool worker;
    /// returns it as started.
    static func start(appID: String, services: Services, now: Int64, on db: PostgresConnection) throws -> RetentionRun {
        let run = RetentionRun(runID: newRunID(), startedAt: now, dryRun: false)
        try RetentionStore.insertRun(appID: appID, run, on: db)
        services.pool.submit(
            {
                _ = try? services.pool.withConnection { db in
                    try Self.run(run, appID: appID, services: services, now: now, on: db, recorded: true)
                }
            },
            rejected: {
                var failed = run
                (failed.finishedAt, failed.error) = (now, "not run: the server's workers were saturated")
                _ = try? services.pool.withConnection { db in try RetentionStore.finishRun(appID: appID, failed, on: db) }
            })
        return run
    }

    /// One run of `appID` at `now` (a dry run counts and changes nothing), recorded in the run log (`recorded`: its row
    /// exists already); a real run writes `retention.purged`. A failure ends the run with its `error` set.
    @discardableResult
    static func run(
        _ run: RetentionRun, appID: String, services: Services, now: Int64, on db: PostgresConnection, recorded: Bool = false
    ) throws -> RetentionRun {
        var run = run
        if !recorded { try RetentionStore.insertRun(appID: appID, run, on: db) }
        do {
            let rules = try rules(appID: appID, now: now, on: db)
            run.policies = rules.compactMap(\.policyID)
            let removeObjects = MessageFiles.objectRemover(services)
            for rule in rules {
                if run.dryRun {
                    let would = try RetentionStore.count(appID: appID, rule.selection, held: false, on: db)
                    run.messagesPurged += would.messages
                    if rule.purgeFiles { run.filesPurged += would.files }
                } else {
                    while true {
                        let started = ContinuousClock.now
                        let batch = try RetentionStore.purgeBatch(appID: appID, rule.selection, limit: batchSize, on: db)
                        run.messagesPurged += batch.count
                        // Its event comes with the run's end: the pages go with each batch.
                        if batch.count > 0 { CommitObservers.changedWithoutEvents(appID: appID, cache: services.historyCache, on: db) }
                        if rule.purgeFiles && !batch.fileIDs.isEmpty {
                            run.filesPurged += Int64(
                                try db.transaction { db in
                                    try MessageFiles.release(batch.fileIDs, appID: appID, removeObjects: removeObjects, now: now, on: db)
                                })
                        }
                        if batch.count < batchSize { break }
                        // Rest as long as the batch took (at most as long as a job rests): a purge then takes at most
                        // about half of one core of the database, leaving the rest to requests, as a job does.
                        Self.rest(after: ContinuousClock.now - started)
                    }
                }
                run.heldSkipped += try RetentionStore.count(appID: appID, rule.selection, held: true, on: db).messages
            }
        } catch {
            run.error = "the run failed: \(error)"
        }
        run.finishedAt = services.clock.now()
        let finished = run
        try db.transaction { db in
            try RetentionStore.finishRun(appID: appID, finished, on: db)
            if !finished.dryRun {
                var data = JSONObjectWriter(capacity: 256)
                data.raw("run", finished.json())
                try EventLog.append([NewEvent(type: "retention.purged", data: data.finish(), orderKey: "app")], appID: appID, now: now, on: db)
            }
        }
        if !run.dryRun {
            services.sequencer.poke(appID)
            RetentionMetrics.ran(run)
        }
        return run
    }

    /// What a run applies: each policy to the messages no more specific policy covers, most specific first; with no
    /// app policy, `history_retention_days` (when set) as the app policy, purging files as the app's
    /// `delete_files_with_messages` says.
    struct Rule {
        var policyID: String?
        var selection: RetentionStore.Selection
        var purgeFiles: Bool
    }

    static func rules(appID: String, now: Int64, on db: PostgresConnection) throws -> [Rule] {
        var policies: [RetentionPolicy] = []
        while true {
            let page = try RetentionStore.policies(
                appID: appID, after: policies.last.map { ($0.createdAt, $0.policyID) }, limit: 1000, on: db)
            policies += page
            if page.count < 1000 { break }
        }
        let conversations = policies.filter { $0.scope.rank == 2 }
        let types = policies.filter { $0.scope.rank == 1 }
        func horizon(_ days: Int64) -> Int64 { now - days * 86_400_000 }
        var rules: [Rule] = conversations.map {
            Rule(
                policyID: $0.policyID,
                selection: .init(convType: $0.scope.type.rawValue, convID: $0.scope.target, horizon: horizon($0.maxAgeDays)),
                purgeFiles: $0.purgeFiles)
        }
        for policy in types {
            let type = policy.scope.type.rawValue
            let except = conversations.filter { $0.scope.type == policy.scope.type }.map { type + ":" + $0.scope.target }
            rules.append(
                Rule(
                    policyID: policy.policyID, selection: .init(convType: type, except: except, horizon: horizon(policy.maxAgeDays)),
                    purgeFiles: policy.purgeFiles))
        }
        let exceptTypes = types.map(\.scope.type.rawValue)
        let except = conversations.map { $0.scope.type.rawValue + ":" + $0.scope.target }
        if let app = policies.first(where: { $0.scope.rank == 0 }) {
            rules.append(
                Rule(
                    policyID: app.policyID, selection: .init(exceptTypes: exceptTypes, except: except, horizon: horizon(app.maxAgeDays)),
                    purgeFiles: app.purgeFiles))
        } else if let history = try RetentionStore.historyRetention(appID: appID, on: db), history.days > 0 {
            rules.append(
                Rule(
                    policyID: nil, selection: .init(exceptTypes: exceptTypes, except: except, horizon: horizon(history.days)),
                    purgeFiles: history.deleteFiles))
        }
        return rules
    }
}

/// The retention part of `/metrics` (docs/retention.md#metrics): what this node's real runs purged.
package enum RetentionMetrics {
    private static let totals = Mutex<(runs: Int, failed: Int, messages: Int64, files: Int64, held: Int64)>((0, 0, 0, 0, 0))

    static func ran(_ run: RetentionRun) {
        totals.withLock {
            $0.runs += 1
            if run.error != nil { $0.failed += 1 }
            $0.messages += run.messagesPurged
            $0.files += run.filesPurged
            $0.held += run.heldSkipped
        }
    }

    package static func render() -> String {
        let t = totals.withLock { $0 }
        var out = Metrics.family("parley_retention_runs_total", "counter", "Real retention runs this node did, by outcome.")
        out += "parley_retention_runs_total{outcome=\"ok\"} \(t.runs - t.failed)\nparley_retention_runs_total{outcome=\"failed\"} \(t.failed)\n"
        out += Metrics.metric("parley_retention_purged_messages_total", "counter", "Messages this node's retention runs purged.", t.messages)
        out += Metrics.metric("parley_retention_purged_files_total", "counter", "Files this node's retention runs purged.", t.files)
        out += Metrics.metric(
            "parley_retention_held_skipped_total", "counter", "Messages due for purge that a legal hold kept (counted per run).", t.held)
        return out
    }
}
