import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// `POST /v1/users/{user_id}/erase` (docs/privacy.md#erasure): HTTP ↔ ``JobService`` with the `user_erase` kind
/// (``UserErasure``).
package enum UserErasureRoutes {
    /// `kind`: the node's `user_erase` kind; `poke`: tells the runner a job is waiting.
    package static func register(on api: inout API, kind: JobKind, poke: @escaping @Sendable () -> Void) {
        api.add(.post, "/v1/users/{user_id}/erase", .app, "eraseUser") { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            var body = try ctx.body()
            let dryRun = body.bool("dry_run") ?? true
            try body.check()
            let job = try JobService(ctx).create(kind, params: ["user_id": .string(userID), "dry_run": .bool(dryRun)], settings: ctx.app.settings)
            poke()
            return Reply.accepted(job)
        }
    }
}
