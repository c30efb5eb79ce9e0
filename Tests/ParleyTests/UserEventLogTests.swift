import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// The user view made from the app view (``EventUserView``) without a server: for every viewer it is byte for byte the
/// Message JSON a token of that user gets from the REST reads (`Message.json(.user(_:))`).
@Suite("User view of event data")
struct EventUserViewTests {
    static func message(suppressed: String? = nil, revoked: Bool = false) -> Message {
        var m = Message.tombstone(
            messageID: "m1", clientMsgID: "c\"1", conversationType: .peer, from: "u1", to: "u2", seq: 7, timestamp: 1_700)
        m.deleted = false
        m.type = revoked ? 31 : 1
        m.body = Array((revoked ? #"{"revoke_type":0,"revoke_status":1,"original_type":1}"# : #"{"text":"hi ✓"}"#).utf8)
        m.originalText = revoked ? "hi ✓" : nil
        m.push = Array(#"{"enable":true,"title":"t"}"#.utf8)
        m.suppressed = suppressed
        return m
    }

    @Test(arguments: [(nil, false), ("blacklist", false), (nil, true)])
    func theUserViewOfAMessageIsWhatItsTokenReads(suppressed: String?, revoked: Bool) throws {
        let m = Self.message(suppressed: suppressed, revoked: revoked)
        for user in ["u1", "u2"] {
            #expect(try EventUserView.message(m.json(.app), for: user) == m.json(.user(user)), "\(user)")
        }
        var data = JSONObjectWriter()
        data.raw("message", m.json(.app))
        let view = try EventUserView(type: "message.revoked", appData: data.finish())
        #expect(view.sender == "u1")
        for user in ["u1", "u2"] {
            let rendered = try #require(view.data(for: user))
            #expect(try JSONValue.parse(rendered)["message"] == (try JSONValue.parse(m.json(.user(user)))))
        }
    }

    @Test func typesWithoutViewerDependentFieldsKeepTheAppViewBytes() throws {
        #expect(!EventUserView.differs("message.reactions_updated"))
        #expect(!EventUserView.differs("group.member_joined"))
        let view = try EventUserView(type: "friend.added", appData: Array(#"{"user_id":"a"}"#.utf8))
        #expect(view.data(for: "a") == nil)
        #expect(view.sender == nil)
    }
}
