import Testing

@testable import ParleyAPI

/// The per-endpoint bookkeeping of the webhook dispatcher without I/O: which events are attempted from memory, which
/// become `pending` rows for the ordering rule, and how far the cursor may move.
@Suite("Webhook endpoint queue")
struct WebhookEndpointQueueTests {
    static func event(_ id: Int64, _ key: String, type: String = "message.sent") -> TakenEvent {
        TakenEvent(id: id, type: type, orderKey: key, createdAt: 1000 + id, body: Array("{\"id\":\"\(id)\"}".utf8))
    }

    static func queue(cursor: Int64 = 10, maxWaiting: Int = 100) -> WebhookEndpointQueue {
        WebhookEndpointQueue(
            appID: "a", webhookID: "w",
            config: .init(url: "http://127.0.0.1/", eventTypes: ["message.*"], secret: "whsec_x", previousSecret: nil, previousSecretUntil: nil),
            cursor: cursor, maxWaiting: maxWaiting)
    }

    @Test func eventsOfOneKeyGoInOneChunkInOrderAndOtherKeysSpread() {
        var q = Self.queue()
        #expect(q.take([Self.event(11, "k1"), Self.event(12, "k2"), Self.event(13, "k1"), Self.event(14, "k3")]).isEmpty)
        let chunks = q.nextChunks(slots: 2, perChunk: 1, maxPerChunk: 32)
        #expect(chunks.count == 2)
        #expect(chunks.flatMap { $0 }.count == 4)
        let k1 = chunks.first { $0.contains { $0.orderKey == "k1" } } ?? []
        #expect(k1.filter { $0.orderKey == "k1" }.map(\.id) == [11, 13])
        #expect(q.inFlightKeys == ["k1", "k2", "k3"])
        // Nothing more to start while they are in flight; a few events share one chunk.
        _ = q.take([Self.event(15, "k4"), Self.event(16, "k5")])
        #expect(q.nextChunks(slots: 4, maxPerChunk: 32).map { $0.map(\.id) } == [[15, 16]])
        #expect(q.nextChunks(slots: 4, maxPerChunk: 32).isEmpty)
    }

    @Test func aKeyInFlightHoldsItsLaterEventsInMemoryAndAFailureTurnsThemIntoRows() {
        var q = Self.queue()
        _ = q.take([Self.event(11, "k1")])
        _ = q.nextChunks(slots: 4, maxPerChunk: 32)
        #expect(q.take([Self.event(12, "k1"), Self.event(13, "k2")]).isEmpty)
        // k2 may go, k1 waits for its attempt in flight.
        #expect(q.nextChunks(slots: 4, maxPerChunk: 32).map { $0.map(\.id) } == [[13]])
        // k1's attempt failed: its row is open, and the event behind it becomes a pending row.
        let rows = q.finished(keys: ["k1"], failedKeys: ["k1"], unattempted: [])
        #expect(rows.map(\.id) == [12])
        #expect(q.openKeys["k1"] == 2)
        // Later events of k1 are rows too, until its open rows close.
        #expect(q.take([Self.event(14, "k1")]).map(\.id) == [14])
        q.rowClosed(key: "k1")
        q.rowClosed(key: "k1")
        q.rowClosed(key: "k1")
        #expect(q.openKeys["k1"] == nil)
        _ = q.take([Self.event(15, "k1")])
        #expect(q.nextChunks(slots: 4, maxPerChunk: 32).map { $0.map(\.id) } == [[15]])
    }

    @Test func theCursorStaysBelowTheFirstEventWithoutItsRow() {
        var q = Self.queue(cursor: 10)
        _ = q.take([Self.event(11, "k1"), Self.event(12, "k2"), Self.event(13, "k3", type: "user.created"), Self.event(14, "k4")])
        _ = q.nextChunks(slots: 4, maxPerChunk: 32)
        // 12 and 14 are written first: 11 is still in flight, so a crash would send 11 again (and 12, 14 once more).
        #expect(q.cursor(afterWriting: [12, 14]) == 10)
        q.wrote([12, 14])
        #expect(q.cursor == 10)
        #expect(!q.isSettled)
        #expect(q.cursor(afterWriting: [11]) == 14)
        _ = q.finished(keys: ["k1", "k2", "k4"], failedKeys: [], unattempted: [])
        q.wrote([11])
        #expect(q.cursor == 14)
        #expect(q.isSettled)
        // Events the endpoint does not select move the cursor without a row.
        _ = q.take([Self.event(15, "k5", type: "user.updated")])
        #expect(q.cursor(afterWriting: []) == 15)
    }

    @Test func pastTheMemoryBoundEventsBecomeRowsAndTheirKeysStayOrdered() {
        var q = Self.queue(maxWaiting: 2)
        let rows = q.take([Self.event(11, "k1"), Self.event(12, "k2"), Self.event(13, "k3"), Self.event(14, "k3")])
        #expect(rows.map(\.id) == [13, 14])
        #expect(q.openKeys["k3"] == 2)
        #expect(q.takeAllWaiting().map(\.id) == [11, 12])
        #expect(q.cursor(afterWriting: [11, 12, 13, 14]) == 14)
    }

    @Test func theMemoryBodyIsTheLogsEventJSON() {
        let body = TakenEvent.body(id: 42, type: "message.sent", appID: "app\"1", createdAt: 1_700_000_000_000, data: Array(#"{"x":1}"#.utf8))
        #expect(
            String(decoding: body, as: UTF8.self) == #"{"id":"42","type":"message.sent","app_id":"app\"1","created_at":1700000000000,"data":{"x":1}}"#
        )
    }
}
