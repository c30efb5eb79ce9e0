import Dispatch
import Foundation
import ParleyHTTP
import ParleyTesting
import Synchronization
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// The timers and the changes without a request of calls (docs/calls.md, docs/operations.md#test-clock): invitation
/// timeouts and the not-received check on the test clock and in real time, `received` from presence-counting streams,
/// answers racing the timers, timers across a restart and across two nodes, hard deletes, a user's call list; end to
/// end through HTTP against PostgreSQL.
@Suite("Call timers", .inProcess)
struct CallTimerTests: GroupTestSupport {
    // MARK: - Helpers

    /// Server-clock milliseconds of a server without a test clock (the system time).
    static func wallMillis() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    /// Every event of the app's log matching `query`, paging through it.
    static func log(_ app: TestApp, _ query: String = "types=call.*") throws -> [JSONValue] {
        var all: [JSONValue] = []
        var after = "earliest"
        while true {
            let page = try app.events(after: after, query: query)
            guard let last = page.last?["id"]?.stringValue else { return all }
            all += page
            after = last
        }
    }

    /// The events of `events` about `callID`, in log order.
    static func of(_ callID: String, _ events: [JSONValue]) -> [JSONValue] {
        events.filter { $0["data"]?["call_id"]?.stringValue == callID || $0["data"]?["call"]?["call_id"]?.stringValue == callID }
    }

    static func types(_ events: [JSONValue]) -> [String] { events.compactMap { $0["type"]?.stringValue } }

    /// The call events of `callID` in the app's log.
    static func callEvents(_ app: TestApp, _ callID: String) throws -> [JSONValue] { of(callID, try log(app)) }

    /// Whether `user`'s audience (its user view of the log) holds an event of `type` about `callID`.
    static func heard(_ app: TestApp, _ user: String, _ type: String, _ callID: String) throws -> Bool {
        !of(callID, try app.events(query: "types=\(type)&user_id=\(user)")).isEmpty
    }

    static func user(_ call: JSONValue?, _ userID: String) -> JSONValue? {
        call?["users"]?.arrayValue?.first { $0["user_id"]?.stringValue == userID }
    }

    static func int(_ value: JSONValue?) -> Int64 { value?.intValue ?? -1 }

    /// Creates `count` users `prefix0`, `prefix1`, ….
    static func users(_ app: TestApp, _ prefix: String, _ count: Int) throws -> [String] {
        try (0..<count).map { try app.createUser("\(prefix)\($0)") }
    }

