import ParleyCore

/// An app's settings (docs/users.md#apps-and-settings): every field with its default and allowed values, validated by
/// one table.
///
/// Stored as one JSON object (all fields, defaults filled in); typed accessors read the hot ones.
public struct AppSettings: Sendable, Equatable {
    /// What values a setting takes.
    enum Kind: Sendable {
        case bool
        case int(ClosedRange<Int64>)
        /// 0, or a value in the range.
        case zeroOr(ClosedRange<Int64>)
        case choice([String])
        /// ≤ 10000 words of 1–64 bytes.
        case words
        /// null or an absolute http(s) URL ≤ 2048 bytes.
        case optionalURL
        /// null or `whsec_` + base64 of 24–64 bytes.
        case secret
    }

    struct Field: Sendable {
        let name: String
        let kind: Kind
        let defaultValue: JSONValue
    }

    static let fields: [Field] = [
        Field(name: "friend_only_c2c", kind: .bool, defaultValue: false),
        Field(name: "blacklist_feedback", kind: .choice(["silent", "error"]), defaultValue: "silent"),
        Field(name: "revoke_window_s", kind: .int(0...2_592_000), defaultValue: 120),
        Field(name: "edit_window_s", kind: .int(0...2_592_000), defaultValue: 86400),
        Field(name: "sensitive_words", kind: .words, defaultValue: .array([])),
        Field(name: "sensitive_word_action", kind: .choice(["reject", "mask"]), defaultValue: "reject"),
        Field(name: "history_retention_days", kind: .int(0...3650), defaultValue: 0),
        Field(name: "max_group_members", kind: .int(2...100_000), defaultValue: 2000),
        Field(name: "big_group_threshold", kind: .int(2...100_000), defaultValue: 1000),
        Field(name: "text_max_bytes", kind: .int(64...32768), defaultValue: 2048),
        Field(name: "event_retention_hours", kind: .int(1...720), defaultValue: 72),
        Field(name: "application_expiry_s", kind: .int(60...2_592_000), defaultValue: 604_800),
        Field(name: "max_rooms_per_user", kind: .int(1...100), defaultValue: 5),
        Field(name: "room_offline_leave_s", kind: .zeroOr(10...86400), defaultValue: 0),
        Field(name: "token_default_ttl_s", kind: .int(60...2_592_000), defaultValue: 86400),
        Field(name: "rate_limit_app_rps", kind: .int(1...100_000), defaultValue: 200),
        Field(name: "rate_limit_user_rps", kind: .int(1...100_000), defaultValue: 20),
        Field(name: "user_send_rate_per_s", kind: .int(1...100_000), defaultValue: 10),
        Field(name: "file_max_bytes", kind: .int(1024...2_147_483_648), defaultValue: 104_857_600),
        Field(name: "image_max_bytes", kind: .int(1024...104_857_600), defaultValue: 10_485_760),
        Field(name: "image_max_pixels", kind: .int(10_000...200_000_000), defaultValue: 50_000_000),
        Field(name: "app_storage_quota_bytes", kind: .int(0...1_000_000_000_000_000), defaultValue: 0),
        Field(name: "file_url_ttl_s", kind: .int(60...31_536_000), defaultValue: 604_800),
        Field(name: "delete_files_with_messages", kind: .bool, defaultValue: true),
        Field(name: "file_retention_days", kind: .int(0...3650), defaultValue: 0),
        Field(name: "automod_block_threshold", kind: .int(0...1000), defaultValue: 0),
        Field(name: "automod_window_s", kind: .int(10...86400), defaultValue: 3600),
        Field(name: "automod_action", kind: .choice(["mute", "ban"]), defaultValue: "mute"),
        Field(name: "automod_mute_s", kind: .int(60...2_592_000), defaultValue: 3600),
    ]

    static let pushFields: [Field] = [
        Field(name: "enabled", kind: .bool, defaultValue: false),
        Field(name: "gateway_url", kind: .optionalURL, defaultValue: .null),
        Field(name: "format", kind: .choice(["matrix", "generic"]), defaultValue: "matrix"),
        Field(name: "secret", kind: .secret, defaultValue: .null),
        Field(name: "event_id_only", kind: .bool, defaultValue: false),
        Field(name: "timeout_ms", kind: .int(100...30000), defaultValue: 5000),
        Field(name: "max_attempts", kind: .int(1...10), defaultValue: 3),
    ]

    /// The full settings object, fields in table order.
    public private(set) var object: JSONObject

    /// Defaults, with a freshly generated push secret.
    public static func defaults() -> AppSettings {
        var object = JSONObject()
        for field in fields { object[field.name] = field.defaultValue }
        var push = JSONObject()
        for field in pushFields { push[field.name] = field.defaultValue }
        push["secret"] = .string("whsec_" + Crypto.base64Encode(Crypto.randomBytes(32)))
        object["push"] = .object(push)
        return AppSettings(object: object)
    }

