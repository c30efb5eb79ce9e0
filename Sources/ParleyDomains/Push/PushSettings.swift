import ParleyAPI
import ParleyCore

/// An app's `push` settings (docs/users.md#apps-and-settings) as the bridge uses them.
struct PushSettings: Sendable {
    enum Format: String, Sendable { case matrix, generic }

    var enabled: Bool
    var gatewayURL: String?
    var format: Format
    var secret: String?
    var eventIDOnly: Bool
    var timeoutMillis: Int
    var maxAttempts: Int

    /// Step 1 of the push decision (docs/push.md#what-is-pushed-to-whom): the master switch is on and there is a
    /// gateway.
    var configured: Bool { enabled && !(gatewayURL ?? "").isEmpty }

    init(_ settings: AppSettings) {
        self.init(push: settings.object["push"]?.objectValue ?? JSONObject())
    }

    /// From the `push` object of the settings.
    init(push: JSONObject) {
        enabled = push["enabled"]?.boolValue ?? false
        gatewayURL = push["gateway_url"]?.stringValue
        format = push["format"]?.stringValue.flatMap(Format.init) ?? .matrix
        secret = push["secret"]?.stringValue
        eventIDOnly = push["event_id_only"]?.boolValue ?? false
        timeoutMillis = Int(push["timeout_ms"]?.intValue ?? 5000)
        maxAttempts = Int(push["max_attempts"]?.intValue ?? 3)
    }

    /// The URL a request goes to: the Matrix notify path under the gateway, or the gateway itself (generic).
    var requestURL: String? {
        guard let base = gatewayURL, !base.isEmpty else { return nil }
        guard format == .matrix else { return base }
        return (base.hasSuffix("/") ? String(base.dropLast()) : base) + "/_matrix/push/v1/notify"
    }
}
