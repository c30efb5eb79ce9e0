import ParleyHTTP
import ParleyPostgres
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains

/// Resumable uploads over HTTP (docs/files.md#resumable-uploads-tus): the tus 1.0.0 protocol at /v1/uploads, staged
/// in chunks, completed into a file the way POST /v1/files makes one.
@Suite("Tus uploads")
struct TusUploadsTests: ProblemAssertions {
    @Test func anUploadSentInPiecesBecomesAFileThatDownloadsByteForByte() throws {
        try withApp { server, app in
            let bytes = FilesTests.randomBytes(700 * 1024 + 5)
            let created = try Tus.create(app.server, bearer: app.key, length: bytes.count, metadata: [("filename", "notes.bin")])
            #expect(created.status == 201, "\(created.text)")
            #expect(created.headers["Tus-Resumable"] == "1.0.0")
            #expect(created.headers["Upload-Expires"]?.hasSuffix(" GMT") == true)
            let location = try #require(created.headers["Location"])
            #expect(location.hasPrefix("http://127.0.0.1:\(server.port)/v1/uploads/up_"))
            let path = Tus.path(location)

            var head = try Tus.send(server, .head, path, bearer: app.key)
            #expect(head.status == 200)
            #expect(head.headers["Upload-Offset"] == "0" && head.headers["Upload-Length"] == String(bytes.count))
            #expect(head.headers["Upload-Metadata"] == Tus.metadata([("filename", "notes.bin")]))
            #expect(head.headers["Cache-Control"] == "no-store" && head.headers["Tus-Resumable"] == "1.0.0")

            // A first piece that ends mid-chunk, then one that fills it and more: chunks stay 256 KiB but the last.
            var patch = try Tus.patch(server, path, bearer: app.key, offset: 0, Array(bytes[0..<300_000]))
            #expect(patch.status == 204, "\(patch.text)")
            #expect(patch.headers["Upload-Offset"] == "300000" && patch.headers["Parley-File-Id"] == nil)
            patch = try Tus.patch(server, path, bearer: app.key, offset: 300_000, Array(bytes[300_000..<600_000]))
            #expect(patch.headers["Upload-Offset"] == "600000")
            #expect(try Tus.stagedChunkSizes(server, app) == [262_144, 262_144, 75_712])
            head = try Tus.send(server, .head, path, bearer: app.key)
            #expect(head.headers["Upload-Offset"] == "600000")

            let wrong = try Tus.patch(server, path, bearer: app.key, offset: 300_000, [1, 2, 3])
            Self.expectProblem(wrong, 409, .uploadProtocolError)
            #expect(wrong.headers["Tus-Resumable"] == "1.0.0")

            let last = try Tus.patch(server, path, bearer: app.key, offset: 600_000, Array(bytes[600_000...]))
            #expect(last.status == 204, "\(last.text)")
            #expect(last.headers["Upload-Offset"] == String(bytes.count))
            let fileID = try #require(last.headers["Parley-File-Id"])
            #expect(fileID.hasPrefix("f_"))
            let download = try Files.get(server, "/v1/files/\(fileID)", bearer: app.key)
            #expect(download.status == 200 && download.body == bytes)
            let meta = try server.request(.get, "/v1/files/\(fileID)/meta", bearer: app.key)
            #expect(meta.json?["file_name"] == "notes.bin" && meta.json?["kind"] == "file")
            // The upload is done: it and its staged bytes are gone.
            Self.expectProblem(try Tus.patch(server, path, bearer: app.key, offset: 0, [1]), 404, .uploadProtocolError)
            #expect(try Files.blobs(server, app, state: "staging") == 0)
            #expect(try Files.blobs(server, app) == 1)
        }
    }

