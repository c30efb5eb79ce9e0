import ParleyCore
import ParleyPostgres

/// A domain's rules, made per request from its context: the request's connection, the app and the request's server
/// time. Services open their transactions on that connection (``PostgresConnection/transaction(isolation:_:)``
/// retries conflicts there); they never reach for the pool.
package protocol DomainService {
    init(db: PostgresConnection, appID: String, now: Int64)
}

extension DomainService {
    /// The service for the request `ctx`.
    package init(_ ctx: APIContext) {
        self.init(db: ctx.db, appID: ctx.appID, now: ctx.now)
    }
}
