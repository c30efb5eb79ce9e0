import Dispatch
import Foundation
import Glibc
import ParleyHTTP
import ParleySync
import ParleyTesting
import Synchronization
import Testing

@testable import Parley
@testable import ParleyCore
@testable import ParleyLive

/// Live streams at scale (docs/scaling.md#open-files, docs/events.md#slow-consumers,
/// docs/scaling.md#reconnect-storms): the descriptor reserve, a client that stops reading, and a reconnect storm.
@Suite("Streams at scale")
struct StreamScaleTests: ProblemAssertions {

    @Test func theConnectionCapLeavesTheReserveBelowTheOpenFilesLimit() {
        #expect(StreamCapacity.connectionCap(openFiles: 20_000, atStart: 40, reserve: 136) == 19_824)
        #expect(StreamCapacity.connectionCap(openFiles: 100, atStart: 40, reserve: 136) == 0)
        #expect(StreamCapacity.connectionCap(openFiles: Int.max, atStart: 40, reserve: 136) == Int.max)
        var configuration = Configuration()
        configuration.poolSize = 4
        #expect(configuration.effectiveDescriptorReserve == 136, "2 per pool connection + 128")
        let loaded = try? Configuration.load(environment: ["PARLEY_FD_RESERVE": "500"], arguments: [])
        #expect(loaded?.effectiveDescriptorReserve == 500)
        #expect(throws: Configuration.Invalid.self) { try Configuration.load(environment: [:], arguments: ["--fd-reserve", "3"]) }
    }

