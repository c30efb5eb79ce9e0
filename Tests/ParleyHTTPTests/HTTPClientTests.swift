import Glibc
import Synchronization
import Testing

@testable import ParleyHTTP

// Tests of the blocking HTTP/1.1 client against canned bytes from a tiny loopback server that lives in this file.
// The pure parts (chunked decoder, event-stream decoder, URL parsing) are tested without sockets first.

// MARK: - Pure logic

@Suite struct HTTPClientDecoderTests {
    @Test func chunkedBodyDecodesWhenFedOneByteAtATime() throws {
        let wire = Array(
            "5;name=value\r\nhello\r\n7\r\n, world\r\n0\r\nX-Checksum: abc\r\nX-Other:  two \r\n\r\nNEXT".utf8)
        var decoder = try HTTPClientBodyDecoder(framing: .chunked, maxBodyBytes: 100)
        var output: [UInt8] = []
        var pending: [UInt8] = []
        var used = 0
        for byte in wire {
            guard !decoder.isDone else { break }
            pending.append(byte)
            let n = try decoder.decode(pending[...], into: &output)
            pending.removeFirst(n)
            used += n
        }
        #expect(decoder.isDone)
        #expect(String(decoding: output, as: UTF8.self) == "hello, world")
        #expect(decoder.trailers["x-checksum"] == "abc")
        #expect(decoder.trailers["X-Other"] == "two")
        #expect(used == wire.count - 4, "bytes after the body belong to the next response")
    }

    @Test func chunkedBodyRejectsBadFramingAndOversizedChunks() throws {
        var decoder = try HTTPClientBodyDecoder(framing: .chunked, maxBodyBytes: 100)
        var output: [UInt8] = []
        #expect(throws: HTTPClientError(.malformedResponse, "bad chunk size line: \"zz\"")) {
            _ = try decoder.decode(Array("zz\r\n".utf8)[...], into: &output)
        }
        var small = try HTTPClientBodyDecoder(framing: .chunked, maxBodyBytes: 10)
        #expect(throws: HTTPClientError.self) { _ = try small.decode(Array("ff\r\n".utf8)[...], into: &output) }
        var noCRLF = try HTTPClientBodyDecoder(framing: .chunked, maxBodyBytes: 100)
        #expect(throws: HTTPClientError.self) { _ = try noCRLF.decode(Array("2\r\nabX\r\n".utf8)[...], into: &output) }
        #expect(throws: HTTPClientError.self) { _ = try HTTPClientBodyDecoder(framing: .length(11), maxBodyBytes: 10) }
    }

    @Test func framingFollowsRFC9112() throws {
        func head(_ text: String) throws -> HTTPClientResponseHead {
            try #require(try HTTPClientResponseHead.parse(Array(text.utf8)[...], limit: 1000)).head
        }
        #expect(try head("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n").framing(for: .get) == .length(5))
        #expect(try head("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n").framing(for: .head) == .none)
        #expect(try head("HTTP/1.1 204 No Content\r\n\r\n").framing(for: .get) == .none)
        #expect(try head("HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n").framing(for: .get) == .none)
        #expect(
            try head("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")
                .framing(for: .get) == .chunked)
        #expect(try head("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n").framing(for: .get) == .untilClose)
        #expect(try head("HTTP/1.1 200 OK\n\n").framing(for: .get) == .untilClose)
        #expect(try head("HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\n\r\n").framing(for: .get) == .length(7))
        #expect(throws: HTTPClientError.self) {
            try head("HTTP/1.1 200 OK\r\nContent-Length: 7\r\nContent-Length: 8\r\n\r\n").framing(for: .get)
        }
        #expect(throws: HTTPClientError.self) {
            try head("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n").framing(for: .get)
        }
        #expect(try head("HTTP/1.0 200 OK\r\n\r\n").keepAlive == false)
        #expect(try head("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n").keepAlive)
        #expect(try head("HTTP/1.1 200 OK\r\nConnection: Keep-Alive, Close\r\n\r\n").keepAlive == false)
        #expect(try head("HTTP/1.1 404 \r\n\r\n").reason == "")
        #expect(try HTTPClientResponseHead.parse(Array("HTTP/1.1 200 OK\r\nA: b\r\n".utf8)[...], limit: 100) == nil)
        #expect(throws: HTTPClientError.self) { try head("HTTP/2 200 OK\r\n\r\n") }
        #expect(throws: HTTPClientError.self) { try head("HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n") }
        #expect(throws: HTTPClientError.self) { try head("HTTP/1.1 200 OK\r\n folded\r\n\r\n") }
    }

    @Test func eventStreamLinesEndInCRLFOrLFOrCR() throws {
        var decoder = SSEDecoder()
        let stream = "\u{FEFF}: ping\r\n\r\nid: 7\rdata: a\r\rdata:b\ndata\n\nretry: 15x\nretry: 1500\nevent: e\n\n"
        for byte in stream.utf8 { try decoder.feed([byte]) }  // a CRLF split across feeds counts once
        #expect(decoder.nextEvent() == SSEEvent(comments: ["ping"]))
        #expect(decoder.nextEvent() == SSEEvent(id: "7", data: "a"))
        #expect(decoder.nextEvent() == SSEEvent(data: "b\n"))
        #expect(decoder.nextEvent() == SSEEvent(event: "e", retry: 1500))
        #expect(decoder.nextEvent() == nil)
        #expect(decoder.lastEventID == "7")
        try decoder.feed(Array("data: partial".utf8))
        #expect(decoder.nextLine() == nil)
        try decoder.feed([13])
        #expect(decoder.nextLine() == "data: partial")
    }

    @Test func urlsParseIntoHostPortAndTarget() throws {
        func parts(_ url: String) throws -> [String] {
            let parsed = try HTTPClientURL(url)
            return [parsed.host, String(parsed.port), parsed.target]
        }
        #expect(try parts("http://127.0.0.1:8080/a/b?c=d#frag") == ["127.0.0.1", "8080", "/a/b?c=d"])
        #expect(try parts("HTTP://localhost") == ["localhost", "80", "/"])
        #expect(try parts("http://[::1]:9/x") == ["::1", "9", "/x"])
        #expect(try HTTPClientURL("http://h?q=1").target == "/?q=1")
        #expect(try parts("https://example.com/hook") == ["example.com", "443", "/hook"])
        #expect(try HTTPClientURL("HTTPS://h:8443").scheme == .https)
        for bad in ["http://", "https://", "http://u@h/", "http://h:0/", "http://h:99999/", "ftp://h", "http://:80/", "http://::1/"] {
            #expect(throws: HTTPClientError.self, "\(bad)") { try HTTPClientURL(bad) }
        }
    }
}

