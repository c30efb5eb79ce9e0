import Testing

@testable import ParleyHTTP

/// Tests of the incremental HTTP/1.1 request parser: pure byte-level logic, no I/O.
@Suite("HTTPRequestParser")
struct HTTPRequestParserTests {
    // MARK: - Helpers

    /// An event (or the terminal error) flattened to something Equatable, so whole runs compare at once.
    enum Recorded: Equatable, CustomStringConvertible {
        case head(
            method: String, target: String, version: String, headers: [String], keepAlive: Bool,
            contentLength: Int?, chunked: Bool, expectsContinue: Bool)
        case end(body: [UInt8])
        case error(HTTPParseError)

        init(_ event: HTTPRequestParser.Event) {
            switch event {
            case .head(let h):
                self = .head(
                    method: h.method.rawValue, target: h.target, version: h.version.description,
                    headers: h.headers.map { "\($0.name): \($0.value)" }, keepAlive: h.keepAlive,
                    contentLength: h.contentLength, chunked: h.chunked, expectsContinue: h.expectsContinue)
            case .end(let body):
                self = .end(body: body)
            }
        }

        var description: String {
            switch self {
            case .head(let m, let t, let v, let hs, let ka, let cl, let ch, let ex):
                "head(\(m) \(t) \(v) \(hs) keepAlive=\(ka) cl=\(cl.map(String.init) ?? "nil") chunked=\(ch) expect=\(ex))"
            case .end(let body): "end(\(body.count) bytes: \(String(decoding: body.prefix(40), as: UTF8.self)))"
            case .error(let e): "error(\(e))"
            }
        }
    }

    /// Feeds `pieces` one after another, draining events after each; stops at the first error.
    static func run(
        _ pieces: [[UInt8]], limits: HTTPParserLimits = .init(), parser: inout HTTPRequestParser
    ) -> [Recorded] {
        var out: [Recorded] = []
        for piece in pieces {
            parser.append(piece)
            while true {
                do {
                    guard let event = try parser.next() else { break }
                    out.append(Recorded(event))
                } catch {
                    out.append(.error(error))
                    return out
                }
            }
        }
        return out
    }

    static func run(_ pieces: [[UInt8]], limits: HTTPParserLimits = .init()) -> [Recorded] {
        var parser = HTTPRequestParser(limits: limits)
        return run(pieces, limits: limits, parser: &parser)
    }

    static func run(_ text: String, limits: HTTPParserLimits = .init()) -> [Recorded] {
        run([Array(text.utf8)], limits: limits)
    }

    /// The error a complete input ends in, or nil.
    static func error(_ text: String, limits: HTTPParserLimits = .init()) -> HTTPParseError? {
        if case .error(let e) = run(text, limits: limits).last { return e }
        return nil
    }

    static func status(_ text: String, limits: HTTPParserLimits = .init()) -> Int? {
        error(text, limits: limits)?.status
    }