    /// An app whose key is not throttled by the bursts of these tests.
    static func app(_ server: TestServer) throws -> TestApp {
        try server.createApp(settings: #"{"rate_limit_app_rps": 100000}"#)
    }

    /// Waits until `userID` is online (its presence-counting stream is recorded).
    static func waitOnline(_ app: TestApp, _ userID: String) throws {
        let status = try OnlineStatus.status(app, userID) { $0["online_status"] == .string("online") }
        #expect(status["online_status"] == .string("online"), "\(userID) never came online")
    }

    struct Outcome: Sendable {
        var status = 0
        var code: Int?
        /// The first batch item's `ok` (cancel).
        var itemOK = false
        var itemCode: Int?
        var body: JSONValue?
    }

    static func outcome(_ r: TestResponse?) -> Outcome {
        guard let r else { return Outcome(status: -1) }
        let item = r.json?["results"]?[0]
        return Outcome(
            status: r.status, code: r.code, itemOK: item?["ok"] == .bool(true), itemCode: item?["error"]?["code"]?.intValue.map(Int.init),
            body: r.json)
    }

    // MARK: - 1. Invitation timeout on the test clock

    @Test func generalInvitationsTimeOutOnTheTestClock() throws {
        try withApp(testClock: true) { server, app in
            for id in ["a", "b", "c", "d"] { try app.createUser(id) }
            let created = try Calls.create(app, "a", ["b", "c"], extra: #","timeout_s":30"#)
            #expect(created.status == 200, "\(created.text)")
            let callID = created.json?["call"]?["call_id"]?.stringValue ?? ""
            let invitedAt = Self.int(Self.user(created.json?["call"], "b")?["invited_at"])
            #expect(invitedAt > 0)

            try server.advanceClock(ms: 29_000)
            var call = try Calls.get(app, callID)
            #expect(Calls.states(call) == ["a:accepted", "b:inviting", "c:inviting"])
            #expect(call?["state"] == .string("started"))
            #expect(Self.types(try Self.callEvents(app, callID)) == ["call.created", "call.invited"])

            try server.advanceClock(ms: 1_000)
            call = try Calls.get(app, callID)
            #expect(Calls.states(call) == ["a:accepted", "b:timeout", "c:timeout"])
            #expect(call?["state"] == .string("ended"))
            #expect(call?["end_reason"] == .string("resolved"))

            let events = try Self.callEvents(app, callID)
            #expect(Self.types(events) == ["call.created", "call.invited", "call.user_state_changed", "call.ended"])
            guard events.count == 4 else { return }
            let changed = events[2]
            #expect(Calls.states(changed["data"]) == ["b:timeout", "c:timeout"], "one event for both users of one request")
            #expect(changed["data"]?["call_id"] == .string(callID))
            #expect(changed["data"]?["mode"] == .string("general"))
            #expect(changed["data"]?["operator_id"] == .null)
            #expect(changed["data"]?["extended_data"] == .null)
            let ended = events[3]
            #expect(ended["data"]?["call"]?["end_reason"] == .string("resolved"))
            #expect(Calls.states(ended["data"]?["call"]) == ["a:accepted", "b:timeout", "c:timeout"])
            #expect(ended["data"]?["operator_id"] == .null)
            #expect(ended["data"]?["extended_data"] == .null)
            // Stamped with the server time at which the timer fired: at or after the due time, within the advance.
            let firedAt = Self.int(changed["created_at"])
            #expect(firedAt >= invitedAt + 30_000)
            #expect(firedAt < invitedAt + 31_000)
            #expect(Self.int(ended["created_at"]) == firedAt)
            #expect(Self.int(call?["ended_at"]) == firedAt)
            #expect(Self.int(Self.user(call, "b")?["updated_at"]) == firedAt)
            #expect(Self.int(Self.user(changed["data"], "c")?["updated_at"]) == firedAt)

            // Audiences: the state change to the caller (accepted) and the changed users; the end to everyone in it.
            for id in ["a", "b", "c"] {
                #expect(try Self.heard(app, id, "call.user_state_changed", callID), "\(id)")
                #expect(try Self.heard(app, id, "call.ended", callID), "\(id)")
            }
            #expect(try !Self.heard(app, "d", "call.user_state_changed", callID))
            #expect(try !Self.heard(app, "d", "call.ended", callID))
            #expect(try server.count("SELECT count(*) FROM call_users WHERE app_id = $1 AND timeout_at IS NOT NULL", [app.appID]) == 0)
            Self.expectProblem(try Calls.act(app, callID, "accept", #"{"user_id":"b"}"#), 409, .callStateConflict)
            // Later advances fire nothing more.
            try server.advanceClock(ms: 60_000)
            #expect(try Self.callEvents(app, callID).count == 4)
        }
    }

    // MARK: - 2. Timeouts in advanced mode

    @Test func advancedTimeoutsLeaveTheCallToItsAcceptedUsersThenEndItEmpty() throws {
        try withApp(testClock: true) { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }

            // b times out while a (the caller) is still accepted: the call goes on; a's quit empties it.
            let first = try Calls.call(app, "a", ["b"], extra: #","mode":"advanced","timeout_s":30"#)
            try server.advanceClock(ms: 30_000)
            var call = try Calls.get(app, first)
            #expect(Calls.states(call) == ["a:accepted", "b:timeout"])
            #expect(call?["state"] == .string("started"))
            #expect(call?["end_reason"] == .null)
            var events = try Self.callEvents(app, first)
            #expect(Self.types(events) == ["call.created", "call.invited", "call.user_state_changed"])
            #expect(Calls.states(events.last?["data"]) == ["b:timeout"])
            #expect(events.last?["data"]?["mode"] == .string("advanced"))
            #expect(events.last?["data"]?["operator_id"] == .null)
            #expect(try Self.heard(app, "a", "call.user_state_changed", first), "a is accepted: it hears the timeout")
            let quit = try Calls.act(app, first, "quit", #"{"user_id":"a"}"#)
            #expect(quit.status == 200, "\(quit.text)")
            #expect(Calls.states(quit.json) == ["a:quit", "b:timeout"])
            #expect(quit.json?["state"] == .string("ended"))
            #expect(quit.json?["end_reason"] == .string("empty"))
            events = try Self.callEvents(app, first)
            #expect(Self.types(events).suffix(2) == ["call.user_state_changed", "call.ended"])
            #expect(events.last?["data"]?["call"]?["end_reason"] == .string("empty"))
            #expect(events.last?["data"]?["operator_id"] == .string("a"))
            #expect(try Self.heard(app, "b", "call.ended", first), "b was in the call")

            // The caller quits first (the invitees still pending keep the call going); every invitee times out → empty.
            let second = try Calls.call(app, "a", ["b", "c"], extra: #","mode":"advanced","timeout_s":30"#)
            let left = try Calls.act(app, second, "quit", #"{"user_id":"a"}"#)
            #expect(Calls.states(left.json) == ["a:quit", "b:inviting", "c:inviting"])
            #expect(left.json?["state"] == .string("started"))
            try server.advanceClock(ms: 29_000)
            #expect(try Calls.get(app, second)?["state"] == .string("started"))
            try server.advanceClock(ms: 1_000)
            call = try Calls.get(app, second)
            #expect(Calls.states(call) == ["a:quit", "b:timeout", "c:timeout"])
            #expect(call?["state"] == .string("ended"))
            #expect(call?["end_reason"] == .string("empty"))
            events = try Self.callEvents(app, second)
            #expect(
                Self.types(events) == [
                    "call.created", "call.invited", "call.user_state_changed", "call.user_state_changed", "call.ended",
                ])
            #expect(Calls.states(events.dropLast().last?["data"]) == ["b:timeout", "c:timeout"])
            #expect(events.dropLast().last?["data"]?["operator_id"] == .null)
            #expect(events.last?["data"]?["call"]?["end_reason"] == .string("empty"))
            #expect(events.last?["data"]?["operator_id"] == .null)
            #expect(events.last?["data"]?["extended_data"] == .null)
            #expect(try Self.heard(app, "a", "call.ended", second), "a quit but was in the call")
            // a had quit: of the call's state changes it hears its own quit, not the timeout of the others.
            let heardByA = Self.of(second, try app.events(query: "types=call.user_state_changed&user_id=a")).compactMap { $0["id"]?.stringValue }
            #expect(heardByA == [events[2]["id"]?.stringValue ?? ""])
        }
    }

    // MARK: - 3. The not-received check

    @Test func notReceivedCheckMarksInvitationsAndAStreamReceivesThem() throws {
        try withApp(testClock: true) { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }
            let checked = try Calls.call(app, "a", ["b"], extra: #","not_received_check":true,"timeout_s":60"#)
            let plain = try Calls.call(app, "a", ["c"], extra: #","timeout_s":60"#)

            try server.advanceClock(ms: 4_000)
            #expect(Calls.states(try Calls.get(app, checked)) == ["a:accepted", "b:inviting"])
            try server.advanceClock(ms: 1_000)
            #expect(Calls.states(try Calls.get(app, checked)) == ["a:accepted", "b:not_yet_received"])
            #expect(Calls.states(try Calls.get(app, plain)) == ["a:accepted", "c:inviting"], "no check asked")
            var events = try Self.callEvents(app, checked)
            #expect(Self.types(events) == ["call.created", "call.invited", "call.user_state_changed"])
            #expect(Calls.states(events.last?["data"]) == ["b:not_yet_received"])
            #expect(events.last?["data"]?["operator_id"] == .null)
            #expect(events.last?["data"]?["extended_data"] == .null)
            #expect(try Self.heard(app, "b", "call.user_state_changed", checked))
            #expect(Self.types(try Self.callEvents(app, plain)) == ["call.created", "call.invited"])

            // b opens a presence-counting stream (user token): the invitation is received, announced on that stream too.
            let stream = try LiveStreams.open(server, "/v1/users/b/events", bearer: try app.token(for: "b"))
            defer { stream.close() }
            #expect(stream.status == 200)
            #expect(
                try eventually {
                    Calls.states(try Calls.get(app, checked)) == ["a:accepted", "b:received"]
                })
            #expect(
                try eventually {
                    Self.types(try Self.callEvents(app, checked)).filter { $0 == "call.user_state_changed" }.count == 2
                })
            events = try Self.callEvents(app, checked)
            #expect(Calls.states(events.last?["data"]) == ["b:received"])
            #expect(events.last?["data"]?["operator_id"] == .null)
            let live = try LiveStreams.nextEvent(stream, timeout: .seconds(5))
            #expect(live?.event == "call.user_state_changed")
            #expect(live?.id == events.last?["id"]?.stringValue)
            // c never opened a stream; a received invitation still times out.
            try server.advanceClock(ms: 55_000)
            #expect(Calls.states(try Calls.get(app, checked)) == ["a:accepted", "b:timeout"])
            #expect(Calls.states(try Calls.get(app, plain)) == ["a:accepted", "c:timeout"])
            #expect(
                Self.types(try Self.callEvents(app, checked)) == [
                    "call.created", "call.invited", "call.user_state_changed", "call.user_state_changed", "call.user_state_changed",
                    "call.ended",
                ])
        }
    }

    // MARK: - 4. received at create, and when a stream opens later

    @Test func invitationsAreReceivedThroughPresenceCountingStreamsOnly() throws {
        try withApp { server, app in
            for id in ["a", "b", "c", "d"] { try app.createUser(id) }
            // b is online (user token); d is watched by the app without presence.
            let bStream = try LiveStreams.open(server, "/v1/users/b/events", bearer: try app.token(for: "b"))
            defer { bStream.close() }
            let dWatcher = try LiveStreams.open(server, "/v1/users/d/events", bearer: app.key)
            defer { dWatcher.close() }
            try Self.waitOnline(app, "b")

            let r = try Calls.create(app, "a", ["b", "c", "d"], extra: #","timeout_s":600"#)
            #expect(r.status == 200, "\(r.text)")
            let callID = r.json?["call"]?["call_id"]?.stringValue ?? ""
            #expect(Calls.states(r.json?["call"]) == ["a:accepted", "b:received", "c:inviting", "d:inviting"])
            #expect(Self.results(r).map { $0["data"]?["state"]?.stringValue ?? "" } == ["received", "inviting", "inviting"])
            // Deliberate: a window in which no separate event may arrive.
            Thread.sleep(forTimeInterval: 0.3)
            var events = try Self.callEvents(app, callID)
            #expect(Self.types(events) == ["call.created", "call.invited"], "received at commit: no separate event")
            #expect(Calls.states(events.first?["data"]?["call"]) == ["a:accepted", "b:received", "c:inviting", "d:inviting"])

            // c opens a stream before the timeout: received, with its event (to c, and to the other active users).
            let cStream = try LiveStreams.open(server, "/v1/users/c/events", bearer: try app.token(for: "c"))
            defer { cStream.close() }
            #expect(
                try eventually {
                    Calls.states(try Calls.get(app, callID)) == ["a:accepted", "b:received", "c:received", "d:inviting"]
                })
            #expect(try eventually { try Self.callEvents(app, callID).count == 3 })
            events = try Self.callEvents(app, callID)
            #expect(Self.types(events).last == "call.user_state_changed")
            #expect(Calls.states(events.last?["data"]) == ["c:received"])
            #expect(events.last?["data"]?["operator_id"] == .null)
            let cReceivedAt = Self.int(Self.user(events.last?["data"], "c")?["updated_at"])
            #expect(cReceivedAt == Self.int(events.last?["created_at"]))
            for id in ["a", "b", "c"] { #expect(try Self.heard(app, id, "call.user_state_changed", callID), "\(id)") }

            // d: another app-key stream without presence=true counts no more than the first.
            let dOther = try LiveStreams.open(server, "/v1/users/d/events?presence=false", bearer: app.key)
            defer { dOther.close() }
            // Deliberate: a window in which the uncounted stream must not mark d received.
            Thread.sleep(forTimeInterval: 0.4)
            #expect(Self.user(try Calls.get(app, callID), "d")?["state"] == .string("inviting"))
            #expect(try Self.callEvents(app, callID).count == 3)
            // With presence=true the app's stream does count.
            let dCounted = try LiveStreams.open(server, "/v1/users/d/events?presence=true", bearer: app.key)
            defer { dCounted.close() }
            #expect(try eventually { Self.user(try Calls.get(app, callID), "d")?["state"] == .string("received") })
            #expect(try eventually { try Self.callEvents(app, callID).count == 4 })
            #expect(Calls.states(try Self.callEvents(app, callID).last?["data"]) == ["d:received"])
            #expect(try Calls.get(app, callID)?["state"] == .string("started"))
        }
    }

    // MARK: - 5. Races

    /// Accept against cancel on one pending invitee, 16 calls at once: half of them hold a second invitee who stays
    /// pending (the loser meets a started call), half end with the winner (the loser meets an ended call).
    @Test func acceptRacingCancelEndsInExactlyOneOutcome() throws {
        try withTestServer { server in
            let app = try Self.app(server)
            try app.createUser("a")
            try app.createUser("c")
            let invitees = try Self.users(app, "b", 16)
            let calls = try invitees.enumerated().map { index, b in
                try Calls.call(app, "a", index % 2 == 0 ? [b] : [b, "c"], extra: #","timeout_s":600"#)
            }
            let outcomes = Mutex<[Int: Outcome]>([:])
            // Which request of a pair starts first alternates every two calls, so both get to win.
            DispatchQueue.concurrentPerform(iterations: 32) { i in
                let k = i / 2
                let acceptIndex = (k / 2) % 2 == 0 ? 2 * k : 2 * k + 1
                let r: TestResponse?
                if i == acceptIndex {
                    r = try? Calls.act(app, calls[k], "accept", #"{"user_id":"\#(invitees[k])"}"#)
                } else {
                    r = try? Calls.act(app, calls[k], "cancel", #"{"operator":"a","invitees":["\#(invitees[k])"]}"#)
                }
                let o = Self.outcome(r)
                outcomes.withLock { $0[i] = o }
            }
            let all = outcomes.withLock { $0 }
            let events = try Self.log(app)
            var accepted = 0
            var cancelled = 0
            for k in 0..<16 {
                let acceptIndex = (k / 2) % 2 == 0 ? 2 * k : 2 * k + 1
                let accept = all[acceptIndex] ?? Outcome()
                let cancel = all[4 * k + 1 - acceptIndex] ?? Outcome()
                let acceptWon = accept.status == 200
                let cancelWon = cancel.status == 200 && cancel.itemOK
                #expect(acceptWon != cancelWon, "call \(k): accept \(accept.status) cancel \(cancel.status) \(cancel.itemOK)")
                if acceptWon { accepted += 1 }
                if cancelWon { cancelled += 1 }
                let ends = k % 2 == 0
                if !acceptWon {
                    #expect(
                        accept.status == 409 && accept.code == ErrorCode.callStateConflict.code,
                        "call \(k): losing accept \(accept.status) \(accept.code ?? 0)")
                }
                if !cancelWon {
                    if ends {
                        #expect(cancel.status == 409 && cancel.code == ErrorCode.callStateConflict.code, "call \(k): losing cancel \(cancel.status)")
                    } else {
                        #expect(
                            cancel.status == 200 && cancel.itemCode == ErrorCode.callStateConflict.code,
                            "call \(k): losing cancel item \(cancel.itemCode ?? 0)")
                    }
                }
                let want = acceptWon ? "accepted" : "cancelled"
                let call = try Calls.get(app, calls[k])
                #expect(Self.user(call, invitees[k])?["state"] == .string(want), "call \(k)")
                #expect(call?["state"] == .string(ends ? "ended" : "started"), "call \(k)")
                let mine = Self.of(calls[k], events)
                let changes = mine.filter { $0["type"] == .string("call.user_state_changed") }
                #expect(changes.count == 1, "call \(k): \(changes.count) state changes")
                #expect(changes.map { Calls.states($0["data"]) } == [["\(invitees[k]):\(want)"]], "call \(k)")
                #expect(changes.first?["data"]?["operator_id"] == .string(acceptWon ? invitees[k] : "a"))
                #expect(mine.filter { $0["type"] == .string("call.ended") }.count == (ends ? 1 : 0), "call \(k)")
                if ends {
                    #expect(Calls.states(mine.last?["data"]?["call"]).last == "\(invitees[k]):\(want)")
                } else {
                    #expect(Self.user(call, "c")?["state"] == .string("inviting"))
                }
            }
            print("CallTimerTests: of 16 accept/cancel races, accept won \(accepted), cancel won \(cancelled)")
        }
    }

    /// Accept against a test-clock advance past the timeout, 16 calls at once: each invitation ends in exactly one of
    /// `accepted` (answered before its deadline) and `timeout`, with exactly one event; accepting after the timeout
    /// is 409.
    @Test func acceptRacingTheTimeoutEndsInExactlyOneOutcome() throws {
        try withTestServer(testClock: true) { server in
            let app = try Self.app(server)
            try app.createUser("a")
            let invitees = try Self.users(app, "b", 16)
            var calls: [String] = []
            var deadlines: [Int64] = []
            for b in invitees {
                let r = try Calls.create(app, "a", [b], extra: #","timeout_s":30"#)
                #expect(r.status == 200, "\(r.text)")
                calls.append(r.json?["call"]?["call_id"]?.stringValue ?? "")
                deadlines.append(Self.int(Self.user(r.json?["call"], b)?["invited_at"]) + 30_000)
            }
            let frozenCalls = calls
            let outcomes = Mutex<[Int: Outcome]>([:])
            DispatchQueue.concurrentPerform(iterations: 17) { i in
                if i == 8 {
                    let r = try? server.request(.post, "/v1/test/clock/advance", bearer: server.adminKey, json: #"{"ms":30000}"#)
                    outcomes.withLock { $0[-1] = Self.outcome(r) }
                    return
                }
                let k = i < 8 ? i : i - 1
                let o = Self.outcome(try? Calls.act(app, frozenCalls[k], "accept", #"{"user_id":"\#(invitees[k])"}"#))
                outcomes.withLock { $0[k] = o }
            }
            let all = outcomes.withLock { $0 }
            #expect(all[-1]?.status == 200, "the advance answered \(all[-1]?.status ?? 0)")
            let events = try Self.log(app)
            var timedOut: [Int] = []
            for k in 0..<16 {
                let accept = all[k] ?? Outcome()
                let call = try Calls.get(app, calls[k])
                let state = Self.user(call, invitees[k])?["state"]?.stringValue ?? ""
                #expect(call?["state"] == .string("ended"), "call \(k)")
                #expect(call?["end_reason"] == .string("resolved"), "call \(k)")
                let changes = Self.of(calls[k], events).filter { $0["type"] == .string("call.user_state_changed") }
                #expect(changes.count == 1, "call \(k): \(changes.count) state changes")
                #expect(Self.of(calls[k], events).filter { $0["type"] == .string("call.ended") }.count == 1, "call \(k)")
                if accept.status == 200 {
                    #expect(state == "accepted", "call \(k)")
                    #expect(changes.map { Calls.states($0["data"]) } == [["\(invitees[k]):accepted"]], "call \(k)")
                    let acceptedAt = Self.int(Self.user(call, invitees[k])?["accepted_at"])
                    #expect(acceptedAt < deadlines[k], "call \(k): accepted \(acceptedAt - deadlines[k]) ms after its deadline")
                } else {
                    #expect(
                        accept.status == 409 && accept.code == ErrorCode.callStateConflict.code,
                        "call \(k): accept \(accept.status) \(accept.code ?? 0)")
                    #expect(state == "timeout", "call \(k)")
                    #expect(changes.map { Calls.states($0["data"]) } == [["\(invitees[k]):timeout"]], "call \(k)")
                    #expect(changes.first?["data"]?["operator_id"] == .null)
                    timedOut.append(k)
                }
            }
            print("CallTimerTests: \(timedOut.count) of 16 accept/timeout races timed out")

            // Accepting (or rejecting) a timed-out invitation: 409, nothing written.
            var late = timedOut.first.map { calls[$0] }
            var lateUser = timedOut.first.map { invitees[$0] } ?? "b0"
            if late == nil {
                lateUser = "b0"
                late = try Calls.call(app, "a", [lateUser], extra: #","timeout_s":1"#)
                try server.advanceClock(ms: 1_000)
            }
            let before = try Self.callEvents(app, late ?? "").count
            Self.expectProblem(try Calls.act(app, late ?? "", "accept", #"{"user_id":"\#(lateUser)"}"#), 409, .callStateConflict)
            Self.expectProblem(try Calls.act(app, late ?? "", "reject", #"{"user_id":"\#(lateUser)"}"#), 409, .callStateConflict)
            #expect(try Self.callEvents(app, late ?? "").count == before)
        }
    }

    /// A timer with due time D fires, or has passed, once server time ≥ D (docs/operations.md#test-clock) — an answer
    /// after `invited_at + timeout_s·1000` is too late even while the sweep (4×/s) has not fired the timeout yet.
    @Test func anAnswerAfterTheDeadlineIsRefusedBeforeTheSweepFires() throws {
        try withTestServer { server in
            let app = try Self.app(server)
            try app.createUser("a")
            let invitees = try Self.users(app, "b", 6)
            var calls: [String] = []
            var deadline: Int64 = 0
            for b in invitees {
                let r = try Calls.create(app, "a", [b], extra: #","timeout_s":1"#)
                #expect(r.status == 200, "\(r.text)")
                calls.append(r.json?["call"]?["call_id"]?.stringValue ?? "")
                deadline = max(deadline, Self.int(Self.user(r.json?["call"], b)?["invited_at"]) + 1_000)
            }
            // Deliberate: the real clock passes every deadline (this server has no test clock).
            while Self.wallMillis() < deadline + 2 { Thread.sleep(forTimeInterval: 0.001) }
            let frozenCalls = calls
            let outcomes = Mutex<[Int: Outcome]>([:])
            DispatchQueue.concurrentPerform(iterations: invitees.count) { k in
                let action = k % 2 == 0 ? "accept" : "reject"
                let o = Self.outcome(try? Calls.act(app, frozenCalls[k], action, #"{"user_id":"\#(invitees[k])"}"#))
                outcomes.withLock { $0[k] = o }
            }
            let all = outcomes.withLock { $0 }
            let answered = all.values.filter { $0.status == 200 }
            let pastDeadline = answered.compactMap { o -> Int64? in
                guard let user = o.body?["users"]?[1] else { return nil }
                return Self.int(user["updated_at"]) - Self.int(user["invited_at"]) - 1_000
            }
            print(
                "CallTimerTests: \(answered.count) of \(invitees.count) answers after the deadline were taken, "
                    + "stamped \(pastDeadline.sorted()) ms past it")
            for k in 0..<invitees.count {
                let o = all[k] ?? Outcome()
                #expect(
                    o.status == 409 && o.code == ErrorCode.callStateConflict.code,
                    "call \(k): answered \(o.status) after its deadline: \(Calls.states(o.body))")
            }
            // Every invitation ends timed out, whatever the answers got.
            #expect(try eventually { try app.request(.get, "/v1/stats").json?["calls_active"] == .int(0) })
            for k in 0..<invitees.count {
                #expect(Self.user(try Calls.get(app, calls[k]), invitees[k])?["state"] == .string("timeout"), "call \(k)")
            }
        }
    }

    // MARK: - 6. Timers survive a restart

    @Test func timersDueWhileTheServerWasDownFireAfterARestart() throws {
        let db = try TestDatabase.shared().makeDatabase()
        let first = try TestServer.start(database: db)
        let app = try Self.app(first)
        try app.createUser("a")
        let invitees = try Self.users(app, "b", 8)
        var calls: [(id: String, invitees: [String])] = []
        for k in 0..<4 {
            let pair = [invitees[2 * k], invitees[2 * k + 1]]
            let r = try Calls.create(app, "a", pair, extra: #","timeout_s":1,"not_received_check":true"#)
            #expect(r.status == 200, "\(r.text)")
            calls.append((r.json?["call"]?["call_id"]?.stringValue ?? "", pair))
        }
        let createdBy = Self.wallMillis()
        first.stop()
        let downFor = 1.5 - Double(Self.wallMillis() - createdBy) / 1000
        // Deliberate: the server stays down past the timeouts, by the real clock.
        if downFor > 0 { Thread.sleep(forTimeInterval: downFor) }

        try withTestServer(database: db) { second in
            let started = Date()
            let app2 = TestApp(server: second, appID: app.appID, key: app.key)
            let allEnded = try eventually(timeout: .seconds(4)) {
                try calls.allSatisfy { try Calls.get(app2, $0.id)?["state"] == .string("ended") }
            }
            let took = Date().timeIntervalSince(started)
            print("CallTimerTests: after the restart every timeout fired within \(Int(took * 1000)) ms")
            #expect(allEnded)
            #expect(took <= 2.0, "the restarted server took \(took) s")
            // Each invitee exactly once: one timeout event per call (its two invitees of one request), no check event.
            #expect(
                try eventually { try Self.log(app2).filter { $0["type"] == .string("call.ended") }.count == calls.count })
            // Deliberate: a window in which no further event may arrive.
            Thread.sleep(forTimeInterval: 0.3)
            let events = try Self.log(app2)
            for call in calls {
                let state = try Calls.get(app2, call.id)
                #expect(Calls.states(state) == ["a:accepted"] + call.invitees.map { "\($0):timeout" })
                #expect(state?["end_reason"] == .string("resolved"))
                let mine = Self.of(call.id, events)
                #expect(
                    Self.types(mine) == ["call.created", "call.invited", "call.user_state_changed", "call.ended"], "\(call.id)")
                let timeouts = mine.flatMap { Calls.states($0["data"]).filter { $0.hasSuffix(":timeout") } }
                #expect(timeouts.sorted() == call.invitees.map { "\($0):timeout" }.sorted())
                #expect(mine.allSatisfy { !Calls.states($0["data"]).contains { $0.hasSuffix(":not_yet_received") } })
            }
        }
    }

    // MARK: - 7. Two nodes, both sweeping

    @Test func twoNodesFireEachTimeoutOnceAndOnTime() throws {
        try withTestServer { first in
            let second = try TestServer.start(database: first.database)
            defer { second.stop() }
            let app1 = try Self.app(first)
            let app2 = TestApp(server: second, appID: app1.appID, key: app1.key)
            let callers = try Self.users(app1, "a", 10)
            let invitees = try Self.users(app1, "b", 20)
            let count = 40
            let created = Mutex<[Int: JSONValue]>([:])
            DispatchQueue.concurrentPerform(iterations: count) { i in
                let app = i % 2 == 0 ? app1 : app2
                let pair = [invitees[i % 20], invitees[(i + 7) % 20]]
                let r = try? Calls.create(app, callers[i % 10], pair, extra: #","timeout_s":1"#)
                if r?.status == 200, let call = r?.json?["call"] { created.withLock { $0[i] = call } }
            }
            let calls = created.withLock { $0 }
            #expect(calls.count == count, "every create succeeded")
            // Due index: (call, invitee) → invited_at + 1000.
            var due: [String: Int64] = [:]
            for call in calls.values {
                let callID = call["call_id"]?.stringValue ?? ""
                for user in (call["users"]?.arrayValue ?? []).dropFirst() {
                    due[callID + "|" + (user["user_id"]?.stringValue ?? "")] = Self.int(user["invited_at"]) + 1_000
                }
            }
            #expect(due.count == count * 2)
            #expect(try eventually { try app1.request(.get, "/v1/stats").json?["calls_active"] == .int(0) })
            #expect(try eventually { try Self.log(app1, "types=call.ended").count >= count })
            // Deliberate: a window in which no further event may arrive.
            Thread.sleep(forTimeInterval: 0.5)
            let events = try Self.log(app1)
            var timeoutsSeen: [String: Int] = [:]
            var worst: Int64 = .min
            var late: [Int64] = []
            for event in events where event["type"] == .string("call.user_state_changed") {
                let callID = event["data"]?["call_id"]?.stringValue ?? ""
                for user in event["data"]?["users"]?.arrayValue ?? [] {
                    let key = callID + "|" + (user["user_id"]?.stringValue ?? "")
                    #expect(user["state"] == .string("timeout"), "\(key) \(user)")
                    timeoutsSeen[key, default: 0] += 1
                    let lateness = Self.int(event["created_at"]) - (due[key] ?? 0)
                    #expect(Self.int(user["updated_at"]) == Self.int(event["created_at"]))
                    worst = max(worst, lateness)
                    late.append(lateness)
                }
            }
            #expect(timeoutsSeen.count == due.count, "every invitee timed out")
            #expect(timeoutsSeen.values.allSatisfy { $0 == 1 }, "each exactly once: \(timeoutsSeen.filter { $0.value != 1 })")
            var ended: [String: Int] = [:]
            for event in events where event["type"] == .string("call.ended") {
                ended[event["data"]?["call"]?["call_id"]?.stringValue ?? "", default: 0] += 1
                #expect(event["data"]?["call"]?["end_reason"] == .string("resolved"))
            }
            #expect(ended.count == count)
            #expect(ended.values.allSatisfy { $0 == 1 }, "each call ended once: \(ended.filter { $0.value != 1 })")
            late.sort()
            let median = late.isEmpty ? 0 : late[late.count / 2]
            print("CallTimerTests: two nodes, \(late.count) timeouts: lateness median \(median) ms, worst \(worst) ms")
            #expect(late.first ?? 0 >= 0, "no timeout fired early: \(late.first ?? 0) ms")
            #expect(worst <= 1_000, "a timeout fired \(worst) ms after its due time")
        }
    }

    // MARK: - 8. Hard delete

    @Test func hardDeletedUsersQuitOrAreCancelled() throws {
        try withApp { server, app in
            for id in ["a", "b", "c", "x", "y", "z", "w"] { try app.createUser(id) }

            // Advanced: b accepted → quit; c pending → cancelled; a still accepted → the call goes on.
            let advanced = try Calls.call(app, "a", ["b", "c"], extra: #","mode":"advanced","timeout_s":600"#)
            #expect(try Calls.act(app, advanced, "accept", #"{"user_id":"b"}"#).status == 200)
            #expect(try app.request(.delete, "/v1/users/b?mode=hard").status == 204)
            var call = try Calls.get(app, advanced)
            #expect(Calls.states(call) == ["a:accepted", "b:quit", "c:inviting"])
            #expect(Self.int(Self.user(call, "b")?["quit_at"]) > 0)
            #expect(call?["state"] == .string("started"))
            var events = try Self.callEvents(app, advanced)
            #expect(Self.types(events).last == "call.user_state_changed")
            #expect(Calls.states(events.last?["data"]) == ["b:quit"])
            #expect(events.last?["data"]?["operator_id"] == .null)
            #expect(events.last?["data"]?["extended_data"] == .null)
            #expect(try Self.heard(app, "a", "call.user_state_changed", advanced))
            #expect(try app.request(.delete, "/v1/users/c?mode=hard").status == 204)
            call = try Calls.get(app, advanced)
            #expect(Calls.states(call) == ["a:accepted", "b:quit", "c:cancelled"])
            #expect(call?["state"] == .string("started"), "a is still accepted")
            events = try Self.callEvents(app, advanced)
            #expect(Calls.states(events.last?["data"]) == ["c:cancelled"])
            #expect(events.last?["data"]?["operator_id"] == .null)
            #expect(!Self.types(events).contains("call.ended"))
            #expect(try server.count("SELECT count(*) FROM call_users WHERE app_id = $1 AND timeout_at IS NOT NULL", [app.appID]) == 0)

            // General: the caller x goes; its pending invitee z is cancelled with it and the call is resolved.
            let general = try Calls.call(app, "x", ["y", "z", "w"], extra: #","timeout_s":600"#)
            #expect(try Calls.act(app, general, "accept", #"{"user_id":"y"}"#).status == 200)
            #expect(try Calls.act(app, general, "reject", #"{"user_id":"w"}"#).status == 200)
            #expect(try app.request(.delete, "/v1/users/x?mode=hard").status == 204)
            call = try Calls.get(app, general)
            #expect(Calls.states(call) == ["x:quit", "y:accepted", "z:cancelled", "w:rejected"])
            #expect(call?["state"] == .string("ended"))
            #expect(call?["end_reason"] == .string("resolved"))
            events = try Self.callEvents(app, general)
            #expect(Self.types(events).suffix(2) == ["call.user_state_changed", "call.ended"])
            #expect(Calls.states(events.dropLast().last?["data"]) == ["x:quit", "z:cancelled"])
            #expect(events.dropLast().last?["data"]?["operator_id"] == .null)
            #expect(events.last?["data"]?["operator_id"] == .null)
            #expect(events.last?["data"]?["call"]?["end_reason"] == .string("resolved"))
            #expect(try Self.heard(app, "w", "call.ended", general), "w was in the call")
            // Deleting a user whose calls are over changes nothing.
            let before = try Self.log(app).count
            #expect(try app.request(.delete, "/v1/users/w?mode=hard").status == 204)
            #expect(try Self.log(app).count == before)
        }
    }

    // MARK: - 9. A user's calls, and calls_active

    @Test func aUsersCallsAreListedNewestFirstWithFiltersAndCursors() throws {
        try withTestServer(testClock: true) { server in
            let app = try Self.app(server)
            for id in ["a", "b", "c", "d"] { try app.createUser(id) }
            var mine: [(id: String, createdAt: Int64)] = []
            func make(_ caller: String, _ invitees: [String], _ extra: String = "") throws -> String {
                let r = try Calls.create(app, caller, invitees, extra: #","timeout_s":600"# + extra)
                #expect(r.status == 200, "\(r.text)")
                let id = r.json?["call"]?["call_id"]?.stringValue ?? ""
                if caller == "b" || invitees.contains("b") { mine.append((id, Self.int(r.json?["call"]?["created_at"]))) }
                return id
            }
            // Nine calls of b in every role and state, some within one millisecond, and one call without b.
            let rejected = try make("a", ["b"])
            let timedOut = try make("c", ["b", "d"])
            _ = try make("a", ["c"])
            let byB = try make("b", ["c"])
            try server.advanceClock(ms: 1)
            let joined = try make("a", ["c"], #","mode":"advanced""#)
            for _ in 0..<3 { _ = try make("d", ["b"]) }
            try server.advanceClock(ms: 1)
            let cancelled = try make("a", ["b", "c"])
            _ = try make("b", ["a", "d"], #","mode":"advanced""#)
            #expect(try Calls.act(app, rejected, "reject", #"{"user_id":"b"}"#).status == 200)
            #expect(try Calls.act(app, byB, "accept", #"{"user_id":"c"}"#).status == 200)
            #expect(try Calls.act(app, joined, "join", #"{"user_id":"b"}"#).status == 200)
            mine.append((joined, Self.int(try Calls.get(app, joined)?["created_at"])))
            let cancel = try Calls.act(app, cancelled, "cancel", #"{"operator":"a"}"#)
            #expect(cancel.status == 200, "\(cancel.text)")
            #expect(try Calls.act(app, timedOut, "reject", #"{"user_id":"d"}"#).status == 200)
            try server.advanceClock(ms: 600_000)
            #expect(Calls.states(try Calls.get(app, timedOut)) == ["c:accepted", "b:timeout", "d:rejected"])

            let expected = mine.sorted { ($0.createdAt, $0.id) > ($1.createdAt, $1.id) }.map(\.id)
            #expect(expected.count == 9)
            let ids = { (r: TestResponse) -> [String] in r.json?["items"]?.arrayValue?.compactMap { $0["call_id"]?.stringValue } ?? [] }
            let all = try app.request(.get, "/v1/users/b/calls?limit=100")
            #expect(all.status == 200, "\(all.text)")
            #expect(ids(all) == expected)
            #expect(all.json?["next_cursor"] == .null)
            #expect(ids(try app.request(.get, "/v1/users/b/calls")) == expected, "default limit 20")
            // state filters: every call now, except the advanced calls b (still accepted) is in, has ended.
            var started: [String] = []
            var ended: [String] = []
            for item in all.json?["items"]?.arrayValue ?? [] {
                if item["state"] == .string("started") {
                    started.append(item["call_id"]?.stringValue ?? "")
                } else {
                    ended.append(item["call_id"]?.stringValue ?? "")
                }
            }
            #expect(started.count == 2)
            #expect(ids(try app.request(.get, "/v1/users/b/calls?state=started&limit=100")) == started)
            #expect(ids(try app.request(.get, "/v1/users/b/calls?state=ended&limit=100")) == ended)
            Self.expectProblem(try app.request(.get, "/v1/users/b/calls?state=ringing"), 400, .invalidParams)

            // Paging: every call exactly once, in order, for each page size.
            for limit in [1, 2, 4] {
                var walked: [String] = []
                var cursor: String?
                var pages = 0
                repeat {
                    let page = try app.request(
                        .get, "/v1/users/b/calls?limit=\(limit)" + (cursor.map { "&cursor=" + Self.escape($0) } ?? ""))
                    #expect(page.status == 200, "\(page.text)")
                    #expect(ids(page).count <= limit)
                    walked += ids(page)
                    cursor = page.json?["next_cursor"]?.stringValue
                    pages += 1
                } while cursor != nil && pages < 20
                #expect(walked == expected, "limit \(limit)")
            }
            let endedPage = try app.request(.get, "/v1/users/b/calls?state=ended&limit=1")
            let endedCursor = endedPage.json?["next_cursor"]?.stringValue ?? ""
            #expect(!endedCursor.isEmpty)
            let second = try app.request(.get, "/v1/users/b/calls?state=ended&limit=1&cursor=\(Self.escape(endedCursor))")
            #expect(ids(second) == Array(ended.dropFirst().prefix(1)))
            Self.expectProblem(try app.request(.get, "/v1/users/b/calls?cursor=\(Self.escape(endedCursor))"), 400, .invalidCursor, "another list")
            Self.expectProblem(try app.request(.get, "/v1/users/c/calls?state=ended&cursor=\(Self.escape(endedCursor))"), 400, .invalidCursor)
            Self.expectProblem(try app.request(.get, "/v1/users/b/calls?cursor=garbage"), 400, .invalidCursor)
            Self.expectProblem(try app.request(.get, "/v1/users/b/calls?limit=0"), 400, .invalidParams)
            Self.expectProblem(try app.request(.get, "/v1/users/nobody/calls"), 404, .userNotFound)

            // User tokens: b reads its own list; c may not read b's.
            let asB = try Self.asUser(app, try app.token(for: "b"), .get, "/v1/users/b/calls?limit=100")
            #expect(asB.status == 200, "\(asB.text)")
            #expect(ids(asB) == expected)
            Self.expectProblem(try Self.asUser(app, try app.token(for: "c"), .get, "/v1/users/b/calls"), 403, .forbidden)
            // d's list: the call without b that d is not in stays out, the ones d is in are there.
            let dCalls = ids(try app.request(.get, "/v1/users/d/calls?limit=100"))
            #expect(dCalls.count == 5)
            #expect(dCalls.contains(timedOut))

            // calls_active counts the started calls of the app (the two advanced ones, whatever the clock did).
            let stats = try app.request(.get, "/v1/stats")
            #expect(stats.json?["calls_active"] == .int(2), "\(stats.text)")
            #expect(try Calls.act(app, joined, "end", #"{"operator":"a"}"#).status == 200)
            #expect(try app.request(.get, "/v1/stats").json?["calls_active"] == .int(1))
            let other = try server.createApp()
            #expect(try other.request(.get, "/v1/stats").json?["calls_active"] == .int(0), "per app")
        }
    }

    static func escape(_ s: String) -> String {
        s.addingPercentEncoding(withAllowedCharacters: CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? s
    }
}
