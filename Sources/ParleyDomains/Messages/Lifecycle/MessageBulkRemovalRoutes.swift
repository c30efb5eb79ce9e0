import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// `POST /v1/moderation/remove_messages` (docs/jobs.md#removing-a-users-messages): HTTP ↔ ``JobService`` with the
/// `remove_messages` kind (``MessageBulkRemoval``).
package enum MessageBulkRemovalRoutes {
    /// `kind`: the node's `remove_messages` kind (the one its job runner runs); `poke`: tells the runner a job is
    /// waiting.
    package static func register(on api: inout API, kind: JobKind, poke: @escaping @Sendable () -> Void) {
        api.add(.post, "/v1/moderation/remove_messages", .app, "removeMessages") { ctx in
            var body = try ctx.body()
            let userID = body.id("user_id", .userID, required: true)
            let from = body.int("from", required: true, range: 0...Int64.max)
            let to = body.int("to", required: true, range: 0...Int64.max)
            let conversationType = body.enumeration("conversation_type", ConversationType.self)
            let conversationID = body.id("conversation_id", conversationType == .peer ? .userID : conversationType == .group ? .groupID : .roomID)
            let mode = body.enumeration("mode", MessageBulkRemoval.Mode.self, required: true)
            let dryRun = body.bool("dry_run") ?? true
            if let from, let to, to <= from { body.addError("to", "must be greater than from") }
            if body.contains("conversation_type") != body.contains("conversation_id") {
                let missing = body.contains("conversation_type") ? "conversation_id" : "conversation_type"
                body.addError(missing, "is required with \(missing == "conversation_id" ? "conversation_type" : "conversation_id")")
            }
            try body.check()
            guard let userID, let from, let to, let mode else { throw APIError.internalError }
            let request = MessageBulkRemoval.Request(
                userID: userID, from: from, to: to, conversationType: conversationType, conversationID: conversationID, mode: mode,
                dryRun: dryRun)
            let job = try JobService(ctx).create(kind, params: request.params, settings: ctx.app.settings)
            poke()
            return Reply.accepted(job)
        }
    }
}
