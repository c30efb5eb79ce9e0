import ParleyHTTP
import ParleyPostgres
import Testing

@testable import ParleyAPI
@testable import ParleyCore

/// The steps of ``RequestPipeline``, each on a constructed ``RequestPipeline/Exchange``: no PostgreSQL and no HTTP
/// server. The services' pool points at no database and is never used: a step that would read the database has no
/// connection here, so it shows itself by throwing ``NeedsConnection`` (what the event-loop path relies on).
@Suite("Request pipeline steps")
struct RequestPipelineTests {
    static let adminKey = "test-admin-key-0123456789"

    /// Services whose pool never connects (connections open on first use, and nothing here uses one).
    final class Harness {
        let services: Services

        init() throws {
            let nowhere = try PostgresConfiguration("host=127.0.0.1 port=1 dbname=none")
            services = Services(
                pool: PostgresPool(configuration: nowhere, size: 1), clock: ServerClock(testClock: false), adminKey: RequestPipelineTests.adminKey,
                metrics: Metrics(), logger: Logger(label: "pipeline-test", sink: LogSink(fd: 2)), configuration: Configuration(),
                stopping: StopFlag(), timerKinds: [], observers: CommitObservers(), tokenSubject: { _, _, _, _ in nil })
        }

        deinit { services.pool.shutdown() }

        func exchange(_ request: Request, _ route: RequestPipeline.Route = RequestPipelineTests.appRoute) -> RequestPipeline.Exchange {
            RequestPipeline.Exchange(request: request, route: route, services: services, connection: nil)
        }
    }

    static let appRoute = RequestPipeline.Route(access: .appOrUser, queryToken: false, sequenced: false)
    static let adminRoute = RequestPipeline.Route(access: nil, queryToken: false, sequenced: false)

    static func request(
        _ method: HTTPMethod = .get, headers: HTTPHeaders = [:], body: String = "", pathParameters: [String: String] = [:],
        query: [(String, String)] = [], overLimit: Bool = false
    ) -> Request {
        var request = Request(
            head: HTTPRequestHead(method: method, target: "/v1/test", headers: headers), body: Array(body.utf8), pathParameters: pathParameters,
            query: query, requestID: "req-test")
        request.bodyOverLimit = overLimit
        return request
    }

    static func app(_ appID: String = "app1", userRPS: Int64 = 20, appRPS: Int64 = 200) throws -> AppRecord {
        var settings = AppSettings.defaults()
        _ = try settings.apply(["rate_limit_user_rps": .int(userRPS), "rate_limit_app_rps": .int(appRPS)])
        return AppRecord(appID: appID, name: appID, settings: settings, tokenSecret: [], createdAt: 0, updatedAt: 0, beforeHooks: [:])
    }

    /// The problem a step answers with, or nil when it let the request through (or failed with something else).
    static func refusal(_ step: () throws -> Response?) -> APIError? {
        do {
            _ = try step()
            return nil
        } catch let error as APIError {
            return error
        } catch {
            return nil
        }
    }

    static func needsConnection(_ step: () throws -> Response?) -> Bool {
        do {
            _ = try step()
            return false
        } catch {
            return error is NeedsConnection
        }
    }

    static func problemCode(_ response: Response) -> Int? {
        response.bodyBytes.flatMap { try? JSONValue.parse($0) }?["code"]?.intValue.map { Int($0) }
    }

    // MARK: - authenticate and the "Who" rules

    @Test func missingCredentialIs401WithBearerChallenge() throws {
        let harness = try Harness()
        var x = harness.exchange(Self.request())
        let error = Self.refusal { try RequestPipeline.authenticate(&x) }
        #expect(error?.code == .unauthenticated)
        #expect(error?.status == 401)
        #expect(error?.extraHeaders.contains { $0 == ("WWW-Authenticate", "Bearer") } == true)
    }

