import ParleyHTTP
import ParleyPostgres

/// What `/healthz`, `/readyz` and `/metrics` know of the database: the embedded cluster's supervisor (nil with
/// `DATABASE_URL`), the readiness probe with the threads it runs on, and the circuit shared by the serving connections.
///
/// Immutable; the parts it holds own their state.
struct DatabaseHealth: Sendable {
    let embedded: EmbeddedPostgres?
    let probe: PostgresProbe
    /// Runs `/readyz` off the pool: a stalled database can hold every pool worker, and readiness must still answer.
    let probeExecutor: ThreadPoolExecutor
    let circuit: PostgresCircuit

    /// `/readyz` answers within 1 s, even while the database does not answer (docs/reliability.md#a-stalled-database):
    /// the check gets this, the rest is for the hand-offs on a busy machine.
    static let readinessBudget: Duration = .milliseconds(700)

    init(embedded: EmbeddedPostgres?, database: PostgresConfiguration, circuit: PostgresCircuit, logger: PostgresLogger) {
        self.embedded = embedded
        self.probe = PostgresProbe(configuration: database, logger: logger)
        // Two threads: a second /readyz need not wait for the first one's hand-off; both then share one check.
        self.probeExecutor = ThreadPoolExecutor(threads: 2, maxQueued: 64, maxWait: .milliseconds(200))
        self.circuit = circuit
    }
}
