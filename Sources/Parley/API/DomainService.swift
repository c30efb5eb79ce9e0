import ParleyPostgres

/// A domain's rules, made per request from its context: the pool, the app and the request's server time.
protocol DomainService {
    init(pool: PostgresPool, appID: String, now: Int64)
}

extension DomainService {
    /// The service for the request `ctx`.
    init(_ ctx: APIContext) {
        self.init(pool: ctx.services.pool, appID: ctx.appID, now: ctx.now)
    }
}
