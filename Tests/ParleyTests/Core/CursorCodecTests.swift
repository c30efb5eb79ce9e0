import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

@Suite("Cursors")
struct CursorCodecTests {
    let codec = CursorCodec(secret: Crypto.randomBytes(32))

    @Test func roundTrip() throws {
        let values: [JSONValue] = [.int(1_764_500_000_000), .string("u#1é"), .null, .double(2.5), .bool(true)]
        let cursor = codec.encode(list: "users|state=all", values: values)
        #expect(try codec.decode(cursor, list: "users|state=all") == values)
        // URL-safe without escaping.
        #expect(cursor.utf8.allSatisfy { IdentifierKind.base62.contains($0) || $0 == 0x2D || $0 == 0x5F || $0 == 0x2E })
        #expect(try codec.decode(codec.encode(list: "l", values: []), list: "l") == [])
    }

    @Test func anotherListIsRejected() {
        let cursor = codec.encode(list: "users|state=all", values: [1])
        #expect(throws: CursorCodec.Failure.wrongList) { try codec.decode(cursor, list: "users|state=deleted") }
        #expect(throws: CursorCodec.Failure.wrongList) { try codec.decode(cursor, list: "groups") }
    }

    @Test func tamperingIsDetected() throws {
        let cursor = codec.encode(list: "users", values: [.int(5), .string("u5")])
        let parts = cursor.split(separator: ".").map(String.init)
        // Payload re-encoded with another position, old MAC.
        let forged = Crypto.base64URLEncode(Array(#"{"l":"users","v":[0,"u0"]}"#.utf8)) + "." + parts[1]
        #expect(throws: CursorCodec.Failure.badSignature) { try codec.decode(forged, list: "users") }
        // Another secret.
        let other = CursorCodec(secret: Crypto.randomBytes(32))
        #expect(throws: CursorCodec.Failure.badSignature) { try other.decode(cursor, list: "users") }
        // Flipped MAC character.
        var mac = Array(parts[1])
        mac[0] = mac[0] == "A" ? "B" : "A"
        #expect(throws: CursorCodec.Failure.badSignature) {
            try codec.decode(parts[0] + "." + String(mac), list: "users")
        }
    }

    @Test func malformedCursors() {
        for bad in ["", ".", "abc", "a.b.c", "!!!.AAAA", "eyJ9.", String(repeating: "A", count: 5000)] {
            #expect(throws: CursorCodec.Failure.self) { try codec.decode(bad, list: "users") }
        }
        #expect(CursorCodec.Failure.malformed.errorCode == .invalidCursor)
    }
}
