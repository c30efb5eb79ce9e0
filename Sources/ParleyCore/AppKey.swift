/// App keys of the form `pk.<app_id>.<43 base64url chars>`
/// (docs/getting-started.md#2-keys-the-admin-key-and-an-app-key).
///
/// The secret part is 32 random bytes, base64url without padding (exactly 43 chars). Only ``hash(_:)`` of the
/// whole key is stored; the key itself is shown once at creation.
public enum AppKey {
    /// A new key for `appID`.
    public static func generate(appID: String) -> String {
        precondition(IdentifierKind.appID.isValid(appID), "invalid app_id \(appID)")
        return "pk.\(appID).\(Crypto.base64URLEncode(Crypto.randomBytes(32)))"
    }

    /// The app id and secret part of a well-formed key, or nil when `value` is not of the app-key form.
    public static func parse(_ value: String) -> (appID: String, secret: String)? {
        let u = value.utf8
        // Cheapest rejections first: every bearer value goes through this on the hot path.
        guard u.count >= 3 + 3 + 1 + 43, u.count <= 3 + 32 + 1 + 43, value.hasPrefix("pk.") else { return nil }
        let rest = value.utf8.dropFirst(3)
        guard let dot = rest.firstIndex(of: UInt8(ascii: ".")) else { return nil }
        let appID = String(Substring(value.utf8[rest.startIndex..<dot]))
        let secret = Substring(value.utf8[value.utf8.index(after: dot)...])
        guard secret.utf8.count == 43, IdentifierKind.appID.isValid(appID),
            Crypto.base64URLDecode(secret)?.count == 32
        else { return nil }
        return (appID, String(secret))
    }

    /// Whether `value` has the app-key form (used to classify a bearer value,
    /// docs/getting-started.md#2-keys-the-admin-key-and-an-app-key).
    public static func looksLikeAppKey(_ value: String) -> Bool { parse(value) != nil }

    /// The stored form of a key: lowercase hex SHA-256 of the whole key string.
    public static func hash(_ key: String) -> String { Crypto.hex(Crypto.sha256(key)) }
}
