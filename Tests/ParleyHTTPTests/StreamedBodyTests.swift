import Foundation
import Glibc
import ParleyHTTP
import ParleyTesting
import Synchronization
import Testing

/// Routes that read their body as it arrives (`RouteOptions.streamsBody`): bounded memory whatever the size, the
/// socket paused while the handler is behind, `100 Continue` only once the handler asks, and every way a body can end
/// early reported to the handler.
@Suite struct StreamedBodyTests {
    /// What a streaming handler saw: bytes, a checksum, the largest backlog, and how the body ended.
    final class Seen: Sendable {
        let state = Mutex<(bytes: Int, checksum: UInt32, peakWaiting: Int, ending: String)>((0, 0, 0, ""))
        var ending: String { state.withLock { $0.ending } }
    }

    /// `/upload` reads slowly (a pause every 1 MiB) and answers its byte count and checksum; `/refuse` answers 401
    /// without reading.
    private func routes(_ seen: Seen) -> (inout RouterBuilder) -> Void {
        { builder in
            builder.add(.post, "/upload", options: RouteOptions(maxBodyBytes: 64 << 20, streamsBody: true)) { request in
                guard let stream = request.bodyStream else { return Response(status: 500, body: Array("no stream".utf8)) }
                var count = 0
                var checksum: UInt32 = 0
                var sincePause = 0
                do {
                    while let chunk = try stream.next() {
                        for byte in chunk { checksum = checksum &* 31 &+ UInt32(byte) }
                        count += chunk.count
                        sincePause += chunk.count
                        let waiting = stream.bytesWaiting
                        seen.state.withLock { $0.peakWaiting = max($0.peakWaiting, waiting) }
                        if sincePause >= 1 << 20 {
                            sincePause = 0
                            usleep(20_000)  // deliberate: a consumer slower than loopback, so the socket must pause
                        }
                    }
                    seen.state.withLock { $0 = (count, checksum, $0.peakWaiting, "end") }
                    return .json("{\"bytes\":\(count),\"checksum\":\(checksum)}")
                } catch {
                    seen.state.withLock { $0.ending = "\(error)" }
                    return Response(status: (error as? RequestBodyError) == .tooLarge ? 413 : 400, body: Array("\(error)".utf8))
                }
            }
            builder.add(.post, "/refuse", options: RouteOptions(maxBodyBytes: 64 << 20, streamsBody: true)) { _ in
                Response(status: 401, body: Array("no".utf8))
            }
        }
    }

