import Foundation
import ParleyHTTP
import ParleyPostgres
import ParleyTesting
import Testing

@testable import ParleyCore

/// Media messages that name uploaded files by `file_id` (docs/files.md#files-in-messages): the body filled from the
/// file, fresh signed URLs on every read, downloads for the message's readers only, the send's refusals, files deleted
/// with the only message that used them, and export/import carrying `file_id`s.
@Suite("Message files")
struct MessageFilesTests: ProblemAssertions {
    /// The path and query of an absolute URL of `server` (signed URLs carry the server's own base).
    static func path(of url: String, _ server: TestServer) -> String { String(url.dropFirst("http://127.0.0.1:\(server.port)".count)) }

    static func send(_ server: TestServer, bearer: String, _ json: String) throws -> TestResponse {
        try server.request(.post, "/v1/messages", bearer: bearer, json: json)
    }

    @Test func anImageMessageIsFilledFromItsFileAndReadsBackWithFreshURLs() throws {
        try withApp(testClock: true, transport: .sockets, settings: #"{"file_url_ttl_s":60}"#) { server, app in
            for user in ["alice", "bob", "carol"] { try app.createUser(user) }
            let (alice, bob, carol) = (try app.token(for: "alice"), try app.token(for: "bob"), try app.token(for: "carol"))
            let photo = try ImageDerivationTests.jpegWithMetadata(width: 1600, height: 900)
            let upload = try Files.upload(server, photo, name: "holiday.jpg", bearer: alice)
            #expect(upload.status == 201, "\(upload.text)")
            let fileID = try #require(upload.json?["file_id"]?.stringValue)
            // The derivation is timed and the stored bytes counted per app (/metrics, docs/files.md#operations).
            let metrics = try server.request(.get, "/metrics").text
            let derivations = metrics.split(separator: "\n").first { $0.hasPrefix("parley_file_derivation_seconds_count ") }
            #expect(derivations.flatMap { Int($0.split(separator: " ")[1]) }.map { $0 >= 1 } == true, "\(String(describing: derivations))")
            #expect(metrics.contains("parley_files_stored{app_id=\"\(app.appID)\"} 1\n"))
            #expect(metrics.contains("parley_file_stored_bytes{app_id=\"\(app.appID)\"} "))

            let sent = try Self.send(server, bearer: alice, #"{"conversation_type":"peer","to":"bob","type":11,"body":{"file_id":"\#(fileID)"}}"#)
            #expect(sent.status == 201, "\(sent.text)")
            let body = try #require(sent.json?["body"])
            let keys = body.objectValue?.keys.map { $0 } ?? []
            #expect(
                keys == [
                    "file_id", "url", "file_name", "file_size", "mime_type", "width", "height", "thumbnail_url", "thumbnail_width",
                    "thumbnail_height", "large_image_url", "large_width", "large_height",
                ], "the documented member order after file_id")
            #expect(body["file_name"] == "holiday.jpg" && body["mime_type"] == "image/jpeg")
            #expect(body["file_size"]?.intValue == Int64(photo.count))
            #expect((body["width"]?.intValue, body["height"]?.intValue) == (900, 1600))
            #expect((body["large_width"]?.intValue, body["large_height"]?.intValue) == (720, 1280))
            #expect((body["thumbnail_width"]?.intValue, body["thumbnail_height"]?.intValue) == (198, 352))
            let sentURL = try #require(body["thumbnail_url"]?.stringValue)
            let thumbnail = try Files.get(server, Self.path(of: sentURL, server), bearer: nil)
            #expect(thumbnail.status == 200 && thumbnail.headers["Content-Type"] == "image/jpeg")
            let messageID = try #require(sent.json?["message_id"]?.stringValue)

            // A minute later the URLs of the send have expired; every read signs them again.
            _ = try server.request(.post, "/v1/test/clock/advance", bearer: server.adminKey, json: #"{"ms":61000}"#)
            Self.expectProblem(try Files.get(server, Self.path(of: sentURL, server), bearer: nil), 403, .filePermissionDenied)
            let read = try server.request(.get, "/v1/messages/\(messageID)", bearer: bob)
            #expect(read.status == 200, "\(read.text)")
            let freshURL = try #require(read.json?["body"]?["thumbnail_url"]?.stringValue)
            #expect(freshURL != sentURL)
            #expect(try Files.get(server, Self.path(of: freshURL, server), bearer: nil).body == thumbnail.body)
            let history = try server.request(.get, "/v1/users/bob/conversations/peer/alice/messages", bearer: bob)
            let listed = try #require(history.json?["items"]?.arrayValue?.first?["body"])
            #expect(listed["file_id"]?.stringValue == fileID)
            let listedURL = try #require(listed["url"]?.stringValue)
            #expect(try Files.get(server, Self.path(of: listedURL, server), bearer: nil).status == 200, "history signs them too")
            let conversation = try server.request(.get, "/v1/users/bob/conversations/peer/alice", bearer: bob)
            let lastURL = try #require(conversation.json?["last_message"]?["body"]?["url"]?.stringValue)
            #expect(try Files.get(server, Self.path(of: lastURL, server), bearer: nil).status == 200, "and a conversation's last message")

            // Through the API with a token: the recipient reads the message, so it may download; carol may not.
            #expect(try Files.get(server, "/v1/files/\(fileID)?variant=large", bearer: bob).status == 200)
            #expect(try server.request(.get, "/v1/files/\(fileID)/meta", bearer: bob).status == 200)
            Self.expectProblem(try Files.get(server, "/v1/files/\(fileID)", bearer: carol), 403, .filePermissionDenied)
            Self.expectProblem(try server.request(.get, "/v1/files/\(fileID)/meta", bearer: carol), 403, .filePermissionDenied)
        }
    }

    @Test func aSendNamingAFileIsRefusedWhenItMayNotUseIt() throws {
        try withApp(transport: .sockets) { server, app in
            for user in ["alice", "bob"] { try app.createUser(user) }
            let (alice, bob) = (try app.token(for: "alice"), try app.token(for: "bob"))
            let doc = try #require(
                try Files.upload(server, FilesTests.randomBytes(3000), name: "plan.pdf", bearer: alice).json?["file_id"]?.stringValue)
            let image = try #require(
                try Files.upload(server, try ImageDerivationTests.jpegWithMetadata(width: 64, height: 48), name: "a.jpg", bearer: alice)
                    .json?["file_id"]?.stringValue)
            func body(_ type: Int, _ member: String) -> String { #"{"conversation_type":"peer","to":"bob","type":\#(type),"body":\#(member)}"# }

            Self.expectProblem(try Self.send(server, bearer: alice, body(12, #"{"file_id":"f_nosuchfile0000000000000"}"#)), 404, .fileNotFound)
            Self.expectProblem(
                try Self.send(
                    server, bearer: bob, body(12, #"{"file_id":"\#(doc)"}"#).replacingOccurrences(of: #""to":"bob""#, with: #""to":"alice""#)),
                403, .filePermissionDenied)
            Self.expectProblem(try Self.send(server, bearer: alice, body(11, #"{"file_id":"\#(doc)"}"#)), 422, .fileTypeUnsupported)
            Self.expectProblem(try Self.send(server, bearer: alice, body(13, #"{"file_id":"\#(image)"}"#)), 422, .fileTypeUnsupported)
            // Without file_id a body still needs its url and name.
            Self.expectProblem(try Self.send(server, bearer: alice, body(12, #"{"file_size":1}"#)), 400, .invalidParams)
            // A file message may carry any kind of file, and the app may send any file of the app.
            let asFile = try app.request(
                .post, "/v1/messages",
                json: #"{"from":"bob","conversation_type":"peer","to":"alice","type":12,"body":{"file_id":"\#(image)","file_name":"photo.jpg"}}"#)
            #expect(asFile.status == 201, "\(asFile.text)")
            #expect(asFile.json?["body"]?["file_name"] == "photo.jpg", "a given name wins")
            #expect(asFile.json?["body"]?["width"] == nil, "a file message has no image members")
            // Items of a multiple message are filled too.
            let multiple = try Self.send(
                server, bearer: alice,
                body(
                    10,
                    #"{"items":[{"type":1,"body":{"text":"look"}},{"type":11,"body":{"file_id":"\#(image)"}},{"type":12,"body":{"file_id":"\#(doc)"}}]}"#
                ))
            #expect(multiple.status == 201, "\(multiple.text)")
            let items = try #require(multiple.json?["body"]?["items"]?.arrayValue)
            #expect(items[1]["body"]?["thumbnail_url"]?.stringValue?.contains("variant=thumbnail") == true)
            #expect(items[2]["body"]?["file_name"] == "plan.pdf" && items[2]["body"]?["url"] != nil)
        }
    }

    @Test func aVideoMessageTakesItsDurationFromTheFileWithinTwoSeconds() throws {
        let directory = try ImageDerivationTests.temporaryDirectory()
        try FilesTests.ffmpeg(["-f", "lavfi", "-i", "testsrc=duration=2:size=160x120:rate=10", "-pix_fmt", "yuv420p", directory + "/clip.mp4"])
        let clip = Array(try Data(contentsOf: URL(fileURLWithPath: directory + "/clip.mp4")))
        try withApp(transport: .sockets) { server, app in
            for user in ["alice", "bob"] { try app.createUser(user) }
            let fileID = try Files.uploaded(app, clip, name: "clip.mp4")
            func send(_ extra: String) throws -> TestResponse {
                try app.request(
                    .post, "/v1/messages",
                    json: #"{"from":"alice","conversation_type":"peer","to":"bob","type":14,"body":{"file_id":"\#(fileID)"\#(extra)}}"#)
            }
            let read = try send("")
            #expect(read.status == 201, "\(read.text)")
            let duration = try #require(read.json?["body"]?["duration_ms"]?.intValue)
            #expect(abs(duration - 2000) <= 100)
            #expect((read.json?["body"]?["first_frame_width"]?.intValue, read.json?["body"]?["first_frame_height"]?.intValue) == (160, 120))
            #expect(try send(#","duration_ms":3500"#).json?["body"]?["duration_ms"]?.intValue == 3500, "a given duration within 2 s wins")
            Self.expectProblem(try send(#","duration_ms":9000"#), 422, .fileDurationInvalid)
        }
    }

    @Test func revokingOrDeletingTheOnlyMessageThatUsedAFileDeletesIt() throws {
        try withApp(transport: .sockets) { server, app in
            for user in ["alice", "bob"] { try app.createUser(user) }
            let shared = try Files.uploaded(app, FilesTests.randomBytes(2000), name: "shared.pdf")
            let single = try Files.uploaded(app, FilesTests.randomBytes(2000), name: "single.pdf")
            func send(_ fileID: String) throws -> String {
                let r = try app.request(
                    .post, "/v1/messages",
                    json: #"{"from":"alice","conversation_type":"peer","to":"bob","type":12,"body":{"file_id":"\#(fileID)"}}"#)
                guard r.status == 201, let id = r.json?["message_id"]?.stringValue else { throw TestFailure("send failed: \(r.text)") }
                return id
            }
            let (first, second, third) = (try send(shared), try send(shared), try send(single))
            #expect(try app.request(.post, "/v1/messages/\(third)/revoke", json: "{}").status == 200)
            Self.expectProblem(try app.request(.get, "/v1/files/\(single)/meta"), 404, .fileNotFound)
            #expect(try app.request(.post, "/v1/messages/\(first)/revoke", json: "{}").status == 200)
            #expect(try app.request(.get, "/v1/files/\(shared)/meta").status == 200, "another message still uses it")
            let deleted = try app.request(.post, "/v1/messages/delete", json: #"{"scope":"everyone","message_ids":["\#(second)"]}"#)
            #expect(deleted.status == 200, "\(deleted.text)")
            Self.expectProblem(try app.request(.get, "/v1/files/\(shared)/meta"), 404, .fileNotFound)
            #expect(try Files.blobs(server, app) == 0)

            // With delete_files_with_messages off the file stays.
            #expect(try app.request(.patch, "/v1/settings", json: #"{"delete_files_with_messages":false}"#).status == 200)
            let kept = try Files.uploaded(app, FilesTests.randomBytes(2000), name: "kept.pdf")
            #expect(try app.request(.post, "/v1/messages/\(try send(kept))/revoke", json: "{}").status == 200)
            #expect(try app.request(.get, "/v1/files/\(kept)/meta").status == 200)
        }
    }

    @Test func aGenericPushOfAnImageMessageCarriesItsThumbnailURL() throws {
        let gateway = try PushFixtures.gateway()
        try withApp(transport: .sockets) { server, app in
            for user in ["alice", "bob"] { try app.createUser(user) }
            try PushFixtures.configure(app, gateway, #""format":"generic""#)
            try PushFixtures.device(app, "bob", key: "bob-phone")
            let image = try Files.uploaded(app, try ImageDerivationTests.jpegWithMetadata(width: 640, height: 480), name: "cat.jpg")
            let sent = try app.request(
                .post, "/v1/messages", json: #"{"from":"alice","conversation_type":"peer","to":"bob","type":11,"body":{"file_id":"\#(image)"}}"#)
            let messageID = try #require(sent.json?["message_id"]?.stringValue, "\(sent.text)")
            let dry = try app.request(.post, "/v1/push/test", json: #"{"user_id":"bob","message_id":"\#(messageID)"}"#)
            let url = try #require(dry.json?["request"]?["body"]?["notification"]?["image_url"]?.stringValue, "\(dry.text)")
            #expect(url == sent.json?["body"]?["thumbnail_url"]?.stringValue)
            let thumbnail = try Files.get(server, Self.path(of: url, server), bearer: nil)
            #expect(thumbnail.status == 200 && thumbnail.headers["Content-Type"] == "image/jpeg")
            // A text message's notification has none.
            let text = try PushFixtures.send(app)["message_id"]?.stringValue ?? ""
            let plain = try app.request(.post, "/v1/push/test", json: #"{"user_id":"bob","message_id":"\#(text)"}"#)
            #expect(plain.json?["request"]?["body"]?["notification"]?["image_url"] == .null, "\(plain.text)")
            PushFixtures.drain(server)
        }
    }

    @Test func fileRetentionDeletesOldFilesNoMessageNames() throws {
        try withApp(testClock: true, transport: .sockets, settings: #"{"file_retention_days":1}"#) { server, app in
            for user in ["alice", "bob"] { try app.createUser(user) }
            let named = try Files.uploaded(app, FilesTests.randomBytes(2000), name: "named.pdf")
            let lonely = try Files.uploaded(app, FilesTests.randomBytes(2000), name: "lonely.pdf")
            let sent = try app.request(
                .post, "/v1/messages", json: #"{"from":"alice","conversation_type":"peer","to":"bob","type":12,"body":{"file_id":"\#(named)"}}"#)
            #expect(sent.status == 201, "\(sent.text)")
            try server.advanceClock(ms: 86_400_000 / 2)
            let young = try Files.uploaded(app, FilesTests.randomBytes(2000), name: "young.pdf")
            try server.advanceClock(ms: 86_400_000 / 2 + 3_600_000 + 1000)
            Self.expectProblem(try app.request(.get, "/v1/files/\(lonely)/meta"), 404, .fileNotFound)
            #expect(try app.request(.get, "/v1/files/\(named)/meta").status == 200, "a stored message names it")
            #expect(try app.request(.get, "/v1/files/\(young)/meta").status == 200, "younger than a day")
            #expect(try Files.blobs(server, app) == 2)
        }
    }

    /// More old files than one step of the sweep scans: the sweep's cursor goes through all of them in one run.
    @Test func fileRetentionGoesThroughManyFilesInOneRun() throws {
        try withApp(testClock: true, transport: .sockets, settings: #"{"file_retention_days":1}"#) { server, app in
            try app.createUser("alice")
            let kept = try Files.uploaded(app, FilesTests.randomBytes(2000), name: "kept.pdf")
            // 2,500 more files of one stored blob, written directly (uploading them would take the test's time).
            try server.sql(
                """
                WITH f AS (SELECT blob_id, sha256 FROM files WHERE app_id = $1 AND file_id = $2)
                INSERT INTO files (app_id, file_id, kind, file_name, mime_type, size, sha256, blob_id, owner_id, created_at)
                SELECT $1, 'f_bulk' || i, 'file', 'bulk.pdf', 'application/pdf', 2000, f.sha256, f.blob_id, 'alice', $3::bigint - i
                FROM f, generate_series(1, 2500) i
                """, [app.appID, kept, Int64(Date().timeIntervalSince1970 * 1000)])
            try server.sql(
                "UPDATE file_blobs SET refs = refs + 2500 WHERE app_id = $1 AND blob_id = (SELECT blob_id FROM files WHERE app_id = $1 AND file_id = $2)",
                [app.appID, kept])
            try server.sql("UPDATE file_usage SET files = files + 2500 WHERE app_id = $1", [app.appID])
            try server.advanceClock(ms: 2 * 86_400_000)
            #expect(try server.count("SELECT count(*) FROM files WHERE app_id = $1", [app.appID]) == 0)
            #expect(try server.count("SELECT count(*) FROM file_blobs WHERE app_id = $1", [app.appID]) == 0, "the last reference took the blob")
            #expect(try server.count("SELECT files FROM file_usage WHERE app_id = $1", [app.appID]) == 0)
        }
    }

    @Test func exportWritesFileIDsAndImportFillsThemWhereTheFilesExist() throws {
        try withApp(transport: .sockets) { server, app in
            for user in ["alice", "bob"] { try app.createUser(user) }
            let fileID = try Files.uploaded(app, FilesTests.randomBytes(2000), name: "plan.pdf")
            let sent = try app.request(
                .post, "/v1/messages",
                json: #"{"from":"alice","conversation_type":"peer","to":"bob","type":12,"client_msg_id":"c1","body":{"file_id":"\#(fileID)"}}"#)
            #expect(sent.status == 201, "\(sent.text)")
            let export = try app.request(.get, "/v1/messages/export?conversation_type=peer&user_id=alice&peer_id=bob")
            #expect(export.status == 200)
            let line = try #require(export.text.split(separator: "\n").first.map(String.init))
            #expect(try JSONValue.parse(Array(line.utf8))["body"]?["file_id"]?.stringValue == fileID)

            var ndjson = HTTPHeaders()
            ndjson.add("Content-Type", "application/x-ndjson")
            // Into another app, where the file does not exist: that line fails alone.
            let other = try server.createApp()
            for user in ["alice", "bob"] { try other.createUser(user) }
            let refused = try other.request(.post, "/v1/messages/import", json: line, headers: ndjson)
            #expect(refused.status == 200, "\(refused.text)")
            #expect(refused.json?["results"]?[0]?["error"]?["code"]?.intValue == 6_000_211, "\(refused.text)")
            // Into the same app as another conversation's message: filled from the file, and its readers may download it.
            try app.createUser("carol")
            let moved = line.replacingOccurrences(of: #""to":"bob""#, with: #""to":"carol""#)
                .replacingOccurrences(of: #""client_msg_id":"c1""#, with: #""client_msg_id":"c2""#)
            let imported = try app.request(.post, "/v1/messages/import", json: moved, headers: ndjson)
            #expect(imported.json?["results"]?[0]?["ok"] == true, "\(imported.text)")
            #expect(try Files.get(server, "/v1/files/\(fileID)", bearer: try app.token(for: "carol")).status == 200)
        }
    }
}
