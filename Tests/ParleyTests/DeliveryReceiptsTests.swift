import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains

/// Delivery receipts (docs/messages.md#delivery-receipts) end to end: delivered counts beside read counts in groups,
/// `delivered` for peers, reads that count as deliveries, idempotent marks, per-item refusals, the `delivered` member
/// list, and the coalesced `message.receipt_updated` (at most one per message per second, the rest on the test clock).
@Suite("Delivery receipts", .inProcess)
struct DeliveryReceiptsTests: GroupTestSupport {
    static let receiptExtra = #""need_receipt":true"#

    /// Marks `ids` delivered to `user` with the app key.
    @discardableResult
    static func deliver(_ app: TestApp, _ user: String, _ ids: [String]) throws -> TestResponse {
        let r = try app.request(.post, "/v1/messages/delivered", json: "{\"user_id\":\"\(user)\",\"message_ids\":\(array(ids))}")
        #expect(r.status == 200, "\(r.text)")
        return r
    }

    static func receipt(_ app: TestApp, _ id: String) throws -> JSONValue? {
        let r = try app.request(.get, "/v1/messages/\(id)/receipt")
        #expect(r.status == 200, "\(r.text)")
        return r.json
    }

    static func receiptEvents(_ app: TestApp, _ id: String) throws -> [JSONValue] {
        try events(app, "message.receipt_updated").filter { $0["data"]?["message_id"]?.stringValue == id }
    }

    @Test func groupCountsThreeDeliveredOneReadAndTheDeliveredMembers() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b", "c", "d"] { try app.createUser(id) }
            let group = try Self.createGroup(app, "a", members: ["b", "c", "d"])
            let id = try MessageActions.sendGroup(app, "a", group, extra: "," + Self.receiptExtra)["message_id"]?.stringValue ?? ""
            var receipt = try Self.receipt(app, id)
            #expect(receipt?["delivered_count"] == .int(0))
            #expect(receipt?["delivered"] == nil, "peer messages only")

            let r = try Self.deliver(app, "b", [id])
            #expect(Self.codes(r) == [nil])
            #expect(Self.results(r).first?["data"]?["receipt_status"] == .string("processing"))
            try Self.deliver(app, "c", [id])
            // d reads without saying it received: a read counts as a delivery.
            let read = try app.request(.post, "/v1/users/d/receipts/read", json: "{\"message_ids\":[\"\(id)\"]}")
            #expect(read.status == 200, "\(read.text)")
            try Self.deliver(app, "d", [id])
            receipt = try Self.receipt(app, id)
            #expect(receipt?["delivered_count"] == .int(3))
            #expect(receipt?["read_count"] == .int(1))
            #expect(receipt?["unread_count"] == .int(2))

            let members = try app.request(.get, "/v1/messages/\(id)/receipt/members?state=delivered")
            #expect(members.status == 200, "\(members.text)")
            let items = members.json?["items"]?.arrayValue ?? []
            #expect(items.compactMap { $0["user_id"]?.stringValue } == ["b", "c", "d"])
            #expect(items.allSatisfy { $0["delivered_at"]?.intValue != nil })
            #expect(items.map { $0["read_at"] == .null } == [true, true, false])
            let paged = try app.request(.get, "/v1/messages/\(id)/receipt/members?state=delivered&limit=2")
            #expect(paged.json?["items"]?.arrayValue?.count == 2)
            let next = paged.json?["next_cursor"]?.stringValue ?? ""
            let rest = try app.request(.get, "/v1/messages/\(id)/receipt/members?state=delivered&limit=2&cursor=\(next)")
            #expect(rest.json?["items"]?.arrayValue?.compactMap { $0["user_id"]?.stringValue } == ["d"])
            Self.expectProblem(try app.request(.get, "/v1/messages/\(id)/receipt/members?state=received"), 400, 6_000_001)