// MARK: - Against a loopback server

@Suite(.serialized) struct HTTPClientTests {
    static let okJSON =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n{\"status\":\"ok\"}"

    @Test func contentLengthResponseAndRequestFraming() throws {
        let server = try CannedServer { conn in
            while conn.readRequest() != nil { conn.write(Self.okJSON) }
        }
        defer { server.stop() }
        let client = try HTTPClientConnection(host: "127.0.0.1", port: server.port)
        defer { client.close() }

        let response = try client.send(
            method: .post, path: "/v1/things?x=1", headers: ["X-Id": "42"], body: "{\"a\":1}")
        #expect(response.status == 200)
        #expect(response.reason == "OK")
        #expect(response.headers["content-type"] == "application/json")
        #expect(response.text == #"{"status":"ok"}"#)
        let empty = try client.send(method: .put, path: "/empty")
        #expect(empty.status == 200)

        let requests = server.requests
        #expect(requests.count == 2)
        #expect(requests[0].hasPrefix("POST /v1/things?x=1 HTTP/1.1\r\n"))
        #expect(requests[0].contains("\r\nHost: 127.0.0.1:\(server.port)\r\n"))
        #expect(requests[0].contains("\r\nX-Id: 42\r\n"))
        #expect(requests[0].contains("\r\nContent-Length: 7\r\n"))
        #expect(requests[0].hasSuffix("\r\n\r\n{\"a\":1}"))
        #expect(requests[1].contains("\r\nContent-Length: 0\r\n"), "PUT without a body still says its length")
    }

    @Test func chunkedResponseWithTrailersSplitAcrossWrites() throws {
        let server = try CannedServer { conn in
            guard conn.readRequest() != nil else { return }
            let wire =
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n"
                + "5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Checksum: abc\r\n\r\n"
            for piece in wire.utf8.chunked(by: 4) {
                conn.write(piece)
                conn.pause(milliseconds: 2)
            }
            while conn.readRequest() != nil { conn.write(Self.okJSON) }
        }
        defer { server.stop() }
        let client = try HTTPClientConnection(host: "127.0.0.1", port: server.port)
        defer { client.close() }

        let response = try client.send(method: .get, path: "/chunked")
        #expect(response.text == "hello, world")
        #expect(response.trailers["x-checksum"] == "abc")
        let next = try client.send(method: .get, path: "/after")
        #expect(next.text == #"{"status":"ok"}"#, "the chunked framing was consumed exactly")
        #expect(client.connectCount == 1)
    }

    @Test func closeDelimitedResponseThenReconnect() throws {
        let server = try CannedServer { conn in
            guard conn.readRequest() != nil else { return }
            conn.write("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end")
        }
        defer { server.stop() }
        let client = try HTTPClientConnection(host: "127.0.0.1", port: server.port)
        defer { client.close() }

        #expect(try client.send(method: .get, path: "/").text == "until the end")
        #expect(try client.send(method: .get, path: "/").text == "until the end")
        #expect(client.connectCount == 2, "a close-delimited body cannot be followed by another response")
        #expect(server.acceptedCount == 2)
    }

    @Test func interimResponsesAreSkipped() throws {
        let server = try CannedServer { conn in
            guard conn.readRequest() != nil else { return }
            conn.write("HTTP/1.1 100 Continue\r\n\r\n")
            conn.pause(milliseconds: 5)
            conn.write("HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
            conn.write("HTTP/1.1 201 Created\r\nContent-Length: 2\r\nLocation: /x/1\r\n\r\nok")
        }
        defer { server.stop() }
        let client = try HTTPClientConnection(host: "127.0.0.1", port: server.port)
        defer { client.close() }

        let response = try client.send(
            method: .post, path: "/x", headers: ["Expect": "100-continue"], body: Array(repeating: 65, count: 10))
        #expect(response.status == 201)
        #expect(response.headers["Location"] == "/x/1")
        #expect(response.headers["Link"] == nil)
        #expect(response.text == "ok")
    }

    @Test func keepAliveReusesOneConnectionForThreeRequests() throws {
        let server = try CannedServer { conn in
            var n = 0
            while conn.readRequest() != nil {
                n += 1
                conn.write("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n\(n)")
            }
        }
        defer { server.stop() }
        let client = try HTTPClientConnection(host: "127.0.0.1", port: server.port)
        defer { client.close() }

        let bodies = try (0..<3).map { _ in try client.send(method: .get, path: "/count").text }
        #expect(bodies == ["1", "2", "3"])
        #expect(client.connectCount == 1)
        #expect(server.acceptedCount == 1)
    }

    @Test func headAnd204And304HaveNoBody() throws {
        let server = try CannedServer { conn in
            guard conn.readRequest() != nil else { return }
            conn.write("HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n")
            guard conn.readRequest() != nil else { return }
            conn.write("HTTP/1.1 204 No Content\r\n\r\n")
            guard conn.readRequest() != nil else { return }
            conn.write("HTTP/1.1 304 Not Modified\r\nContent-Length: 15\r\n\r\n")
            guard conn.readRequest() != nil else { return }
            conn.write(Self.okJSON)
        }
        defer { server.stop() }
        let client = try HTTPClientConnection(host: "127.0.0.1", port: server.port)
        defer { client.close() }

        let head = try client.send(method: .head, path: "/healthz")
        #expect(head.status == 200 && head.body.isEmpty && head.headers["Content-Length"] == "15")
        #expect(try client.send(method: .delete, path: "/x").status == 204)
        #expect(try client.send(method: .get, path: "/x").status == 304)
        #expect(try client.send(method: .get, path: "/healthz").text == #"{"status":"ok"}"#)
        #expect(client.connectCount == 1)
    }

    @Test func pipelinedRawRequests() throws {
        let server = try CannedServer { conn in
            while let request = conn.readRequest() {
                let path = request.split(separator: " ")[1]
                conn.write("HTTP/1.1 200 OK\r\nContent-Length: \(path.utf8.count)\r\n\r\n\(path)")
            }
        }
        defer { server.stop() }
        let client = try HTTPClientConnection(host: "127.0.0.1", port: server.port)
        defer { client.close() }

        try client.sendRaw("GET /one HTTP/1.1\r\nHost: x\r\n\r\nGET /two HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(try client.readResponse().text == "/one")
        #expect(try client.readResponse().text == "/two")
    }

    @Test func peerCloseIsDetectedAndRawBytesAreReadable() throws {
        let server = try CannedServer { conn in
            guard let request = conn.readRequest() else { return }
            if request.hasPrefix("GET /close") {
                conn.write("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            } else {
                conn.write(Self.okJSON)
                conn.waitForClose()
            }
        }
        defer { server.stop() }

        let closing = try HTTPClientConnection(host: "127.0.0.1", port: server.port)
        defer { closing.close() }
        try closing.sendRaw("GET /close HTTP/1.1\r\n\r\n")
        let started = ContinuousClock.now
        let raw = String(decoding: closing.readAvailable(timeout: .seconds(5)), as: UTF8.self)
        #expect(raw == "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        #expect(ContinuousClock.now - started < .seconds(2), "readAvailable returns at close, not at the timeout")
        #expect(closing.isClosedByPeer(timeout: .seconds(1)))

        let open = try HTTPClientConnection(host: "127.0.0.1", port: server.port)
        defer { open.close() }
        #expect(try open.send(method: .get, path: "/stay").status == 200)
        #expect(open.isClosedByPeer(timeout: .milliseconds(150)) == false)
    }

    @Test func serverThatNeverAnswersTimesOut() throws {
        let server = try CannedServer { conn in
            _ = conn.readRequest()
            conn.waitForClose()
        }
        defer { server.stop() }
        let client = try HTTPClientConnection(host: "127.0.0.1", port: server.port, timeout: .milliseconds(300))
        defer { client.close() }

        let started = ContinuousClock.now
        let error = #expect(throws: HTTPClientError.self) { try client.send(method: .get, path: "/silent") }
        let elapsed = ContinuousClock.now - started
        #expect(error?.kind == .timeout)
        #expect(elapsed >= .milliseconds(250) && elapsed < .seconds(2), "took \(elapsed)")

        let oneShot = ContinuousClock.now
        let urlError = #expect(throws: HTTPClientError.self) {
            try HTTPClient.request(.get, url: "http://127.0.0.1:\(server.port)/silent", timeout: .milliseconds(200))
        }
        #expect(urlError?.kind == .timeout)
        #expect(ContinuousClock.now - oneShot < .seconds(2))
    }

    @Test func limitsAndMalformedResponses() throws {
        let server = try CannedServer { conn in
            guard let request = conn.readRequest() else { return }
            if request.hasPrefix("GET /big-head") {
                conn.write(
                    "HTTP/1.1 200 OK\r\nX-Big: \(String(repeating: "a", count: 70 * 1024))\r\nContent-Length: 0\r\n\r\n"
                )
            } else if request.hasPrefix("GET /big-body") {
                conn.write("HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n01234567890123456789")
            } else if request.hasPrefix("GET /big-chunked") {
                conn.write(
                    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n01234567\r\n8\r\n01234567\r\n0\r\n\r\n")
            } else if request.hasPrefix("GET /garbage") {
                conn.write("HTTX/1.1 200 OK\r\n\r\n")
            } else {
                conn.write("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort")
            }
        }
        defer { server.stop() }
        func kind(_ path: String) -> HTTPClientError.Kind? {
            do {
                let client = try HTTPClientConnection(host: "127.0.0.1", port: server.port, timeout: .seconds(5))
                defer { client.close() }
                client.maxBodyBytes = 10
                _ = try client.send(method: .get, path: path)
                return nil
            } catch let error as HTTPClientError {
                return error.kind
            } catch {
                return nil
            }
        }
        #expect(kind("/big-head") == .tooLarge)
        #expect(kind("/big-body") == .tooLarge)
        #expect(kind("/big-chunked") == .tooLarge)
        #expect(kind("/garbage") == .malformedResponse)
        #expect(kind("/truncated") == .closed)

        let client = try HTTPClientConnection(host: "127.0.0.1", port: server.port)
        defer { client.close() }
        client.maxBodyBytes = 10
        #expect(throws: HTTPClientError.self) { try client.send(method: .get, path: "/big-body") }
        client.maxBodyBytes = 100
        #expect(try client.send(method: .get, path: "/big-body").text == "01234567890123456789")
        #expect(client.connectCount == 2, "a connection left in the middle of a response is not reused")
    }

    @Test func connectFailuresAndBadRequests() throws {
        let port = try CannedServer.unusedPort()
        let refused = #expect(throws: HTTPClientError.self) { try HTTPClientConnection(host: "127.0.0.1", port: port) }
        #expect(refused?.kind == .connectFailed)

        let server = try CannedServer { conn in
            while conn.readRequest() != nil { conn.write(Self.okJSON) }
        }
        defer { server.stop() }
        let client = try HTTPClientConnection(host: "localhost", port: server.port)
        defer { client.close() }
        let injected = #expect(throws: HTTPClientError.self) {
            try client.send(method: .get, path: "/", headers: ["X-Evil": "a\r\nInjected: yes"])
        }
        #expect(injected?.kind == .invalidRequest)
        #expect(throws: HTTPClientError.self) { try client.send(method: .get, path: "/a b") }
        #expect(try client.send(method: .get, path: "/").status == 200, "localhost resolves and reaches 127.0.0.1")
    }

    @Test func staleKeepAliveConnectionIsRetriedForIdempotentRequests() throws {
        let server = try CannedServer { conn in
            guard conn.readRequest() != nil else { return }
            conn.write(Self.okJSON)  // then closes without saying `Connection: close`
        }
        defer { server.stop() }
        let client = try HTTPClientConnection(host: "127.0.0.1", port: server.port)
        defer { client.close() }

        #expect(try client.send(method: .get, path: "/1").status == 200)
        #expect(client.isClosedByPeer(timeout: .seconds(2)))
        #expect(try client.send(method: .get, path: "/2").status == 200)
        #expect(client.connectCount == 2)
    }

    @Test func oneShotAndAsyncRequestsByURL() async throws {
        let server = try CannedServer { conn in
            guard conn.readRequest() != nil else { return }
            conn.pause(milliseconds: 500)
            conn.write(Self.okJSON)
        }
        defer { server.stop() }
        let url = "http://127.0.0.1:\(server.port)/healthz"
        #expect(try HTTPClient.request(.get, url: url).text == #"{"status":"ok"}"#)

        // Eight requests that each wait 0.5 s: blocking the 2-thread cooperative pool would take at least 2 s.
        let started = ContinuousClock.now
        let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<8 { group.addTask { try await HTTPClient.requestAsync(.get, url: url).status } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(statuses == Array(repeating: 200, count: 8))
        #expect(ContinuousClock.now - started < .milliseconds(1800), "took \(ContinuousClock.now - started)")

        let refused = try CannedServer.unusedPort()
        await #expect(throws: HTTPClientError.self) {
            try await HTTPClient.requestAsync(.get, url: "http://127.0.0.1:\(refused)/")
        }
    }

    @Test func serverSentEventsSplitAcrossChunks() throws {
        let events =
            ": ping\r\n\r\n"
            + "id: 1\r\nevent: message.created\r\ndata: line one\r\ndata: line two\r\n\r\n"
            + "retry: 2500\rdata:x\r\r"
            + "id: 2\ndata: {\"a\":1}\n\n"
        let server = try CannedServer { conn in
            guard let request = conn.readRequest() else { return }
            guard request.contains("\r\nAccept: text/event-stream\r\n") else {
                conn.write("HTTP/1.1 406 Not Acceptable\r\nContent-Length: 0\r\n\r\n")
                return
            }
            conn.write("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            // Chunks of 1 to 7 bytes so that lines, CRLF pairs and the chunk framing itself are all split.
            var sizes = [1, 2, 3, 5, 7].makeIterator()
            var rest = Array(events.utf8)[...]
            while !rest.isEmpty {
                var size = sizes.next() ?? 0
                if size == 0 {
                    sizes = [1, 2, 3, 5, 7].makeIterator()
                    size = sizes.next()!
                }
                let chunk = rest.prefix(size)
                rest = rest.dropFirst(chunk.count)
                let framed = Array(String(chunk.count, radix: 16).utf8) + [13, 10] + chunk + [13, 10]
                for piece in framed.chunked(by: 3) {
                    conn.write(piece)
                    conn.pause(milliseconds: 1)
                }
            }
            conn.pause(milliseconds: 400)
            conn.write("9\r\ndata: end\r\n2\r\n\n\n\r\n0\r\n\r\n")
            conn.waitForClose()
        }
        defer { server.stop() }
        let client = try HTTPClientConnection(host: "127.0.0.1", port: server.port)
        let stream = try client.openStream(path: "/v1/events", headers: ["Last-Event-ID": "0"])
        defer { stream.close() }

        #expect(stream.status == 200)
        #expect(stream.headers["Content-Type"] == "text/event-stream")
        #expect(try stream.nextEvent(timeout: .seconds(5)) == SSEEvent(comments: ["ping"]))
        #expect(
            try stream.nextEvent(timeout: .seconds(5))
                == SSEEvent(id: "1", event: "message.created", data: "line one\nline two"))
        #expect(try stream.nextEvent(timeout: .seconds(5)) == SSEEvent(data: "x", retry: 2500))
        #expect(try stream.nextLine(timeout: .seconds(5)) == "id: 2")
        // The line taken by `nextLine` bypassed event parsing, so this block has no id.
        #expect(try stream.nextEvent(timeout: .seconds(5)) == SSEEvent(data: #"{"a":1}"#))
        #expect(stream.lastEventID == "1")

        let timeout = #expect(throws: HTTPClientError.self) { try stream.nextEvent(timeout: .milliseconds(100)) }
        #expect(timeout?.kind == .timeout)
        #expect(
            try stream.nextEvent(timeout: .seconds(5)) == SSEEvent(data: "end"), "a timeout leaves the stream usable")
        #expect(try stream.nextEvent(timeout: .seconds(5)) == nil, "the last chunk ends the stream")
    }

    @Test func streamOfAnErrorResponseReadsItsBody() throws {
        let server = try CannedServer { conn in
            guard conn.readRequest() != nil else { return }
            conn.write("HTTP/1.1 401 Unauthorized\r\nContent-Length: 22\r\n\r\n{\"error\":\"no token\"}\r\n")
        }
        defer { server.stop() }
        let stream = try HTTPClient.openStream(url: "http://127.0.0.1:\(server.port)/v1/events")
        defer { stream.close() }
        #expect(stream.status == 401)
        #expect(try stream.nextLine(timeout: .seconds(5)) == #"{"error":"no token"}"#)
        #expect(try stream.nextLine(timeout: .seconds(5)) == nil)
    }
}

// MARK: - The loopback server

/// A tiny blocking HTTP server on `127.0.0.1:0` that answers with canned bytes, for client tests.
///
/// One thread accepts; each connection gets its own thread running `handler`. `stop()` shuts every socket down
/// and joins every thread. Owner: `state` is guarded by its `Mutex`.
final class CannedServer: Sendable {
    let port: Int
    private let listenFD: Int32
    private let handler: @Sendable (CannedConnection) -> Void
    private let state = Mutex(State())

    private struct State {
        var stopping = false
        var accepted = 0
        var open: Set<Int32> = []
        var threads: [pthread_t] = []
        var acceptThread: pthread_t?
        var requests: [String] = []
    }

    init(handler: @escaping @Sendable (CannedConnection) -> Void) throws {
        self.handler = handler
        (listenFD, port) = try Self.listen()
        let thread = try spawnThread { [self] in acceptLoop() }
        state.withLock { $0.acceptThread = thread }
    }

    /// How many connections were accepted so far.
    var acceptedCount: Int { state.withLock { $0.accepted } }

    /// The requests read so far (heads and bodies), in order.
    var requests: [String] { state.withLock { $0.requests } }

    func record(_ request: String) { state.withLock { $0.requests.append(request) } }

    /// Shuts down the listener and every connection, then waits for all threads.
    func stop() {
        let acceptThread = state.withLock { s -> pthread_t? in
            s.stopping = true
            for fd in s.open { shutdown(fd, Int32(SHUT_RDWR)) }
            return s.acceptThread
        }
        shutdown(listenFD, Int32(SHUT_RDWR))
        if let acceptThread { pthread_join(acceptThread, nil) }
        close(listenFD)
        let threads = state.withLock { s -> [pthread_t] in
            for fd in s.open { shutdown(fd, Int32(SHUT_RDWR)) }
            return s.threads
        }
        for thread in threads { pthread_join(thread, nil) }
    }

    private func acceptLoop() {
        while true {
            let fd = accept(listenFD, nil, nil)
            if fd < 0 {
                if errno == EINTR { continue }
                return
            }
            let admitted = state.withLock { s -> Bool in
                if s.stopping { return false }
                s.accepted += 1
                s.open.insert(fd)
                return true
            }
            guard admitted else {
                close(fd)
                return
            }
            guard
                let thread = try? spawnThread({ [self] in
                    handler(CannedConnection(fd: fd, server: self))
                    state.withLock { _ = $0.open.remove(fd) }
                    close(fd)
                })
            else {
                state.withLock { _ = $0.open.remove(fd) }
                close(fd)
                continue
            }
            state.withLock { $0.threads.append(thread) }
        }
    }

    private static func listen() throws -> (Int32, Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw HTTPClientError(.connectFailed, "socket") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                bind(fd, raw, length) == 0 && Glibc.listen(fd, 64) == 0 && getsockname(fd, raw, &length) == 0
            }
        }
        guard ok else {
            close(fd)
            throw HTTPClientError(.connectFailed, "bind/listen on 127.0.0.1:0")
        }
        return (fd, Int(UInt16(bigEndian: address.sin_port)))
    }

