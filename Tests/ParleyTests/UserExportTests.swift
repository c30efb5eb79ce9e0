import ParleyHTTP
import ParleyPostgres
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains

/// A user's data export (docs/privacy.md#user-data-export) end to end: the route and its problems, the archive
/// unpacked entry by entry (profile, devices, friends, blacklist, groups, every message the user sent, reactions,
/// receipts, files), and an export whose node stops mid-way, resumed by another node to the same archive.
@Suite("User data export")
struct UserExportTests: ProblemAssertions {
    /// A stored ZIP unpacked: each entry's name and bytes, in archive order. Checks the structure as an unzip tool
    /// would: the end record, the central directory, each local header agreeing with it, sizes and CRC-32.
    static func unzip(_ zip: [UInt8]) throws -> [(name: String, data: [UInt8])] {
        func u16(_ at: Int) -> Int { Int(zip[at]) | Int(zip[at + 1]) << 8 }
        func u32(_ at: Int) -> Int { u16(at) | u16(at + 2) << 16 }
        guard zip.count >= 22 else { throw TestFailure("too short for a ZIP: \(zip.count) bytes") }
        let end = zip.count - 22
        guard u32(end) == 0x0605_4b50 else { throw TestFailure("no end of central directory record") }
        let count = u16(end + 10)
        let directorySize = u32(end + 12)
        var at = u32(end + 16)
        guard at + directorySize == end else { throw TestFailure("central directory does not end at the end record") }
        var entries: [(name: String, data: [UInt8])] = []
        for _ in 0..<count {
            guard u32(at) == 0x0201_4b50 else { throw TestFailure("bad central directory header at \(at)") }
            let (method, crc, size, nameLength, offset) = (u16(at + 10), u32(at + 16), u32(at + 24), u16(at + 28), u32(at + 42))
            #expect(method == 0 && u32(at + 20) == size)
            let name = String(decoding: zip[(at + 46)..<(at + 46 + nameLength)], as: UTF8.self)
            at += 46 + nameLength + u16(at + 30) + u16(at + 32)
            guard u32(offset) == 0x0403_4b50 else { throw TestFailure("bad local header of \(name)") }
            #expect(u32(offset + 14) == crc && u32(offset + 22) == size, "\(name)")
            let start = offset + 30 + u16(offset + 26) + u16(offset + 28)
            let data = Array(zip[start..<(start + size)])
            #expect(Int(UserExportArchive.crc32(data)) == crc, "\(name)")
            entries.append((name, data))
        }
        return entries
    }

    /// The JSON lines of every entry whose name starts with `prefix`, in archive order.
    static func lines(_ entries: [(name: String, data: [UInt8])], _ prefix: String) throws -> [JSONValue] {
        try entries.filter { $0.name.hasPrefix(prefix) }.flatMap { entry in
            try entry.data.split(separator: 0x0A).map { try JSONValue.parse(Array($0)) }
        }
    }

    static func entry(_ entries: [(name: String, data: [UInt8])], _ name: String) throws -> JSONValue {
        guard let data = entries.first(where: { $0.name == name })?.data else { throw TestFailure("no \(name) in the archive") }
        return try JSONValue.parse(data)
    }

    /// Starts an export of `user` (202 expected), waits for it to succeed and downloads the archive.
    static func export(_ app: TestApp, _ user: String) throws -> (job: JSONValue, zip: [UInt8]) {
        let r = try app.request(.post, "/v1/users/\(user)/export")
        guard r.status == 202, let jobID = r.json?["job_id"]?.stringValue else { throw TestFailure("export not accepted: \(r.status) \(r.text)") }
        #expect(r.json?["kind"] == .string("user_export"))
        let job = try JobsTests.awaitState(app, jobID, "succeeded", timeout: .seconds(120))
        return (job, try download(app, job))
    }

    /// The file a job's result names, downloaded.
    static func download(_ app: TestApp, _ job: JSONValue) throws -> [UInt8] {
        guard let fileID = job["result"]?["file_id"]?.stringValue else { throw TestFailure("no file in \(job)") }
        let r = try Files.get(app.server, "/v1/files/\(fileID)", bearer: app.key)
        guard r.status == 200 else { throw TestFailure("download failed: \(r.status) \(r.text.prefix(300))") }
        return r.body
    }

