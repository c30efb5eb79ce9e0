import Dispatch
import Foundation
import ParleyHTTP
import ParleyTesting
import Synchronization
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Apps, app keys and app settings end to end through HTTP (docs/users.md#apps-and-settings), against PostgreSQL.
@Suite("Apps, keys and settings", .inProcess)
struct AppsTests: ProblemAssertions {
    // MARK: - Helpers (namespaced so they never clash with other test files of the module)

    /// The `app.settings_updated` events of an app's log, as arrays of sorted `changed` names.
    static func settingsEvents(_ app: TestApp) throws -> [[String]] {
        try app.events().filter { $0["type"]?.stringValue == "app.settings_updated" }.map { event in
            (event["data"]?["changed"]?.arrayValue ?? []).compactMap(\.stringValue).sorted()
        }
    }

    /// The default settings of an app (docs/users.md#apps-and-settings), `push.secret` excepted (generated).
    static let defaultSettings: [String: JSONValue] = [
        "friend_only_c2c": false, "blacklist_feedback": "silent", "revoke_window_s": 120, "edit_window_s": 86400,
        "sensitive_words": .array([]), "sensitive_word_action": "reject", "history_retention_days": 0,
        "max_group_members": 2000, "big_group_threshold": 1000, "text_max_bytes": 2048, "event_retention_hours": 72,
        "application_expiry_s": 604_800, "max_rooms_per_user": 5, "room_offline_leave_s": 0,
        "token_default_ttl_s": 86400, "rate_limit_app_rps": 200, "rate_limit_user_rps": 20, "user_send_rate_per_s": 10,
        "file_max_bytes": 104_857_600, "image_max_bytes": 10_485_760, "image_max_pixels": 50_000_000, "app_storage_quota_bytes": 0,
        "file_url_ttl_s": 604_800, "delete_files_with_messages": true, "file_retention_days": 0,
        "automod_block_threshold": 0, "automod_window_s": 3600, "automod_action": "mute", "automod_mute_s": 3600,
    ]
    static let defaultPush: [String: JSONValue] = [
        "enabled": false, "gateway_url": .null, "format": "matrix", "event_id_only": false, "timeout_ms": 5000,
        "max_attempts": 3,
    ]

    /// Asserts that `settings` holds exactly the default settings (and a valid generated push secret).
    static func expectDefaults(_ settings: JSONValue?, sourceLocation: SourceLocation = #_sourceLocation) {
        guard let object = settings?.objectValue else {
            Issue.record("settings is not an object: \(String(describing: settings))", sourceLocation: sourceLocation)
            return
        }
        #expect(Set(object.keys) == Set(defaultSettings.keys).union(["push"]), sourceLocation: sourceLocation)
        for (name, value) in defaultSettings {
            #expect(object[name] == value, "setting \(name)", sourceLocation: sourceLocation)
        }
        guard let push = object["push"]?.objectValue else {
            Issue.record("push is not an object", sourceLocation: sourceLocation)
            return
        }
        #expect(Set(push.keys) == Set(defaultPush.keys).union(["secret"]), sourceLocation: sourceLocation)
        for (name, value) in defaultPush {
            #expect(push[name] == value, "setting push.\(name)", sourceLocation: sourceLocation)
        }
        expectPushSecret(push["secret"], sourceLocation: sourceLocation)
    }

    static func expectPushSecret(_ value: JSONValue?, sourceLocation: SourceLocation = #_sourceLocation) {
        let secret = value?.stringValue ?? ""
        #expect(secret.hasPrefix("whsec_"), "push.secret \(secret)", sourceLocation: sourceLocation)
        let decoded = Crypto.base64Decode(String(secret.dropFirst(6)))
        #expect(decoded.map { (24...64).contains($0.count) } == true, "push.secret \(secret)", sourceLocation: sourceLocation)
    }

    /// Percent-encodes a query value (everything but the RFC 3986 unreserved set).
    static func queryEncode(_ value: String) -> String {
        var out = ""
        for byte in value.utf8 {
            let c = Character(Unicode.Scalar(byte))
            if c.isASCII && (c.isLetter || c.isNumber || "-._~".contains(c)) {
                out.append(c)
            } else {
                out += "%" + String(byte >> 4, radix: 16, uppercase: true) + String(byte & 0xF, radix: 16, uppercase: true)
            }
        }
        return out
    }

    static func isAppKey(_ secret: String, appID: String) -> Bool {
        guard secret.hasPrefix("pk.\(appID).") else { return false }
        let tail = secret.dropFirst(appID.utf8.count + 4)
        return tail.utf8.count == 43
            && tail.utf8.allSatisfy { c in
                (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || (c >= 0x30 && c <= 0x39) || c == 0x2D || c == 0x5F
            }
    }

    // MARK: - Creation

    @Test func createReturnsTheAppAndAWorkingKeyShownOnce() throws {
        try withTestServer { server in
            let r = try server.request(.post, "/v1/apps", bearer: server.adminKey, json: #"{"app_id":"acme-1","name":"Acme"}"#)
            #expect(r.status == 201, "\(r.text)")
            #expect(r.headers["Content-Type"]?.hasPrefix("application/json") == true)
            let app = r.json?["app"]
            #expect(app?["app_id"]?.stringValue == "acme-1")
            #expect(app?["name"]?.stringValue == "Acme")
            let createdAt = app?["created_at"]?.intValue ?? 0
            #expect(createdAt > 1_600_000_000_000)
            #expect(app?["updated_at"]?.intValue == createdAt)
            #expect(Set(app?.objectValue?.keys ?? []) == ["app_id", "name", "created_at", "updated_at", "settings"])
            Self.expectDefaults(app?["settings"])

            let key = r.json?["key"]
            #expect(Set(key?.objectValue?.keys ?? []) == ["key_id", "name", "secret", "created_at"])
            let keyID = key?["key_id"]?.stringValue ?? ""
            #expect(!keyID.isEmpty && keyID.utf8.count <= 32)
            #expect(key?["created_at"]?.intValue == createdAt)
            let secret = key?["secret"]?.stringValue ?? ""
            #expect(Self.isAppKey(secret, appID: "acme-1"), "secret \(secret)")

            // The key works for the app's routes…
            let settings = try server.request(.get, "/v1/settings", bearer: secret)
            #expect(settings.status == 200, "\(settings.text)")
            // …and is never shown again: not by GET app, not by the key list.
            let got = try server.request(.get, "/v1/apps/acme-1", bearer: server.adminKey)
            #expect(got.status == 200)
            #expect(!got.text.contains(secret))
            let keys = try server.request(.get, "/v1/apps/acme-1/keys", bearer: server.adminKey)
            #expect(keys.status == 200)
            #expect(!keys.text.contains(secret))
            #expect(keys.json?["items"]?[0]?["key_id"]?.stringValue == keyID)
            #expect(keys.json?["items"]?[0]?["prefix"]?.stringValue == String(secret.prefix(12)))
        }
    }

    @Test func createGeneratesAnAppIDWhenOmitted() throws {
        try withTestServer { server in
            var seen: Set<String> = []
            for _ in 0..<3 {
                let r = try server.request(.post, "/v1/apps", bearer: server.adminKey, json: #"{"name":"generated"}"#)
                #expect(r.status == 201, "\(r.text)")
                let id = r.json?["app"]?["app_id"]?.stringValue ?? ""
                #expect(id.hasPrefix("app_") && id.utf8.count == 16, "generated app_id \(id)")
                #expect(IdentifierKind.appID.isValid(id), "generated app_id \(id) must be a valid app_id")
                #expect(Self.isAppKey(r.json?["key"]?["secret"]?.stringValue ?? "", appID: id))
                seen.insert(id)
            }
            #expect(seen.count == 3)
        }
    }

    @Test func createTakesPartialSettings() throws {
        try withTestServer { server in
            let r = try server.request(
                .post, "/v1/apps", bearer: server.adminKey,
                json: #"{"app_id":"partial","name":"p","settings":{"revoke_window_s":300,"sensitive_words":["foo"],"push":{"timeout_ms":1000}}}"#)
            #expect(r.status == 201, "\(r.text)")
            let settings = r.json?["app"]?["settings"]
            #expect(settings?["revoke_window_s"]?.intValue == 300)
            #expect(settings?["sensitive_words"] == .array(["foo"]))
            #expect(settings?["edit_window_s"]?.intValue == 86400)
            #expect(settings?["rate_limit_app_rps"]?.intValue == 200)
            #expect(settings?["push"]?["timeout_ms"]?.intValue == 1000)
            #expect(settings?["push"]?["format"]?.stringValue == "matrix")
            #expect(settings?["push"]?["max_attempts"]?.intValue == 3)
            Self.expectPushSecret(settings?["push"]?["secret"])
            // Creation writes no event.
            let log = try server.request(
                .get, "/v1/events/log?after=earliest", bearer: server.adminKey, headers: ["Parley-App-Id": "partial"])
            #expect(log.status == 200, "\(log.text)")
            #expect(log.json?["items"] == .array([]), "\(log.text)")

            // Invalid settings at creation are 400 with the path under body.settings, and nothing is created.
            let bad = try server.request(
                .post, "/v1/apps", bearer: server.adminKey,
                json: #"{"app_id":"badsettings","name":"p","settings":{"revoke_window_s":-1,"push":{"timeout_ms":5}}}"#)
            Self.expectInvalid(bad, field: "body.settings.revoke_window_s")
            #expect(Self.fields(bad).contains("body.settings.push.timeout_ms"), "\(bad.text)")
            #expect(try server.request(.get, "/v1/apps/badsettings", bearer: server.adminKey).status == 404)
            let notObject = try server.request(
                .post, "/v1/apps", bearer: server.adminKey, json: #"{"app_id":"badsettings","name":"p","settings":[1]}"#)
            Self.expectInvalid(notObject, field: "body.settings")
        }
    }

    @Test func createRejectsADuplicateAppID() throws {
        try withTestServer { server in
            let first = try server.request(.post, "/v1/apps", bearer: server.adminKey, json: #"{"app_id":"dup","name":"one"}"#)
            #expect(first.status == 201)
            let second = try server.request(.post, "/v1/apps", bearer: server.adminKey, json: #"{"app_id":"dup","name":"two"}"#)
            Self.expectProblem(second, 409, .conflict)
            #expect(try server.request(.get, "/v1/apps/dup", bearer: server.adminKey).json?["name"]?.stringValue == "one")
        }
    }

    @Test(arguments: [
        #""ab""#, #""Upper""#, #""_lead""#, #""-lead""#, #""has space""#, #""dots.not.allowed""#,
        "\"" + String(repeating: "a", count: 33) + "\"", #""""#, "123", "null", #""é-accent""#,
    ])
    func createRejectsABadAppID(_ appID: String) throws {
        try withTestServer { server in
            let r = try server.request(.post, "/v1/apps", bearer: server.adminKey, json: #"{"app_id":\#(appID),"name":"x"}"#)
            Self.expectInvalid(r, field: "body.app_id", "app_id \(appID)")
        }
    }

    @Test func createAcceptsBoundaryAppIDs() throws {
        try withTestServer { server in
            for id in ["abc", "0a_-", String(repeating: "z", count: 32)] {
                let r = try server.request(.post, "/v1/apps", bearer: server.adminKey, json: #"{"app_id":"\#(id)","name":"x"}"#)
                #expect(r.status == 201, "app_id \(id): \(r.text)")
            }
        }
    }

    @Test func createValidatesTheName() throws {
        try withTestServer { server in
            func create(_ body: String) throws -> TestResponse {
                try server.request(.post, "/v1/apps", bearer: server.adminKey, json: body)
            }
            Self.expectInvalid(try create(#"{"app_id":"noname"}"#), field: "body.name", "missing name")
            Self.expectInvalid(try create(#"{"app_id":"noname","name":""}"#), field: "body.name", "empty name")
            Self.expectInvalid(try create(#"{"app_id":"noname","name":7}"#), field: "body.name", "numeric name")
            Self.expectInvalid(try create(#"{"app_id":"noname","name":null}"#), field: "body.name", "null name")
            let long = String(repeating: "n", count: 129)
            Self.expectInvalid(try create(#"{"app_id":"noname","name":"\#(long)"}"#), field: "body.name", "129-byte name")
            // Byte lengths, not characters: 65 × "é" is 130 bytes.
            let accents = String(repeating: "é", count: 65)
            Self.expectInvalid(try create(#"{"app_id":"noname","name":"\#(accents)"}"#), field: "body.name", "130-byte name")
            #expect(try server.request(.get, "/v1/apps/noname", bearer: server.adminKey).status == 404)

            let max = String(repeating: "n", count: 128)
            let ok = try create(#"{"app_id":"maxname","name":"\#(max)"}"#)
            #expect(ok.status == 201, "\(ok.text)")
            #expect(ok.json?["app"]?["name"]?.stringValue == max)
            let okAccents = try create(#"{"app_id":"accents","name":"\#(String(repeating: "é", count: 64))"}"#)
            #expect(okAccents.status == 201, "\(okAccents.text)")
            // Every invalid field is listed at once.
            let both = try create(#"{"app_id":"X","name":""}"#)
            #expect(Set(Self.fields(both)).isSuperset(of: ["body.app_id", "body.name"]), "\(both.text)")
        }
    }

    @Test func createListsEveryInvalidFieldAtOnce() throws {
        // `errors` lists every invalid field, the settings of the request included (docs/errors.md#problems-rfc-9457).
        try withTestServer { server in
            let r = try server.request(
                .post, "/v1/apps", bearer: server.adminKey, json: #"{"app_id":"Bad!","name":"ok","settings":{"revoke_window_s":-1}}"#)
            Self.expectProblem(r, 400, .invalidParams)
            #expect(
                Set(Self.fields(r)).isSuperset(of: ["body.app_id", "body.settings.revoke_window_s"]),
                "every invalid field must be listed: \(r.text)")
        }
    }

    @Test func pathIDsArePercentDecodedAndValidated() throws {
        try withTestServer { server in
            #expect(try server.request(.post, "/v1/apps", bearer: server.adminKey, json: #"{"app_id":"abc","name":"x"}"#).status == 201)
            let encoded = try server.request(.get, "/v1/apps/%61bc", bearer: server.adminKey)
            #expect(encoded.status == 200, "\(encoded.text)")
            #expect(encoded.json?["app_id"]?.stringValue == "abc")
            for bad in ["ABC", "a%20b", String(repeating: "a", count: 33)] {
                Self.expectInvalid(try server.request(.get, "/v1/apps/\(bad)", bearer: server.adminKey), field: "app_id", "path \(bad)")
            }
        }
    }

    @Test func integersWithAFractionAndOversizedWordListsAreRejected() throws {
        try withApp { server, app in
            // A number with a fraction where an integer is expected → 400; a whole number written with one is
            // that integer (stored as one).
            Self.expectInvalid(try app.request(.patch, "/v1/settings", json: #"{"revoke_window_s":120.5}"#), field: "body.revoke_window_s")
            Self.expectInvalid(try app.request(.patch, "/v1/settings", json: #"{"push":{"max_attempts":3.25}}"#), field: "body.push.max_attempts")
            let whole = try app.request(.patch, "/v1/settings", json: #"{"revoke_window_s":121.0,"push":{"max_attempts":4e0}}"#)
            #expect(whole.status == 200, "\(whole.text)")
            #expect(whole.json?["revoke_window_s"] == .int(121) && whole.json?["push"]?["max_attempts"] == .int(4), "\(whole.text)")
            // ≤ 10000 words.
            let words = (0..<10001).map { "\"w\($0)\"" }
            Self.expectInvalid(
                try app.request(.patch, "/v1/settings", json: "{\"sensitive_words\":[\(words.joined(separator: ","))]}"),
                field: "body.sensitive_words")
            let ok = try app.request(.patch, "/v1/settings", json: "{\"sensitive_words\":[\(words.dropLast().joined(separator: ","))]}")
            #expect(ok.status == 200, "\(ok.text.prefix(300))")
            #expect(ok.json?["sensitive_words"]?.arrayValue?.count == 10000)
        }
    }

    @Test func stringsRoundTripExactly() throws {
        try withTestServer { server in
            let name = #"He said \"hi\" \\ \u00e9 ✓ 😀 \t </script>"#
            let r = try server.request(.post, "/v1/apps", bearer: server.adminKey, json: #"{"app_id":"strings","name":"\#(name)"}"#)
            #expect(r.status == 201, "\(r.text)")
            let expected = "He said \"hi\" \\ é ✓ 😀 \t </script>"
            #expect(r.json?["app"]?["name"]?.stringValue == expected)
            #expect(try server.request(.get, "/v1/apps/strings", bearer: server.adminKey).json?["name"]?.stringValue == expected)
            let words = #"["q\"uote","back\\slash","tab\there","😀","É"]"#
            let patched = try server.request(
                .patch, "/v1/apps/strings/settings", bearer: server.adminKey, json: #"{"sensitive_words":\#(words)}"#)
            #expect(patched.status == 200, "\(patched.text)")
            let expectedWords: JSONValue = .array(["q\"uote", "back\\slash", "tab\there", "😀", "É"])
            #expect(patched.json?["sensitive_words"] == expectedWords)
            #expect(try server.request(.get, "/v1/apps/strings/settings", bearer: server.adminKey).json?["sensitive_words"] == expectedWords)
        }
    }

    // MARK: - List

    @Test func listWalksEveryAppOnceInCreatedAtThenAppIDOrder() throws {
        try withTestServer { server in
            var created: Set<String> = []
            for i in 0..<25 {
                // Ids out of creation order, so the app_id tie-break is exercised when created_at is equal.
                let id = "walk-\(String((i * 7) % 25 + 10))"
                let r = try server.request(.post, "/v1/apps", bearer: server.adminKey, json: #"{"app_id":"\#(id)","name":"w"}"#)
                #expect(r.status == 201, "\(r.text)")
                created.insert(id)
            }
            var visited: [(Int64, String)] = []
            var cursor: String?
            var pages = 0
            repeat {
                let path = "/v1/apps?limit=10" + (cursor.map { "&cursor=\(Self.queryEncode($0))" } ?? "")
                let r = try server.request(.get, path, bearer: server.adminKey)
                #expect(r.status == 200, "\(r.text)")
                let items = r.json?["items"]?.arrayValue ?? []
                for item in items {
                    visited.append((item["created_at"]?.intValue ?? -1, item["app_id"]?.stringValue ?? ""))
                    #expect(item["settings"]?.objectValue != nil)
                }
                cursor = r.json?["next_cursor"]?.stringValue
                #expect(r.json?["next_cursor"] != nil, "next_cursor must be present (string or null)")
                pages += 1
                if pages == 1 || pages == 2 { #expect(items.count == 10) }
            } while cursor != nil && pages < 10
            #expect(pages == 3)
            #expect(visited.count == 25)
            #expect(Set(visited.map(\.1)) == created)
            for i in 1..<visited.count {
                let (a, b) = (visited[i - 1], visited[i])
                #expect(a.0 < b.0 || (a.0 == b.0 && a.1 < b.1), "order broken at \(i): \(a) then \(b)")
            }

            // Default limit 20.
            let first = try server.request(.get, "/v1/apps", bearer: server.adminKey)
            #expect(first.json?["items"]?.arrayValue?.count == 20)
            #expect(first.json?["next_cursor"]?.stringValue != nil)
            // limit bounds and bad cursors.
            for limit in ["0", "101", "-1", "abc", "1.5"] {
                Self.expectInvalid(try server.request(.get, "/v1/apps?limit=\(limit)", bearer: server.adminKey), field: "limit", "limit=\(limit)")
            }
            Self.expectProblem(try server.request(.get, "/v1/apps?cursor=garbage", bearer: server.adminKey), 400, .invalidCursor)
            if let valid = first.json?["next_cursor"]?.stringValue {
                var bytes = Array(valid.utf8)
                let i = bytes.count / 2
                bytes[i] = bytes[i] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
                let tampered = String(decoding: bytes, as: UTF8.self)
                Self.expectProblem(
                    try server.request(.get, "/v1/apps?cursor=\(Self.queryEncode(tampered))", bearer: server.adminKey), 400, .invalidCursor,
                    "tampered cursor")
            }
            let hundred = try server.request(.get, "/v1/apps?limit=100", bearer: server.adminKey)
            #expect(hundred.json?["items"]?.arrayValue?.count == 25)
            #expect(hundred.json?["next_cursor"]?.isNull == true)
        }
    }

    // MARK: - Get, patch, delete

    @Test func getPatchAndDeleteAnApp() throws {
        try withApp(testClock: true) { server, app in
            let got = try server.request(.get, "/v1/apps/\(app.appID)", bearer: server.adminKey)
            #expect(got.status == 200, "\(got.text)")
            #expect(got.json?["app_id"]?.stringValue == app.appID)
            #expect(got.json?["name"]?.stringValue == "test app")
            let createdAt = got.json?["created_at"]?.intValue ?? 0
            Self.expectDefaults(got.json?["settings"])

            Self.expectProblem(try server.request(.get, "/v1/apps/nosuchapp", bearer: server.adminKey), 404, .notFound)
            Self.expectProblem(
                try server.request(.patch, "/v1/apps/nosuchapp", bearer: server.adminKey, json: #"{"name":"x"}"#), 404, .notFound)
            Self.expectProblem(try server.request(.delete, "/v1/apps/nosuchapp", bearer: server.adminKey), 404, .notFound)

            // PATCH renames and stamps updated_at on the server clock.
            #expect(try server.request(.post, "/v1/test/clock/advance", bearer: server.adminKey, json: #"{"ms":5000}"#).status == 200)
            let patched = try server.request(.patch, "/v1/apps/\(app.appID)", bearer: server.adminKey, json: #"{"name":"renamed"}"#)
            #expect(patched.status == 200, "\(patched.text)")
            #expect(patched.json?["name"]?.stringValue == "renamed")
            #expect(patched.json?["created_at"]?.intValue == createdAt)
            #expect((patched.json?["updated_at"]?.intValue ?? 0) >= createdAt + 5000)
            #expect(patched.json?["settings"]?.objectValue != nil)
            #expect(try server.request(.get, "/v1/apps/\(app.appID)", bearer: server.adminKey).json?["name"]?.stringValue == "renamed")
            // An absent field is left unchanged; an invalid one is 400.
            let empty = try server.request(.patch, "/v1/apps/\(app.appID)", bearer: server.adminKey, json: "{}")
            #expect(empty.status == 200)
            #expect(empty.json?["name"]?.stringValue == "renamed")
            Self.expectInvalid(
                try server.request(.patch, "/v1/apps/\(app.appID)", bearer: server.adminKey, json: #"{"name":""}"#), field: "body.name")
            Self.expectInvalid(
                try server.request(
                    .patch, "/v1/apps/\(app.appID)", bearer: server.adminKey,
                    json: #"{"name":"\#(String(repeating: "x", count: 129))"}"#), field: "body.name")

            // DELETE: 204 with an empty body; then the app, its key and its settings are gone.
            #expect(try app.request(.get, "/v1/settings").status == 200)
            let deleted = try server.request(.delete, "/v1/apps/\(app.appID)", bearer: server.adminKey)
            #expect(deleted.status == 204)
            #expect(deleted.body.isEmpty)
            Self.expectProblem(try server.request(.get, "/v1/apps/\(app.appID)", bearer: server.adminKey), 404, .notFound)
            Self.expectProblem(try server.request(.delete, "/v1/apps/\(app.appID)", bearer: server.adminKey), 404, .notFound)
            Self.expectProblem(try server.request(.get, "/v1/apps/\(app.appID)/keys", bearer: server.adminKey), 404, .notFound)
            let afterDelete = try app.request(.get, "/v1/settings")
            Self.expectProblem(afterDelete, 401, .unauthenticated)
            #expect(afterDelete.headers["WWW-Authenticate"] == "Bearer")
            let list = try server.request(.get, "/v1/apps", bearer: server.adminKey)
            #expect(list.json?["items"]?.arrayValue?.contains { $0["app_id"]?.stringValue == app.appID } == false)
        }
    }

    /// Messages and their dedupe keys have no foreign key to apps (the send path does not check one per row); deleting
    /// an app removes them all the same, so an app created again under the same id starts empty.
    @Test func deletingAnAppRemovesItsMessagesAndDedupeKeys() throws {
        try withApp { server, app in
            _ = try app.createUser("a")
            _ = try app.createUser("b")
            let send = #"{"from":"a","conversation_type":"peer","to":"b","type":1,"body":{"text":"hi"},"client_msg_id":"k1"}"#
            let first = try app.request(.post, "/v1/messages", json: send)
            #expect(first.status == 201, "\(first.text)")
            #expect(try server.request(.delete, "/v1/apps/\(app.appID)", bearer: server.adminKey).status == 204)
            let again = try server.request(.post, "/v1/apps", bearer: server.adminKey, json: #"{"app_id":"\#(app.appID)","name":"again"}"#)
            #expect(again.status == 201, "\(again.text)")
            let reborn = TestApp(server: server, appID: app.appID, key: again.json?["key"]?["secret"]?.stringValue ?? "")
            _ = try reborn.createUser("a")
            _ = try reborn.createUser("b")
            let history = try reborn.request(.get, "/v1/users/a/conversations/peer/b/messages")
            #expect(history.json?["items"]?.arrayValue?.isEmpty == true, "\(history.text)")
            // The same client_msg_id is not a duplicate of the deleted app's message.
            let resent = try reborn.request(.post, "/v1/messages", json: send)
            #expect(resent.status == 201, "\(resent.text)")
            #expect(resent.headers["Parley-Duplicate"] == nil)
            #expect(resent.json?["seq"] == 1)
        }
    }

    // MARK: - Concurrency

    /// Runs `body(i)` for `0..<count`, each on its own thread (all at once); returns the results in index order.
    static func parallel<T: Sendable>(_ count: Int, _ body: @escaping @Sendable (Int) throws -> T) -> [Result<T, any Error>] {
        let results = Mutex<[Result<T, any Error>?]>(Array(repeating: nil, count: count))
        let group = DispatchGroup()
        for i in 0..<count {
            group.enter()
            Thread {
                let r = Result { try body(i) }
                results.withLock { $0[i] = r }
                group.leave()
            }.start()
        }
        group.wait()
        return results.withLock { $0.map { $0! } }
    }

    @Test func concurrentCreatesOfOneAppIDYieldOneApp() throws {
        try withTestServer(poolSize: 8) { server in
            let statuses = Self.parallel(8) { _ in
                try server.request(.post, "/v1/apps", bearer: server.adminKey, json: #"{"app_id":"race","name":"r"}"#).status
            }.map { (try? $0.get()) ?? -1 }
            #expect(statuses.filter { $0 == 201 }.count == 1, "\(statuses)")
            #expect(statuses.filter { $0 == 409 }.count == 7, "\(statuses)")
            let apps = try server.request(.get, "/v1/apps", bearer: server.adminKey).json?["items"]?.arrayValue
            #expect(apps?.count == 1)
        }
    }

    @Test func concurrentRevokesNeverLeaveAnAppWithoutAnActiveKey() throws {
        try withApp(poolSize: 8) { server, app in
            for i in 0..<3 {
                #expect(try server.request(.post, "/v1/apps/\(app.appID)/keys", bearer: server.adminKey, json: #"{"name":"k\#(i)"}"#).status == 201)
            }
            let ids = (try server.request(.get, "/v1/apps/\(app.appID)/keys", bearer: server.adminKey).json?["items"]?.arrayValue ?? [])
                .compactMap { $0["key_id"]?.stringValue }
            #expect(ids.count == 4)
            let statuses = Self.parallel(ids.count) { i in
                try server.request(.delete, "/v1/apps/\(app.appID)/keys/\(ids[i])", bearer: server.adminKey).status
            }.map { (try? $0.get()) ?? -1 }
            #expect(statuses.filter { $0 == 204 }.count == 3, "\(statuses)")
            #expect(statuses.filter { $0 == 409 }.count == 1, "\(statuses)")
            let keys = try server.request(.get, "/v1/apps/\(app.appID)/keys", bearer: server.adminKey).json?["items"]?.arrayValue ?? []
            #expect(keys.filter { $0["revoked_at"]?.isNull == true }.count == 1)
        }
    }

    @Test func concurrentSettingsPatchesAreAllKept() throws {
        try withApp(poolSize: 8) { server, app in
            let patches: [(String, String)] = [
                (#"{"revoke_window_s":1}"#, "revoke_window_s"), (#"{"edit_window_s":2}"#, "edit_window_s"),
                (#"{"history_retention_days":3}"#, "history_retention_days"), (#"{"max_rooms_per_user":4}"#, "max_rooms_per_user"),
                (#"{"push":{"timeout_ms":500}}"#, "push.timeout_ms"), (#"{"push":{"max_attempts":6}}"#, "push.max_attempts"),
                (#"{"push":{"format":"generic"}}"#, "push.format"), (#"{"push":{"enabled":true}}"#, "push.enabled"),
            ]
            let statuses = Self.parallel(patches.count) { i in
                try app.request(.patch, "/v1/settings", json: patches[i].0).status
            }.map { (try? $0.get()) ?? -1 }
            #expect(statuses == Array(repeating: 200, count: patches.count))
            let s = try app.request(.get, "/v1/settings").json
            #expect(s?["revoke_window_s"]?.intValue == 1)
            #expect(s?["edit_window_s"]?.intValue == 2)
            #expect(s?["history_retention_days"]?.intValue == 3)
            #expect(s?["max_rooms_per_user"]?.intValue == 4)
            #expect(s?["push"]?["timeout_ms"]?.intValue == 500)
            #expect(s?["push"]?["max_attempts"]?.intValue == 6)
            #expect(s?["push"]?["format"]?.stringValue == "generic")
            #expect(s?["push"]?["enabled"]?.boolValue == true)
            let events = try Self.settingsEvents(app)
            #expect(events.count == patches.count)
            #expect(Set(events.compactMap { $0.count == 1 ? $0[0] : nil }) == Set(patches.map(\.1)), "\(events)")
            // Gap-free ids; history_retention_days starts the app's retention runs, whose `retention.purged` may land in
            // between when the runner ticks during the test.
            let all = try app.events()
            #expect(all.compactMap { $0["id"]?.stringValue } == (1...all.count).map(String.init))
            #expect(all.filter { $0["type"]?.stringValue != "retention.purged" }.count == patches.count, "\(all)")
        }
    }

    // MARK: - Keys

    @Test func createdKeysAreListedByPrefixOnly() throws {
        try withApp { server, app in
            let r = try server.request(.post, "/v1/apps/\(app.appID)/keys", bearer: server.adminKey, json: #"{"name":"ci"}"#)
            #expect(r.status == 201, "\(r.text)")
            #expect(Set(r.json?.objectValue?.keys ?? []) == ["key_id", "name", "secret", "created_at"])
            #expect(r.json?["name"]?.stringValue == "ci")
            let keyID = r.json?["key_id"]?.stringValue ?? ""
            let secret = r.json?["secret"]?.stringValue ?? ""
            #expect(Self.isAppKey(secret, appID: app.appID))
            #expect(secret != app.key)
            // Both keys work.
            #expect(try server.request(.get, "/v1/settings", bearer: secret).status == 200)
            #expect(try app.request(.get, "/v1/settings").status == 200)

            let list = try server.request(.get, "/v1/apps/\(app.appID)/keys", bearer: server.adminKey)
            #expect(list.status == 200, "\(list.text)")
            #expect(list.json?["next_cursor"]?.isNull == true)
            let items = list.json?["items"]?.arrayValue ?? []
            #expect(items.count == 2)
            #expect(!list.text.contains(secret) && !list.text.contains(app.key))
            for item in items {
                #expect(
                    Set(item.objectValue?.keys ?? []) == ["key_id", "name", "prefix", "created_at", "last_used_at", "revoked_at"],
                    "\(item)")
                #expect(item["secret"] == nil)
                #expect(item["revoked_at"]?.isNull == true)
                #expect(item["prefix"]?.stringValue?.utf8.count == 12)
            }
            let mine = items.first { $0["key_id"]?.stringValue == keyID }
            #expect(mine?["prefix"]?.stringValue == String(secret.prefix(12)))
            #expect(mine?["name"]?.stringValue == "ci")
            // Both keys were used above.
            #expect(mine?["last_used_at"]?.intValue != nil)
            let defaultKey = items.first { $0["key_id"]?.stringValue != keyID }
            #expect(defaultKey?["prefix"]?.stringValue == String(app.key.prefix(12)))
            // Order: created_at asc, then key_id.
            let order = items.map { ($0["created_at"]?.intValue ?? 0, $0["key_id"]?.stringValue ?? "") }
            #expect(order[0].0 < order[1].0 || (order[0].0 == order[1].0 && order[0].1 < order[1].1))

            // Name rules and unknown apps.
            let noName = try server.request(.post, "/v1/apps/\(app.appID)/keys", bearer: server.adminKey, json: "{}")
            #expect(noName.status == 201, "name is optional: \(noName.text)")
            Self.expectInvalid(
                try server.request(
                    .post, "/v1/apps/\(app.appID)/keys", bearer: server.adminKey, json: #"{"name":"\#(String(repeating: "k", count: 65))"}"#),
                field: "body.name")
            Self.expectProblem(
                try server.request(.post, "/v1/apps/nosuchapp/keys", bearer: server.adminKey, json: #"{"name":"x"}"#), 404, .notFound)
            Self.expectProblem(try server.request(.get, "/v1/apps/nosuchapp/keys", bearer: server.adminKey), 404, .notFound)
        }
    }

    @Test func revokedKeysAnswer401AndTheLastActiveKeyCannotBeRevoked() throws {
        try withApp { server, app in
            let second = try server.request(.post, "/v1/apps/\(app.appID)/keys", bearer: server.adminKey, json: #"{"name":"2"}"#)
            let secondKey = second.json?["secret"]?.stringValue ?? ""
            let secondID = second.json?["key_id"]?.stringValue ?? ""
            #expect(try server.request(.get, "/v1/settings", bearer: secondKey).status == 200)

            let revoke = try server.request(.delete, "/v1/apps/\(app.appID)/keys/\(secondID)", bearer: server.adminKey)
            #expect(revoke.status == 204, "\(revoke.text)")
            #expect(revoke.body.isEmpty)
            let rejected = try server.request(.get, "/v1/settings", bearer: secondKey)
            Self.expectProblem(rejected, 401, .unauthenticated)
            #expect(rejected.headers["WWW-Authenticate"] == "Bearer")
            // The other key is unaffected.
            #expect(try app.request(.get, "/v1/settings").status == 200)
            let list = try server.request(.get, "/v1/apps/\(app.appID)/keys", bearer: server.adminKey)
            let revoked = list.json?["items"]?.arrayValue?.first { $0["key_id"]?.stringValue == secondID }
            #expect(revoked?["revoked_at"]?.intValue != nil, "\(list.text)")

            // The remaining key is the last active one.
            let defaultID = list.json?["items"]?.arrayValue?.first { $0["key_id"]?.stringValue != secondID }?["key_id"]?.stringValue ?? ""
            Self.expectProblem(try server.request(.delete, "/v1/apps/\(app.appID)/keys/\(defaultID)", bearer: server.adminKey), 409, .lastActiveKey)
            #expect(try app.request(.get, "/v1/settings").status == 200)
            // Unknown key and unknown app.
            Self.expectProblem(try server.request(.delete, "/v1/apps/\(app.appID)/keys/key_nope", bearer: server.adminKey), 404, .notFound)
            Self.expectProblem(try server.request(.delete, "/v1/apps/nosuchapp/keys/\(defaultID)", bearer: server.adminKey), 404, .notFound)

            // A third key makes the default revocable.
            let third = try server.request(.post, "/v1/apps/\(app.appID)/keys", bearer: server.adminKey, json: #"{"name":"3"}"#)
            #expect(try server.request(.delete, "/v1/apps/\(app.appID)/keys/\(defaultID)", bearer: server.adminKey).status == 204)
            Self.expectProblem(try app.request(.get, "/v1/settings"), 401, .unauthenticated)
            #expect(try server.request(.get, "/v1/settings", bearer: third.json?["secret"]?.stringValue ?? "").status == 200)
        }
    }

    @Test func anAppKeyCannotCallTheAppsAPI() throws {
        try withApp { server, app in
            let calls: [(HTTPMethod, String, String?)] = [
                (.get, "/v1/apps", nil), (.post, "/v1/apps", #"{"name":"x"}"#), (.get, "/v1/apps/\(app.appID)", nil),
                (.patch, "/v1/apps/\(app.appID)", #"{"name":"x"}"#), (.delete, "/v1/apps/\(app.appID)", nil),
                (.get, "/v1/apps/\(app.appID)/keys", nil), (.post, "/v1/apps/\(app.appID)/keys", "{}"),
                (.get, "/v1/apps/\(app.appID)/settings", nil), (.patch, "/v1/apps/\(app.appID)/settings", #"{"revoke_window_s":1}"#),
            ]
            for (method, path, body) in calls {
                Self.expectProblem(try app.request(method, path, json: body), 403, .forbidden, "\(method) \(path)")
            }
            #expect(try server.request(.get, "/v1/apps/\(app.appID)", bearer: server.adminKey).json?["name"]?.stringValue == "test app")
            #expect(try app.request(.get, "/v1/settings").json?["revoke_window_s"]?.intValue == 120)
        }
    }

    // MARK: - Settings

    @Test func settingsDefaultsAreTheSameOnBothRoutes() throws {
        try withApp { server, app in
            let viaApp = try app.request(.get, "/v1/settings")
            #expect(viaApp.status == 200, "\(viaApp.text)")
            #expect(viaApp.headers["Content-Type"]?.hasPrefix("application/json") == true)
            Self.expectDefaults(viaApp.json)
            let viaAdmin = try server.request(.get, "/v1/apps/\(app.appID)/settings", bearer: server.adminKey)
            #expect(viaAdmin.status == 200, "\(viaAdmin.text)")
            #expect(viaAdmin.json == viaApp.json)
            Self.expectProblem(try server.request(.get, "/v1/apps/nosuchapp/settings", bearer: server.adminKey), 404, .notFound)
            Self.expectProblem(
                try server.request(.patch, "/v1/apps/nosuchapp/settings", bearer: server.adminKey, json: #"{"revoke_window_s":1}"#), 404,
                .notFound)
            // Every app gets its own push secret.
            let other = try server.createApp()
            #expect(try other.request(.get, "/v1/settings").json?["push"]?["secret"] != viaApp.json?["push"]?["secret"])
        }
    }

    @Test func partialPatchesMergePushKeyByKeyAndWriteEvents() throws {
        try withApp { server, app in
            let original = try app.request(.get, "/v1/settings").json
            let secret = original?["push"]?["secret"]

            let one = try app.request(.patch, "/v1/settings", json: #"{"revoke_window_s":60}"#)
            #expect(one.status == 200, "\(one.text)")
            #expect(one.json?["revoke_window_s"]?.intValue == 60)
            #expect(one.json?["edit_window_s"]?.intValue == 86400)
            #expect(one.json?["push"] == original?["push"])

            let two = try app.request(.patch, "/v1/settings", json: #"{"push":{"timeout_ms":1000}}"#)
            #expect(two.status == 200, "\(two.text)")
            #expect(two.json?["push"]?["timeout_ms"]?.intValue == 1000)
            #expect(two.json?["push"]?["format"]?.stringValue == "matrix")
            #expect(two.json?["push"]?["max_attempts"]?.intValue == 3)
            #expect(two.json?["push"]?["secret"] == secret)
            #expect(two.json?["revoke_window_s"]?.intValue == 60)

            // The admin route patches the same settings.
            let three = try server.request(
                .patch, "/v1/apps/\(app.appID)/settings", bearer: server.adminKey,
                json:
                    #"{"push":{"format":"generic","gateway_url":"https://push.example.com/notify"},"sensitive_words":["x","y"],"blacklist_feedback":"error"}"#
            )
            #expect(three.status == 200, "\(three.text)")
            #expect(three.json?["push"]?["timeout_ms"]?.intValue == 1000)
            #expect(three.json?["push"]?["format"]?.stringValue == "generic")
            #expect(three.json?["push"]?["gateway_url"]?.stringValue == "https://push.example.com/notify")
            #expect(three.json?["sensitive_words"] == .array(["x", "y"]))
            // Its event is in the app's log when the admin has the answer, as the app route's is (no later write of
            // the app needed to sequence it).
            #expect(try Self.settingsEvents(app).last == ["blacklist_feedback", "push.format", "push.gateway_url", "sensitive_words"])
            let now = try app.request(.get, "/v1/settings")
            #expect(now.json == three.json)
            #expect(try server.request(.get, "/v1/apps/\(app.appID)/settings", bearer: server.adminKey).json == three.json)
            // The app object carries the same settings.
            #expect(try server.request(.get, "/v1/apps/\(app.appID)", bearer: server.adminKey).json?["settings"] == three.json)

            // Nothing changed → no event: same values, an empty patch, an empty push object, unknown fields.
            for body in [#"{"revoke_window_s":60}"#, "{}", #"{"push":{}}"#, #"{"no_such_setting":1}"#, #"{"push":{"format":"generic"}}"#] {
                let r = try app.request(.patch, "/v1/settings", json: body)
                #expect(r.status == 200, "\(body): \(r.text)")
                #expect(r.json == three.json, "\(body)")
            }
            // A patch with one same and one different value lists only the different one.
            let four = try app.request(
                .patch, "/v1/settings", json: #"{"revoke_window_s":60,"edit_window_s":0,"push":{"timeout_ms":1000,"enabled":true}}"#)
            #expect(four.status == 200, "\(four.text)")
            // null clears a nullable push field.
            let five = try app.request(.patch, "/v1/settings", json: #"{"push":{"gateway_url":null}}"#)
            #expect(five.json?["push"]?["gateway_url"]?.isNull == true, "\(five.text)")

            let events = try Self.settingsEvents(app)
            #expect(
                events == [
                    ["revoke_window_s"], ["push.timeout_ms"],
                    ["blacklist_feedback", "push.format", "push.gateway_url", "sensitive_words"],
                    ["edit_window_s", "push.enabled"], ["push.gateway_url"],
                ], "\(events)")
            let log = try app.events()
            #expect(log.allSatisfy { $0["app_id"]?.stringValue == app.appID && $0["created_at"]?.intValue != nil })
        }
    }

    @Test func aSettingsPatchWithoutChangesWritesNoEvent() throws {
        try withApp { server, app in
            for body in [#"{"revoke_window_s":120}"#, "{}", #"{"push":{"format":"matrix","timeout_ms":5000}}"#, ""] {
                let r = try app.request(.patch, "/v1/settings", json: body)
                #expect(r.status == 200, "\(body): \(r.text)")
            }
            #expect(try app.events().isEmpty)
        }
    }

    /// (patch body, expected field path) for every kind of invalid value of the app settings.
    static let invalidSettings: [(String, String)] = [
        (#"{"friend_only_c2c":"yes"}"#, "body.friend_only_c2c"),
        (#"{"friend_only_c2c":null}"#, "body.friend_only_c2c"),
        (#"{"blacklist_feedback":"loud"}"#, "body.blacklist_feedback"),
        (#"{"revoke_window_s":-1}"#, "body.revoke_window_s"),
        (#"{"revoke_window_s":2592001}"#, "body.revoke_window_s"),
        (#"{"revoke_window_s":1.5}"#, "body.revoke_window_s"),
        (#"{"revoke_window_s":"120"}"#, "body.revoke_window_s"),
        (#"{"revoke_window_s":null}"#, "body.revoke_window_s"),
        (#"{"revoke_window_s":99999999999999999999}"#, "body.revoke_window_s"),
        (#"{"revoke_window_s":true}"#, "body.revoke_window_s"),
        (#"{"edit_window_s":2592001}"#, "body.edit_window_s"),
        (#"{"sensitive_words":"bad"}"#, "body.sensitive_words"),
        (#"{"sensitive_words":[""]}"#, "body.sensitive_words"),
        (#"{"sensitive_words":[1]}"#, "body.sensitive_words"),
        ("{\"sensitive_words\":[\"\(String(repeating: "w", count: 65))\"]}", "body.sensitive_words"),
        ("{\"sensitive_words\":[\"\(String(repeating: "é", count: 33))\"]}", "body.sensitive_words"),
        (#"{"sensitive_word_action":"drop"}"#, "body.sensitive_word_action"),
        (#"{"history_retention_days":3651}"#, "body.history_retention_days"),
        (#"{"history_retention_days":-1}"#, "body.history_retention_days"),
        (#"{"max_group_members":1}"#, "body.max_group_members"),
        (#"{"max_group_members":100001}"#, "body.max_group_members"),
        (#"{"big_group_threshold":1}"#, "body.big_group_threshold"),
        (#"{"text_max_bytes":63}"#, "body.text_max_bytes"),
        (#"{"text_max_bytes":32769}"#, "body.text_max_bytes"),
        (#"{"event_retention_hours":0}"#, "body.event_retention_hours"),
        (#"{"event_retention_hours":721}"#, "body.event_retention_hours"),
        (#"{"application_expiry_s":59}"#, "body.application_expiry_s"),
        (#"{"max_rooms_per_user":0}"#, "body.max_rooms_per_user"),
        (#"{"max_rooms_per_user":101}"#, "body.max_rooms_per_user"),
        (#"{"room_offline_leave_s":5}"#, "body.room_offline_leave_s"),
        (#"{"room_offline_leave_s":86401}"#, "body.room_offline_leave_s"),
        (#"{"token_default_ttl_s":59}"#, "body.token_default_ttl_s"),
        (#"{"rate_limit_app_rps":0}"#, "body.rate_limit_app_rps"),
        (#"{"rate_limit_app_rps":100001}"#, "body.rate_limit_app_rps"),
        (#"{"rate_limit_user_rps":0}"#, "body.rate_limit_user_rps"),
        (#"{"user_send_rate_per_s":0}"#, "body.user_send_rate_per_s"),
        (#"{"push":"x"}"#, "body.push"),
        (#"{"push":null}"#, "body.push"),
        (#"{"push":{"enabled":1}}"#, "body.push.enabled"),
        (#"{"push":{"gateway_url":"ftp://push.example.com"}}"#, "body.push.gateway_url"),
        (#"{"push":{"gateway_url":"not a url"}}"#, "body.push.gateway_url"),
        (#"{"push":{"gateway_url":5}}"#, "body.push.gateway_url"),
        ("{\"push\":{\"gateway_url\":\"https://e.com/\(String(repeating: "p", count: 2040))\"}}", "body.push.gateway_url"),
        (#"{"push":{"format":"apns"}}"#, "body.push.format"),
        (#"{"push":{"secret":"abc"}}"#, "body.push.secret"),
        ("{\"push\":{\"secret\":\"whsec_\(Crypto.base64Encode([UInt8](repeating: 7, count: 10)))\"}}", "body.push.secret"),
        ("{\"push\":{\"secret\":\"whsec_\(Crypto.base64Encode([UInt8](repeating: 7, count: 65)))\"}}", "body.push.secret"),
        (#"{"push":{"event_id_only":"no"}}"#, "body.push.event_id_only"),
        (#"{"push":{"timeout_ms":99}}"#, "body.push.timeout_ms"),
        (#"{"push":{"timeout_ms":30001}}"#, "body.push.timeout_ms"),
        (#"{"push":{"max_attempts":0}}"#, "body.push.max_attempts"),
        (#"{"push":{"max_attempts":11}}"#, "body.push.max_attempts"),
    ]

    @Test func everyInvalidSettingIs400WithItsFieldPathAndChangesNothing() throws {
        try withApp { server, app in
            let before = try app.request(.get, "/v1/settings").json
            for (body, field) in Self.invalidSettings {
                Self.expectInvalid(try app.request(.patch, "/v1/settings", json: body), field: field, "app route \(body)")
                Self.expectInvalid(
                    try server.request(.patch, "/v1/apps/\(app.appID)/settings", bearer: server.adminKey, json: body), field: field,
                    "admin route \(body)")
            }
            // One invalid field rejects the whole patch, and every invalid field is listed.
            let mixed = try app.request(
                .patch, "/v1/settings", json: #"{"revoke_window_s":60,"edit_window_s":-5,"push":{"timeout_ms":1000,"max_attempts":99}}"#)
            Self.expectInvalid(mixed, field: "body.edit_window_s")
            #expect(Self.fields(mixed).contains("body.push.max_attempts"), "\(mixed.text)")
            #expect(!Self.fields(mixed).contains("body.revoke_window_s"))
            // Not an object.
            Self.expectProblem(try app.request(.patch, "/v1/settings", json: "[1]"), 400, .invalidParams)
            Self.expectProblem(try app.request(.patch, "/v1/settings", json: "{bad json"), 400, .invalidParams)

            #expect(try app.request(.get, "/v1/settings").json == before)
            #expect(try app.events().isEmpty)
        }
    }

    @Test func boundaryValuesOfSettingsAreAccepted() throws {
        try withApp { server, app in
            let validSecret = "whsec_" + Crypto.base64Encode([UInt8](repeating: 9, count: 24))
            let bodies = [
                #"{"revoke_window_s":0,"edit_window_s":2592000,"history_retention_days":3650,"text_max_bytes":64}"#,
                #"{"room_offline_leave_s":10,"max_group_members":100000,"big_group_threshold":2,"event_retention_hours":720}"#,
                #"{"room_offline_leave_s":0,"max_rooms_per_user":100,"application_expiry_s":60,"token_default_ttl_s":2592000}"#,
                #"{"rate_limit_app_rps":100000,"rate_limit_user_rps":1,"user_send_rate_per_s":100000,"sensitive_word_action":"mask"}"#,
                "{\"sensitive_words\":[\"\(String(repeating: "é", count: 32))\",\"a\"]}",
                #"{"push":{"timeout_ms":100,"max_attempts":10,"enabled":true,"event_id_only":true,"gateway_url":"http://localhost:9/x"}}"#,
                "{\"push\":{\"secret\":\"\(validSecret)\"}}",
                #"{"push":{"secret":null,"gateway_url":null,"timeout_ms":30000,"max_attempts":1}}"#,
            ]
            for body in bodies {
                let r = try app.request(.patch, "/v1/settings", json: body)
                #expect(r.status == 200, "\(body): \(r.text)")
            }
            let settings = try app.request(.get, "/v1/settings").json
            #expect(settings?["revoke_window_s"]?.intValue == 0)
            #expect(settings?["room_offline_leave_s"]?.intValue == 0)
            #expect(settings?["rate_limit_user_rps"]?.intValue == 1)
            #expect(settings?["push"]?["timeout_ms"]?.intValue == 30000)
            #expect(settings?["push"]?["secret"]?.isNull == true)
            #expect(settings?["push"]?["enabled"]?.boolValue == true)
        }
    }
}
