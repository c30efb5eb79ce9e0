import ParleyAPI

/// The decisions of the live hub's delivery that need no stream, thread or database (``EventHub``): what one stream
/// receives of a page of events and where its cursor ends, when an event closes it, and which events the writer of
/// this node has just committed can go out without reading the log. The hub applies them to its streams.
enum StreamDelivery {
    /// What one stream receives of one page.
    struct PagePass: Equatable {
        /// The frames it may see, in id order, to be written as one chunk (possibly empty).
        var frames: [UInt8]
        /// The last event id it has passed (delivered or filtered out): unchanged when the page held nothing new.
        var cursor: Int64
        /// An event of the page ends the stream: `frames` end with that event's own, and nothing after it is passed.
        var closes: Bool
    }

    /// The events of `page` after `cursor` that the stream of `subscription` may see: an app stream gets the app view
    /// frames, a user stream its user's view (docs/events.md#two-views-of-the-same-event) from `userFrames`.
    /// `wasMember(index, userID)`: whether the user was a member of the group or room of `page[index]`, for events
    /// written to members.
    static func pass(
        _ page: [LiveEvent], after cursor: Int64, to subscription: EventHub.Subscription, userFrames: inout UserFrames,
        wasMember: (_ index: Int, _ userID: String) -> Bool
    ) -> PagePass {
        var pass = PagePass(frames: [], cursor: cursor, closes: false)
        for (index, event) in page.enumerated() where event.id > pass.cursor {
            let visible = subscription.filter.matches(event) { userID, _ in wasMember(index, userID) }
            pass.cursor = event.id
            if visible {
                let frame = subscription.userID.map { userFrames.frame(index, for: $0) } ?? event.frame
                // The first frame is shared, not copied (arrays copy on write): a stream that gets one event of the
                // page, as every member's stream does for a group message, costs no allocation here.
                if pass.frames.isEmpty { pass.frames = frame } else { pass.frames.append(contentsOf: frame) }
            }
            if isClosed(subscription, by: event) {
                pass.closes = true
                return pass
            }
        }
        return pass
    }

    /// Which user streams a page can touch at all: the users named by its events (audience, a deleted user) unless an
    /// event is written to a group's or room's members. Any other user stream sees nothing of the page and is not
    /// closed by it, so its pass would only move its cursor to the page's last event: the hub does just that, without
    /// the pass (an app with 19,000 idle user streams and one user's message: one set lookup per stream, no filter
    /// matching, no frames).
    struct Reach {
        private let users: Set<String>
        private let everyone: Bool

        init(_ page: [LiveEvent]) {
            everyone = page.contains { MemberAudience.key(of: $0) != nil }
            var users = Set<String>()
            if !everyone {
                for event in page {
                    users.formUnion(event.audience)
                    if let deleted = event.deletedUserID { users.insert(deleted) }
                }
            }
            self.users = users
        }

        /// False only when ``pass(_:after:to:userFrames:wasMember:)`` would give `subscription` no frames, no close,
        /// and the page's last id as its cursor.
        func mayTouch(_ subscription: EventHub.Subscription) -> Bool {
            guard let userID = subscription.userID, !everyone else { return true }
            return users.contains(userID)
        }
    }

    /// Whether `event` ends a user stream (docs/events.md#live-streams-server-sent-events): its user was kicked on the
    /// stream's platform (every platform when the event names none), or deleted. App streams never end this way.
    static func isClosed(_ subscription: EventHub.Subscription, by event: LiveEvent) -> Bool {
        guard let userID = subscription.userID else { return false }
        let kicked =
            event.type == "user.kicked" && event.audience.contains(userID)
            && (event.kickedPlatforms ?? [subscription.platform]).contains(subscription.platform)
        return kicked || event.deletedUserID == userID
    }

    /// Of the events this node has just committed (`local`, in any order: two writer threads hand over in either
    /// order), the run that follows the feed's `head` without a gap, in id order, and whether more follow after a gap
    /// (another writer's or node's events lie between: the log must be read). Events at or below the head were
    /// already read from the log.
    static func localRun(_ local: [LiveEvent], after head: Int64) -> (run: [LiveEvent], gapFollows: Bool) {
        let fresh = local.filter { $0.id > head }.sorted { $0.id < $1.id }
        var run = 0
        while run < fresh.count, fresh[run].id == head + 1 + Int64(run) { run += 1 }
        return (Array(fresh[..<run]), run < fresh.count)
    }
}
