import Dispatch
import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains

/// Message import and export (docs/messages.md#import-and-export) end to end, over sockets (the export is a stream):
/// the round trip of real exported data into a fresh app, dedupe on a re-run, per-line errors, request limits, unread
/// and events.
@Suite("Message import and export")
struct MessageTransferTests: GroupTestSupport {
    /// `POST /v1/messages/import` with an NDJSON body.
    static func importLines(_ app: TestApp, _ body: String) throws -> TestResponse {
        var headers = HTTPHeaders()
        headers.add("Content-Type", "application/x-ndjson")
        return try app.request(.post, "/v1/messages/import", json: body, headers: headers)
    }

    /// The results of an import that must answer 200.
    static func imported(_ app: TestApp, _ lines: [String]) throws -> [JSONValue] {
        let r = try importLines(app, lines.joined(separator: "\n") + "\n")
        #expect(r.status == 200, "\(r.text.prefix(500))")
        return results(r)
    }

    /// `GET /v1/messages/export?query`: its raw lines (every line must be a JSON object).
    static func export(_ app: TestApp, _ query: String) throws -> [JSONValue] {
        let r = try app.request(.get, "/v1/messages/export?" + query)
        #expect(r.status == 200, "\(r.text.prefix(500))")
        #expect(r.headers["Content-Type"] == "application/x-ndjson")
        #expect(r.body.last == 0x0A || r.body.isEmpty, "every line ends with a newline")
        return try r.body.split(separator: 0x0A).map { try JSONValue.parse(Array($0)) }
    }

    /// One import line (`extra` members appended).
    static func line(
        _ conversation: String, _ from: String, _ to: String, type: Int, body: String, timestamp: Int64, key: String, extra: String = ""
    ) -> String {
        "{\"conversation_type\":\"\(conversation)\",\"from\":\"\(from)\",\"to\":\"\(to)\",\"type\":\(type),\"body\":\(body),"
            + "\"timestamp\":\(timestamp),\"message_id\":\"\(key)\"\(extra)}"
    }

    /// A body of each stored type a client can send (100 in its stored form, as an export writes it).
    static func body(_ type: Int, _ i: Int) -> String {
        switch type {
        case 1: "{\"text\":\"message \(i) 你好\"}"
        case 10:
            "{\"items\":[{\"type\":1,\"body\":{\"text\":\"caption \(i)\"}},{\"type\":11,\"body\":{\"url\":\"https://x.test/\(i).png\",\"file_name\":\"\(i).png\"}}]}"
        case 11: "{\"url\":\"https://x.test/p\(i).png\",\"file_name\":\"p.png\",\"width\":4,\"height\":3}"
        case 12: "{\"url\":\"https://x.test/f.pdf\",\"file_name\":\"f\(i).pdf\",\"file_size\":10}"
        case 13: "{\"url\":\"https://x.test/a.mp3\",\"file_name\":\"a.mp3\",\"duration_ms\":\(i + 1)}"
        case 14: "{\"url\":\"https://x.test/v.mov\",\"file_name\":\"v.mov\",\"duration_ms\":\(i + 1)}"
        case 100: "{\"combine_id\":\"cb\(i)\",\"title\":\"notes \(i)\",\"summary\":\"s\",\"message_count\":2}"
        default: "{\"data\":\"d\(i)\",\"sub_type\":\(i % 201),\"searched_content\":\"sc\"}"
        }
    }

    static let types = [1, 10, 11, 12, 13, 14, 100, 200]

    /// `count` lines of rotating types from `users` in turn to `to` (peer: the other user).
    static func lines(_ conversation: String, users: [String], to: String?, count: Int, base: Int64, prefix: String) -> [String] {
        (0..<count).map { i in
            let from = users[i % users.count]
            let target = to ?? users[(i + 1) % users.count]
            return line(
                conversation, from, target, type: types[i % types.count], body: body(types[i % types.count], i), timestamp: base + Int64(i),
                key: "\(prefix)\(i)", extra: i % 7 == 0 ? ",\"extended_data\":\"x\(i)\",\"priority\":1" : "")
        }
    }

    /// The per-line error codes of import results (nil for written lines).
    static func lineCodes(_ results: [JSONValue]) -> [Int?] {
        results.map { $0["ok"] == .bool(true) ? nil : $0["error"]?["code"]?.intValue.map(Int.init) }
    }

