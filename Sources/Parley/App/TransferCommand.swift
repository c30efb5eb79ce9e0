import Glibc
import ParleyCore
import ParleyHTTP

/// `parley export` and `parley import` (docs/messages.md#import-and-export) against a running server over HTTP: an
/// NDJSON file (or stdout/stdin) on one side, `GET /v1/messages/export` or `POST /v1/messages/import` on the other.
/// Progress goes to stderr: a bar on a terminal, plain lines otherwise.
enum TransferCommand {
    static let usage = """
        usage: parley export --url URL [--key KEY] [--app APP_ID] --conversation-type peer|group|room
                             (--user-id U --peer-id P | --conversation-id ID)
                             [--after-seq N] [--start-at MS] [--end-at MS] [--file OUT.ndjson]
               parley import --url URL [--key KEY] [--app APP_ID] [--file IN.ndjson]

        URL is the server's http:// base (https is not supported here). KEY is an app key, or the admin key with
        --app; it defaults to $PARLEY_KEY. Without --file, export writes to stdout and import reads stdin.
        An import is sent in requests of at most 10000 lines and 32 MiB; lines that fail are listed on stderr with
        their line number (1-based) and the exit status is 1.

        """

    /// Per-request bounds of the import route (docs/messages.md#import-and-export).
    static let maxLines = 10_000
    static let maxBytes = 32 * 1024 * 1024

    struct Options {
        var host = ""
        var port = 80
        var headers = HTTPHeaders()
        var file: String?
        var query: [(String, String)] = []
    }

    /// `errorOutput` takes what goes to stderr on failure (tests read it).
    static func run(
        _ command: String, arguments: [String], environment: [String: String],
        errorOutput: (String) -> Void = ParleyCommand.printError
    ) -> Int32 {
        let options: Options
        do {
            options = try parse(command, arguments, environment)
        } catch {
            errorOutput("parley \(command): \((error as? UsageError)?.message ?? "\(error)")\n\n\(usage)")
            return 2
        }
        do {
            return try command == "export" ? export(options) : importFile(options)
        } catch let problem as ServerProblem {
            // On a new line: a progress bar may be drawn on the current one.
            errorOutput("\nparley \(command): \(problem)")
            return 1
        } catch {
            errorOutput("\nparley \(command): \((error as? UsageError)?.message ?? "\(error)")")
            return 1
        }
    }

    struct UsageError: Error { let message: String }

    /// A request the server refused: its status and the RFC 9457 problem it answered with (docs/errors.md), so
    /// the user reads why (an unknown conversation, a wrong key) instead of a bare status.
    struct ServerProblem: Error, CustomStringConvertible {
        let status: Int
        let body: [UInt8]

        var description: String {
            guard let problem = try? JSONValue.parse(body), problem.objectValue != nil else {
                let text = String(decoding: body, as: UTF8.self).drop { $0.isWhitespace }
                return "HTTP \(status)" + (text.isEmpty ? " (no body)" : ": \(text)")
            }
            var text = "HTTP \(status)"
            if let title = problem["title"]?.stringValue { text += " \(title)" }
            if let detail = problem["detail"]?.stringValue, !detail.isEmpty { text += ": \(detail)" }
            if let code = problem["code"]?.intValue { text += " (code \(code))" }
            return text
        }
    }