    @Test func unknownBearerShapeIs401() throws {
        let harness = try Harness()
        var x = harness.exchange(Self.request(headers: ["Authorization": "Bearer not-a-parley-credential"]))
        #expect(Self.refusal { try RequestPipeline.authenticate(&x) }?.code == .unauthenticated)
    }

    @Test func adminKeyPassesAdminRoutesEvenWithAnAppHeader() throws {
        let harness = try Harness()
        // Admin-only routes ignore `Parley-App-Id`: it is not looked up (no connection is needed).
        var x = harness.exchange(
            Self.request(headers: ["Authorization": "bearer  \(Self.adminKey) ", "Parley-App-Id": "app1"]), Self.adminRoute)
        #expect(try RequestPipeline.authenticate(&x) == nil)
        #expect(x.credential == .admin)
        #expect(x.app == nil)
    }

    @Test func adminKeyOnAnAppRouteNeedsTheAppHeader() throws {
        let harness = try Harness()
        var x = harness.exchange(Self.request(headers: ["Authorization": "Bearer \(Self.adminKey)"]))
        let error = Self.refusal { try RequestPipeline.authenticate(&x) }
        #expect(error?.code == .invalidParams)
        #expect(error?.fieldErrors.map(\.field) == ["header Parley-App-Id"])
    }

    @Test func adminKeyWithAMalformedAppIDIs404WithoutALookup() throws {
        let harness = try Harness()
        var x = harness.exchange(Self.request(headers: ["Authorization": "Bearer \(Self.adminKey)", "Parley-App-Id": "no such app!"]))
        let error = Self.refusal { try RequestPipeline.authenticate(&x) }
        #expect(error?.code == .notFound)
        #expect(error?.status == 404)
    }

    @Test func lookupsWithoutAConnectionGoToAWorker() throws {
        let harness = try Harness()
        // An uncached app, an uncached app key and any user token all need the database.
        var asApp = harness.exchange(Self.request(headers: ["Authorization": "Bearer \(Self.adminKey)", "Parley-App-Id": "app1"]))
        #expect(Self.needsConnection { try RequestPipeline.authenticate(&asApp) })
        let token = UserToken.mint(
            appID: "app1", userID: "u1", issuedAt: 0, expiresAt: 4_000_000_000, generation: 0, secret: Array(repeating: 7, count: 32))
        var user = harness.exchange(Self.request(headers: ["Authorization": "Bearer \(token)"]))
        #expect(Self.needsConnection { try RequestPipeline.authenticate(&user) })
        var appKey = harness.exchange(Self.request(headers: ["Authorization": "Bearer \(AppKey.generate(appID: "app1"))"]))
        #expect(Self.needsConnection { try RequestPipeline.authenticate(&appKey) })
    }

    @Test func queryTokenCountsOnlyOnRoutesThatAcceptIt() throws {
        let harness = try Harness()
        let request = Self.request(query: [("access_token", Self.adminKey)])
        var streamRoute = Self.adminRoute
        streamRoute.queryToken = true
        var stream = harness.exchange(request, streamRoute)
        #expect(try RequestPipeline.authenticate(&stream) == nil)
        #expect(stream.credential == .admin)
        var plain = harness.exchange(request, Self.adminRoute)
        #expect(Self.refusal { try RequestPipeline.authenticate(&plain) }?.code == .unauthenticated)
    }

    @Test func theAuthorizationHeaderWinsOverTheQueryToken() throws {
        let harness = try Harness()
        var streamRoute = Self.adminRoute
        streamRoute.queryToken = true
        var x = harness.exchange(Self.request(headers: ["Authorization": "Bearer wrong"], query: [("access_token", Self.adminKey)]), streamRoute)
        #expect(Self.refusal { try RequestPipeline.authenticate(&x) }?.code == .unauthenticated)
    }

