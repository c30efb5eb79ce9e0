import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

@Suite("JSON parser")
struct JSONParserTests {
    private func parse(_ text: String, maxDepth: Int = 64) throws(JSONParseError) -> JSONValue {
        try JSONValue.parse(Array(text.utf8), maxDepth: maxDepth)
    }

    private func parseError(_ bytes: [UInt8], maxDepth: Int = 64) -> JSONParseError? {
        do {
            _ = try JSONValue.parse(bytes, maxDepth: maxDepth)
            return nil
        } catch {
            return error
        }
    }

    private func parseError(_ text: String, maxDepth: Int = 64) -> JSONParseError? {
        parseError(Array(text.utf8), maxDepth: maxDepth)
    }

    @Test func scalars() throws {
        #expect(try parse("null") == .null)
        #expect(try parse("true") == .bool(true))
        #expect(try parse("false") == .bool(false))
        #expect(try parse(" \t\r\n 42 \n") == .int(42))
        #expect(try parse(#""hi""#) == .string("hi"))
        #expect(try parse("\"\"") == .string(""))
    }

    @Test func integersAndDoubles() throws {
        #expect(try parse("0") == .int(0))
        #expect(try parse("-0") == .int(0))
        #expect(try parse("-17") == .int(-17))
        #expect(try parse("9223372036854775807") == .int(Int64.max))
        #expect(try parse("-9223372036854775808") == .int(Int64.min))
        // One past the Int64 range becomes a double rather than failing or wrapping.
        #expect(try parse("9223372036854775808") == .double(0x1p63))
        #expect(try parse("-9223372036854775809") == .double(-0x1p63))
        #expect(try parse("123456789012345678901234567890") == .double(1.2345678901234568e29))
        // A fraction or exponent always makes a double, even when integral.
        #expect(try parse("1.0") == .double(1))
        #expect(try parse("1.5") == .double(1.5))
        #expect(try parse("1e3") == .double(1000))
        #expect(try parse("1E+3") == .double(1000))
        #expect(try parse("-2.5e-3") == .double(-0.0025))
        #expect(try parse("1e-400") == .double(0))
        #expect(try parse("0.1") == .double(0.1))
    }

    @Test func nonFiniteNumbersAreRejected() {
        #expect(parseError("1e400")?.message == "number out of range")
        #expect(parseError("-1e400")?.offset == 0)
        #expect(parseError("[1, 1e999]")?.offset == 4)
    }

    @Test(arguments: [
        "01", "-", "+1", ".5", "1.", "1.e5", "1e", "1e+", "-a", "00", "-01", "0x10", "NaN", "Infinity", "1_000",
    ])
    func invalidNumbers(_ text: String) {
        #expect(parseError(text) != nil, "\(text) must be rejected")
    }