    private static func parse(_ command: String, _ arguments: [String], _ environment: [String: String]) throws -> Options {
        var options = Options()
        var key = environment["PARLEY_KEY"]
        var url: String?
        let queryFlags = [
            "--conversation-type": "conversation_type", "--user-id": "user_id", "--peer-id": "peer_id",
            "--conversation-id": "conversation_id", "--after-seq": "after_seq", "--start-at": "start_at", "--end-at": "end_at",
        ]
        var rest = arguments[...]
        while let flag = rest.popFirst() {
            guard let value = rest.popFirst() else { throw UsageError(message: "\(flag) needs a value") }
            switch flag {
            case "--url": url = value
            case "--key": key = value
            case "--app": options.headers.add("Parley-App-Id", value)
            case "--file": options.file = value
            default:
                guard command == "export", let name = queryFlags[flag] else { throw UsageError(message: "unknown option \(flag)") }
                options.query.append((name, value))
            }
        }
        guard let key, !key.isEmpty else { throw UsageError(message: "--key or PARLEY_KEY is required") }
        options.headers.add("Authorization", "Bearer \(key)")
        guard let url, url.hasPrefix("http://") else { throw UsageError(message: "--url http://host[:port] is required") }
        let authority = url.dropFirst("http://".count).prefix { $0 != "/" }
        if let colon = authority.lastIndex(of: ":"), let port = Int(authority[authority.index(after: colon)...]) {
            options.host = String(authority[..<colon])
            options.port = port
        } else {
            options.host = String(authority)
        }
        return options
    }

    // MARK: - Export

    private static func export(_ options: Options) throws -> Int32 {
        let query = options.query.map { "\($0.0)=\(percentEncoded($0.1))" }.joined(separator: "&")
        let connection = try HTTPClientConnection(host: options.host, port: options.port, timeout: .seconds(300))
        var headers = options.headers
        headers.add("Accept", "application/x-ndjson")
        let path = "/v1/messages/export?" + query
        let stream = try connection.openStream(path: path, headers: headers)
        defer { stream.close() }
        if stream.status != 200 {
            stream.close()
            throw ServerProblem(status: stream.status, body: refusal(path: path, headers: headers, options))
        }
        guard let out = options.file.map({ fopen($0, "w") }) ?? fdopen(STDOUT_FILENO, "w") else {
            ParleyCommand.printError("parley export: cannot write \(options.file ?? "")")
            return 1
        }
        defer { fclose(out) }
        var progress = TransferProgress(total: nil)
        var lines = 0
        while let line = try stream.nextLine(timeout: .seconds(300)) {
            fputs(line, out)
            fputc(0x0A, out)
            lines += 1
            progress.update(lines)
        }
        progress.finish(lines, "exported")
        return 0
    }

    /// The problem document of a refused export. The stream reader keeps whole lines only and a problem document
    /// ends without a line ending, so the (read-only) request is sent again as a plain one, whose body is read whole.
    private static func refusal(path: String, headers: HTTPHeaders, _ options: Options) -> [UInt8] {
        guard let connection = try? HTTPClientConnection(host: options.host, port: options.port, timeout: .seconds(30)) else {
            return []
        }
        defer { connection.close() }
        guard let response = try? connection.send(method: .get, path: path, headers: headers), response.status != 200 else {
            return []
        }
        return response.body
    }

    private static func percentEncoded(_ value: String) -> String {
        var out = ""
        for byte in value.utf8 {
            let c = Character(UnicodeScalar(byte))
            if c.isLetter && byte < 0x80 || c.isNumber && byte < 0x80 || "-._~".contains(c) {
                out.append(c)
            } else {
                out += "%" + String(byte, radix: 16, uppercase: true).leftPadded(to: 2)
            }
        }
        return out
    }

    // MARK: - Import