    @Test func whoRules() {
        let request = Self.request(pathParameters: ["user_id": "u1"])
        func refused(_ access: Access?, _ credential: Credential) -> ErrorCode? {
            do {
                try RequestPipeline.check(access, credential: credential, request: request)
                return nil
            } catch {
                return (error as? APIError)?.code
            }
        }
        let appKey = Credential.app(appID: "a", keyID: "k")
        // Admin-only routes: the admin key alone.
        #expect(refused(nil, .admin) == nil)
        #expect(refused(nil, appKey) == .forbidden)
        #expect(refused(nil, .adminAsApp(appID: "a")) == .forbidden)
        // App routes: an app key or the admin key acting as the app.
        #expect(refused(.app, appKey) == nil)
        #expect(refused(.app, .adminAsApp(appID: "a")) == nil)
        #expect(refused(.app, .user(appID: "a", userID: "u1")) == .forbidden)
        // Self routes: a user token only for its own `{user_id}`.
        #expect(refused(.appOrSelf, .user(appID: "a", userID: "u1")) == nil)
        #expect(refused(.appOrSelf, .user(appID: "a", userID: "u2")) == .forbidden)
        #expect(refused(.appOrUser, .user(appID: "a", userID: "u2")) == nil)
    }

    // MARK: - resolveApp

    @Test func resolveAppKeepsARecordAuthenticationRead() throws {
        let harness = try Harness()
        var x = harness.exchange(Self.request())
        x.credential = .adminAsApp(appID: "app1")
        x.app = try Self.app()
        #expect(try RequestPipeline.resolveApp(&x) == nil, "no second lookup: it would need a connection")
        #expect(x.appID == "app1")
        var admin = harness.exchange(Self.request())
        #expect(try RequestPipeline.resolveApp(&admin) == nil)
        #expect(admin.app == nil)
    }

    @Test func resolveAppLooksUpAnAppKeysAppOnAWorker() throws {
        let harness = try Harness()
        var x = harness.exchange(Self.request())
        x.credential = .app(appID: "app1", keyID: "k1")
        #expect(Self.needsConnection { try RequestPipeline.resolveApp(&x) })
    }

    // MARK: - Rate limits

    @Test func noAppNoRateLimit() throws {
        let harness = try Harness()
        var x = harness.exchange(Self.request(), Self.adminRoute)
        #expect(try RequestPipeline.rateLimit(&x) == nil)
        #expect(x.headers.isEmpty)
        #expect(x.rateTaken == nil)
    }

    @Test func userTokensTakeTheUserBucketAndAreRefusedPastTheBurst() throws {
        let harness = try Harness()
        var x = harness.exchange(Self.request())
        x.credential = .user(appID: "app1", userID: "u1")
        x.app = try Self.app(userRPS: 1)
        // A bucket holds twice its rate (docs/errors.md#rate-limits).
        for remaining in [1, 0] {
            #expect(try RequestPipeline.rateLimit(&x) == nil)
            #expect(x.headers.first { $0.0 == "RateLimit-Remaining" }?.1 == String(remaining))
        }
        #expect(x.headers.first { $0.0 == "RateLimit-Limit" }?.1 == "1")
        #expect(x.rateTaken?.bucket == "u:app1:u1")
        #expect(x.rateTaken?.rate == 1)
        var refused = harness.exchange(Self.request())
        refused.credential = x.credential
        refused.app = x.app
        let error = Self.refusal { try RequestPipeline.rateLimit(&refused) }
        #expect(error?.code == .rateLimited)
        #expect(error?.status == 429)
        #expect(error?.extraHeaders.contains { $0.0 == "Retry-After" && Int($0.1)! >= 1 } == true)
        #expect(refused.rateTaken == nil, "a refused request took no token, so none is given back")
        #expect(refused.headers.first { $0.0 == "RateLimit-Remaining" }?.1 == "0", "the 429 carries the headers too")
        // Another user, and the app's key, have buckets of their own.
        var other = harness.exchange(Self.request())
        other.credential = .user(appID: "app1", userID: "u2")
        other.app = x.app
        #expect(try RequestPipeline.rateLimit(&other) == nil)
        var appKey = harness.exchange(Self.request())
        appKey.credential = .app(appID: "app1", keyID: "k1")
        appKey.app = x.app
        #expect(try RequestPipeline.rateLimit(&appKey) == nil)
        #expect(appKey.rateTaken?.bucket == "a:app1")
        #expect(appKey.headers.first { $0.0 == "RateLimit-Limit" }?.1 == "200")
    }