    /// A loopback port that nothing listens on (bound, then released).
    static func unusedPort() throws -> Int {
        let (fd, port) = try listen()
        close(fd)
        return port
    }
}

/// One accepted connection of `CannedServer`, used only by its own thread.
final class CannedConnection {
    let fd: Int32
    private let server: CannedServer
    private var buffer: [UInt8] = []

    init(fd: Int32, server: CannedServer) {
        self.fd = fd
        self.server = server
    }

    /// Reads one request (head and `Content-Length` body) and records it; nil at end of stream.
    func readRequest() -> String? {
        while true {
            if let end = headEnd() {
                let head = String(decoding: buffer[..<end], as: UTF8.self)
                var length = 0
                for line in head.split(separator: "\r\n") where line.lowercased().hasPrefix("content-length:") {
                    length = Int(line.dropFirst(15).trimmingPrefix(" ")) ?? 0
                }
                while buffer.count < end + length { guard receive() else { return nil } }
                let request = String(decoding: buffer[..<(end + length)], as: UTF8.self)
                buffer.removeFirst(end + length)
                server.record(request)
                return request
            }
            guard receive() else { return nil }
        }
    }

    func write(_ text: String) { write(Array(text.utf8)) }

    func write(_ bytes: some Collection<UInt8>) {
        let bytes = Array(bytes)
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes {
                send(fd, $0.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
            }
            if n <= 0 {
                if n < 0 && errno == EINTR { continue }
                return
            }
            offset += n
        }
    }