            // The read's event carries the delivered count beside the read count.
            let readEvent = try Self.receiptEvents(app, id).last { $0["data"]?["reader_id"] == .string("d") }
            #expect(readEvent?["data"]?["read_count"] == .int(1))
            #expect(readEvent?["data"]?["delivered_count"] == .int(3))
        }
    }

    @Test func peerDeliveredIsIdempotentAndTheSenderSeesIt() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let id = try MessageActions.send(app, "a", "b", extra: Self.receiptExtra)["message_id"]?.stringValue ?? ""
            #expect(try Self.receipt(app, id)?["delivered"] == .bool(false))
            let token = try app.token(for: "b")
            let r = try Self.asUser(app, token, .post, "/v1/messages/delivered", json: "{\"message_ids\":[\"\(id)\"]}")
            #expect(r.status == 200, "\(r.text)")
            #expect(Self.codes(r) == [nil])
            let receipt = try Self.receipt(app, id)
            #expect(receipt?["delivered"] == .bool(true))
            #expect(receipt?["delivered_count"] == .int(1))
            #expect(receipt?["read_count"] == .int(0))
            let events = try Self.receiptEvents(app, id)
            #expect(events.count == 1)
            #expect(events.first?["data"]?["delivered"] == .bool(true))
            #expect(events.first?["data"]?["delivered_count"] == .int(1))
            #expect(events.first?["data"]?["reader_id"] == .null)
            #expect(events.first?["data"]?["receipt_status"] == .string("processing"))

            // Again, a second later: nothing changes and nothing is written.
            try server.advanceClock(ms: 2000)
            try Self.deliver(app, "b", [id, id])
            #expect(try Self.receipt(app, id)?["delivered_count"] == .int(1))
            #expect(try Self.receiptEvents(app, id).count == 1)

            // The sender's own message and messages without a receipt are acknowledged and record nothing.
            let plain = try MessageActions.send(app, "a", "b", extra: "")["message_id"]?.stringValue ?? ""
            let own = try Self.deliver(app, "a", [id, plain])
            #expect(Self.codes(own) == [nil, nil])
            #expect(Self.results(own).last?["data"]?["receipt_status"] == .string("none"))
            #expect(try Self.receipt(app, id)?["delivered_count"] == .int(1))
        }
    }

    @Test func itemsTheUserCannotSeeAre7000210AndBadRequestsAre400() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }
            let group = try Self.createGroup(app, "a", members: ["b"])
            let groupMessage = try MessageActions.sendGroup(app, "a", group, extra: "," + Self.receiptExtra)["message_id"]?.stringValue ?? ""
            let peerMessage = try MessageActions.send(app, "a", "b", extra: Self.receiptExtra)["message_id"]?.stringValue ?? ""
            let r = try Self.deliver(app, "c", [groupMessage, peerMessage, "mnosuchmessage", "bad id!"])
            #expect(Self.codes(r) == [7_000_210, 7_000_210, 7_000_210, 6_000_001])
            #expect(try Self.receipt(app, groupMessage)?["delivered_count"] == .int(0))

            Self.expectProblem(try app.request(.post, "/v1/messages/delivered", json: #"{"user_id":"b","message_ids":[]}"#), 400, 6_000_001)
            let many = Self.array((0...100).map { "m\($0)" })
            Self.expectProblem(
                try app.request(.post, "/v1/messages/delivered", json: "{\"user_id\":\"b\",\"message_ids\":\(many)}"), 400, 6_000_001)
            Self.expectProblem(try app.request(.post, "/v1/messages/delivered", json: "{\"message_ids\":[\"\(peerMessage)\"]}"), 400, 6_000_001)
            Self.expectProblem(
                try app.request(.post, "/v1/messages/delivered", json: "{\"user_id\":\"nobody\",\"message_ids\":[\"\(peerMessage)\"]}"), 404,
                6_000_011)
            let token = try app.token(for: "c")
            Self.expectProblem(
                try Self.asUser(app, token, .post, "/v1/messages/delivered", json: "{\"user_id\":\"b\",\"message_ids\":[\"\(peerMessage)\"]}"),
                403, .forbidden)
        }
    }

    @Test func deliveryEventsAreCoalescedToOnePerMessagePerSecond() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b", "c", "d", "e"] { try app.createUser(id) }
            let group = try Self.createGroup(app, "a", members: ["b", "c", "d", "e"])
            let id = try MessageActions.sendGroup(app, "a", group, extra: "," + Self.receiptExtra)["message_id"]?.stringValue ?? ""
            try Self.deliver(app, "b", [id])
            var events = try Self.receiptEvents(app, id)
            #expect(events.map { $0["data"]?["delivered_count"] } == [.int(1)])
            // Within the same second: recorded, no event of their own.
            try Self.deliver(app, "c", [id])
            try Self.deliver(app, "d", [id])
            #expect(try Self.receiptEvents(app, id).count == 1)
            #expect(try Self.receipt(app, id)?["delivered_count"] == .int(3))
            // The second ends: one event with the counts of that time, to the sender only.
            try server.advanceClock(ms: 1000)
            events = try Self.receiptEvents(app, id)
            #expect(events.map { $0["data"]?["delivered_count"] } == [.int(1), .int(3)])
            #expect(events.last?["data"]?["read_count"] == .int(0))
            #expect(try Self.events(app, "message.receipt_updated", user: "b").isEmpty)
            // Nothing waits any more: the next second writes nothing, and a later delivery has its event at once.
            try server.advanceClock(ms: 1000)
            #expect(try Self.receiptEvents(app, id).count == 2)
            try Self.deliver(app, "e", [id])
            #expect(try Self.receiptEvents(app, id).map { $0["data"]?["delivered_count"] } == [.int(1), .int(3), .int(4)])
        }
    }
}
