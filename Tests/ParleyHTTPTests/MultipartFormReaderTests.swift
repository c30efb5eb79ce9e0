import ParleyHTTP
import Testing

/// `multipart/form-data` read as it arrives: the framing holds wherever the chunks split it (a delimiter may straddle
/// any chunk border), part bodies come out byte-identical whatever they contain, memory stays within two chunks plus
/// the boundary, and every malformed body fails with its own error.
@Suite struct MultipartFormReaderTests {
    /// One part as read back: headers and the whole body.
    struct ReadPart: Equatable {
        var name: String
        var filename: String?
        var contentType: String
        var body: [UInt8]
    }

    /// A boundary like curl's (`curl -F` uses 24 dashes and 16 hex digits, and the body adds two more dashes).
    static let boundary = "------------------------d74496d66958873e"

    /// A chunk source over `body` cut into the given sizes (the last piece takes the rest); counts its calls.
    final class Chunks {
        let body: [UInt8]
        var sizes: [Int]
        var offset = 0
        var nilReturned = 0
        var largest = 0

        init(_ body: [UInt8], sizes: [Int]) {
            self.body = body
            self.sizes = sizes
        }

        func next() -> [UInt8]? {
            guard offset < body.count else {
                nilReturned += 1
                return nil
            }
            let size = sizes.isEmpty ? body.count - offset : min(sizes.removeFirst(), body.count - offset)
            defer { offset += size }
            largest = max(largest, size)
            return Array(body[offset..<offset + size])
        }
    }

    /// A body built the way curl builds it: each part's headers, a blank line, its bytes, CRLF before the next delimiter.
    static func form(_ parts: [(headers: String, body: [UInt8])], boundary: String = boundary, preamble: String = "", epilogue: String = "\r\n")
        -> [UInt8]
    {
        var bytes = Array(preamble.utf8)
        for part in parts {
            bytes += Array("--\(boundary)\r\n\(part.headers)\r\n".utf8) + part.body + [13, 10]
        }
        bytes += Array("--\(boundary)--\(epilogue)".utf8)
        return bytes
    }

    static func fileHeaders(_ name: String, _ filename: String, _ type: String = "application/octet-stream") -> String {
        "Content-Disposition: form-data; name=\"\(name)\"; filename=\"\(filename)\"\r\nContent-Type: \(type)\r\n"
    }

    static func fieldHeaders(_ name: String) -> String { "Content-Disposition: form-data; name=\"\(name)\"\r\n" }

    /// Reads every part whole through `readPiece`, checking that no piece is empty or larger than a chunk.
    static func readAllParts(_ reader: MultipartFormReader, largestChunk: () -> Int) throws -> [ReadPart] {
        var parts: [ReadPart] = []
        while let part = try reader.nextPart() {
            var body: [UInt8] = []
            while let piece = try part.readPiece() {
                #expect(!piece.isEmpty)
                #expect(piece.count <= largestChunk())
                body += piece
            }
            #expect(try part.readPiece() == nil)
            parts.append(ReadPart(name: part.name, filename: part.filename, contentType: part.contentType, body: body))
        }
        #expect(try reader.nextPart() == nil)
        return parts
    }

    static func read(_ body: [UInt8], sizes: [Int] = [], boundary: String = boundary) throws -> [ReadPart] {
        let chunks = Chunks(body, sizes: sizes)
        let reader = try MultipartFormReader(boundary: boundary, source: chunks.next)
        return try readAllParts(reader, largestChunk: { chunks.largest })
    }

    /// The error reading `body` whole throws (nil when it reads cleanly).
    static func failure(_ body: [UInt8], sizes: [Int] = []) -> MultipartError? {
        do {
            _ = try read(body, sizes: sizes)
            return nil
        } catch {
            return error as? MultipartError
        }
    }

    /// Deterministic bytes and sizes (SplitMix64), so a failure replays.
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

