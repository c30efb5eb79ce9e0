import Dispatch
import Glibc
import ParleyHTTP
import ParleyTesting
import Synchronization
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// The SSE streams (docs/events.md#live-streams-server-sent-events) end to end: real server, real database, a real HTTP
/// stream reader.
@Suite("Live streams")
struct LiveStreamTests: ProblemAssertions {

    @Test func streamOpensWithRetryHeadersAndTheHead() throws {
        try withApp { server, app in
            try app.createUser("u1")
            let head = try LiveStreams.head(app)
            let stream = try LiveStreams.open(server, "/v1/events", bearer: app.key)
            defer { stream.close() }
            #expect(stream.status == 200)
            #expect(stream.headers["Content-Type"] == "text/event-stream")
            #expect(stream.headers["Cache-Control"] == "no-store")
            #expect(stream.headers["X-Accel-Buffering"] == "no")
            #expect(stream.headers["Parley-Last-Event-ID"] == String(head))
            #expect(try stream.nextLine(timeout: .seconds(5)) == "retry: 3000")
            #expect(try stream.nextLine(timeout: .seconds(5)) == "")
        }
    }

    @Test func liveEventsReachTheAppStreamAndOnlyTheAudiencesUserStream() throws {
        try withApp { server, app in
            try app.createUser("u1")
            try app.createUser("u2")
            let appStream = try LiveStreams.open(server, "/v1/events?types=user.updated", bearer: app.key)
            defer { appStream.close() }
            let u2Stream = try LiveStreams.open(server, "/v1/users/u2/events", bearer: try app.token(for: "u2"))
            defer { u2Stream.close() }
            let u1Stream = try LiveStreams.open(server, "/v1/users/u1/events?access_token=\(try app.token(for: "u1"))", bearer: nil)
            defer { u1Stream.close() }
            #expect(u1Stream.status == 200)
            try LiveStreams.rename(app, "u1", times: 1)
            try LiveStreams.rename(app, "u2", times: 1)

            let first = try #require(try LiveStreams.nextEvent(appStream))
            #expect(first.event == "user.updated")
            let json = try JSONValue.parse(first.data)
            #expect(json["id"]?.stringValue == first.id)
            #expect(json["data"]?["user"]?["user_id"] == .string("u1"))
            #expect(json["app_id"] == .string(app.appID))
            let second = try #require(try LiveStreams.nextEvent(appStream))
            #expect(try JSONValue.parse(second.data)["data"]?["user"]?["user_id"] == .string("u2"))

            let mine = try #require(try LiveStreams.nextEvent(u1Stream))
            #expect(mine.id == first.id)
            let theirs = try #require(try LiveStreams.nextEvent(u2Stream))
            #expect(theirs.id == second.id, "u2's stream skips u1's event")
        }
    }

    /// Resume with Last-Event-ID while writes continue (docs/events.md#resuming-without-losing-events): every later
    /// event exactly once, in order, no gap between replay and live; `Parley-Last-Event-ID` equals the id sent.
    @Test func resumeDeliversEveryLaterEventExactlyOnceWhileWritesContinue() throws {
        try withApp { server, app in
            try app.createUser("u1")
            let token = try app.token(for: "u1")
            let start = try LiveStreams.head(app)
            let writes = 60
            let writer = DispatchQueue(label: "writer")
            let done = DispatchSemaphore(value: 0)
            writer.async {
                try? LiveStreams.rename(app, "u1", times: writes, tag: "w")
                done.signal()
            }
            var received: [Int64] = []
            var stream = try LiveStreams.open(server, "/v1/users/u1/events", bearer: token, lastEventID: String(start))
            #expect(stream.headers["Parley-Last-Event-ID"] == String(start))
            while received.count < 20, let event = try LiveStreams.nextEvent(stream) { received.append(Int64(event.id!)!) }
            stream.close()
            let resumeFrom = received.last!
            stream = try LiveStreams.open(server, "/v1/users/u1/events", bearer: token, lastEventID: String(resumeFrom))
            defer { stream.close() }
            #expect(stream.headers["Parley-Last-Event-ID"] == String(resumeFrom))
            while received.count < writes, let event = try LiveStreams.nextEvent(stream) { received.append(Int64(event.id!)!) }
            done.wait()
            let logged = try app.events(after: String(start), query: "types=user.updated&user_id=u1").compactMap {
                Int64($0["id"]?.stringValue ?? "")
            }
            #expect(received.count == writes)
            #expect(received == Array(logged.prefix(writes)), "the stream and the log agree, in order, no duplicates")
            #expect(Set(received).count == received.count)
        }
    }

