import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

@Suite("App keys")
struct AppKeyTests {
    @Test func generateAndParse() throws {
        let key = AppKey.generate(appID: "my-app_1")
        #expect(key.hasPrefix("pk.my-app_1."))
        #expect(key.utf8.count == "pk.my-app_1.".utf8.count + 43)
        let (appID, secret) = try #require(AppKey.parse(key))
        #expect(appID == "my-app_1")
        #expect(secret.utf8.count == 43)
        #expect(Crypto.base64URLDecode(secret)?.count == 32)
        #expect(AppKey.looksLikeAppKey(key))
        #expect(AppKey.generate(appID: "my-app_1") != key)
    }

    @Test func hashIsSHA256HexOfTheWholeKey() {
        let key = "pk.app1." + String(repeating: "A", count: 43)
        #expect(AppKey.hash(key) == Crypto.hex(Crypto.sha256(Array(key.utf8))))
        #expect(AppKey.hash(key).utf8.count == 64)
    }

    @Test func rejectsOtherForms() {
        let secret = Crypto.base64URLEncode(Crypto.randomBytes(32))
        #expect(AppKey.parse("pk.app1." + secret) != nil)
        #expect(AppKey.parse("pk.abc." + secret) != nil)
        #expect(AppKey.parse("pk." + String(repeating: "a", count: 32) + "." + secret) != nil)
        for bad in [
            "", "pk..", "pk.app1", "pk.app1.", "sk.app1." + secret, "PK.app1." + secret,
            "pk.ab." + secret,  // app id too short
            "pk." + String(repeating: "a", count: 33) + "." + secret,  // too long
            "pk.App1." + secret,  // uppercase app id
            "pk._app." + secret,  // bad first character
            "pk.app1." + secret.dropLast(),  // 42 chars
            "pk.app1." + secret + "A",  // 44 chars
            "pk.app1." + secret.dropLast() + "=",  // padding
            "pk.app1." + secret.dropLast() + "+",  // standard alphabet
            "pk.app.1." + secret,  // dot in the app id
            "pk.app1." + String(repeating: "A", count: 42) + "B",  // non-zero trailing bits: not 32 bytes exactly
        ] {
            #expect(AppKey.parse(bad) == nil, "\(bad)")
            #expect(!AppKey.looksLikeAppKey(bad))
        }
    }
}
