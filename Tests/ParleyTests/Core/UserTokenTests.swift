import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

@Suite("User tokens")
struct UserTokenTests {
    let secret = Crypto.randomBytes(32)
    let now: Int64 = 1_700_000_000

    private func mint(exp: Int64? = nil, gen: Int = 3) -> String {
        UserToken.mint(
            appID: "app1", userID: "u#1", issuedAt: now, expiresAt: exp ?? now + 86400, generation: gen, secret: secret)
    }

    /// A token with the given header JSON and claims JSON, signed (HS256) with `key`.
    private func forge(header: String, claims: String, key: [UInt8]?) -> String {
        let input = Crypto.base64URLEncode(Array(header.utf8)) + "." + Crypto.base64URLEncode(Array(claims.utf8))
        guard let key else { return input + "." }
        return input + "." + Crypto.base64URLEncode(Crypto.hmacSHA256(key: key, message: Array(input.utf8)))
    }

    @Test func mintAndVerifyRoundTrip() throws {
        let token = mint()
        #expect(token.split(separator: ".").count == 3)
        let claims = try UserToken.verify(token, secret: secret, now: now).get()
        #expect(
            claims
                == UserToken.Claims(appID: "app1", userID: "u#1", issuedAt: now, expiresAt: now + 86400, generation: 3))
    }

    @Test func headerAndClaimsAreStandardJWT() throws {
        let token = mint()
        let (header, claims) = try #require(UserToken.decodeUnverified(token))
        #expect(header == ["alg": "HS256", "typ": "JWT"])
        #expect(claims["iss"] == "app1")
        #expect(claims["sub"] == "u#1")
        #expect(claims["iat"] == .int(now))
        #expect(claims["exp"] == .int(now + 86400))
        #expect(claims["gen"] == 3)
        #expect(!token.contains("="))
    }

    @Test func expiry() {
        let token = mint(exp: now + 10)
        #expect((try? UserToken.verify(token, secret: secret, now: now + 9).get()) != nil)
        // exp ≤ now is expired.
        #expect(UserToken.verify(token, secret: secret, now: now + 10) == .failure(.expired))
        #expect(UserToken.verify(token, secret: secret, now: now + 11) == .failure(.expired))
        #expect(UserToken.Failure.expired.errorCode == .tokenExpired)
        #expect(UserToken.Failure.badSignature.errorCode == .tokenInvalid)
    }

    @Test func tamperedSignatureOrPayload() {
        let token = mint()
        var parts = token.split(separator: ".").map(String.init)
        // Another secret.
        #expect(UserToken.verify(token, secret: Crypto.randomBytes(32), now: now) == .failure(.badSignature))
        // Signature changed in its first character.
        var sig = Array(parts[2])
        sig[0] = sig[0] == "A" ? "B" : "A"
        #expect(
            UserToken.verify(parts[0] + "." + parts[1] + "." + String(sig), secret: secret, now: now)
                == .failure(.badSignature))
        // Claims swapped for another user, keeping the old signature.
        parts[1] = Crypto.base64URLEncode(Array(#"{"iss":"app1","sub":"admin","iat":1,"exp":9999999999,"gen":3}"#.utf8))
        #expect(UserToken.verify(parts.joined(separator: "."), secret: secret, now: now) == .failure(.badSignature))
        // Last signature character changed so the trailing bits are non-zero: still the JWT form, bad signature.
        let last = token.last == "B" ? "C" : "B"
        let badBits = String(token.dropLast()) + last
        #expect(UserToken.looksLikeJWT(badBits))
        #expect(UserToken.verify(badBits, secret: secret, now: now) == .failure(.badSignature))
        // Truncated signature.
        #expect(UserToken.verify(String(token.dropLast(2)), secret: secret, now: now) == .failure(.badSignature))
    }

    @Test func expiredButBadSignatureIsBadSignature() {
        // Verification order: signature before expiry.
        let token = mint(exp: now - 1)
        #expect(UserToken.verify(token, secret: Crypto.randomBytes(32), now: now) == .failure(.badSignature))
    }

    @Test func otherAlgorithmsAreRejected() {
        let claims = #"{"iss":"app1","sub":"u1","iat":1,"exp":9999999999,"gen":0}"#
        let none = forge(header: #"{"alg":"none","typ":"JWT"}"#, claims: claims, key: nil)
        #expect(UserToken.looksLikeJWT(none))
        #expect(UserToken.verify(none, secret: secret, now: now) == .failure(.badAlgorithm))
        let hs512 = forge(header: #"{"alg":"HS512","typ":"JWT"}"#, claims: claims, key: secret)
        #expect(UserToken.verify(hs512, secret: secret, now: now) == .failure(.badAlgorithm))
        let noAlg = forge(header: #"{"typ":"JWT"}"#, claims: claims, key: secret)
        #expect(UserToken.verify(noAlg, secret: secret, now: now) == .failure(.badAlgorithm))
        // Same header bytes as ours but signed correctly → accepted (no dependence on header formatting).
        let spaced = forge(header: #"{ "alg" : "HS256" }"#, claims: claims, key: secret)
        #expect((try? UserToken.verify(spaced, secret: secret, now: now).get())?.userID == "u1")
    }

    @Test func missingOrMistypedClaimsAreMalformed() {
        for claims in [
            #"{"iss":"app1","sub":"u1","iat":1,"exp":9999999999}"#,
            #"{"iss":"app1","sub":"u1","iat":1,"exp":"9999999999","gen":0}"#,
            #"{"iss":"app1","sub":"u1","iat":1,"exp":9999999999.5,"gen":0}"#,
            #"{"iss":1,"sub":"u1","iat":1,"exp":9999999999,"gen":0}"#,
        ] {
            let token = forge(header: #"{"alg":"HS256"}"#, claims: claims, key: secret)
            #expect(UserToken.verify(token, secret: secret, now: now) == .failure(.malformed), "\(claims)")
        }
    }

    @Test func rfc7515ExampleSignatureVerifies() throws {
        // RFC 7515 appendix A.1: HS256 with a JWK key; its claims are not ours, so verification gets past the
        // algorithm and signature checks and stops at the claims.
        let key = try #require(
            Crypto.base64URLDecode(
                "AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-1qS0gZH75aKtMN3Yj0iPS4hcgUuTwjAzZr1Z9CAow"))
        let token =
            "eyJ0eXAiOiJKV1QiLA0KICJhbGciOiJIUzI1NiJ9"
            + ".eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ"
            + ".dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
        #expect(UserToken.verify(token, secret: key, now: 0) == .failure(.malformed))
        #expect(UserToken.verify(token, secret: secret, now: 0) == .failure(.badSignature))
        #expect(UserToken.decodeUnverified(token)?.claims["iss"] == "joe")
    }

    @Test func recognisingTheJWTForm() {
        #expect(UserToken.looksLikeJWT(mint()))
        #expect(!UserToken.looksLikeJWT(""))
        #expect(!UserToken.looksLikeJWT("abc"))
        #expect(!UserToken.looksLikeJWT("a.b.c"))
        #expect(!UserToken.looksLikeJWT(mint() + ".x"))
        #expect(!UserToken.looksLikeJWT("pk.app1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"))
        // Segments that decode to JSON that is not an object.
        let arr = Crypto.base64URLEncode(Array("[1]".utf8))
        let obj = Crypto.base64URLEncode(Array("{}".utf8))
        #expect(UserToken.looksLikeJWT(obj + "." + obj + ".AAAA"))
        #expect(!UserToken.looksLikeJWT(arr + "." + obj + ".AAAA"))
        #expect(!UserToken.looksLikeJWT(obj + "." + arr + ".AAAA"))
        #expect(!UserToken.looksLikeJWT(obj + "." + obj + ".A*AA"))
        #expect(!UserToken.looksLikeJWT(obj + "=." + obj + ".AAAA"))
        #expect(UserToken.decodeUnverified("not a token") == nil)
        #expect(UserToken.verify("not a token", secret: secret, now: now) == .failure(.malformed))
    }
}