    static func eventCount(_ app: TestApp) throws -> Int64 {
        try app.server.count("SELECT count(*) FROM events WHERE app_id = $1", [app.appID])
    }

    /// The members the round trip must reproduce (docs/messages.md#import-and-export).
    static func essence(_ message: JSONValue) -> [JSONValue?] {
        ["type", "body", "from", "to", "timestamp", "conversation_type", "extended_data", "deleted", "client_msg_id", "priority"].map {
            message[$0]
        }
    }

    @Test func roundTripOfAPeerAndAGroupConversationIntoAFreshApp() throws {
        try withApp(testClock: true, unthrottled: true) { server, source in
            let users = ["a", "b", "c"]
            for user in users { try source.createUser(user) }
            let group = try Self.createGroup(source, "a", members: ["b", "c"], extra: ",\"group_id\":\"g1\"")
            let base: Int64 = 1_700_000_000_000

            // 10,000 messages in each conversation: most through the bulk path, then real sends, a revoke and a delete.
            let peerResults = try Self.imported(source, Self.lines("peer", users: ["a", "b"], to: nil, count: 9_990, base: base, prefix: "p"))
            #expect(peerResults.count == 9_990 && peerResults.allSatisfy { $0["ok"] == true })
            let groupResults = try Self.imported(source, Self.lines("group", users: users, to: group, count: 9_990, base: base, prefix: "g"))
            #expect(groupResults.count == 9_990 && groupResults.allSatisfy { $0["ok"] == true })
            var sent: [String] = []
            for i in 0..<4 {
                let r = try PeerMessages.sendText(source, "a", "b", "sent \(i)", extra: "\"client_msg_id\":\"c\(i)\"")
                #expect(r.status == 201, "\(r.text)")
                sent.append(r.json?["message_id"]?.stringValue ?? "")
                let g = try source.request(
                    .post, "/v1/messages", json: #"{"from":"b","conversation_type":"group","to":"g1","type":1,"body":{"text":"g\#(i)"}}"#)
                #expect(g.status == 201, "\(g.text)")
                sent.append(g.json?["message_id"]?.stringValue ?? "")
            }
            let combine = try source.request(
                .post, "/v1/messages",
                json:
                    "{\"from\":\"a\",\"conversation_type\":\"peer\",\"to\":\"b\",\"type\":100,\"body\":{\"title\":\"t\",\"message_ids\":[\"\(sent[0])\"]}}"
            )
            #expect(combine.status == 201, "\(combine.text)")
            #expect(try source.request(.post, "/v1/messages/\(sent[0])/revoke", json: "{}").status == 200)
            #expect(try source.request(.post, "/v1/messages/\(sent[1])/revoke", json: "{}").status == 200)
            let gone = try source.request(
                .post, "/v1/messages/delete", json: "{\"scope\":\"everyone\",\"message_ids\":[\"\(sent[2])\",\"\(sent[3])\"]}")
            #expect(gone.status == 200, "\(gone.text)")

            let peer = try Self.export(source, "conversation_type=peer&user_id=a&peer_id=b")
            let groupFile = try Self.export(source, "conversation_type=group&conversation_id=g1")
            #expect(peer.count == 9_995)
            #expect(groupFile.count > 9_994, "the imported and sent messages and the group's tips")
            let peerTypes = Set(peer.compactMap { $0["type"]?.intValue })
            #expect(peerTypes == Set(Self.types.map(Int64.init) + [31]), "\(peerTypes)")
            let groupTypes = Set(groupFile.compactMap { $0["type"]?.intValue })
            #expect(groupTypes.isSuperset(of: [1, 31, 32]), "\(groupTypes)")
            #expect(peer.contains { $0["deleted"] == true && $0["body"] == .null } && groupFile.contains { $0["deleted"] == true })
            #expect(peer.map { $0["seq"]?.intValue ?? 0 } == (1...9_995).map(Int64.init), "seq order")
            // Sliced exports: after_seq and time bounds.
            #expect(try Self.export(source, "conversation_type=peer&user_id=b&peer_id=a&after_seq=9990").count == 5)
            #expect(try Self.export(source, "conversation_type=peer&user_id=a&peer_id=b&start_at=\(base + 10)&end_at=\(base + 20)").count == 10)

            // A fresh app with the same users and group; its group already has its creation's tips.
            let target = try server.createApp(settings: #"{"rate_limit_app_rps":100000}"#)
            for user in users { try target.createUser(user) }
            try Self.createGroup(target, "a", members: ["b", "c"], extra: ",\"group_id\":\"g1\"")
            let before = try Self.export(target, "conversation_type=group&conversation_id=g1")
            let events = try Self.eventCount(target)
            let lines = { (messages: [JSONValue]) in messages.map(\.description) }
            let peerIn = try Self.imported(target, lines(peer))
            let groupIn = try Self.imported(target, lines(groupFile))
            #expect(peerIn.allSatisfy { $0["ok"] == true && $0["data"]?["duplicate"] == false }, "\(peerIn.first { $0["ok"] != true } ?? .null)")
            #expect(groupIn.allSatisfy { $0["ok"] == true }, "\(groupIn.first { $0["ok"] != true } ?? .null)")
            #expect(try Self.eventCount(target) == events, "an import writes no events")

            let peerOut = try Self.export(target, "conversation_type=peer&user_id=a&peer_id=b")
            let afterSeq = before.last?["seq"]?.intValue ?? 0
            let groupOut = try Self.export(target, "conversation_type=group&conversation_id=g1&after_seq=\(afterSeq)")
            for (original, copy) in [(peer, peerOut), (groupFile, groupOut)] {
                #expect(copy.count == original.count)
                for (a, b) in zip(original, copy) where Self.essence(a) != Self.essence(b) {
                    Issue.record("differs: \(a) vs \(b)")
                    break
                }
                let seqs = copy.compactMap { $0["seq"]?.intValue }
                #expect(seqs == Array(seqs.sorted()) && Set(seqs).count == seqs.count)
                let newIDs = Set(copy.compactMap { $0["message_id"]?.stringValue })
                #expect(newIDs.isDisjoint(with: original.compactMap { $0["message_id"]?.stringValue }))
                #expect(copy.allSatisfy { $0["message_id"]?.stringValue?.hasPrefix("m") == true }, "new server-assigned ids")
            }
            // A revoke record keeps its original text for the app (and the sender) only.
            let revoked = peerOut.first { $0["type"] == 31 && $0["body"]?["original_text"] != nil }
            #expect(revoked != nil)
            let asB = try Self.asUser(target, try target.token(for: "b"), .get, "/v1/messages/\(revoked?["message_id"]?.stringValue ?? "")")
            #expect(asB.json?["body"]?["original_text"] == nil, "\(asB.text)")
            // Imported messages are searchable like sent ones.
            let found = try target.request(.get, "/v1/messages/search?q=caption%209&conversation_type=group&conversation_id=g1&limit=100")
            #expect((found.json?["items"]?.arrayValue?.count ?? 0) > 0, "\(found.text.prefix(300))")
        }
    }

    @Test func aReRunAnswersDuplicatesAndAChangedLineConflicts() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for user in ["a", "b"] { try app.createUser(user) }
            var file = Self.lines("peer", users: ["a", "b"], to: nil, count: 40, base: 1_000, prefix: "k")
            file.append(#"{"conversation_type":"peer","from":"a","to":"b","type":1,"body":{"text":"keyed"},"timestamp":5,"client_msg_id":"own"}"#)
            let first = try Self.imported(app, file)
            let second = try Self.imported(app, file)
            #expect(first.count == 41 && second.count == 41)
            #expect(first.allSatisfy { $0["data"]?["duplicate"] == false })
            #expect(second.allSatisfy { $0["data"]?["duplicate"] == true })
            #expect(first.map { $0["data"]?["message_id"] } == second.map { $0["data"]?["message_id"] })
            #expect(first.map { $0["data"]?["seq"] } == second.map { $0["data"]?["seq"] })
            #expect(first.map { $0["data"]?["seq"]?.intValue ?? 0 } == (1...41).map(Int64.init), "seqs in line order")
            // A send with the same client_msg_id and content is the import's duplicate.
            let send = try PeerMessages.sendText(app, "a", "b", "keyed", extra: "\"client_msg_id\":\"own\"")
            #expect(send.status == 200 && send.json?["message_id"] == first[40]["data"]?["message_id"], "\(send.text)")

            // The same keys with other content, another conversation, or repeated inside one request.
            try app.createUser("c")
            let changed = try Self.imported(
                app,
                [
                    Self.line("peer", "a", "b", type: 1, body: #"{"text":"changed"}"#, timestamp: 1_000, key: "k0"),
                    Self.line("peer", "a", "c", type: 1, body: Self.body(1, 0), timestamp: 1_000, key: "k0"),
                    Self.line("peer", "a", "b", type: 1, body: #"{"text":"new"}"#, timestamp: 9, key: "twice"),
                    Self.line("peer", "a", "b", type: 1, body: #"{"text":"new"}"#, timestamp: 9, key: "twice"),
                    Self.line("peer", "a", "b", type: 1, body: #"{"text":"other"}"#, timestamp: 9, key: "twice"),
                ])
            #expect(
                Self.lineCodes(changed) == [
                    ErrorCode.clientMsgIdConflict.code, ErrorCode.clientMsgIdConflict.code, nil, nil, ErrorCode.clientMsgIdConflict.code,
                ])
            #expect(changed[3]["data"]?["duplicate"] == true && changed[3]["data"]?["seq"] == changed[2]["data"]?["seq"])
        }
    }

    @Test func perLineErrorsAndEmptyLines() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for user in ["a", "b"] { try app.createUser(user) }
            try Self.createGroup(app, "a", members: ["b"], extra: ",\"group_id\":\"gone\"")
            #expect(try app.request(.post, "/v1/groups/gone/dismiss", json: "{}").status == 200)
            let future = Int64(2_000_000_000_000)
            let body = [
                "{not json",
                #"{"conversation_type":"peer","from":"a","to":"b","type":1,"body":{"text":"no key"},"timestamp":1}"#,
                "",
                Self.line("peer", "ghost", "b", type: 1, body: #"{"text":"x"}"#, timestamp: 1, key: "1"),
                Self.line("peer", "a", "ghost", type: 1, body: #"{"text":"x"}"#, timestamp: 1, key: "2"),
                Self.line("group", "a", "nogroup", type: 1, body: #"{"text":"x"}"#, timestamp: 1, key: "3"),
                Self.line("group", "a", "gone", type: 1, body: #"{"text":"x"}"#, timestamp: 1, key: "4"),
                Self.line("peer", "a", "b", type: 2, body: #"{"data":"aGk="}"#, timestamp: 1, key: "5"),
                Self.line("room", "a", "r1", type: 20, body: #"{"text":"x"}"#, timestamp: 1, key: "6"),
                Self.line("peer", "a", "b", type: 1, body: #"{"text":"x"}"#, timestamp: future, key: "7"),
                Self.line("peer", "a", "b", type: 1, body: #"{"text":""}"#, timestamp: 1, key: "8"),
                "\r",
                Self.line("peer", "a", "b", type: 1, body: #"{"text":"fine"}"#, timestamp: 1, key: "9") + "\r",
                Self.line("peer", "a", "b", type: 1, body: "null", timestamp: 1, key: "10", extra: #","deleted":true"#),
            ].joined(separator: "\n")
            let r = try Self.importLines(app, body)
            #expect(r.status == 200, "\(r.text)")
            let results = Self.results(r)
            #expect(results.map { $0["id"]?.stringValue ?? "" } == ["0", "1", "3", "4", "5", "6", "7", "8", "9", "10", "12", "13"])
            #expect(results.map { $0["index"]?.intValue ?? -1 } == (0..<12).map(Int64.init))
            #expect(
                Self.codes(r) == [
                    ErrorCode.invalidParams.code, ErrorCode.invalidParams.code, ErrorCode.userNotFound.code, ErrorCode.targetNotFound.code,
                    ErrorCode.targetNotFound.code, ErrorCode.groupDismissed.code, ErrorCode.invalidParams.code, ErrorCode.invalidParams.code,
                    ErrorCode.invalidParams.code, ErrorCode.invalidParams.code, nil, nil,
                ])
            #expect(results[10]["data"]?["seq"] == 1 && results[11]["data"]?["seq"] == 2)
            let tombstone = try Self.export(app, "conversation_type=peer&user_id=a&peer_id=b").last
            #expect(tombstone?["deleted"] == true && tombstone?["body"] == .null)
            Self.expectProblem(try app.request(.get, "/v1/messages/export?conversation_type=group&conversation_id=nogroup"), 404, .targetNotFound)
            Self.expectProblem(try app.request(.get, "/v1/messages/export?conversation_type=peer&user_id=a&peer_id=ghost"), 404, .targetNotFound)
            Self.expectProblem(try app.request(.get, "/v1/messages/export?conversation_type=peer&user_id=a"), 400, .invalidParams)
            // Another media type is refused (docs/api.md).
            Self.expectProblem(try app.request(.post, "/v1/messages/import", json: "{}"), 415, .unsupportedMediaType)
        }
    }

    @Test func requestLimits() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            Self.expectProblem(try Self.importLines(app, String(repeating: "{}\n", count: 10_001)), 400, .invalidParams)
            let fits = try Self.importLines(app, String(repeating: "\n", count: 10_000))
            #expect(fits.status == 200 && Self.results(fits).isEmpty, "\(fits.text.prefix(200))")
            Self.expectProblem(try Self.importLines(app, String(repeating: "x", count: 32 * 1024 * 1024 + 1)), 413, .payloadTooLarge)
        }
    }

    @Test func importsRaiseNoUnreadAndWriteNoEvents() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for user in ["a", "b", "c"] { try app.createUser(user) }
            try Self.createGroup(app, "a", members: ["b", "c"], extra: ",\"group_id\":\"g1\"")
            // b has one unread peer message; c has read the group.
            #expect(try PeerMessages.sendText(app, "a", "b", "unread").status == 201)
            let events = try Self.eventCount(app)
            _ = try Self.imported(app, Self.lines("peer", users: ["a", "b"], to: nil, count: 10, base: 1, prefix: "p"))
            _ = try Self.imported(app, Self.lines("group", users: ["a", "b"], to: "g1", count: 10, base: 1, prefix: "g"))
            #expect(try Self.eventCount(app) == events, "no events")
            func entry(_ user: String, _ type: String, _ id: String) throws -> JSONValue? {
                try app.request(.get, "/v1/users/\(user)/conversations/\(type)/\(id)").json
            }
            // An import moves only read positions that were at the old last_seq: b, one message behind, keeps its read_seq,
            // so a's imported lines (5 of the 10) count for it after the one it had not read.
            #expect(try entry("b", "peer", "a")?["unread_count"] == 6)
            #expect(try entry("a", "peer", "b")?["unread_count"] == 0)
            #expect(try entry("a", "peer", "b")?["last_seq"] == 11)
            #expect(try entry("c", "group", "g1")?["unread_count"] == 0)
            #expect(try entry("b", "group", "g1")?["unread_count"] == 0)
            // A pair with no entries yet gets them, read.
            _ = try Self.imported(app, Self.lines("peer", users: ["b", "c"], to: nil, count: 3, base: 1, prefix: "n"))
            #expect(try entry("c", "peer", "b")?["unread_count"] == 0 && entry("c", "peer", "b")?["last_seq"] == 3)
            #expect(try Self.eventCount(app) == events)
        }
    }

    @Test func importsAndConcurrentSendsNeverShareASeq() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for user in ["a", "b"] { try app.createUser(user) }
            // Sends from 4 threads while two imports of the same pair run.
            let sends = DispatchGroup()
            for thread in 0..<4 {
                DispatchQueue.global().async(group: sends) {
                    for i in 0..<25 { _ = try? PeerMessages.sendText(app, "a", "b", "s\(thread).\(i)") }
                }
            }
            let first = try Self.imported(app, Self.lines("peer", users: ["a", "b"], to: nil, count: 1_500, base: 1, prefix: "x"))
            let second = try Self.imported(app, Self.lines("peer", users: ["b", "a"], to: nil, count: 1_500, base: 1, prefix: "y"))
            sends.wait()
            #expect((first + second).allSatisfy { $0["ok"] == true })
            let all = try Self.export(app, "conversation_type=peer&user_id=a&peer_id=b")
            #expect(all.map { $0["seq"]?.intValue ?? 0 } == (1...3_100).map(Int64.init), "gap-free, no seq twice")
            // Each import's lines keep their order.
            let imported = (first + second).compactMap { $0["data"]?["seq"]?.intValue }
            #expect(Array(imported[..<1_500]) == imported[..<1_500].sorted() && Array(imported[1_500...]) == imported[1_500...].sorted())
        }
    }
}
