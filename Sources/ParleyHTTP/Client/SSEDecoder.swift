/// Splits an `text/event-stream` body into lines and events, following the WHATWG HTML parsing rules.
///
/// A value-type state machine with no I/O: feed it decoded body bytes, then take lines or events. Lines end in
/// CRLF, LF or CR (a CRLF split across two feeds counts once); a leading byte-order mark is dropped. Owned by one
/// `HTTPClientStream` (one thread).
struct SSEDecoder: Sendable {
    private var partial: [UInt8] = []
    private var lines: [String] = []
    private var nextLineIndex = 0
    private var afterCR = false
    private var firstLine = true
    private let maxLineBytes: Int

    private var id: String?
    private var event: String?
    private var data = ""
    private var hasData = false
    private var comments: [String] = []
    private var retry: Int?
    private var hasFields = false

    /// The last `id` seen on the stream (what a reconnecting client sends as `Last-Event-ID`).
    private(set) var lastEventID: String?

    init(maxLineBytes: Int = 1024 * 1024) {
        self.maxLineBytes = maxLineBytes
    }

    /// Adds body bytes; complete lines become available to `nextLine` and `nextEvent`.
    mutating func feed(_ bytes: some Sequence<UInt8>) throws {
        for byte in bytes {
            if afterCR {
                afterCR = false
                if byte == UInt8(ascii: "\n") { continue }
            }
            if byte == UInt8(ascii: "\n") || byte == UInt8(ascii: "\r") {
                finishLine()
                afterCR = byte == UInt8(ascii: "\r")
            } else {
                partial.append(byte)
                if partial.count > maxLineBytes {
                    throw HTTPClientError(.tooLarge, "event-stream line exceeds \(maxLineBytes) bytes")
                }
            }
        }
    }

    private mutating func finishLine() {
        var bytes = partial[...]
        if firstLine {
            firstLine = false
            if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes = bytes.dropFirst(3) }
        }
        lines.append(String(decoding: bytes, as: UTF8.self))
        partial.removeAll(keepingCapacity: true)
    }

    /// The next complete line, without its line ending, or nil if none is buffered.
    mutating func nextLine() -> String? {
        guard nextLineIndex < lines.count else { return nil }
        let line = lines[nextLineIndex]
        nextLineIndex += 1
        if nextLineIndex == lines.count {
            lines.removeAll(keepingCapacity: true)
            nextLineIndex = 0
        }
        return line
    }

    /// The next complete event (a block ended by a blank line), or nil if no complete block is buffered.
    mutating func nextEvent() -> SSEEvent? {
        while let line = nextLine() {
            if let event = process(line) { return event }
        }
        return nil
    }

    /// Applies one line to the event being built; returns the event when the line is the blank line ending it.
    private mutating func process(_ line: String) -> SSEEvent? {
        if line.isEmpty { return dispatch() }
        hasFields = true
        if line.hasPrefix(":") {
            comments.append(Self.dropOneSpace(line.dropFirst()))
            return nil
        }
        let field: Substring
        let value: String
        if let colon = line.firstIndex(of: ":") {
            field = line[..<colon]
            value = Self.dropOneSpace(line[line.index(after: colon)...])
        } else {
            field = line[...]
            value = ""
        }
        switch field {
        case "event": event = value
        case "data":
            data += value
            data += "\n"
            hasData = true
        case "id":
            if !value.contains("\0") {
                id = value
                lastEventID = value
            }
        case "retry":
            if !value.isEmpty, value.utf8.allSatisfy(HTTPClientBytes.isDigit) { retry = Int(value) }
        default: break
        }
        return nil
    }

    private mutating func dispatch() -> SSEEvent? {
        defer {
            id = nil
            event = nil
            data = ""
            hasData = false
            comments = []
            retry = nil
            hasFields = false
        }
        guard hasFields else { return nil }
        if hasData { data.removeLast() }
        return SSEEvent(id: id, event: event, data: data, comments: comments, retry: retry)
    }

    private static func dropOneSpace(_ text: Substring) -> String {
        String(text.first == " " ? text.dropFirst() : text)
    }
}