    private static func pattern(_ count: Int) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 9) } }

    private static func checksum(_ bytes: [UInt8]) -> UInt32 { bytes.reduce(0) { $0 &* 31 &+ UInt32($1) } }

    @Test func aLargeBodyPassesThroughInBoundedMemoryAndTheConnectionCarriesOn() throws {
        let seen = Seen()
        try withServer(routes: routes(seen)) { server in
            let client = try connect(server, timeout: .seconds(60))
            let body = Self.pattern(8 << 20)
            try client.sendRaw("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: \(body.count)\r\n\r\n")
            try client.sendRaw(body)
            let r = try client.readResponse()
            #expect(r.status == 200)
            #expect(r.text == "{\"bytes\":\(body.count),\"checksum\":\(Self.checksum(body))}")
            let peak = seen.state.withLock { $0.peakWaiting }
            // The socket stops being read at the high-water mark; one more read of the socket may land after it.
            #expect(peak <= RequestBodyStream.highWater + 256 << 10, "peak backlog \(peak) bytes")
            print("streamed body: peak backlog \(peak) bytes for \(body.count) bytes")
            // Chunked framing too, on the same connection.
            let chunked = Self.pattern(3 << 20)
            var raw = Array("POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".utf8)
            for start in stride(from: 0, to: chunked.count, by: 100_000) {
                let piece = chunked[start..<min(start + 100_000, chunked.count)]
                raw += Array(String(piece.count, radix: 16).utf8) + [13, 10] + piece + [13, 10]
            }
            raw += Array("0\r\n\r\n".utf8)
            try client.sendRaw(raw)
            #expect(try client.readResponse().text == "{\"bytes\":\(chunked.count),\"checksum\":\(Self.checksum(chunked))}")
            #expect(client.connectCount == 1)
        }
    }

    @Test func continueIsSentWhenTheHandlerReadsAndNeverWhenItRefusesFirst() throws {
        let seen = Seen()
        try withServer(routes: routes(seen)) { server in
            let refused = try connect(server)
            try refused.sendRaw("POST /refuse HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\nExpect: 100-continue\r\n\r\n")
            let answer = String(decoding: refused.readAvailable(timeout: .milliseconds(500)), as: UTF8.self)
            #expect(answer.hasPrefix("HTTP/1.1 401"), "\(answer.prefix(80))")
            #expect(!answer.contains("100 Continue"))

            let invited = try connect(server)
            try invited.sendRaw("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
            let interim = String(decoding: invited.readAvailable(timeout: .milliseconds(500)), as: UTF8.self)
            #expect(interim.hasPrefix("HTTP/1.1 100 Continue"), "\(interim.prefix(80))")
            try invited.sendRaw("hello")
            #expect(try invited.readResponse().text == "{\"bytes\":5,\"checksum\":\(Self.checksum(Array("hello".utf8)))}")
        }
    }

    @Test func aChunkedBodyOverTheLimitReachesTheHandlerAsTooLarge() throws {
        let seen = Seen()
        try withServer(routes: { builder in
            routes(seen)(&builder)
            builder.add(.post, "/tiny", options: RouteOptions(maxBodyBytes: 1000, streamsBody: true)) { request in
                do {
                    _ = try request.bodyStream?.readAll(limit: 1 << 20)
                    return Response(status: 200, body: [])
                } catch {
                    seen.state.withLock { $0.ending = "\(error)" }
                    return Response(status: 413, body: [])
                }
            }
        }) { server in
            let client = try connect(server)
            let piece = String(repeating: "a", count: 600)
            try client.sendRaw("POST /tiny HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n258\r\n\(piece)\r\n258\r\n\(piece)\r\n")
            #expect(try client.readResponse().status == 413)
            #expect(seen.ending == "tooLarge")
            #expect(client.isClosedByPeer(timeout: .seconds(5)), "the rest of an oversized body is not parsed")
            // A declared length over the limit is answered before the handler runs.
            let declared = try connect(server)
            try declared.sendRaw("POST /tiny HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n")
            #expect(try declared.readResponse().status == 413)
        }
    }

    @Test func aClientThatLeavesMidBodyEndsTheHandlersRead() throws {
        let seen = Seen()
        try withServer(routes: routes(seen)) { server in
            let client = try connect(server)
            try client.sendRaw("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
            try client.sendRaw(Self.pattern(300_000))
            client.close()
            #expect(eventually { seen.ending == "closed" }, "ending: \(seen.ending)")
        }
    }

    @Test func aStalledBodyTimesOutFor408AndTheHandlerHearsIt() throws {
        let seen = Seen()
        try withServer(configure: { $0.bodyTimeout = .seconds(1) }, routes: routes(seen)) { server in
            let client = try connect(server)
            try client.sendRaw("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
            try client.sendRaw(Self.pattern(400))
            #expect(try client.readResponse().status == 408)
            #expect(eventually { seen.ending == "timedOut" }, "ending: \(seen.ending)")
        }
    }

    @Test func aStreamedResponseOfKnownLengthKeepsTheConnection() throws {
        let body = Self.pattern(300_000)
        try withServer(routes: { builder in
            builder.add(.get, "/sized") { _ in
                Response(status: 200, headers: ["Content-Length": String(body.count)]) { stream in
                    // Written from another thread in pieces, as file downloads are.
                    Thread.detachNewThread {
                        for start in stride(from: 0, to: body.count, by: 64_000) {
                            stream.waitForBacklog(below: 128_000)
                            stream.write(Array(body[start..<min(start + 64_000, body.count)]))
                        }
                        stream.close()
                    }
                }
            }
            builder.add(.get, "/short") { _ in
                Response(status: 200, headers: ["Content-Length": "10"]) { stream in
                    stream.write(Array("12345".utf8))
                    stream.close()
                }
            }
        }) { server in
            let client = try connect(server)
            for _ in 0..<2 { #expect(try client.send(method: .get, path: "/sized").body == body) }
            #expect(client.connectCount == 1, "the connection carried both")
            // Pipelined: the second request waits in the kernel while the first streams.
            let pipelined = try connect(server)
            try pipelined.sendRaw("GET /sized HTTP/1.1\r\nHost: x\r\n\r\nGET /sized HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(try pipelined.readResponse().body == body)
            #expect(try pipelined.readResponse().body == body)
            // A writer that stops short: only the close tells the client.
            let short = try connect(server)
            try short.sendRaw("GET /short HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(short.isClosedByPeer(timeout: .seconds(5)))
        }
    }

    @Test func inProcessRequestsReadTheWholeBodyThroughAStream() throws {
        let stream = RequestBodyStream(complete: Array("abc".utf8))
        #expect(try stream.next() == Array("abc".utf8))
        #expect(try stream.next() == nil)
        #expect(try RequestBodyStream(complete: []).next() == nil)
        #expect(throws: RequestBodyError.tooLarge) { try RequestBodyStream(complete: Array("abcd".utf8)).readAll(limit: 3) }
    }
}
