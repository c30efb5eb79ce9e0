import Dispatch
import Foundation
import Glibc
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

/// The API conventions (docs/api.md) end to end through HTTP: credentials (docs/users.md#user-tokens), problems
/// (docs/errors.md#problems-rfc-9457), CORS and content types (docs/api.md), `Idempotency-Key`
/// (docs/errors.md#retrying-safely) and rate limits (docs/errors.md#rate-limits).
@Suite("API conventions")
struct ConventionsTests: ProblemAssertions {
    // MARK: - Helpers (namespaced so they never clash with other test files of the module)

    /// A request over a raw connection, for header-level control (no Content-Type added, any body).
    static func raw(
        _ server: TestServer, _ method: HTTPMethod, _ path: String, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8]? = nil
    ) throws -> HTTPClientResponse {
        let connection = try HTTPClientConnection(host: "127.0.0.1", port: server.port, timeout: .seconds(30))
        defer { connection.close() }
        return try connection.send(method: method, path: path, headers: headers, body: body)
    }

    static func keyCount(_ server: TestServer, _ appID: String) throws -> Int {
        try server.request(.get, "/v1/apps/\(appID)/keys", bearer: server.adminKey).json?["items"]?.arrayValue?.count ?? -1
    }

    static let exposeHeaders =
        "X-Request-Id, RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset, Retry-After, WWW-Authenticate, Idempotent-Replayed, Parley-Duplicate, "
        + "Parley-Last-Event-ID, Location, Parley-File-Id, Tus-Resumable, Tus-Version, Tus-Extension, Tus-Max-Size, Upload-Offset, Upload-Length, "
        + "Upload-Metadata, Upload-Expires"

    // MARK: - Credentials (docs/users.md#user-tokens)

    @Test func aMissingOrUnrecognisedCredentialIs401WithWWWAuthenticate() throws {
        try withApp { server, app in
            let missing = try server.request(.get, "/v1/settings")
            Self.expectProblem(missing, 401, .unauthenticated, "missing")
            #expect(missing.headers["WWW-Authenticate"] == "Bearer")
            #expect(missing.json?["title"]?.stringValue == "unauthenticated")

            let unknownKey = "pk.\(app.appID)." + String(repeating: "A", count: 43)
            let otherAppKey = "pk.nosuchapp." + String(repeating: "b", count: 43)
            let values = [
                "Basic \(app.key)", "Bearer", "Bearer ", "Token \(app.key)", "Bearer hello", "Bearer \(unknownKey)",
                "Bearer \(otherAppKey)", "Bearer \(app.key)x", "Bearer a.b.c", "Bearer \(server.adminKey)x",
            ]
            for value in values {
                let r = try Self.raw(server, .get, "/v1/settings", headers: ["Authorization": value])
                Self.expectProblem(r, 401, .unauthenticated, "Authorization: \(value)")
                #expect(r.headers["WWW-Authenticate"] == "Bearer", "Authorization: \(value)")
            }
            // The scheme is case-insensitive.
            #expect(try Self.raw(server, .get, "/v1/settings", headers: ["Authorization": "bearer \(app.key)"]).status == 200)
            // Admin routes too.
            Self.expectProblem(try server.request(.get, "/v1/apps", bearer: "nope"), 401, .unauthenticated)
            Self.expectProblem(try server.request(.get, "/v1/apps"), 401, .unauthenticated)
        }
    }

    @Test func aJWTShapedValueThatFailsVerificationIs6000103() throws {
        try withApp { server, app in
            let now = Int64(time(nil))
            let badSignature = UserToken.mint(
                appID: app.appID, userID: "u1", issuedAt: now, expiresAt: now + 3600, generation: 0, secret: Crypto.randomBytes(32))
            let unknownApp = UserToken.mint(
                appID: "nosuchapp", userID: "u1", issuedAt: now, expiresAt: now + 3600, generation: 0, secret: Crypto.randomBytes(32))
            let claims = Crypto.base64URLEncode(Array(#"{"iss":"\#(app.appID)","sub":"u1","iat":\#(now),"exp":\#(now + 3600),"gen":0}"#.utf8))
            let algNone = Crypto.base64URLEncode(Array(#"{"alg":"none","typ":"JWT"}"#.utf8)) + "." + claims + "."
            let hs512 =
                Crypto.base64URLEncode(Array(#"{"alg":"HS512","typ":"JWT"}"#.utf8)) + "." + claims + "."
                + Crypto.base64URLEncode(Crypto.randomBytes(64))
            for (name, token) in [("bad signature", badSignature), ("unknown app", unknownApp), ("alg none", algNone), ("HS512", hs512)] {
                let r = try server.request(.get, "/v1/settings", bearer: token)
                Self.expectProblem(r, 401, .tokenInvalid, name)
                #expect(r.headers["WWW-Authenticate"] == "Bearer", "\(name)")
                #expect(r.json?["title"]?.stringValue == "token_invalid", "\(name)")
            }
        }
    }

    @Test func theAdminKeyOnAppRoutesNeedsAKnownParleyAppID() throws {
        try withApp { server, app in
            let missing = try server.request(.get, "/v1/settings", bearer: server.adminKey)
            Self.expectProblem(missing, 400, .invalidParams)
            #expect(Self.fields(missing).contains { $0.contains("Parley-App-Id") }, "\(missing.text)")
            Self.expectProblem(
                try server.request(.get, "/v1/events/log", bearer: server.adminKey), 400, .invalidParams, "events log without Parley-App-Id")
            for unknown in ["nosuchapp", "Not-An-App-Id!"] {
                Self.expectProblem(
                    try server.request(.get, "/v1/settings", bearer: server.adminKey, headers: ["Parley-App-Id": unknown]), 404, .notFound,
                    "Parley-App-Id \(unknown)")
            }
            // With the header the admin key acts exactly as the app.
            let asApp: HTTPHeaders = ["Parley-App-Id": app.appID]
            let viaAdmin = try server.request(.get, "/v1/settings", bearer: server.adminKey, headers: asApp)
            #expect(viaAdmin.status == 200, "\(viaAdmin.text)")
            #expect(viaAdmin.json == (try app.request(.get, "/v1/settings").json))
            #expect(viaAdmin.headers["RateLimit-Limit"] == "200", "the admin key acting as the app uses the app's bucket")
            let patched = try server.request(.patch, "/v1/settings", bearer: server.adminKey, json: #"{"revoke_window_s":77}"#, headers: asApp)
            #expect(patched.status == 200, "\(patched.text)")
            #expect(try app.request(.get, "/v1/settings").json?["revoke_window_s"]?.intValue == 77)
            let log = try server.request(.get, "/v1/events/log?after=earliest", bearer: server.adminKey, headers: asApp)
            #expect(log.status == 200, "\(log.text)")
            #expect(log.json?["items"]?.arrayValue?.map { $0["type"]?.stringValue } == ["app.settings_updated"])
            #expect(try server.request(.get, "/v1/stats", bearer: server.adminKey, headers: asApp).status == 200)
            // Another app is not affected.
            let other = try server.createApp()
            #expect(try other.request(.get, "/v1/settings").json?["revoke_window_s"]?.intValue == 120)
        }
    }

    @Test func appKeysMayNotCallAdminRoutes() throws {
        try withApp(testClock: true) { server, app in
            Self.expectProblem(try app.request(.get, "/v1/apps"), 403, .forbidden)
            Self.expectProblem(try app.request(.get, "/v1/test/clock"), 403, .forbidden)
            Self.expectProblem(try app.request(.post, "/v1/test/clock/advance", json: #"{"ms":1000}"#), 403, .forbidden)
            #expect(try app.request(.get, "/v1/apps").json?["title"]?.stringValue == "forbidden")
            #expect(try server.request(.get, "/v1/test/clock", bearer: server.adminKey).json?["offset_ms"]?.intValue == 0)
        }
    }

    /// The token secret of an app, read from the database (white box: to sign tokens for edge cases).
    static func tokenSecret(_ server: TestServer, _ appID: String) throws -> [UInt8] {
        try server.app.services.pool.withConnection { db in try AppStore.fetchRecord(appID: appID, on: db)?.tokenSecret ?? [] }
    }

    @Test func userTokensAreVerifiedInOrderAndMayNotCallAppOrAdminRoutes() throws {
        try withApp(testClock: true) { server, app in
            try app.createUser("u1")
            let token = try app.token(for: "u1", ttl: 60)
            for (method, path, body) in [
                (HTTPMethod.get, "/v1/settings", nil), (.patch, "/v1/settings", #"{"revoke_window_s":1}"#), (.get, "/v1/apps", nil),
                (.get, "/v1/apps/\(app.appID)", nil), (.get, "/v1/test/clock", nil), (.get, "/v1/events/log", nil), (.get, "/v1/stats", nil),
            ] as [(HTTPMethod, String, String?)] {
                Self.expectProblem(try server.request(method, path, bearer: token, json: body), 403, .forbidden, "user token \(method) \(path)")
            }
            #expect(try app.request(.get, "/v1/settings").json?["revoke_window_s"]?.intValue == 120)

            // Correctly signed tokens: an unknown user → 6000103; expiry is checked before the user (6000106).
            let secret = try Self.tokenSecret(server, app.appID)
            #expect(secret.count >= 32)
            let now = (try server.request(.get, "/v1/test/clock", bearer: server.adminKey).json?["now"]?.intValue ?? 0) / 1000
            let ghost = UserToken.mint(appID: app.appID, userID: "ghost", issuedAt: now, expiresAt: now + 600, generation: 0, secret: secret)
            Self.expectProblem(try server.request(.get, "/v1/settings", bearer: ghost), 401, .tokenInvalid, "unknown user")
            let expiredGhost = UserToken.mint(
                appID: app.appID, userID: "ghost", issuedAt: now - 600, expiresAt: now - 1, generation: 0, secret: secret)
            let expired = try server.request(.get, "/v1/settings", bearer: expiredGhost)
            Self.expectProblem(expired, 401, .tokenExpired, "expired token of an unknown user")
            #expect(expired.headers["WWW-Authenticate"] == "Bearer")
            // A signature of another app's secret is a bad signature.
            let other = try server.createApp()
            let foreign = UserToken.mint(
                appID: app.appID, userID: "u1", issuedAt: now, expiresAt: now + 600, generation: 0, secret: try Self.tokenSecret(server, other.appID))
            Self.expectProblem(try server.request(.get, "/v1/settings", bearer: foreign), 401, .tokenInvalid, "foreign secret")

            // The minted token expires on the server clock.
            #expect(try server.request(.post, "/v1/test/clock/advance", bearer: server.adminKey, json: #"{"ms":61000}"#).status == 200)
            Self.expectProblem(try server.request(.get, "/v1/settings", bearer: token), 401, .tokenExpired, "expired after advance")
        }
    }

    @Test func userTokensSurviveKeyRevocationButNotAppDeletion() throws {
        try withApp { server, app in
            try app.createUser("u1")
            let token = try app.token(for: "u1")
            // A token is "valid but not allowed" on an app-only route: 403, not 401.
            Self.expectProblem(try server.request(.get, "/v1/settings", bearer: token), 403, .forbidden, "fresh token")
            // Revoking the key that minted it leaves it valid (user tokens are unaffected by app key revocation).
            let second = try server.request(.post, "/v1/apps/\(app.appID)/keys", bearer: server.adminKey, json: "{}")
            #expect(second.status == 201)
            let keys = try server.request(.get, "/v1/apps/\(app.appID)/keys", bearer: server.adminKey).json?["items"]?.arrayValue ?? []
            let firstID = keys.first { $0["prefix"]?.stringValue == String(app.key.prefix(12)) }?["key_id"]?.stringValue ?? ""
            #expect(try server.request(.delete, "/v1/apps/\(app.appID)/keys/\(firstID)", bearer: server.adminKey).status == 204)
            Self.expectProblem(try app.request(.get, "/v1/settings"), 401, .unauthenticated, "revoked key")
            Self.expectProblem(try server.request(.get, "/v1/settings", bearer: token), 403, .forbidden, "token after key revocation")
            // Deleting the app makes its tokens name an unknown app: 6000103.
            #expect(try server.request(.delete, "/v1/apps/\(app.appID)", bearer: server.adminKey).status == 204)
            Self.expectProblem(try server.request(.get, "/v1/settings", bearer: token), 401, .tokenInvalid, "token of a deleted app")
        }
    }

    @Test func adminRoutesAreNotRateLimitedEvenWithParleyAppID() throws {
        // The admin key on /v1/apps/** and /v1/test/** is not limited (docs/errors.md#rate-limits); only app routes use
        // the app's bucket.
        try withApp(settings: #"{"rate_limit_app_rps": 1}"#) { server, app in
            var statuses: [Int] = []
            for _ in 0..<4 {
                let r = try server.request(.get, "/v1/apps/\(app.appID)", bearer: server.adminKey, headers: ["Parley-App-Id": app.appID])
                statuses.append(r.status)
                #expect(r.headers["RateLimit-Limit"] == nil, "admin route answered with RateLimit headers")
            }
            #expect(statuses == [200, 200, 200, 200])
            // The app's own bucket was not drained by them.
            #expect(try app.request(.get, "/v1/settings").status == 200)
        }
    }

    @Test func adminRoutesIgnoreAnUnknownParleyAppID() throws {
        try withTestServer { server in
            _ = try server.createApp()
            // Parley-App-Id applies to app routes only (docs/api.md); admin routes ignore it.
            let r = try server.request(.get, "/v1/apps", bearer: server.adminKey, headers: ["Parley-App-Id": "nosuchapp"])
            #expect(r.status == 200, "\(r.text)")
        }
    }

    // MARK: - Content types and bodies (docs/api.md, docs/errors.md#problems-rfc-9457)

    @Test func bodiesMustBeJSON() throws {
        try withApp { server, app in
            let plain: HTTPHeaders = ["Content-Type": "text/plain"]
            Self.expectProblem(
                try server.request(.post, "/v1/apps", bearer: server.adminKey, json: #"{"app_id":"plain","name":"x"}"#, headers: plain), 415,
                .unsupportedMediaType, "POST text/plain")
            #expect(try server.request(.get, "/v1/apps/plain", bearer: server.adminKey).status == 404)
            Self.expectProblem(
                try app.request(.patch, "/v1/settings", json: #"{"revoke_window_s":1}"#, headers: plain), 415, .unsupportedMediaType,
                "PATCH text/plain")
            Self.expectProblem(
                try app.request(.patch, "/v1/settings", json: #"{"revoke_window_s":1}"#, headers: ["Content-Type": "application/xml"]), 415,
                .unsupportedMediaType)
            #expect(
                try server.request(.post, "/v1/apps", bearer: server.adminKey, json: "{}", headers: plain).json?["title"]?.stringValue
                    == "unsupported_media_type")
            // A body without any Content-Type.
            let noType = try Self.raw(
                server, .post, "/v1/apps", headers: ["Authorization": "Bearer \(server.adminKey)"],
                body: Array(#"{"app_id":"notype","name":"x"}"#.utf8))
            Self.expectProblem(noType, 415, .unsupportedMediaType, "no Content-Type")
            #expect(try app.request(.get, "/v1/settings").json?["revoke_window_s"]?.intValue == 120)

            // Credential errors come before 415.
            Self.expectProblem(
                try server.request(.post, "/v1/apps", json: #"{"name":"x"}"#, headers: plain), 401, .unauthenticated, "401 before 415")
            Self.expectProblem(try app.request(.post, "/v1/apps", json: #"{"name":"x"}"#, headers: plain), 403, .forbidden, "403 before 415")

            // JSON with parameters, in any case, is accepted.
            for type in ["application/json; charset=utf-8", "Application/JSON", "application/json;charset=UTF-8"] {
                let r = try server.request(.post, "/v1/apps", bearer: server.adminKey, json: #"{"name":"typed"}"#, headers: ["Content-Type": type])
                #expect(r.status == 201, "Content-Type \(type): \(r.text)")
            }
            // An action whose fields are all optional accepts an empty body, with or without a Content-Type.
            let empty = try Self.raw(
                server, .post, "/v1/apps/\(app.appID)/keys", headers: ["Authorization": "Bearer \(server.adminKey)"], body: [])
            #expect(empty.status == 201, "\(empty.text)")
        }
    }

    @Test func malformedJSONIs400() throws {
        try withApp { server, app in
            for body in [#"{"name":"#, #"{"name":"x"} trailing"#, "{'name':'x'}", #"{"name":"x",}"#, "nul"] {
                let r = try server.request(.post, "/v1/apps", bearer: server.adminKey, json: body)
                Self.expectProblem(r, 400, .invalidParams, "body \(body)")
                #expect(Self.fields(r) == ["body"], "body \(body): \(r.text)")
                #expect(r.json?["title"]?.stringValue == "invalid_params")
            }
            for body in ["[]", #""str""#, "42", "null"] {
                Self.expectProblem(try server.request(.post, "/v1/apps", bearer: server.adminKey, json: body), 400, .invalidParams, "body \(body)")
            }
            Self.expectProblem(try app.request(.patch, "/v1/settings", json: "{"), 400, .invalidParams)
            // Invalid UTF-8 and absurd nesting are 400, never a crash or a 500.
            let invalidUTF8 = try Self.raw(
                server, .post, "/v1/apps", headers: ["Authorization": "Bearer \(server.adminKey)", "Content-Type": "application/json"],
                body: Array(#"{"name":""#.utf8) + [0xFF, 0xFE] + Array(#""}"#.utf8))
            Self.expectProblem(invalidUTF8, 400, .invalidParams, "invalid UTF-8")
            let deep = "{\"name\":\"x\",\"settings\":" + String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000) + "}"
            Self.expectProblem(try server.request(.post, "/v1/apps", bearer: server.adminKey, json: deep), 400, .invalidParams, "deep nesting")
            #expect(try server.request(.get, "/healthz").status == 200)
            #expect(try server.request(.get, "/v1/apps", bearer: server.adminKey).json?["items"]?.arrayValue?.count == 1)
        }
    }

    @Test func oversizedBodiesAre413() throws {
        try withTestServer { server in
            let big = "{\"name\":\"" + String(repeating: "x", count: 1 << 20) + "\"}"
            let r = try server.request(.post, "/v1/apps", bearer: server.adminKey, json: big)
            Self.expectProblem(r, 413, .payloadTooLarge)
        }
    }

    // MARK: - Problems, request ids, routing (docs/errors.md#problems-rfc-9457)

    @Test func everyErrorIsAProblemCarryingTheRequestID() throws {
        try withApp { server, app in
            let cases: [(TestResponse, Int, Int, String)] = [
                (try server.request(.get, "/v1/settings"), 401, ErrorCode.unauthenticated.code, "unauthenticated"),
                (try app.request(.get, "/v1/apps"), 403, ErrorCode.forbidden.code, "forbidden"),
                (try server.request(.post, "/v1/apps", bearer: server.adminKey, json: "{}"), 400, ErrorCode.invalidParams.code, "invalid_params"),
                (try server.request(.get, "/v1/apps/nosuchapp", bearer: server.adminKey), 404, ErrorCode.notFound.code, "not_found"),
                (
                    try server.request(.post, "/v1/apps", bearer: server.adminKey, json: #"{"app_id":"\#(app.appID)","name":"x"}"#), 409,
                    ErrorCode.conflict.code, "conflict"
                ),
                (try app.request(.get, "/v1/events/log?after=abc"), 400, ErrorCode.invalidLastEventId.code, "invalid_last_event_id"),
                (try server.request(.get, "/v1/apps?cursor=zzz", bearer: server.adminKey), 400, ErrorCode.invalidCursor.code, "invalid_cursor"),
            ]
            for (r, status, code, title) in cases {
                Self.expectProblem(r, status, code, title)
                #expect(r.json?["title"]?.stringValue == title)
                #expect(r.json?["code"]?.intValue == Int64(code))
            }
            // Generated request ids differ between requests.
            #expect(cases[0].0.headers["X-Request-Id"] != cases[1].0.headers["X-Request-Id"])

            // A caller's X-Request-Id is echoed on errors and successes.
            let mine: HTTPHeaders = ["X-Request-Id": "client-req-42"]
            let failed = try server.request(.get, "/v1/settings", headers: mine)
            #expect(failed.headers["X-Request-Id"] == "client-req-42")
            #expect(failed.json?["request_id"]?.stringValue == "client-req-42")
            let ok = try app.request(.get, "/v1/settings", headers: ["X-Request-Id": "client-req-43"])
            #expect(ok.status == 200)
            #expect(ok.headers["X-Request-Id"] == "client-req-43")
            #expect(try server.request(.get, "/healthz", headers: mine).headers["X-Request-Id"] == "client-req-42")
            let unknownRoute = try server.request(.get, "/v1/nope", headers: mine)
            #expect(unknownRoute.json?["request_id"]?.stringValue == "client-req-42")
        }
    }

    @Test func unknownRoutesAre404AndWrongMethods405() throws {
        try withApp { server, app in
            for path in ["/v1/nope", "/nope", "/v1/apps/\(app.appID)/nope", "/v2/settings"] {
                Self.expectProblem(try app.request(.get, path), 404, .notFound, path)
                Self.expectProblem(try server.request(.get, path), 404, .notFound, "\(path) without credential")
            }
            let wrong = try app.request(.delete, "/v1/settings")
            #expect(wrong.status == 405, "\(wrong.text)")
            // The HTTP layer's own answers carry their catalogue codes too (docs/errors.md#code-families, 7000014–7000019).
            Self.expectProblem(wrong, 405, .methodNotAllowed, "wrong method")
            Self.expectProblem(try app.request(.get, "/v1/users/%zz"), 400, .badRequest, "bad percent-encoding in the path")
            #expect(wrong.headers["Content-Type"]?.hasPrefix("application/problem+json") == true)
            #expect(wrong.json?["status"]?.intValue == 405)
            #expect(wrong.json?["request_id"]?.stringValue == wrong.headers["X-Request-Id"])
            let allow = Set((wrong.headers["Allow"] ?? "").split(separator: ",").map { String($0.filter { $0 != " " }) })
            #expect(allow.isSuperset(of: ["GET", "PATCH"]), "Allow: \(wrong.headers["Allow"] ?? "none")")
            #expect(!allow.contains("DELETE") && !allow.contains("POST"))
            let put = try server.request(.put, "/v1/apps", bearer: server.adminKey, json: "{}")
            #expect(put.status == 405)
            let putAllow = Set((put.headers["Allow"] ?? "").split(separator: ",").map { String($0.filter { $0 != " " }) })
            #expect(putAllow.isSuperset(of: ["GET", "POST"]), "Allow: \(put.headers["Allow"] ?? "none")")
            #expect(put.headers["Access-Control-Allow-Origin"] == "*")
        }
    }

    // MARK: - CORS

    @Test func corsHeadersOnEveryResponseAndPreflights() throws {
        try withApp { server, app in
            let responses = [
                try app.request(.get, "/v1/settings"), try server.request(.get, "/v1/settings"), try server.request(.get, "/healthz"),
                try server.request(.get, "/v1/nope"), try server.request(.get, "/v1/apps", bearer: server.adminKey),
            ]
            for r in responses {
                #expect(r.headers["Access-Control-Allow-Origin"] == "*", "\(r.status)")
                #expect(r.headers["Access-Control-Expose-Headers"] == Self.exposeHeaders, "\(r.status)")
            }
            for path in ["/v1/apps", "/v1/settings", "/v1/users/u1/events", "/anything/at/all"] {
                let r = try Self.raw(
                    server, .options, path,
                    headers: [
                        "Origin": "https://console.example.com", "Access-Control-Request-Method": "PATCH",
                        "Access-Control-Request-Headers": "authorization, content-type",
                    ])
                #expect(r.status == 204, "OPTIONS \(path): \(r.text)")
                #expect(r.body.isEmpty)
                #expect(r.headers["Access-Control-Allow-Origin"] == "*")
                #expect(r.headers["Access-Control-Allow-Methods"] == "GET, POST, PUT, PATCH, DELETE, OPTIONS")
                #expect(
                    r.headers["Access-Control-Allow-Headers"]
                        == "Authorization, Content-Type, Idempotency-Key, Last-Event-ID, Parley-App-Id, X-Request-Id, Tus-Resumable, "
                        + "Upload-Length, Upload-Metadata, Upload-Offset")
                #expect(r.headers["Access-Control-Max-Age"] == "86400")
                #expect(r.headers["RateLimit-Limit"] == nil, "preflights are not rate-limited")
            }
        }
    }

    // MARK: - Idempotency-Key (docs/errors.md#retrying-safely)

    @Test func idempotencyKeyReplaysTheStoredResponseWithoutASecondEffect() throws {
        try withApp { server, app in
            let path = "/v1/apps/\(app.appID)/keys"
            let key: HTTPHeaders = ["Idempotency-Key": "create-key-1"]
            let first = try server.request(.post, path, bearer: server.adminKey, json: #"{"name":"k1"}"#, headers: key)
            #expect(first.status == 201, "\(first.text)")
            #expect(first.headers["Idempotent-Replayed"] == nil)
            #expect(try Self.keyCount(server, app.appID) == 2)

            let replay = try server.request(.post, path, bearer: server.adminKey, json: #"{"name":"k1"}"#, headers: key)
            #expect(replay.status == 201, "\(replay.text)")
            #expect(replay.headers["Idempotent-Replayed"] == "true")
            #expect(replay.body == first.body)
            #expect(replay.headers["Content-Type"]?.hasPrefix("application/json") == true)
            #expect(replay.headers.values("Content-Type").count == 1)
            #expect(replay.headers["X-Request-Id"] != first.headers["X-Request-Id"])
            #expect(try Self.keyCount(server, app.appID) == 2, "a replay must not create a second key")

            // The stored response is replayed before any other check, the content type included.
            let replayPlain = try server.request(
                .post, path, bearer: server.adminKey, json: #"{"name":"k1"}"#,
                headers: ["Idempotency-Key": "create-key-1", "Content-Type": "text/plain"])
            #expect(replayPlain.status == 201, "\(replayPlain.text)")
            #expect(replayPlain.headers["Idempotent-Replayed"] == "true")

            // Same key, another body or another path → 422 7000003, and no effect.
            let otherBody = try server.request(.post, path, bearer: server.adminKey, json: #"{"name":"k2"}"#, headers: key)
            Self.expectProblem(otherBody, 422, .idempotencyKeyReused, "other body")
            #expect(otherBody.json?["title"]?.stringValue == "idempotency_key_reused")
            let other = try server.createApp()
            Self.expectProblem(
                try server.request(.post, "/v1/apps/\(other.appID)/keys", bearer: server.adminKey, json: #"{"name":"k1"}"#, headers: key), 422,
                .idempotencyKeyReused, "other path")
            #expect(try Self.keyCount(server, app.appID) == 2)
            #expect(try Self.keyCount(server, other.appID) == 1)

            // Key length: 255 printable characters are fine, 256 are not (and do nothing).
            let longest = try server.request(
                .post, path, bearer: server.adminKey, json: #"{"name":"k3"}"#, headers: ["Idempotency-Key": String(repeating: "k", count: 255)])
            #expect(longest.status == 201, "\(longest.text)")
            #expect(try Self.keyCount(server, app.appID) == 3)
            let tooLong = try server.request(
                .post, path, bearer: server.adminKey, json: #"{"name":"k4"}"#, headers: ["Idempotency-Key": String(repeating: "k", count: 256)])
            Self.expectProblem(tooLong, 400, .invalidParams, "256-char key")
            #expect(Self.fields(tooLong).contains { $0.contains("Idempotency-Key") }, "\(tooLong.text)")
            #expect(try Self.keyCount(server, app.appID) == 3)

            // A stored client error is replayed too.
            let badFirst = try server.request(
                .post, "/v1/apps", bearer: server.adminKey, json: #"{"name":""}"#, headers: ["Idempotency-Key": "bad-create"])
            Self.expectProblem(badFirst, 400, .invalidParams)
            let badReplay = try server.request(
                .post, "/v1/apps", bearer: server.adminKey, json: #"{"name":""}"#, headers: ["Idempotency-Key": "bad-create"])
            #expect(badReplay.status == 400)
            #expect(badReplay.headers["Idempotent-Replayed"] == "true")
            #expect(badReplay.body == badFirst.body)

            // App creation replays the created app (with the same secret) instead of answering 409.
            let create: HTTPHeaders = ["Idempotency-Key": "create-app"]
            let created = try server.request(.post, "/v1/apps", bearer: server.adminKey, json: #"{"app_id":"idem-app","name":"i"}"#, headers: create)
            #expect(created.status == 201)
            let again = try server.request(.post, "/v1/apps", bearer: server.adminKey, json: #"{"app_id":"idem-app","name":"i"}"#, headers: create)
            #expect(again.status == 201, "\(again.text)")
            #expect(again.json?["key"]?["secret"] == created.json?["key"]?["secret"])
            #expect(try Self.keyCount(server, "idem-app") == 1)
        }
    }

    @Test func idempotencyKeysAreScopedPerAppAndCredentialKind() throws {
        try withApp { server, a in
            let b = try server.createApp()
            let key: HTTPHeaders = ["Idempotency-Key": "create-u1"]
            let body = #"{"user_id":"u1","name":"One"}"#
            let first = try a.request(.post, "/v1/users", json: body, headers: key)
            #expect(first.status == 201, "\(first.text)")
            // The admin key with Parley-App-Id counts as the app's key: a replay.
            let asA = try server.request(
                .post, "/v1/users", bearer: server.adminKey, json: body, headers: ["Idempotency-Key": "create-u1", "Parley-App-Id": a.appID])
            #expect(asA.status == 201, "\(asA.text)")
            #expect(asA.headers["Idempotent-Replayed"] == "true")
            #expect(asA.body == first.body)
            // Another app with the same key executes on its own.
            let inB = try b.request(.post, "/v1/users", json: body, headers: key)
            #expect(inB.status == 201, "\(inB.text)")
            #expect(inB.headers["Idempotent-Replayed"] == nil)
            // The replay wrote no second user.created event.
            let created = try a.events().filter { $0["type"]?.stringValue == "user.created" }
            #expect(created.count == 1)
            // An empty key is invalid.
            let empty = try a.request(.post, "/v1/users", json: #"{"user_id":"u2"}"#, headers: ["Idempotency-Key": ""])
            Self.expectProblem(empty, 400, .invalidParams, "empty Idempotency-Key")
        }
    }

    @Test func concurrentRequestsWithOneIdempotencyKeyExecuteOnce() throws {
        try withApp(poolSize: 8) { server, app in
            let count = 8
            let results = Mutex<[(Int, String?, [UInt8], Int?)]>([])
            let group = DispatchGroup()
            for _ in 0..<count {
                group.enter()
                Thread {
                    if let r = try? server.request(
                        .post, "/v1/apps/\(app.appID)/keys", bearer: server.adminKey, json: #"{"name":"once"}"#,
                        headers: ["Idempotency-Key": "race-key"])
                    {
                        results.withLock { $0.append((r.status, r.headers["Idempotent-Replayed"], r.body, r.code)) }
                    }
                    group.leave()
                }.start()
            }
            group.wait()
            let all = results.withLock { $0 }
            #expect(all.count == count)
            let executed = all.filter { $0.0 == 201 && $0.1 == nil }
            #expect(executed.count == 1, "\(all.map { ($0.0, $0.1 ?? "-", $0.3 ?? 0) })")
            for r in all where !(r.0 == 201 && r.1 == nil) {
                // Either a replay of the stored answer or 409 7000004 while the first still runs.
                #expect(
                    (r.0 == 201 && r.1 == "true" && r.2 == executed.first?.2) || (r.0 == 409 && r.3 == ErrorCode.idempotencyKeyInFlight.code),
                    "\(r.0) \(r.3 ?? 0)")
            }
            let keys = try Self.keyCount(server, app.appID)
            #expect(keys == 2)
        }
    }

    @Test func idempotencyKeysExpireAfter24HoursOnTheServerClock() throws {
        try withApp(testClock: true) { server, app in
            let path = "/v1/apps/\(app.appID)/keys"
            let key: HTTPHeaders = ["Idempotency-Key": "daily"]
            #expect(try server.request(.post, path, bearer: server.adminKey, json: "{}", headers: key).status == 201)
            #expect(try server.request(.post, "/v1/test/clock/advance", bearer: server.adminKey, json: #"{"ms":86000000}"#).status == 200)
            let stillStored = try server.request(.post, path, bearer: server.adminKey, json: "{}", headers: key)
            #expect(stillStored.headers["Idempotent-Replayed"] == "true", "within 24 h")
            #expect(try Self.keyCount(server, app.appID) == 2)
            #expect(try server.request(.post, "/v1/test/clock/advance", bearer: server.adminKey, json: #"{"ms":400001}"#).status == 200)
            let expired = try server.request(.post, path, bearer: server.adminKey, json: "{}", headers: key)
            #expect(expired.status == 201)
            #expect(expired.headers["Idempotent-Replayed"] == nil, "after 24 h the key executes again")
            #expect(try Self.keyCount(server, app.appID) == 3)
        }
    }

    // MARK: - Rate limits (docs/errors.md#rate-limits)

    @Test func theAppBucketAllowsABurstOfTwiceTheRateThen429() throws {
        try withApp(settings: #"{"rate_limit_app_rps": 1}"#) { server, app in
            let first = try app.request(.get, "/v1/settings")
            #expect(first.status == 200, "\(first.text)")
            #expect(first.headers["RateLimit-Limit"] == "1")
            #expect(first.headers["RateLimit-Remaining"] == "1")
            let second = try app.request(.get, "/v1/settings")
            #expect(second.status == 200, "\(second.text)")
            #expect(second.headers["RateLimit-Remaining"] == "0")
            let third = try app.request(.get, "/v1/settings")
            Self.expectProblem(third, 429, .rateLimited)
            #expect(third.json?["title"]?.stringValue == "rate_limited")
            let retryAfter = Int(third.headers["Retry-After"] ?? "") ?? 0
            #expect(retryAfter >= 1 && retryAfter <= 2, "Retry-After \(third.headers["Retry-After"] ?? "none")")
            #expect(third.headers["RateLimit-Limit"] == "1")
            #expect(third.headers["RateLimit-Remaining"] == "0")
            let reset = Int(third.headers["RateLimit-Reset"] ?? "") ?? 0
            #expect(reset >= 1 && reset <= 2, "RateLimit-Reset \(third.headers["RateLimit-Reset"] ?? "none")")

            // The admin key acting as the app shares the app's bucket.
            let asApp = try server.request(.get, "/v1/settings", bearer: server.adminKey, headers: ["Parley-App-Id": app.appID])
            Self.expectProblem(asApp, 429, .rateLimited, "admin + Parley-App-Id")
            // The admin key on /v1/apps/** and unauthenticated routes are not limited and carry no RateLimit headers.
            for _ in 0..<3 {
                let admin = try server.request(.get, "/v1/apps/\(app.appID)", bearer: server.adminKey)
                #expect(admin.status == 200)
                #expect(admin.headers["RateLimit-Limit"] == nil)
            }
            let health = try server.request(.get, "/healthz")
            #expect(health.status == 200 && health.headers["RateLimit-Limit"] == nil)
            // Another app has its own bucket.
            let other = try server.createApp()
            let otherResponse = try other.request(.get, "/v1/settings")
            #expect(otherResponse.status == 200)
            #expect(otherResponse.headers["RateLimit-Limit"] == "200")
            #expect(otherResponse.headers["RateLimit-Remaining"] == "399")

            // The bucket refills at its rate.
            // Deliberate: the rate limiter refills by real time (no test clock).
            usleep(1_200_000)
            #expect(try app.request(.get, "/v1/settings").status == 200)
        }
    }

    @Test func aLoweredRateTakesEffect() throws {
        try withApp { server, app in
            #expect(try app.request(.get, "/v1/settings").headers["RateLimit-Limit"] == "200")
            let patched = try server.request(.patch, "/v1/apps/\(app.appID)/settings", bearer: server.adminKey, json: #"{"rate_limit_app_rps":1}"#)
            #expect(patched.status == 200)
            var statuses: [Int] = []
            for _ in 0..<3 { statuses.append(try app.request(.get, "/v1/settings").status) }
            #expect(statuses.contains(429), "\(statuses)")
        }
    }
}