    /// A node whose connections reach the cap refuses new streams (both SSE routes) with 503 `7000020` and
    /// `Retry-After`, still answers ordinary requests, and takes a stream again once one closes.
    @Test func streamsPastTheDescriptorCapAreRefusedUntilOneCloses() throws {
        try withApp { server, app in
            try app.createUser("u1")
            let capacity = server.app.hub.capacity
            #expect(capacity.connectionCap > 1000, "the real cap: the open-files limit less the reserve")
            capacity.setCap(3)
            // The set-up's request connections are gone: the three streams are the only connections.
            #expect(try eventually(timeout: .seconds(5)) { server.app.httpServer.connectionCount == 0 })
            var streams: [HTTPClientStream] = []
            defer { for s in streams { s.close() } }
            for _ in 0..<3 {
                let stream = try LiveStreams.open(server, "/v1/events", bearer: app.key)
                #expect(stream.status == 200)
                streams.append(stream)
            }
            for path in ["/v1/events", "/v1/users/u1/events"] {
                let refused = try app.request(.get, path)
                Self.expectProblem(refused, 503, .streamCapacityReached, path)
                #expect(refused.headers["Retry-After"] == "5", "\(path)")
            }
            #expect(try app.request(.get, "/v1/users/u1").status == 200, "ordinary requests still work")
            streams.removeLast().close()
            var status = 0
            #expect(
                try eventually(timeout: .seconds(5), every: .milliseconds(50)) {
                    let stream = try LiveStreams.open(server, "/v1/users/u1/events", bearer: app.key)
                    status = stream.status
                    if status == 200 { streams.append(stream) } else { stream.close() }
                    return status == 200
                }, "a stream fits again once one closed (last status \(status))")
        }
    }

    /// A node whose open-files limit is reached by plain connections (no streams: a flood of idle sockets) closes the
    /// ones past its connection limit at accept, without spinning on the listener, keeps descriptors for its database
    /// (a request on a connection opened before the flood still reads and writes), and serves new connections once the
    /// flood ends. A `parley serve` process under `prlimit`, so that its limit is small and the test process's is not.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: ParleyProcess.prlimitPath), "needs util-linux prlimit"))
    func aFloodOfConnectionsPastTheOpenFilesLimitIsClosedAtAcceptAndTheNodeKeepsServing() throws {
        let executable = try #require(ParleyProcess.executablePath, "the parley executable is not built beside the tests")
        let data = try TestDatabase.makeDataDirectory()
        let adminKey = "test-admin-key-" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
        let node = try ParleyProcess.start(executable: executable, dataDirectory: data, adminKey: adminKey, openFiles: 300)
        defer {
            node.kill(SIGKILL)
            node.waitForExit()
        }
        let log = try String(contentsOfFile: node.logFile, encoding: .utf8)
        let limitText = try #require(log.range(of: "connection_limit=").map { log[$0.upperBound...].prefix { $0.isNumber } })
        let limit = try #require(Int(limitText))
        #expect(limit > 50 && limit < 300 - 64, "300 less what was open at start and the descriptors kept free: \(limit)")

        let admin: HTTPHeaders = ["Authorization": "Bearer \(adminKey)", "Content-Type": "application/json"]
        let inApp: HTTPHeaders = ["Authorization": "Bearer \(adminKey)", "Content-Type": "application/json", "Parley-App-Id": "flood"]
        let before = try HTTPClientConnection(host: "127.0.0.1", port: node.port, timeout: .seconds(30))
        defer { before.close() }
        #expect(try before.send(method: .post, path: "/v1/apps", headers: admin, body: #"{"app_id":"flood","name":"f"}"#).status == 201)

        // Twice the limit in idle sockets: those past it are accepted and closed at once.
        var flood: [Int32] = []
        defer { for fd in flood { close(fd) } }
        for _ in 0..<(2 * limit) {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(node.port).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            if connected == 0 { flood.append(fd) } else { close(fd) }
        }
        // The server sends nothing on these: a peek that finds the end of the stream (or a reset) means it closed one.
        func closedByTheServer(_ fd: Int32) -> Bool {
            var byte: UInt8 = 0
            let n = recv(fd, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
            return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
        }
        var cut = 0
        #expect(
            eventually(timeout: .seconds(10), every: .milliseconds(50)) {
                cut = flood.filter(closedByTheServer).count
                return cut >= flood.count - limit
            }, "\(cut) of \(flood.count) closed, the limit \(limit)")

        // No spinning on the listener while the flood holds: under half a core over a second.
        let cpuBefore = try Self.cpuSeconds(of: node.pid)
        usleep(1_000_000)
        #expect(try Self.cpuSeconds(of: node.pid) - cpuBefore < 0.5)
        // The database still has its descriptors: a write and a read on the connection opened before the flood.
        let user = try before.send(
            method: .post, path: "/v1/users", headers: inApp, body: #"{"user_id":"kept"}"#)
        #expect(user.status == 201, "\(String(decoding: user.body, as: UTF8.self))")
        #expect(try before.send(method: .get, path: "/v1/users/kept", headers: inApp).status == 200)

        for fd in flood { close(fd) }
        flood = []
        #expect(
            try eventually(timeout: .seconds(10), every: .milliseconds(100)) {
                let fresh = try? HTTPClientConnection(host: "127.0.0.1", port: node.port, timeout: .seconds(5))
                defer { fresh?.close() }
                return (try? fresh?.send(method: .get, path: "/readyz"))??.status == 200
            }, "new connections are served once the flood is gone")
        // The test runner blocks SIGTERM in the thread that started the node; the node takes it all the same.
        node.kill(SIGTERM)
        #expect(node.waitUntilDead(seconds: 20), "a SIGTERM stops the node")
    }

    /// User plus system CPU seconds of process `pid` so far (/proc/<pid>/stat, in clock ticks).
    private static func cpuSeconds(of pid: pid_t) throws -> Double {
        let fields = try #require(processStatFields(of: pid))
        return Double((Int(fields[11]) ?? 0) + (Int(fields[12]) ?? 0)) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// A client that stops reading is cut once the server's buffer for it passes `streamBufferLimit` (lowered here to
    /// 64 KiB, over a 16 KiB kernel send buffer), while another stream of the same app receives every event promptly;
    /// reconnecting with the id of the last event it fully received, it gets every later event exactly once, in order.
    @Test func aStalledClientIsCutWithoutSlowingOthersAndResumesExactly() throws {
        try withApp(configure: Self.smallStreamBuffers, unthrottled: true) { server, app in
            let start = try LiveStreams.head(app)
            let stalled = try RawStream(port: server.port, path: "/v1/events", bearer: app.key, receiveBuffer: 2048)
            defer { stalled.close() }
            let healthy = try LiveStreams.open(server, "/v1/events", bearer: app.key)
            defer { healthy.close() }
            #expect(try eventually(timeout: .seconds(5)) { server.app.hub.openStreams(appID: app.appID).app == 2 })

            let filler = String(repeating: "x", count: 1000)
            let perBatch = 20
            // What the writer did: batches written, when each write returned, whether the cut was seen.
            let progress = LockedValue((batches: 0, writtenAt: [ContinuousClock.Instant](), cut: false))
            let done = DispatchSemaphore(value: 0)
            // Batches until the server has cut the stalled stream, then two more: live events after the cut.
            DispatchQueue(label: "writer").async {
                var extra = 0
                for batch in 0..<60 where extra < 2 {
                    let users = (0..<perBatch).map { #"{"user_id":"b\#(batch)u\#($0)","extended_data":"\#(filler)"}"# }
                    _ = try? app.request(.post, "/v1/users/import", json: #"{"users":[\#(users.joined(separator: ","))]}"#)
                    let cut = server.app.hub.openStreams(appID: app.appID).app < 2
                    progress.withLock {
                        $0.batches += 1
                        $0.writtenAt.append(.now)
                        if $0.cut { extra += 1 }
                        $0.cut = $0.cut || cut
                    }
                }
                done.signal()
            }
            var receivedAt: [ContinuousClock.Instant] = []
            var healthyIDs: [Int64] = []
            var writerDone = false
            let deadline = ContinuousClock.now + .seconds(60)
            while ContinuousClock.now < deadline {
                if !writerDone { writerDone = done.wait(timeout: .now()) == .success }
                if writerDone && healthyIDs.count >= progress.withLock({ $0.batches }) * perBatch { break }
                guard let event = try? LiveStreams.nextEvent(healthy, timeout: .milliseconds(500)) else { continue }
                healthyIDs.append(Int64(event.id!)!)
                receivedAt.append(.now)
            }
            let (batches, written, cut) = progress.withLock { ($0.batches, $0.writtenAt, $0.cut) }
            #expect(cut, "the server cut the stalled stream (after \(batches) batches)")
            let logged = try Self.logIDs(app, after: start)
            #expect(healthyIDs == logged, "the healthy stream got every event once, in order")
            // Promptly: the last event of each batch reached the healthy stream soon after its write returned.
            var worstLag = Duration.zero
            for (batch, at) in written.enumerated() where (batch + 1) * perBatch <= receivedAt.count {
                worstLag = max(worstLag, receivedAt[(batch + 1) * perBatch - 1] - at)
            }
            print("stalled-client: batches=\(batches) events=\(logged.count) worst_healthy_lag=\(worstLag)")
            #expect(worstLag < .seconds(2), "healthy stream lag \(worstLag)")

            // What the stalled client had received: the frames the server sent before it closed, then the end.
            let (got, ended) = stalled.drain(timeout: .seconds(10))
            #expect(ended, "the server closed the stalled connection")
            #expect(got == Array(logged.prefix(got.count)), "what the stalled client got is a prefix of the log")
            #expect(got.count < logged.count)
            let resumeFrom = got.last ?? start
            let resumed = try LiveStreams.open(server, "/v1/events", bearer: app.key, lastEventID: String(resumeFrom))
            defer { resumed.close() }
            #expect(resumed.headers["Parley-Last-Event-ID"] == String(resumeFrom))
            let expected = logged.filter { $0 > resumeFrom }
            var again: [Int64] = []
            while again.count < expected.count, let event = try LiveStreams.nextEvent(resumed, timeout: .seconds(10)) {
                again.append(Int64(event.id!)!)
            }
            #expect(again == expected, "every later event exactly once, in order (\(again.count) of \(expected.count))")
            #expect((try? LiveStreams.nextEvent(resumed, timeout: .milliseconds(300))) == nil, "and nothing more")
        }
    }

    /// 500 streams (five apps × the 100 app streams a node allows each), all dropped at once while events are
    /// written, all reconnected with their `Last-Event-ID` at once: each resumes exactly (none twice, none missing,
    /// in order, through to live events written after the storm). The log prints the replay reads the hub made.
    @Test func aReconnectStormOf500StreamsResumesEveryStreamExactly() throws {
        try withTestServer { server in
            let apps = try (0..<5).map { _ in try server.createApp(settings: #"{"rate_limit_app_rps":100000}"#) }
            for app in apps { try app.createUser("u1") }
            let perApp = LiveRoutes.maxAppStreams
            let started = ContinuousClock.now
            let starts = try apps.map { try LiveStreams.head($0) }
            var streams = try Self.openAll(server, apps, perApp: perApp) { _ in nil }
            #expect(streams.count == apps.count * perApp)
            #expect(streams.allSatisfy { $0.status == 200 })

            try Self.renameAll(apps, times: 10, tag: "before")
            // Each stream reads some of the events, different counts, so they resume from different places.
            var lastSeen: [Int64] = []
            for (index, stream) in streams.enumerated() {
                let app = index / perApp
                var last = starts[app]
                for _ in 0..<(1 + index % 10) { last = Int64(try #require(try LiveStreams.nextEvent(stream)).id!)! }
                lastSeen.append(last)
            }
            for stream in streams { stream.close() }
            try Self.renameAll(apps, times: 10, tag: "between")
            #expect(try eventually(timeout: .seconds(10)) { server.app.hub.openStreams().app == 0 })

            let replaysBefore = server.app.hub.replayQueries.load(ordering: .relaxed)
            let stormStarted = ContinuousClock.now
            let resumeIDs = lastSeen
            streams = try Self.openAll(server, apps, perApp: perApp) { String(resumeIDs[$0]) }
            let reconnected = ContinuousClock.now - stormStarted
            #expect(streams.allSatisfy { $0.status == 200 })
            try Self.renameAll(apps, times: 3, tag: "after")
            let logged = try apps.enumerated().map { try Self.logIDs($0.element, after: starts[$0.offset]) }
            var exact = 0
            for (index, stream) in streams.enumerated() {
                let expected = logged[index / perApp].filter { $0 > lastSeen[index] }
                var got: [Int64] = []
                while got.count < expected.count, let event = try LiveStreams.nextEvent(stream) { got.append(Int64(event.id!)!) }
                if got == expected { exact += 1 }
                #expect(got == expected, "stream \(index) resumed from \(lastSeen[index])")
            }
            for stream in streams { stream.close() }
            let replays = server.app.hub.replayQueries.load(ordering: .relaxed) - replaysBefore
            print(
                "reconnect-storm: streams=\(streams.count) exact=\(exact) reconnected_in=\(reconnected) replay_queries=\(replays) total=\(ContinuousClock.now - started)"
            )
            #expect(exact == streams.count)
            #expect(reconnected < .seconds(10))
            #expect(replays < streams.count, "replays of the same range share their reads (\(replays) reads for \(streams.count) streams)")
        }
    }

    // MARK: - Helpers

    /// Small stream buffers, so a stalled client is cut after ~100 KB instead of the ~5 MiB of the defaults.
    static func smallStreamBuffers(_ configuration: inout Configuration) {
        configuration.streamBufferLimit = 64 * 1024
        configuration.streamSendBuffer = 16 * 1024
    }

    /// Opens `perApp` app streams on each app from 8 threads at once; `lastEventID(index)` for stream `index`.
    static func openAll(
        _ server: TestServer, _ apps: [TestApp], perApp: Int, lastEventID: @escaping @Sendable (Int) -> String?
    ) throws -> [HTTPClientStream] {
        let count = apps.count * perApp
        let opened = Mutex<[Int: HTTPClientStreamBox]>([:])
        let failures = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 8) { worker in
            for index in stride(from: worker, to: count, by: 8) {
                do {
                    let stream = try LiveStreams.open(server, "/v1/events", bearer: apps[index / perApp].key, lastEventID: lastEventID(index))
                    opened.withLock { $0[index] = HTTPClientStreamBox(stream) }
                } catch {
                    failures.withLock { $0.append("\(index): \(error)") }
                }
            }
        }
        let failed = failures.withLock { $0 }
        if !failed.isEmpty { throw TestFailure("streams failed to open: \(failed.prefix(3))") }
        return opened.withLock { boxes in (0..<count).map { boxes[$0]!.stream } }
    }

    /// Renames `u1` of every app `times` times (one `user.updated` each), the apps in parallel.
    static func renameAll(_ apps: [TestApp], times: Int, tag: String) throws {
        let failures = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: apps.count) { index in
            for i in 0..<times {
                let r = try? apps[index].request(.patch, "/v1/users/u1", json: #"{"name":"\#(tag)\#(i)"}"#)
                if r?.status != 200 { failures.add(1, ordering: .relaxed) }
            }
        }
        if failures.load(ordering: .relaxed) > 0 { throw TestFailure("\(failures.load(ordering: .relaxed)) renames failed") }
    }

    /// Every event id of the app's log after `after`, in order (all pages).
    static func logIDs(_ app: TestApp, after: Int64) throws -> [Int64] {
        var ids: [Int64] = []
        var cursor = String(after)
        while true {
            let r = try app.request(.get, "/v1/events/log?after=\(cursor)&limit=100")
            guard r.status == 200 else { throw TestFailure("log read failed: \(r.status) \(r.text)") }
            let items = r.json?["items"]?.arrayValue ?? []
            ids += items.compactMap { Int64($0["id"]?.stringValue ?? "") }
            guard let next = r.json?["next_cursor"]?.stringValue, !items.isEmpty else { return ids }
            cursor = next
        }
    }
}

/// Moves a stream between the threads that open them and the test (each is used by one thread at a time).
final class HTTPClientStreamBox: @unchecked Sendable {
    let stream: HTTPClientStream
    init(_ stream: HTTPClientStream) { self.stream = stream }
}

/// An SSE request on a raw socket with a tiny receive buffer, which the test does not read until it chooses to: a
/// client that stopped reading.
final class RawStream {
    let fd: Int32

    init(port: Int, path: String, bearer: String, receiveBuffer: Int32) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TestFailure("socket: \(errno)") }
        var size = receiveBuffer
        // Before connect, so the window the client offers stays small.
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard rc == 0 else {
            Glibc.close(fd)
            throw TestFailure("connect: \(errno)")
        }
        let request = Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(bearer)\r\n\r\n".utf8)
        guard send(fd, request, request.count, Int32(MSG_NOSIGNAL)) == request.count else {
            Glibc.close(fd)
            throw TestFailure("send: \(errno)")
        }
    }

    /// Reads everything until the server's end (or `timeout`): the complete event blocks of the body (a partial last
    /// one is dropped) as their event ids, and whether the connection ended.
    func drain(timeout: Duration) -> (ids: [Int64], ended: Bool) {
        var bytes: [UInt8] = []
        var ended = false
        let deadline = ContinuousClock.now + timeout
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while ContinuousClock.now < deadline {
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&pfd, 1, 200) > 0 else { continue }
            let n = recv(fd, &buffer, buffer.count, 0)
            if n <= 0 {
                ended = true
                break
            }
            bytes += buffer[0..<n]
        }
        guard let headEnd = Self.find([13, 10, 13, 10], in: bytes) else { return ([], ended) }
        var chunks = HTTPChunkedText(Array(bytes[(headEnd + 4)...]))
        // Complete blocks only: each ends with a blank line; what follows the last one was cut.
        let text = String(decoding: chunks.decoded(), as: UTF8.self)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).dropLast()  // the last is unterminated
        var ids: [Int64] = []
        var current: Int64?
        for line in lines {
            if line.isEmpty {
                if let id = current { ids.append(id) }
                current = nil
            } else if line.hasPrefix("id: ") {
                current = Int64(line.dropFirst(4))
            }
        }
        return (ids, ended)
    }

    func close() { Glibc.close(fd) }

    static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for i in 0...(haystack.count - needle.count) where Array(haystack[i..<(i + needle.count)]) == needle { return i }
        return nil
    }
}

/// The data of a chunked body, as far as it is complete (a cut last chunk yields what arrived of it).
struct HTTPChunkedText {
    let bytes: [UInt8]
    init(_ bytes: [UInt8]) { self.bytes = bytes }

    mutating func decoded() -> [UInt8] {
        var out: [UInt8] = []
        var i = 0
        while i < bytes.count {
            guard let lineEnd = RawStream.find([13, 10], in: Array(bytes[i...])) else { break }
            let sizeText = String(decoding: bytes[i..<(i + lineEnd)], as: UTF8.self)
            guard let size = Int(sizeText, radix: 16), size > 0 else { break }
            let start = i + lineEnd + 2
            let end = min(start + size, bytes.count)
            out += bytes[start..<end]
            i = end + 2
        }
        return out
    }
}
