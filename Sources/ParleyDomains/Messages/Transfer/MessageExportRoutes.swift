import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// `GET /v1/messages/export` (docs/messages.md#import-and-export): HTTP ↔ ``MessageExport``, streamed from a pool worker of its own,
/// or with `async=true` a job of the node's `export_messages` kind (``MessageExportJob``).
package enum MessageExportRoutes {
    /// `job`: the node's `export_messages` kind (the one its job runner runs); `poke`: tells the runner a job is waiting.
    package static func register(on api: inout API, job: JobKind, poke: @escaping @Sendable () -> Void) {
        api.add(.get, "/v1/messages/export", .app, "exportMessages") { ctx in
            try export(ctx, job: job, poke: poke)
        }
    }

    private static func export(_ ctx: APIContext, job: JobKind, poke: @escaping @Sendable () -> Void) throws -> Response {
        var query = ctx.query()
        let async = query.bool("async") ?? false
        let type = query.choice("conversation_type", ["peer", "group", "room"]).flatMap(ConversationType.init(rawValue:))
        if type == nil && query.raw("conversation_type") == nil { query.addError("conversation_type", "is required") }
        var user = ""
        var id = ""
        switch type {
        case .peer?:
            user = query.id("user_id", .userID) ?? ""
            id = query.id("peer_id", .userID) ?? ""
            if query.raw("user_id") == nil { query.addError("user_id", "is required for a peer conversation") }
            if query.raw("peer_id") == nil { query.addError("peer_id", "is required for a peer conversation") }
            if !user.isEmpty && user == id { query.addError("peer_id", "must differ from user_id") }
        case .group?, .room?:
            id = query.id("conversation_id", type == .group ? .groupID : .roomID) ?? ""
            if query.raw("conversation_id") == nil { query.addError("conversation_id", "is required") }
        case nil:
            break
        }
        let afterSeq = query.int("after_seq", range: 0...Int64.max) ?? 0
        let startAt = query.int("start_at", range: 0...Int64.max) ?? .min
        let endAt = query.int("end_at", range: 0...Int64.max) ?? .max
        try query.check()
        guard let type else { throw APIError.internalError }
        let request = MessageExport.Request(type, user: user, id: id, afterSeq: afterSeq, startAt: startAt, endAt: endAt)
        if async {
            // The job's plan checks the conversation (404 as below) in the transaction that creates it.
            let created = try JobService(ctx).create(job, params: request.params, settings: ctx.app.settings)
            poke()
            return Reply.accepted(created)
        }
        try MessageExport.requireConversation(request, appID: ctx.appID, on: ctx.db)

        let appID = ctx.appID
        let pool = ctx.services.pool
        let logger = ctx.services.logger
        var headers = HTTPHeaders()
        headers.add("Content-Type", "application/x-ndjson")
        return Response(status: 200, headers: headers) { stream in
            pool.submit(
                {
                    do {
                        try pool.withConnection { db in try MessageExport.write(request, appID: appID, on: db, to: stream) }
                    } catch {
                        // The head is out: the client sees the stream end early (no final newline-terminated page).
                        logger.error("msg=\"message export failed\" app=\(appID) error=\"\(error)\"")
                    }
                    stream.close()
                }, rejected: { stream.close() })
        }
    }
}
