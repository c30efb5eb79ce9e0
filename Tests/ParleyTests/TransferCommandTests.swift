import Glibc
import ParleyHTTP
import ParleyTesting
import Synchronization
import Testing

@testable import Parley
@testable import ParleyCore

/// `parley export` and `parley import` (docs/messages.md#import-and-export) when the server refuses: the user must
/// read the server's RFC 9457 problem (status, title, detail, code), not a bare "HTTP 404: ".
@Suite("parley export and import: the server's problem")
struct TransferCommandTests {
    /// Runs the CLI command against `server` and returns its exit status and what it wrote to stderr.
    static func run(_ command: String, _ arguments: [String], server: TestServer) -> (status: Int32, stderr: String) {
        let written = Mutex("")
        let status = TransferCommand.run(
            command, arguments: ["--url", "http://127.0.0.1:\(server.port)"] + arguments, environment: [:]
        ) { text in written.withLock { $0 += text } }
        return (status, written.withLock { $0 })
    }

    /// The parts of the server's own answer the CLI must repeat.
    static func expectProblemShown(_ stderr: String, _ answer: TestResponse) {
        #expect(stderr.contains("HTTP \(answer.status)"), "\(stderr)")
        for member in ["title", "detail"] {
            let value = answer.json?[member]?.stringValue ?? ""
            #expect(!value.isEmpty, "the server's problem has a \(member)")
            #expect(stderr.contains(value), "\(member) \(value) missing from: \(stderr)")
        }
        #expect(stderr.contains("(code \(answer.code ?? 0))"), "\(stderr)")
    }

    @Test func anExportOfAnUnknownGroupPrintsTheProblem() throws {
        try withApp { server, app in
            let query = ["--conversation-type", "group", "--conversation-id", "nogroup"]
            let (status, stderr) = Self.run("export", ["--key", app.key] + query, server: server)
            #expect(status == 1)
            let answer = try app.request(.get, "/v1/messages/export?conversation_type=group&conversation_id=nogroup")
            #expect(answer.code == ErrorCode.targetNotFound.code)
            Self.expectProblemShown(stderr, answer)
        }
    }

    @Test func anImportWithAWrongKeyPrintsTheProblem() throws {
        try withTestServer { server in
            let file = try TestDatabase.makeDataDirectory() + "/in.ndjson"
            let line = #"{"conversation_type":"peer","from":"a","to":"b","type":1,"body":{"text":"hi"},"timestamp":1700000000000}"#
            #expect(writeFile(file, line + "\n"))
            let (status, stderr) = Self.run("import", ["--key", "pk.wrong.key", "--file", file], server: server)
            #expect(status == 1)
            var headers = HTTPHeaders()
            headers.add("Content-Type", "application/x-ndjson")
            let answer = try server.request(.post, "/v1/messages/import", bearer: "pk.wrong.key", json: line + "\n", headers: headers)
            #expect(answer.status == 401)
            Self.expectProblemShown(stderr, answer)
        }
    }

    @Test func aBodyThatIsNoProblemIsShownAsItIs() {
        #expect("\(TransferCommand.ServerProblem(status: 502, body: Array("\n bad gateway".utf8)))" == "HTTP 502: bad gateway")
        #expect("\(TransferCommand.ServerProblem(status: 503, body: []))" == "HTTP 503 (no body)")
    }
}

/// Writes `text` to `path` (false when it cannot).
private func writeFile(_ path: String, _ text: String) -> Bool {
    guard let file = fopen(path, "w") else { return false }
    defer { fclose(file) }
    return fputs(text, file) >= 0
}