    @Test func containers() throws {
        #expect(try parse("[]") == .array([]))
        #expect(try parse("{}") == .object(JSONObject()))
        #expect(try parse(#"[1, "a", [true, null], {"k": -1.5}]"#) == [1, "a", [true, nil], ["k": -1.5]])
        let v = try parse(#"{"b": 1, "a": {"c": [2]}, "z": null}"#)
        #expect(v.objectValue?.keys == ["b", "a", "z"])
        #expect(v["a"]?["c"]?[0] == .int(2))
        #expect(v["z"] == .null)
        #expect(v["missing"] == nil)
        #expect(v.objectValue?.contains("z") == true)
    }

    @Test func duplicateKeysLastWinsKeepingFirstPosition() throws {
        let v = try parse(#"{"a": 1, "b": 2, "a": 3}"#)
        #expect(v["a"] == .int(3))
        #expect(v.objectValue?.keys == ["a", "b"])
        #expect(v.objectValue?.count == 2)
    }

    @Test func largeObjectsUseTheIndexCorrectly() throws {
        var text = "{"
        for i in 0..<50 { text += (i > 0 ? "," : "") + "\"k\(i)\": \(i)" }
        text += ", \"k7\": \"dup\"}"
        let o = try #require(try parse(text).objectValue)
        #expect(o.count == 50)
        #expect(o["k49"] == .int(49))
        #expect(o["k7"] == .string("dup"))
        #expect(o.keys.first == "k0")
        var m = o
        m["k3"] = nil
        #expect(m.count == 49 && m["k3"] == nil && m["k4"] == .int(4) && m["k49"] == .int(49))
    }

    @Test func everyEscape() throws {
        #expect(try parse(#""\" \\ \/ \b \f \n \r \t""#) == .string("\" \\ / \u{08} \u{0C} \n \r \t"))
        #expect(try parse(#""\u0041\u00e9\u4e2D\u0000""#) == .string("Aé中\u{0}"))
        #expect(try parse(#""a\u0020b""#) == .string("a b"))
        // Text before and after escapes is kept.
        #expect(try parse(#""héllo\nwörld""#) == .string("héllo\nwörld"))
    }

    @Test func surrogatePairs() throws {
        #expect(try parse(#""\ud83d\ude00""#) == .string("😀"))
        #expect(try parse(#""x\uD834\uDD1Ey""#) == .string("x𝄞y"))
    }

    @Test(arguments: [
        #""\ud83d""#, #""\ud83dx""#, #""\ude00""#, #""\ud83d\u0041""#, #""\ud83d\n""#, #""\ude00\ud83d""#,
    ])
    func loneSurrogatesAreRejected(_ text: String) {
        #expect(parseError(text)?.message == "lone surrogate in \\u escape")
    }

    @Test func invalidEscapes() {
        #expect(parseError(#""\x""#)?.message == "invalid escape sequence")
        #expect(parseError(#""\u12""#) != nil)
        #expect(parseError(#""\u12G4""#)?.message == "invalid hex digit in \\u escape")
        #expect(parseError(#""\"#) != nil)
        #expect(parseError(#""abc"#)?.message == "unterminated string")
    }

    @Test func controlCharactersInStringsAreRejected() {
        for c: UInt8 in [0x00, 0x01, 0x0A, 0x09, 0x1F] {
            let e = parseError([0x22, 0x61, c, 0x22])
            #expect(e?.message == "unescaped control character in string")
            #expect(e?.offset == 2)
        }
        // DEL is not a JSON control character.
        #expect(throws: Never.self) { try JSONValue.parse([0x22, 0x7F, 0x22]) }
    }

    @Test func invalidUTF8IsRejected() {
        let cases: [[UInt8]] = [
            [0x22, 0xFF, 0x22],  // never valid
            [0x22, 0xC0, 0xAF, 0x22],  // overlong '/'
            [0x22, 0xE0, 0x80, 0xAF, 0x22],  // overlong 3-byte
            [0x22, 0xED, 0xA0, 0x80, 0x22],  // UTF-8 encoded surrogate
            [0x22, 0xF4, 0x90, 0x80, 0x80, 0x22],  // above U+10FFFF
            [0x22, 0xC3, 0x22],  // truncated sequence
            [0x22, 0x80, 0x22],  // stray continuation
            [0x22, 0x5C, 0x6E, 0xE2, 0x82, 0x22],  // truncated after an escape (slow path)
        ]
        for bytes in cases {
            #expect(parseError(bytes)?.message == "invalid UTF-8", "\(bytes)")
        }
        #expect(throws: Never.self) { try JSONValue.parse([0x22, 0xF0, 0x9F, 0x98, 0x80, 0x22]) }
        // Invalid UTF-8 outside strings is just an unexpected character.
        #expect(parseError([0xFF]) != nil)
    }

    @Test func trailingGarbageIsRejected() {
        #expect(parseError("{} x")?.message == "unexpected data after the JSON value")
        #expect(parseError("{} x")?.offset == 3)
        #expect(parseError("1 2") != nil)
        #expect(parseError("[1]]") != nil)
        #expect(parseError("nullx") != nil)
    }

    @Test(arguments: [
        "", " ", "[", "]", "{", "[1,]", "[,1]", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "{a:1}", "{'a':1}", "tru",
        "nul", "True", "[1 2]", "{\"a\":1 \"b\":2}", "{1:2}", "\u{FEFF}{}",
    ])
    func malformedDocuments(_ text: String) {
        #expect(parseError(text) != nil, "\(text.debugDescription) must be rejected")
    }

    @Test func errorOffsets() {
        #expect(parseError(#"{"a": [1, 2,, 3]}"#)?.offset == 12)
        #expect(parseError(#"{"a" 1}"#)?.message == "expected ':' after object key")
        #expect(parseError(#"{"a" 1}"#)?.offset == 5)
        #expect(parseError("[1, 2")?.message == "unexpected end of input in array")
        #expect(parseError("")?.offset == 0)
    }

    @Test func depthLimit() throws {
        let ok = String(repeating: "[", count: 64) + String(repeating: "]", count: 64)
        #expect(try parse(ok).arrayValue != nil)
        let deep = String(repeating: "[", count: 65) + String(repeating: "]", count: 65)
        #expect(parseError(deep)?.message == "nesting deeper than 64 levels")
        #expect(parseError(deep)?.offset == 64)
        let objects = String(repeating: #"{"a":"#, count: 4) + "1" + String(repeating: "}", count: 4)
        #expect(parseError(objects, maxDepth: 3) != nil)
        #expect(throws: Never.self) { try JSONValue.parse(Array(objects.utf8), maxDepth: 4) }
        // Siblings do not accumulate depth.
        let wide = "[" + Array(repeating: "[[]]", count: 100).joined(separator: ",") + "]"
        #expect(throws: Never.self) { try JSONValue.parse(Array(wide.utf8), maxDepth: 3) }
        // A pathological body fails fast instead of overflowing the stack.
        let huge = String(repeating: "[", count: 100_000)
        #expect(parseError(huge) != nil)
    }

    @Test func parsesFromRawBufferAndString() throws {
        let bytes = Array(#"{"x":[1]}"#.utf8)
        let v = try bytes.withUnsafeBytes { raw in try JSONValue.parse(raw) }
        #expect(v == ["x": [1]])
        #expect(try JSONValue.parse(#"{"x":[1]}"#) == v)
    }

    @Test func objectEqualityIgnoresOrder() throws {
        #expect(try parse(#"{"a":1,"b":2}"#) == parse(#"{"b":2,"a":1}"#))
        #expect(try parse(#"{"a":1,"b":2}"#) != parse(#"{"a":1,"b":3}"#))
        #expect(try parse(#"{"a":1}"#) != parse(#"{"a":1,"b":2}"#))
        #expect(JSONValue.int(1) != .double(1))
    }
}