    /// The single head of `text`, or nil.
    static func head(_ text: String) throws -> HTTPRequestHead {
        var parser = HTTPRequestParser()
        parser.append(Array(text.utf8))
        guard case .head(let head) = try #require(try parser.next()) else {
            Issue.record("expected a head")
            throw HTTPParseError.bad("no head")
        }
        return head
    }

    static let get =
        "GET /users/42?fields=name HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nUser-Agent: test\r\n\r\n"
    static let post =
        "POST /messages HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"text\":\"hi\"}"
    static let chunked =
        "POST /upload HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
        + "5;name=value\r\nhello\r\n"
        + "7;quoted=\"a;b \\\" c\";flag\r\n, world\r\n"
        + "A\r\n0123456789\r\n"
        + "0;last=1\r\nX-Checksum: abc\r\nX-Other: 1\r\n\r\n"
    static let pipelinedPair = get + post

    // MARK: - Fragmentation

    @Test(
        "every split point and byte-at-a-time give identical events",
        arguments: [get, post, chunked, pipelinedPair])
    func fragmentation(_ text: String) {
        let bytes = Array(text.utf8)
        let whole = Self.run([bytes])
        #expect(!whole.isEmpty)
        #expect(!whole.contains { if case .error = $0 { true } else { false } })
        for split in 0...bytes.count {
            var parser = HTTPRequestParser()
            let events = Self.run([Array(bytes[..<split]), Array(bytes[split...])], parser: &parser)
            #expect(events == whole, "split at \(split)")
            #expect(parser.isIdle)
            #expect(parser.bufferedByteCount == 0)
        }
        var parser = HTTPRequestParser()
        let single = Self.run(bytes.map { [$0] }, parser: &parser)
        #expect(single == whole)
        #expect(parser.isIdle)
    }

    @Test func fragmentationOfErrorsIsStable() {
        // The same error must come out however the bytes arrive.
        for text in [
            "GET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "GET / HTTP/2.0\r\n\r\n",
        ] {
            let bytes = Array(text.utf8)
            let whole = Self.run([bytes])
            #expect(Self.run(bytes.map { [$0] }) == whole)
            for split in 0...bytes.count {
                #expect(Self.run([Array(bytes[..<split]), Array(bytes[split...])]) == whole)
            }
        }
    }

    // MARK: - Well-formed requests

    @Test func simpleGet() throws {
        let events = Self.run(Self.get)
        try #require(events.count == 2)
        #expect(
            events[0]
                == .head(
                    method: "GET", target: "/users/42?fields=name", version: "HTTP/1.1",
                    headers: ["Host: example.com", "Accept: */*", "User-Agent: test"], keepAlive: true,
                    contentLength: nil, chunked: false, expectsContinue: false))
        #expect(events[1] == .end(body: []))
        let head = try Self.head(Self.get)
        #expect(head.method == .get)
        #expect(head.rawPath == "/users/42")
        #expect(head.rawQuery == "fields=name")
        #expect(head.headers["host"] == "example.com")
    }

    /// The path and query split at the first `?`, for inline (short) and heap (long) targets alike.
    @Test func rawPathAndQuery() {
        for (target, path, query) in [
            ("/a", "/a", nil), ("/a?", "/a", ""), ("/?x", "/", "x"), ("/a?b?c", "/a", "b?c"),
            ("/v1/users/a-rather-long-user-id?limit=10&after=x", "/v1/users/a-rather-long-user-id", "limit=10&after=x"),
            ("/v1/caf\u{E9}/ünïcödé?q=\u{E9}", "/v1/caf\u{E9}/ünïcödé", "q=\u{E9}"),
        ] as [(String, String, String?)] {
            let head = HTTPRequestHead(method: .get, target: target)
            #expect(head.rawPath == path[...], "\(target)")
            #expect(head.rawQuery.map(String.init) == query, "\(target)")
        }
    }

    @Test func postWithContentLength() throws {
        let events = Self.run(Self.post)
        try #require(events.count == 2)
        guard case .head(_, _, _, _, _, let cl, let chunked, _) = events[0] else {
            Issue.record("no head")
            return
        }
        #expect(cl == 13)
        #expect(!chunked)
        #expect(events[1] == .end(body: Array("{\"text\":\"hi\"}".utf8)))
    }

    @Test func chunkedWithExtensionsAndTrailers() throws {
        let events = Self.run(Self.chunked)
        try #require(events.count == 2)
        guard case .head(_, _, _, let headers, _, let cl, let chunked, _) = events[0] else {
            Issue.record("no head")
            return
        }
        #expect(chunked)
        #expect(cl == nil)
        // Trailers are discarded, never merged into the head.
        #expect(headers == ["Host: h", "Transfer-Encoding: chunked"])
        #expect(events[1] == .end(body: Array("hello, world0123456789".utf8)))
    }

    @Test func chunkedVariants() {
        // Upper/lower hex, leading zeros, whitespace before an extension, bare LF, no trailers.
        let text =
            "POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n0001\r\na\r\nb ;x\r\nabcdefghijk\r\n000\n\n"
        let events = Self.run(text)
        #expect(events.last == .end(body: Array("aabcdefghijk".utf8)))
        // Codings list with empty elements.
        #expect(Self.run("POST / HTTP/1.1\r\nTransfer-Encoding: , chunked\r\n\r\n0\r\n\r\n").last == .end(body: []))
    }

    @Test func threePipelinedRequestsInOneBuffer() {
        let text = Self.get + Self.post + Self.chunked
        var parser = HTTPRequestParser()
        let events = Self.run([Array(text.utf8)], parser: &parser)
        #expect(events.count == 6)
        #expect(events.filter { if case .head = $0 { true } else { false } }.count == 3)
        #expect(events[1] == .end(body: []))
        #expect(events[3] == .end(body: Array("{\"text\":\"hi\"}".utf8)))
        #expect(events[5] == .end(body: Array("hello, world0123456789".utf8)))
        #expect(parser.isIdle)
    }

    @Test func pipelinedRequestWaitsForNext() throws {
        // After `.end` the rest of the buffer is the next request, parsed only on the following calls.
        var parser = HTTPRequestParser()
        parser.append(Array((Self.get + "GET /b HTTP/1.1\r\n").utf8))
        guard case .head = try #require(try parser.next()) else { throw HTTPParseError.bad("x") }
        guard case .end = try #require(try parser.next()) else { throw HTTPParseError.bad("x") }
        #expect(parser.bufferedByteCount == "GET /b HTTP/1.1\r\n".utf8.count)
        #expect(try parser.next() == nil)
        #expect(!parser.isIdle)
        parser.append(Array("\r\n".utf8))
        guard case .head(let second) = try #require(try parser.next()) else { throw HTTPParseError.bad("x") }
        #expect(second.target == "/b")
    }

    @Test func manyPipelinedRequestsInOddPieces() {
        // Long streams exercise buffer compaction and the remembered scan position.
        let one = Array((Self.post + Self.chunked + Self.get).utf8)
        var stream: [UInt8] = []
        for _ in 0..<300 { stream += one }
        var pieces: [[UInt8]] = []
        var i = 0
        var size = 1
        while i < stream.count {
            let n = min(size, stream.count - i)
            pieces.append(Array(stream[i..<i + n]))
            i += n
            size = size % 997 + 13
        }
        var parser = HTTPRequestParser()
        let events = Self.run(pieces, parser: &parser)
        #expect(events.count == 1800)
        #expect(events == Self.run([stream]))
        #expect(parser.isIdle)
    }

    @Test func bareLFLineEndings() throws {
        let events = Self.run("POST /x HTTP/1.1\nHost: h\nContent-Length: 2\n\nok")
        try #require(events.count == 2)
        #expect(events[1] == .end(body: Array("ok".utf8)))
    }

    @Test func leadingEmptyLinesAreSkippedButBounded() throws {
        let head = try Self.head("\r\n\n\r\nGET / HTTP/1.1\r\n\r\n")
        #expect(head.target == "/")
        #expect(Self.status(String(repeating: "\r\n", count: 50) + "GET / HTTP/1.1\r\n\r\n") == 400)
        // A stray CRLF after a body (a classic client bug) does not break the next request.
        let events = Self.run(Self.post + "\r\n" + Self.get)
        #expect(events.count == 4)
    }

    @Test func headerValuesAreTrimmedAndKeptInOrder() throws {
        let head = try Self.head(
            "GET / HTTP/1.1\r\nA:1\r\nB: \t two words \t\r\nA: 3\r\nEmpty:\r\nUtf: caf\u{E9}\r\n\r\n")
        #expect(head.headers.fields.map(\.name) == ["A", "B", "A", "Empty", "Utf"])
        #expect(head.headers.values("a") == ["1", "3"])
        #expect(head.headers["b"] == "two words")
        #expect(head.headers["empty"] == "")
        #expect(head.headers["utf"] == "caf\u{E9}")
    }

    @Test func targetForms() throws {
        #expect(try Self.head("OPTIONS * HTTP/1.1\r\n\r\n").target == "*")
        #expect(try Self.head("GET http://example.com/a/b?c=d HTTP/1.1\r\n\r\n").target == "/a/b?c=d")
        #expect(try Self.head("GET HTTPS://example.com:8443 HTTP/1.1\r\n\r\n").target == "/")
        #expect(try Self.head("GET http://example.com?q=1 HTTP/1.1\r\n\r\n").target == "/?q=1")
        #expect(Self.status("GET * HTTP/1.1\r\n\r\n") == 400)
        #expect(Self.status("GET ftp://x/y HTTP/1.1\r\n\r\n") == 400)
        #expect(Self.status("GET http:///path HTTP/1.1\r\n\r\n") == 400)
        #expect(Self.status("CONNECT example.com:443 HTTP/1.1\r\n\r\n") == 400)
        #expect(Self.status("GET relative HTTP/1.1\r\n\r\n") == 400)
    }

    @Test func customMethodAndMissingHost() throws {
        let head = try Self.head("PROPFIND /dav HTTP/1.1\r\n\r\n")
        #expect(head.method.rawValue == "PROPFIND")
        #expect(head.headers.count == 0)
    }

    // MARK: - Connection and Expect

    @Test func keepAliveRules() throws {
        #expect(try Self.head("GET / HTTP/1.1\r\n\r\n").keepAlive)
        #expect(try !Self.head("GET / HTTP/1.1\r\nConnection: close\r\n\r\n").keepAlive)
        #expect(try !Self.head("GET / HTTP/1.1\r\nConnection: Upgrade, CLOSE\r\n\r\n").keepAlive)
        #expect(try Self.head("GET / HTTP/1.1\r\nConnection: closed\r\n\r\n").keepAlive)
        #expect(try !Self.head("GET / HTTP/1.0\r\n\r\n").keepAlive)
        #expect(try Self.head("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keepAlive)
        #expect(try Self.head("GET / HTTP/1.0\r\nConnection: foo,keep-alive\r\n\r\n").keepAlive)
        #expect(try !Self.head("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n").keepAlive)
        #expect(try Self.head("GET / HTTP/1.0\r\n\r\n").version == .http1_0)
    }

    @Test func expectContinue() throws {
        #expect(try Self.head("POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n").expectsContinue)
        #expect(try Self.head("POST / HTTP/1.1\r\nexpect: 100-Continue\r\n\r\n").expectsContinue)
        #expect(try !Self.head("POST / HTTP/1.1\r\nExpect: something-else\r\n\r\n").expectsContinue)
        #expect(try !Self.head("POST / HTTP/1.1\r\n\r\n").expectsContinue)
        // RFC 9110, section 10.1.1: ignored in HTTP/1.0.
        #expect(try !Self.head("POST / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n").expectsContinue)
    }

    @Test func headCanBeAnsweredBeforeBodyArrives() throws {
        // The server sends 100 Continue after `.head`; the body is not yet there.
        var parser = HTTPRequestParser()
        parser.append(Array("POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n".utf8))
        guard case .head(let head) = try #require(try parser.next()) else { throw HTTPParseError.bad("x") }
        #expect(head.expectsContinue)
        #expect(try parser.next() == nil)
        #expect(!parser.isIdle)
        parser.append(Array("abc".utf8))
        guard case .end(let body) = try #require(try parser.next()) else { throw HTTPParseError.bad("x") }
        #expect(body == Array("abc".utf8))
        #expect(parser.isIdle)
    }

    // MARK: - Limits

    @Test func headBytesLimit() {
        let limits = HTTPParserLimits(maxHeadBytes: 100)
        let line = "GET / HTTP/1.1\r\n"  // 16 bytes
        let filler = "X: " + String(repeating: "a", count: 100 - 16 - 2 - 5) + "\r\n"  // head = exactly 100
        #expect(Self.run(line + filler + "\r\n", limits: limits).count == 2)
        let over = line + "X: " + String(repeating: "a", count: 100 - 16 - 2 - 4) + "\r\n\r\n"
        #expect(Self.status(over, limits: limits) == 431)
        // Detected as soon as the partial head is too large, without waiting for its end.
        #expect(Self.status("GET /" + String(repeating: "a", count: 200), limits: limits) == 431)
        #expect(Self.status(line + "X: " + String(repeating: "b", count: 200), limits: limits) == 431)
        // The default limit is 16 KiB.
        #expect(Self.status("GET /" + String(repeating: "a", count: 16 * 1024)) == 431)
        #expect(HTTPParserLimits().maxHeadBytes == 16 * 1024)
    }

    @Test func headerCountLimit() {
        let fields = { (n: Int) in (0..<n).map { "H\($0): v\r\n" }.joined() }
        #expect(Self.run("GET / HTTP/1.1\r\n" + fields(100) + "\r\n").count == 2)
        let error = Self.error("GET / HTTP/1.1\r\n" + fields(101) + "\r\n")
        #expect(error?.status == 431)
        #expect(error?.kind == .headersTooLarge)
        #expect(Self.status("GET / HTTP/1.1\r\n" + fields(4) + "\r\n", limits: .init(maxHeaderCount: 3)) == 431)
    }

    @Test func contentLengthOverLimit() {
        let limits = HTTPParserLimits(maxBodyBytes: 10)
        let events = Self.run("POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n", limits: limits)
        // The head comes first so the route can raise the limit; the next call fails without waiting for the body.
        #expect(events.count == 2)
        if case .head = events.first {} else { Issue.record("expected head first") }
        #expect(events.last == .error(HTTPParseError(.payloadTooLarge, "request body too large")))
        #expect(Self.run("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789", limits: limits).count == 2)
    }

    @Test func setBodyLimitRaisesAndLowers() throws {
        // Raising.
        var parser = HTTPRequestParser(limits: .init(maxBodyBytes: 4))
        parser.append(Array("POST / HTTP/1.1\r\nContent-Length: 8\r\n\r\n12345678".utf8))
        guard case .head = try #require(try parser.next()) else { throw HTTPParseError.bad("x") }
        parser.setBodyLimit(8)
        guard case .end(let body) = try #require(try parser.next()) else { throw HTTPParseError.bad("x") }
        #expect(body.count == 8)

        // The raised limit was for that request only.
        parser.append(Array("POST / HTTP/1.1\r\nContent-Length: 8\r\n\r\n".utf8))
        guard case .head = try #require(try parser.next()) else { throw HTTPParseError.bad("x") }
        #expect(throws: HTTPParseError.self) { try parser.next() }

        // Lowering.
        var lowered = HTTPRequestParser()
        lowered.append(Array("POST / HTTP/1.1\r\nContent-Length: 8\r\n\r\n".utf8))
        guard case .head = try #require(try lowered.next()) else { throw HTTPParseError.bad("x") }
        lowered.setBodyLimit(7)
        do {
            _ = try lowered.next()
            Issue.record("expected 413")
        } catch {
            #expect(error.status == 413)
        }

        // Lowered after the body started arriving.
        var late = HTTPRequestParser()
        late.append(Array("POST / HTTP/1.1\r\nContent-Length: 8\r\n\r\n1234".utf8))
        guard case .head = try #require(try late.next()) else { throw HTTPParseError.bad("x") }
        #expect(try late.next() == nil)
        late.setBodyLimit(6)
        late.append(Array("5".utf8))
        #expect(throws: HTTPParseError(.payloadTooLarge, "request body too large")) { try late.next() }

        // Chunked: raising lets a larger chunked body through.
        var chunked = HTTPRequestParser(limits: .init(maxBodyBytes: 3))
        chunked.append(Array("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n".utf8))
        guard case .head = try #require(try chunked.next()) else { throw HTTPParseError.bad("x") }
        chunked.setBodyLimit(5)
        guard case .end(let chunkedBody) = try #require(try chunked.next()) else { throw HTTPParseError.bad("x") }
        #expect(chunkedBody == Array("hello".utf8))
    }

    @Test func hugeDeclaredLengthUnderRaisedLimitJustWaits() throws {
        // A route may lift the limit; a declared length must not make the parser reserve it up front.
        var parser = HTTPRequestParser()
        parser.append(Array("POST / HTTP/1.1\r\nContent-Length: 9000000000000000000\r\n\r\nabc".utf8))
        guard case .head(let head) = try #require(try parser.next()) else { throw HTTPParseError.bad("x") }
        #expect(head.contentLength == 9_000_000_000_000_000_000)
        parser.setBodyLimit(.max)
        #expect(try parser.next() == nil)
        #expect(parser.bufferedByteCount == 0)
    }

    @Test func chunkedOverLimit() {
        let limits = HTTPParserLimits(maxBodyBytes: 10)
        let head = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        #expect(Self.status(head + "6\r\nabcdef\r\n5\r\n", limits: limits) == 413)
        // Detected at the chunk size, before the data arrives.
        #expect(Self.status(head + "b\r\n", limits: limits) == 413)
        #expect(
            Self.run(head + "6\r\nabcdef\r\n4\r\nghij\r\n0\r\n\r\n", limits: limits).last
                == .end(body: Array("abcdefghij".utf8)))
        // Many small chunks add up.
        let many = head + String(repeating: "1\r\nx\r\n", count: 11) + "0\r\n\r\n"
        #expect(Self.status(many, limits: limits) == 413)
    }

    @Test func trailerLimits() {
        let head = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n"
        let trailers = (0..<101).map { "T\($0): v\r\n" }.joined()
        #expect(Self.status(head + trailers + "\r\n") == 431)
        #expect(Self.status(head + "T: " + String(repeating: "x", count: 17 * 1024) + "\r\n\r\n") == 431)
        #expect(Self.status(head + "bad trailer\r\n\r\n") == 400)
    }

    @Test func oneMebibyteBody() throws {
        let mib = 1024 * 1024
        let payload = (0..<mib).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let head = Array("POST /big HTTP/1.1\r\nContent-Length: \(mib)\r\n\r\n".utf8)
        // Exactly the default limit is allowed, whether it arrives at once or in socket-sized reads.
        #expect(Self.run([head + payload]).last == .end(body: payload))
        var pieces = [head]
        var i = 0
        while i < payload.count {
            pieces.append(Array(payload[i..<min(i + 65536, payload.count)]))
            i += 65536
        }
        var parser = HTTPRequestParser()
        #expect(Self.run(pieces, parser: &parser).last == .end(body: payload))
        #expect(parser.isIdle)
        // One byte more is refused.
        let over = Array("POST /big HTTP/1.1\r\nContent-Length: \(mib + 1)\r\n\r\n".utf8)
        #expect(Self.run([over]).last == .error(HTTPParseError(.payloadTooLarge, "request body too large")))
        // Chunked, exactly 1 MiB in 64 KiB chunks.
        var chunked = Array("POST /big HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".utf8)
        for start in stride(from: 0, to: mib, by: 65536) {
            chunked += Array("10000\r\n".utf8) + payload[start..<start + 65536] + Array("\r\n".utf8)
        }
        #expect(Self.run([chunked + Array("0\r\n\r\n".utf8)]).last == .end(body: payload))
        #expect(
            Self.run([chunked + Array("1\r\n".utf8)]).last
                == .error(HTTPParseError(.payloadTooLarge, "request body too large")))
    }

    // MARK: - Rejections

    @Test func notImplementedTransferCodings() {
        for te in ["gzip", "gzip, chunked", "chunked, gzip", "deflate", "chunked;q=1"] {
            let e = Self.error("POST / HTTP/1.1\r\nTransfer-Encoding: \(te)\r\n\r\n")
            #expect(e?.status == 501, "\(te)")
            #expect(e?.kind == .notImplemented)
        }
        // Across repeated fields too.
        #expect(Self.status("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n") == 501)
    }

    @Test(
        "400 Bad Request",
        arguments: [
            // Request smuggling: both framings.
            "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
            // Bad Content-Length.
            "POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length:\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
            // Differing Content-Lengths.
            "POST / HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            // Bad chunk sizes and framing.
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5 5\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\rX",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1;a=\u{1}\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: \r\n\r\n",
            "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            // obs-fold.
            "GET / HTTP/1.1\r\nX: a\r\n  folded\r\n\r\n",
            "GET / HTTP/1.1\r\n\tX: a\r\n\r\n",
            // Whitespace before the colon.
            "GET / HTTP/1.1\r\nHost : h\r\n\r\n",
            "GET / HTTP/1.1\r\nHost\t: h\r\n\r\n",
            // Bare CR.
            "GET / HTTP/1.1\rHost: h\r\n\r\n",
            "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n",
            "GET / HTTP/1.1\r\nX: a\r\r\n\r\n",
            "GET / HTTP/1.1\r\n\r\r\n",
            // Control characters, NUL and spaces in the target.
            "GET /a\u{1}b HTTP/1.1\r\n\r\n",
            "GET /a\u{0}b HTTP/1.1\r\n\r\n",
            "GET /a\u{7F} HTTP/1.1\r\n\r\n",
            "GET /a b HTTP/1.1\r\n\r\n",
            "GET /caf\u{E9} HTTP/1.1\r\n\r\n",
            "GET  / HTTP/1.1\r\n\r\n",
            // Missing or garbage version.
            "GET /\r\n\r\n",
            "GET / \r\n\r\n",
            "GET / HTTP/1.1 \r\n\r\n",
            "GET / http/1.1\r\n\r\n",
            "GET / HTTP/1\r\n\r\n",
            "GET / HTTP/1.10\r\n\r\n",
            "GET / HTTP/a.b\r\n\r\n",
            "GET / HTTX/1.1\r\n\r\n",
            // Malformed request line and fields.
            "G@T / HTTP/1.1\r\n\r\n",
            " GET / HTTP/1.1\r\n\r\n",
            "GET\r\n\r\n",
            "GET / HTTP/1.1\r\nno colon\r\n\r\n",
            "GET / HTTP/1.1\r\n: empty name\r\n\r\n",
            "GET / HTTP/1.1\r\nX: a\u{0}b\r\n\r\n",
            "GET / HTTP/1.1\r\nX: a\u{1B}b\r\n\r\n",
            "GET / HTTP/1.1\r\nX\u{1}: a\r\n\r\n",
        ])
    func badRequest(_ text: String) {
        let e = Self.error(text)
        #expect(e?.status == 400, "\(text.debugDescription) → \(e.map(String.init(describing:)) ?? "no error")")
        #expect(e?.kind == .badRequest)
    }

    @Test func repeatedEqualContentLengthsAreAccepted() {
        for cl in ["Content-Length: 5, 5", "Content-Length: 5\r\nContent-Length: 5", "content-length: 005"] {
            #expect(Self.run("POST / HTTP/1.1\r\n\(cl)\r\n\r\nhello").last == .end(body: Array("hello".utf8)), "\(cl)")
        }
    }

    @Test func versionNotSupported() {
        for version in ["HTTP/2.0", "HTTP/0.9", "HTTP/3.0", "HTTP/1.2", "HTTP/9.9"] {
            let e = Self.error("GET / \(version)\r\n\r\n")
            #expect(e?.status == 505, "\(version)")
            #expect(e?.kind == .versionNotSupported)
        }
    }

    @Test func tokenCharacters() {
        let tchar = Set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8)
        for c in UInt8.min...UInt8.max {
            #expect(HTTPRequestParser.isTokenChar(c) == tchar.contains(c), "byte \(c)")
        }
    }

    @Test func errorStatusesMapping() {
        #expect(HTTPParseError(.badRequest, "").status == 400)
        #expect(HTTPParseError(.headersTooLarge, "").status == 431)
        #expect(HTTPParseError(.payloadTooLarge, "").status == 413)
        #expect(HTTPParseError(.notImplemented, "").status == 501)
        #expect(HTTPParseError(.versionNotSupported, "").status == 505)
    }

    @Test func errorsAreSticky() throws {
        var parser = HTTPRequestParser()
        parser.append(Array("GET / HTTP/2.0\r\n\r\n".utf8))
        var first: HTTPParseError?
        do { _ = try parser.next() } catch { first = error }
        let error = try #require(first)
        #expect(error.status == 505)
        parser.append(Array(Self.get.utf8))
        for _ in 0..<3 {
            #expect(throws: error) { try parser.next() }
        }
        #expect(!parser.isIdle)
        #expect(parser.bufferedByteCount == 0)
    }

    @Test func errorDetailsDoNotEchoInput() {
        let secret = "S3CRET"
        for text in [
            "GET /\(secret)\u{1} HTTP/1.1\r\n\r\n", "GET / HTTP/1.1\r\n\(secret) : x\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: \(secret)\r\n\r\n",
        ] {
            let detail = Self.error(text)?.detail ?? ""
            #expect(!detail.isEmpty)
            #expect(!detail.contains(secret))
        }
    }

    @Test func appendFromRawBuffer() throws {
        var parser = HTTPRequestParser()
        let bytes = Array(Self.post.utf8)
        bytes.withUnsafeBytes { parser.append($0) }
        #expect(parser.bufferedByteCount == bytes.count)
        #expect(!parser.isIdle)
        guard case .head = try #require(try parser.next()) else { throw HTTPParseError.bad("x") }
        guard case .end(let body) = try #require(try parser.next()) else { throw HTTPParseError.bad("x") }
        #expect(body.count == 13)
        #expect(try parser.next() == nil)
        #expect(parser.isIdle)
    }

    // MARK: - Garbage

    /// SplitMix64: a tiny deterministic generator so failures reproduce.
    struct SeededGenerator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// Drives random input; it must end in an error or in needing more data, within a bounded number of events.
    static func survives(_ pieces: [[UInt8]], limits: HTTPParserLimits) -> Bool {
        var parser = HTTPRequestParser(limits: limits)
        var events = 0
        for piece in pieces {
            parser.append(piece)
            while true {
                do {
                    guard try parser.next() != nil else { break }
                    events += 1
                    if events > 10_000 { return false }
                } catch {
                    return error.status >= 400
                }
            }
        }
        return true
    }

    @Test func randomBytesNeverCrash() {
        var rng = SeededGenerator(state: 0x5EED)
        let limits = HTTPParserLimits(maxHeadBytes: 512, maxHeaderCount: 8, maxBodyBytes: 256)
        for run in 0..<1000 {
            let length = Int.random(in: 0..<2048, using: &rng)
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let split = Int.random(in: 0...length, using: &rng)
            #expect(Self.survives([Array(bytes[..<split]), Array(bytes[split...])], limits: limits), "run \(run)")
        }
    }

    @Test func mutatedRequestsNeverCrash() {
        // Random bytes rarely get past the request line; mutating valid requests reaches deeper states.
        var rng = SeededGenerator(state: 42)
        let seeds = [Self.get, Self.post, Self.chunked, Self.pipelinedPair].map { Array($0.utf8) }
        let alphabet = Array("\r\n :;,0123456789abcdefABCDEF\t\"\u{0}\u{7F}/?*HTTP".utf8) + [0xFF]
        let limits = HTTPParserLimits(maxHeadBytes: 256, maxHeaderCount: 5, maxBodyBytes: 64)
        for run in 0..<1000 {
            var bytes = seeds[run % seeds.count]
            for _ in 0..<Int.random(in: 1...6, using: &rng) {
                let at = Int.random(in: 0..<bytes.count, using: &rng)
                let byte = alphabet.randomElement(using: &rng)!
                switch Int.random(in: 0..<3, using: &rng) {
                case 0: bytes[at] = byte
                case 1: bytes.insert(byte, at: at)
                default: if bytes.count > 1 { bytes.remove(at: at) }
                }
            }
            let pieces = bytes.map { [$0] }
            #expect(Self.survives(pieces, limits: limits), "run \(run)")
            // Fragmentation must not change the outcome of malformed input either.
            #expect(Self.run(pieces, limits: limits) == Self.run([bytes], limits: limits), "run \(run)")
        }
    }
}
