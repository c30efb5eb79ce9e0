import Testing

@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyLive

/// What a live stream receives next, without a hub thread, a socket or a database: ``StreamDelivery`` (per-stream
/// cursors, closing events, the writer's events that skip the log), ``StreamFilter`` and ``ResumePosition``.
@Suite("Stream delivery")
struct StreamDeliveryTests {
    static func event(
        _ id: Int64, _ type: String = "friend.added", audience: [String] = [], groupID: String? = nil, roomID: String? = nil,
        toMembers: Bool = false, deletedUserID: String? = nil, kickedPlatforms: [String]? = nil, data: String = "{}"
    ) -> LiveEvent {
        LiveEvent(
            id: id, type: type, audience: audience, groupID: groupID, roomID: roomID, toGroupMembers: toMembers, deletedUserID: deletedUserID,
            kickedPlatforms: kickedPlatforms, frameHead: EventJSON.frameHead(id: id, type: type, appID: "app1", createdAt: 0),
            data: Array(data.utf8))
    }

    static func appStream(_ filter: StreamFilter = StreamFilter(), after: Int64 = 0) -> EventHub.Subscription {
        EventHub.Subscription(appID: "app1", filter: filter, userID: nil, after: after, head: after)
    }

    static func userStream(_ userID: String, platform: String = "ios", after: Int64 = 0) -> EventHub.Subscription {
        var filter = StreamFilter()
        filter.userID = userID
        var subscription = EventHub.Subscription(appID: "app1", filter: filter, userID: userID, after: after, head: after)
        subscription.platform = platform
        return subscription
    }

    static func pass(
        _ page: [LiveEvent], after cursor: Int64, to subscription: EventHub.Subscription, members: Set<String> = []
    ) -> StreamDelivery.PagePass {
        var userFrames = UserFrames(page)
        return StreamDelivery.pass(page, after: cursor, to: subscription, userFrames: &userFrames) { _, userID in members.contains(userID) }
    }

    /// The `id:` lines of SSE frames, in order.
    static func ids(_ frames: [UInt8]) -> [Int64] {
        String(decoding: frames, as: UTF8.self).split(separator: "\n").compactMap { line in
            line.hasPrefix("id: ") ? Int64(line.dropFirst(4)) : nil
        }
    }

    // MARK: - Cursors

    @Test func anAppStreamGetsEveryEventPastItsCursorInOrder() {
        let page = (1...5).map { Self.event($0) }
        let pass = Self.pass(page, after: 2, to: Self.appStream())
        #expect(Self.ids(pass.frames) == [3, 4, 5], "events at or below the cursor were passed before (the backlog)")
        #expect(pass.cursor == 5)
        #expect(!pass.closes)
        #expect(pass.frames == page[2].frame + page[3].frame + page[4].frame)
    }

    @Test func filteredEventsStillMoveTheCursor() {
        var filter = StreamFilter()
        filter.types = EventTypeFilter(["group.*"])
        let page = [Self.event(7, "group.created"), Self.event(8, "friend.added"), Self.event(9, "friend.added")]
        let pass = Self.pass(page, after: 6, to: Self.appStream(filter))
        #expect(Self.ids(pass.frames) == [7])
        #expect(pass.cursor == 9, "the stream need not see 8 and 9 again from the log")
    }

    @Test func aPageAlreadyPassedChangesNothing() {
        let pass = Self.pass([Self.event(3), Self.event(4)], after: 4, to: Self.appStream())
        #expect(pass == StreamDelivery.PagePass(frames: [], cursor: 4, closes: false))
        #expect(Self.pass([], after: 4, to: Self.appStream()).cursor == 4)
    }