    @Test func aCreationCarryingEveryByteAnswersTheFileAndOneCarryingSomeIsResumed() throws {
        try withApp { server, app in
            try app.createUser("alice")
            let whole = FilesTests.randomBytes(5000)
            let one = try Tus.create(
                server, bearer: app.key, length: whole.count, metadata: [("filename", "a.bin"), ("user_id", "alice")], body: whole)
            #expect(one.status == 201, "\(one.text)")
            #expect(one.headers["Upload-Offset"] == "5000")
            let fileID = try #require(one.headers["Parley-File-Id"])
            let meta = try server.request(.get, "/v1/files/\(fileID)/meta", bearer: app.key)
            #expect(meta.json?["owner_id"] == "alice")
            #expect(try Files.get(server, "/v1/files/\(fileID)", bearer: app.key).body == whole)

            let alice = try app.token(for: "alice")
            let part = try Tus.create(server, bearer: alice, length: whole.count, metadata: [("filename", "b.bin")], body: Array(whole[0..<2000]))
            #expect(part.status == 201 && part.headers["Upload-Offset"] == "2000" && part.headers["Parley-File-Id"] == nil)
            let rest = try Tus.patch(server, Tus.path(try #require(part.headers["Location"])), bearer: alice, offset: 2000, Array(whole[2000...]))
            let second = try #require(rest.headers["Parley-File-Id"])
            let again = try server.request(.get, "/v1/files/\(second)/meta", bearer: alice)
            #expect(again.json?["owner_id"] == "alice" && again.json?["file_name"] == "b.bin")
            #expect(try Files.blobs(server, app) == 1, "the same bytes are stored once")
        }
    }

    @Test func theProtocolsRefusalsAreProblems() throws {
        try withApp(settings: #"{"file_max_bytes":4000}"#) { server, app in
            // Discovery needs no credential.
            let options = try Tus.send(server, .options, "/v1/uploads", bearer: nil, tus: false)
            #expect(options.status == 204)
            #expect(options.headers["Tus-Version"] == "1.0.0" && options.headers["Tus-Resumable"] == "1.0.0")
            #expect(options.headers["Tus-Extension"] == "creation,creation-with-upload,termination,expiration")
            #expect(options.headers["Tus-Max-Size"] == String(FileLimits.largestUpload))

            let noVersion = try Tus.create(server, bearer: app.key, length: 10, metadata: [("filename", "a.bin")], tus: false)
            Self.expectProblem(noVersion, 412, .uploadProtocolError)
            #expect(noVersion.headers["Tus-Version"] == "1.0.0")
            // Over the kind's limit: 413 before any byte, nothing staged.
            Self.expectProblem(try Tus.create(server, bearer: app.key, length: 4001, metadata: [("filename", "a.bin")]), 413, .fileSizeInvalid)
            #expect(try Files.blobs(server, app) == 0)
            Self.expectProblem(try Tus.create(server, bearer: app.key, length: 10, metadata: []), 400, .invalidParams)
            Self.expectProblem(
                try Tus.create(server, bearer: app.key, length: 10, metadata: [("filename", "a.wav"), ("kind", "audio")]), 422, .fileTypeUnsupported)
            Self.expectProblem(
                try Tus.send(server, .post, "/v1/uploads", bearer: app.key, headers: [("Upload-Defer-Length", "1")]), 400, .invalidParams)

            let created = try Tus.create(server, bearer: app.key, length: 10, metadata: [("filename", "a.bin")])
            let path = Tus.path(try #require(created.headers["Location"]))
            let wrongType = try Tus.send(
                server, .patch, path, bearer: app.key, headers: [("Upload-Offset", "0"), ("Content-Type", "application/octet-stream")], body: [1])
            Self.expectProblem(wrongType, 415, .uploadProtocolError)
            Self.expectProblem(try Tus.patch(server, "/v1/uploads/up_unknown", bearer: app.key, offset: 0, [1]), 404, .uploadProtocolError)
            #expect(try Tus.send(server, .head, "/v1/uploads/up_unknown", bearer: app.key).status == 404)
            Self.expectProblem(try Tus.patch(server, path, bearer: app.key, offset: 0, Array(repeating: 7, count: 11)), 400, .invalidParams)

            // A user touches only its own uploads.
            try app.createUser("alice")
            try app.createUser("bob")
            let alice = try app.token(for: "alice")
            let bob = try app.token(for: "bob")
            Self.expectProblem(
                try Tus.create(server, bearer: bob, length: 10, metadata: [("filename", "a.bin"), ("user_id", "alice")]), 403, .forbidden)
            let hers = Tus.path(
                try #require(try Tus.create(server, bearer: alice, length: 10, metadata: [("filename", "a.bin")]).headers["Location"]))
            Self.expectProblem(try Tus.patch(server, hers, bearer: bob, offset: 0, [1]), 403, .filePermissionDenied)
            Self.expectProblem(try Tus.send(server, .delete, hers, bearer: bob), 403, .filePermissionDenied)
            #expect(try Tus.send(server, .head, hers, bearer: alice).status == 200)
            #expect(try Tus.send(server, .head, hers, bearer: app.key).status == 200, "the app key touches any")

            // Termination deletes the staged bytes.
            #expect(try Tus.patch(server, hers, bearer: alice, offset: 0, [1, 2, 3]).status == 204)
            let deleted = try Tus.send(server, .delete, hers, bearer: alice)
            #expect(deleted.status == 204 && deleted.headers["Tus-Resumable"] == "1.0.0")
            #expect(try Tus.send(server, .head, hers, bearer: alice).status == 404)
            let db = try PostgresConnection(server.database)
            #expect(try db.query("SELECT count(*) FROM file_uploads WHERE app_id = \(app.appID)").decodeFirst(Int.self) == 1)
            #expect(try Files.blobs(server, app, state: "staging") == 1, "only the app's upload is left")
        }
    }

    @Test func anUploadExpiresADayAfterItsLastPatch() throws {
        try withApp(testClock: true) { server, app in
            let created = try Tus.create(server, bearer: app.key, length: 10, metadata: [("filename", "a.bin")])
            let path = Tus.path(try #require(created.headers["Location"]))
            try server.advanceClock(ms: 20 * 3_600_000)
            #expect(try Tus.patch(server, path, bearer: app.key, offset: 0, [1, 2]).status == 204)
            // 20 h after creation but 4 h after its last PATCH: still there.
            try server.advanceClock(ms: 20 * 3_600_000)
            let head = try Tus.send(server, .head, path, bearer: app.key)
            #expect(head.status == 200 && head.headers["Upload-Offset"] == "2")
            try server.advanceClock(ms: 4 * 3_600_000 + 60_000)
            Self.expectProblem(try Tus.patch(server, path, bearer: app.key, offset: 2, [3]), 410, .uploadProtocolError)
            #expect(try Tus.send(server, .head, path, bearer: app.key).status == 410)
            // The sweep deletes it and its bytes.
            try server.advanceClock(ms: 2 * 3_600_000)
            #expect(eventually { (try? Tus.send(server, .head, path, bearer: app.key).status) == 404 })
            #expect(try Files.blobs(server, app) == 0)
        }
    }

    @Test func anImageSentThroughTusGetsItsVariantsAndOneThatIsNoneIsRefused() throws {
        try withApp { server, app in
            let photo = try ImageDerivationTests.jpegWithMetadata(width: 1600, height: 900)
            let created = try Tus.create(server, bearer: app.key, length: photo.count, metadata: [("filename", "holiday.jpg")])
            let path = Tus.path(try #require(created.headers["Location"]))
            let half = photo.count / 2
            #expect(try Tus.patch(server, path, bearer: app.key, offset: 0, Array(photo[0..<half])).status == 204)
            let last = try Tus.patch(server, path, bearer: app.key, offset: half, Array(photo[half...]))
            let fileID = try #require(last.headers["Parley-File-Id"], "\(last.text)")
            let meta = try #require(try server.request(.get, "/v1/files/\(fileID)/meta", bearer: app.key).json)
            #expect(meta["kind"] == "image" && meta["mime_type"] == "image/jpeg")
            #expect((meta["width"]?.intValue, meta["height"]?.intValue) == (900, 1600))
            #expect(meta["large_url"]?.stringValue != nil && meta["thumbnail_url"]?.stringValue != nil)
            #expect(meta["sha256"]?.stringValue == Crypto.hex(Crypto.sha256(photo)))

            let fake = Array("not a picture at all".utf8)
            let refused = try Tus.create(server, bearer: app.key, length: fake.count, metadata: [("filename", "fake.jpg")], body: fake)
            Self.expectProblem(refused, 422, .fileTypeUnsupported)
            #expect(try Files.blobs(server, app, state: "staging") == 0, "a refused upload is deleted")
        }
    }

    @Test func aPatchCutOffKeepsWhatArrivedAndTheClientResumesFromHeadsOffset() throws {
        try withApp { server, app in
            let bytes = FilesTests.randomBytes(3_000_000)
            let created = try Tus.create(server, bearer: app.key, length: bytes.count, metadata: [("filename", "cut.bin")])
            let path = Tus.path(try #require(created.headers["Location"]))
            let connection = try HTTPClientConnection(host: "127.0.0.1", port: server.port, timeout: .seconds(10))
            try connection.sendRaw(
                "PATCH \(path) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(app.key)\r\nTus-Resumable: 1.0.0\r\n"
                    + "Content-Type: application/offset+octet-stream\r\nUpload-Offset: 0\r\nContent-Length: \(bytes.count)\r\n\r\n")
            let sent = 1_500_000
            try connection.sendRaw(Array(bytes[0..<sent]))
            // The first MiB is committed while the body still arrives; the rest when it stops short.
            #expect(eventually { ((try? Tus.stagedChunkSizes(server, app)) ?? []).count >= 4 })
            connection.close()
            var offset = 0
            #expect(
                eventually(timeout: .seconds(10)) {
                    offset = Int((try? Tus.send(server, .head, path, bearer: app.key))?.headers["Upload-Offset"] ?? "") ?? -1
                    return offset == sent
                }, "HEAD answers \(offset), not \(sent)")
            let rest = try Tus.patch(server, path, bearer: app.key, offset: sent, Array(bytes[sent...]))
            let fileID = try #require(rest.headers["Parley-File-Id"], "\(rest.text)")
            #expect(try Files.get(server, "/v1/files/\(fileID)", bearer: app.key).body == bytes)
        }
    }

    @Test func ofTwoPatchesAtOneOffsetOnlyTheFirstToStoreItsBytesCounts() throws {
        try withApp { server, app in
            let bytes = FilesTests.randomBytes(1000)
            let created = try Tus.create(server, bearer: app.key, length: bytes.count, metadata: [("filename", "race.bin")])
            let path = Tus.path(try #require(created.headers["Location"]))
            // A slow PATCH has sent half of its body when a fast one at the same offset stores its bytes.
            let slow = try HTTPClientConnection(host: "127.0.0.1", port: server.port, timeout: .seconds(10))
            defer { slow.close() }
            try slow.sendRaw(
                "PATCH \(path) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(app.key)\r\nTus-Resumable: 1.0.0\r\n"
                    + "Content-Type: application/offset+octet-stream\r\nUpload-Offset: 0\r\nContent-Length: 600\r\n\r\n")
            try slow.sendRaw(Array(bytes[0..<300]))
            let fast = try Tus.patch(server, path, bearer: app.key, offset: 0, Array(bytes[0..<200]))
            #expect(fast.status == 204 && fast.headers["Upload-Offset"] == "200", "\(fast.text)")
            try slow.sendRaw(Array(bytes[300..<600]))
            let late = try slow.readResponse(method: .patch)
            Self.expectProblem(late, 409, .uploadProtocolError)
            #expect(try Tus.send(server, .head, path, bearer: app.key).headers["Upload-Offset"] == "200")
            let rest = try Tus.patch(server, path, bearer: app.key, offset: 200, Array(bytes[200...]))
            let fileID = try #require(rest.headers["Parley-File-Id"], "\(rest.text)")
            #expect(try Files.get(server, "/v1/files/\(fileID)", bearer: app.key).body == bytes)
        }
    }
}

/// tus requests over a socket.
enum Tus {
    /// `Upload-Metadata` for `pairs`: each key with its value in base64.
    static func metadata(_ pairs: [(String, String)]) -> String {
        pairs.map { "\($0.0) \(Crypto.base64Encode(Array($0.1.utf8)))" }.joined(separator: ",")
    }

    /// The path of an upload's URL.
    static func path(_ location: String) -> String {
        "/v1/uploads/" + (location.split(separator: "/").last.map(String.init) ?? "")
    }

    static func send(
        _ server: TestServer, _ method: HTTPMethod, _ path: String, bearer: String?, tus: Bool = true, headers: [(String, String)] = [],
        body: [UInt8]? = nil
    ) throws -> TestResponse {
        var all = HTTPHeaders()
        if let bearer { all.add("Authorization", "Bearer \(bearer)") }
        if tus { all.add("Tus-Resumable", "1.0.0") }
        for (name, value) in headers { all.add(name, value) }
        let connection = try HTTPClientConnection(host: "127.0.0.1", port: server.port, timeout: .seconds(60))
        defer { connection.close() }
        let response = try connection.send(method: method, path: path, headers: all, body: body)
        return TestResponse(status: response.status, headers: response.headers, body: response.body)
    }

    static func create(
        _ server: TestServer, bearer: String, length: Int, metadata pairs: [(String, String)], body: [UInt8]? = nil, tus: Bool = true
    ) throws -> TestResponse {
        var headers = [("Upload-Length", String(length))]
        if !pairs.isEmpty { headers.append(("Upload-Metadata", metadata(pairs))) }
        if body != nil { headers.append(("Content-Type", "application/offset+octet-stream")) }
        return try send(server, .post, "/v1/uploads", bearer: bearer, tus: tus, headers: headers, body: body)
    }

    static func patch(_ server: TestServer, _ path: String, bearer: String, offset: Int, _ bytes: [UInt8]) throws -> TestResponse {
        try send(
            server, .patch, path, bearer: bearer,
            headers: [("Upload-Offset", String(offset)), ("Content-Type", "application/offset+octet-stream")], body: bytes)
    }

    /// The sizes of the app's staged chunks, in order (one upload at a time).
    static func stagedChunkSizes(_ server: TestServer, _ app: TestApp) throws -> [Int] {
        let db = try PostgresConnection(server.database)
        return try db.query(
            """
            SELECT length(c.data)::bigint FROM file_chunks c JOIN file_blobs b USING (app_id, blob_id)
            WHERE c.app_id = \(app.appID) AND b.state = 'staging' ORDER BY c.n
            """
        ).decode(Int.self)
    }
}
