import ParleyCore
import ParleyHTTP
import ParleyPostgres

extension APIContext {
    /// The context of a request the server makes later on a caller's behalf, with no client waiting (a scheduled
    /// send, docs/scheduled-messages.md): `request` is built by the server, `credential` is the one the caller used.
    package static func deferred(
        request: Request, credential: Credential, app: AppRecord, now: Int64, services: Services, db: PostgresConnection
    ) -> APIContext {
        APIContext(request: request, credential: credential, app: app, now: now, services: services, db: db)
    }
}
