import Glibc
import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Hostile and unusual request input end to end, over real sockets (issue 16): each test names the rule it holds
/// the server to.
@Suite("Request hygiene")
struct RequestHygieneTests: ProblemAssertions {
    /// One raw request on a fresh connection, and its answer.
    static func raw(_ server: TestServer, _ request: String) throws -> (HTTPClientResponse, HTTPClientConnection) {
        let connection = try HTTPClientConnection(host: "127.0.0.1", port: server.port, timeout: .seconds(30))
        try connection.sendRaw(request)
        return (try connection.readResponse(), connection)
    }

    // MARK: - Item 4: U+0000

    @Test func nulAnywhereInAJSONBodyIs400NamingTheFieldAndWritesNothing() throws {
        try withApp { server, app in
            Self.expectInvalid(try app.request(.post, "/v1/users", json: #"{"user_id":"nul1","name":"a\u0000b"}"#), field: "body.name")
            Self.expectProblem(try app.request(.get, "/v1/users/nul1"), 404, .userNotFound, "the user was not created")
            try app.createUser("u1")
            try app.createUser("u2")

            // In an array item, nested custom data, a member name, a member no route reads: the same rule.
            let imported = try app.request(.post, "/v1/users/import", json: #"{"users":[{"user_id":"ok1"},{"user_id":"n2","name":"x\u0000"}]}"#)
            Self.expectInvalid(imported, field: "body.users[1].name")
            Self.expectProblem(try app.request(.get, "/v1/users/ok1"), 404, .userNotFound, "nothing of the import was written")
            let group = try app.request(
                .post, "/v1/groups", json: #"{"group_id":"g1","operator":"u1","attributes":{"k1":"v\u0000","k\u00002":"v"}}"#)
            Self.expectInvalid(group, field: "body.attributes.k1")
            #expect(Self.fields(group).contains("body.attributes"), "a NUL in a member name names the object: \(group.text)")
            Self.expectProblem(try app.request(.get, "/v1/groups/g1"), 404, .groupNotFound, "the group was not created")
            let send = try app.request(
                .post, "/v1/messages", json: #"{"from":"u1","conversation_type":"peer","to":"u2","type":200,"body":{"data":"d\u0000","sub_type":1}}"#)
            Self.expectInvalid(send, field: "body.body.data")
            let unknown = try app.request(.patch, "/v1/users/u1", json: #"{"name":"renamed","whatever":{"deep":["\u0000"]}}"#)
            Self.expectInvalid(unknown, field: "body.whatever.deep[0]")
            #expect(try app.request(.get, "/v1/users/u1").json?["name"]?.stringValue == "", "the valid field was not applied either")
            #expect(try app.request(.get, "/v1/users/u1/conversations/peer/u2/messages").json?["items"]?.arrayValue?.isEmpty == true)

            // An escaped backslash followed by `u0000` is six ordinary characters.
            let literal = try app.request(.post, "/v1/users", json: #"{"user_id":"lit","name":"a\\u0000b"}"#)
            #expect(literal.status == 201, "\(literal.text)")
            #expect(literal.json?["name"]?.stringValue == #"a\u0000b"#)
            let created = try app.events().filter { $0["type"]?.stringValue == "user.created" }.compactMap {
                $0["data"]?["user"]?["user_id"]?.stringValue
            }
            #expect(created == ["u1", "u2", "lit"])
        }
    }

    @Test func nulInAPathOrQueryParameterIs400NamingIt() throws {
        try withApp { server, app in
            try app.createUser("u1")
            try app.createUser("u2")
            for (path, field) in [
                ("/v1/users?q=a%00b", "q"), ("/v1/events/log?types=a%00b", "types"), ("/v1/users/u1/conversations?cursor=%00", "cursor"),
                ("/v1/users/u1/conversations/peer/u2/messages?types=1%00", "types"), ("/v1/users?unknown=%00", "unknown"),
                ("/v1/users/a%00b", "user_id"), ("/v1/messages/m%00", "message_id"), ("/v1/users/u1/unread_count?marks=%00", "marks"),
            ] {
                Self.expectInvalid(try app.request(.get, path), field: field, path)
            }
            Self.expectInvalid(
                try server.request(.delete, "/v1/apps/\(app.appID)/keys/key%00x", bearer: server.adminKey), field: "key_id", "key_id")
            #expect(try ConventionsTests.keyCount(server, app.appID) == 1)
            // A token of the JWT form whose issuer holds NUL names no app: 401, not a lookup.
            let claims = Crypto.base64URLEncode(Array(#"{"iss":"a\u0000b","sub":"u1","iat":1,"exp":99999999999,"gen":0}"#.utf8))
            let forged =
                Crypto.base64URLEncode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8)) + "." + claims + "."
                + Crypto.base64URLEncode(Crypto.randomBytes(32))
            Self.expectProblem(try server.request(.get, "/v1/users/u1", bearer: forged), 401, .tokenInvalid, "issuer with NUL")
        }
    }

    // MARK: - Item 5: protocol errors and the precedence of 413

    @Test func protocolErrorsOverASocketCarryTheirCatalogueCodes() throws {
        let server = try TestServer.start { $0.requestHeadTimeoutMillis = 1000 }
        defer { server.stop() }
        let app = try server.createApp()
        let auth = "Authorization: Bearer \(app.key)\r\n"

        let (wrong, _) = try Self.raw(server, "DELETE /v1/settings HTTP/1.1\r\nHost: x\r\n\(auth)\r\n")
        Self.expectProblem(wrong, 405, .methodNotAllowed, "405")
        #expect(wrong.headers["Allow"]?.contains("PATCH") == true)
        #expect((try? JSONValue.parse(wrong.body))?["title"]?.stringValue == "method_not_allowed")

        let cases: [(String, Int, Int, String)] = [
            (
                "GET /v1/settings HTTP/1.1\r\nHost: x\r\nX-Big: \(String(repeating: "a", count: 17_000))\r\n\r\n", 431,
                ErrorCode.requestHeaderFieldsTooLarge.code, "headers too large"
            ),
            ("POST /v1/users HTTP/1.1\r\nHost: x\r\n\(auth)Transfer-Encoding: gzip\r\n\r\n", 501, ErrorCode.notImplemented.code, "transfer coding"),
            ("GET /v1/settings HTTP/2.0\r\nHost: x\r\n\(auth)\r\n", 505, ErrorCode.httpVersionNotSupported.code, "HTTP/2.0"),
            ("GET /v1/settings HTTP/1.1\r\n\(auth)\r\n", 400, ErrorCode.badRequest.code, "no Host"),
            ("POST /v1/users HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400, ErrorCode.badRequest.code, "two lengths"),
            ("POST /v1/users HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400, ErrorCode.badRequest.code, "bad chunk size"),
            ("GET /v1/users?q=%zz HTTP/1.1\r\nHost: x\r\n\(auth)\r\n", 400, ErrorCode.badRequest.code, "bad escape in the query"),
        ]
        for (request, status, code, name) in cases {
            let (r, connection) = try Self.raw(server, request)
            Self.expectProblem(r, status, code, name)
            if name != "bad escape in the query" {  // a malformed query string does not break the framing
                #expect(connection.isClosedByPeer(timeout: .seconds(2)), "\(name): the connection closes")
            }
        }

        // A head that stops arriving: 408 before the connection closes.
        let slow = try HTTPClientConnection(host: "127.0.0.1", port: server.port, timeout: .seconds(10))
        try slow.sendRaw("GET /v1/settings HTTP/1.1\r\nHost: x\r\n")
        Self.expectProblem(try slow.readResponse(), 408, .requestTimeout, "slow head")
        #expect(slow.isClosedByPeer(timeout: .seconds(3)))
    }

    /// The precedence of docs/errors.md#problems-rfc-9457: credentials → `Idempotency-Key` → 415 → 413. The body is
    /// never buffered past 1 MiB: the request is answered from its head and the rest of the body dropped.
    @Test func aBodyOverOneMiBIs413OnlyAfterCredentialsIdempotencyAndMediaType() throws {
        try withApp { server, app in
            try app.createUser("u1")
            let token = try app.token(for: "u1")
            let big = #"{"user_id":"big","name":""# + String(repeating: "x", count: 2 << 20) + #""}"#

            Self.expectProblem(try server.request(.post, "/v1/users", json: big), 401, .unauthenticated, "no credential")
            Self.expectProblem(try app.request(.post, "/v1/apps", json: big), 403, .forbidden, "an app key on an admin route")
            Self.expectProblem(try server.request(.post, "/v1/users", bearer: token, json: big), 403, .forbidden, "a user token on an app route")

            let used: HTTPHeaders = ["Idempotency-Key": "k1"]
            #expect(try app.request(.post, "/v1/users", json: #"{"user_id":"i1"}"#, headers: used).status == 201)
            Self.expectProblem(
                try app.request(.post, "/v1/users", json: big, headers: used), 422, .idempotencyKeyReused, "a key used by another request")
            Self.expectProblem(
                try app.request(.post, "/v1/users", json: big, headers: ["Content-Type": "text/plain"]), 415, .unsupportedMediaType, "415")

            let fresh: HTTPHeaders = ["Idempotency-Key": "k2"]
            let tooLarge = try app.request(.post, "/v1/users", json: big, headers: fresh)
            Self.expectProblem(tooLarge, 413, .payloadTooLarge, "413")
            #expect(tooLarge.headers["Connection"] == "close")
            Self.expectProblem(try app.request(.get, "/v1/users/big"), 404, .userNotFound, "nothing was written")
            // The 413 claimed no key: the key still runs its first request.
            let after = try app.request(.post, "/v1/users", json: #"{"user_id":"i2"}"#, headers: fresh)
            #expect(after.status == 201, "\(after.text)")
            #expect(after.headers["Idempotent-Replayed"] == nil)
            Self.expectProblem(try server.request(.post, "/v1/apps", bearer: server.adminKey, json: big), 413, .payloadTooLarge, "admin route")
        }
    }

    // MARK: - Item 6: one canonical path

    @Test func noOtherSpellingOfAPathReachesItsRoute() throws {
        try withApp { server, app in
            try app.createUser("u1")
            #expect(try server.request(.get, "/v1/apps", bearer: server.adminKey).status == 200)
            // Percent-encoded unreserved characters are those characters (RFC 3986, section 6.2.2.2), as a normalising
            // proxy sees them.
            #expect(try server.request(.get, "/%76%31/apps", bearer: server.adminKey).status == 200)
            #expect(try app.request(.get, "/v1/users/%75%31").json?["user_id"]?.stringValue == "u1")
            for path in ["//v1//apps", "//v1/apps", "/v1//apps", "/v1/apps/", "/v1/apps//", "/v1/apps%2F", "/v1%2Fapps", "/v1/apps/\(app.appID)/"] {
                Self.expectProblem(try server.request(.get, path, bearer: server.adminKey), 404, .notFound, path)
            }
            Self.expectProblem(try app.request(.get, "/v1/users/u1/"), 404, .notFound, "trailing slash")
        }
    }

    // MARK: - Item 7: what the document calls valid, the server accepts

    @Test func aWholeNumberIsAnIntegerHoweverItIsWritten() throws {
        try withApp { server, app in
            try app.createUser("u1")
            for value in ["3600", "3600.0", "3.6e3", "36E2", "360000e-2"] {
                let r = try app.request(.put, "/v1/users/u1/status/custom", json: #"{"custom_status":"busy","expires_in_s":\#(value)}"#)
                #expect(r.status == 200, "expires_in_s \(value): \(r.text)")
            }
            for value in ["3600.5", "\"3600\"", "1e300"] {
                let r = try app.request(.put, "/v1/users/u1/status/custom", json: #"{"custom_status":"busy","expires_in_s":\#(value)}"#)
                Self.expectInvalid(r, field: "body.expires_in_s", "expires_in_s \(value)")
            }
            // Stored and answered as the integer it is.
            let patched = try app.request(.patch, "/v1/settings", json: #"{"revoke_window_s":77.0}"#)
            #expect(patched.status == 200, "\(patched.text)")
            #expect(!patched.text.contains("77.0"), "\(patched.text)")
            #expect(try app.request(.get, "/v1/settings").json?["revoke_window_s"] == .int(77))
            let token = try app.request(.post, "/v1/users/u1/tokens", json: #"{"ttl_s":6.0e1}"#)
            #expect(token.status == 201, "\(token.text)")
        }
    }

    @Test func anEmptyCursorIsTheFirstPage() throws {
        try withApp { server, app in
            try app.createUser("u1")
            try app.createUser("u2")
            let first = try app.request(.get, "/v1/users?limit=1")
            let empty = try app.request(.get, "/v1/users?limit=1&cursor=")
            #expect(empty.status == 200, "\(empty.text)")
            #expect(empty.json == first.json)
            for path in ["/v1/users/u1/conversations?cursor=", "/v1/users/u1/conversations/peer/u2/messages?cursor=", "/v1/apps?cursor="] {
                let r = path.hasPrefix("/v1/apps") ? try server.request(.get, path, bearer: server.adminKey) : try app.request(.get, path)
                #expect(r.status == 200, "\(path): \(r.text)")
            }
            Self.expectProblem(try app.request(.get, "/v1/users?cursor=x"), 400, .invalidCursor, "a cursor that is not one")
        }
    }

    @Test func conversationsUnreadCountAndHistoryOfAnUnknownOrDeletedUserAre404() throws {
        try withApp { server, app in
            for user in ["u1", "u2", "u3"] { try app.createUser(user) }
            let sent = try app.request(
                .post, "/v1/messages", json: #"{"from":"u3","conversation_type":"peer","to":"u1","type":1,"body":{"text":"hi"}}"#)
            #expect(sent.status == 201, "\(sent.text)")
            #expect(try app.request(.delete, "/v1/users/u3").status == 204)
            for user in ["ghost", "u3"] {
                for path in [
                    "/v1/users/\(user)/conversations", "/v1/users/\(user)/unread_count", "/v1/users/\(user)/conversations/peer/u1/messages",
                    "/v1/users/\(user)/conversations/group/g1/messages",
                ] {
                    Self.expectProblem(try app.request(.get, path), 404, .userNotFound, path)
                }
                // Patching an entry is 404 too (for a user that does not exist, schemathesis found a 500 from the foreign
                // key of the entry the patch creates).
                let patch = "/v1/users/\(user)/conversations/peer/u1"
                Self.expectProblem(try app.request(.patch, patch, json: #"{"pinned":true}"#), 404, .userNotFound, patch)
            }
            // A user that exists reads empty answers, and the other side of the deleted user's conversation is kept.
            #expect(try app.request(.get, "/v1/users/u2/conversations").json?["items"]?.arrayValue?.isEmpty == true)
            #expect(try app.request(.get, "/v1/users/u2/unread_count").json?["unread_count"]?.intValue == 0)
            #expect(try app.request(.get, "/v1/users/u2/conversations/peer/u1/messages").json?["items"]?.arrayValue?.isEmpty == true)
            #expect(try app.request(.get, "/v1/users/u1/conversations/peer/u3/messages").json?["items"]?.arrayValue?.count == 1)
            #expect(try app.request(.get, "/v1/users/u1/unread_count").json?["unread_count"]?.intValue == 1)
        }
    }

    // MARK: - Item 8: Host, a stalled body, include_hidden

    @Test func anHTTP11RequestWithoutHostIs400() throws {
        try withApp { server, app in
            let body = #"{"user_id":"nh"}"#
            let (r, connection) = try Self.raw(
                server,
                "POST /v1/users HTTP/1.1\r\nAuthorization: Bearer \(app.key)\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
            )
            Self.expectProblem(r, 400, .badRequest, "no Host")
            #expect(connection.isClosedByPeer(timeout: .seconds(2)))
            Self.expectProblem(try app.request(.get, "/v1/users/nh"), 404, .userNotFound, "nothing was written")
            // HTTP/1.0 has no Host requirement.
            let (old, _) = try Self.raw(server, "GET /healthz HTTP/1.0\r\n\r\n")
            #expect(old.status == 200)
        }
    }

    @Test func aStalledBodyIsAnswered408BeforeTheConnectionCloses() throws {
        let server = try TestServer.start { $0.requestBodyTimeoutMillis = 1000 }
        defer { server.stop() }
        let app = try server.createApp()
        let connection = try HTTPClientConnection(host: "127.0.0.1", port: server.port, timeout: .seconds(10))
        try connection.sendRaw(
            "POST /v1/users HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(app.key)\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"user_id\":"
        )
        let started = ContinuousClock.now
        let r = try connection.readResponse()
        Self.expectProblem(r, 408, .requestTimeout, "stalled body")
        #expect(r.headers["Connection"] == "close")
        #expect(ContinuousClock.now - started < .seconds(5))
        #expect(connection.isClosedByPeer(timeout: .seconds(3)))
    }

    @Test func includeHiddenWithAUserTokenIs403() throws {
        try withApp { server, app in
            try app.createUser("u1")
            try app.createUser("u2")
            #expect(try app.request(.post, "/v1/groups", json: #"{"group_id":"g1","operator":"u1","members":["u2"]}"#).status == 201)
            let token = try app.token(for: "u1")
            for path in ["/v1/users/u1/conversations/peer/u2/messages", "/v1/users/u1/conversations/group/g1/messages", "/v1/groups/g1/messages"] {
                Self.expectProblem(try server.request(.get, path + "?include_hidden=true", bearer: token), 403, .forbidden, path)
                #expect(try server.request(.get, path + "?include_hidden=false", bearer: token).status == 200, "\(path)")
                #expect(try app.request(.get, path + "?include_hidden=true").status == 200, "\(path) with the app key")
            }
        }
    }
}