    @Test func aUserStreamGetsItsAudienceAndItsGroupsEventsWhileAMember() {
        let page = [
            Self.event(1, audience: ["u1"]), Self.event(2, audience: ["u2"]),
            Self.event(3, "group.member_joined", groupID: "g1", toMembers: true),
        ]
        #expect(Self.ids(Self.pass(page, after: 0, to: Self.userStream("u1"), members: ["u1"]).frames) == [1, 3])
        let outsider = Self.pass(page, after: 0, to: Self.userStream("u1"))
        #expect(Self.ids(outsider.frames) == [1])
        #expect(outsider.cursor == 3)
    }

    // MARK: - Closing events

    @Test func aKickOnTheStreamsPlatformEndsItAfterItsOwnFrame() {
        let page = [
            Self.event(1, audience: ["u1"]), Self.event(2, "user.kicked", audience: ["u1"], kickedPlatforms: ["ios", "web"]),
            Self.event(3, audience: ["u1"]),
        ]
        let pass = Self.pass(page, after: 0, to: Self.userStream("u1", platform: "ios"))
        #expect(pass.closes)
        #expect(Self.ids(pass.frames) == [1, 2], "the kick is the last frame: nothing after it")
        #expect(pass.cursor == 2)
        let android = Self.pass(page, after: 0, to: Self.userStream("u1", platform: "android"))
        #expect(!android.closes)
        #expect(Self.ids(android.frames) == [1, 2, 3])
    }

    @Test func closingRules() {
        let ios = Self.userStream("u1", platform: "ios")
        #expect(StreamDelivery.isClosed(ios, by: Self.event(1, "user.kicked", audience: ["u1"])), "no platforms named: every platform")
        #expect(!StreamDelivery.isClosed(ios, by: Self.event(1, "user.kicked", audience: ["u2"])), "another user's kick")
        #expect(!StreamDelivery.isClosed(ios, by: Self.event(1, "user.kicked", audience: ["u1"], kickedPlatforms: [])))
        #expect(StreamDelivery.isClosed(ios, by: Self.event(1, "user.deleted", deletedUserID: "u1")))
        #expect(!StreamDelivery.isClosed(ios, by: Self.event(1, "user.deleted", deletedUserID: "u2")))
        // An app stream watching the user is not the user's own session.
        var watching = StreamFilter()
        watching.userID = "u1"
        #expect(!StreamDelivery.isClosed(Self.appStream(watching), by: Self.event(1, "user.kicked", audience: ["u1"])))
        #expect(!StreamDelivery.isClosed(Self.appStream(watching), by: Self.event(1, "user.deleted", deletedUserID: "u1")))
    }

    @Test func aDeletionClosesTheStreamEvenWhenFilteredOut() {
        let stream = EventHub.Subscription(
            appID: "app1", filter: StreamFilter(types: EventTypeFilter(["message.*"]), userID: "u1"), userID: "u1", after: 0, head: 0)
        let pass = Self.pass([Self.event(5, "user.deleted", audience: ["u1"], deletedUserID: "u1"), Self.event(6)], after: 0, to: stream)
        #expect(pass.closes)
        #expect(pass.frames.isEmpty)
        #expect(pass.cursor == 5)
    }

    // MARK: - User views

    @Test func userStreamsGetTheirOwnViewOfAMessage() {
        let data = #"{"message":{"from":"u1","push":{"title":"t"},"suppressed":false}}"#
        let page = [Self.event(1, "message.sent", audience: ["u1", "u2"], data: data)]
        let app = String(decoding: Self.pass(page, after: 0, to: Self.appStream()).frames, as: UTF8.self)
        let sender = String(decoding: Self.pass(page, after: 0, to: Self.userStream("u1")).frames, as: UTF8.self)
        let receiver = String(decoding: Self.pass(page, after: 0, to: Self.userStream("u2")).frames, as: UTF8.self)
        #expect(app.contains("\"suppressed\"") && app.contains("\"push\""))
        #expect(!sender.contains("\"suppressed\"") && sender.contains("\"push\""))
        #expect(!receiver.contains("\"suppressed\"") && !receiver.contains("\"push\""))
        #expect(Self.ids(Array(receiver.utf8)) == [1])
    }

