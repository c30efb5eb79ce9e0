import ParleyAPI

/// The frames of one page of events as user streams receive them (docs/events.md#two-views-of-the-same-event), each
/// rendered on first need and shared by every user stream the page goes to.
///
/// An event has at most three frames: the app view (``LiveEvent/frame``, rendered with the page), its sender's user view
/// and everyone else's (``EventUserView``): so however many streams receive an event, its JSON is rendered at most three
/// times, never once per stream. Types without viewer-dependent fields use the app view frame for everyone.
///
/// Owner: the hub thread (a local value of one page's delivery).
struct UserFrames {
    private let page: [LiveEvent]
    private var rendered: [Rendered?]
    /// User-view frames rendered so far: at most two per event whatever the number of streams (the test's witness).
    private(set) var renders = 0

    private struct Rendered {
        /// Nil when the stored data did not parse (never written by Parley): user streams then get no frame for it
        /// rather than the app view, which may carry fields they must not see.
        let view: EventUserView?
        var sender: [UInt8]?
        var others: [UInt8]?
    }

    init(_ page: [LiveEvent]) {
        self.page = page
        rendered = Array(repeating: nil, count: page.count)
    }

    /// The frame of `page[index]` for a user stream of `userID`.
    mutating func frame(_ index: Int, for userID: String) -> [UInt8] {
        let event = page[index]
        guard EventUserView.differs(event.type) else { return event.frame }
        var entry = rendered[index] ?? Rendered(view: try? EventUserView(type: event.type, appData: event.data))
        defer { rendered[index] = entry }
        guard let view = entry.view else { return [] }
        let isSender = view.sender == userID
        if let frame = isSender ? entry.sender : entry.others { return frame }
        let frame = view.data(for: userID).map(event.frame(data:)) ?? event.frame
        renders += 1
        if isSender { entry.sender = frame } else { entry.others = frame }
        return frame
    }
}
