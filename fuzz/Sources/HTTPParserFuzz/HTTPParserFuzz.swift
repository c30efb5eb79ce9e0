import ParleyHTTP

/// libFuzzer's entry point for the HTTP/1.1 request parser (scripts/fuzz.sh).
///
/// Besides "never crash, never trap", it checks one property the server relies on: the parser's outcome does not
/// depend on how the bytes arrive. The same input is parsed from one append and from pieces of 1–16 bytes cut at
/// places derived from the input, and both must give the same events (heads, bodies) and the same error.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzHTTPRequestParser(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    let whole = Transcript(parsing: input, pieces: [input.count])
    let split = Transcript(parsing: input, pieces: Transcript.pieces(of: input))
    if whole != split {
        fatalError("the outcome depends on how the bytes arrive:\none append: \(whole)\npieces:     \(split)")
    }
    return 0
}

/// What the parser made of an input: its events, then the error that stopped it, if any.
struct Transcript: Equatable, CustomStringConvertible {
    var events: [String] = []
    var error: String?

    /// The small limits make the fuzzer reach the limit checks with short inputs.
    static let limits = HTTPParserLimits(maxHeadBytes: 512, maxHeaderCount: 8, maxBodyBytes: 256)

    init(parsing input: [UInt8], pieces: [Int]) {
        var parser = HTTPRequestParser(limits: Self.limits)
        var offset = 0
        for length in pieces where offset < input.count {
            let end = min(input.count, offset + length)
            parser.append(Array(input[offset..<end]))
            offset = end
            do {
                while let event = try parser.next() { events.append(Self.describe(event)) }
            } catch {
                self.error = error.description
                return
            }
            // The parser holds no more than it was given (it consumes what it has parsed).
            precondition(parser.bufferedByteCount <= offset, "buffers more than it received")
        }
    }

    /// Piece lengths of 1–16 bytes from a small generator seeded by the input (deterministic per input).
    static func pieces(of input: [UInt8]) -> [Int] {
        var state: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in input { state = (state ^ UInt64(byte)) &* 0x100_0000_01b3 }
        var lengths: [Int] = []
        var total = 0
        while total < input.count {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            let length = Int(state >> 60) + 1
            lengths.append(length)
            total += length
        }
        return lengths
    }

    static func describe(_ event: HTTPRequestParser.Event) -> String {
        switch event {
        case .head(let head):
            let fields = head.headers.map { "\($0.name): \($0.value)" }.joined(separator: "|")
            return "head \(head.method) \(head.target) \(head.version) keepAlive=\(head.keepAlive) "
                + "length=\(head.contentLength.map(String.init) ?? "-") chunked=\(head.chunked) [\(fields)]"
        case .end(let body):
            precondition(body.count <= limits.maxBodyBytes, "a body over the limit was delivered")
            return "end \(body.count) bytes \(body.reduce(UInt64(0)) { $0 &* 31 &+ UInt64($1) })"
        }
    }

    var description: String { (events + [error.map { "error \($0)" } ?? "more input needed"]).joined(separator: " ; ") }
}
