import Foundation
import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains

/// Calls (API.md §13): every row of the state-machine table and every error code of the call routes, end to end
/// through HTTP (timers: CallTimerTests).
@Suite("Calls", .inProcess)
struct CallsTests: GroupTestSupport {
    /// Creates a call from `caller` to `invitees`; returns the response.
    static func create(_ app: TestApp, _ caller: String, _ invitees: [String], extra: String = "") throws -> TestResponse {
        try app.request(.post, "/v1/calls", json: "{\"caller\":\"\(caller)\",\"invitees\":\(array(invitees))\(extra)}")
    }

    /// Creates a call and returns its id (the request must succeed).
    static func call(_ app: TestApp, _ caller: String, _ invitees: [String], extra: String = "") throws -> String {
        let r = try create(app, caller, invitees, extra: extra)
        #expect(r.status == 200, "\(r.text)")
        return r.json?["call"]?["call_id"]?.stringValue ?? ""
    }

    static func act(_ app: TestApp, _ callID: String, _ action: String, _ json: String) throws -> TestResponse {
        try app.request(.post, "/v1/calls/\(callID)/\(action)", json: json)
    }

    static func get(_ app: TestApp, _ callID: String) throws -> JSONValue? { try app.request(.get, "/v1/calls/\(callID)").json }

    /// Each user's state in the call, in the call's order.
    static func states(_ call: JSONValue?) -> [String] {
        (call?["users"]?.arrayValue ?? []).map { "\($0["user_id"]?.stringValue ?? ""):\($0["state"]?.stringValue ?? "")" }
    }

    static func callEvents(_ app: TestApp, _ callID: String, types: String = "call.*") throws -> [JSONValue] {
        try app.events(query: "types=\(types)").filter {
            $0["data"]?["call_id"]?.stringValue == callID || $0["data"]?["call"]?["call_id"]?.stringValue == callID
        }
    }

