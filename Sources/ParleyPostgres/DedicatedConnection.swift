/// The connection of one background thread that is not a pool worker (the live hub, the event sequencer, the
/// message writer): opened on first use under the thread's own `application_name` (so `pg_stat_activity` tells
/// them apart), with generic plans like the pool's, and opened afresh after it broke.
///
/// Not `Sendable`: owned by that thread.
public struct DedicatedConnection {
    private let configuration: PostgresConfiguration
    private let logger: PostgresLogger
    private var current: PostgresConnection?

    public init(_ database: PostgresConfiguration, applicationName: String, logger: PostgresLogger) {
        var configuration = database
        configuration.applicationName = applicationName
        // Their statements are fixed and run thousands of times: plan once. PostgreSQL's default would re-plan a
        // statement whose generic plan it estimates dearer (it did so for the writer's, at ~2 ms a batch).
        configuration.addServerSetting("plan_cache_mode", "force_generic_plan")
        self.configuration = configuration
        self.logger = logger
    }

    /// The open connection, connecting first when there is none.
    public mutating func get() throws(PostgresError) -> PostgresConnection {
        if let current { return current }
        let opened = try PostgresConnection(configuration, logger: logger)
        current = opened
        return opened
    }

    /// Forgets the connection if it broke (after a failure), so the next `get` reconnects.
    public mutating func dropIfBroken() {
        if current?.isBroken ?? false { current = nil }
    }
}
