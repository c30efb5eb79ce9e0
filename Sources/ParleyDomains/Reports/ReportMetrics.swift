import ParleyAPI
import ParleyCore
import ParleyPostgres
import Synchronization

/// The moderation part of `/metrics` (docs/moderation.md#metrics): open reports per app (a gauge read from the
/// database, so every node reports the same) and the automatic escalations this node did, by action (a counter).
package enum ReportMetrics {
    private static let automod = Mutex<[String: Int]>([:])

    /// Counts one automatic escalation (`automod_mute`, `automod_ban`) done by this node.
    static func automodAction(_ action: String) {
        automod.withLock { $0[action, default: 0] += 1 }
    }

    /// The exposition text: `parley_reports_open{app_id}` and `parley_automod_actions_total{action}`.
    package static func render(pool: PostgresPool) -> String {
        var out = Metrics.family("parley_reports_open", "gauge", "Open reports per app.")
        if let counts = try? pool.withConnection({ db in try ReportStore.openCounts(on: db) }) {
            for (app, open) in counts { out += "parley_reports_open{app_id=\"\(Metrics.escape(app))\"} \(open)\n" }
        }
        out += Metrics.family("parley_automod_actions_total", "counter", "Automatic escalations by action (this node).")
        let actions = automod.withLock { $0 }
        for action in ["automod_ban", "automod_mute"] {
            out += "parley_automod_actions_total{action=\"\(action)\"} \(actions[action] ?? 0)\n"
        }
        return out
    }
}