    /// File content that tries to fool the delimiter search: near-delimiters, CR/LF runs, the boundary without its
    /// CRLF, a CRLF and the boundary with one byte changed.
    static let lookAlikes: [UInt8] = Array(
        ("--\(boundary)\r\n\r\n--\(boundary.dropLast())\r\n-\r\r\n--\r\n--" + String(boundary.dropLast()) + "X\n--\(boundary)\r\r\n\n\r").utf8)

    // MARK: - Forms as clients send them

    @Test func aFormAsCurlSendsIt() throws {
        let photo: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE0] + Array("JFIF".utf8) + [0, 13, 10, 0xFF, 0xD9]
        let body = Self.form([
            (Self.fileHeaders("file", "photo.jpg", "image/jpeg"), photo), (Self.fieldHeaders("caption"), Array("at the beach".utf8)),
        ])
        let reader = try MultipartFormReader(boundary: Self.boundary, body: RequestBodyStream(complete: body))
        let file = try #require(try reader.nextPart())
        #expect(file.name == "file")
        #expect(file.filename == "photo.jpg")
        #expect(file.contentType == "image/jpeg")
        #expect(file.headers.map(\.name) == ["content-disposition", "content-type"])
        #expect(try file.readAll(limit: 100) == photo)
        let caption = try #require(try reader.nextPart())
        #expect(caption.name == "caption")
        #expect(caption.filename == nil)
        #expect(caption.contentType == "text/plain")
        #expect(try caption.readAll(limit: 100) == Array("at the beach".utf8))
        #expect(try reader.nextPart() == nil)
    }

    @Test func severalFilesAndFields() throws {
        let first = Array(repeating: UInt8(ascii: "a"), count: 1000)
        let second: [UInt8] = []
        let third = Array("third\r\n".utf8)
        let body = Self.form([
            (Self.fileHeaders("files", "a.txt", "text/plain"), first), (Self.fieldHeaders("note"), Array("x".utf8)),
            (Self.fileHeaders("files", "empty.bin"), second), (Self.fileHeaders("files", "c.txt", "text/plain; charset=utf-8"), third),
        ])
        let parts = try Self.read(body)
        #expect(
            parts == [
                ReadPart(name: "files", filename: "a.txt", contentType: "text/plain", body: first),
                ReadPart(name: "note", filename: nil, contentType: "text/plain", body: Array("x".utf8)),
                ReadPart(name: "files", filename: "empty.bin", contentType: "application/octet-stream", body: second),
                ReadPart(name: "files", filename: "c.txt", contentType: "text/plain; charset=utf-8", body: third),
            ])
    }

    @Test func bytesThatLookLikeADelimiterAndEveryByteValueStayInTheFile() throws {
        let binary = (0..<4096).map { UInt8(truncatingIfNeeded: $0) }
        let contents: [[UInt8]] = [
            Self.lookAlikes, binary, [13], [10], [13, 10], Array("\r\n--".utf8), Self.lookAlikes + [13, 10], [13] + Self.lookAlikes + [13],
        ]
        for content in contents {
            let body = Self.form([(Self.fileHeaders("file", "f.bin"), content), (Self.fieldHeaders("after"), content)])
            let parts = try Self.read(body)
            #expect(parts.map(\.body) == [content, content])
        }
    }

    @Test func aPartsUnreadBodyIsSkippedAndReadsAsEndedOncePassed() throws {
        let body = Self.form([
            (Self.fileHeaders("big", "big.bin"), Array(repeating: 7, count: 200_000)), (Self.fieldHeaders("half"), Array(repeating: 8, count: 5000)),
            (Self.fieldHeaders("last"), Array("end".utf8)),
        ])
        let chunks = Chunks(body, sizes: Array(repeating: 1000, count: 1000))
        let reader = try MultipartFormReader(boundary: Self.boundary, source: chunks.next)
        let big = try #require(try reader.nextPart())
        let half = try #require(try reader.nextPart())
        #expect(try big.readPiece() == nil)
        #expect(half.name == "half")
        #expect(try half.readPiece()?.isEmpty == false)
        let last = try #require(try reader.nextPart())
        #expect(try half.readPiece() == nil)
        #expect(try last.readAll(limit: 10) == Array("end".utf8))
        #expect(try reader.nextPart() == nil)
        #expect(reader.peakBufferedBytes <= 2 * 1000 + Self.boundary.count + 4)
    }

    @Test func filenameForms() throws {
        let dispositions: [(String, String?)] = [
            ("form-data; name=\"f\"; filename=\"fallback.txt\"; filename*=UTF-8''%E2%82%AC%20rates.txt", "€ rates.txt"),
            ("form-data; name=\"f\"; filename*=utf-8'en'caf%C3%A9.txt; filename=\"cafe.txt\"", "café.txt"),
            ("form-data; name=\"f\"; filename*=ISO-8859-1''caf%E9.txt", "café.txt"),
            ("form-data; name=\"f\"; filename=\"a \\\"quoted\\\" \\\\ name.txt\"", "a \"quoted\" \\ name.txt"),
            ("form-data; name=\"f\"; filename=\"résumé.pdf\"", "résumé.pdf"),
            ("form-data; name=f; filename=plain.txt", "plain.txt"),
            ("FORM-DATA ;  NAME = \"f\" ; FileName=\"x;y.txt\" ;", "x;y.txt"),
            ("form-data; name=\"f\"; filename=\"\"", ""),
            ("form-data; name=\"f\"", nil),
        ]
        for (disposition, filename) in dispositions {
            let body = Self.form([("Content-Disposition: \(disposition)\r\n", Array("x".utf8))])
            let parts = try Self.read(body)
            #expect(parts.map(\.name) == ["f"], "\(disposition)")
            #expect(parts.first?.filename == filename, "\(disposition)")
        }
    }

    @Test func headersAreCaseInsensitiveFoldedAndPaddingIsAllowed() throws {
        let headers = "content-type:  image/png \r\nX-Extra: 1\r\nCONTENT-DISPOSITION: form-data;\r\n\tname=\"img\"\r\n"
        var body = Array("--\(Self.boundary)  \t\r\n\(headers)\r\npng".utf8)
        body += Array("\r\n--\(Self.boundary)--".utf8)  // no CRLF after the close delimiter
        let parts = try Self.read(body)
        #expect(parts == [ReadPart(name: "img", filename: nil, contentType: "image/png", body: Array("png".utf8))])
    }

    @Test func aPreambleIsSkippedAndTheEpilogueReadToTheEnd() throws {
        let preamble = "This is a multi-part message in MIME format.\r\n--\(Self.boundary.dropLast()) not yet\r\n"
        let body = Self.form(
            [(Self.fieldHeaders("a"), Array("1".utf8))], preamble: preamble, epilogue: "\r\nthe epilogue, ignored\r\n--\(Self.boundary)\r\n")
        let chunks = Chunks(body, sizes: Array(repeating: 16, count: 100))
        let reader = try MultipartFormReader(boundary: Self.boundary, source: chunks.next)
        let parts = try Self.readAllParts(reader, largestChunk: { chunks.largest })
        #expect(parts.map(\.name) == ["a"])
        #expect(parts.map(\.body) == [Array("1".utf8)])
        // The whole body was consumed, so the connection may carry the next request.
        #expect(chunks.offset == body.count)
        #expect(chunks.nilReturned == 1)
    }

    // MARK: - Chunk borders and memory

    /// A small body with every trap, split once at every offset and also cut into pieces of every size from 1 to 9:
    /// each delimiter, CRLF and header line crosses a chunk border somewhere.
    @Test func everySplitPointReadsTheSame() throws {
        let body = Self.form(
            [
                (Self.fileHeaders("file", "f.bin"), Self.lookAlikes + [0, 255, 13]), (Self.fieldHeaders("x"), [13, 10]), (Self.fieldHeaders("e"), []),
            ],
            preamble: "pre\r\n", epilogue: "\r\npost")
        let expected = try Self.read(body)
        #expect(expected.map(\.body) == [Self.lookAlikes + [0, 255, 13], [13, 10], []])
        for offset in 0...body.count {
            #expect(try Self.read(body, sizes: [offset]) == expected, "split at \(offset)")
        }
        for size in 1...9 {
            #expect(try Self.read(body, sizes: Array(repeating: size, count: body.count)) == expected, "pieces of \(size)")
        }
        for first in stride(from: 0, through: body.count, by: 7) {
            for second in 0...(body.count - first) {
                #expect(try Self.read(body, sizes: [first, second]) == expected, "split at \(first) and \(first + second)")
            }
        }
    }

    /// A 3 MB upload in random chunk sizes comes out byte-identical, and the reader's buffer never holds more than
    /// two chunks plus the delimiter.
    @Test func aLargeFileInRandomChunksIsByteIdenticalInBoundedMemory() throws {
        var random = SeededGenerator(state: 0x5EED)
        var file: [UInt8] = []
        file.reserveCapacity(3 << 20)
        while file.count < 3 << 20 {
            file += (0..<Int.random(in: 1...5000, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            file += Self.lookAlikes
        }
        let body = Self.form([(Self.fieldHeaders("title"), Array("holiday".utf8)), (Self.fileHeaders("file", "big.bin"), file)])
        for round in 0..<4 {
            // Chunks at least as long as a header line, so the unfinished line a reader keeps stays within a chunk.
            let largest = [100, 1500, 16 << 10, 256 << 10][round]
            var cut: [Int] = []
            var total = 0
            while total < body.count {
                cut.append(Int.random(in: 1...largest, using: &random))
                total += cut[cut.count - 1]
            }
            let chunks = Chunks(body, sizes: cut)
            let reader = try MultipartFormReader(boundary: Self.boundary, source: chunks.next)
            let parts = try Self.readAllParts(reader, largestChunk: { chunks.largest })
            #expect(parts.map(\.name) == ["title", "file"])
            #expect(parts.last?.body == file, "chunks up to \(largest) bytes")
            let bound = 2 * chunks.largest + Self.boundary.count + 4
            #expect(reader.peakBufferedBytes <= bound, "peak \(reader.peakBufferedBytes) bytes, chunks up to \(chunks.largest)")
        }
    }

    // MARK: - Malformed bodies

    @Test func malformedBodiesFailWithTheirOwnError() throws {
        let good = Self.fieldHeaders("a")
        let b = Self.boundary
        let cases: [(String, [UInt8], MultipartError)] = [
            ("empty body", [], .missingBoundary),
            ("no delimiter", Array("just some text".utf8), .missingBoundary),
            ("boundary without its CRLF", Array("x--\(b)\r\n\(good)\r\nv".utf8), .missingBoundary),
            ("another boundary", Self.form([(good, [1])], boundary: "other"), .missingBoundary),
            ("ends in a part", Array("--\(b)\r\n\(good)\r\nvalue".utf8), .truncated),
            ("ends in headers", Array("--\(b)\r\n\(good)".utf8), .truncated),
            ("ends at a delimiter", Array("--\(b)".utf8), .truncated),
            ("ends after a delimiter's CR", Array("--\(b)\r".utf8), .truncated),
            ("ends before the close delimiter", Array("--\(b)\r\n\(good)\r\nv\r\n".utf8), .truncated),
            ("delimiter followed by text", Array("--\(b)X\r\n\(good)\r\nv\r\n--\(b)--".utf8), .malformedDelimiter),
            ("padding then text", Array("--\(b) x\r\n\(good)\r\nv\r\n--\(b)--".utf8), .malformedDelimiter),
            ("a header without a colon", Self.form([(good + "Content-Type image/png\r\n", [1])]), .malformedHeader),
            ("a header name with a space", Self.form([(good + "Content-Type : image/png\r\n", [1])]), .malformedHeader),
            ("an empty header name", Self.form([(good + ": x\r\n", [1])]), .malformedHeader),
            ("a fold with no header", Self.form([(" folded\r\n" + good, [1])]), .malformedHeader),
            ("headers over 8 KiB", Self.form([(good + "X-Long: \(String(repeating: "a", count: 8 << 10))\r\n", [1])]), .headersTooLarge),
            ("an endless header line", Array("--\(b)\r\n\(good)X: \(String(repeating: "a", count: 9000))".utf8), .headersTooLarge),
            ("endless padding", Array("--\(b)\(String(repeating: " ", count: 9000))".utf8), .headersTooLarge),
            ("21 header lines", Self.form([(good + String(repeating: "X-A: 1\r\n", count: 20), [1])]), .tooManyHeaderLines),
            ("no Content-Disposition", Self.form([("Content-Type: text/plain\r\n", [1])]), .missingContentDisposition),
            ("not form-data", Self.form([("Content-Disposition: attachment; name=\"a\"\r\n", [1])]), .badContentDisposition("type is not form-data")),
            ("no name", Self.form([("Content-Disposition: form-data; filename=\"a\"\r\n", [1])]), .badContentDisposition("no name parameter")),
            (
                "an unclosed quote", Self.form([("Content-Disposition: form-data; name=\"a\r\n", [1])]),
                .badContentDisposition("malformed parameters")
            ),
            (
                "a dangling escape", Self.form([("Content-Disposition: form-data; name=\"a\\\r\n", [1])]),
                .badContentDisposition("malformed parameters")
            ),
            (
                "a parameter with no value", Self.form([("Content-Disposition: form-data; name\r\n", [1])]),
                .badContentDisposition("malformed parameters")
            ),
            ("an empty token", Self.form([("Content-Disposition: form-data; name=; a=b\r\n", [1])]), .badContentDisposition("malformed parameters")),
            (
                "text after a quote", Self.form([("Content-Disposition: form-data; name=\"a\"b\r\n", [1])]),
                .badContentDisposition("malformed parameters")
            ),
            ("an empty disposition", Self.form([("Content-Disposition: \r\n", [1])]), .badContentDisposition("malformed parameters")),
            (
                "a name given twice", Self.form([("Content-Disposition: form-data; name=\"a\"; NAME=\"b\"\r\n", [1])]),
                .badContentDisposition("parameter name given twice")
            ),
            (
                "a bad percent escape", Self.form([("Content-Disposition: form-data; name=a; filename*=UTF-8''%E2%82\r\n", [1])]),
                .badContentDisposition("malformed filename*")
            ),
            (
                "a short escape", Self.form([("Content-Disposition: form-data; name=a; filename*=UTF-8''a%4\r\n", [1])]),
                .badContentDisposition("malformed filename*")
            ),
            (
                "an unknown charset", Self.form([("Content-Disposition: form-data; name=a; filename*=KOI8-R''a\r\n", [1])]),
                .badContentDisposition("malformed filename*")
            ),
            (
                "no charset quotes", Self.form([("Content-Disposition: form-data; name=a; filename*=a.txt\r\n", [1])]),
                .badContentDisposition("malformed filename*")
            ),
            ("101 parts", Self.form(Array(repeating: (good, [1]), count: 101)), .tooManyParts),
        ]
        for (label, body, error) in cases {
            #expect(Self.failure(body) == error, "\(label)")
            #expect(Self.failure(body, sizes: Array(repeating: 3, count: body.count)) == error, "\(label), in pieces of 3")
        }
        // Exactly at the limits reads.
        #expect(Self.failure(Self.form(Array(repeating: (good, [1]), count: 100))) == nil)
        #expect(Self.failure(Self.form([(good + String(repeating: "X-A: 1\r\n", count: 19), [1])])) == nil)
        let padding = String(repeating: "a", count: MultipartFormReader.maxHeaderBytes - good.utf8.count - "X: \r\n\r\n".utf8.count)
        #expect(Self.failure(Self.form([(good + "X: \(padding)\r\n", [1])])) == nil)
        #expect(Self.failure(Self.form([(good + "X: \(padding)a\r\n", [1])])) == .headersTooLarge)
    }

    @Test func aFieldOverItsLimitFailsAndTheReaderStaysFailed() throws {
        let body = Self.form([(Self.fieldHeaders("note"), Array(repeating: 1, count: 101)), (Self.fieldHeaders("b"), [2])])
        let reader = try MultipartFormReader(boundary: Self.boundary, source: Chunks(body, sizes: [40, 40, 40]).next)
        let note = try #require(try reader.nextPart())
        #expect(throws: MultipartError.partTooLarge(name: "note", limit: 100)) { try note.readAll(limit: 100) }
        #expect(throws: MultipartError.partTooLarge(name: "note", limit: 100)) { try reader.nextPart() }
        #expect("\(MultipartError.partTooLarge(name: "note", limit: 100))" == "multipart field \"note\" over 100 bytes")
    }

    @Test func theSourcesErrorsPassThroughUnwrapped() throws {
        let body = Self.form([(Self.fileHeaders("file", "f"), Array(repeating: 1, count: 1000))])
        let chunks = Chunks(body, sizes: [300])
        var calls = 0
        let reader = try MultipartFormReader(boundary: Self.boundary) {
            calls += 1
            if calls == 2 { throw RequestBodyError.closed }
            return chunks.next()
        }
        let part = try #require(try reader.nextPart())
        #expect(throws: RequestBodyError.closed) {
            while try part.readPiece() != nil {}
        }
        #expect(throws: RequestBodyError.closed) { try reader.nextPart() }
        #expect(calls == 2)
    }

    @Test func anInvalidBoundaryIsRefused() {
        #expect(throws: MultipartError.invalidBoundary) { try MultipartFormReader(boundary: "", source: { nil }) }
        #expect(throws: MultipartError.invalidBoundary) { try MultipartFormReader(boundary: String(repeating: "b", count: 71), source: { nil }) }
        #expect(throws: Never.self) { try MultipartFormReader(boundary: String(repeating: "b", count: 70), source: { nil }) }
    }

    // MARK: - Content-Type

    @Test func boundaryFromContentType() {
        let valid: [(String, String)] = [
            ("multipart/form-data; boundary=------------------------d74496d66958873e", "------------------------d74496d66958873e"),
            ("multipart/form-data; boundary=----WebKitFormBoundary7MA4YWxkTrZu0gW", "----WebKitFormBoundary7MA4YWxkTrZu0gW"),
            ("Multipart/Form-Data; BOUNDARY=abc", "abc"),
            ("multipart/form-data;boundary=\"a b:c\"", "a b:c"),
            ("multipart/form-data; charset=utf-8; boundary=\"q\\\"x\"", "q\"x"),
            ("  multipart/form-data ; boundary = abc ; ", "abc"),
            ("multipart/form-data; boundary=\(String(repeating: "x", count: 70))", String(repeating: "x", count: 70)),
        ]
        for (contentType, boundary) in valid {
            #expect(MultipartFormReader.boundary(fromContentType: contentType) == boundary, "\(contentType)")
        }
        let invalid = [
            "multipart/form-data", "multipart/form-data;", "multipart/form-data; boundary=", "multipart/form-data; boundary=\"\"",
            "multipart/mixed; boundary=abc", "application/json", "", "multipart/form-data; boundary=\(String(repeating: "x", count: 71))",
            "multipart/form-data; boundary=\"abc", "multipart/form-data; boundary=a; boundary=b", "multipart/form-data; boundary=\"trailing \"",
            "multipart/form-data; boundary=\"caf\u{E9}\"", "multipart/form-data; boundary", "multipart/form-data; boundary=a b",
        ]
        for contentType in invalid {
            #expect(MultipartFormReader.boundary(fromContentType: contentType) == nil, "\(contentType)")
        }
    }
}