    @Test func generalCallAcceptedThenResolved() throws {
        let server = try TestServer.start()
        defer { server.stop() }
        let app = try server.createApp()
        for id in ["a", "b", "c"] { try app.createUser(id) }
        let r = try Self.create(app, "a", ["b", "c"], extra: #","extended_data":"room 7","timeout_s":30"#)
        #expect(r.status == 200, "\(r.text)")
        let call = r.json?["call"]
        let callID = call?["call_id"]?.stringValue ?? ""
        #expect(call?["mode"] == .string("general"))
        #expect(call?["state"] == .string("started"))
        #expect(call?["end_reason"] == .null)
        #expect(call?["timeout_s"] == .int(30))
        #expect(call?["extended_data"] == .string("room 7"))
        #expect(Self.states(call) == ["a:accepted", "b:inviting", "c:inviting"])
        let caller = call?["users"]?[0]
        #expect(caller?["accepted_at"] == call?["created_at"])
        #expect(call?["users"]?[1]?["inviter_id"] == .string("a"))
        #expect(Self.results(r).map { $0["ok"] } == [.bool(true), .bool(true)])
        #expect(Self.results(r).first?["data"]?["state"] == .string("inviting"))

        let accepted = try Self.act(app, callID, "accept", #"{"user_id":"b","extended_data":"hi"}"#)
        #expect(accepted.status == 200, "\(accepted.text)")
        #expect(Self.states(accepted.json) == ["a:accepted", "b:accepted", "c:inviting"])
        #expect(accepted.json?["users"]?[1]?["extended_data"] == .string("hi"))
        #expect(accepted.json?["state"] == .string("started"))
        let rejected = try Self.act(app, callID, "reject", #"{"user_id":"c"}"#)
        #expect(Self.states(rejected.json) == ["a:accepted", "b:accepted", "c:rejected"])
        #expect(rejected.json?["state"] == .string("ended"))
        #expect(rejected.json?["end_reason"] == .string("resolved"))
        #expect(rejected.json?["ended_at"] != .null)

        let events = try Self.callEvents(app, callID)
        #expect(
            events.compactMap { $0["type"]?.stringValue } == [
                "call.created", "call.invited", "call.user_state_changed", "call.user_state_changed", "call.ended",
            ])
        #expect(events[1]["data"]?["invitee_ids"] == .array([.string("b"), .string("c")]))
        #expect(events[2]["data"]?["operator_id"] == .string("b"))
        #expect(events[2]["data"]?["extended_data"] == .string("hi"))
        #expect(Self.states(events[3]["data"]) == ["c:rejected"])
        #expect(events[4]["data"]?["call"]?["end_reason"] == .string("resolved"))
        // Audiences: created → caller; invited → invitees; ended → everyone ever in the call.
        #expect(try app.events(query: "types=call.created&user_id=b").isEmpty)
        #expect(try app.events(query: "types=call.invited&user_id=a").isEmpty)
        #expect(try app.events(query: "types=call.ended&user_id=c").count == 1)
        // Answering an ended call.
        Self.expectProblem(try Self.act(app, callID, "accept", #"{"user_id":"c"}"#), 409, 6_000_270)
        #expect(try server.count("SELECT count(*) FROM call_users WHERE timeout_at IS NOT NULL", []) == 0)
    }

    @Test func advancedCallInviteJoinQuitEnd() throws {
        let server = try TestServer.start()
        defer { server.stop() }
        let app = try server.createApp()
        for id in ["a", "b", "c", "d"] { try app.createUser(id) }
        let callID = try Self.call(app, "a", ["b"], extra: #","mode":"advanced""#)
        #expect(try Self.act(app, callID, "accept", #"{"user_id":"b"}"#).status == 200)
        let more = try Self.act(app, callID, "invite", #"{"operator":"b","invitees":["c","a","zz"]}"#)
        #expect(more.status == 200, "\(more.text)")
        #expect(Self.codes(more) == [nil, 6_000_283, 6_000_281])
        #expect(Self.states(more.json?["call"]) == ["a:accepted", "b:accepted", "c:inviting"])
        #expect(more.json?["call"]?["users"]?[2]?["inviter_id"] == .string("b"))
        let joined = try Self.act(app, callID, "join", #"{"user_id":"d","extended_data":"late"}"#)
        #expect(Self.states(joined.json) == ["a:accepted", "b:accepted", "c:inviting", "d:accepted"])
        Self.expectProblem(try Self.act(app, callID, "join", #"{"user_id":"d"}"#), 409, 6_000_283)
        let quit = try Self.act(app, callID, "quit", #"{"user_id":"a"}"#)
        #expect(Self.states(quit.json) == ["a:quit", "b:accepted", "c:inviting", "d:accepted"])
        #expect(quit.json?["users"]?[0]?["quit_at"] != .null)
        Self.expectProblem(try Self.act(app, callID, "quit", #"{"user_id":"a"}"#), 409, 6_000_270)
        Self.expectProblem(try Self.act(app, callID, "end", #"{"operator":"a"}"#), 409, 6_000_270)
        let ended = try Self.act(app, callID, "end", #"{"operator":"d","extended_data":"bye"}"#)
        #expect(Self.states(ended.json) == ["a:quit", "b:ended", "c:cancelled", "d:ended"])
        #expect(ended.json?["end_reason"] == .string("ended"))
        let events = try Self.callEvents(app, callID)
        #expect(events.suffix(2).compactMap { $0["type"]?.stringValue } == ["call.user_state_changed", "call.ended"])
        #expect(events.last?["data"]?["operator_id"] == .string("d"))
        #expect(events.last?["data"]?["extended_data"] == .string("bye"))
        // Every later operation on an ended call is 409.
        Self.expectProblem(try Self.act(app, callID, "invite", #"{"operator":"d","invitees":["a"]}"#), 409, 6_000_270)
        Self.expectProblem(try Self.act(app, callID, "join", #"{"user_id":"a"}"#), 409, 6_000_270)
    }
}
