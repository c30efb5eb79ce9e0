import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// `POST /v1/users/{user_id}/export` (docs/privacy.md#user-data-export): HTTP ↔ ``JobService`` with the `user_export`
/// kind (``UserExport``).
package enum UserExportRoutes {
    /// `kind`: the node's `user_export` kind (the one its job runner runs); `poke`: tells the runner a job is waiting.
    package static func register(on api: inout API, kind: JobKind, poke: @escaping @Sendable () -> Void) {
        api.add(.post, "/v1/users/{user_id}/export", .app, "exportUser") { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            // Every field is optional (there are none yet): an empty body is accepted.
            let job = try JobService(ctx).create(kind, params: ["user_id": .string(userID)], settings: ctx.app.settings)
            poke()
            return Reply.accepted(job)
        }
    }
}
