import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

@Suite("JSON writer")
struct JSONWriterTests {
    private func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

    @Test func stringEscaping() {
        var w = JSONWriter()
        w.writeString("a\"b\\c/d\n\r\t\u{08}\u{0C}\u{0}\u{1F}\u{7F}é中😀")
        #expect(text(w.bytes) == #""a\"b\\c/d\n\r\t\b\f\u0000\u001f"# + "\u{7F}é中😀\"")
    }

    @Test func everyControlCharacterRoundTrips() throws {
        let all = String(decoding: (0..<0x20).map { UInt8($0) }, as: UTF8.self)
        var w = JSONWriter()
        w.writeString(all)
        #expect(!w.bytes.contains { $0 < 0x20 })
        #expect(try JSONValue.parse(w.bytes) == .string(all))
    }

    @Test func staticKeysAndMembersPlaceCommasLikeTheOthers() {
        var w = JSONWriter()
        w.object { w in
            w.key(static: "a")
            w.writeInt(1)
            w.staticMembers(#""b":null,"c":[]"#)
            w.key("d")
            w.object { w in
                w.staticMembers(#""e":0"#)
                w.key(static: "f")
                w.writeBool(true)
            }
        }
        #expect(text(w.bytes) == #"{"a":1,"b":null,"c":[],"d":{"e":0,"f":true}}"#)
    }

    @Test func copiesAreIndependentAndGrowthKeepsBytes() {
        var a = JSONWriter(capacity: 1)
        a.beginArray()
        a.writeString(String(repeating: "x", count: 100))
        var b = a  // shares the storage until one of them writes
        a.writeInt(1)
        b.writeInt(2)
        a.endArray()
        b.endArray()
        let long = "\"" + String(repeating: "x", count: 100) + "\""
        #expect(text(a.bytes) == "[\(long),1]")
        #expect(text(b.bytes) == "[\(long),2]")
        #expect(a.count == a.bytes.count)
    }

    @Test func integers() {
        var w = JSONWriter()
        w.array { w in
            w.writeInt(0)
            w.writeInt(-1)
            w.writeInt(Int64.max)
            w.writeInt(Int64.min)
            w.writeInt(UInt64.max)
            w.writeInt(Int32(7))
        }
        #expect(text(w.bytes) == "[0,-1,9223372036854775807,-9223372036854775808,18446744073709551615,7]")
    }

    @Test func doubles() throws {
        var w = JSONWriter()
        w.array { w in
            for d in [
                1.5, -0.25, 3.0, 0.1, 1e21, 1e-7, Double.leastNonzeroMagnitude, Double.nan, .infinity,
                1.7976931348623157e308,
            ] {
                w.writeDouble(d)
            }
        }
        #expect(text(w.bytes) == "[1.5,-0.25,3.0,0.1,1e+21,1e-07,5e-324,null,null,1.7976931348623157e+308]")
        // Integral doubles stay doubles after a round trip.
        #expect(try JSONValue.parse(JSONValue.double(3).serialized()) == .double(3))
    }

    @Test func containersAndCommas() {
        var w = JSONWriter()
        w.object { w in
            w.key("a")
            w.writeInt(1)
            w.key("b")
            w.array { w in
                w.writeBool(true)
                w.writeNull()
                w.object { _ in }
                w.array { _ in }
                w.writeString("x")
            }
            w.key("c")
            w.beginObject()
            w.key("d")
            w.writeBool(false)
            w.endObject()
            w.key("e")
            w.writeRaw(Array(#"{"pre":"rendered"}"#.utf8))
        }
        #expect(text(w.bytes) == #"{"a":1,"b":[true,null,{},[],"x"],"c":{"d":false},"e":{"pre":"rendered"}}"#)
    }

    @Test func roundTrips() throws {
        let docs = [
            #"{"user_id":"u1","n":-3,"f":2.5,"ok":true,"none":null,"list":[1,[2,[3]],{"k":"v"}],"empty":{}}"#,
            #"["\u0000\u001f\"\\","é😀",9223372036854775807,-9223372036854775808,1e+300]"#,
            #""just a string""#,
            "[]",
        ]
        for doc in docs {
            let v = try JSONValue.parse(Array(doc.utf8))
            let again = try JSONValue.parse(v.serialized())
            #expect(again == v)
            #expect(again.serialized() == v.serialized())
        }
        // Member order survives a round trip.
        let v = try JSONValue.parse(#"{"z":1,"a":2,"m":3}"#)
        #expect(text(v.serialized()) == #"{"z":1,"a":2,"m":3}"#)
    }

    @Test func objectWriter() {
        var inner = JSONObjectWriter()
        inner["k"] = "v"
        var o = JSONObjectWriter()
        o["user_id"] = "u1"
        o["count"] = 3
        o["big"] = Int64.max
        o["ratio"] = 0.5
        o["on"] = true
        o["x"] = nil
        let absent: String? = nil
        o["maybe"] = absent
        o["tags"] = ["a", "b"]
        o["nested"] = inner
        o["value"] = JSONValue.array([1, "two"])
        o.raw("user", Array(#"{"user_id":"u2"}"#.utf8))
        o.setIfPresent("skipped", nil)
        o.setIfPresent("kept", "yes")
        o.write("custom") { w in w.array { w in w.writeInt(9) } }
        #expect(
            text(o.finish())
                == #"{"user_id":"u1","count":3,"big":9223372036854775807,"ratio":0.5,"on":true,"x":null,"maybe":null,"#
                + #""tags":["a","b"],"nested":{"k":"v"},"value":[1,"two"],"user":{"user_id":"u2"},"kept":"yes","#
                + #""custom":[9]}"#)
        #expect(text(JSONObjectWriter().finish()) == "{}")
    }

    @Test func descriptionIsCompactJSON() {
        let v: JSONValue = ["a": [1, 2.5, "s", nil, false]]
        #expect(v.description == #"{"a":[1,2.5,"s",null,false]}"#)
    }
}
