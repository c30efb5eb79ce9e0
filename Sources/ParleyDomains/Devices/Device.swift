import ParleyAPI
import ParleyCore

/// A push device of a user (docs/users.md#devices-and-the-offline-push-rule), with its JSON view.
///
/// A value type read from and written back to one `devices` row; ``DeviceService`` changes rows under the
/// owner's user-row lock.
package struct Device: Sendable, Equatable {
    var deviceID: String
    var userID: String
    var platform: Platform
    var provider: Provider
    var pushKey: String
    /// The bundle id / package the key belongs to (`app_id` in the JSON; `push_app_id` in the table).
    var pushAppID: String
    var voip: Bool
    var apptype: Int64
    var lang: String
    package var createdAt: Int64
    var updatedAt: Int64
    var lastPushAt: Int64?

    /// The `platform` enum, in ZIM number order.
    package enum Platform: String, CaseIterable, Sendable {
        case win, ios, android, macos, linux, web, miniprogram, ipados, ohos, unknown
    }

    /// The push `provider` enum.
    enum Provider: String, CaseIterable, Sendable {
        case apns, fcm, hms, honor, xiaomi, oppo, vivo, meizu, webpush
    }

    /// At most this many devices per user; registering one more evicts the least recently updated
    /// (docs/users.md#devices-and-the-offline-push-rule).
    static let maxPerUser = 20
    static let maxPushKeyBytes = 4096
    static let maxPushAppIDBytes = 255
    static let maxLangBytes = 16
    static let apptypeRange: ClosedRange<Int64> = 1...100

    /// Whether `key` passes the provider's format check (APNs: 64–200 hex characters; others: any).
    static func isValidPushKey(_ key: String, provider: Provider) -> Bool {
        guard provider == .apns else { return true }
        let bytes = key.utf8
        guard (64...200).contains(bytes.count) else { return false }
        return bytes.allSatisfy { c in
            (c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9")) || (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "f"))
                || (c >= UInt8(ascii: "A") && c <= UInt8(ascii: "F"))
        }
    }

    /// The Device JSON object.
    func json() -> [UInt8] {
        var o = JSONObjectWriter(capacity: 256 + pushKey.utf8.count + deviceID.utf8.count + pushAppID.utf8.count)
        o["device_id"] = deviceID
        o["user_id"] = userID
        o["platform"] = platform.rawValue
        o["provider"] = provider.rawValue
        o["push_key"] = pushKey
        o["app_id"] = pushAppID
        o["voip"] = voip
        o["apptype"] = apptype
        o["lang"] = lang
        o["created_at"] = createdAt
        o["updated_at"] = updatedAt
        o["last_push_at"] = lastPushAt
        return o.finish()
    }

    /// `device.removed` (docs/users.md#devices-and-the-offline-push-rule, docs/events.md#the-event-object) to the
    /// device's user: `deleted`, `evicted`, `moved` or `rejected`.
    static func removedEvent(userID: String, deviceID: String, reason: String) -> NewEvent {
        var data = JSONObjectWriter(capacity: 96)
        data["user_id"] = userID
        data["device_id"] = deviceID
        data["reason"] = reason
        return NewEvent(type: "device.removed", data: data.finish(), audience: [userID], orderKey: userID)
    }
}

/// What a device registration asks for (`POST /v1/users/{user_id}/devices`), validated except for the
/// provider's push-key format, which is a domain check (422) made after the user is found.
struct DeviceRegistration: Sendable, Equatable {
    /// nil = let the server generate one (or keep the id of the device already holding the key).
    var deviceID: String?
    var platform: Device.Platform
    var provider: Device.Provider
    var pushKey: String
    var pushAppID: String
    var voip: Bool
    var apptype: Int64
    var lang: String

    /// Reads every field of `body`, recording errors in it; nil when a required field is missing or invalid.
    static func read(from body: inout BodyReader) -> DeviceRegistration? {
        let deviceID = body.id("device_id", .deviceID)
        let platform = body.enumeration("platform", Device.Platform.self, required: true)
        let provider = body.enumeration("provider", Device.Provider.self, required: true)
        let pushKey = body.string("push_key", required: true, minBytes: 1, maxBytes: Device.maxPushKeyBytes)
        let pushAppID = body.string("app_id", required: true, minBytes: 1, maxBytes: Device.maxPushAppIDBytes)
        let voip = body.bool("voip") ?? false
        let apptype = body.int("apptype", range: Device.apptypeRange) ?? 1
        let lang = body.string("lang", maxBytes: Device.maxLangBytes) ?? ""
        guard let platform, let provider, let pushKey, let pushAppID, body.errors.isEmpty else { return nil }
        return DeviceRegistration(
            deviceID: deviceID, platform: platform, provider: provider, pushKey: pushKey, pushAppID: pushAppID, voip: voip,
            apptype: apptype, lang: lang)
    }
}

/// A user's offline push rule (docs/users.md#devices-and-the-offline-push-rule): while the user is online on any of
/// `onlinePlatforms`, devices whose platform is in `mutedPlatforms` get no offline push.
struct PushRule: Sendable, Equatable {
    package var onlinePlatforms: [Device.Platform]
    /// `not_to_receive_offline_push_platforms`.
    var mutedPlatforms: [Device.Platform]

    static let empty = PushRule(onlinePlatforms: [], mutedPlatforms: [])
    /// Each list holds at most this many distinct platforms.
    static let maxPlatforms = 10

    /// The rule JSON object.
    func json() -> [UInt8] {
        var o = JSONObjectWriter(capacity: 128)
        o["online_platforms"] = onlinePlatforms.map(\.rawValue)
        o["not_to_receive_offline_push_platforms"] = mutedPlatforms.map(\.rawValue)
        return o.finish()
    }

    /// Reads both lists from `body` (absent = empty); unknown or repeated platforms are field errors. The lists
    /// are kept in ZIM number order.
    static func read(from body: inout BodyReader) -> PushRule {
        PushRule(
            onlinePlatforms: platforms("online_platforms", &body),
            mutedPlatforms: platforms("not_to_receive_offline_push_platforms", &body))
    }

    private static func platforms(_ key: String, _ body: inout BodyReader) -> [Device.Platform] {
        guard let values = body.stringArray(key, maxItems: maxPlatforms) else { return [] }
        var seen: Set<Device.Platform> = []
        for (i, value) in values.enumerated() {
            let path = "\(body.fieldPath(key))[\(i)]"
            guard let platform = Device.Platform(rawValue: value) else {
                body.addError(path: path, "must be one of " + Device.Platform.allCases.map(\.rawValue).joined(separator: ", "))
                continue
            }
            if !seen.insert(platform).inserted { body.addError(path: path, "repeats \(value)") }
        }
        return Device.Platform.allCases.filter(seen.contains)
    }
}