    @Test func earliestReplaysRetainedEventsAndBadResumeIDsAreRejected() throws {
        try withApp { server, app in
            try app.createUser("u1")
            try LiveStreams.rename(app, "u1", times: 3)
            let stream = try LiveStreams.open(server, "/v1/events?last_event_id=earliest&types=user.updated", bearer: app.key)
            defer { stream.close() }
            #expect(stream.headers["Parley-Last-Event-ID"] == "0")
            var names: [String] = []
            while names.count < 3, let event = try LiveStreams.nextEvent(stream) {
                names.append(try JSONValue.parse(event.data)["data"]?["user"]?["name"]?.stringValue ?? "")
            }
            #expect(names == ["n0", "n1", "n2"])

            let head = try LiveStreams.head(app)
            for bad in ["-1", "+5", "1.5", "%201", "abc", String(head + 1)] {
                Self.expectProblem(try app.request(.get, "/v1/events?last_event_id=\(bad)"), 400, .invalidLastEventId, bad)
            }
            var headers = HTTPHeaders()
            headers.add("Last-Event-ID", "x")
            Self.expectProblem(try app.request(.get, "/v1/events?last_event_id=0", headers: headers), 400, .invalidLastEventId, "header wins")
        }
    }

    @Test func idleStreamsGetHeartbeats() throws {
        let server = try TestServer.start { $0.sseHeartbeatMillis = 200 }
        defer { server.stop() }
        let app = try server.createApp()
        let stream = try LiveStreams.open(server, "/v1/events", bearer: app.key)
        defer { stream.close() }
        _ = try stream.nextEvent(timeout: .seconds(5))  // retry
        for _ in 0..<2 {
            let ping = try #require(try stream.nextEvent(timeout: .seconds(5)))
            #expect(ping.comments == ["ping"])
        }
    }

    @Test func permissionsAndCaps() throws {
        try withApp { server, app in
            try app.createUser("u1")
            try app.createUser("u2")
            let token = try app.token(for: "u1")
            Self.expectProblem(try server.request(.get, "/v1/users/u2/events", bearer: token), 403, .forbidden)
            Self.expectProblem(try server.request(.get, "/v1/events", bearer: token), 403, .forbidden)
            Self.expectProblem(try server.request(.get, "/v1/users/u1/events?presence=true", bearer: token), 403, .forbidden)
            Self.expectProblem(try app.request(.get, "/v1/users/nobody/events"), 404, .userNotFound)
            Self.expectProblem(try server.request(.get, "/v1/events?access_token=nope", bearer: nil), 401, .unauthenticated)
            var streams: [HTTPClientStream] = []
            defer { for s in streams { s.close() } }
            for _ in 0..<LiveRoutes.maxStreamsPerUser {
                let s = try LiveStreams.open(server, "/v1/users/u1/events", bearer: token)
                #expect(s.status == 200)
                streams.append(s)
            }
            Self.expectProblem(try server.request(.get, "/v1/users/u1/events", bearer: token), 429, .tooManyStreams)
            streams.removeLast().close()
            // The hub learns of the close asynchronously; a new stream fits again soon after.
            var status = 0
            try eventually(timeout: .seconds(5), every: .milliseconds(100)) {
                let s = try LiveStreams.open(server, "/v1/users/u1/events", bearer: token)
                status = s.status
                if status == 200 { streams.append(s) } else { s.close() }
                return status == 200
            }
            #expect(status == 200)
        }
    }

    @Test func kickClosesTheUsersStreamAfterTheKickEvent() throws {
        try withApp { server, app in
            try app.createUser("u1")
            let stream = try LiveStreams.open(server, "/v1/users/u1/events", bearer: try app.token(for: "u1"))
            defer { stream.close() }
            #expect(try app.request(.post, "/v1/users/u1/kick", json: "{}").status == 200)
            let kicked = try #require(try LiveStreams.nextEvent(stream))
            #expect(kicked.event == "user.kicked")
            #expect(try LiveStreams.nextEvent(stream) == nil, "the server ends the stream after user.kicked")
        }
    }

    /// Two nodes on one database: a write through node A reaches a stream on node B (LISTEN/NOTIFY + the log).
    @Test func aWriteOnOneNodeReachesAStreamOnAnother() throws {
        try withTestServer { nodeA in
            let nodeB = try TestServer.start(database: nodeA.database)
            defer { nodeB.stop() }
            let app = try nodeA.createApp()
            try app.createUser("u1")
            let stream = try LiveStreams.open(nodeB, "/v1/users/u1/events", bearer: app.key)
            defer { stream.close() }
            let sent = ContinuousClock.now
            try LiveStreams.rename(app, "u1", times: 1)
            let event = try #require(try LiveStreams.nextEvent(stream, timeout: .seconds(5)))
            #expect(event.event == "user.updated")
            // Well inside the 1 s safety re-read: the notification carried it.
            #expect(ContinuousClock.now - sent < .milliseconds(900))
        }
    }

