import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

@Suite("Identifiers")
struct IdentifierKindTests {
    @Test func appIDs() {
        for ok in ["abc", "a1_", "0-x", "app_0123456789ab", String(repeating: "z", count: 32)] {
            #expect(IdentifierKind.appID.isValid(ok), "\(ok)")
        }
        for bad in ["", "ab", "_ab", "-ab", "Abc", "a.b", "a b", "ab#", "é12", String(repeating: "z", count: 33)] {
            #expect(!IdentifierKind.appID.isValid(bad), "\(bad)")
        }
        #expect(IdentifierKind.appID.problem("ab") == "must be 3 to 32 characters")
    }

    @Test func userAndRoomIDs() {
        let punctuation = "!#$%&()+-:;<=.>?@[]^_{}|~"
        for kind in [IdentifierKind.userID, .roomID, .opaque] {
            #expect(kind.isValid("u"))
            #expect(kind.isValid(punctuation))
            #expect(kind.isValid("#general"))
            #expect(kind.isValid(String(repeating: "a", count: 32)))
            #expect(!kind.isValid(String(repeating: "a", count: 33)))
            #expect(!kind.isValid(""))
            for bad in [" ", "\"", "'", "*", ",", "/", "\\", "`", "é", "\n", "\u{7F}"] {
                #expect(!kind.isValid("a" + bad + "b"), "\(kind) \(bad.debugDescription)")
            }
        }
        #expect(IdentifierKind.userID.problem("") == "must not be empty")
        #expect(IdentifierKind.userID.problem(String(repeating: "a", count: 33)) == "must be at most 32 bytes")
    }

    @Test func groupIDsMayNotStartWithHash() {
        #expect(IdentifierKind.groupID.isValid("g#1"))
        #expect(!IdentifierKind.groupID.isValid("#g1"))
        #expect(IdentifierKind.groupID.problem("#g1") == "must not start with '#'")
        #expect(IdentifierKind.userID.isValid("#g1"))
    }

    @Test func clientMessageAndDeviceIDs() {
        for kind in [IdentifierKind.clientMsgID, .deviceID] {
            #expect(kind.isValid("any thing/at all*é😀"))
            #expect(kind.isValid(String(repeating: "a", count: 64)))
            #expect(!kind.isValid(String(repeating: "a", count: 65)))
            // 16 × 4-byte emoji = 64 bytes; one more is 68.
            #expect(kind.isValid(String(repeating: "😀", count: 16)))
            #expect(!kind.isValid(String(repeating: "😀", count: 17)))
            #expect(!kind.isValid(""))
            #expect(!kind.isValid("a\tb"))
            #expect(!kind.isValid("a\u{0}"))
            #expect(!kind.isValid("a\u{7F}"))
            #expect(!kind.isValid("a\u{85}"))
            #expect(kind.isValid("a\u{A0}"))
        }
    }

    @Test func generatedIDs() {
        let g = IdentifierKind.generateGroupID()
        #expect(g.utf8.count == 20)
        #expect(g.utf8.allSatisfy { IdentifierKind.base62.contains($0) })
        #expect(IdentifierKind.groupID.isValid(g))
        #expect(IdentifierKind.generateRoomID() != IdentifierKind.generateRoomID())
        let a = IdentifierKind.generateAppID()
        #expect(a.hasPrefix("app_") && a.utf8.count == 16)
        #expect(IdentifierKind.appID.isValid(a))
        let custom = IdentifierKind.generateID(prefix: "wh_", length: 5)
        #expect(custom.hasPrefix("wh_") && custom.utf8.count == 8)
        #expect(IdentifierKind.generateID(length: 0) == "")
        let binary = IdentifierKind.generateID(length: 200, alphabet: Array("01".utf8))
        #expect(binary.utf8.count == 200 && binary.contains("0") && binary.contains("1"))
    }

    @Test func generatedCharactersAreRoughlyUniform() {
        var counts = [UInt8: Int]()
        for c in IdentifierKind.generateID(length: 62_000).utf8 { counts[c, default: 0] += 1 }
        #expect(counts.count == 62)
        // Expected 1000 each; a biased modulo would skew the first 8 characters by ~25%.
        #expect(counts.values.allSatisfy { (800...1200).contains($0) })
    }

    @Test func sortableIDs() {
        let t: Int64 = 1_764_500_000_000
        let a = IdentifierKind.generateSortableID(prefix: "m", timestampMs: t)
        let b = IdentifierKind.generateSortableID(prefix: "m", timestampMs: t + 1)
        let c = IdentifierKind.generateSortableID(prefix: "m", timestampMs: t + 86_400_000)
        #expect(a < b && b < c)
        #expect(a.utf8.count == 23 && a.utf8.count <= 32)
        #expect(IdentifierKind.opaque.isValid(a))
        #expect(IdentifierKind.generateSortableID(prefix: "m", timestampMs: t) != a)
        #expect(IdentifierKind.generateSortableID(prefix: "", timestampMs: 0).hasPrefix("00000000"))
    }
}
