import Foundation
import ParleyHTTP
import ParleySync
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains

/// Read receipts (docs/messages.md#receipts) end to end: peer and group receipts with their counts, member lists and
/// events, the recipients fixed at send, expiry on the test clock, the refusals, and receipts marked by reading a
/// conversation.
@Suite("Message receipts", .inProcess)
struct MessageReceiptsTests: GroupTestSupport {
    static let receiptExtra = #""need_receipt":true"#

    /// Marks `ids` read by `user` with the app key.
    static func read(_ app: TestApp, _ user: String, _ ids: [String]) throws -> TestResponse {
        let r = try app.request(.post, "/v1/users/\(user)/receipts/read", json: "{\"message_ids\":\(array(ids))}")
        #expect(r.status == 200, "\(r.text)")
        return r
    }

    static func receipt(_ app: TestApp, _ id: String) throws -> JSONValue? {
        let r = try app.request(.get, "/v1/messages/\(id)/receipt")
        #expect(r.status == 200, "\(r.text)")
        return r.json
    }

    /// Every page of `GET …/receipt/members` for `state`, two per page: the user ids in order.
    static func members(_ app: TestApp, _ id: String, _ state: String) throws -> [String] {
        var ids: [String] = []
        var cursor = ""
        repeat {
            let r = try app.request(.get, "/v1/messages/\(id)/receipt/members?state=\(state)&limit=2&cursor=\(cursor)")
            #expect(r.status == 200, "\(r.text)")
            let items = r.json?["items"]?.arrayValue ?? []
            #expect(items.count <= 2)
            for item in items {
                ids.append(item["user_id"]?.stringValue ?? "")
                #expect((item["read_at"] == .null) == (state == "unread"), "\(item)")
            }
            cursor = r.json?["next_cursor"]?.stringValue ?? ""
        } while !cursor.isEmpty
        return ids
    }

    static func receiptEvents(_ app: TestApp, user: String? = nil) throws -> [JSONValue] {
        try events(app, "message.receipt_updated", user: user)
    }

    static func sendGroup(_ app: TestApp, _ from: String, _ group: String, extra: String = receiptExtra) throws -> String {
        try MessageActions.sendGroup(app, from, group, extra: "," + extra)["message_id"]?.stringValue ?? ""
    }

    static func sendPeer(_ app: TestApp, _ from: String, _ to: String, extra: String = receiptExtra) throws -> String {
        try MessageActions.send(app, from, to, extra: extra)["message_id"]?.stringValue ?? ""
    }

    @Test func peerReceiptGoesFromProcessingToDoneWithOneEventToTheSender() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let sent = try MessageActions.send(app, "a", "b", extra: Self.receiptExtra)
            #expect(sent["need_receipt"] == .bool(true))
            #expect(sent["receipt_status"] == .string("processing"))
            let id = sent["message_id"]?.stringValue ?? ""
            var receipt = try Self.receipt(app, id)
            #expect(receipt?["receipt_status"] == .string("processing"))
            #expect(receipt?["read_count"] == .int(0))
            #expect(receipt?["unread_count"] == .int(1))
            #expect(receipt?["done_at"] == .null)

            let tokenB = try app.token(for: "b")
            let r = try Self.asUser(app, tokenB, .post, "/v1/users/b/receipts/read", json: "{\"message_ids\":[\"\(id)\"]}")
            #expect(r.status == 200, "\(r.text)")
            #expect(Self.codes(r) == [nil])
            #expect(Self.results(r).first?["data"]?["receipt_status"] == .string("done"))
            #expect(Self.results(r).first?["data"]?["message_id"] == .string(id))

            receipt = try Self.receipt(app, id)
            #expect(receipt?["receipt_status"] == .string("done"))
            #expect(receipt?["read_count"] == .int(1))
            #expect(receipt?["unread_count"] == .int(0))
            #expect(receipt?["done_at"]?.intValue != nil)
            #expect(try MessageActions.get(app, id)?["receipt_status"] == .string("done"), "every Message view shows the status")
            #expect(try PeerMessages.history(app, "a", "b").first?["receipt_status"] == .string("done"))

