import ParleyCore
import ParleyHTTP
import ParleyTesting
import Testing

/// Rotating the server admin key without refusing a request (docs/configuration.md#rotating-the-admin-key): the key and
/// the secondary key are both accepted, and what either signed verifies, until the secondary key is removed.
@Suite("Admin key rotation")
struct AdminKeyRotationTests: ProblemAssertions {
    static func key(_ name: String) -> String { "\(name)-admin-key-" + String(UInt64.random(in: 0...UInt64.max), radix: 16) }

    /// The `next_cursor` of the first page of `GET /v1/apps?limit=1`, asserting the page answered 200.
    static func firstPageCursor(_ server: TestServer, key: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> String {
        let page = try server.request(.get, "/v1/apps?limit=1", bearer: key)
        #expect(page.status == 200, "\(page.text)", sourceLocation: sourceLocation)
        return page.json?["next_cursor"]?.stringValue ?? ""
    }

    @Test func bothKeysWorkDuringTheChangeAndTheOldOneIsRefusedAfter() throws {
        let (old, new) = (Self.key("old"), Self.key("new"))
        let before = try TestServer.start { $0.adminKey = old }
        defer { before.stop() }
        let app = try before.createApp()
        _ = try before.createApp()
        let oldCursor = try Self.firstPageCursor(before, key: old)
        #expect(!oldCursor.isEmpty)

        // During the change (a node restarted with the new key and the old one as the secondary): both keys, and both
        // keys' cursors.
        let during = try TestServer.start(database: before.database) {
            $0.adminKey = new
            $0.secondaryAdminKey = old
        }
        defer { during.stop() }
        // At most two servers at once: test servers share four slots, and a test holding three waits on the others.
        before.stop()
        var newCursor = ""
        for key in [old, new] {
            newCursor = try Self.firstPageCursor(during, key: key)
            let asApp = try during.request(.get, "/v1/stats", bearer: key, headers: ["Parley-App-Id": app.appID])
            #expect(asApp.status == 200, "\(asApp.text)")
        }
        for cursor in [oldCursor, newCursor] {
            let next = try during.request(.get, "/v1/apps?limit=1&cursor=\(cursor)", bearer: new)
            #expect(next.status == 200, "\(next.text)")
            #expect(next.json?["items"]?.arrayValue?.count == 1)
        }
        during.stop()
        // Nodes not yet changed (step 1 of several nodes: the new key added as the secondary one) accept what the
        // changed ones signed with the key they share.
        let staged = try TestServer.start(database: before.database) {
            $0.adminKey = old
            $0.secondaryAdminKey = new
        }
        defer { staged.stop() }
        #expect(try staged.request(.get, "/v1/apps?limit=1&cursor=\(newCursor)", bearer: new).status == 200)

        staged.stop()
        // After the change: the old key is refused with the usual problem, and so are its cursors.
        let after = try TestServer.start(database: before.database) { $0.adminKey = new }
        defer { after.stop() }
        let refused = try after.request(.get, "/v1/apps?limit=1", bearer: old)
        Self.expectProblem(refused, 401, .unauthenticated)
        #expect(refused.headers["WWW-Authenticate"] == "Bearer")
        _ = try Self.firstPageCursor(after, key: new)
        #expect(try after.request(.get, "/v1/apps?limit=1&cursor=\(newCursor)", bearer: new).status == 200)
        Self.expectProblem(try after.request(.get, "/v1/apps?limit=1&cursor=\(oldCursor)", bearer: new), 400, .invalidCursor)
    }

    @Test func aCursorCodecSignsWithItsFirstSecretAndAcceptsEach() throws {
        let (old, new) = (Crypto.randomBytes(32), Crypto.randomBytes(32))
        let oldCursor = CursorCodec(secret: old).encode(list: "apps", values: [.int(1)])
        let rotating = CursorCodec(secrets: [new, old])
        #expect(try rotating.decode(oldCursor, list: "apps") == [.int(1)])
        let signed = rotating.encode(list: "apps", values: [.int(2)])
        #expect(try CursorCodec(secret: new).decode(signed, list: "apps") == [.int(2)])
        #expect(throws: CursorCodec.Failure.badSignature) { try CursorCodec(secret: new).decode(oldCursor, list: "apps") }
    }
}