    @Test func theArchiveHoldsEverythingAboutTheUser() throws {
        try withApp { server, app in
            for id in ["alice", "bob", "carol"] { try app.createUser(id) }
            #expect(try app.request(.post, "/v1/users/alice/devices", json: DevicesTests.body(#","device_id":"phone""#)).status < 300)
            #expect(try app.request(.post, "/v1/users/alice/friends", json: #"{"friend_id":"bob"}"#).status < 300)
            #expect(try app.request(.post, "/v1/users/alice/blacklist", json: #"{"user_ids":["carol"]}"#).json?["results"]?[0]?["ok"] == .bool(true))
            #expect(
                try app.request(.post, "/v1/groups", json: #"{"operator":"alice","group_id":"g1","name":"club","members":["bob"]}"#).status == 201)
            // 2,100 imported texts (two message entries) and a few sent ones, peer and group.
            try JobsTests.importTexts(app, from: "alice", to: "bob", count: 2100, start: JobsTests.base)
            try JobsTests.importTexts(app, from: "bob", to: "alice", count: 5, start: JobsTests.base, tag: "b")
            let sent = try #require(try PeerMessages.sendText(app, "alice", "bob", "hello bob").json?["message_id"]?.stringValue)
            #expect(try GroupMessagesTests.send(app, "alice", "g1", "hello club").status == 201)
            let fromBob = try #require(
                try PeerMessages.sendText(app, "bob", "alice", "hi alice", extra: #""need_receipt":true"#).json?["message_id"]?.stringValue)
            #expect(try app.request(.post, "/v1/messages/\(fromBob)/reactions", json: #"{"user_id":"alice","reaction_type":"like"}"#).status < 300)
            #expect(try app.request(.post, "/v1/users/alice/receipts/read", json: "{\"message_ids\":[\"\(fromBob)\"]}").status == 200)
            let bytes = FilesTests.randomBytes(300 * 1024)
            let fileID = try #require(try Files.upload(app, bytes, name: "notes.bin", query: "user_id=alice").json?["file_id"]?.stringValue)

            let (job, zip) = try Self.export(app, "alice")
            #expect(job["progress"]?["total"] == .int(2102))
            #expect(job["progress"]?["done"] == .int(2102))
            #expect(job["result"]?["mime_type"] == .string("application/zip"))
            #expect(job["result"]?["file_size"] == .int(Int64(zip.count)))
            #expect(job["result"]?["counts"]?["messages"] == .int(2102))
            let entries = try Self.unzip(zip)
            let names = entries.map(\.name)
            #expect(Set(names).count == names.count, "\(names)")
            for name in ["README.txt", "profile.json", "devices.json", "friends.json", "blacklist.json", "groups.json"] {
                #expect(names.contains(name), "\(names)")
            }
            #expect(names.filter { $0.hasPrefix("messages/") } == ["messages/000001.jsonl", "messages/000002.jsonl"])

            #expect(try Self.entry(entries, "profile.json")["user_id"] == .string("alice"))
            #expect(try Self.entry(entries, "devices.json")["items"]?[0]?["device_id"] == .string("phone"))
            #expect(try Self.entry(entries, "friends.json")["items"]?.arrayValue?.compactMap { $0["user_id"]?.stringValue } == ["bob"])
            #expect(try Self.entry(entries, "blacklist.json")["items"]?.arrayValue?.compactMap { $0["user_id"]?.stringValue } == ["carol"])
            #expect(try Self.entry(entries, "groups.json")["items"]?[0]?["group"]?["group_id"] == .string("g1"))

            // Every message alice sent, once, in the Message shape; none of bob's.
            let messages = try Self.lines(entries, "messages/")
            let stored = try server.app.services.pool.withConnection { db in
                try db.query(sql: "SELECT message_id FROM messages WHERE app_id = $1 AND sender = 'alice' AND type <> 32", [app.appID])
                    .map { try $0[0].string }
            }
            #expect(messages.count == 2102 && stored.count == 2102)
            #expect(Set(messages.compactMap { $0["message_id"]?.stringValue }) == Set(stored))
            #expect(messages.allSatisfy { $0["from"] == .string("alice") && $0["seq"]?.intValue != nil && $0["body"] != nil })
            #expect(messages.contains { $0["message_id"] == .string(sent) && $0["body"]?["text"] == .string("hello bob") })
            #expect(messages.contains { $0["conversation_type"] == .string("group") && $0["body"]?["text"] == .string("hello club") })

            #expect(try Self.lines(entries, "reactions/").map { $0["message_id"] } == [.string(fromBob)])
            #expect(try Self.lines(entries, "reactions/").first?["reaction_type"] == .string("like"))
            #expect(try Self.lines(entries, "receipts/").map { $0["message_id"] } == [.string(fromBob)])

            // The file: listed, and its bytes in the archive.
            let files = try Self.lines(entries, "files/index-")
            #expect(files.count == 1)
            #expect(files.first?["file_id"] == .string(fileID) && files.first?["included"] == .bool(true))
            let path = try #require(files.first?["path"]?.stringValue)
            #expect(path == "files/\(fileID)/notes.bin")
            #expect(entries.first { $0.name == path }?.data == bytes)

            // The archive is a file of alice's: kind file, application/zip; she may download it with her token.
            let archiveID = try #require(job["result"]?["file_id"]?.stringValue)
            let meta = try app.request(.get, "/v1/files/\(archiveID)/meta")
            #expect(meta.json?["kind"] == .string("file") && meta.json?["mime_type"] == .string("application/zip"))
            #expect(meta.json?["owner_id"] == .string("alice") && meta.json?["file_size"] == .int(Int64(zip.count)))
            #expect(try Files.get(server, "/v1/files/\(archiveID)", bearer: try app.token(for: "alice")).body == zip)
            #expect(try Files.get(server, "/v1/files/\(archiveID)", bearer: try app.token(for: "bob")).status == 403)
        }
    }

    @Test func problems() throws {
        try withApp { server, app in
            try app.createUser("alice")
            Self.expectProblem(try app.request(.post, "/v1/users/nobody/export"), 404, .userNotFound)
            Self.expectProblem(try app.request(.post, "/v1/users/\(String(repeating: "x", count: 33))/export"), 400, .invalidParams)
            #expect(try server.request(.post, "/v1/users/alice/export", bearer: try app.token(for: "alice")).status == 403)
            #expect(try app.request(.get, "/v1/jobs?kind=user_export").json?["items"] == .array([]))
            // A user with nothing: the archive still has its sections, empty.
            let entries = try Self.unzip(try Self.export(app, "alice").zip)
            #expect(try Self.entry(entries, "friends.json")["items"] == .array([]))
            #expect(!entries.contains { $0.name.hasPrefix("messages/") })
        }
    }

    /// The node running an export stops mid-way (between steps, keeping its claim): a second node on the same
    /// database takes it over after the lease and finishes it; the archive holds exactly what an export that ran
    /// through holds, every message once.
    @Test func anExportInterruptedMidWayResumesToTheSameArchive() throws {
        let first = try TestServer.start(configure: {
            $0.jobLeaseMillis = 1000
            $0.jobStepPauseMillis = 500
        })
        let app = try first.createApp()
        for id in ["alice", "bob"] { try app.createUser(id) }
        try JobsTests.importTexts(app, from: "alice", to: "bob", count: 7000, start: JobsTests.base)
        let r = try app.request(.post, "/v1/users/alice/export")
        let jobID = try #require(r.json?["job_id"]?.stringValue)
        #expect(try eventually(timeout: .seconds(60)) { (try JobsTests.job(app, jobID)?["progress"]?["done"]?.intValue ?? 0) >= 2000 })
        first.stop()

        let second = try TestServer.start(database: first.database) { $0.jobLeaseMillis = 1000 }
        defer { second.stop() }
        let again = TestApp(server: second, appID: app.appID, key: app.key)
        let doneBefore = try #require(try JobsTests.job(again, jobID)?["progress"]?["done"]?.intValue)
        #expect(doneBefore >= 2000 && doneBefore < 7000)
        let resumed = try JobsTests.awaitState(again, jobID, "succeeded", timeout: .seconds(120))
        #expect(try second.count("SELECT attempt FROM jobs WHERE app_id = $1 AND job_id = $2", [app.appID, jobID]) == 2)
        let interrupted = try Self.unzip(try Self.download(again, resumed))

        let straight = try Self.unzip(try Self.export(again, "alice").zip)
        #expect(interrupted.map(\.name) == straight.map(\.name))
        // Entry by entry the same bytes (README.txt names the export time, which differs).
        for (a, b) in zip(interrupted, straight) where a.name != "README.txt" { #expect(a.data == b.data, "\(a.name)") }
        let ids = try Self.lines(interrupted, "messages/").compactMap { $0["message_id"]?.stringValue }
        #expect(ids.count == 7000 && Set(ids).count == 7000)
    }
}
