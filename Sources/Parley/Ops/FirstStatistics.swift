import ParleyAPI
import ParleyPostgres

/// Gives each table its first statistics once it holds rows, within seconds instead of at autovacuum's first pass.
///
/// The pool runs generic plans (``ParleyApp``), each made once per connection on the statistics of the moment and
/// kept until an ANALYZE of a table it reads invalidates it. On a fresh database those plans were made on empty,
/// never-analyzed tables and kept for up to a minute (`autovacuum_naptime`): one of them, the push bridge's message
/// lookup, read the whole app's messages per batch, and sends ran at 1,350–1,450/s instead of 1,950/s through nginx
/// on this project's bench machine (docs/scaling.md). Only tables that nobody analyzed yet are handled here, each once;
/// later growth is autovacuum's. ANALYZE of a table this role does not own is skipped by PostgreSQL with a warning.
enum FirstStatistics {
    /// Rows (live, or changed since the table was created) before a table gets its first statistics.
    static let minimumRows: Int64 = 1000

    static let kind = TimerKind(name: "first_statistics", everyMillis: 5_000) { services, _ in
        try services.pool.withConnection { db in
            let tables = try db.query(
                """
                SELECT relname FROM pg_stat_user_tables
                WHERE schemaname = current_schema() AND last_analyze IS NULL AND last_autoanalyze IS NULL
                  AND greatest(n_live_tup, n_mod_since_analyze) >= \(minimumRows)
                ORDER BY relname
                """
            ).decode(String.self)
            for table in tables {
                try db.simpleQuery("ANALYZE " + (try db.escapeIdentifier(table)))
            }
            return tables.count
        }
    }
}