    /// A group message to 1,000 members' streams: the sender's view and the others' view are each rendered once for
    /// the page, not once per stream, and every stream gets the frame of its own view.
    @Test func aPageRendersEachUserViewOncePerEventWhateverTheStreams() {
        let data = #"{"message":{"from":"u1","push":{"title":"t"},"suppressed":false}}"#
        let members = Set((1...1000).map { "u\($0)" })
        let page = [
            Self.event(1, "message.sent", groupID: "g1", toMembers: true, data: data),
            Self.event(2, "friend.added", audience: Array(members)),
        ]
        var userFrames = UserFrames(page)
        var bodies: [String: Int] = [:]
        for user in members.sorted() {
            let pass = StreamDelivery.pass(page, after: 0, to: Self.userStream(user), userFrames: &userFrames) { _, member in
                members.contains(member)
            }
            #expect(Self.ids(pass.frames) == [1, 2])
            bodies[String(decoding: pass.frames, as: UTF8.self), default: 0] += 1
        }
        #expect(userFrames.renders == 2, "one render for the sender's view, one for everyone else's")
        #expect(bodies.count == 2 && bodies.values.sorted() == [1, 999])
    }

    /// The hub skips the pass of a user stream a page cannot touch: for every kind of page, a stream `Reach` says is
    /// untouched gets, from the full pass, no frames, no close, and the page's last id as its cursor.
    @Test func aStreamThePageCannotTouchWouldOnlyMoveItsCursor() {
        let pages: [[LiveEvent]] = [
            [Self.event(1, "message.sent", audience: ["u1", "u2"], data: #"{"message":{"from":"u1"}}"#)],
            [Self.event(1, "friend.added", audience: ["u3"]), Self.event(2, "user.deleted", deletedUserID: "u4")],
            [Self.event(1, "user.kicked", audience: ["u5"], kickedPlatforms: ["ios"])],
            [Self.event(1, "group.member_joined", groupID: "g1", toMembers: true), Self.event(2, "friend.added", audience: ["u1"])],
            [Self.event(1, "room.message", roomID: "r1", toMembers: true)],
            [Self.event(1, "app.settings_updated")],
        ]
        let users = (1...6).map { "u\($0)" }
        for page in pages {
            let reach = StreamDelivery.Reach(page)
            #expect(reach.mayTouch(Self.appStream()), "app streams see every page")
            for user in users {
                let stream = Self.userStream(user)
                var userFrames = UserFrames(page)
                let pass = StreamDelivery.pass(page, after: 0, to: stream, userFrames: &userFrames) { _, _ in true }
                if !reach.mayTouch(stream) {
                    #expect(pass == StreamDelivery.PagePass(frames: [], cursor: page[page.count - 1].id, closes: false))
                }
                if !pass.frames.isEmpty || pass.closes { #expect(reach.mayTouch(stream)) }
            }
        }
        // Untouched: a user outside the audiences of a page written to no members.
        #expect(!StreamDelivery.Reach(pages[0]).mayTouch(Self.userStream("u3")))
        #expect(StreamDelivery.Reach(pages[1]).mayTouch(Self.userStream("u4")), "the deleted user's streams close")
        #expect(StreamDelivery.Reach(pages[3]).mayTouch(Self.userStream("u6")), "any user may be a member")
    }

    // MARK: - The writer's events

    @Test func localEventsFollowingTheHeadSkipTheLog() {
        // Two writer threads may hand their batches over in either order.
        let (run, gap) = StreamDelivery.localRun([Self.event(13), Self.event(11), Self.event(12)], after: 10)
        #expect(run.map(\.id) == [11, 12, 13])
        #expect(!gap)
    }

    @Test func aGapSendsTheRestToTheLog() {
        let (run, gap) = StreamDelivery.localRun([Self.event(11), Self.event(13), Self.event(14)], after: 10)
        #expect(run.map(\.id) == [11], "12 was written by someone else: it and what follows come from the log, in order")
        #expect(gap)
        let (none, behind) = StreamDelivery.localRun([Self.event(12)], after: 10)
        #expect(none.isEmpty && behind)
    }

    @Test func localEventsAlreadyReadAreIgnored() {
        let (run, gap) = StreamDelivery.localRun([Self.event(9), Self.event(10), Self.event(11)], after: 10)
        #expect(run.map(\.id) == [11])
        #expect(!gap)
        let (stale, staleGap) = StreamDelivery.localRun([Self.event(4)], after: 10)
        #expect(stale.isEmpty && !staleGap, "nothing new: no log read on their account")
    }

    // MARK: - Filters

    @Test func appStreamFiltersCombineWithAnd() {
        var filter = StreamFilter()
        filter.types = EventTypeFilter(["group.*", "friend.added"])
        filter.groupID = "g1"
        let never: (String, MemberAudience.Key) -> Bool = { _, _ in
            Issue.record("not an event to members")
            return false
        }
        #expect(filter.matches(Self.event(1, "group.created", groupID: "g1"), wasMember: never))
        #expect(!filter.matches(Self.event(1, "group.created", groupID: "g2"), wasMember: never))
        #expect(!filter.matches(Self.event(1, "groupie.created", groupID: "g1"), wasMember: never), "`group.*` is a prefix with its dot")
        #expect(!filter.matches(Self.event(1, "message.sent", groupID: "g1"), wasMember: never))
        var room = StreamFilter()
        room.roomID = "r1"
        #expect(room.matches(Self.event(1, roomID: "r1"), wasMember: never))
        #expect(!room.matches(Self.event(1), wasMember: never))
    }

    @Test func membersAreAskedAboutTheGroupBeforeTheRoom() {
        var filter = StreamFilter()
        filter.userID = "u1"
        var asked: [MemberAudience.Key] = []
        _ = filter.matches(Self.event(1, groupID: "g1", roomID: "r1", toMembers: true)) { _, key in
            asked.append(key)
            return true
        }
        _ = filter.matches(Self.event(2, roomID: "r1", toMembers: true)) { _, key in
            asked.append(key)
            return false
        }
        #expect(asked == [MemberAudience.Key(kind: .group, id: "g1"), MemberAudience.Key(kind: .room, id: "r1")])
        // In the audience: no membership question at all; not to members: no way in.
        #expect(filter.matches(Self.event(3, audience: ["u1"], groupID: "g1", toMembers: true)) { _, _ in false })
        #expect(!filter.matches(Self.event(4, groupID: "g1")) { _, _ in true })
    }

    // MARK: - Resume positions

    @Test func resumePositions() throws {
        #expect(try ResumePosition.parse(nil, head: 50, trimPoint: 10) == ResumePosition(after: 50, previous: 50), "live only")
        #expect(try ResumePosition.parse("", head: 50, trimPoint: 10) == ResumePosition(after: 50, previous: 50))
        #expect(try ResumePosition.parse("earliest", head: 50, trimPoint: 10) == ResumePosition(after: 10, previous: 10))
        #expect(try ResumePosition.parse("42", head: 50, trimPoint: 10) == ResumePosition(after: 42, previous: 42))
        #expect(try ResumePosition.parse("50", head: 50, trimPoint: 10) == ResumePosition(after: 50, previous: 50))
        // Trimmed away: the stream starts at the trim point and says so, so the client sees the gap.
        #expect(try ResumePosition.parse("3", head: 50, trimPoint: 10) == ResumePosition(after: 10, previous: 10))
    }

    @Test func unusableResumeIDsAre400() {
        for value in ["51", "-1", "+5", " 5", "1e3", "abc", "99999999999999999999"] {
            do {
                _ = try ResumePosition.parse(value, head: 50, trimPoint: 10)
            } catch let error as APIError {
                #expect(error.code == .invalidLastEventId && error.status == 400, "\(value)")
            } catch {
                Issue.record("\(value): \(error)")
            }
        }
    }
}
