import Dispatch
import ParleyHTTP
import ParleyTesting
import Synchronization
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Group messages end to end (docs/messages.md#sending, docs/messages.md#history): the send checks, one
/// gap-free sequence per group, history for the app and for members, and delivery to the members at write time.
@Suite("Group messages", .inProcess)
struct GroupMessagesTests: GroupTestSupport {
    /// Sends a text from `from` to group `groupID` with the app key.
    @discardableResult
    static func send(_ app: TestApp, _ from: String, _ groupID: String, _ text: String = "hi", extra: String = "") throws -> TestResponse {
        try app.request(
            .post, "/v1/messages",
            json: #"{"from":"\#(from)","conversation_type":"group","to":"\#(groupID)","type":1,"body":{"text":"\#(text)"}\#(extra)}"#)
    }

    @Test func membersSendAndTheChecksOfTheGroupBranchApply() throws {
        try withApp { server, app in
            for u in ["o", "m", "x"] { try app.createUser(u) }
            let g = try Self.createGroup(app, "o", members: ["m"])

            let sent = try Self.send(app, "m", g, "hello")
            #expect(sent.status == 201, "\(sent.text)")
            #expect(sent.json?["conversation_type"]?.stringValue == "group")
            #expect(sent.json?["to"]?.stringValue == g)
            #expect((sent.json?["seq"]?.intValue ?? 0) >= 1)

            Self.expectProblem(try Self.send(app, "x", g), 403, .notGroupMember)
            Self.expectProblem(try Self.send(app, "m", "nosuchgroup"), 404, .targetNotFound)
            // skip_checks lets the app speak for a non-member.
            #expect(try Self.send(app, "x", g, extra: #","skip_checks":true"#).status == 201)

            // A member token reads the message; a non-member token does not see it (404 7000210).
            let id = try #require(sent.json?["message_id"]?.stringValue)
            #expect(try Self.asUser(app, try app.token(for: "o"), .get, "/v1/messages/\(id)").status == 200)
            Self.expectProblem(try Self.asUser(app, try app.token(for: "x"), .get, "/v1/messages/\(id)"), 404, .messageNotFound)

            // need_receipt is refused in a big group (docs/groups.md#big-groups).
            let big = try Self.createGroup(app, "o", members: ["m"], extra: #","big_group":true"#)
            Self.expectProblem(try Self.send(app, "m", big, extra: #","need_receipt":true"#), 422, .receiptGroupTooLarge)
            #expect(try Self.send(app, "m", g, extra: #","need_receipt":true"#).status == 201)

            // Dismissed: sends and history reads → 409 6000527.
            #expect(try app.request(.post, "/v1/groups/\(g)/dismiss", json: #"{"operator":"o"}"#).status == 200)
            Self.expectProblem(try Self.send(app, "m", g), 409, .groupDismissed)
            Self.expectProblem(try app.request(.get, "/v1/groups/\(g)/messages"), 409, .groupDismissed)
        }
    }

    /// A member muted for 60 s is refused until the mute expires; group mute `all` blocks admins but
    /// not the owner; `normal` blocks only roles ≥ 3.
    @Test func memberAndGroupMutesRefuseSendsUntilTheyExpire() throws {
        try withApp(testClock: true) { server, app in
            for u in ["o", "a", "m"] { try app.createUser(u) }
            let g = try Self.createGroup(app, "o", members: ["a", "m"])
            try Self.setRole(app, g, "a", 2)

            let mute = try app.request(.post, "/v1/groups/\(g)/members/mute", json: #"{"user_ids":["m"],"duration_s":60}"#)
            #expect(mute.status == 200, "\(mute.text)")
            Self.expectProblem(try Self.send(app, "m", g), 403, .senderMuted)
            try server.advanceClock(ms: 61_000)
            #expect(try Self.send(app, "m", g).status == 201)

            #expect(try app.request(.put, "/v1/groups/\(g)/mute", json: #"{"mode":"all","duration_s":-1}"#).status == 200)
            Self.expectProblem(try Self.send(app, "a", g), 403, .senderMuted)
            Self.expectProblem(try Self.send(app, "m", g), 403, .senderMuted)
            #expect(try Self.send(app, "o", g).status == 201)

            #expect(try app.request(.put, "/v1/groups/\(g)/mute", json: #"{"mode":"normal","duration_s":-1}"#).status == 200)
            #expect(try Self.send(app, "a", g).status == 201)
            Self.expectProblem(try Self.send(app, "m", g), 403, .senderMuted)
        }
    }

    /// For groups: 16 concurrent senders × 25 messages give one gap-free sequence, and history walks
    /// visit every message exactly once in both directions.
    @Test func concurrentSendersGetOneGapFreeSequence() throws {
        // 400 sends and ~100 history pages in a few seconds: more than the default app rate allows on a fast machine.
        try withApp(unthrottled: true) { server, app in
            let senders = (0..<16).map { "s\($0)" }
            for u in senders { try app.createUser(u) }
            let g = try Self.createGroup(app, "s0", members: Array(senders.dropFirst()))
            let before = try GroupHistory.history(app, g).count

            let failures = Atomic<Int>(0)
            DispatchQueue.concurrentPerform(iterations: senders.count) { i in
                for k in 0..<25 {
                    let status = (try? Self.send(app, senders[i], g, "m\(i)-\(k)").status) ?? 0
                    if status != 201 { failures.add(1, ordering: .relaxed) }
                }
            }
            #expect(failures.load(ordering: .relaxed) == 0)

            let forward = try GroupHistory.history(app, g)
            #expect(forward.count == before + 400)
            #expect(forward.map { $0["seq"]?.intValue ?? -1 } == (1...Int64(forward.count)).map { $0 })
            let timestamps = forward.map { $0["timestamp"]?.intValue ?? 0 }
            #expect(timestamps == timestamps.sorted())
            // Backward, page by page: the same messages, newest first.
            let backward = try GroupHistory.history(app, g, forward: false, limit: 9)
            #expect(backward.map { $0["message_id"]?.stringValue ?? "" } == forward.reversed().map { $0["message_id"]?.stringValue ?? "" })
        }
    }

    @Test func historyIsForMembersAndFollowsTheUsersView() throws {
        try withApp { server, app in
            for u in ["o", "m", "x"] { try app.createUser(u) }
            let g = try Self.createGroup(app, "o", members: ["m"])
            for i in 0..<3 { #expect(try Self.send(app, "o", g, "t\(i)").status == 201) }

            let mine = try Self.asUser(app, try app.token(for: "m"), .get, "/v1/users/m/conversations/group/\(g)/messages")
            #expect(mine.status == 200, "\(mine.text)")
            #expect(GroupHistory.items(mine).contains { $0["body"]?["text"]?.stringValue == "t2" })
            let viaGroup = try Self.asUser(app, try app.token(for: "m"), .get, "/v1/groups/\(g)/messages")
            #expect(GroupHistory.items(viaGroup).map { $0["message_id"] } == GroupHistory.items(mine).map { $0["message_id"] })

            Self.expectProblem(try app.request(.get, "/v1/users/x/conversations/group/\(g)/messages"), 403, .notGroupMember)
            Self.expectProblem(try Self.asUser(app, try app.token(for: "x"), .get, "/v1/groups/\(g)/messages"), 403, .notGroupMember)
            Self.expectProblem(try app.request(.get, "/v1/groups/nosuch/messages"), 404, .groupNotFound)
        }
    }

    /// A user stream receives a group's messages only while the user is a member at write time —
    /// live, and on replay from an older event id.
    @Test func groupMessagesReachMembersAtWriteTimeOnly() throws {
        try withApp { server, app in
            for u in ["o", "m", "late"] { try app.createUser(u) }
            let g = try Self.createGroup(app, "o", members: ["m"])
            let start = try LiveStreams.head(app)

            let stream = try LiveStreams.open(server, "/v1/users/m/events?types=message.sent", bearer: try app.token(for: "m"))
            defer { stream.close() }
            #expect(try Self.send(app, "o", g, "while-member").status == 201)
            let first = try #require(try LiveStreams.nextEvent(stream))
            #expect(first.data.contains("while-member"))

            #expect(try app.request(.post, "/v1/groups/\(g)/leave", json: #"{"user_id":"m"}"#).status == 200)
            #expect(try Self.send(app, "o", g, "after-leave").status == 201)
            #expect(try app.request(.post, "/v1/groups/\(g)/join", json: #"{"user_id":"late"}"#).status == 200)
            #expect(try Self.send(app, "o", g, "after-join").status == 201)
            // m's next message event is a peer message: the group's later messages were skipped.
            #expect(
                try app.request(.post, "/v1/messages", json: #"{"from":"o","conversation_type":"peer","to":"m","type":1,"body":{"text":"direct"}}"#)
                    .status == 201)
            let next = try #require(try LiveStreams.nextEvent(stream))
            #expect(next.data.contains("direct"), "\(next.data)")

            // Replay from the start: m gets only what was written while it was a member; `late` only what came after
            // its join; the log's user filter agrees with the streams.
            func replayTexts(_ user: String) throws -> [String] {
                let s = try LiveStreams.open(
                    server, "/v1/users/\(user)/events?types=message.sent", bearer: try app.token(for: user), lastEventID: String(start))
                defer { s.close() }
                var texts: [String] = []
                // The replay ends where the log ends: read until the stream stays quiet.
                while let e = try? LiveStreams.nextEvent(s, timeout: .milliseconds(800)) {
                    for t in ["while-member", "after-leave", "after-join", "direct"] where e.data.contains("\"\(t)\"") { texts.append(t) }
                }
                return texts
            }
            #expect(try replayTexts("m") == ["while-member", "direct"])
            #expect(try replayTexts("late") == ["after-join"])
            let log = try app.events(after: String(start), query: "types=message.sent&user_id=late")
            #expect(log.compactMap { $0["data"]?["message"]?["body"]?["text"]?.stringValue }.filter { $0.hasPrefix("after") } == ["after-join"])
        }
    }
}
