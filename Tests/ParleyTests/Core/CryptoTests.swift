import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

@Suite("Crypto")
struct CryptoTests {
    private func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }

    @Test func sha256KnownVectors() {
        #expect(
            Crypto.hex(Crypto.sha256([UInt8]())) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(Crypto.hex(Crypto.sha256("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(
            Crypto.hex(Crypto.sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))
                == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        // Non-contiguous collections go through the copy path and agree.
        #expect(Crypto.sha256(bytes("abc").lazy.map { $0 }) == Crypto.sha256("abc"))
    }

    @Test func hmacRFC4231() {
        // Test case 2.
        #expect(
            Crypto.hex(Crypto.hmacSHA256(key: bytes("Jefe"), message: bytes("what do ya want for nothing?")))
                == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        // Test case 1.
        #expect(
            Crypto.hex(Crypto.hmacSHA256(key: [UInt8](repeating: 0x0b, count: 20), message: bytes("Hi There")))
                == "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7")
        // Test case 6: a key longer than the block size.
        #expect(
            Crypto.hex(
                Crypto.hmacSHA256(
                    key: [UInt8](repeating: 0xaa, count: 131),
                    message: bytes("Test Using Larger Than Block-Size Key - Hash Key First")))
                == "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")
        // An empty key and message are allowed.
        #expect(
            Crypto.hex(Crypto.hmacSHA256(key: [UInt8](), message: [UInt8]()))
                == "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad")
    }

    @Test func constantTimeEquals() {
        #expect(Crypto.constantTimeEquals(bytes("abc"), bytes("abc")))
        #expect(!Crypto.constantTimeEquals(bytes("abc"), bytes("abd")))
        #expect(!Crypto.constantTimeEquals(bytes("abc"), bytes("abcd")))
        #expect(!Crypto.constantTimeEquals(bytes(""), bytes("a")))
        #expect(Crypto.constantTimeEquals([UInt8](), [UInt8]()))
        #expect(Crypto.constantTimeEquals(bytes("xabc").dropFirst(), bytes("abc")))
    }

    @Test func randomBytes() {
        let a = Crypto.randomBytes(32)
        let b = Crypto.randomBytes(32)
        #expect(a.count == 32 && b.count == 32 && a != b)
        #expect(Crypto.randomBytes(0).isEmpty)
    }

    @Test func hex() {
        #expect(Crypto.hex([0x00, 0x0f, 0xf0, 0xff]) == "000ff0ff")
        #expect(Crypto.fromHex("000fF0ff") == [0x00, 0x0f, 0xf0, 0xff])
        #expect(Crypto.fromHex("abc") == nil)
        #expect(Crypto.fromHex("zz") == nil)
        #expect(Crypto.fromHex("") == [])
    }

    @Test func base64RFC4648Vectors() {
        let vectors = [
            ("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ]
        for (plain, encoded) in vectors {
            #expect(Crypto.base64Encode(bytes(plain)) == encoded)
            #expect(Crypto.base64Decode(encoded) == bytes(plain))
            let url = encoded.replacing("=", with: "")
            #expect(Crypto.base64URLEncode(bytes(plain)) == url)
            #expect(Crypto.base64URLDecode(url) == bytes(plain))
        }
    }

    @Test func base64URLAlphabet() {
        #expect(Crypto.base64Encode([0xfb, 0xff, 0xbf]) == "+/+/")
        #expect(Crypto.base64URLEncode([0xfb, 0xff, 0xbf]) == "-_-_")
        #expect(Crypto.base64URLEncode([0xfb, 0xff]) == "-_8")
        #expect(Crypto.base64URLDecode("-_8") == [0xfb, 0xff])
        #expect(Crypto.base64URLDecode("+/8") == nil)
        #expect(Crypto.base64Decode("-_8=") == nil)
    }

    @Test func base64RejectsMalformedInput() {
        #expect(Crypto.base64URLDecode("Zg==") == nil)  // padding is not base64url
        #expect(Crypto.base64URLDecode("Z") == nil)  // 4n+1 length
        #expect(Crypto.base64URLDecode("Zh") == nil)  // non-zero trailing bits
        #expect(Crypto.base64URLDecode("Zm9v YmFy") == nil)
        #expect(Crypto.base64Decode("Zg=") == nil)
        #expect(Crypto.base64Decode("Zg") == nil)
        #expect(Crypto.base64Decode("Z===") == nil)
        #expect(Crypto.base64Decode("=Zg=") == nil)
    }

    @Test func base64RoundTripsAllLengths() {
        for n in 0..<70 {
            let b = Crypto.randomBytes(n)
            #expect(Crypto.base64URLDecode(Crypto.base64URLEncode(b)) == b)
            #expect(Crypto.base64Decode(Crypto.base64Encode(b)) == b)
        }
    }
}