    static let sends = RouteUserBucket(name: "send", refusal: "too many sends") { $0.userSendRatePerS }

    @Test func routeUserBucketAppliesOnlyToUserTokens() throws {
        let harness = try Harness()
        var route = Self.appRoute
        route.userBucket = RouteUserBucket(name: "send", refusal: "too many sends") { _ in 1 }
        let app = try Self.app()
        var appKey = harness.exchange(Self.request(), route)
        appKey.credential = .app(appID: "app1", keyID: "k1")
        appKey.app = app
        for _ in 0..<5 { #expect(try RequestPipeline.routeUserLimit(&appKey) == nil) }
        #expect(appKey.routeRateTaken == nil)
        var withoutBucket = harness.exchange(Self.request())
        withoutBucket.credential = .user(appID: "app1", userID: "u1")
        withoutBucket.app = app
        #expect(try RequestPipeline.routeUserLimit(&withoutBucket) == nil)
        #expect(withoutBucket.routeRateTaken == nil)
    }

    @Test func routeUserBucketRefusesWithItsOwnDetail() throws {
        let harness = try Harness()
        var route = Self.appRoute
        route.userBucket = RouteUserBucket(name: "send", refusal: "too many sends") { _ in 1 }
        let app = try Self.app()
        func user(_ userID: String) -> RequestPipeline.Exchange {
            var x = harness.exchange(Self.request(), route)
            x.credential = .user(appID: "app1", userID: userID)
            x.app = app
            return x
        }
        for _ in 0..<2 {
            var x = user("u1")
            #expect(try RequestPipeline.routeUserLimit(&x) == nil)
            #expect(x.routeRateTaken?.bucket == "send:app1:u1")
        }
        var refused = user("u1")
        let error = Self.refusal { try RequestPipeline.routeUserLimit(&refused) }
        #expect(error?.code == .rateLimited)
        #expect(error?.detail == "too many sends")
        #expect(refused.routeRateTaken == nil)
        // The route's bucket is not the token's: the user's ordinary requests still pass.
        var ordinary = user("u1")
        #expect(try RequestPipeline.rateLimit(&ordinary) == nil)
        var other = user("u2")
        #expect(try RequestPipeline.routeUserLimit(&other) == nil)
    }

    @Test func routeUserBucketReadsItsRateFromTheAppSettings() throws {
        var settings = AppSettings.defaults()
        _ = try settings.apply(["user_send_rate_per_s": 3])
        #expect(Self.sends.rate(settings) == 3)
    }

    // MARK: - Idempotency

    @Test func idempotencyKeyIsReadOnlyOnPosts() throws {
        let harness = try Harness()
        var get = harness.exchange(Self.request(.get, headers: ["Idempotency-Key": "k1"]))
        #expect(try RequestPipeline.replayIdempotent(&get) == nil)
        #expect(get.idempotency == nil && !get.replayed)
        var post = harness.exchange(Self.request(.post, body: "{}"))
        #expect(try RequestPipeline.replayIdempotent(&post) == nil)
        #expect(post.idempotency == nil)
        // A keyed POST claims a database row: it needs a connection.
        var keyed = harness.exchange(Self.request(.post, headers: ["Idempotency-Key": "k1"], body: "{}"))
        #expect(Self.needsConnection { try RequestPipeline.replayIdempotent(&keyed) })
    }

    @Test func keyedPostsNeverRunOnTheEventLoop() throws {
        let harness = try Harness()
        let x = harness.exchange(
            Self.request(.post, headers: ["Authorization": "Bearer \(Self.adminKey)", "Idempotency-Key": "k1"]), Self.adminRoute)
        var ran = false
        #expect(
            RequestPipeline.runOnEventLoop(x) { _ in
                ran = true
                return Response(status: 204)
            } == nil)
        #expect(!ran)
    }

