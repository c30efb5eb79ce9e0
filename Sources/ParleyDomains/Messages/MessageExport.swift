import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// `GET /v1/messages/export` (docs/messages.md#import-and-export): one conversation's stored messages as NDJSON, one
/// app-view Message per line (tombstones and suppressed messages included), in seq order.
///
/// Constant memory: pages of ``pageSize`` rows are read by seq (the history statement of ``MessageStore``, app view,
/// keyset on `seq`), rendered straight from libpq's buffer by ``MessageRow`` (the renderer of every other read) and
/// written to the stream in chunks; before each chunk the writer waits until the client has taken what was sent
/// (``ResponseStream/waitForBacklog(below:)``), so neither the server nor the connection buffers more than a page.
/// The export holds one pool worker (and its connection) while it runs.
package enum MessageExport {
    static let pageSize = 1_000
    /// Bytes rendered before they are handed to the stream, and the most left unsent before more are written.
    static let chunkBytes = 64 * 1024
    static let maxBacklog = 256 * 1024

    package static func register(on api: inout API) {
        api.add(.get, "/v1/messages/export", .app, "exportMessages") { ctx in
            try export(ctx)
        }
    }

    private static func export(_ ctx: APIContext) throws -> Response {
        var query = ctx.query()
        let type = query.choice("conversation_type", ["peer", "group", "room"]).flatMap(ConversationType.init(rawValue:))
        if type == nil && query.raw("conversation_type") == nil { query.addError("conversation_type", "is required") }
        var id = ""
        var threadID = ""
        switch type {
        case .peer?:
            let user = query.id("user_id", .userID) ?? ""
            let peer = query.id("peer_id", .userID) ?? ""
            if query.raw("user_id") == nil { query.addError("user_id", "is required for a peer conversation") }
            if query.raw("peer_id") == nil { query.addError("peer_id", "is required for a peer conversation") }
            if !user.isEmpty && user == peer { query.addError("peer_id", "must differ from user_id") }
            id = peer
            threadID = MessageStore.peerThread(user, peer)
        case .group?, .room?:
            id = query.id("conversation_id", type == .group ? .groupID : .roomID) ?? ""
            if query.raw("conversation_id") == nil { query.addError("conversation_id", "is required") }
            threadID = id
        case nil:
            break
        }
        var bounds = MessageStore.HistoryQuery()
        bounds.forward = true
        bounds.limit = pageSize
        bounds.afterSeq = query.int("after_seq", range: 0...Int64.max) ?? 0
        bounds.startAt = query.int("start_at", range: 0...Int64.max) ?? .min
        bounds.endAt = query.int("end_at", range: 0...Int64.max) ?? .max
        try query.check()
        guard let type else { throw APIError.internalError }
        guard try exists(ctx, type, threadID: threadID, id: id) else {
            throw APIError(.targetNotFound, "\(type == .peer ? "peer conversation" : type.rawValue) \(id) does not exist")
        }

        let (appID, conversation, peer, query0) = (ctx.appID, threadID, id, bounds)
        let pool = ctx.services.pool
        let logger = ctx.services.logger
        var headers = HTTPHeaders()
        headers.add("Content-Type", "application/x-ndjson")
        return Response(status: 200, headers: headers) { stream in
            pool.submit(
                {
                    do {
                        try pool.withConnection { db in
                            try write(appID: appID, type, threadID: conversation, peer: peer, query0, on: db, to: stream)
                        }
                    } catch {
                        // The head is out: the client sees the stream end early (no final newline-terminated page).
                        logger.error("msg=\"message export failed\" app=\(appID) error=\"\(error)\"")
                    }
                    stream.close()
                }, rejected: { stream.close() })
        }
    }

    /// Whether the conversation exists: both users (peer), the group (dismissed too: its history stays) or the room.
    private static func exists(_ ctx: APIContext, _ type: ConversationType, threadID: String, id: String) throws -> Bool {
        let found: Int64?
        switch type {
        case .peer:
            let users = threadID.split(separator: " ").map(String.init)
            found = try ctx.db.query(
                "SELECT count(*) FROM users WHERE app_id = \(ctx.appID) AND user_id = ANY(\(users)::text[])"
            ).decodeFirst(Int64.self).flatMap { $0 == 2 ? 1 : nil }
        case .group:
            found = try ctx.db.query("SELECT 1::bigint FROM groups WHERE app_id = \(ctx.appID) AND group_id = \(id)").decodeFirst(Int64.self)
        case .room:
            found = try ctx.db.query("SELECT 1::bigint FROM rooms WHERE app_id = \(ctx.appID) AND room_id = \(id)").decodeFirst(Int64.self)
        }
        return found != nil
    }

    /// Reads and writes the pages until the conversation ends or the client goes.
    private static func write(
        appID: String, _ type: ConversationType, threadID: String, peer: String, _ bounds: MessageStore.HistoryQuery,
        on db: PostgresConnection, to stream: ResponseStream
    ) throws {
        var query = bounds
        var chunk: [UInt8] = []
        chunk.reserveCapacity(chunkBytes + 16 * 1024)
        while !stream.isClosed {
            let rows = try MessageStore.history(appID: appID, conversationType: type, threadID: threadID, peer: peer, query: query, on: db)
            for index in 0..<rows.count {
                // One writer per line: a shared one would put commas between the top-level values.
                let row = MessageRow(rows[index])
                var w = JSONWriter(capacity: 1024)
                try row.write(to: &w, .app)
                chunk += w.bytes
                chunk.append(0x0A)
                if chunk.count >= chunkBytes { send(&chunk, to: stream) }
                if index == rows.count - 1 { query.afterSeq = try row.sequence() ?? query.afterSeq }
            }
            if rows.count < pageSize { break }
        }
        send(&chunk, to: stream)
    }

    /// Hands the rendered bytes to the stream once the client has taken most of the previous ones.
    private static func send(_ chunk: inout [UInt8], to stream: ResponseStream) {
        if chunk.isEmpty { return }
        stream.waitForBacklog(below: maxBacklog)
        stream.write(chunk)
        chunk.removeAll(keepingCapacity: true)
    }
}
