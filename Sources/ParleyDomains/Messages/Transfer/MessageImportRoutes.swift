import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// `POST /v1/messages/import` (docs/messages.md#import-and-export): HTTP ↔ ``MessageImport``.
package enum MessageImportRoutes {
    package static func register(on api: inout API) {
        api.add(
            .post, "/v1/messages/import", .app, "importMessages", maxBodyBytes: MessageImport.maxBytes,
            bodyMediaType: "application/x-ndjson"
        ) { ctx in
            try importLines(ctx)
        }
    }

    /// The batch answer (docs/errors.md#problems-rfc-9457): `id` = the 0-based line number, `index` counts non-empty
    /// lines only, `data` = `{message_id, seq, duplicate}`.
    private static func importLines(_ ctx: APIContext) throws -> Response {
        let lines = split(ctx.request.body)
        if lines.count > MessageImport.maxLines {
            throw APIError.invalidParam("body", "at most \(MessageImport.maxLines) lines, got \(lines.count)")
        }
        let importer = MessageImport(appID: ctx.appID, now: ctx.now, textMaxBytes: Int(ctx.app.settings.int("text_max_bytes")))
        // (line number, validated line or its problem) for every non-empty line.
        var parsed: [(number: Int, line: Result<MessageImport.Line, APIError>)] = []
        let urls = FileURLSigner.issued(for: ctx)
        for (number, bytes) in lines.enumerated() where !bytes.isEmpty {
            var line = Result { () throws(APIError) in try importer.line(bytes, ord: number) }
            if case .success(let valid) = line {
                do { line = .success(try importer.fillingFiles(valid, urls: urls, on: ctx.db)) } catch let error as APIError {
                    line = .failure(error)
                }
            }
            parsed.append((number, line))
        }
        let valid = parsed.compactMap { try? $0.line.get() }
        var written = try importer.write(valid, on: ctx.db)[...]
        var results: [BatchResult] = []
        results.reserveCapacity(parsed.count)
        for (index, item) in parsed.enumerated() {
            let outcome: BatchResult.Outcome
            switch item.line {
            case .failure(let error):
                outcome = .failed(error.code, error.detail)
            case .success:
                switch written.removeFirst() {
                case .written(let messageID, let seq, let duplicate):
                    var w = JSONWriter(capacity: 80)
                    w.object { w in
                        w.key(static: "message_id")
                        w.writeString(messageID)
                        w.key(static: "seq")
                        w.writeInt(seq)
                        w.key(static: "duplicate")
                        w.writeBool(duplicate)
                    }
                    outcome = .ok(w.bytes)
                case .failed(let error):
                    outcome = .failed(error.code, error.detail)
                }
            }
            results.append(BatchResult(index: index, id: String(item.number), outcome: outcome))
        }
        return Reply.batch(results)
    }

    /// The lines of an NDJSON body: split on `\n`, a trailing `\r` dropped; the empty piece after a final `\n` is no
    /// line.
    static func split(_ body: [UInt8]) -> [ArraySlice<UInt8>] {
        var lines = body.split(separator: 0x0A, omittingEmptySubsequences: false)
        if lines.last?.isEmpty == true { lines.removeLast() }
        return lines.map { $0.last == 0x0D ? $0.dropLast() : $0 }
    }
}