    /// Settings read back from storage; missing fields (added by a later version) take their defaults.
    public static func stored(_ object: JSONObject) -> AppSettings {
        var settings = defaults()
        for field in fields { if let v = object[field.name] { settings.object[field.name] = v } }
        if let push = object["push"]?.objectValue, var merged = settings.object["push"]?.objectValue {
            for field in pushFields { if let v = push[field.name] { merged[field.name] = v } }
            settings.object["push"] = .object(merged)
        }
        return settings
    }

    /// Applies a partial update (`push` merged key by key). Returns the names of the fields whose value changed
    /// (`push.timeout_ms` for push fields), or throws 400 listing every invalid field.
    public mutating func apply(_ patch: JSONObject, path: String = "body") throws(APIError) -> [String] {
        var errors: [FieldError] = []
        var changed: [String] = []
        var updated = object
        for field in Self.fields {
            guard let given = patch[field.name] else { continue }
            let value = Self.normalized(given, field.kind)
            if let message = Self.problem(value, field.kind) {
                errors.append(FieldError(field: "\(path).\(field.name)", message: message))
            } else if updated[field.name] != value {
                updated[field.name] = value
                changed.append(field.name)
            }
        }
        if let pushValue = patch["push"] {
            if let pushPatch = pushValue.objectValue, var push = updated["push"]?.objectValue {
                for field in Self.pushFields {
                    guard let given = pushPatch[field.name] else { continue }
                    let value = Self.normalized(given, field.kind)
                    if let message = Self.problem(value, field.kind) {
                        errors.append(FieldError(field: "\(path).push.\(field.name)", message: message))
                    } else if push[field.name] != value {
                        push[field.name] = value
                        changed.append("push.\(field.name)")
                    }
                }
                updated["push"] = .object(push)
            } else {
                errors.append(FieldError(field: "\(path).push", message: "must be an object"))
            }
        }
        if !errors.isEmpty { throw APIError.invalidParams(errors) }
        object = updated
        return changed
    }

    /// Integer settings are stored as integers however they were written: `200.0` is 200 (docs/api.md).
    private static func normalized(_ value: JSONValue, _ kind: Kind) -> JSONValue {
        switch kind {
        case .int, .zeroOr: value.intValue.map(JSONValue.int) ?? value
        default: value
        }
    }

    private static func problem(_ value: JSONValue, _ kind: Kind) -> String? {
        switch kind {
        case .bool:
            return value.boolValue == nil ? "must be a boolean" : nil
        case .int(let range):
            guard let i = value.intValue else { return "must be an integer" }
            return range.contains(i) ? nil : "must be between \(range.lowerBound) and \(range.upperBound)"
        case .zeroOr(let range):
            guard let i = value.intValue else { return "must be an integer" }
            return i == 0 || range.contains(i) ? nil : "must be 0 or between \(range.lowerBound) and \(range.upperBound)"
        case .choice(let options):
            guard let s = value.stringValue, options.contains(s) else {
                return "must be one of " + options.joined(separator: ", ")
            }
            return nil
        case .words:
            guard let items = value.arrayValue else { return "must be an array of strings" }
            guard items.count <= 10000 else { return "at most 10000 words" }
            for item in items {
                guard let word = item.stringValue, (1...64).contains(word.utf8.count) else {
                    return "each word must be a string of 1 to 64 bytes"
                }
            }
            return nil
        case .optionalURL:
            if value.isNull { return nil }
            guard let url = value.stringValue else { return "must be a URL or null" }
            return URLRules.problem(url)
        case .secret:
            if value.isNull { return nil }
            guard let s = value.stringValue, s.hasPrefix("whsec_"),
                let key = Crypto.base64Decode(String(s.dropFirst(6))), (24...64).contains(key.count)
            else { return "must be whsec_ followed by base64 of 24 to 64 bytes" }
            return nil
        }
    }

    // MARK: - Typed reads of the hot fields

    package func int(_ name: String) -> Int64 { object[name]?.intValue ?? 0 }
    package func bool(_ name: String) -> Bool { object[name]?.boolValue ?? false }
    package func string(_ name: String) -> String { object[name]?.stringValue ?? "" }

    public var rateLimitAppRPS: Int { Int(int("rate_limit_app_rps")) }
    public var rateLimitUserRPS: Int { Int(int("rate_limit_user_rps")) }
    public var userSendRatePerS: Int { Int(int("user_send_rate_per_s")) }
    public var tokenDefaultTTLSeconds: Int64 { int("token_default_ttl_s") }
    public var eventRetentionHours: Int64 { int("event_retention_hours") }

    /// The settings as JSON bytes (API responses and storage).
    public var json: [UInt8] { JSONValue.object(object).serialized() }
}

/// The URL rule shared by every URL field: absolute http/https, at most 2048 bytes.
enum URLRules {
    package static func problem(_ url: String, maxBytes: Int = 2048) -> String? {
        if url.utf8.count > maxBytes { return "must be at most \(maxBytes) bytes" }
        let lower = url.lowercased()
        guard lower.hasPrefix("http://") || lower.hasPrefix("https://") else { return "must be an absolute http or https URL" }
        let rest = url.drop(while: { $0 != "/" }).dropFirst(2)
        if rest.isEmpty || rest.first == "/" { return "must name a host" }
        if url.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value == 0x7F }) { return "must not contain spaces or control characters" }
        return nil
    }
}
