import Testing

@testable import ParleyCore
@testable import ParleyDomains

@Suite("JSON members read in place")
struct JSONMembersTests {
    /// `body(members)` with the members of `json`.
    private func read<T>(_ json: String, _ body: (JSONMembers) -> T) -> T {
        Array(json.utf8).withUnsafeBufferPointer { body(JSONMembers($0)) }
    }

    @Test func membersAreFoundPastNestedValuesAndEscapedStrings() {
        let json = #" { "a" : {"x":[1,{"y":"}"}]}, "s":"q\"uo}te]", "n": -42 ,"t":true,"f":false,"z":null,"e":"" } "#
        read(json) { o in
            #expect(o.member("n")?.int == -42)
            #expect(o.member("t")?.bool == true)
            #expect(o.member("f")?.bool == false)
            #expect(o.member("z")?.isNull == true)
            #expect(o.member("e")?.isString("") == true)
            #expect(o.member("s")?.isString == true)
            #expect(o.member("a")?.member("x") != nil)
            #expect(o.member("a")?.member("y") == nil, "only the object's own members")
            #expect(o.member("missing") == nil)
            #expect(o.member("n")?.bool == nil)
            #expect(o.member("s")?.int == nil)
        }
    }

    @Test func malformedInputGivesNilNeverACrash() {
        for json in ["", "[", "{", #"{"a""#, #"{"a":"#, #"{"a":"x"#, #"{"a":[1,2"#, "[1,2]", "\"x\"", #"{"a":99999999999999999999}"#] {
            read(json) { o in
                #expect(o.member("a")?.int == nil, "\(json)")
                #expect(o.member("b") == nil, "\(json)")
            }
        }
        // Members before a fault are read; nothing past it is.
        read(#"{"a":1 "b":2}"#) { o in
            #expect(o.member("a")?.int == 1)
            #expect(o.member("b") == nil)
        }
    }

    /// The push bridge tells pushable message events apart in place; the rule read from the parsed message agrees.
    @Test func thePushabilityOfAMessageEventReadsTheSameInPlaceAndParsed() {
        func event(_ change: (inout Message) -> Void) -> [UInt8] {
            var message = Message(
                messageID: "m1", clientMsgID: nil, type: 1, conversationType: .peer, from: "a", to: "b", seq: 3, timestamp: 5,
                body: Array(#"{"text":"hi \"}\" there"}"#.utf8), extendedData: "{\"push\":{\"enable\":false}}", mentionIDs: [],
                mentionAll: false, reply: nil, rootMessageID: nil, replyCount: 0, priority: 2, needReceipt: false, noUnread: false,
                onlineOnly: false, repeatCount: 1, push: nil, suppressed: nil, deleted: false)
            change(&message)
            return Array("{\"message\":".utf8) + message.json(.app) + Array("}".utf8)
        }
        let cases: [(String, [UInt8], Bool)] = [
            ("peer text", event { _ in }, true),
            ("group text", event { $0.conversationType = .group }, true),
            ("room text", event { $0.conversationType = .room }, false),
            ("unstored", event { $0.seq = nil }, false),
            ("command", event { $0.type = 2 }, false),
            ("custom", event { $0.type = 200 }, true),
            ("suppressed", event { $0.suppressed = "blacklist" }, false),
            ("deleted", event { $0.deleted = true }, false),
            ("push off", event { $0.push = Array(#"{"enable":false,"title":"x"}"#.utf8) }, false),
            ("push on", event { $0.push = Array(#"{"title":"}","enable":true}"#.utf8) }, true),
        ]
        for (name, data, pushable) in cases {
            #expect(PushSources.isPushable(sentEvent: data) == pushable, "\(name)")
            #expect((PushSources.messageItem(sentEvent: data) != nil) == pushable, "\(name)")
        }
    }
}
