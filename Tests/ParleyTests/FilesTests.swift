import Foundation
import ParleyHTTP
import ParleyPostgres
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains

/// Files through the HTTP API (docs/files.md): uploads streamed to storage, downloads with ranges and signed URLs,
/// who may read and delete, deduplicated storage, limits and the quota, and nothing half-stored after a failure.
@Suite("Files")
struct FilesTests: ProblemAssertions {
    /// Bytes that are no image and differ from upload to upload.
    static func randomBytes(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8.random(in: 0...255) } }

    @Test func aFileUploadedDownloadsByteForByteWithItsHeaders() throws {
        try withApp { server, app in
            try app.createUser("alice")
            let bytes = Self.randomBytes(600 * 1024 + 17)  // three chunks, the last a partial one
            let r = try Files.upload(app, bytes, name: "notes.bin", query: "user_id=alice")
            #expect(r.status == 201, "\(r.text)")
            let file = try #require(r.json)
            let fileID = try #require(file["file_id"]?.stringValue)
            #expect(fileID.hasPrefix("f_") && fileID.utf8.count == 24)
            #expect(file["kind"] == "file")
            #expect(file["file_name"] == "notes.bin")
            #expect(file["mime_type"] == "application/octet-stream")
            #expect(file["file_size"]?.intValue == Int64(bytes.count))
            #expect(file["sha256"]?.stringValue == Crypto.hex(Crypto.sha256(bytes)))
            #expect(file["owner_id"] == "alice")

            let download = try Files.get(app.server, "/v1/files/\(fileID)", bearer: app.key)
            #expect(download.status == 200)
            #expect(download.body == bytes)
            #expect(download.headers["ETag"] == "\"\(Crypto.hex(Crypto.sha256(bytes)))\"")
            #expect(download.headers["Content-Length"] == String(bytes.count))
            #expect(download.headers["Content-Disposition"] == "attachment; filename=\"notes.bin\"; filename*=UTF-8''notes.bin")
            #expect(download.headers["X-Content-Type-Options"] == "nosniff")
            #expect(download.headers["Cache-Control"] == "private, max-age=31536000, immutable")
            #expect(download.headers["Content-Security-Policy"]?.contains("sandbox") == true)

            let meta = try app.request(.get, "/v1/files/\(fileID)/meta")
            #expect(meta.status == 200)
            #expect(meta.json?["sha256"] == file["sha256"])
            let list = try app.request(.get, "/v1/files?user_id=alice")
            #expect(list.json?["items"]?.arrayValue?.compactMap { $0["file_id"]?.stringValue } == [fileID])
            #expect(try app.request(.get, "/v1/files?user_id=bob").json?["items"]?.arrayValue?.isEmpty == true)
            _ = server
        }
    }

    @Test func aMultipartFormUploadsItsFilePart() throws {
        try withApp { server, app in
            let bytes = Self.randomBytes(400_000)
            let boundary = "------------------------d74496d66958873e"
            var body = Array("--\(boundary)\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nskipped\r\n".utf8)
            body += Array(
                "--\(boundary)\r\nContent-Disposition: form-data; name=\"file\"; filename=\"report.pdf\"\r\nContent-Type: application/pdf\r\n\r\n"
                    .utf8)
            body += bytes + Array("\r\n--\(boundary)--\r\n".utf8)
            let r = try Files.upload(server, body, name: nil, bearer: app.key, contentType: "multipart/form-data; boundary=\(boundary)")
            #expect(r.status == 201, "\(r.text)")
            #expect(r.json?["file_name"] == "report.pdf")
            #expect(r.json?["mime_type"] == "application/pdf")
            #expect(r.json?["file_size"]?.intValue == Int64(bytes.count))
            let fileID = try #require(r.json?["file_id"]?.stringValue)
            #expect(try Files.get(server, "/v1/files/\(fileID)", bearer: app.key).body == bytes)
            let noFile = Array("--\(boundary)\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\ny\r\n--\(boundary)--\r\n".utf8)
            Self.expectProblem(
                try Files.upload(server, noFile, name: nil, bearer: app.key, contentType: "multipart/form-data; boundary=\(boundary)"), 400,
                .invalidParams)
            let truncated = Array(body.prefix(body.count - 30))
            Self.expectProblem(
                try Files.upload(server, truncated, name: nil, bearer: app.key, contentType: "multipart/form-data; boundary=\(boundary)"), 400,
                .invalidParams)
            #expect(try Files.blobs(server, app) == 1)
        }
    }

    @Test func anImageIsStoredUprightInThreeVariantsWithoutMetadata() throws {
        try withApp { server, app in
            // 1600×900 as stored, tagged orientation 6: upright it is 900×1600.
            let photo = try ImageDerivationTests.jpegWithMetadata(width: 1600, height: 900)
            #expect(ImageDerivationTests.contains(photo, Array("GPS".utf8)) || ImageDerivationTests.contains(photo, Array("Exif".utf8)))
            let r = try Files.upload(app, photo, name: "holiday.JPG")
            #expect(r.status == 201, "\(r.text)")
            let file = try #require(r.json)
            #expect(file["kind"] == "image" && file["mime_type"] == "image/jpeg")
            #expect(file["file_size"]?.intValue == Int64(photo.count))
            #expect(file["sha256"]?.stringValue == Crypto.hex(Crypto.sha256(photo)), "the hash of the bytes as uploaded")
            #expect((file["width"]?.intValue, file["height"]?.intValue) == (900, 1600))
            #expect((file["large_width"]?.intValue, file["large_height"]?.intValue) == (720, 1280))
            #expect((file["thumbnail_width"]?.intValue, file["thumbnail_height"]?.intValue) == (198, 352))
            for (field, size) in [("url", (900, 1600)), ("large_url", (720, 1280)), ("thumbnail_url", (198, 352))] {
                let url = try #require(file[field]?.stringValue)
                let served = try Files.get(server, String(url.dropFirst("http://127.0.0.1:\(server.port)".count)), bearer: nil)
                #expect(served.status == 200 && served.headers["Content-Type"] == "image/jpeg", "\(field)")
                #expect(served.headers["ETag"] == "\"\(Crypto.hex(Crypto.sha256(served.body)))\"", "each variant's ETag is its own bytes' hash")
                let decoded = try ImageDerivationTests.decoded(served.body)
                #expect((decoded.width, decoded.height) == size, "\(field)")
                let metadata = decoded.fields.filter { $0.hasPrefix("exif-") || ["xmp-data", "icc-profile-data", "iptc-data"].contains($0) }
                #expect(metadata.isEmpty, "\(field) keeps \(metadata)")
                #expect(!ImageDerivationTests.contains(served.body, Array("Exif\u{0}\u{0}".utf8)))
            }
            let again = try Files.upload(app, photo, name: "again.jpg")
            #expect(again.status == 201 && again.json?["file_id"] != file["file_id"])
            #expect(try Files.blobs(server, app) == 3, "the same photo is stored once: three variants")
            #expect(
                try Files.get(server, "/v1/files/\(try #require(file["file_id"]?.stringValue))?variant=first_frame", bearer: app.key).status == 404)

            Self.expectProblem(
                try Files.upload(app, ImageDerivationTests.pngHeader(width: 100_000, height: 100_000), name: "bomb.png"), 422, .fileError)
            Self.expectProblem(try Files.upload(app, Array(photo.prefix(photo.count / 3)), name: "cut.jpg"), 422, .fileError)
            #expect(try Files.blobs(server, app) == 3, "refused images leave nothing")
            #expect(try app.request(.delete, "/v1/files/\(try #require(file["file_id"]?.stringValue))").status == 204)
            #expect(try Files.blobs(server, app) == 3, "the other upload keeps the variants")
            #expect(try app.request(.delete, "/v1/files/\(try #require(again.json?["file_id"]?.stringValue))").status == 204)
            #expect(try Files.blobs(server, app) == 0)
        }
    }

    @Test func aVideoHasItsFirstFrameAndDurationAndAudioItsDuration() throws {
        let directory = try ImageDerivationTests.temporaryDirectory()
        // Two seconds of FFmpeg's test pattern at 320×240, and 1.5 s of a tone.
        try Self.ffmpeg(["-f", "lavfi", "-i", "testsrc=duration=2:size=320x240:rate=10", "-pix_fmt", "yuv420p", directory + "/clip.mp4"])
        try Self.ffmpeg(["-f", "lavfi", "-i", "sine=frequency=440:duration=1.5", directory + "/tone.mp3"])
        let clip = Array(try Data(contentsOf: URL(fileURLWithPath: directory + "/clip.mp4")))
        let tone = Array(try Data(contentsOf: URL(fileURLWithPath: directory + "/tone.mp3")))
        try withApp { server, app in
            let video = try Files.upload(app, clip, name: "clip.mp4")
            #expect(video.status == 201, "\(video.text)")
            #expect(video.json?["kind"] == "video" && video.json?["mime_type"] == "video/mp4")
            let duration = try #require(video.json?["duration_ms"]?.intValue)
            #expect(abs(duration - 2000) <= 100, "duration \(duration)")
            #expect((video.json?["first_frame_width"]?.intValue, video.json?["first_frame_height"]?.intValue) == (320, 240))
            let frameURL = try #require(video.json?["first_frame_url"]?.stringValue)
            let frame = try Files.get(server, String(frameURL.dropFirst("http://127.0.0.1:\(server.port)".count)), bearer: nil)
            #expect(frame.status == 200 && frame.headers["Content-Type"] == "image/jpeg")
            let decoded = try ImageDerivationTests.decoded(frame.body)
            #expect((decoded.width, decoded.height) == (320, 240))

            let audio = try Files.upload(app, tone, name: "tone.mp3")
            #expect(audio.status == 201 && audio.json?["kind"] == "audio", "\(audio.text)")
            let toneDuration = try #require(audio.json?["duration_ms"]?.intValue)
            #expect(abs(toneDuration - 1500) <= 100, "duration \(toneDuration)")

            // FFmpeg cannot read it: stored all the same, with nothing read from it.
            let unreadable = try Files.upload(app, Self.randomBytes(5000), name: "noise.mp4")
            #expect(unreadable.status == 201, "\(unreadable.text)")
            #expect(unreadable.json?["duration_ms"] == .null && unreadable.json?["first_frame_url"] == .null)
        }
    }

    /// Runs FFmpeg to make a test input (`-y`, quiet).
    static func ffmpeg(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/ffmpeg")
        process.arguments = ["-v", "error", "-nostdin", "-y"] + arguments
        try process.run()
        process.waitUntilExit()
        try #require(process.terminationStatus == 0, "ffmpeg \(arguments.joined(separator: " "))")
    }

    @Test func rangesAndConditionalRequests() throws {
        try withApp { server, app in
            let bytes = Self.randomBytes(300_000)
            let fileID = try Files.uploaded(app, bytes, name: "clip.bin")
            let path = "/v1/files/\(fileID)"
            let middle = try Files.get(server, path, bearer: app.key, headers: ["Range": "bytes=262000-262143"])
            #expect(middle.status == 206)
            #expect(middle.body == Array(bytes[262_000...262_143]), "a range across a chunk border")
            #expect(middle.headers["Content-Range"] == "bytes 262000-262143/300000")
            let tail = try Files.get(server, path, bearer: app.key, headers: ["Range": "bytes=-10"])
            #expect(tail.status == 206 && tail.body == Array(bytes.suffix(10)))
            let open = try Files.get(server, path, bearer: app.key, headers: ["Range": "bytes=299990-"])
            #expect(open.status == 206 && open.body == Array(bytes.suffix(10)))
            let past = try Files.get(server, path, bearer: app.key, headers: ["Range": "bytes=300000-"])
            Self.expectProblem(past, 416, .uploadProtocolError)
            #expect(past.headers["Content-Range"] == "bytes */300000")
            let several = try Files.get(server, path, bearer: app.key, headers: ["Range": "bytes=0-1,5-6"])
            #expect(several.status == 200 && several.body.count == bytes.count, "several ranges are answered whole")
            let etag = try #require(middle.headers["ETag"])
            let unchanged = try Files.get(server, path, bearer: app.key, headers: ["If-None-Match": etag])
            #expect(unchanged.status == 304 && unchanged.body.isEmpty)
            #expect(try Files.get(server, path, bearer: app.key, headers: ["If-None-Match": "\"other\""]).status == 200)
        }
    }

    @Test func signedURLsWorkWithoutCredentialsUntilTheyExpire() throws {
        try withApp(testClock: true, settings: #"{"file_url_ttl_s":60}"#) { server, app in
            let bytes = Self.randomBytes(1000)
            let r = try Files.upload(app, bytes, name: "a.bin")
            let url = try #require(r.json?["url"]?.stringValue)
            #expect(url.hasPrefix("http://127.0.0.1:\(server.port)/v1/files/"))
            let path = String(url.dropFirst("http://127.0.0.1:\(server.port)".count))
            let signed = try Files.get(server, path, bearer: nil)
            #expect(signed.status == 200 && signed.body == bytes)
            let tampered = path.replacingOccurrences(of: "signature=", with: "signature=x")
            Self.expectProblem(try Files.get(server, tampered, bearer: nil), 403, .filePermissionDenied)
            let otherFile = path.replacingOccurrences(of: try #require(r.json?["file_id"]?.stringValue), with: "f_0000000000000000000000")
            Self.expectProblem(try Files.get(server, otherFile, bearer: nil), 403, .filePermissionDenied)
            // Without a signature and a credential: 401, as any app route.
            #expect(try Files.get(server, path.components(separatedBy: "?")[0], bearer: nil).status == 401)
            _ = try server.request(.post, "/v1/test/clock/advance", bearer: server.adminKey, json: #"{"ms":61000}"#)
            Self.expectProblem(try Files.get(server, path, bearer: nil), 403, .filePermissionDenied)
        }
    }

    @Test func usersReadAndDeleteOnlyWhatTheyUploaded() throws {
        try withApp { server, app in
            try app.createUser("alice")
            try app.createUser("bob")
            let alice = try app.token(for: "alice")
            let bob = try app.token(for: "bob")
            let r = try Files.upload(server, Self.randomBytes(2000), name: "mine.bin", bearer: alice)
            #expect(r.status == 201 && r.json?["owner_id"] == "alice", "\(r.text)")
            let fileID = try #require(r.json?["file_id"]?.stringValue)
            Self.expectProblem(try Files.upload(server, [1], name: "x.bin", bearer: bob, query: "user_id=alice"), 403, .forbidden)
            #expect(try Files.get(server, "/v1/files/\(fileID)", bearer: alice).status == 200)
            Self.expectProblem(try Files.get(server, "/v1/files/\(fileID)", bearer: bob), 403, .filePermissionDenied)
            Self.expectProblem(try server.request(.get, "/v1/files/\(fileID)/meta", bearer: bob), 403, .filePermissionDenied)
            Self.expectProblem(try server.request(.delete, "/v1/files/\(fileID)", bearer: bob), 403, .filePermissionDenied)
            #expect(try server.request(.delete, "/v1/files/\(fileID)", bearer: alice).status == 204)
            Self.expectProblem(try Files.get(server, "/v1/files/\(fileID)", bearer: alice), 404, .fileNotFound)
            Self.expectProblem(try app.request(.delete, "/v1/files/\(fileID)"), 404, .fileNotFound)
            let deleted = try app.events().filter { $0["type"] == "file.deleted" }
            #expect(deleted.map { $0["data"]?["file_id"]?.stringValue } == [fileID])
        }
    }

    @Test func theSameBytesAreStoredOnceAndFreedWithTheirLastFile() throws {
        try withApp { server, app in
            let bytes = Self.randomBytes(5000)
            let first = try Files.uploaded(app, bytes, name: "one.bin")
            let second = try Files.uploaded(app, bytes, name: "two.bin")
            #expect(first != second)
            var stats = try app.request(.get, "/v1/stats").json
            #expect(stats?["files_total"]?.intValue == 2)
            #expect(stats?["file_bytes_total"]?.intValue == 5000, "stored once")
            #expect(try Files.blobs(server, app) == 1)
            #expect(try app.request(.delete, "/v1/files/\(first)").status == 204)
            #expect(try Files.get(server, "/v1/files/\(second)", bearer: app.key).body == bytes, "the other file keeps the bytes")
            #expect(try app.request(.delete, "/v1/files/\(second)").status == 204)
            stats = try app.request(.get, "/v1/stats").json
            #expect(stats?["files_total"]?.intValue == 0 && stats?["file_bytes_total"]?.intValue == 0)
            #expect(try Files.blobs(server, app) == 0)
        }
    }

    @Test func limitsKindsAndTheQuotaAreRefusedWithNothingHalfStored() throws {
        try withApp(settings: #"{"file_max_bytes":4096,"app_storage_quota_bytes":6000}"#) { server, app in
            // Declared over the kind's limit: refused before the body.
            Self.expectProblem(try Files.upload(app, Self.randomBytes(5000), name: "big.bin"), 413, .fileSizeInvalid)
            // Chunked, so only counting finds it.
            Self.expectProblem(try Files.upload(app, Self.randomBytes(5000), name: "big.bin", chunked: true), 413, .fileSizeInvalid)
            Self.expectProblem(try Files.upload(app, Array("not a picture".utf8), name: "photo.jpg"), 422, .fileTypeUnsupported)
            Self.expectProblem(try Files.upload(app, [1, 2, 3], name: "song.wav", query: "kind=audio"), 422, .fileTypeUnsupported)
            Self.expectProblem(try Files.upload(app, [], name: "empty.bin"), 400, .invalidParams)
            Self.expectProblem(try Files.upload(app, [1], name: nil), 400, .invalidParams)
            Self.expectProblem(try Files.upload(app, [1], name: "a%2"), 400, .invalidParams)
            Self.expectProblem(try Files.upload(app, [1], name: "x.bin", query: "user_id=ghost"), 404, .userNotFound)
            Self.expectProblem(try Files.upload(app, [1], name: "x.bin", query: "kind=movie"), 400, .invalidParams)
            let kept = Self.randomBytes(4000)
            #expect(try Files.upload(app, kept, name: "first.bin").status == 201)
            let over = try Files.upload(app, Self.randomBytes(2500), name: "second.bin")
            Self.expectProblem(over, 413, .fileSizeInvalid)
            #expect(over.json?["quota"]?.intValue == 6000)
            #expect(try Files.upload(app, kept, name: "again.bin").status == 201, "the same bytes cost no quota")
            #expect(try Files.blobs(server, app) == 1, "no refused upload left a blob")
            #expect(try Files.blobs(server, app, state: "uploading") == 0)
        }
    }

    @Test func deletingTheAppDeletesItsFilesAndTheirBytes() throws {
        try withApp { server, app in
            _ = try Files.uploaded(app, Self.randomBytes(300_000), name: "a.bin")
            _ = try Files.uploaded(app, try ImageDerivationTests.jpegWithMetadata(width: 300, height: 200), name: "b.jpg")
            #expect(try Files.blobs(server, app) == 4)
            #expect(try server.request(.delete, "/v1/apps/\(app.appID)", bearer: server.adminKey).status == 204)
            #expect(try Files.blobs(server, app) == 0)
            let db = try PostgresConnection(server.database)
            #expect(try db.query("SELECT count(*) FROM file_chunks WHERE app_id = \(app.appID)").decodeFirst(Int.self) == 0)
        }
    }

    @Test func aClientThatLeavesMidUploadLeavesNothing() throws {
        try withApp { server, app in
            let connection = try HTTPClientConnection(host: "127.0.0.1", port: server.port, timeout: .seconds(10))
            try connection.sendRaw(
                "POST /v1/files HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(app.key)\r\nParley-File-Name: cut.bin\r\n"
                    + "Content-Length: 2000000\r\n\r\n")
            try connection.sendRaw(Self.randomBytes(700_000))
            #expect(eventually { ((try? Files.blobs(server, app, state: "uploading")) ?? 0) == 1 }, "the upload started")
            connection.close()
            #expect(eventually { ((try? Files.blobs(server, app)) ?? 1) == 0 }, "its blob is gone")
        }
    }

    /// A second node on the same database whose backend is `s3`, with a store that does not answer (a closed loopback
    /// port): the files the first node stored in PostgreSQL still download and delete through it (each blob records
    /// its storage), and its own uploads are 503 `6000212` with nothing half-stored. The S3 path itself runs against
    /// moto in scripts/s3-check.sh.
    @Test func blobsFollowTheirRecordedStorageAndAnUnreachableStoreIs503() throws {
        try withApp { server, app in
            let bytes = Self.randomBytes(600_000)
            let fileID = try Files.uploaded(app, bytes, name: "kept.bin")
            let s3Node = try TestServer.start(database: server.database) { configuration in
                configuration.fileStorage = FileStorageSettings(
                    backend: .s3,
                    s3: S3Settings(
                        endpoint: "http://127.0.0.1:9", bucket: "parley-files", region: "us-east-1", accessKeyID: "id",
                        secretAccessKey: "secret", pathStyle: true))
            }
            defer { s3Node.stop() }
            let back = try Files.get(s3Node, "/v1/files/\(fileID)", bearer: app.key)
            #expect(back.status == 200 && back.body == bytes, "a postgres blob downloads through the s3 node")
            let refused = try Files.upload(s3Node, Self.randomBytes(1000), name: "new.bin", bearer: app.key)
            Self.expectProblem(refused, 503, .fileStorageUnavailable)
            #expect(try Files.blobs(server, app) == 1, "the refused upload left no blob")
            #expect(try s3Node.request(.delete, "/v1/files/\(fileID)", bearer: app.key).status == 204)
            #expect(try Files.blobs(server, app) == 0, "the s3 node deleted the postgres blob")
        }
    }

    @Test func aLargeUploadStreamsThroughAndBackIdentically() throws {
        try withApp(settings: #"{"file_max_bytes":67108864}"#) { server, app in
            let bytes = Self.randomBytes(12 << 20)
            let fileID = try Files.uploaded(app, bytes, name: "large.bin")
            let back = try Files.get(server, "/v1/files/\(fileID)", bearer: app.key)
            #expect(back.status == 200)
            #expect(back.body.count == bytes.count && back.body == bytes)
        }
    }
}

/// Files through the HTTP API: raw uploads and downloads over a socket.
enum Files {
    /// Uploads `bytes` as a raw body named `name` (percent-encoded as given; nil: no name header), chunked when asked.
    static func upload(
        _ server: TestServer, _ bytes: [UInt8], name: String?, bearer: String, query: String = "", chunked: Bool = false,
        contentType: String = "application/octet-stream"
    ) throws -> TestResponse {
        var headers = HTTPHeaders()
        headers.add("Authorization", "Bearer \(bearer)")
        headers.add("Content-Type", contentType)
        if let name { headers.add("Parley-File-Name", name) }
        let connection = try HTTPClientConnection(host: "127.0.0.1", port: server.port, timeout: .seconds(60))
        defer { connection.close() }
        let path = "/v1/files" + (query.isEmpty ? "" : "?" + query)
        let response: HTTPClientResponse
        if chunked {
            var head = "POST \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
            for field in headers.fields { head += "\(field.name): \(field.value)\r\n" }
            try connection.sendRaw(head + "\r\n")
            try connection.sendRaw(Array(String(bytes.count, radix: 16).utf8) + [13, 10] + bytes + Array("\r\n0\r\n\r\n".utf8))
            response = try connection.readResponse(method: .post)
        } else {
            response = try connection.send(method: .post, path: path, headers: headers, body: bytes)
        }
        return TestResponse(status: response.status, headers: response.headers, body: response.body)
    }

    static func upload(_ app: TestApp, _ bytes: [UInt8], name: String?, query: String = "", chunked: Bool = false) throws -> TestResponse {
        try upload(app.server, bytes, name: name, bearer: app.key, query: query, chunked: chunked)
    }

    /// Uploads and returns the new file's id (201 expected).
    static func uploaded(_ app: TestApp, _ bytes: [UInt8], name: String) throws -> String {
        let r = try upload(app, bytes, name: name)
        guard r.status == 201, let id = r.json?["file_id"]?.stringValue else { throw TestFailure("upload failed: \(r.status) \(r.text)") }
        return id
    }

    /// A GET over a socket (downloads stream, which the in-process transport does not carry).
    static func get(_ server: TestServer, _ path: String, bearer: String?, headers: [String: String] = [:]) throws -> TestResponse {
        var all = HTTPHeaders()
        if let bearer { all.add("Authorization", "Bearer \(bearer)") }
        for (name, value) in headers { all.add(name, value) }
        let connection = try HTTPClientConnection(host: "127.0.0.1", port: server.port, timeout: .seconds(60))
        defer { connection.close() }
        let response = try connection.send(method: .get, path: path, headers: all)
        return TestResponse(status: response.status, headers: response.headers, body: response.body)
    }

    /// The app's blobs (in `state` when given), read from the database.
    static func blobs(_ server: TestServer, _ app: TestApp, state: String? = nil) throws -> Int {
        let db = try PostgresConnection(server.database)
        var q: PostgresQuery = "SELECT count(*) FROM file_blobs WHERE app_id = \(app.appID)"
        if let state { q += " AND state = \(state)" }
        return try db.query(q).decodeFirst(Int.self) ?? 0
    }
}
