import Dispatch
import ParleyHTTP
import ParleyPostgres
import ParleyTesting
import Synchronization
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Peer messages (docs/messages.md#sending, docs/messages.md#history) end to end: real HTTP against a real server and
/// database.
@Suite("Messages", .inProcess)
struct MessagesTests: ProblemAssertions {
    // MARK: - Helpers (shared with ConversationsTests)

    // MARK: - Send and read

    @Test func sendReturnsTheStoredMessageAndWritesOneEvent() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id, name: "N" + id) }

            let options = "\"client_msg_id\":\"k1\",\"extended_data\":\"x\",\"priority\":3,\"push\":{\"title\":\"T\"}"
            let r = try PeerMessages.sendText(app, "a", "b", "hello", extra: options)
            #expect(r.status == 201, "\(r.text)")
            let m = try #require(r.json)
            #expect(m["seq"] == 1)
            #expect(m["from"] == "a")
            #expect(m["to"] == "b")
            #expect(m["type"] == 1)
            #expect(m["conversation_type"] == "peer")
            #expect(m["body"] == .object(["text": "hello"]))
            #expect(m["client_msg_id"] == "k1")
            #expect(m["extended_data"] == "x")
            #expect(m["priority"] == 3)
            #expect(m["stored"] == true)
            #expect(m["deleted"] == false)
            #expect(m["suppressed"] == .null)
            #expect(m["mentions"] == .object(["user_ids": [], "all": false]))
            #expect(m["receipt_status"] == "none")
            #expect(m["push"]?["title"] == "T")
            #expect(m["push"]?["enable"] == true, "stored with its defaults for the push bridge")
            let id = try #require(m["message_id"]?.stringValue)
            #expect(id.utf8.count <= 32)
            #expect((m["timestamp"]?.intValue ?? 0) > 0)

            // GET returns it with the same seq and timestamp, to the app and both participants only.
            let got = try app.request(.get, "/v1/messages/\(id)")
            #expect(got.status == 200)
            #expect(got.json?["seq"] == m["seq"])
            #expect(got.json?["timestamp"] == m["timestamp"])
            let tokenB = try app.token(for: "b")
            let asB = try server.request(.get, "/v1/messages/\(id)", bearer: tokenB)
            #expect(asB.status == 200)
            #expect(asB.json?["suppressed"] == nil, "suppressed is for the app key only")
            #expect(asB.json?["push"] == nil, "push is for the app and the sender only")
            Self.expectProblem(try server.request(.get, "/v1/messages/\(id)", bearer: try app.token(for: "c")), 404, .messageNotFound)
            Self.expectProblem(try app.request(.get, "/v1/messages/nope"), 404, .messageNotFound)

            // A user token sends as itself; `from` naming someone else → 403.
            let own = try server.request(
                .post, "/v1/messages", bearer: tokenB, json: "{\"conversation_type\":\"peer\",\"to\":\"a\",\"type\":1,\"body\":{\"text\":\"yo\"}}")
            #expect(own.status == 201, "\(own.text)")
            #expect(own.json?["from"] == "b")
            #expect(own.json?["seq"] == 2, "A→B and B→A share one sequence")
            Self.expectProblem(
                try server.request(
                    .post, "/v1/messages", bearer: tokenB,
                    json: "{\"from\":\"a\",\"conversation_type\":\"peer\",\"to\":\"c\",\"type\":1,\"body\":{\"text\":\"yo\"}}"), 403, .forbidden)

            let sent = try PeerMessages.events(app, "message.sent")
            #expect(sent.count == 2)
            #expect(sent.first?["data"]?["message"]?["message_id"]?.stringValue == id)
            #expect(sent.first?["data"]?["message"]?["seq"] == 1)
            #expect(try PeerMessages.events(app, "message.sent", audience: "b").count == 2)
            #expect(try PeerMessages.events(app, "message.sent", audience: "c").isEmpty)
        }
    }

    @Test func concurrentSendersGetGapFreeSeqsAndHistoryWalksVisitEachOnce() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            try app.createUser("a")
            try app.createUser("b")
            let failures = Atomic<Int>(0)
            DispatchQueue.concurrentPerform(iterations: 16) { worker in
                for i in 0..<50 {
                    let (from, to) = (worker + i) % 2 == 0 ? ("a", "b") : ("b", "a")
                    let r = try? PeerMessages.sendText(app, from, to, "w\(worker) m\(i)")
                    if r?.status != 201 { failures.add(1, ordering: .relaxed) }
                }
            }
            #expect(failures.load(ordering: .relaxed) == 0)

            let forward = try PeerMessages.walk(app, "a", "b", query: "?direction=forward&limit=100")
            #expect(PeerMessages.seqs(forward) == Array(1...800))
            let stamps = forward.compactMap { $0["timestamp"]?.intValue }
            #expect(stamps == stamps.sorted(), "timestamps never decrease with seq")
            #expect(Set(forward.compactMap { $0["message_id"]?.stringValue }).count == 800)
            let backward = try PeerMessages.walk(app, "b", "a", query: "?limit=37")
            #expect(PeerMessages.seqs(backward) == Array((1...800).reversed()))
        }
    }

    @Test func retriedClientMsgIDReturnsTheSameMessageAndChangesNothing() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }
            let first = try PeerMessages.sendText(app, "a", "b", "once", extra: "\"client_msg_id\":\"retry-1\"")
            #expect(first.status == 201)
            #expect(first.headers["Parley-Duplicate"] == nil)
            let again = try PeerMessages.sendText(app, "a", "b", "once", extra: "\"client_msg_id\":\"retry-1\"")
            #expect(again.status == 200, "\(again.text)")
            #expect(again.headers["Parley-Duplicate"] == "true")
            #expect(again.json?["message_id"] == first.json?["message_id"])
            #expect(again.json?["seq"] == first.json?["seq"])
            #expect(again.json?["timestamp"] == first.json?["timestamp"])
            #expect(try PeerMessages.events(app, "message.sent").count == 1, "no second event")
            #expect(try PeerMessages.conversation(app, "b", "a")?["unread_count"] == 1, "no second unread")
            #expect(try PeerMessages.history(app, "b", "a").count == 1)

            // Different content → 409; another sender may reuse the value.
            Self.expectProblem(try PeerMessages.sendText(app, "a", "b", "other", extra: "\"client_msg_id\":\"retry-1\""), 409, .clientMsgIdConflict)
            Self.expectProblem(try PeerMessages.sendText(app, "a", "c", "once", extra: "\"client_msg_id\":\"retry-1\""), 409, .clientMsgIdConflict)
            #expect(try PeerMessages.sendText(app, "b", "a", "once", extra: "\"client_msg_id\":\"retry-1\"").status == 201)

            // Unstored messages are deduplicated too, with seq null.
            let command = try PeerMessages.send(app, "a", "b", type: 2, body: "{\"data\":\"aGk=\"}", extra: "\"client_msg_id\":\"cmd-1\"")
            #expect(command.status == 201)
            let commandAgain = try PeerMessages.send(app, "a", "b", type: 2, body: "{\"data\":\"aGk=\"}", extra: "\"client_msg_id\":\"cmd-1\"")
            #expect(commandAgain.status == 200)
            #expect(commandAgain.json?["message_id"] == command.json?["message_id"])
            #expect(commandAgain.json?["seq"] == .null)

            // Concurrent first sends with one key: one message.
            let ids = LockedValueBox<[String]>([])
            DispatchQueue.concurrentPerform(iterations: 6) { _ in
                if let r = try? PeerMessages.sendText(app, "c", "a", "race", extra: "\"client_msg_id\":\"race\""),
                    let id = r.json?["message_id"]?.stringValue
                {
                    ids.mutate { $0.append(id) }
                }
            }
            #expect(ids.value.count == 6)
            #expect(Set(ids.value).count == 1)
        }
    }

    @Test func bodyAndOptionRulesAnswerWithTheirCodes() throws {
        try withApp(testClock: true, settings: "{\"text_max_bytes\":64}", unthrottled: true) { server, app in
            try app.createUser("a")
            try app.createUser("b")
            Self.expectProblem(try PeerMessages.sendText(app, "a", "b", String(repeating: "x", count: 65)), 413, .messageTooLarge)
            #expect(try PeerMessages.sendText(app, "a", "b", String(repeating: "x", count: 64)).status == 201)
            Self.expectProblem(
                try PeerMessages.send(app, "a", "b", type: 11, body: "{\"url\":\"https://x/y.exe\",\"file_name\":\"y.exe\"}"), 422,
                .fileTypeUnsupported)
            #expect(try PeerMessages.send(app, "a", "b", type: 11, body: "{\"url\":\"https://x/y.PNG\",\"file_name\":\"y.PNG\"}").status == 201)
            Self.expectProblem(
                try PeerMessages.send(app, "a", "b", type: 10, body: "{\"items\":[{\"type\":20,\"body\":{\"text\":\"x\"}}]}"), 422,
                .unsupportedOperation)
            Self.expectInvalid(try PeerMessages.send(app, "a", "b", type: 1, body: "{\"text\":5}"), field: "body.body.text")
            Self.expectInvalid(try PeerMessages.sendText(app, "a", "b", ""), field: "body.body.text")
            Self.expectInvalid(try PeerMessages.send(app, "a", "b", type: 31, body: "{}"), field: "body.type")
            Self.expectInvalid(try PeerMessages.sendText(app, "a", "a"), field: "body.to")
            Self.expectInvalid(
                try PeerMessages.sendText(app, "a", "b", extra: "\"extended_data\":\"\(String(repeating: "e", count: 1025))\""),
                field: "body.extended_data")
            Self.expectInvalid(try PeerMessages.sendText(app, "a", "b", extra: "\"priority\":1.5"), field: "body.priority")
            Self.expectProblem(try PeerMessages.send(app, "a", "b", type: 20, body: "{\"text\":\"x\"}"), 422, .unsupportedOperation)
            Self.expectProblem(try PeerMessages.sendText(app, "a", "b", extra: "\"repeat_count\":2"), 422, .unsupportedOperation)
            Self.expectProblem(try PeerMessages.sendText(app, "a", "b", extra: "\"storage\":true"), 422, .unsupportedOperation)
            Self.expectProblem(
                try PeerMessages.send(app, "a", "b", type: 2, body: "{\"data\":\"aGk=\"}", extra: "\"need_receipt\":true"), 422, .unsupportedOperation
            )
            Self.expectProblem(try PeerMessages.sendText(app, "a", "ghost"), 404, .targetNotFound)
            Self.expectProblem(try PeerMessages.sendText(app, "ghost", "b"), 404, .userNotFound)
            Self.expectProblem(try PeerMessages.sendText(app, "a", "b", extra: "\"reply_to\":\"mNope\""), 404, .messageNotFound)
            // Nothing of the failures was stored: seqs 1 and 2 are the two accepted sends.
            #expect(PeerMessages.seqs(try PeerMessages.history(app, "a", "b")) == [2, 1])
        }
    }

    @Test func unstoredMessagesReachStreamsButNotHistory() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            try app.createUser("a")
            try app.createUser("b")
            let command = try PeerMessages.send(app, "a", "b", type: 2, body: "{\"data\":\"aGk=\"}")
            #expect(command.status == 201, "\(command.text)")
            #expect(command.json?["seq"] == .null)
            #expect(command.json?["stored"] == false)
            let online = try PeerMessages.sendText(app, "a", "b", extra: "\"online_only\":true")
            #expect(online.json?["seq"] == .null)
            #expect(online.json?["online_only"] == true)
            #expect(try PeerMessages.history(app, "b", "a").isEmpty)
            #expect(try PeerMessages.conversation(app, "b", "a") == nil, "unstored messages create no conversation")
            #expect(try PeerMessages.events(app, "message.sent", audience: "b").count == 2)
            // A GET of an unstored message finds nothing stored.
            Self.expectProblem(try app.request(.get, "/v1/messages/\(command.json?["message_id"]?.stringValue ?? "")"), 404, .messageNotFound)
        }
    }

    // MARK: - Policy

    @Test func blacklistSilentSuppressesAndErrorRejects() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            try app.createUser("a")
            try app.createUser("b")
            #expect(try app.request(.post, "/v1/users/b/blacklist", json: "{\"user_ids\":[\"a\"]}").status == 200)
            #expect(try PeerMessages.sendText(app, "b", "a", "first").status == 201)

            // silent (default): a fake success with a seq, visible to the sender and the app only.
            let tokenA = try app.token(for: "a")
            let silent = try server.request(
                .post, "/v1/messages", bearer: tokenA, json: "{\"conversation_type\":\"peer\",\"to\":\"b\",\"type\":1,\"body\":{\"text\":\"psst\"}}")
            #expect(silent.status == 201, "\(silent.text)")
            #expect(silent.json?["seq"] == 2)
            #expect(silent.json?["suppressed"] == nil, "the sender cannot tell")
            let id = silent.json?["message_id"]?.stringValue ?? ""
            #expect(try app.request(.get, "/v1/messages/\(id)").json?["suppressed"] == "blacklist")
            Self.expectProblem(try server.request(.get, "/v1/messages/\(id)", bearer: try app.token(for: "b")), 404, .messageNotFound)
            #expect(PeerMessages.seqs(try PeerMessages.history(app, "b", "a")) == [1])
            #expect(PeerMessages.seqs(try PeerMessages.history(app, "b", "a", query: "?include_hidden=true")) == [2, 1])
            #expect(PeerMessages.seqs(try PeerMessages.history(app, "a", "b")) == [2, 1])
            #expect(try PeerMessages.conversation(app, "b", "a")?["unread_count"] == 0)
            #expect(try PeerMessages.conversation(app, "b", "a")?["last_seq"] == 1)
            #expect(try PeerMessages.conversation(app, "a", "b")?["last_seq"] == 2)
            let events = try PeerMessages.events(app, "message.sent")
            #expect(events.last?["data"]?["message"]?["suppressed"] == "blacklist")
            #expect(try PeerMessages.events(app, "message.sent", audience: "b").count == 1)

            // error: 403 and nothing stored.
            try PeerMessages.patchSettings(app, "{\"blacklist_feedback\":\"error\"}")
            Self.expectProblem(try PeerMessages.sendText(app, "a", "b"), 403, .blockedByRecipient)
            #expect(PeerMessages.seqs(try PeerMessages.history(app, "a", "b")) == [2, 1])
            // skip_checks bypasses the blacklist.
            #expect(try PeerMessages.sendText(app, "a", "b", extra: "\"skip_checks\":true").json?["seq"] == 3)
        }
    }

    @Test func friendOnlyNeedsMutualFriendsUnlessSkipChecks() throws {
        try withApp(testClock: true, settings: "{\"friend_only_c2c\":true}", unthrottled: true) { server, app in
            try app.createUser("a")
            try app.createUser("b")
            Self.expectProblem(try PeerMessages.sendText(app, "a", "b"), 403, .notFriendsC2c)
            #expect(try PeerMessages.sendText(app, "a", "b", extra: "\"skip_checks\":true").status == 201)
            Self.expectProblem(
                try server.request(
                    .post, "/v1/messages", bearer: try app.token(for: "a"),
                    json: "{\"conversation_type\":\"peer\",\"to\":\"b\",\"type\":1,\"body\":{\"text\":\"x\"},\"skip_checks\":true}"), 403,
                .forbidden)
            let befriend = try app.request(.post, "/v1/users/a/friends", json: "{\"friend_id\":\"b\"}")
            #expect(befriend.status == 201, "\(befriend.text)")
            #expect(try PeerMessages.sendText(app, "a", "b").status == 201)
            #expect(try PeerMessages.sendText(app, "b", "a").status == 201)
        }
    }

    @Test func sensitiveWordsRejectOrMask() throws {
        try withApp(testClock: true, settings: "{\"sensitive_words\":[\"bad\"]}", unthrottled: true) { server, app in
            try app.createUser("a")
            try app.createUser("b")
            Self.expectProblem(try PeerMessages.sendText(app, "a", "b", "so BAD"), 422, .sensitiveWord)
            #expect(try PeerMessages.history(app, "a", "b").isEmpty)
            let custom = try PeerMessages.send(app, "a", "b", type: 200, body: "{\"data\":\"bad\",\"sub_type\":1}")
            #expect(custom.status == 201, "custom messages are never filtered: \(custom.text)")
            #expect(try PeerMessages.sendText(app, "a", "b", "so BAD", extra: "\"skip_checks\":true").status == 201)
            try PeerMessages.patchSettings(app, "{\"sensitive_word_action\":\"mask\"}")
            let masked = try PeerMessages.sendText(app, "a", "b", "Bad, badder")
            #expect(masked.status == 201)
            #expect(masked.json?["body"]?["text"] == "***, ***der")
            #expect(try PeerMessages.history(app, "b", "a").first?["body"]?["text"] == "***, ***der")
        }
    }

    @Test func globallyMutedSenderIsRejectedUntilTheMuteEnds() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            try app.createUser("a")
            try app.createUser("b")
            #expect(try app.request(.post, "/v1/users/a/mute", json: "{\"duration_s\":60}").status == 200)
            Self.expectProblem(try PeerMessages.sendText(app, "a", "b"), 403, .senderMuted)
            #expect(try PeerMessages.sendText(app, "b", "a").status == 201, "a muted user still receives")
            #expect(try PeerMessages.sendText(app, "a", "b", extra: "\"skip_checks\":true").status == 201)
            try server.advanceClock(ms: 61_000)
            #expect(try PeerMessages.sendText(app, "a", "b").status == 201)
        }
    }

    // MARK: - Replies, combines, history filters

    @Test func repliesAndCombinedMessages() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }
            let root = try PeerMessages.sendText(app, "a", "b", "root")
            let rootID = root.json?["message_id"]?.stringValue ?? ""
            let reply = try PeerMessages.sendText(app, "b", "a", "re", extra: "\"reply_to\":\(PeerMessages.q(rootID))")
            #expect(reply.status == 201, "\(reply.text)")
            #expect(reply.json?["root_message_id"]?.stringValue == rootID)
            #expect(reply.json?["reply"]?["message_id"]?.stringValue == rootID)
            #expect(reply.json?["reply"]?["state"] == "normal")
            #expect(reply.json?["reply"]?["snapshot"]?["body"]?["text"] == "root")
            #expect(try app.request(.get, "/v1/messages/\(rootID)").json?["reply_count"] == 1)
            let counted = try PeerMessages.events(app, "message.reply_count_updated")
            #expect(counted.count == 1)
            #expect(counted.first?["data"]?["reply_count"] == 1)
            // A reply to a message of another conversation → 404.
            let other = try PeerMessages.sendText(app, "a", "c", "elsewhere")
            Self.expectProblem(
                try PeerMessages.sendText(app, "a", "b", extra: "\"reply_to\":\(PeerMessages.q(other.json?["message_id"]?.stringValue ?? ""))"), 404,
                .messageNotFound)

            // Combine snapshots the listed messages in the given order.
            let ids = [reply.json?["message_id"]?.stringValue ?? "", rootID, other.json?["message_id"]?.stringValue ?? ""]
            let combine = try PeerMessages.send(
                app, "a", "b", type: 100, body: "{\"title\":\"chat\",\"message_ids\":[\(ids.map(PeerMessages.q).joined(separator: ","))]}")
            #expect(combine.status == 201, "\(combine.text)")
            #expect(combine.json?["body"]?["message_count"] == 3)
            #expect(combine.json?["body"]?["combine_id"]?.stringValue?.isEmpty == false)
            let combineID = combine.json?["message_id"]?.stringValue ?? ""
            var walked: [String] = []
            var cursor: String?
            repeat {
                let r = try app.request(
                    .get, "/v1/messages/\(combineID)/combined?limit=2" + (cursor.map { "&cursor=\($0)" } ?? ""))
                #expect(r.status == 200, "\(r.text)")
                walked += r.json?["items"]?.arrayValue?.compactMap { $0["message_id"]?.stringValue } ?? []
                cursor = r.json?["next_cursor"]?.stringValue
            } while cursor != nil
            #expect(walked == ids)
            Self.expectProblem(try app.request(.get, "/v1/messages/\(rootID)/combined"), 422, .unsupportedOperation)
            // b cannot see a↔c messages: combining them as b → 404.
            Self.expectProblem(
                try PeerMessages.send(app, "b", "a", type: 100, body: "{\"title\":\"t\",\"message_ids\":[\(PeerMessages.q(ids[2]))]}"), 404,
                .messageNotFound
            )
        }
    }

    @Test func historyBoundsTypesAndCursors() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            try app.createUser("a")
            try app.createUser("b")
            var stamps: [Int64] = []
            for i in 1...10 {
                let r =
                    i % 3 == 0
                    ? try PeerMessages.send(app, "a", "b", type: 200, body: "{\"data\":\"d\",\"sub_type\":1}")
                    : try PeerMessages.sendText(app, "a", "b", "t\(i)")
                stamps.append(r.json?["timestamp"]?.intValue ?? 0)
                try server.advanceClock(ms: 10)
            }
            #expect(PeerMessages.seqs(try PeerMessages.history(app, "a", "b", query: "?limit=3")) == [10, 9, 8])
            #expect(PeerMessages.seqs(try PeerMessages.history(app, "a", "b", query: "?after_seq=7")) == [8, 9, 10], "forward when only after_seq")
            #expect(PeerMessages.seqs(try PeerMessages.history(app, "a", "b", query: "?before_seq=4")) == [3, 2, 1])
            #expect(PeerMessages.seqs(try PeerMessages.history(app, "a", "b", query: "?after_seq=2&before_seq=6&direction=forward")) == [3, 4, 5])
            #expect(PeerMessages.seqs(try PeerMessages.history(app, "a", "b", query: "?types=200")) == [9, 6, 3])
            #expect(
                PeerMessages.seqs(try PeerMessages.history(app, "a", "b", query: "?start_at=\(stamps[1])&end_at=\(stamps[4])&direction=forward")) == [
                    2, 3, 4,
                ])
            #expect(PeerMessages.seqs(try PeerMessages.walk(app, "b", "a", query: "?types=1&limit=2")) == [10, 8, 7, 5, 4, 2, 1])
            Self.expectProblem(try app.request(.get, "/v1/users/a/conversations/peer/b/messages?cursor=bogus"), 400, .invalidCursor)
            let page = try app.request(.get, "/v1/users/a/conversations/peer/b/messages?limit=2")
            let cursor = page.json?["next_cursor"]?.stringValue ?? ""
            Self.expectProblem(
                try app.request(.get, "/v1/users/a/conversations/peer/b/messages?limit=2&types=1&cursor=\(cursor)"), 400, .invalidCursor)
            Self.expectInvalid(try app.request(.get, "/v1/users/a/conversations/peer/b/messages?limit=0"), field: "limit")
            Self.expectInvalid(try app.request(.get, "/v1/users/a/conversations/room/b/messages"), field: "type")
            // A user token reads only its own view.
            Self.expectProblem(
                try server.request(.get, "/v1/users/a/conversations/peer/b/messages", bearer: try app.token(for: "b")), 403, .forbidden)
        }
    }

    // MARK: - Batch send and broadcast

    @Test func batchSendGivesPerRecipientResultsAndDerivedKeys() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }
            let body =
                "{\"from\":\"a\",\"to_user_ids\":[\"b\",\"c\",\"ghost\",\"b\",\"a\"],\"type\":1,\"body\":{\"text\":\"hi all\"},\"client_msg_id\":\"bk\"}"
            let r = try app.request(.post, "/v1/messages/batch", json: body)
            #expect(r.status == 200, "\(r.text)")
            let results = r.json?["results"]?.arrayValue ?? []
            #expect(results.map { $0["index"]?.intValue } == [0, 1, 2, 3, 4])
            #expect(results.map { $0["id"]?.stringValue } == ["b", "c", "ghost", "b", "a"])
            #expect(
                results.map { $0["ok"] == true ? nil : $0["error"]?["code"]?.intValue.map(Int.init) } == [
                    nil, nil, ErrorCode.targetNotFound.code, ErrorCode.invalidParams.code, ErrorCode.invalidParams.code,
                ])
            #expect(results[0]["data"]?["seq"] == 1)
            let first = results[0]["data"]?["message_id"]
            #expect(try app.request(.get, "/v1/messages/\(first?.stringValue ?? "")").json?["client_msg_id"] == "bk:b")
            // Retrying the batch returns the same messages (derived keys) and writes no new events.
            let again = try app.request(.post, "/v1/messages/batch", json: body)
            #expect(again.json?["results"]?[0]?["data"]?["message_id"] == first)
            #expect(try PeerMessages.events(app, "message.sent").count == 2)
            // Request-level problems fail the whole request.
            Self.expectInvalid(
                try app.request(.post, "/v1/messages/batch", json: "{\"from\":\"a\",\"to_user_ids\":[],\"type\":1,\"body\":{\"text\":\"x\"}}"),
                field: "body.to_user_ids")
            Self.expectProblem(
                try app.request(
                    .post, "/v1/messages/batch",
                    json: "{\"from\":\"a\",\"to_user_ids\":[\"b\"],\"type\":1,\"body\":{\"text\":\"\(String(repeating: "x", count: 3000))\"}}"),
                413, .messageTooLarge)
            Self.expectProblem(try server.request(.post, "/v1/messages/batch", bearer: try app.token(for: "a"), json: body), 403, .forbidden)
        }
    }

    @Test func broadcastIsAcceptedAndNeverStored() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            try app.createUser("a")
            try app.createUser("b")
            let r = try app.request(.post, "/v1/messages/broadcast", json: "{\"from\":\"a\",\"type\":1,\"body\":{\"text\":\"news\"}}")
            #expect(r.status == 202, "\(r.text)")
            #expect(r.json?["message_id"]?.stringValue?.isEmpty == false)
            let events = try PeerMessages.events(app, "message.broadcast", audience: "b")
            #expect(events.count == 1)
            #expect(events.first?["data"]?["message"]?["is_broadcast"] == true)
            #expect(try PeerMessages.history(app, "a", "b").isEmpty)
            Self.expectInvalid(
                try app.request(.post, "/v1/messages/broadcast", json: "{\"from\":\"a\",\"type\":100,\"body\":{}}"), field: "body.type")
            Self.expectProblem(
                try app.request(.post, "/v1/messages/broadcast", json: "{\"from\":\"ghost\",\"type\":1,\"body\":{\"text\":\"x\"}}"), 404,
                .userNotFound)
        }
    }

    // MARK: - Hard user delete

    @Test func hardDeletedSenderLeavesTombstonesInTheOtherSidesHistory() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            try app.createUser("a")
            try app.createUser("b")
            try PeerMessages.sendText(app, "a", "b", "from a", extra: "\"client_msg_id\":\"k\"")
            try PeerMessages.sendText(app, "b", "a", "from b")
            #expect(try app.request(.delete, "/v1/users/a?mode=hard").status == 204)
            let items = try PeerMessages.history(app, "b", "a", query: "?direction=forward")
            #expect(PeerMessages.seqs(items) == [1, 2])
            #expect(items[0]["deleted"] == true)
            #expect(items[0]["body"] == .null)
            #expect(items[1]["body"]?["text"] == "from b")
            #expect(try PeerMessages.conversation(app, "b", "a")?["last_seq"] == 2)
            // The id may be created again: it starts without conversations or dedupe keys.
            try app.createUser("a")
            #expect(try PeerMessages.conversation(app, "a", "b") == nil)
            #expect(try PeerMessages.sendText(app, "a", "b", "new a", extra: "\"client_msg_id\":\"k\"").status == 201)
        }
    }

    /// `history_retention_days`: messages older than the horizon are purged by the retention timer; the sequence
    /// continues, a retried send of a purged message answers with its tombstone, and reading it by id is 404.
    @Test func historyRetentionPurgesOldMessagesAndNumberingContinues() throws {
        try withApp(testClock: true, settings: #"{"history_retention_days":1}"#, unthrottled: true) { server, app in
            try app.createUser("a")
            try app.createUser("b")
            let old = try PeerMessages.sendText(app, "a", "b", "old", extra: #""client_msg_id":"k-old""#)
            #expect(old.json?["seq"]?.intValue == 1)
            let oldID = try #require(old.json?["message_id"]?.stringValue)
            try server.advanceClock(ms: 86_400_000 + 3_600_000)

            let fresh = try PeerMessages.sendText(app, "a", "b", "fresh")
            #expect(fresh.json?["seq"]?.intValue == 2)
            #expect(PeerMessages.seqs(try PeerMessages.history(app, "b", "a")) == [2])
            Self.expectProblem(try app.request(.get, "/v1/messages/\(oldID)"), 404, .messageNotFound)
            let retried = try PeerMessages.sendText(app, "a", "b", "old", extra: #""client_msg_id":"k-old""#)
            #expect(retried.status == 200)
            #expect(retried.json?["message_id"]?.stringValue == oldID)
            #expect(retried.json?["seq"]?.intValue == 1)
            #expect(try PeerMessages.conversation(app, "b", "a")?["unread_count"]?.intValue == 1)
        }
    }

    /// History pages are written from the rows in place (MessageRow), single messages from a decoded Message: both
    /// feed the one Message JSON layout, so every viewer must see byte-for-byte equal objects either way.
    @Test func historyItemsEqualTheSingleMessageForEveryViewer() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            try app.createUser("a")
            try app.createUser("b")
            let quoted = "say \"hi\"\nback\\slash\u{01} é中"
            let first = try PeerMessages.sendText(
                app, "a", "b", quoted,
                extra: #""client_msg_id":"k-1","extended_data":"x\"y","priority":3,"push":{"title":"T"},"mentions":{"user_ids":["b"]}"#)
            let firstID = try #require(first.json?["message_id"]?.stringValue)
            let reply = try PeerMessages.sendText(app, "b", "a", "reply", extra: #""reply_to":"\#(firstID)","need_receipt":true"#)
            #expect(reply.status == 201, "\(reply.text)")
            let viewers: [(String, String?)] = [("app", nil), ("a", try app.token(for: "a")), ("b", try app.token(for: "b"))]
            for (name, token) in viewers {
                let path = name == "b" ? "/v1/users/b/conversations/peer/a/messages" : "/v1/users/a/conversations/peer/b/messages"
                let page = try token.map { try server.request(.get, path, bearer: $0) } ?? app.request(.get, path)
                #expect(page.status == 200, "\(page.text)")
                let items = page.json?["items"]?.arrayValue ?? []
                #expect(items.count == 2)
                for item in items {
                    let id = try #require(item["message_id"]?.stringValue)
                    let single =
                        try token.map { try server.request(.get, "/v1/messages/\(id)", bearer: $0) }
                        ?? app.request(.get, "/v1/messages/\(id)")
                    #expect(item == single.json, "viewer \(name), message \(id)")
                }
            }
        }
    }

    /// The pool runs generic plans (ParleyApp), which cannot see that history's time bounds are usually open: with
    /// the BRIN index on `timestamp` usable, a long conversation was read by a bitmap scan of all its rows and a sort
    /// (130 ms at 70,000 messages) instead of from the end of `messages_pkey`.
    @Test func historyOfALongConversationWalksThePrimaryKeyUnderTheGenericPlan() throws {
        try withApp(testClock: true, unthrottled: true) { server, app in
            try app.createUser("a")
            try app.createUser("b")
            try PeerMessages.sendText(app, "a", "b", "first")
            // 70,000 more messages in the same conversation, straight in SQL (a send each would take minutes), then stats.
            try server.sql(
                """
                INSERT INTO messages (app_id, conv_type, conv_id, seq, message_id, sender, recipient, type, body, timestamp)
                SELECT app_id, conv_type, conv_id, seq + g, message_id || '-' || g, sender, recipient, type, body, timestamp + g
                FROM messages, generate_series(1, 70000) g WHERE app_id = $1
                """, [app.appID])
            try server.sql("ANALYZE messages", [])
            let plan = try server.app.services.pool.withConnection { db -> String in
                try db.simpleQuery("PREPARE history_plan AS " + MessageStore.historySQL.descending)
                defer { _ = try? db.simpleQuery("DEALLOCATE history_plan") }
                let explained = try db.simpleQuery(
                    "EXPLAIN EXECUTE history_plan('\(app.appID)', 'peer', 'a b', 0, 9223372036854775807, -9223372036854775808, "
                        + "9223372036854775807, NULL, NULL, false, 'b', 21, false, NULL)")
                return try explained.rows.map { try $0[0].string }.joined(separator: "\n")
            }
            #expect(plan.contains("Index Scan Backward using messages_pkey"), "\(plan)")
            #expect(!plan.contains("messages_by_time"), "\(plan)")
            let page = try PeerMessages.history(app, "a", "b")
            #expect(PeerMessages.seqs(page).first == 70_001)
        }
    }
}

/// A value behind a lock, for collecting results from concurrent test threads.
final class LockedValueBox<T: Sendable>: Sendable {
    private let storage: Mutex<T>
    init(_ value: T) { storage = Mutex(value) }
    func mutate(_ body: (inout T) -> Void) { storage.withLock { body(&$0) } }
    var value: T { storage.withLock { $0 } }
}
