import ParleyHTTP
import ParleyPostgres
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Shared helpers of the group suites (docs/groups.md): fixtures through the HTTP API, batch and event readers.
protocol GroupTestSupport: ProblemAssertions {}

extension GroupTestSupport {
    static func array(_ ids: [String]) -> String { "[" + ids.map { "\"\($0)\"" }.joined(separator: ",") + "]" }

    /// Creates a group owned by `owner` (201 expected) and returns its id.
    @discardableResult
    static func createGroup(_ app: TestApp, _ owner: String, members: [String] = [], extra: String = "") throws -> String {
        let r = try app.request(.post, "/v1/groups", json: "{\"operator\":\"\(owner)\",\"members\":\(array(members))\(extra)}")
        guard r.status == 201, let id = r.json?["group"]?["group_id"]?.stringValue else {
            throw TestFailure("creating group failed: \(r.status) \(r.text)")
        }
        return id
    }

    /// A request made with a user token.
    @discardableResult
    static func asUser(_ app: TestApp, _ token: String, _ method: HTTPMethod, _ path: String, json: String? = nil) throws -> TestResponse {
        try app.server.request(method, path, bearer: token, json: json)
    }

    static func results(_ r: TestResponse) -> [JSONValue] { r.json?["results"]?.arrayValue ?? [] }

    /// The per-item error codes of a batch response (nil for successful items).
    static func codes(_ r: TestResponse) -> [Int?] {
        results(r).map { $0["ok"] == .bool(true) ? nil : $0["error"]?["code"]?.intValue.map(Int.init) }
    }

    static func events(_ app: TestApp, _ type: String, user: String? = nil, group: String? = nil) throws -> [JSONValue] {
        var query = "types=\(type)"
        if let user { query += "&user_id=\(user)" }
        if let group { query += "&group_id=\(group)" }
        return try app.events(query: query)
    }

    static func member(_ app: TestApp, _ groupID: String, _ userID: String) throws -> JSONValue? {
        let r = try app.request(.get, "/v1/groups/\(groupID)/members/\(userID)")
        return r.status == 200 ? r.json : nil
    }

    static func group(_ app: TestApp, _ groupID: String) throws -> JSONValue? {
        let r = try app.request(.get, "/v1/groups/\(groupID)")
        #expect(r.status == 200, "\(r.text)")
        return r.json
    }

    /// Sets `userID`'s role as the app itself (200 expected).
    static func setRole(_ app: TestApp, _ groupID: String, _ userID: String, _ role: Int) throws {
        let r = try app.request(.put, "/v1/groups/\(groupID)/members/\(userID)/role", json: "{\"role\":\(role)}")
        #expect(r.status == 200, "\(r.text)")
    }

    /// Sends a text to the group as `userID` with the app key (the group send checks of docs/messages.md#sending:
    /// existence, membership, group and member mute); nil when it is accepted (201), else the problem `code`.
    static func muteCheck(_ server: TestServer, _ app: TestApp, _ groupID: String, _ userID: String) -> Int? {
        let body = #"{"from":"\#(userID)","conversation_type":"group","to":"\#(groupID)","type":1,"body":{"text":"hi"}}"#
        guard let r = try? app.request(.post, "/v1/messages", json: body) else { return -1 }
        return r.status == 201 ? nil : (r.code ?? -1)
    }

    /// The group's stored messages as the app reads them, oldest first (`GET /v1/groups/{group_id}/messages`).
    static func history(_ app: TestApp, _ groupID: String) throws -> [JSONValue] {
        let r = try app.request(.get, "/v1/groups/\(groupID)/messages?direction=forward&limit=100")
        guard r.status == 200 else { throw TestFailure("reading group history failed: \(r.status) \(r.text)") }
        return r.json?["items"]?.arrayValue ?? []
    }

    /// The tips messages (type 32) of the group's history, oldest first.
    static func tips(_ app: TestApp, _ groupID: String) throws -> [JSONValue] {
        try history(app, groupID).filter { $0["type"] == .int(32) }
    }
}
