/// User tokens: HS256 JWTs naming an app, a user and the user's token generation (docs/users.md#user-tokens).
///
/// Verification is two-step because the signing secret is per app: ``decodeUnverified(_:)`` reads `iss` to find
/// the app (and its secret), then ``verify(_:secret:now:)`` checks, in this order, the algorithm,
/// the signature and the expiry. User existence, generation and bans are the caller's checks.
///
/// ```swift
/// let token = UserToken.mint(appID: "a1", userID: "u1", issuedAt: now, expiresAt: now + 86400,
///                            generation: 0, secret: secret)
/// guard let (_, claims) = UserToken.decodeUnverified(token), let app = claims["iss"]?.stringValue else { … }
/// switch UserToken.verify(token, secret: secretOf(app), now: now) { … }
/// ```
public enum UserToken {
    /// The verified claims of a user token.
    public struct Claims: Sendable, Equatable {
        /// `iss`: the app id.
        public var appID: String
        /// `sub`: the user id.
        public var userID: String
        /// `iat`, seconds since the epoch.
        public var issuedAt: Int64
        /// `exp`, seconds since the epoch.
        public var expiresAt: Int64
        /// `gen`: the user's token generation when minted; older than the current one → revoked.
        public var generation: Int64
    }

    /// Why a token failed verification; `.expired` maps to `6000106`, everything else to `6000103`.
    public enum Failure: Error, Sendable, Equatable {
        /// Not three base64url segments, header/claims not JSON objects, or claims missing or mistyped.
        case malformed
        /// Header `alg` is not `HS256` (`none`, `HS512` …).
        case badAlgorithm
        /// The HMAC does not match.
        case badSignature
        /// `exp` ≤ now.
        case expired

        /// The catalogue code the API answers with.
        public var errorCode: ErrorCode { self == .expired ? .tokenExpired : .tokenInvalid }
    }

    /// The encoded header every token carries: `{"alg":"HS256","typ":"JWT"}`.
    private static let encodedHeader = Crypto.base64URLEncode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8))

    /// Mints a token for `userID` of `appID`, signed with the app's token secret.
    public static func mint(
        appID: String, userID: String, issuedAt: Int64, expiresAt: Int64, generation: Int, secret: [UInt8]
    ) -> String {
        var claims = JSONObjectWriter(capacity: 128)
        claims["iss"] = appID
        claims["sub"] = userID
        claims["iat"] = issuedAt
        claims["exp"] = expiresAt
        claims["gen"] = generation
        let signingInput = encodedHeader + "." + Crypto.base64URLEncode(claims.finish())
        let mac = Crypto.hmacSHA256(key: secret, message: Array(signingInput.utf8))
        return signingInput + "." + Crypto.base64URLEncode(mac)
    }

    /// The three segments of a token as byte ranges, or nil unless there are exactly two dots.
    private struct Segments {
        var header: UnsafeBufferPointer<UInt8>
        var claims: UnsafeBufferPointer<UInt8>
        var signature: UnsafeBufferPointer<UInt8>
        /// `header.claims`, the bytes the MAC covers, exactly as sent.
        var signingInput: UnsafeBufferPointer<UInt8>

        init?(_ t: UnsafeBufferPointer<UInt8>) {
            // Work on bytes: splitting a `String` by `Character` costs more than the HMAC itself.
            guard let d1 = t.firstIndex(of: UInt8(ascii: ".")),
                let d2 = t[(d1 + 1)...].firstIndex(of: UInt8(ascii: ".")),
                !t[(d2 + 1)...].contains(UInt8(ascii: "."))
            else { return nil }
            header = UnsafeBufferPointer(rebasing: t[..<d1])
            claims = UnsafeBufferPointer(rebasing: t[(d1 + 1)..<d2])
            signature = UnsafeBufferPointer(rebasing: t[(d2 + 1)...])
            signingInput = UnsafeBufferPointer(rebasing: t[..<d2])
        }
    }

    private static func decodeObject(_ segment: UnsafeBufferPointer<UInt8>) -> JSONObject? {
        guard !segment.isEmpty, let bytes = Crypto.base64URLDecode(segment),
            case .object(let o)? = try? JSONValue.parse(bytes, maxDepth: 8)
        else { return nil }
        return o
    }

    private static func isBase64URLByte(_ c: UInt8) -> Bool {
        IdentifierKind.isLowerAlnum(c) || (c >= UInt8(ascii: "A") && c <= UInt8(ascii: "Z")) || c == UInt8(ascii: "-")
            || c == UInt8(ascii: "_")
    }

    /// Header and claims of a token of the JWT form, without checking anything else.
    public static func decodeUnverified(_ token: String) -> (header: JSONObject, claims: JSONObject)? {
        var token = token
        return token.withUTF8 { t in
            // The signature segment is only checked for its alphabet: a tampered signature (say, its last
            // character changed) must still be recognised as a token and rejected as `6000103`, not as "no
            // credential".
            guard let seg = Segments(t), seg.signature.allSatisfy(isBase64URLByte),
                let header = decodeObject(seg.header), let claims = decodeObject(seg.claims)
            else { return nil }
            return (header, claims)
        }
    }

    /// Whether `value` has the JWT form: three base64url segments, the first two decoding to JSON objects.
    ///
    /// The signature segment may be empty (an `alg: none` token is still "of the JWT form" and must be rejected as
    /// `6000103`, not `7000001`).
    public static func looksLikeJWT(_ value: String) -> Bool { decodeUnverified(value) != nil }

    /// Verifies a token with the app's secret at time `now` (seconds), in the order of ``verify(_:secret:now:)``'s
    /// steps.
    public static func verify(_ token: String, secret: [UInt8], now: Int64) -> Result<Claims, Failure> {
        var token = token
        return token.withUTF8 { t in
            guard let seg = Segments(t), let header = decodeObject(seg.header),
                let claimsObject = decodeObject(seg.claims)
            else { return .failure(.malformed) }
            guard header["alg"] == .string("HS256") else { return .failure(.badAlgorithm) }
            guard let signature = Crypto.base64URLDecode(seg.signature), signature.count == 32 else {
                return .failure(.badSignature)
            }
            let expected = Crypto.hmacSHA256(key: secret, message: seg.signingInput)
            guard Crypto.constantTimeEquals(expected, signature) else { return .failure(.badSignature) }
            guard case .string(let iss)? = claimsObject["iss"], case .string(let sub)? = claimsObject["sub"],
                case .int(let iat)? = claimsObject["iat"], case .int(let exp)? = claimsObject["exp"],
                case .int(let gen)? = claimsObject["gen"]
            else { return .failure(.malformed) }
            guard exp > now else { return .failure(.expired) }
            return .success(Claims(appID: iss, userID: sub, issuedAt: iat, expiresAt: exp, generation: gen))
        }
    }
}
