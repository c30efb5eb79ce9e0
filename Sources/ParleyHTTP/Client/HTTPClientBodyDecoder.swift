/// Removes the framing of a response body incrementally (length, chunked with trailers, or until close).
///
/// A value-type state machine with no I/O: the connection feeds it whatever bytes it has buffered and it says how
/// many it consumed. Whole-body reads and `HTTPClientStream` share it. Owned by one connection (one thread).
struct HTTPClientBodyDecoder: Sendable {
    /// Where the decoder is in the body.
    enum State: Sendable, Equatable {
        case length(remaining: Int)
        case chunkSize
        case chunkData(remaining: Int)
        case chunkDataEnd
        case trailers
        case untilClose
        case done
    }

    private(set) var state: State
    /// Trailer fields of a chunked body, complete once `isDone`.
    private(set) var trailers = HTTPHeaders()
    /// Payload bytes produced so far (the decoded body length).
    private(set) var payloadCount = 0
    /// True when a truncating decoder cut the body at `maxBodyBytes` (the rest was not read).
    private(set) var truncated = false
    private var trailerBytes = 0
    private let maxBodyBytes: Int
    private let maxLineBytes: Int
    private let truncating: Bool

    /// Starts decoding a body with `framing`; `maxBodyBytes` bounds the payload, `maxLineBytes` a chunk-size line
    /// and the trailer section. A longer body is a `.tooLarge` error, or with `truncating` ends the body there.
    init(framing: HTTPClientResponseHead.Framing, maxBodyBytes: Int, maxLineBytes: Int = 64 * 1024, truncating: Bool = false)
        throws
    {
        self.maxBodyBytes = maxBodyBytes
        self.maxLineBytes = maxLineBytes
        self.truncating = truncating
        switch framing {
        case .none: state = .done
        case .length(let n):
            guard n <= maxBodyBytes || truncating else {
                throw HTTPClientError(.tooLarge, "response body of \(n) bytes exceeds \(maxBodyBytes)")
            }
            state = n == 0 ? .done : .length(remaining: n)
        case .chunked: state = .chunkSize
        case .untilClose: state = .untilClose
        }
    }

    /// True once the whole body (and any trailers) has been consumed.
    var isDone: Bool { state == .done }

    /// Consumes a prefix of `input`, appending decoded payload to `output`; returns how many bytes it consumed.
    ///
    /// It stops at the end of the body (bytes after it belong to the next response) or when the rest of `input` is
    /// an incomplete line that needs more bytes.
    mutating func decode(_ input: ArraySlice<UInt8>, into output: inout [UInt8]) throws -> Int {
        var i = input.startIndex
        loop: while i < input.endIndex {
            switch state {
            case .done:
                break loop
            case .length(let remaining):
                let n = min(remaining, input.endIndex - i)
                try emit(input[i..<(i + n)], into: &output)
                i += n
                state = remaining == n ? .done : .length(remaining: remaining - n)
            case .untilClose:
                try emit(input[i...], into: &output)
                i = input.endIndex
            case .chunkData(let remaining):
                let n = min(remaining, input.endIndex - i)
                try emit(input[i..<(i + n)], into: &output)
                i += n
                state = remaining == n ? .chunkDataEnd : .chunkData(remaining: remaining - n)
            case .chunkSize:
                guard let line = try nextLine(input[i...]) else { break loop }
                i = line.next
                let size = try Self.parseChunkSize(line.text)
                guard size <= maxBodyBytes - payloadCount || truncating else {
                    throw HTTPClientError(.tooLarge, "chunked response body exceeds \(maxBodyBytes) bytes")
                }
                state = size == 0 ? .trailers : .chunkData(remaining: size)
            case .chunkDataEnd:
                guard let line = try nextLine(input[i...]) else { break loop }
                guard line.text.isEmpty else {
                    throw HTTPClientError(.malformedResponse, "chunk data is not followed by CRLF")
                }
                i = line.next
                state = .chunkSize
            case .trailers:
                guard let line = try nextLine(input[i...]) else { break loop }
                i = line.next
                trailerBytes += line.text.count + 2
                guard trailerBytes <= maxLineBytes else {
                    throw HTTPClientError(.tooLarge, "trailer section exceeds \(maxLineBytes) bytes")
                }
                if line.text.isEmpty {
                    state = .done
                } else {
                    let field = try HTTPClientResponseHead.parseField(line.text)
                    trailers.add(field.name, field.value)
                }
            }
            if truncated {
                state = .done
                break loop
            }
        }
        return i - input.startIndex
    }

    /// Ends the body at end of stream: fine for an until-close body, an error for any other unfinished body.
    mutating func finishAtEndOfStream() throws {
        switch state {
        case .done: return
        case .untilClose: state = .done
        default: throw HTTPClientError(.closed, "connection closed in the middle of the response body")
        }
    }

    private mutating func emit(_ bytes: ArraySlice<UInt8>, into output: inout [UInt8]) throws {
        let room = maxBodyBytes - payloadCount
        if bytes.count > room && truncating {
            output.append(contentsOf: bytes.prefix(room))
            payloadCount += room
            truncated = true
            return
        }
        guard bytes.count <= room else {
            throw HTTPClientError(.tooLarge, "response body exceeds \(maxBodyBytes) bytes")
        }
        payloadCount += bytes.count
        output.append(contentsOf: bytes)
    }

    /// The next complete line of `input` (without CRLF or LF) and the index after it, or nil if it is incomplete.
    private func nextLine(_ input: ArraySlice<UInt8>) throws -> (text: ArraySlice<UInt8>, next: Int)? {
        guard let lf = input.firstIndex(of: UInt8(ascii: "\n")) else {
            if input.count > maxLineBytes {
                throw HTTPClientError(.tooLarge, "chunk framing line exceeds \(maxLineBytes) bytes")
            }
            return nil
        }
        var text = input[input.startIndex..<lf]
        if text.last == UInt8(ascii: "\r") { text = text.dropLast() }
        return (text, lf + 1)
    }

    /// Parses `1a2b[;ext…]` (hex size, optional whitespace and extensions, which are ignored).
    static func parseChunkSize(_ line: ArraySlice<UInt8>) throws -> Int {
        var size = 0
        var digits = 0
        for byte in line {
            let value: Int
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = Int(byte - 48)
            case UInt8(ascii: "a")...UInt8(ascii: "f"): value = Int(byte - 87)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): value = Int(byte - 55)
            case UInt8(ascii: ";"), UInt8(ascii: " "), UInt8(ascii: "\t"):
                guard digits > 0 else { throw HTTPClientError(.malformedResponse, "bad chunk size line") }
                return size
            default:
                throw HTTPClientError(.malformedResponse, "bad chunk size line: \(HTTPClientBytes.printable(line))")
            }
            digits += 1
            guard digits <= 15 else { throw HTTPClientError(.tooLarge, "chunk size does not fit") }
            size = size * 16 + value
        }
        guard digits > 0 else { throw HTTPClientError(.malformedResponse, "empty chunk size line") }
        return size
    }
}