    /// After trimming (event_retention_hours, driven by the test clock), resuming from an
    /// older id starts at the oldest retained event and `Parley-Last-Event-ID` is the trim point.
    @Test func resumeFromBeforeTheTrimPointStartsAtTheTrimPoint() throws {
        try withApp(testClock: true, settings: #"{"event_retention_hours":1}"#) { server, app in
            try app.createUser("u1")
            try LiveStreams.rename(app, "u1", times: 3)
            let trimPoint = try LiveStreams.head(app)
            let r = try server.request(.post, "/v1/test/clock/advance", bearer: server.adminKey, json: #"{"ms":3600001}"#)
            #expect(r.status == 200, "\(r.text)")
            try LiveStreams.rename(app, "u1", times: 1, tag: "kept")
            let log = try app.request(.get, "/v1/events/log?after=1")
            #expect(log.json?["previous_event_id"] == .string(String(trimPoint)))
            #expect(log.json?["items"]?.arrayValue?.count == 1)
            let stats = try app.request(.get, "/v1/stats")
            #expect(stats.json?["event_log_trim_point"] == .string(String(trimPoint)))

            let stream = try LiveStreams.open(server, "/v1/users/u1/events", bearer: app.key, lastEventID: "1")
            defer { stream.close() }
            #expect(stream.headers["Parley-Last-Event-ID"] == String(trimPoint))
            let first = try #require(try LiveStreams.nextEvent(stream))
            #expect(try JSONValue.parse(first.data)["data"]?["user"]?["name"] == .string("kept0"))
            let earliest = try LiveStreams.open(server, "/v1/events?last_event_id=earliest", bearer: app.key)
            defer { earliest.close() }
            #expect(earliest.headers["Parley-Last-Event-ID"] == String(trimPoint))
        }
    }

    /// A reader that stops reading is disconnected once its buffer fills (it resumes later with Last-Event-ID);
    /// a reader that keeps up receives everything meanwhile, promptly.
    @Test func aSlowReaderIsDisconnectedWhileAFastOneKeepsUp() throws {
        try withApp(settings: #"{"rate_limit_app_rps":100000}"#) { server, app in
            let slow = try LiveStreams.open(server, "/v1/events", bearer: app.key)
            defer { slow.close() }
            let fast = try LiveStreams.open(server, "/v1/events", bearer: app.key)
            defer { fast.close() }
            let filler = String(repeating: "x", count: 4000)
            // ~16 MB of events: past the kernel's socket buffers on both ends and the server's 1 MiB stream buffer.
            let batches = 40
            let writer = DispatchQueue(label: "writer")
            let written = DispatchSemaphore(value: 0)
            writer.async {
                for batch in 0..<batches {
                    let users = (0..<100).map { #"{"user_id":"b\#(batch)u\#($0)","extended_data":"\#(filler)"}"# }
                    _ = try? app.request(.post, "/v1/users/import", json: #"{"users":[\#(users.joined(separator: ","))]}"#)
                }
                written.signal()
            }
            var received = 0
            while received < batches * 100, try LiveStreams.nextEvent(fast, timeout: .seconds(30)) != nil { received += 1 }
            #expect(received == batches * 100, "the fast reader got every event")
            #expect(written.wait(timeout: .now() + 30) == .success)
            var slowCount = 0
            while (try? LiveStreams.nextEvent(slow, timeout: .seconds(10))) ?? nil != nil { slowCount += 1 }
            #expect(slowCount < batches * 100, "the slow reader was cut off (it got \(slowCount))")
        }
    }

    /// True when `stream` ends (the server closed it) within `timeout`; events before the end are skipped.
    static func ends(_ stream: HTTPClientStream, within timeout: Duration = .seconds(5)) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            do {
                if try stream.nextEvent(timeout: deadline - ContinuousClock.now) == nil { return true }
            } catch {
                return false  // timed out: still open
            }
        }
        return false
    }

    /// Closing (docs/events.md#live-streams-server-sent-events): a stream closes when its user token expires and when
    /// the app key it was opened with is revoked; streams on other credentials stay open.
    @Test func streamsCloseWhenTheirTokenExpiresOrTheirKeyIsRevoked() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("u1")
            let created = try server.request(.post, "/v1/apps/\(app.appID)/keys", bearer: server.adminKey, json: #"{"name":"stream"}"#)
            let secret = try #require(created.json?["secret"]?.stringValue)
            let keyID = try #require(created.json?["key_id"]?.stringValue)

            let shortToken = try LiveStreams.open(server, "/v1/users/u1/events", bearer: try app.token(for: "u1", ttl: 60))
            defer { shortToken.close() }
            let longToken = try LiveStreams.open(server, "/v1/users/u1/events", bearer: try app.token(for: "u1", ttl: 3600))
            defer { longToken.close() }
            let revokedKey = try LiveStreams.open(server, "/v1/events", bearer: secret)
            defer { revokedKey.close() }
            let mainKey = try LiveStreams.open(server, "/v1/events", bearer: app.key)
            defer { mainKey.close() }
            for stream in [shortToken, longToken, revokedKey, mainKey] { #expect(stream.status == 200) }

            try server.advanceClock(ms: 61_000)
            #expect(Self.ends(shortToken), "the stream of the expired token closes")
            let revoke = try server.request(.delete, "/v1/apps/\(app.appID)/keys/\(keyID)", bearer: server.adminKey)
            #expect(revoke.status == 204, "\(revoke.text)")
            #expect(Self.ends(revokedKey), "the stream of the revoked key closes")
            #expect(!Self.ends(longToken, within: .milliseconds(1500)))
            #expect(!Self.ends(mainKey, within: .milliseconds(500)))
        }
    }
}
