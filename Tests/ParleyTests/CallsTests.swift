import Foundation
import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains

/// Calls (docs/calls.md): every row of the state-machine table and every error code of the call routes, end to end
/// through HTTP (timers: CallTimerTests).
@Suite("Calls", .inProcess)
struct CallsTests: GroupTestSupport {

    static func callEvents(_ app: TestApp, _ callID: String, types: String = "call.*") throws -> [JSONValue] {
        try app.events(query: "types=\(types)").filter {
            $0["data"]?["call_id"]?.stringValue == callID || $0["data"]?["call"]?["call_id"]?.stringValue == callID
        }
    }

    @Test func generalCallAcceptedThenResolved() throws {
        try withApp { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }
            let r = try Calls.create(app, "a", ["b", "c"], extra: #","extended_data":"room 7","timeout_s":30"#)
            #expect(r.status == 200, "\(r.text)")
            let call = r.json?["call"]
            let callID = call?["call_id"]?.stringValue ?? ""
            #expect(call?["mode"] == .string("general"))
            #expect(call?["state"] == .string("started"))
            #expect(call?["end_reason"] == .null)
            #expect(call?["timeout_s"] == .int(30))
            #expect(call?["extended_data"] == .string("room 7"))
            #expect(Calls.states(call) == ["a:accepted", "b:inviting", "c:inviting"])
            let caller = call?["users"]?[0]
            #expect(caller?["accepted_at"] == call?["created_at"])
            #expect(call?["users"]?[1]?["inviter_id"] == .string("a"))
            #expect(Self.results(r).map { $0["ok"] } == [.bool(true), .bool(true)])
            #expect(Self.results(r).first?["data"]?["state"] == .string("inviting"))

            let accepted = try Calls.act(app, callID, "accept", #"{"user_id":"b","extended_data":"hi"}"#)
            #expect(accepted.status == 200, "\(accepted.text)")
            #expect(Calls.states(accepted.json) == ["a:accepted", "b:accepted", "c:inviting"])
            #expect(accepted.json?["users"]?[1]?["extended_data"] == .string("hi"))
            #expect(accepted.json?["state"] == .string("started"))
            let rejected = try Calls.act(app, callID, "reject", #"{"user_id":"c"}"#)
            #expect(Calls.states(rejected.json) == ["a:accepted", "b:accepted", "c:rejected"])
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
            #expect(Calls.states(events[3]["data"]) == ["c:rejected"])
            #expect(events[4]["data"]?["call"]?["end_reason"] == .string("resolved"))
            // Audiences: created → caller; invited → invitees; ended → everyone ever in the call.
            #expect(try app.events(query: "types=call.created&user_id=b").isEmpty)
            #expect(try app.events(query: "types=call.invited&user_id=a").isEmpty)
            #expect(try app.events(query: "types=call.ended&user_id=c").count == 1)
            // Answering an ended call.
            Self.expectProblem(try Calls.act(app, callID, "accept", #"{"user_id":"c"}"#), 409, .callStateConflict)
            #expect(try server.count("SELECT count(*) FROM call_users WHERE timeout_at IS NOT NULL", []) == 0)
        }
    }

    @Test func advancedCallInviteJoinQuitEnd() throws {
        try withApp { server, app in
            for id in ["a", "b", "c", "d"] { try app.createUser(id) }
            let callID = try Calls.call(app, "a", ["b"], extra: #","mode":"advanced""#)
            #expect(try Calls.act(app, callID, "accept", #"{"user_id":"b"}"#).status == 200)
            let more = try Calls.act(app, callID, "invite", #"{"operator":"b","invitees":["c","a","zz"]}"#)
            #expect(more.status == 200, "\(more.text)")
            #expect(Self.codes(more) == [nil, ErrorCode.alreadyInCall.code, ErrorCode.inviteeNotFound.code])
            #expect(Calls.states(more.json?["call"]) == ["a:accepted", "b:accepted", "c:inviting"])
            #expect(more.json?["call"]?["users"]?[2]?["inviter_id"] == .string("b"))
            let joined = try Calls.act(app, callID, "join", #"{"user_id":"d","extended_data":"late"}"#)
            #expect(Calls.states(joined.json) == ["a:accepted", "b:accepted", "c:inviting", "d:accepted"])
            Self.expectProblem(try Calls.act(app, callID, "join", #"{"user_id":"d"}"#), 409, .alreadyInCall)
            let quit = try Calls.act(app, callID, "quit", #"{"user_id":"a"}"#)
            #expect(Calls.states(quit.json) == ["a:quit", "b:accepted", "c:inviting", "d:accepted"])
            #expect(quit.json?["users"]?[0]?["quit_at"] != .null)
            Self.expectProblem(try Calls.act(app, callID, "quit", #"{"user_id":"a"}"#), 409, .callStateConflict)
            Self.expectProblem(try Calls.act(app, callID, "end", #"{"operator":"a"}"#), 409, .callStateConflict)
            let ended = try Calls.act(app, callID, "end", #"{"operator":"d","extended_data":"bye"}"#)
            #expect(Calls.states(ended.json) == ["a:quit", "b:ended", "c:cancelled", "d:ended"])
            #expect(ended.json?["end_reason"] == .string("ended"))
            let events = try Self.callEvents(app, callID)
            #expect(events.suffix(2).compactMap { $0["type"]?.stringValue } == ["call.user_state_changed", "call.ended"])
            #expect(events.last?["data"]?["operator_id"] == .string("d"))
            #expect(events.last?["data"]?["extended_data"] == .string("bye"))
            // Every later operation on an ended call is 409.
            Self.expectProblem(try Calls.act(app, callID, "invite", #"{"operator":"d","invitees":["a"]}"#), 409, .callStateConflict)
            Self.expectProblem(try Calls.act(app, callID, "join", #"{"user_id":"a"}"#), 409, .callStateConflict)
        }
    }

    @Test func createChecksEachInviteeAndRefusesWhenNonePasses() throws {
        try withApp { server, app in
            for id in ["a", "b", "c", "d"] { try app.createUser(id) }
            // c blocks a: a's invitation to c fails with 20007; d was soft-deleted: 6000281 like a user that never existed.
            #expect(try app.request(.post, "/v1/users/c/blacklist", json: #"{"user_ids":["a"]}"#).status == 200)
            #expect(try app.request(.delete, "/v1/users/d").status == 204)
            let r = try Calls.create(app, "a", ["b", "ghost", "c", "a", "b", "d", "bad id"])
            #expect(r.status == 200, "\(r.text)")
            #expect(
                Self.codes(r) == [
                    nil, ErrorCode.inviteeNotFound.code, ErrorCode.blockedByRecipient.code, ErrorCode.invalidParams.code,
                    ErrorCode.invalidParams.code, ErrorCode.inviteeNotFound.code, ErrorCode.invalidParams.code,
                ])
            #expect(Calls.states(r.json?["call"]) == ["a:accepted", "b:inviting"])
            // skip_checks lifts the blacklist.
            let skipped = try Calls.create(app, "a", ["c"], extra: #","skip_checks":true"#)
            #expect(Self.codes(skipped) == [nil])
            // Nobody passes: 422 7000602, and no call is created.
            let before = try server.count("SELECT count(*) FROM calls", [])
            Self.expectProblem(try Calls.create(app, "a", ["ghost", "c"]), 422, .callNoInvitee)
            #expect(try server.count("SELECT count(*) FROM calls", []) == before)
            #expect(try server.count("SELECT count(*) FROM events e WHERE type = 'call.created'", []) <= before)
            // Request-level validation.
            Self.expectProblem(try Calls.create(app, "ghost", ["b"]), 404, .userNotFound)
            Self.expectInvalid(try Calls.create(app, "a", []), field: "body.invitees")
            Self.expectInvalid(try Calls.create(app, "a", (1...10).map { "u\($0)" }), field: "body.invitees")
            Self.expectInvalid(try Calls.create(app, "a", ["b"], extra: #","timeout_s":0"#), field: "body.timeout_s")
            Self.expectInvalid(try Calls.create(app, "a", ["b"], extra: #","timeout_s":601"#), field: "body.timeout_s")
            Self.expectInvalid(try Calls.create(app, "a", ["b"], extra: #","mode":"group""#), field: "body.mode")
            Self.expectInvalid(
                try Calls.create(app, "a", ["b"], extra: ",\"extended_data\":\"\(String(repeating: "x", count: 1025))\""),
                field: "body.extended_data")
            Self.expectInvalid(try app.request(.post, "/v1/calls", json: #"{"invitees":["b"]}"#), field: "body.caller")
            // A user token calls as itself; naming another caller, or skip_checks, is 403 7000002.
            let token = try app.token(for: "a")
            let asA = try Self.asUser(app, token, .post, "/v1/calls", json: #"{"invitees":["b"]}"#)
            #expect(asA.status == 200, "\(asA.text)")
            #expect(asA.json?["call"]?["caller_id"] == .string("a"))
            Self.expectProblem(try Self.asUser(app, token, .post, "/v1/calls", json: #"{"caller":"b","invitees":["c"]}"#), 403, .forbidden)
            Self.expectProblem(
                try Self.asUser(app, token, .post, "/v1/calls", json: #"{"invitees":["b"],"skip_checks":true}"#), 403, .forbidden)
        }
    }

    @Test func readsAreForParticipants() throws {
        try withApp { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }
            let callID = try Calls.call(app, "a", ["b"])
            #expect(try app.request(.get, "/v1/calls/\(callID)").status == 200)
            Self.expectProblem(try app.request(.get, "/v1/calls/nope"), 404, .callNotFound)
            #expect(try Self.asUser(app, try app.token(for: "b"), .get, "/v1/calls/\(callID)").status == 200)
            Self.expectProblem(try Self.asUser(app, try app.token(for: "c"), .get, "/v1/calls/\(callID)"), 404, .callNotFound)
            // An unknown call is 404 6000276 on every action; an unknown acting user 404 6000011.
            for action in ["cancel", "accept", "reject", "invite", "join", "quit", "end"] {
                Self.expectProblem(try Calls.act(app, "nope", action, #"{"user_id":"b","operator":"a","invitees":["b"]}"#), 404, .callNotFound)
            }
            Self.expectProblem(try Calls.act(app, callID, "accept", #"{"user_id":"ghost"}"#), 404, .userNotFound)
            Self.expectProblem(try Calls.act(app, callID, "cancel", #"{"operator":"ghost"}"#), 404, .userNotFound)
        }
    }

    @Test func cancelRules() throws {
        try withApp { server, app in
            for id in ["a", "b", "c", "d", "e"] { try app.createUser(id) }
            let callID = try Calls.call(app, "a", ["b", "c", "d"], extra: #","mode":"advanced""#)
            #expect(try Calls.act(app, callID, "accept", #"{"user_id":"d"}"#).status == 200)
            #expect(try Calls.act(app, callID, "invite", #"{"operator":"d","invitees":["e"]}"#).status == 200)
            // Per item: not invited by the operator (e was invited by d; a is the caller), not pending (d accepted).
            let partial = try Calls.act(app, callID, "cancel", #"{"operator":"a","invitees":["e","a","d","b","zz"]}"#)
            #expect(partial.status == 200, "\(partial.text)")
            #expect(
                Self.codes(partial) == [
                    ErrorCode.notInviter.code, ErrorCode.notInviter.code, ErrorCode.callStateConflict.code, nil, ErrorCode.notInviter.code,
                ])
            #expect(Calls.states(partial.json?["call"]) == ["a:accepted", "b:cancelled", "c:inviting", "d:accepted", "e:inviting"])
            // Default: every pending user the operator invited (c); then nobody is left: empty results, no event.
            let all = try Calls.act(app, callID, "cancel", #"{"operator":"a","extended_data":"sorry"}"#)
            #expect(Self.results(all).compactMap { $0["id"]?.stringValue } == ["c"])
            let eventsBefore = try Self.callEvents(app, callID).count
            let none = try Calls.act(app, callID, "cancel", #"{"operator":"a"}"#)
            #expect(none.status == 200)
            #expect(Self.results(none).isEmpty)
            #expect(try Self.callEvents(app, callID).count == eventsBefore)
            let changed = try Self.callEvents(app, callID, types: "call.user_state_changed")
            #expect(changed.last?["data"]?["extended_data"] == .string("sorry"))
            #expect(changed.last?["data"]?["operator_id"] == .string("a"))
            // A general call whose last pending invitee is cancelled ends `resolved`; a cancel on it is 409.
            let general = try Calls.call(app, "a", ["b"])
            let cancelled = try Calls.act(app, general, "cancel", #"{"operator":"a"}"#)
            #expect(cancelled.json?["call"]?["end_reason"] == .string("resolved"))
            Self.expectProblem(try Calls.act(app, general, "cancel", #"{"operator":"a"}"#), 409, .callStateConflict)
        }
    }

    @Test func answerRules() throws {
        try withApp { server, app in
            for id in ["a", "b", "c", "d"] { try app.createUser(id) }
            let callID = try Calls.call(app, "a", ["b", "c"])
            Self.expectProblem(try Calls.act(app, callID, "accept", #"{"user_id":"a"}"#), 403, .notInvitee)
            Self.expectProblem(try Calls.act(app, callID, "reject", #"{"user_id":"d"}"#), 403, .notInvitee)
            #expect(try Calls.act(app, callID, "reject", #"{"user_id":"b","extended_data":"busy"}"#).status == 200)
            Self.expectProblem(try Calls.act(app, callID, "accept", #"{"user_id":"b"}"#), 409, .callStateConflict)
            // A user token answers as itself.
            let token = try app.token(for: "c")
            Self.expectProblem(try Self.asUser(app, token, .post, "/v1/calls/\(callID)/accept", json: #"{"user_id":"b"}"#), 403, .forbidden)
            let accepted = try Self.asUser(app, token, .post, "/v1/calls/\(callID)/accept", json: "{}")
            #expect(accepted.status == 200, "\(accepted.text)")
            #expect(Calls.states(accepted.json) == ["a:accepted", "b:rejected", "c:accepted"])
            #expect(accepted.json?["users"]?[1]?["extended_data"] == .string("busy"))
            #expect(accepted.json?["end_reason"] == .string("resolved"))
        }
    }

    @Test func advancedOnlyOperationsAndTheirCodes() throws {
        try withApp { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }
            let general = try Calls.call(app, "a", ["b"])
            Self.expectProblem(try Calls.act(app, general, "invite", #"{"operator":"a","invitees":["c"]}"#), 422, .unsupportedOperation)
            Self.expectProblem(try Calls.act(app, general, "join", #"{"user_id":"c"}"#), 422, .unsupportedOperation)
            Self.expectProblem(try Calls.act(app, general, "quit", #"{"user_id":"a"}"#), 422, .unsupportedOperation)
            Self.expectProblem(try Calls.act(app, general, "end", #"{"operator":"a"}"#), 422, .unsupportedOperation)
            let advanced = try Calls.call(app, "a", ["b"], extra: #","mode":"advanced""#)
            // An operator who has not accepted: 409 on invite and end; quit of a pending user: 409.
            Self.expectProblem(try Calls.act(app, advanced, "invite", #"{"operator":"b","invitees":["c"]}"#), 409, .callStateConflict)
            Self.expectProblem(try Calls.act(app, advanced, "end", #"{"operator":"b"}"#), 409, .callStateConflict)
            Self.expectProblem(try Calls.act(app, advanced, "quit", #"{"user_id":"b"}"#), 409, .callStateConflict)
            Self.expectProblem(try Calls.act(app, advanced, "quit", #"{"user_id":"c"}"#), 409, .callStateConflict)
            Self.expectInvalid(try Calls.act(app, advanced, "invite", #"{"operator":"a","invitees":[]}"#), field: "body.invitees")
        }
    }

    @Test func advancedJoinFromEveryStateAndReinvitationKeepsThePlace() throws {
        try withApp(testClock: true) { server, app in
            for id in ["a", "b", "c", "d", "e", "f"] { try app.createUser(id) }
            let callID = try Calls.call(app, "a", ["b", "c", "d", "e"], extra: #","mode":"advanced","timeout_s":10"#)
            #expect(try Calls.act(app, callID, "reject", #"{"user_id":"b"}"#).status == 200)
            #expect(try Calls.act(app, callID, "cancel", #"{"operator":"a","invitees":["c"]}"#).status == 200)
            #expect(try Calls.act(app, callID, "accept", #"{"user_id":"e"}"#).status == 200)
            #expect(try Calls.act(app, callID, "quit", #"{"user_id":"e"}"#).status == 200)
            try server.advanceClock(ms: 10_000)
            #expect(Calls.states(try Calls.get(app, callID)) == ["a:accepted", "b:rejected", "c:cancelled", "d:timeout", "e:quit"])
            // rejected, cancelled, timeout, quit, and a user never in the call: each joins as accepted.
            for user in ["b", "c", "d", "e", "f"] {
                let r = try Calls.act(app, callID, "join", "{\"user_id\":\"\(user)\"}")
                #expect(r.status == 200, "\(user): \(r.text)")
            }
            let call = try Calls.get(app, callID)
            #expect(Calls.states(call) == ["a:accepted", "b:accepted", "c:accepted", "d:accepted", "e:accepted", "f:accepted"])
            #expect(call?["users"]?[5]?["inviter_id"] == .null)
            // A pending user joins too (invited again first: it keeps its place, with a new inviter and invited_at).
            #expect(try Calls.act(app, callID, "quit", #"{"user_id":"b"}"#).status == 200)
            let again = try Calls.act(app, callID, "invite", #"{"operator":"f","invitees":["b"]}"#)
            #expect(Self.codes(again) == [nil])
            let reinvited = again.json?["call"]?["users"]?[1]
            #expect(reinvited?["user_id"] == .string("b"))
            #expect(reinvited?["state"] == .string("inviting"))
            #expect(reinvited?["inviter_id"] == .string("f"))
            #expect(try Calls.act(app, callID, "join", #"{"user_id":"b"}"#).json?["users"]?[1]?["state"] == .string("accepted"))
        }
    }

    @Test func advancedCallEndsEmptyWhenNobodyIsLeft() throws {
        try withApp { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let callID = try Calls.call(app, "a", ["b"], extra: #","mode":"advanced""#)
            let quit = try Calls.act(app, callID, "quit", #"{"user_id":"a"}"#)
            #expect(quit.json?["state"] == .string("started"), "b is still pending")
            let rejected = try Calls.act(app, callID, "reject", #"{"user_id":"b"}"#)
            #expect(rejected.json?["state"] == .string("ended"))
            #expect(rejected.json?["end_reason"] == .string("empty"))
            let events = try Self.callEvents(app, callID)
            #expect(events.suffix(2).compactMap { $0["type"]?.stringValue } == ["call.user_state_changed", "call.ended"])
            // call.user_state_changed reaches the users pending or accepted after the change and the changed users: a got
            // its own quit, not b's reject (it had quit); b got both.
            #expect(try app.events(query: "types=call.user_state_changed&user_id=a").count == 1)
            #expect(try app.events(query: "types=call.user_state_changed&user_id=b").count == 2)
        }
    }

    @Test func theFiftyUserCapOfAdvancedCalls() throws {
        try withApp(settings: #"{"rate_limit_app_rps":100000}"#) { server, app in
            let users = (0..<52).map { "u\($0)" }
            for id in users { try app.createUser(id) }
            let callID = try Calls.call(app, "u0", Array(users[1...9]), extra: #","mode":"advanced""#)
            // 10 users; join 40 more one by one → 50.
            for user in users[10..<50] { #expect(try Calls.act(app, callID, "join", "{\"user_id\":\"\(user)\"}").status == 200) }
            Self.expectProblem(try Calls.act(app, callID, "join", #"{"user_id":"u50"}"#), 422, .callUserLimit)
            Self.expectProblem(try Calls.act(app, callID, "invite", #"{"operator":"u0","invitees":["u50"]}"#), 422, .callUserLimit)
            // A user leaving makes room; a whole request past the cap fails whole.
            #expect(try Calls.act(app, callID, "quit", #"{"user_id":"u49"}"#).status == 200)
            Self.expectProblem(try Calls.act(app, callID, "invite", #"{"operator":"u0","invitees":["u50","u51"]}"#), 422, .callUserLimit)
            #expect(Self.codes(try Calls.act(app, callID, "invite", #"{"operator":"u0","invitees":["u50"]}"#)) == [nil])
            #expect(try server.count("SELECT count(*) FROM call_users WHERE state IN ('accepted','inviting','received')", []) == 50)
        }
    }

    // MARK: - call.before_invite

    @Test func theBeforeInviteHook() throws {
        let f = try BeforeHookTests.Fixture(["call.before_invite"], users: ["a", "b", "c", "d"])
        let app = f.app
        #expect(try app.request(.post, "/v1/users/c/blacklist", json: #"{"user_ids":["a"]}"#).status == 200)
        // Called once, after the per-invitee checks, with the invitees that passed; the proposed call has no id.
        let allowed = try Calls.create(app, "a", ["b", "c"], extra: #","timeout_s":20"#)
        #expect(allowed.status == 200, "\(allowed.text)")
        try #require(f.receiver.requests.count == 1)
        let body = try #require(f.receiver.requests[0].json)
        #expect(body["type"] == .string("call.before_invite"))
        #expect(body["data"]?["invitee_ids"] == .array([.string("b")]))
        #expect(body["data"]?["inviter_id"] == .string("a"))
        #expect(body["data"]?["call"]?["call_id"] == nil)
        #expect(body["data"]?["call"]?["timeout_s"] == .int(20))
        // Nobody passes: no hook call, 422.
        Self.expectProblem(try Calls.create(app, "a", ["c"]), 422, .callNoInvitee)
        #expect(f.receiver.requests.count == 1)
        // modify: extended_data and timeout_s patched; the call is created with them.
        f.answer(#"{"action":"modify","patch":{"extended_data":"patched","timeout_s":45,"mode":"advanced"}}"#)
        let modified = try Calls.create(app, "a", ["b"])
        #expect(modified.json?["call"]?["extended_data"] == .string("patched"))
        #expect(modified.json?["call"]?["timeout_s"] == .int(45))
        #expect(modified.json?["call"]?["mode"] == .string("general"), "mode is not patchable")
        f.answer(#"{"action":"modify","patch":{"timeout_s":601}}"#)
        Self.expectProblem(try Calls.create(app, "a", ["b"]), 422, .hookPatchInvalid)
        // reject and drop: 403 7000501, nothing created.
        let before = try f.server.count("SELECT count(*) FROM calls", [])
        f.answer(#"{"action":"reject","code":42,"reason":"no calls today"}"#)
        Self.expectProblem(try Calls.create(app, "a", ["b"]), 403, .rejectedByHook)
        f.answer(#"{"action":"drop"}"#)
        Self.expectProblem(try Calls.create(app, "a", ["b"]), 403, .rejectedByHook)
        #expect(try f.server.count("SELECT count(*) FROM calls", []) == before)
        // skip_hooks: no call to the hook.
        let calls = f.receiver.requests.count
        #expect(try Calls.create(app, "a", ["b"], extra: #","skip_hooks":true"#).status == 200)
        #expect(f.receiver.requests.count == calls)
        // Invite-more: the hook sees the current call; reject fails the whole request and invites nobody.
        f.answer(#"{"action":"allow"}"#)
        let callID = try Calls.call(app, "a", ["b"], extra: #","mode":"advanced","skip_hooks":true"#)
        f.answer(#"{"action":"reject"}"#)
        Self.expectProblem(try Calls.act(app, callID, "invite", #"{"operator":"a","invitees":["d"]}"#), 403, .rejectedByHook)
        #expect(Calls.states(try Calls.get(app, callID)) == ["a:accepted", "b:inviting"])
        let seen = try #require(f.receiver.requests.last?.json)
        #expect(seen["data"]?["call"]?["call_id"] == .string(callID))
        #expect(seen["data"]?["invitee_ids"] == .array([.string("d")]))
        f.answer(#"{"action":"allow"}"#)
        #expect(Self.codes(try Calls.act(app, callID, "invite", #"{"operator":"a","invitees":["d"]}"#)) == [nil])
    }
}
