import ParleyAPI
import ParleyCore
import ParleyDomains
import ParleyHTTP
import ParleyLive
import ParleyPostgres

/// Statistics, metrics, the OpenAPI document and the test clock (docs/operations.md#health-readiness-and-metrics).
enum OpsAPIRoutes {
    /// `hub`: the node's live hub, for the stream counts; `push`: its push bridge; `health`: the database's circuit and embedded cluster;
    /// `jobs`: its job runner.
    static func register(on api: inout API, hub: EventHub, push: PushBridge, health: DatabaseHealth, jobs: JobRunner) {
        let services = api.services
        api.builder.add(.get, "/metrics", options: RouteOptions(operationID: "getMetrics")) { request in
            if let token = services.configuration.metricsToken {
                let given = Authenticator.bearer(request.headers["Authorization"]) ?? ""
                guard Crypto.constantTimeEquals(Array(given.utf8), Array(token.utf8)) else {
                    return ProblemRendering.response(.unauthenticated("metrics token required"), requestID: request.requestID)
                }
            }
            var text = services.metrics.render()
            text += Metrics.metric("parley_db_pool_in_use", "gauge", "PostgreSQL connections running work.", services.pool.inUse)
            text += Metrics.metric("parley_db_pool_waiting", "gauge", "Jobs waiting for a PostgreSQL connection.", services.pool.waiting)
            text += Metrics.metric(
                "parley_db_stalls_total", "counter", "Times PostgreSQL stopped answering (an exchange unanswered past the timeout).",
                health.circuit.timesOpened)
            if let embedded = health.embedded {
                text += Metrics.metric(
                    "parley_embedded_postgres_restarts_total", "counter", "Restarts of the embedded PostgreSQL by its supervisor.",
                    embedded.restarts)
                text += Metrics.metric(
                    "parley_embedded_postgres_up", "gauge", "1 while the embedded PostgreSQL accepts connections.",
                    embedded.state == .running ? 1 : 0)
            }
            text += ReportMetrics.render(pool: services.pool)
            text += RetentionMetrics.render()
            text += Metrics.family("parley_sse_streams_open", "gauge", "Open SSE streams.")
            let streams = hub.openStreams()
            text += "parley_sse_streams_open{kind=\"user\"} \(streams.user)\nparley_sse_streams_open{kind=\"app\"} \(streams.app)\n"
            text += Metrics.metric(
                "parley_sse_replay_reads_total", "counter",
                "Event log reads by the stream hub for streams behind the head (resumes, catch-up); one read serves every stream in its range.",
                hub.replayReads)
            let cache = services.historyCache.figures
            text += Metrics.metric(
                "parley_history_cache_hits_total", "counter", "Newest history pages served from this node's cache, without a query.",
                cache.hits)
            text += Metrics.metric(
                "parley_history_cache_misses_total", "counter", "Newest history pages read from the database (and kept when allowed).",
                cache.misses)
            text += Metrics.metric("parley_history_cache_bytes", "gauge", "Bytes of rendered history pages this node keeps.", cache.bytes)
            let gauges = StatsService.gauges(pool: services.pool, now: services.clock.now())
            if let queue = gauges.webhookQueue {
                text += services.webhooks.metrics.render(queueDepth: Int(queue.depth), oldestPendingSeconds: Double(queue.oldestMillis) / 1000)
            }
            if let depth = gauges.pushQueueDepth {
                text += push.metrics.render(queueDepth: depth)
            }
            if let heads = gauges.eventHeads {
                text += Metrics.family("parley_event_log_head", "gauge", "Newest event id per app.")
                for (app, head) in heads { text += "parley_event_log_head{app_id=\"\(Metrics.escape(app))\"} \(head)\n" }
            }
            if let usage = gauges.fileUsage {
                text += Metrics.family("parley_files_stored", "gauge", "Live files per app.")
                for (app, files, _) in usage { text += "parley_files_stored{app_id=\"\(Metrics.escape(app))\"} \(files)\n" }
                text += Metrics.family("parley_file_stored_bytes", "gauge", "Stored bytes per app (each stored byte sequence once).")
                for (app, _, bytes) in usage { text += "parley_file_stored_bytes{app_id=\"\(Metrics.escape(app))\"} \(bytes)\n" }
            }
            text += jobs.metrics(pool: services.pool)
            text += ScheduledSending.metrics(services: services)
            return Response(status: 200, headers: ["Content-Type": "text/plain; version=0.0.4; charset=utf-8"], body: Array(text.utf8))
        }

        api.builder.add(.get, "/openapi.json", options: RouteOptions(runsOnEventLoop: true, operationID: "getOpenAPI")) { request in
            guard let document = OpenAPIDocument.bytes else {
                return ProblemRendering.response(APIError(.notFound, "openapi.json is not installed"), requestID: request.requestID)
            }
            return .json(document)
        }

        api.add(.get, "/v1/stats", .app, "getStats") { ctx in
            let appStats = try StatsService.appStats(appID: ctx.appID, now: ctx.now, on: ctx.db)
            let stats = appStats.counts
            var o = JSONObjectWriter()
            o["users_total"] = stats.usersTotal
            o["users_online"] = stats.usersOnline
            o["groups_total"] = stats.groupsTotal
            o["messages_stored_total"] = stats.messagesStored
            o["messages_24h"] = stats.messagesSince
            // User streams on every node, app-level streams on this one (they are not recorded in the database).
            o["streams_open"] = stats.userStreams + Int64(hub.openStreams(appID: ctx.appID).app)
            o["rooms_active"] = stats.roomsActive
            o["calls_active"] = appStats.callsActive
            o["event_log_head"] = String(stats.eventLogHead)
            o["event_log_trim_point"] = String(stats.eventLogTrimPoint)
            o["webhook_pending"] = stats.webhookPending
            o["webhook_dead_24h"] = stats.webhookDeadSince
            o["push_sent_24h"] = appStats.pushSent
            o["push_failed_24h"] = appStats.pushFailed
            o["files_total"] = appStats.files.files
            o["file_bytes_total"] = appStats.files.bytes
            o["generated_at"] = ctx.now
            return Reply.json(o.finish())
        }

        api.add(.get, "/v1/stats/series", .app, "getStatsSeries") { ctx in
            var query = ctx.query()
            let rangeName = query.choice("range", StatsSeries.ranges.map(\.name)) ?? "1h"
            var metrics = StatsSeries.metrics
            if let listed = query.list("metrics", maxItems: StatsSeries.metrics.count * 2) {
                let unknown = listed.filter { !StatsSeries.metrics.contains($0) }
                if !unknown.isEmpty || listed.isEmpty {
                    query.addError("metrics", "must be a comma-separated list of " + StatsSeries.metrics.joined(separator: ", "))
                } else {
                    metrics = StatsSeries.metrics.filter(listed.contains)
                }
            }
            try query.check()
            let range = StatsSeries.ranges.first { $0.name == rangeName }!
            let answer = try StatsSeries.series(appID: ctx.appID, range: range, metrics: metrics, now: ctx.now, on: ctx.db)
            var w = JSONWriter()
            w.object { w in
                w.key("range")
                w.writeString(range.name)
                w.key("step_s")
                w.writeInt(range.stepMillis / 1000)
                w.key("from")
                w.writeInt(answer.from)
                w.key("to")
                w.writeInt(answer.to)
                w.key("generated_at")
                w.writeInt(ctx.now)
                w.key("series")
                w.object { w in
                    for (metric, values) in answer.series {
                        w.key(metric)
                        w.array { w in
                            for value in values {
                                if let value { w.writeInt(Int64(value.rounded())) } else { w.writeNull() }
                            }
                        }
                    }
                }
            }
            return Reply.json(w.bytes)
        }

        api.addAdmin(.get, "/v1/test/clock", "getTestClock") { ctx in
            try clockResponse(ctx)
        }
        api.addAdmin(.post, "/v1/test/clock/advance", "advanceTestClock") { ctx in
            guard ctx.services.clock.isTestClock else { throw APIError(.notFound, "the test clock is disabled") }
            var body = try ctx.body()
            let ms = body.int("ms", required: true, range: 1...(10 * 365 * 86_400_000))
            try body.check()
            ctx.services.clock.advance(by: ms!)
            ctx.services.timers.fireDue(services: ctx.services, now: ctx.services.clock.now())
            // Webhook and push retries may have become due.
            ctx.services.webhooks.dispatcher.poke()
            push.poke()
            // The timers' events (in any app) are in the log before the answer, like those of any write.
            let answer = try clockResponse(ctx)
            let sequencer = ctx.services.sequencer
            return .later { respond in sequencer.publishAll { respond(answer) } }
        }
    }

    private static func clockResponse(_ ctx: AdminContext) throws -> Response {
        let clock = ctx.services.clock
        guard clock.isTestClock else { throw APIError(.notFound, "the test clock is disabled") }
        var o = JSONObjectWriter()
        o["now"] = clock.now()
        o["offset_ms"] = clock.offsetMillis
        return Reply.json(o.finish())
    }
}