            let events = try Self.receiptEvents(app)
            #expect(events.count == 1)
            let data = events.first?["data"]
            #expect(data?["message_id"] == .string(id))
            #expect(data?["conversation_type"] == .string("peer"))
            #expect(data?["to"] == .string("b"))
            #expect(data?["receipt_status"] == .string("done"))
            #expect(data?["read_count"] == .int(1))
            #expect(data?["unread_count"] == .int(0))
            #expect(data?["reader_id"] == .string("b"))
            #expect(try Self.receiptEvents(app, user: "a").count == 1, "to the sender")
            #expect(try Self.receiptEvents(app, user: "b").isEmpty, "not to the reader")

            // Reading again succeeds and writes nothing.
            #expect(Self.codes(try Self.read(app, "b", [id])) == [nil])
            #expect(try Self.receiptEvents(app).count == 1)
            // Peer messages have no member lists.
            Self.expectProblem(try app.request(.get, "/v1/messages/\(id)/receipt/members?state=read"), 422, .unsupportedOperation)
        }
    }

    @Test func groupReceiptCountsListsMembersAndIsDoneWhenAllHaveRead() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["o", "m1", "m2", "m3", "m4"] { try app.createUser(id, name: "name-\(id)") }
            let g = try Self.createGroup(app, "o", members: ["m1", "m2", "m3", "m4"])
            let id = try Self.sendGroup(app, "o", g)
            var receipt = try Self.receipt(app, id)
            #expect(receipt?["read_count"] == .int(0))
            #expect(receipt?["unread_count"] == .int(4))
            #expect(try Self.members(app, id, "unread") == ["m1", "m2", "m3", "m4"])
            #expect(try Self.members(app, id, "read") == [])

            let r = try Self.read(app, "m3", [id])
            #expect(Self.results(r).first?["data"]?["receipt_status"] == .string("processing"))
            _ = try Self.read(app, "m1", [id])
            receipt = try Self.receipt(app, id)
            #expect(receipt?["receipt_status"] == .string("processing"))
            #expect(receipt?["read_count"] == .int(2))
            #expect(receipt?["unread_count"] == .int(2))
            #expect(try Self.members(app, id, "read") == ["m1", "m3"])
            #expect(try Self.members(app, id, "unread") == ["m2", "m4"])
            let page = try app.request(.get, "/v1/messages/\(id)/receipt/members?state=read&limit=1").json
            #expect(page?["items"]?.arrayValue?.first?["name"] == .string("name-m1"))
            #expect(page?["items"]?.arrayValue?.first?["read_at"]?.intValue != nil)

            _ = try Self.read(app, "m2", [id])
            let last = try Self.read(app, "m4", [id])
            #expect(Self.results(last).first?["data"]?["receipt_status"] == .string("done"))
            receipt = try Self.receipt(app, id)
            #expect(receipt?["receipt_status"] == .string("done"))
            #expect(receipt?["read_count"] == .int(4))
            #expect(receipt?["unread_count"] == .int(0))
            #expect(try Self.members(app, id, "unread") == [])

            let events = try Self.receiptEvents(app)
            #expect(events.map { $0["data"]?["reader_id"]?.stringValue ?? "" } == ["m3", "m1", "m2", "m4"])
            #expect(events.map { $0["data"]?["read_count"]?.intValue ?? -1 } == [1, 2, 3, 4])
            #expect(events.map { $0["data"]?["unread_count"]?.intValue ?? -1 } == [3, 2, 1, 0])
            #expect(events.last?["data"]?["receipt_status"] == .string("done"))
            #expect(try Self.receiptEvents(app, user: "m1").isEmpty)
            #expect(try Self.receiptEvents(app, user: "o").count == 4)
        }
    }

    @Test func recipientsAreFixedAtSendLeaversStayCountedJoinersAreNotRecipients() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["o", "stay", "leaver", "late"] { try app.createUser(id) }
            let g = try Self.createGroup(app, "o", members: ["stay", "leaver"])
            let id = try Self.sendGroup(app, "o", g)
            let leave = try app.request(.post, "/v1/groups/\(g)/leave", json: #"{"user_id":"leaver"}"#)
            #expect(leave.status == 200 || leave.status == 204, "\(leave.text)")
            let invite = try app.request(.post, "/v1/groups/\(g)/members/invite", json: #"{"operator":"o","user_ids":["late"]}"#)
            #expect(invite.status == 200, "\(invite.text)")
            #expect(try Self.member(app, g, "late") != nil)

            #expect(Self.codes(try Self.read(app, "leaver", [id])) == [ErrorCode.messageNotFound.code])
            #expect(Self.codes(try Self.read(app, "late", [id])) == [ErrorCode.receiptNotApplicable.code])
            var receipt = try Self.receipt(app, id)
            #expect(receipt?["unread_count"] == .int(2), "the leaver is still counted")
            #expect(try Self.members(app, id, "unread") == ["leaver", "stay"])

            #expect(Self.codes(try Self.read(app, "stay", [id])) == [nil])
            receipt = try Self.receipt(app, id)
            #expect(receipt?["receipt_status"] == .string("processing"), "the leaver never read it")
            #expect(receipt?["read_count"] == .int(1))
            #expect(receipt?["unread_count"] == .int(1))

            // A message sent after the join has the joiner as a recipient.
            let after = try Self.sendGroup(app, "o", g)
            #expect(try Self.receipt(app, after)?["unread_count"] == .int(2))
            #expect(Self.codes(try Self.read(app, "late", [after])) == [nil])
        }
    }

    @Test func anOpenReceiptExpiresAfterThirtyDays() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }
            let open = try Self.sendPeer(app, "a", "b")
            let done = try Self.sendPeer(app, "a", "c")
            _ = try Self.read(app, "c", [done])
            try server.advanceClock(ms: 30 * 86_400_000 - 1000)
            #expect(try Self.receipt(app, open)?["receipt_status"] == .string("processing"))
            try server.advanceClock(ms: 1000)
            #expect(try Self.receipt(app, open)?["receipt_status"] == .string("expired"))
            #expect(try MessageActions.get(app, open)?["receipt_status"] == .string("expired"))
            #expect(try Self.receipt(app, done)?["receipt_status"] == .string("done"), "a done receipt stays done")

            let expiries = try Self.receiptEvents(app).filter { $0["data"]?["reader_id"] == .null }
            #expect(expiries.count == 1)
            #expect(expiries.first?["data"]?["message_id"] == .string(open))
            #expect(expiries.first?["data"]?["receipt_status"] == .string("expired"))
            #expect(expiries.first?["data"]?["unread_count"] == .int(1))
            // (The events of day 0 are past the event log's retention by now.)
            #expect(try Self.receiptEvents(app, user: "a").filter { $0["data"]?["reader_id"] == .null }.count == 1, "to the sender")
            #expect(try Self.receiptEvents(app, user: "b").isEmpty)
            #expect(Self.codes(try Self.read(app, "b", [open])) == [ErrorCode.receiptNotApplicable.code])
        }
    }

    @Test func readsAreRefusedWhereNoReceiptApplies() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let revoked = try Self.sendPeer(app, "a", "b")
            #expect(try MessageActions.revoke(app, revoked).status == 200)
            let plain = try Self.sendPeer(app, "a", "b", extra: "")
            let own = try Self.sendPeer(app, "a", "b")
            let unstored = try MessageActions.send(app, "a", "b", extra: #""online_only":true"#)["message_id"]?.stringValue ?? ""
            #expect(unstored.hasPrefix("u"))

            let r = try Self.read(app, "b", [revoked, plain, unstored, "m-nope", plain])
            #expect(
                Self.codes(r) == [
                    ErrorCode.receiptNotApplicable.code, ErrorCode.receiptNotApplicable.code, ErrorCode.receiptNotApplicable.code,
                    ErrorCode.messageNotFound.code, ErrorCode.invalidParams.code,
                ])
            #expect(Self.codes(try Self.read(app, "a", [own])) == [ErrorCode.receiptNotApplicable.code], "the sender does not read its own receipt")
            #expect(try Self.receiptEvents(app).isEmpty)
            #expect(try Self.receipt(app, revoked)?["receipt_status"] == .string("processing"), "a revoked receipt no longer changes")
            Self.expectProblem(try app.request(.get, "/v1/messages/\(plain)/receipt"), 422, .receiptNotApplicable)
            Self.expectProblem(try app.request(.get, "/v1/messages/m-nope/receipt"), 404, .messageNotFound)
            Self.expectProblem(try app.request(.get, "/v1/messages/\(unstored)/receipt"), 422, .receiptNotApplicable)
            #expect(try MessageActions.get(app, plain)?["receipt_status"] == .string("none"))
        }
    }

    @Test func onlyTheSenderReadsTheReceipt() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["o", "m"] { try app.createUser(id) }
            let g = try Self.createGroup(app, "o", members: ["m"])
            let id = try Self.sendGroup(app, "o", g)
            let tokenM = try app.token(for: "m")
            Self.expectProblem(try Self.asUser(app, tokenM, .get, "/v1/messages/\(id)/receipt"), 403, .messagePermissionDenied)
            Self.expectProblem(try Self.asUser(app, tokenM, .get, "/v1/messages/\(id)/receipt/members?state=read"), 403, .messagePermissionDenied)
            let tokenO = try app.token(for: "o")
            let own = try Self.asUser(app, tokenO, .get, "/v1/messages/\(id)/receipt")
            #expect(own.status == 200, "\(own.text)")
            #expect(own.json?["unread_count"] == .int(1))
            // A user token reads only for itself.
            Self.expectProblem(
                try Self.asUser(app, tokenM, .post, "/v1/users/o/receipts/read", json: "{\"message_ids\":[\"\(id)\"]}"), 403, .forbidden)
        }
    }

    @Test func markingAConversationReadMarksItsReceipts() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let first = try Self.sendPeer(app, "a", "b")
            _ = try Self.sendPeer(app, "a", "b", extra: "")
            let second = try Self.sendPeer(app, "a", "b")
            let third = try Self.sendPeer(app, "a", "b")
            _ = try Self.read(app, "b", [second])
            #expect(try Self.receiptEvents(app).count == 1)

            // Up to the second receipt's seq: only the first is newly marked.
            let secondSeq = try MessageActions.get(app, second)?["seq"]?.intValue ?? 0
            let r = try app.request(.post, "/v1/users/b/conversations/peer/a/read", json: "{\"seq\":\(secondSeq)}")
            #expect(r.status == 200, "\(r.text)")
            var events = try Self.receiptEvents(app)
            #expect(events.map { $0["data"]?["message_id"]?.stringValue ?? "" } == [second, first])
            #expect(try Self.receipt(app, first)?["receipt_status"] == .string("done"))
            #expect(try Self.receipt(app, third)?["receipt_status"] == .string("processing"))

            let all = try app.request(.post, "/v1/users/b/conversations/read_all", json: "{}")
            #expect(all.status == 200, "\(all.text)")
            events = try Self.receiptEvents(app)
            #expect(events.map { $0["data"]?["message_id"]?.stringValue ?? "" } == [second, first, third])
            #expect(try Self.receipt(app, third)?["receipt_status"] == .string("done"))
            // The receipts call moves no read position.
            #expect(try PeerMessages.conversation(app, "b", "a")?["unread_count"] == .int(0))
        }
    }

    @Test func markingAGroupReadMarksOnlyTheReceiptsOfItsRecipients() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["o", "m", "late"] { try app.createUser(id) }
            let g = try Self.createGroup(app, "o", members: ["m"])
            let before = try Self.sendGroup(app, "o", g)
            let own = try Self.sendGroup(app, "m", g)
            let invite = try app.request(.post, "/v1/groups/\(g)/members/invite", json: #"{"operator":"o","user_ids":["late"]}"#)
            #expect(invite.status == 200, "\(invite.text)")
            let after = try Self.sendGroup(app, "o", g)

            #expect(try app.request(.post, "/v1/users/late/conversations/group/\(g)/read", json: "{}").status == 200)
            #expect(try Self.receiptEvents(app).map { $0["data"]?["message_id"]?.stringValue ?? "" } == [after])
            #expect(try Self.receipt(app, before)?["read_count"] == .int(0), "not a recipient of what came before its join")

            #expect(try app.request(.post, "/v1/users/m/conversations/group/\(g)/read", json: "{}").status == 200)
            let events = try Self.receiptEvents(app)
            #expect(events.map { $0["data"]?["message_id"]?.stringValue ?? "" } == [after, before, after])
            #expect(events.last?["data"]?["receipt_status"] == .string("done"))
            #expect(try Self.receipt(app, before)?["receipt_status"] == .string("done"))
            #expect(try Self.receipt(app, own)?["unread_count"] == .int(1), "its own message is not marked; o has not read it")
            #expect(try Self.events(app, "conversation.read").count == 2)
        }
    }

    @Test func aHardDeletedReaderLeavesTheReadListButNotTheCounts() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["o", "m1", "m2"] { try app.createUser(id) }
            let g = try Self.createGroup(app, "o", members: ["m1", "m2"])
            let id = try Self.sendGroup(app, "o", g)
            _ = try Self.read(app, "m1", [id])
            #expect(try app.request(.delete, "/v1/users/m1?mode=hard").status == 204)
            #expect(try Self.members(app, id, "read") == [])
            #expect(try Self.members(app, id, "unread") == ["m2"])
            let receipt = try Self.receipt(app, id)
            #expect(receipt?["read_count"] == .int(1))
            #expect(receipt?["unread_count"] == .int(1))
        }
    }

    @Test func receiptsReadDoesNotMoveTheReadPosition() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            let id = try Self.sendPeer(app, "a", "b")
            _ = try Self.read(app, "b", [id])
            #expect(try PeerMessages.conversation(app, "b", "a")?["unread_count"] == .int(1))
            #expect(try Self.events(app, "conversation.read").isEmpty)
        }
    }

    @Test func concurrentReadersBothCount() throws {
        let server = try TestServer.start(testClock: true)
        defer { server.stop() }
        let app = try server.createApp(settings: #"{"rate_limit_app_rps":100000}"#)
        let readers = (1...6).map { "r\($0)" }
        for id in ["o"] + readers { try app.createUser(id) }
        let g = try Self.createGroup(app, "o", members: readers)
        let id = try Self.sendGroup(app, "o", g)
        // Dispatch threads, not a task group: blocking HTTP calls in tasks need free cooperative threads, and tests
        // waiting for a server slot hold those (a whole CI run hung on it, this test holding the last slot).
        let failures = LockedValue<[String]>([])
        DispatchQueue.concurrentPerform(iterations: readers.count) { i in
            do { _ = try Self.read(app, readers[i], [id]) } catch { failures.withLock { $0.append("\(error)") } }
        }
        #expect(failures.withLock { $0 }.isEmpty)
        let receipt = try Self.receipt(app, id)
        #expect(receipt?["read_count"] == .int(6))
        #expect(receipt?["receipt_status"] == .string("done"))
        let events = try Self.receiptEvents(app)
        #expect(events.count == 6)
        #expect(Set(events.compactMap { $0["data"]?["read_count"]?.intValue }) == Set(1...6), "each event has its own count")
        #expect(events.filter { $0["data"]?["receipt_status"] == .string("done") }.count == 1)
    }
}
