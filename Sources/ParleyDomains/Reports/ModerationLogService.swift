import ParleyAPI
import ParleyCore
import ParleyPostgres

/// Reading the moderation log (docs/moderation.md#the-moderation-log); every domain writes it with
/// ``ModerationLogStore/record(_:appID:now:on:)`` in the transaction of its action.
struct ModerationLogService: DomainService {
    let db: PostgresConnection
    let appID: String
    let now: Int64

    typealias Filter = ModerationLogStore.Filter

    func list(filter: Filter, before: (at: Int64, id: Int64)?, limit: Int) throws -> [ModerationLogStore.LoggedAction] {
        try ModerationLogStore.list(appID: appID, filter: filter, before: before, limit: limit, on: db)
    }
}
