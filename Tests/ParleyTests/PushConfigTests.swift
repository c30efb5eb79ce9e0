import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

@Suite("PushConfig: offline push options")
struct PushConfigTests {
    private func read(_ json: String) throws -> (JSONValue?, [String]) {
        var reader = BodyReader(try #require(try JSONValue.parse(json).objectValue))
        let config = PushConfig.read(from: &reader)
        return (config, reader.errors.map(\.field))
    }

    @Test func absentAndNullMeanNoConfig() throws {
        #expect(try read("{}").0 == nil)
        let (config, errors) = try read(#"{"push": null}"#)
        #expect(config == nil && errors.isEmpty)
    }

    @Test func defaultsAreFilledAndUnknownKeysDropped() throws {
        let (config, errors) = try read(#"{"push": {"title": "Hi", "extra": 1}}"#)
        #expect(errors.isEmpty)
        let push = try #require(config?.objectValue)
        #expect(push["enable"] == .bool(true))
        #expect(push["title"] == .string("Hi"))
        #expect(push["content"] == .null)
        #expect(push["enable_badge"] == .bool(false))
        #expect(push["badge_increment"] == .int(1))
        #expect(push["voip"] == .null)
        #expect(push["extra"] == nil)
    }

    @Test func limitsAtTheBoundary() throws {
        let ok =
            #"{"push": {"title": "\#(String(repeating: "t", count: 256))", "resources_id": "\#(String(repeating: "é", count: 32))", "badge_increment": 99}}"#
        #expect(try read(ok).1.isEmpty)
        let bad =
            #"{"push": {"title": "\#(String(repeating: "t", count: 257))", "resources_id": "\#(String(repeating: "r", count: 33))", "badge_increment": 100, "sound": "\#(String(repeating: "s", count: 65))"}}"#
        #expect(try read(bad).1 == ["body.push.title", "body.push.resources_id", "body.push.badge_increment", "body.push.sound"])
    }

    @Test func voipAndTemplate() throws {
        let (config, errors) = try read(
            #"{"push": {"voip": {"handle_value": "+1555"}, "private_message_template": {"template_id": "t1", "title_parameters": "{\"a\":1}"}}}"#)
        #expect(errors.isEmpty)
        let push = try #require(config?.objectValue)
        #expect(push["voip"]?["handle_type"] == .string("generic"))
        #expect(push["voip"]?["has_video"] == .bool(false))
        #expect(push["private_message_template"]?["title_parameters"] == .string(#"{"a":1}"#))
        let bad = try read(
            #"{"push": {"voip": {"handle_type": "fax"}, "private_message_template": {"content_parameters": "[1]"}}}"#)
        #expect(bad.1 == ["body.push.voip.handle_type", "body.push.private_message_template.content_parameters"])
        #expect(try read(#"{"push": "yes"}"#).1 == ["body.push"])
    }
}
