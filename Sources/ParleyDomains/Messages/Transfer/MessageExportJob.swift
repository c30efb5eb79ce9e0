import ParleyAPI
import ParleyCore
import ParleyPostgres

/// `GET /v1/messages/export?async=true` (docs/messages.md#import-and-export): the `export_messages` job kind. Its file
/// holds exactly what the streamed export sends — each step renders the next page of ``MessageExport/page`` and appends
/// it to a ``JobFile`` in the step's transaction — and its `result` names that file:
/// `{file_id, file_size, mime_type, messages}`.
package enum MessageExportJob {
    /// The job kind's name.
    package static let kindName = "export_messages"
    /// The file's name and type.
    static let fileName = "messages.ndjson"
    static let mimeType = "application/x-ndjson"

    /// Where the next step resumes.
    struct Checkpoint {
        var file: JobFile
        /// The last seq written.
        var afterSeq: Int64
        var messages: Int64
        /// The app's `app_storage_quota_bytes` when the export was requested (the file counts in the app's storage).
        var quotaBytes: Int64

        var json: JSONObject {
            ["file": .object(file.json), "after_seq": .int(afterSeq), "messages": .int(messages), "quota_bytes": .int(quotaBytes)]
        }

        init(file: JobFile, afterSeq: Int64, quotaBytes: Int64) {
            self.file = file
            self.afterSeq = afterSeq
            messages = 0
            self.quotaBytes = quotaBytes
        }

        init(_ json: JSONObject) throws {
            guard let afterSeq = json["after_seq"]?.intValue, let messages = json["messages"]?.intValue,
                let quotaBytes = json["quota_bytes"]?.intValue
            else { throw APIError(.internalError, "malformed export_messages checkpoint") }
            file = try JobFile(json["file"])
            self.afterSeq = afterSeq
            self.messages = messages
            self.quotaBytes = quotaBytes
        }
    }

    /// The job kind: the plan checks the conversation (404 as the streamed export) and starts the file; each step
    /// appends one page.
    package static func kind() -> JobKind {
        JobKind(
            name: kindName,
            plan: { params, settings, context in
                let request = try MessageExport.Request(params)
                try MessageExport.requireConversation(request, appID: context.appID, on: context.db)
                let file = try JobFile.start(appID: context.appID, now: context.now, on: context.db)
                let checkpoint = Checkpoint(file: file, afterSeq: request.bounds.afterSeq, quotaBytes: settings.int("app_storage_quota_bytes"))
                return JobPlan(total: nil, checkpoint: checkpoint.json)
            },
            step: { params, json, context in
                try step(MessageExport.Request(params), Checkpoint(json), context)
            })
    }

    /// One page appended; the page that ends the export records the file.
    static func step(_ request: MessageExport.Request, _ checkpoint: Checkpoint, _ context: JobKind.Context) throws -> JobStepOutcome {
        let (db, appID, now) = (context.db, context.appID, context.now)
        var checkpoint = checkpoint
        var query = request.bounds
        query.afterSeq = checkpoint.afterSeq
        var bytes: [UInt8] = []
        let count = try MessageExport.page(request, &query, appID: appID, on: db) { message in
            bytes += message
            bytes.append(0x0A)
        }
        try checkpoint.file.append(bytes, appID: appID, now: now, on: db)
        checkpoint.afterSeq = query.afterSeq
        checkpoint.messages += Int64(count)
        guard count < MessageExport.pageSize else { return .next(checkpoint.json, progress: Int64(count)) }
        let file = try checkpoint.file.finish(
            appID: appID, now: now, kind: .file, fileName: fileName, mimeType: mimeType, ownerID: nil, quotaBytes: checkpoint.quotaBytes,
            on: db)
        let result: JSONObject = [
            "file_id": .string(file.fileID), "file_size": .int(file.size), "mime_type": .string(file.mimeType),
            "messages": .int(checkpoint.messages),
        ]
        return .finished(result, progress: Int64(count))
    }
}
