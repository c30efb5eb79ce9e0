import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// The export of `GET /v1/messages/export` (docs/messages.md#import-and-export): one conversation's stored messages as NDJSON, one
/// app-view Message per line (tombstones and suppressed messages included), in seq order.
///
/// Constant memory: pages of ``pageSize`` rows are read by seq (the history statement of ``MessageStore``, app view,
/// keyset on `seq`), rendered straight from libpq's buffer by ``MessageRow`` (the renderer of every other read) and
/// written to the stream in chunks; before each chunk the writer waits until the client has taken what was sent
/// (``ResponseStream/waitForBacklog(below:)``), so neither the server nor the connection buffers more than a page.
/// The export holds one pool worker (and its connection) while it runs.
enum MessageExport {
    static let pageSize = 1_000
    /// Bytes rendered before they are handed to the stream, and the most left unsent before more are written.
    static let chunkBytes = 64 * 1024
    static let maxBacklog = 256 * 1024

    /// One conversation's export: its thread, the peer or conversation id, and where it starts and ends.
    struct Request: Sendable {
        var type: ConversationType
        var threadID: String
        /// The user whose peer conversation it is ("" for a group or a room).
        var user: String
        /// The peer of a peer conversation, the group or the room id.
        var id: String
        var bounds: MessageStore.HistoryQuery

        /// `user` and `id` name a peer conversation; `id` alone a group or a room.
        init(_ type: ConversationType, user: String = "", id: String, afterSeq: Int64, startAt: Int64, endAt: Int64) {
            self.type = type
            self.user = user
            self.id = id
            threadID = type == .peer ? MessageStore.peerThread(user, id) : id
            bounds = MessageStore.HistoryQuery()
            bounds.forward = true
            bounds.limit = MessageExport.pageSize
            bounds.afterSeq = afterSeq
            bounds.startAt = startAt
            bounds.endAt = endAt
        }

        /// The request as a job keeps it in `params` (``MessageExportJob``).
        var params: JSONObject {
            [
                "conversation_type": .string(type.rawValue), "user_id": .string(user), "id": .string(id), "after_seq": .int(bounds.afterSeq),
                "start_at": .int(bounds.startAt), "end_at": .int(bounds.endAt),
            ]
        }

        /// The request back from a job's `params`.
        init(_ params: JSONObject) throws {
            guard let type = params["conversation_type"]?.stringValue.flatMap(ConversationType.init(rawValue:)),
                let user = params["user_id"]?.stringValue, let id = params["id"]?.stringValue, let afterSeq = params["after_seq"]?.intValue,
                let startAt = params["start_at"]?.intValue, let endAt = params["end_at"]?.intValue
            else { throw APIError(.internalError, "malformed export_messages parameters") }
            self.init(type, user: user, id: id, afterSeq: afterSeq, startAt: startAt, endAt: endAt)
        }
    }

    /// 404 `target_not_found` unless the conversation exists: both users (peer), the group (dismissed too: its
    /// history stays) or the room.
    static func requireConversation(_ request: Request, appID: String, on db: PostgresConnection) throws {
        guard try MessageStore.conversationExists(appID: appID, request.type, threadID: request.threadID, id: request.id, on: db) else {
            let what = request.type == .peer ? "peer conversation" : request.type.rawValue
            throw APIError(.targetNotFound, "\(what) \(request.id) does not exist")
        }
    }

    /// Reads and writes the pages until the conversation ends or the client goes.
    static func write(_ request: Request, appID: String, on db: PostgresConnection, to stream: ResponseStream) throws {
        var query = request.bounds
        var chunk: [UInt8] = []
        chunk.reserveCapacity(chunkBytes + 16 * 1024)
        while !stream.isClosed {
            let count = try page(request, &query, appID: appID, on: db) { message in
                chunk += message
                chunk.append(0x0A)
                if chunk.count >= chunkBytes { send(&chunk, to: stream) }
            }
            if count < pageSize { break }
        }
        send(&chunk, to: stream)
    }

    /// One page of the export from `query` (which moves past it): each message's JSON handed to `emit` (which ends the
    /// line) in seq order; returns how many messages the page held (fewer than ``pageSize``: the export is done). The
    /// streamed export and the job of `async=true` (``MessageExportJob``) both write their lines here.
    static func page(
        _ request: Request, _ query: inout MessageStore.HistoryQuery, appID: String, on db: PostgresConnection, emit: ([UInt8]) -> Void
    ) throws -> Int {
        let rows = try MessageStore.history(
            appID: appID, conversationType: request.type, threadID: request.threadID, peer: request.id, query: query, on: db)
        for index in 0..<rows.count {
            // One writer per line: a shared one would put commas between the top-level values.
            let row = MessageRow(rows[index])
            var w = JSONWriter(capacity: 1024)
            try row.write(to: &w, .app)
            emit(w.bytes)
            if index == rows.count - 1 { query.afterSeq = try row.sequence() ?? query.afterSeq }
        }
        return rows.count
    }

    /// Hands the rendered bytes to the stream once the client has taken most of the previous ones.
    private static func send(_ chunk: inout [UInt8], to stream: ResponseStream) {
        if chunk.isEmpty { return }
        stream.waitForBacklog(below: maxBacklog)
        stream.write(chunk)
        chunk.removeAll(keepingCapacity: true)
    }
}