    private static func importFile(_ options: Options) throws -> Int32 {
        guard let input = options.file.map({ fopen($0, "r") }) ?? fdopen(STDIN_FILENO, "r") else {
            ParleyCommand.printError("parley import: cannot read \(options.file ?? "")")
            return 1
        }
        defer { fclose(input) }
        // A regular file is counted first, for the ETA.
        let total = options.file.flatMap { countLines($0) }
        let connection = try HTTPClientConnection(host: options.host, port: options.port, timeout: .seconds(300))
        var headers = options.headers
        headers.add("Content-Type", "application/x-ndjson")
        var progress = TransferProgress(total: total)
        var tally = (written: 0, duplicates: 0, failed: 0)
        var batch: [UInt8] = []
        var batchLines = 0
        var firstLine = 0

        func send() throws {
            if batchLines == 0 { return }
            let response = try connection.send(method: .post, path: "/v1/messages/import", headers: headers, body: batch)
            guard response.status == 200, let json = try? JSONValue.parse(response.body) else {
                throw ServerProblem(status: response.status, body: response.body)
            }
            for result in json["results"]?.arrayValue ?? [] {
                if result["ok"] == .bool(true) {
                    if result["data"]?["duplicate"] == .bool(true) { tally.duplicates += 1 } else { tally.written += 1 }
                    continue
                }
                tally.failed += 1
                let line = firstLine + (Int(result["id"]?.stringValue ?? "") ?? 0) + 1
                if tally.failed <= 100 {
                    ParleyCommand.printError(
                        "\nline \(line): \(result["error"]?["code"]?.intValue ?? 0) \(result["error"]?["message"]?.stringValue ?? "")")
                }
            }
            firstLine += batchLines
            progress.update(firstLine)
            batch.removeAll(keepingCapacity: true)
            batchLines = 0
        }

        var linePointer: UnsafeMutablePointer<CChar>?
        var capacity = 0
        defer { free(linePointer) }
        while true {
            let n = getline(&linePointer, &capacity, input)
            if n < 0 { break }
            guard let linePointer else { break }
            let bytes = UnsafeRawBufferPointer(start: linePointer, count: n)
            let withNewline = bytes.last == 0x0A ? n : n + 1
            if batchLines == maxLines || batch.count + withNewline > maxBytes { try send() }
            batch.append(contentsOf: bytes)
            if bytes.last != 0x0A { batch.append(0x0A) }
            batchLines += 1
        }
        try send()
        progress.finish(firstLine, "imported")
        ParleyCommand.printError(
            "written \(tally.written), duplicates \(tally.duplicates), failed \(tally.failed)\(tally.failed > 100 ? " (first 100 listed)" : "")")
        return tally.failed == 0 ? 0 : 1
    }

    /// The number of lines of the file at `path` (nil when it cannot be read).
    private static func countLines(_ path: String) -> Int? {
        let fd = open(path, O_RDONLY)
        if fd < 0 { return nil }
        defer { Glibc.close(fd) }
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var lines = 0
        var last: UInt8 = 0x0A
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            for byte in buffer[..<n] where byte == 0x0A { lines += 1 }
            last = buffer[n - 1]
        }
        return last == 0x0A ? lines : lines + 1
    }
}

/// Progress on stderr: a redrawn bar with lines/s and ETA on a terminal, a plain line every 2 s otherwise.
struct TransferProgress {
    let total: Int?
    let terminal = isatty(STDERR_FILENO) == 1
    let started = ContinuousClock.now
    var lastReport = ContinuousClock.now

    init(total: Int?) { self.total = total }

    mutating func update(_ done: Int) {
        let now = ContinuousClock.now
        guard now - lastReport >= (terminal ? .milliseconds(200) : .seconds(2)) else { return }
        lastReport = now
        report(done, final: false)
    }

    func finish(_ done: Int, _ what: String) {
        report(done, final: true)
        ParleyCommand.printError(terminal ? "" : "\(what) \(done) lines")
    }

    private func report(_ done: Int, final: Bool) {
        let (seconds, attoseconds) = (ContinuousClock.now - started).components
        let elapsed = max(0.001, Double(seconds) + Double(attoseconds) / 1e18)
        let rate = Double(done) / elapsed
        var text = "\(done)"
        if let total, total > 0 {
            text += "/\(total) lines"
            let eta = rate > 0 ? Int(Double(max(0, total - done)) / rate) : 0
            if terminal {
                let filled = min(30, done * 30 / total)
                text = "[" + String(repeating: "#", count: filled) + String(repeating: "-", count: 30 - filled) + "] " + text
            }
            text += "  \(Int(rate)) lines/s  ETA \(eta)s"
        } else {
            text += " lines  \(Int(rate)) lines/s"
        }
        let line = terminal ? "\r\u{1B}[K" + text : final ? "" : text + "\n"
        let bytes = Array(line.utf8)
        _ = bytes.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}