    // MARK: - Bodies and parameters

    @Test func mediaTypeIsCheckedOnlyWhenABodyWasSent() throws {
        let harness = try Harness()
        var empty = harness.exchange(Self.request(.post))
        #expect(try RequestPipeline.requireJSON(&empty) == nil)
        var json = harness.exchange(Self.request(.post, headers: ["Content-Type": " Application/JSON ; charset=utf-8"], body: "{}"))
        #expect(try RequestPipeline.requireJSON(&json) == nil)
        var text = harness.exchange(Self.request(.post, headers: ["Content-Type": "text/plain"], body: "{}"))
        let error = Self.refusal { try RequestPipeline.requireJSON(&text) }
        #expect(error?.code == .unsupportedMediaType)
        #expect(error?.status == 415)
        var missing = harness.exchange(Self.request(.post, body: "{}"))
        #expect(Self.refusal { try RequestPipeline.requireJSON(&missing) }?.code == .unsupportedMediaType)
        // A body too large to read was still sent: its media type counts.
        var unread = harness.exchange(Self.request(.post, overLimit: true))
        #expect(Self.refusal { try RequestPipeline.requireJSON(&unread) }?.code == .unsupportedMediaType)
    }

    @Test func aRouteMayNameItsOwnMediaType() throws {
        let harness = try Harness()
        var route = Self.appRoute
        route.bodyMediaType = "application/x-ndjson"
        var json = harness.exchange(Self.request(.post, headers: ["Content-Type": "application/json"], body: "{}"), route)
        #expect(Self.refusal { try RequestPipeline.requireJSON(&json) }?.detail == "request bodies must be application/x-ndjson")
        var ndjson = harness.exchange(Self.request(.post, headers: ["Content-Type": "application/x-ndjson"], body: "{}\n"), route)
        #expect(try RequestPipeline.requireJSON(&ndjson) == nil)
    }

    @Test func mediaTypeComparison() {
        #expect(RequestPipeline.isMediaType("application/json", "application/json"))
        #expect(RequestPipeline.isMediaType("\tAPPLICATION/Json;charset=utf-8", "application/json"))
        #expect(!RequestPipeline.isMediaType("application/json-patch+json", "application/json"))
        #expect(!RequestPipeline.isMediaType("application/jso", "application/json"))
        #expect(!RequestPipeline.isMediaType("", "application/json"))
        #expect(!RequestPipeline.isMediaType(nil, "application/json"))
    }

    @Test func bodyOverTheLimitIs413() throws {
        let harness = try Harness()
        var over = harness.exchange(Self.request(.post, overLimit: true))
        let error = Self.refusal { try RequestPipeline.limitBody(&over) }
        #expect(error?.code == .payloadTooLarge)
        #expect(error?.status == 413)
        var within = harness.exchange(Self.request(.post, headers: ["Content-Type": "application/json"], body: "{}"))
        #expect(try RequestPipeline.limitBody(&within) == nil)
    }

    @Test func nulInPathOrQueryNamesEachField() throws {
        let harness = try Harness()
        var x = harness.exchange(
            Self.request(
                pathParameters: ["user_id": "u\u{0}1", "group_id": "g\u{0}", "room_id": "fine"],
                query: [("limit", "1\u{0}"), ("na\u{0}me", "v"), ("cursor", "ok")]))
        let error = Self.refusal { try RequestPipeline.refuseNUL(&x) }
        #expect(error?.code == .invalidParams)
        // Path parameters by name, then query parameters in order; a name holding NUL is reported as `query`.
        #expect(error?.fieldErrors.map(\.field) == ["group_id", "user_id", "limit", "query"])
        var clean = harness.exchange(Self.request(pathParameters: ["user_id": "u1"], query: [("limit", "10")]))
        #expect(try RequestPipeline.refuseNUL(&clean) == nil)
    }

    // MARK: - The order of the steps

