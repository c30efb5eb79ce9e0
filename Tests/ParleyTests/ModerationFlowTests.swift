import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore

/// Moderation end to end through real sends (docs/moderation.md, docs/blocklists.md): a `flag` blocklist files an
/// automatic report the review queue shows, blocked sends escalate to a mute on the test clock, and the review queue's
/// action closes the automatic report like any other.
@Suite("Moderation end to end", .inProcess)
struct ModerationFlowTests: ProblemAssertions {
    static func blocklist(_ app: TestApp, _ name: String, action: String, entries: [String]) throws {
        let list = entries.map { JSONValue.string($0).description }.joined(separator: ",")
        let r = try app.request(.post, "/v1/blocklists", json: #"{"name":"\#(name)","type":"word","action":"\#(action)","entries":[\#(list)]}"#)
        #expect(r.status == 201, "\(r.text)")
    }

    static func openReports(_ app: TestApp) throws -> [JSONValue] {
        let r = try app.request(.get, "/v1/reports?status=open")
        #expect(r.status == 200, "\(r.text)")
        return r.json?["items"]?.arrayValue ?? []
    }

    @Test func aFlaggedSendIsDeliveredAndQueuedForReview() throws {
        try withApp { server, app in
            for id in ["alice", "bob"] { try app.createUser(id) }
            try Self.blocklist(app, "watch", action: "flag", entries: ["casino"])
            let sent = try PeerMessages.sendText(app, "alice", "bob", "best casino in town")
            #expect(sent.status == 201, "\(sent.text)")
            let messageID = sent.json?["message_id"]?.stringValue ?? ""
            #expect(try PeerMessages.history(app, "bob", "alice").count == 1, "a flag delivers")

            let reports = try Self.openReports(app)
            #expect(reports.count == 1)
            let report = reports.first ?? .null
            #expect(report["reason"] == "automod")
            #expect(report["reporter_id"] == .null)
            #expect(report["target"]?["type"] == "message")
            #expect(report["target"]?["message_id"]?.stringValue == messageID)
            #expect(report["target_snapshot"]?["body"]?["text"] == "best casino in town")

            // The moderator deletes it from the queue: the report closes and the message is gone for everyone.
            let reportID = report["report_id"]?.stringValue ?? ""
            let acted = try app.request(
                .post, "/v1/reports/\(reportID)/actions", json: #"{"action":"delete_message","moderator":"anna"}"#)
            #expect(acted.status == 200, "\(acted.text)")
            #expect(acted.json?["status"] == "resolved")
            #expect(try Self.openReports(app).isEmpty)
            let seen = try server.request(.get, "/v1/messages/\(messageID)", bearer: try app.token(for: "bob"))
            #expect(seen.json?["deleted"] == true, "a tombstone: \(seen.text)")
            #expect(seen.json?["body"]?["text"] == nil)
            let log = try app.request(.get, "/v1/moderation/log?moderator=anna").json?["items"]?.arrayValue ?? []
            #expect(log.first?["action"] == "delete_message")
            #expect(log.first?["source"] == "report")
        }
    }

    @Test func blockedSendsEscalateToAMuteWithinTheWindow() throws {
        let settings = #"{"automod_block_threshold":2,"automod_window_s":60,"automod_action":"mute","automod_mute_s":300}"#
        try withApp(testClock: true, settings: settings) { server, app in
            for id in ["alice", "bob"] { try app.createUser(id) }
            try Self.blocklist(app, "banned-words", action: "block", entries: ["scam"])
            Self.expectProblem(try PeerMessages.sendText(app, "alice", "bob", "a scam"), 422, .contentBlocked)
            // The window passes: that strike no longer counts.
            try server.advanceClock(ms: 61_000)
            Self.expectProblem(try PeerMessages.sendText(app, "alice", "bob", "another scam"), 422, .contentBlocked)
            #expect(try PeerMessages.sendText(app, "alice", "bob", "hello").status == 201, "one strike in the window")
            // The second inside the window mutes for automod_mute_s.
            try server.advanceClock(ms: 10_000)
            Self.expectProblem(try PeerMessages.sendText(app, "alice", "bob", "scam again"), 422, .contentBlocked)
            Self.expectProblem(try PeerMessages.sendText(app, "alice", "bob", "hello"), 403, .senderMuted)
            let log = try app.request(.get, "/v1/moderation/log?user_id=alice").json?["items"]?.arrayValue ?? []
            #expect(log.count == 1)
            #expect(log.first?["action"] == "automod_mute")
            #expect(log.first?["moderator"] == "automod")
            #expect(log.first?["params"]?["duration_s"] == 300)
            // The mute ends with its time.
            try server.advanceClock(ms: 301_000)
            #expect(try PeerMessages.sendText(app, "alice", "bob", "hello").status == 201)
            #expect(try PeerMessages.history(app, "bob", "alice").count == 2, "nothing blocked was stored")
        }
    }

    @Test func aShadowBlockedSendReachesWebhooksOnlyMarkedSuppressed() throws {
        let receiver = try TestReceiver { _ in .status(204) }
        defer { receiver.stop() }
        try withApp(configure: { $0.webhookAllowPrivate = true }) { server, app in
            for id in ["alice", "bob"] { try app.createUser(id) }
            let endpoint = try app.request(
                .post, "/v1/webhooks", json: #"{"url":"\#(receiver.url)/hook","event_types":["message.sent"]}"#)
            #expect(endpoint.status == 201, "\(endpoint.text)")
            try Self.blocklist(app, "quiet", action: "shadow_block", entries: ["spam"])
            let hidden = try PeerMessages.sendText(app, "alice", "bob", "buy spam")
            #expect(hidden.status == 201)
            let shown = try PeerMessages.sendText(app, "alice", "bob", "hello")
            #expect(shown.status == 201)
            // The customer's backend gets both in the app view; the shadow-blocked one says so, and says why.
            #expect(server.app.services.webhooks.dispatcher.drain(), "the dispatcher did not become idle")
            let received = receiver.waitFor(count: 2)
            #expect(received.count >= 2)
            let messages = received.compactMap { try? JSONValue.parse($0.body) }.map { $0["data"]?["message"] ?? .null }
            let byID = Dictionary(messages.map { ($0["message_id"]?.stringValue ?? "", $0) }, uniquingKeysWith: { a, _ in a })
            #expect(byID[hidden.json?["message_id"]?.stringValue ?? ""]?["suppressed"] == "shadow_block")
            #expect(byID[shown.json?["message_id"]?.stringValue ?? ""]?["suppressed"] == .null)
        }
    }
}
