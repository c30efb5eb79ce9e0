import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// `POST /v1/messages/import` (docs/messages.md#import-and-export): HTTP ↔ ``MessageImport``.
package enum MessageImportRoutes {
    /// `job`: the node's `import_messages` kind (the one its job runner runs); `poke`: tells the runner a job is waiting.
    package static func register(on api: inout API, job: JobKind, poke: @escaping @Sendable () -> Void) {
        api.add(
            .post, "/v1/messages/import", .app, "importMessages", maxBodyBytes: MessageImport.maxBytes,
            bodyMediaType: "application/x-ndjson"
        ) { ctx in
            try importLines(ctx, job: job, poke: poke)
        }
    }

    /// The batch answer (docs/errors.md#problems-rfc-9457): `id` = the 0-based line number, `index` counts non-empty
    /// lines only, `data` = `{message_id, seq, duplicate}`. With `async=true`, a job of the node's `import_messages`
    /// kind (``MessageImportJob``) whose result is that answer.
    private static func importLines(_ ctx: APIContext, job: JobKind, poke: @escaping @Sendable () -> Void) throws -> Response {
        var query = ctx.query()
        let async = query.bool("async") ?? false
        try query.check()
        let lines = split(ctx.request.body)
        if lines.count > MessageImport.maxLines {
            throw APIError.invalidParam("body", "at most \(MessageImport.maxLines) lines, got \(lines.count)")
        }
        let textMaxBytes = Int(ctx.app.settings.int("text_max_bytes"))
        let urls = FileURLSigner.issued(for: ctx)
        if async {
            let created = try MessageImportJob.create(
                job, body: ctx.request.body, lines: lines.count, textMaxBytes: textMaxBytes, urls: urls, ctx: ctx)
            poke()
            return Reply.accepted(created)
        }
        // An import writes no events: the app's cached history pages go, here and on the other nodes, once its lines
        // are committed (also when it fails part way).
        defer { CommitObservers.changedWithoutEvents(appID: ctx.appID, cache: ctx.services.historyCache, on: ctx.db) }
        let importer = MessageImport(appID: ctx.appID, now: ctx.now, textMaxBytes: textMaxBytes)
        let numbered = lines.enumerated().map { (number: $0.offset, bytes: $0.element) }
        return Reply.batch(try importer.results(numbered[...], firstIndex: 0, urls: urls, on: ctx.db))
    }

    /// The lines of an NDJSON body: split on `\n`, a trailing `\r` dropped; the empty piece after a final `\n` is no
    /// line.
    static func split(_ body: [UInt8]) -> [ArraySlice<UInt8>] {
        var lines = body.split(separator: 0x0A, omittingEmptySubsequences: false)
        if lines.last?.isEmpty == true { lines.removeLast() }
        return lines.map { $0.last == 0x0D ? $0.dropLast() : $0 }
    }
}
