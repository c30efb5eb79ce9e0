import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// `POST /v1/messages/import?async=true` (docs/messages.md#import-and-export): the `import_messages` job kind. The
/// request keeps its body in a ``JobFile`` (deleted by the step that finishes) and answers 202; each step imports the next ``MessageImport/linesPerStatement``
/// lines with ``MessageImport/results(_:firstIndex:urls:on:)`` — the code of the synchronous import — in the step's
/// transaction, so a node that dies mid-way leaves the lines of committed steps imported and the next node goes on
/// from the first line not committed (each line imported once, its `duplicate` as a single run would say). The
/// `result` is the synchronous answer, `{results: [...]}`.
package enum MessageImportJob {
    /// The job kind's name.
    package static let kindName = "import_messages"
    /// The most bytes of the body a step reads at first; a longer line makes it read further.
    static let windowBytes: Int64 = 4 * 1024 * 1024

    /// The request, as a job keeps it in `params`: where its body is and what the request knew.
    struct Request {
        var body: JobFile
        var lines: Int64
        var textMaxBytes: Int
        /// Where file URLs point and how long they are valid (filled file bodies are validated with them).
        var urlBase: String
        var urlTTLSeconds: Int64

        var params: JSONObject {
            [
                "body": .object(body.json), "lines": .int(lines), "text_max_bytes": .int(Int64(textMaxBytes)), "url_base": .string(urlBase),
                "url_ttl_s": .int(urlTTLSeconds),
            ]
        }

        init(body: JobFile, lines: Int64, textMaxBytes: Int, urlBase: String, urlTTLSeconds: Int64) {
            self.body = body
            self.lines = lines
            self.textMaxBytes = textMaxBytes
            self.urlBase = urlBase
            self.urlTTLSeconds = urlTTLSeconds
        }

        init(_ params: JSONObject) throws {
            guard let lines = params["lines"]?.intValue, let textMaxBytes = params["text_max_bytes"]?.intValue,
                let urlBase = params["url_base"]?.stringValue, let ttl = params["url_ttl_s"]?.intValue
            else { throw APIError(.internalError, "malformed import_messages parameters") }
            self.init(body: try JobFile(params["body"]), lines: lines, textMaxBytes: Int(textMaxBytes), urlBase: urlBase, urlTTLSeconds: ttl)
        }
    }

    /// Where the next step resumes: the byte offset and number of the next line, the next result's `index`, and the
    /// results so far.
    struct Checkpoint {
        var offset: Int64 = 0
        var line: Int64 = 0
        var index: Int64 = 0
        var results: [JSONValue] = []

        var json: JSONObject { ["offset": .int(offset), "line": .int(line), "index": .int(index), "results": .array(results)] }

        init() {}

        init(_ json: JSONObject) throws {
            guard let offset = json["offset"]?.intValue, let line = json["line"]?.intValue, let index = json["index"]?.intValue,
                let results = json["results"]?.arrayValue
            else { throw APIError(.internalError, "malformed import_messages checkpoint") }
            (self.offset, self.line, self.index, self.results) = (offset, line, index, results)
        }
    }

    /// Starts an import of `body` (`lines` lines, already counted against the limit): the body is stored, then the job
    /// created.
    static func create(
        _ kind: JobKind, body: [UInt8], lines: Int, textMaxBytes: Int, urls: FileURLSigner.Issued, ctx: APIContext
    ) throws -> BackgroundJob {
        var file = try JobFile.start(appID: ctx.appID, now: ctx.now, on: ctx.db)
        try file.append(body, appID: ctx.appID, now: ctx.now, on: ctx.db)
        let request = Request(
            body: file, lines: Int64(lines), textMaxBytes: textMaxBytes, urlBase: urls.base, urlTTLSeconds: urls.expires - ctx.now / 1000)
        return try JobService(ctx).create(kind, params: request.params, settings: ctx.app.settings)
    }

    /// The job kind; `services` signs the file URLs the lines are checked with.
    package static func kind(services: Services) -> JobKind {
        let signer = FileURLSigner(services: services)
        return JobKind(
            name: kindName,
            plan: { params, _, _ in
                JobPlan(total: try Request(params).lines, checkpoint: Checkpoint().json)
            },
            step: { params, json, context in
                try step(Request(params), Checkpoint(json), context, signer: signer)
            })
    }

    /// The next lines imported; the step that reaches the end of the body answers the results.
    static func step(_ request: Request, _ checkpoint: Checkpoint, _ context: JobKind.Context, signer: FileURLSigner) throws
        -> JobStepOutcome
    {
        let (db, appID, now) = (context.db, context.appID, context.now)
        var checkpoint = checkpoint
        let (lines, consumed) = try nextLines(request.body, from: checkpoint.offset, appID: appID, on: db)
        let numbered = lines.enumerated().map { (number: Int(checkpoint.line) + $0.offset, bytes: $0.element) }
        let importer = MessageImport(appID: appID, now: now, textMaxBytes: request.textMaxBytes)
        let urls = FileURLSigner.Issued(signer: signer, base: request.urlBase, appID: appID, expires: now / 1000 + request.urlTTLSeconds)
        let results = try importer.results(numbered[...], firstIndex: Int(checkpoint.index), urls: urls, on: db)
        // The results as the synchronous answer renders them.
        guard case .bytes(let rendered) = Reply.batch(results).body,
            let items = try JSONValue.parse(rendered).objectValue?["results"]?.arrayValue
        else { throw APIError(.internalError, "import results did not render") }
        checkpoint.results += items
        checkpoint.offset += consumed
        checkpoint.line += Int64(lines.count)
        checkpoint.index += Int64(results.count)
        guard checkpoint.offset >= request.body.size else { return .next(checkpoint.json, progress: Int64(lines.count)) }
        try request.body.discard(appID: appID, on: db)
        return .finished(["results": .array(checkpoint.results)], progress: Int64(lines.count))
    }

    /// Up to ``MessageImport/linesPerStatement`` lines of the body from byte `offset` (which starts a line), split as
    /// the synchronous import splits a body (``MessageImportRoutes/split(_:)``), and how many bytes they took.
    static func nextLines(_ body: JobFile, from offset: Int64, appID: String, on db: PostgresConnection) throws -> ([ArraySlice<UInt8>], Int64) {
        var window = windowBytes
        while true {
            let bytes = try body.read(from: offset, to: offset + window, appID: appID, on: db)
            let atEnd = offset + Int64(bytes.count) >= body.size
            var lines: [ArraySlice<UInt8>] = []
            var start = 0
            while lines.count < MessageImport.linesPerStatement, start < bytes.count {
                guard let newline = bytes[start...].firstIndex(of: 0x0A) else {
                    // The last line of the body has no newline; elsewhere the window cut a line short.
                    if atEnd {
                        lines.append(bytes[start...])
                        start = bytes.count
                    }
                    break
                }
                lines.append(bytes[start..<newline])
                start = newline + 1
            }
            if lines.isEmpty && !atEnd {
                window *= 2
                continue
            }
            return (lines.map { $0.last == 0x0D ? $0.dropLast() : $0 }, Int64(start))
        }
    }
}