    /// Runs an admin request with a body through every step; the handler answers 204 when reached.
    static func answer(_ harness: Harness, _ request: Request) -> (status: Int, code: Int?, handled: Bool) {
        var handled = false
        let response = RequestPipeline.run(harness.exchange(request, Self.adminRoute)) { _ in
            handled = true
            return Response(status: 204)
        }
        return (response.status, Self.problemCode(response), handled)
    }

    @Test func precedenceFollowsTheProblemOrder() throws {
        let harness = try Harness()
        let admin: HTTPHeaders = ["Authorization": "Bearer \(Self.adminKey)"]
        let oversizedText = Self.request(.post, headers: ["Authorization": "Bearer \(Self.adminKey)", "Content-Type": "text/plain"], overLimit: true)
        // 401 before anything else.
        var anonymous = oversizedText
        anonymous.head.headers.remove("Authorization")
        #expect(Self.answer(harness, anonymous) == (401, ErrorCode.unauthenticated.code, false))
        // 415 before 413.
        #expect(Self.answer(harness, oversizedText) == (415, ErrorCode.unsupportedMediaType.code, false))
        var oversizedJSON = oversizedText
        oversizedJSON.head.headers.replace("Content-Type", "application/json")
        oversizedJSON.pathParameters = ["user_id": "u\u{0}"]
        // 413 before 400.
        #expect(Self.answer(harness, oversizedJSON) == (413, ErrorCode.payloadTooLarge.code, false))
        var nul = Self.request(.post, headers: admin, pathParameters: ["user_id": "u\u{0}"])
        #expect(Self.answer(harness, nul) == (400, ErrorCode.invalidParams.code, false))
        nul.pathParameters = ["user_id": "u1"]
        #expect(Self.answer(harness, nul) == (204, nil, true))
    }

    @Test func aHandlerNeedingTheDatabaseOnTheEventLoopStartsAgainOnAWorker() throws {
        let harness = try Harness()
        let x = harness.exchange(Self.request(headers: ["Authorization": "Bearer \(Self.adminKey)"]), Self.adminRoute)
        #expect(RequestPipeline.runOnEventLoop(x) { _ in throw NeedsConnection() } == nil)
        let refused = RequestPipeline.runOnEventLoop(x) { _ in throw APIError.forbidden() }
        #expect(refused?.status == 403)
        #expect(refused.flatMap(Self.problemCode) == ErrorCode.forbidden.code)
    }

    // MARK: - After the handler

    @Test func everyAnswerCarriesTheRateLimitHeadersAndApp() throws {
        let harness = try Harness()
        var x = harness.exchange(Self.request())
        x.app = try Self.app()
        x.headers = [("RateLimit-Limit", "20"), ("RateLimit-Remaining", "3")]
        let answered = RequestPipeline.addHeaders(x, Response(status: 429))
        #expect(answered.status == 429)
        #expect(answered.headers["RateLimit-Remaining"] == "3")
        #expect(answered.headers["RateLimit-Limit"] == "20")
        #expect(answered.logContext == "app=app1")
    }

    @Test func readsAndReplaysPublishNothing() throws {
        let harness = try Harness()
        var route = Self.appRoute
        route.sequenced = true
        let app = try Self.app()
        // Each of these answers at once (a response to publish would come `later`, after the sequencer).
        var get = harness.exchange(Self.request(.get), route)
        get.app = app
        var replayed = harness.exchange(Self.request(.post), route)
        replayed.app = app
        replayed.replayed = true
        var unsequenced = harness.exchange(Self.request(.post), Self.appRoute)
        unsequenced.app = app
        let noApp = harness.exchange(Self.request(.post), route)
        for x in [get, replayed, unsequenced, noApp] {
            let response = RequestPipeline.publishEvents(x, Response(status: 201))
            #expect(response.bodyBytes != nil && response.status == 201)
        }
        // Without an idempotency claim there is nothing to store: the answer is untouched.
        #expect(RequestPipeline.storeIdempotent(get, Response(status: 200)).status == 200)
    }
}
