import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

@Suite("Body reader")
struct BodyReaderTests {
    private func reader(_ json: String, path: String = "body") throws -> BodyReader {
        try BodyReader.parse(Array(json.utf8), path: path)
    }

    private enum Platform: String, CaseIterable { case ios, android, web }
    private enum Priority: Int {
        case low = 1
        case medium = 2
        case high = 3
    }

    @Test func readsValidFields() throws {
        var r = try reader(
            #"{"name":"Ann","age":30,"ratio":1,"vip":true,"ids":["u1","u2"],"nums":[1,2],"platform":"web","#
                + #""priority":3,"meta":{"k":"v"},"unknown_field":{"ignored":true}}"#)
        #expect(r.string("name", required: true, maxBytes: 256) == "Ann")
        #expect(r.int("age", range: 0...150) == 30)
        #expect(r.double("ratio") == 1)
        #expect(r.bool("vip") == true)
        #expect(r.stringArray("ids", maxItems: 10, itemKind: .userID) == ["u1", "u2"])
        #expect(r.intArray("nums", range: 1...5) == [1, 2])
        #expect(r.enumeration("platform", Platform.self) == .web)
        #expect(r.intEnumeration("priority", Priority.self) == .high)
        #expect(r.rawObject("meta") == ["k": "v"])
        #expect(r.object("meta") { sub in sub.string("k") } == .some("v"))
        #expect(r.string("absent") == nil)
        #expect(r.errors.isEmpty)
        #expect(throws: Never.self) { try r.check() }
    }

    /// An integer is a whole number however it is written, as JSON Schema says.
    @Test func wholeNumbersAreIntegersHoweverWritten() throws {
        var r = try reader(#"{"a":3600.0,"b":3.6e3,"c":-2E0,"d":[1.0,2e0],"e":3600.5,"f":1e300,"p":3.0}"#)
        #expect(r.int("a") == 3600)
        #expect(r.int("b") == 3600)
        #expect(r.int("c") == -2)
        #expect(r.intArray("d") == [1, 2])
        #expect(r.intEnumeration("p", Priority.self) == .high)
        #expect(r.errors.isEmpty)
        #expect(r.int("e") == nil)
        #expect(r.int("f") == nil)
        #expect(r.errors.map(\.field) == ["body.e", "body.f"])
    }

    /// U+0000 (only a `\u0000` escape can carry it) is refused wherever it is, each place named; an escaped
    /// backslash before `u0000` is not one.
    @Test func nulIsRefusedAtAnyDepthNamingEachField() throws {
        let json = #"{"ok":"x","a":"\u0000","n":{"deep":[1,{"s":"x\u0000y"}]},"k":{"bad\u0000name":1},"unknown":["\u0000"]}"#
        do {
            _ = try reader(json)
            Issue.record("a body with NUL was accepted")
        } catch let error as APIError {
            #expect(error.code == .invalidParams)
            #expect(error.fieldErrors.map(\.field) == ["body.a", "body.n.deep[1].s", "body.k", "body.unknown[0]"])
        }
        #expect(throws: APIError.self) { try reader(#"{"\u0000":1}"#) }
        #expect(try reader(#"{"a":"\\u0000"}"#).object["a"] == .string(#"\u0000"#))
        #expect(try JSONValue.parseNotingNUL(Array(#"{"a":"\u0001"}"#.utf8)).containsNUL == false)
    }

    @Test func collectsEveryErrorWithPaths() throws {
        var r = try reader(
            #"{"count":1.5,"limit":"20","name":7,"text":"","ids":["ok","bad id",3],"flag":null,"#
                + #""users":[{"user_id":"u1","name":"A"},{"name":5},"x",{"user_id":"","name":"C"}],"#
                + #""push":{"badge_increment":100,"title":"t"},"platform":"symbian","priority":9}"#)
        _ = r.int("count")
        _ = r.int("limit", range: 1...100)
        _ = r.string("name")
        _ = r.string("text", required: true, minBytes: 1)
        _ = r.stringArray("ids", itemKind: .userID)
        _ = r.bool("flag")
        _ = r.string("missing", required: true)
        _ = r.objectArray("users", maxItems: 10) { sub, _ in
            (sub.id("user_id", .userID, required: true), sub.string("name", maxBytes: 256))
        }
        _ = r.object("push") { sub in sub.int("badge_increment", range: 0...99) }
        _ = r.enumeration("platform", Platform.self)
        _ = r.intEnumeration("priority", Priority.self)
        #expect(
            r.errors.map(\.field) == [
                "body.count", "body.limit", "body.name", "body.text", "body.ids[1]", "body.ids[2]", "body.flag",
                "body.missing", "body.users[1].user_id", "body.users[1].name", "body.users[2]",
                "body.users[3].user_id", "body.push.badge_increment", "body.platform", "body.priority",
            ])
        #expect(r.errors[0].message == "expected integer, got number")
        #expect(r.errors[1].message == "expected integer, got string")
        #expect(r.errors[3].message == "must not be empty")
        #expect(r.errors[6].message == "expected boolean, got null")
        #expect(r.errors[7].message == "is required")
        #expect(r.errors[12].message == "must be between 0 and 99")
        #expect(r.errors[13].message == "must be one of ios, android, web")
        do {
            try r.check()
            Issue.record("check() must throw")
        } catch {
            #expect(error.code == .invalidParams)
            #expect(error.fieldErrors.count == 15)
        }
    }

    @Test func arrayItemCountsAndLengths() throws {
        var r = try reader(#"{"a":["x","y","z"],"b":[],"c":["toolong"],"d":"notarray","e":[1,2,300]}"#)
        #expect(r.stringArray("a", maxItems: 2) == nil)
        #expect(r.stringArray("b", minItems: 1) == nil)
        #expect(r.stringArray("c", maxItemBytes: 3) == nil)
        #expect(r.stringArray("d") == nil)
        #expect(r.intArray("e", range: 0...255) == nil)
        #expect(
            r.errors == [
                FieldError(field: "body.a", message: "must have at most 2 items"),
                FieldError(field: "body.b", message: "must not be empty"),
                FieldError(field: "body.c[0]", message: "must be at most 3 bytes"),
                FieldError(field: "body.d", message: "expected array, got string"),
                FieldError(field: "body.e[2]", message: "must be between 0 and 255"),
            ])
    }

    @Test func byteLengthsCountUTF8() throws {
        var r = try reader(#"{"s":"éé"}"#)  // 4 bytes, 2 characters
        #expect(r.string("s", maxBytes: 4) == "éé")
        #expect(r.string("s", maxBytes: 3) == nil)
        #expect(r.errors.map(\.message) == ["must be at most 3 bytes"])
    }

    @Test func nullableAndPresence() throws {
        var r = try reader(#"{"voip":null,"x":1}"#)
        #expect(r.contains("voip") && r.isNull("voip") && !r.isNull("x") && !r.contains("y"))
        #expect(r.value("voip") == .null)
        #expect(r.value("y") == nil)
        _ = r.value("z", required: true)
        #expect(r.errors.map(\.field) == ["body.z"])
    }

    @Test func emptyBodyIsAnEmptyObject() throws {
        #expect(try BodyReader.parse([]).object.isEmpty)
        #expect(try BodyReader.parse(Array(" \r\n".utf8)).object.isEmpty)
    }

    @Test func nonObjectOrMalformedBodies() {
        for body in ["[1]", "\"s\"", "{\"a\":", "nul"] {
            do {
                _ = try BodyReader.parse(Array(body.utf8))
                Issue.record("\(body) must be rejected")
            } catch {
                #expect(error.code == .invalidParams)
                #expect(error.fieldErrors.map(\.field) == ["body"])
            }
        }
    }

    @Test func barePathsAndCustomErrors() throws {
        var r = try reader(##"{"user_ids":["a","#bad"]}"##, path: "")
        _ = r.stringArray("user_ids", itemKind: .groupID)
        r.addError("other", "custom")
        r.addError(nil, "whole body")
        r.addError(path: "header Idempotency-Key", "too long")
        #expect(r.errors.map(\.field) == ["user_ids[1]", "other", "body", "header Idempotency-Key"])
        #expect(r.fieldPath("x") == "x")
    }

    @Test func nestedResultsAreNilWhenInvalid() throws {
        var r = try reader(#"{"o":{"a":"x"},"list":[{"a":1},{"a":"ok"}]}"#)
        let o: Int64?? = r.object("o") { sub in sub.int("a") }
        #expect(o == nil)
        let list = r.objectArray("list") { sub, i in (i, sub.string("a")) }
        #expect(list == nil)
        #expect(r.errors.map(\.field) == ["body.o.a", "body.list[0].a"])
    }
}
