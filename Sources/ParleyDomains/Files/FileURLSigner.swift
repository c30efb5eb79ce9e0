import ParleyAPI
import ParleyCore
import ParleyHTTP

/// Download URLs that need no `Authorization` header (docs/files.md#signed-urls), so that an `<img src>` or a push
/// notification can use them: the URL carries its app, its expiry (Unix seconds) and an HMAC-SHA-256 over app, file,
/// variant and expiry under a key every node derives from the admin key (a URL signed by one node verifies on all).
package struct FileURLSigner: Sendable {
    /// Which bytes of a file a URL serves.
    package enum Variant: String, CaseIterable, Sendable {
        case original, large, thumbnail
        case firstFrame = "first_frame"
    }

    /// The first signs; each verifies (the key of a secondary admin key keeps the URLs it signed valid during a
    /// rotation).
    private let keys: [[UInt8]]

    package init(services: Services) { keys = services.fileURLKeys }

    /// The signature of a URL: base64url of the HMAC of its four parts, each on its own line (no part may hold a line
    /// break: ids are opaque ids, the variant an enum, the expiry digits).
    func signature(appID: String, fileID: String, variant: Variant, expires: Int64) -> String {
        signature(key: keys[0], appID: appID, fileID: fileID, variant: variant, expires: expires)
    }

    private func signature(key: [UInt8], appID: String, fileID: String, variant: Variant, expires: Int64) -> String {
        Crypto.base64URLEncode(Crypto.hmacSHA256(key: key, message: Array("\(appID)\n\(fileID)\n\(variant.rawValue)\n\(expires)".utf8)))
    }

    /// Whether `signature` signs these parts under one of the keys and `expires` (Unix seconds) is not before
    /// `nowSeconds`. Compared in constant time.
    func verify(appID: String, fileID: String, variant: Variant, expires: Int64, signature: String, nowSeconds: Int64) -> Bool {
        let presented = Array(signature.utf8)
        let signed = keys.contains { key in
            Crypto.constantTimeEquals(
                Array(self.signature(key: key, appID: appID, fileID: fileID, variant: variant, expires: expires).utf8), presented)
        }
        return signed && expires >= nowSeconds
    }

    /// URLs for one answer: on `base`, valid until `expires`.
    package struct Issued: Sendable {
        let signer: FileURLSigner
        let base: String
        let appID: String
        let expires: Int64

        package func url(fileID: String, variant: Variant) -> String {
            let signature = signer.signature(appID: appID, fileID: fileID, variant: variant, expires: expires)
            let variantPart = variant == .original ? "" : "&variant=\(variant.rawValue)"
            return "\(base)/v1/files/\(fileID)?app_id=\(Self.escaped(appID))\(variantPart)&expires=\(expires)&signature=\(signature)"
        }

        /// Ids are opaque ids ([A-Za-z0-9._-]); anything else is percent-encoded all the same.
        private static func escaped(_ text: String) -> String {
            var out = ""
            for byte in text.utf8 {
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                    UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                    out.unicodeScalars.append(Unicode.Scalar(byte))
                default:
                    out += "%" + (byte < 16 ? "0" : "") + String(byte, radix: 16, uppercase: true)
                }
            }
            return out
        }
    }

    /// URLs valid for `ttlSeconds` from `nowMillis`, on the configured public URL or else the request's own scheme and
    /// `Host`.
    package func issue(appID: String, request: Request, publicURL: String?, nowMillis: Int64, ttlSeconds: Int64) -> Issued {
        Issued(signer: self, base: publicURL ?? Self.base(of: request), appID: appID, expires: nowMillis / 1000 + ttlSeconds)
    }

    /// URLs for an answer to `caller`, valid for the app's `file_url_ttl_s`.
    package static func issued(for caller: some AppCaller) -> Issued {
        issued(app: caller.app, request: caller.request, now: caller.now, services: caller.services)
    }

    /// URLs for the answer to the request this thread is answering (``AnsweringScope``); nil outside a request.
    package static var forAnsweredRequest: Issued? {
        AnsweringScope.current.map { issued(app: $0.app, request: $0.request, now: $0.now, services: $0.services) }
    }

    private static func issued(app: AppRecord, request: Request, now: Int64, services: Services) -> Issued {
        FileURLSigner(services: services).issue(
            appID: app.appID, request: request, publicURL: services.configuration.publicURL, nowMillis: now,
            ttlSeconds: app.settings.int("file_url_ttl_s"))
    }

    /// `http://<Host>`, or `https://` behind a proxy that says so with `X-Forwarded-Proto: https`.
    static func base(of request: Request) -> String {
        let host = request.headers["Host"] ?? "127.0.0.1"
        let scheme = request.headers["X-Forwarded-Proto"]?.lowercased() == "https" ? "https" : "http"
        return "\(scheme)://\(host)"
    }
}