    /// Deliberate real time between the scripted server's writes (split reads, slow peers, timeouts).
    func pause(milliseconds: Int) { usleep(UInt32(milliseconds * 1000)) }

    /// Blocks until the client closes the connection (or `stop()` shuts it down).
    func waitForClose() {
        while receive() {}
    }

    private func receive() -> Bool {
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, $0.count, 0) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return false }
            buffer += chunk[..<n]
            return true
        }
    }

    private func headEnd() -> Int? {
        guard buffer.count >= 4 else { return nil }
        for i in 0...(buffer.count - 4)
        where buffer[i] == 13 && buffer[i + 1] == 10 && buffer[i + 2] == 13 && buffer[i + 3] == 10 {
            return i + 4
        }
        return nil
    }
}

/// Starts a joinable thread running `body`.
private func spawnThread(_ body: @escaping @Sendable () -> Void) throws -> pthread_t {
    final class Box {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
    let box = Unmanaged.passRetained(Box(body)).toOpaque()
    var thread = pthread_t()
    let rc = pthread_create(
        &thread, nil,
        { raw in
            Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue().body()
            return nil
        }, box)
    guard rc == 0 else {
        Unmanaged<Box>.fromOpaque(box).release()
        throw HTTPClientError(.connectFailed, "pthread_create: \(rc)")
    }
    return thread
}

extension Collection {
    /// The collection cut into consecutive pieces of at most `size` elements.
    fileprivate func chunked(by size: Int) -> [[Element]] {
        var pieces: [[Element]] = []
        var rest = self[...]
        while !rest.isEmpty {
            pieces.append(Array(rest.prefix(size)))
            rest = rest.dropFirst(size)
        }
        return pieces
    }
}
