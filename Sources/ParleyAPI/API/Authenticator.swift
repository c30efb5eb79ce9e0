import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// What verifying a user token needs to know of its user at the server time (docs/users.md#user-tokens): read by the
/// user domain and handed in by the app layer, so the request pipeline does not name the user domain.
package struct TokenSubject: Sendable {
    package var isDeleted: Bool
    package var tokenGeneration: Int64
    var isBanned: Bool

    package init(isDeleted: Bool, tokenGeneration: Int64, isBanned: Bool) {
        self.isDeleted = isDeleted
        self.tokenGeneration = tokenGeneration
        self.isBanned = isBanned
    }

    /// Reads the subject `userID` of app `appID` at server time `now`; nil when there is no such user.
    package typealias Reader = @Sendable (_ appID: String, _ userID: String, _ now: Int64, _ db: PostgresConnection) throws -> TokenSubject?
}

/// Recognises and verifies the bearer credential of a request (docs/users.md#user-tokens).
package struct Authenticator: Sendable {
    /// SHA-256 of each accepted server admin key: the configured one and, while it is rotated, the secondary one
    /// (docs/configuration.md#rotating-the-admin-key). A presented token is hashed and compared with every digest in
    /// constant time, so neither the keys' lengths nor which one matched shows in the timing.
    let adminKeyDigests: [[UInt8]]
    package let apps: AppDirectory
    package let clock: ServerClock
    let tokenSubject: TokenSubject.Reader

    /// A verified credential and, when verifying it read the app's record (admin acting as an app, user tokens),
    /// that record, so the pipeline does not look it up again.
    struct Verified {
        var credential: Credential
        var app: AppRecord?
    }

    /// The verified credential, or a 401/403/404 problem. `Parley-App-Id` is read only on app routes
    /// (`appRoute`); admin-only routes ignore it. Without a connection (an event loop) it answers from the app
    /// directory's cache, and throws ``NeedsConnection`` when it would read the database (a user token always does).
    func authenticate(_ request: Request, bearer overrideToken: String? = nil, appRoute: Bool = true, db: PostgresConnection?) throws
        -> Verified
    {
        guard let token = overrideToken ?? Self.bearer(request.headers["Authorization"]) else {
            throw APIError.unauthenticated("missing bearer credential")
        }
        // A recently verified app key: one cache lookup, no parsing or hashing.
        if let hash = apps.knownHash(ofPresented: token) {
            if let key = try apps.key(hash: hash, now: clock.now(), db: db) { return Verified(credential: .app(appID: key.appID, keyID: key.keyID)) }
            throw APIError.unauthenticated("unknown or revoked app key")
        }
        if isAdminKey(token) {
            guard appRoute, let appID = request.headers["Parley-App-Id"] else { return Verified(credential: .admin) }
            let known = IdentifierKind.appID.problem(appID) == nil ? try apps.app(appID, db: db) : nil
            guard let known else {
                // A header naming no app: the admin key is valid, the addressed app is not.
                throw APIError(.notFound, "app \(appID) does not exist")
            }
            return Verified(credential: .adminAsApp(appID: appID), app: known)
        }
        if AppKey.looksLikeAppKey(token) {
            let hash = AppKey.hash(token)
            guard let key = try apps.key(hash: hash, now: clock.now(), db: db) else {
                throw APIError.unauthenticated("unknown or revoked app key")
            }
            apps.remember(presented: token, hash: hash)
            return Verified(credential: .app(appID: key.appID, keyID: key.keyID))
        }
        if UserToken.looksLikeJWT(token) { return try verifyUserToken(token, db: db) }
        throw APIError.unauthenticated("the bearer value is not a Parley credential")
    }

    private func isAdminKey(_ token: String) -> Bool {
        let digest = Crypto.sha256(token)
        // No early exit: every digest is compared whatever the first one said.
        return adminKeyDigests.reduce(false) { matched, key in Crypto.constantTimeEquals(digest, key) || matched }
    }

    /// Verification in this order: algorithm/signature/issuer, expiry, user and generation, ban (so an expired token
    /// with a bad signature is 401 `6000103`, not `6000106`).
    private func verifyUserToken(_ token: String, db: PostgresConnection?) throws -> Verified {
        guard let db else { throw NeedsConnection() }
        // An `iss` that is no app id names no app, and is not looked up: a forged one (U+0000 included) never
        // reaches PostgreSQL.
        guard let (_, claims) = UserToken.decodeUnverified(token), let appID = claims["iss"]?.stringValue,
            IdentifierKind.appID.isValid(appID), let app = try apps.app(appID, db: db)
        else {
            throw APIError.tokenRejected(.tokenInvalid, "invalid user token")
        }
        let now = clock.now()
        let verified: UserToken.Claims
        switch UserToken.verify(token, secret: app.tokenSecret, now: now / 1000) {
        case .success(let c): verified = c
        case .failure(let failure):
            throw APIError.tokenRejected(failure.errorCode, failure == .expired ? "user token expired" : "invalid user token")
        }
        guard let user = try tokenSubject(appID, verified.userID, now, db), !user.isDeleted, verified.generation >= user.tokenGeneration
        else {
            throw APIError.tokenRejected(.tokenInvalid, "user token revoked or user unknown")
        }
        if user.isBanned {
            throw APIError(.userBanned, "user \(verified.userID) is banned")
        }
        return Verified(credential: .user(appID: appID, userID: verified.userID), app: app)
    }

    /// The value of `Authorization: Bearer <value>` (scheme case-insensitive), or nil.
    package static func bearer(_ header: String?) -> String? {
        guard let header else { return nil }
        // Byte-level: this runs on every request (the Character-based split/trim cost ~6k instructions).
        let u = header.utf8
        let scheme = Array("bearer".utf8)
        guard u.count > scheme.count + 1 else { return nil }
        var index = u.startIndex
        for expected in scheme {
            let c = u[index]
            guard c | 0x20 == expected else { return nil }
            index = u.index(after: index)
        }
        guard u[index] == UInt8(ascii: " ") else { return nil }
        while index != u.endIndex && u[index] == UInt8(ascii: " ") { index = u.index(after: index) }
        var end = u.endIndex
        while end != index && u[u.index(before: end)] == UInt8(ascii: " ") { end = u.index(before: end) }
        guard index != end else { return nil }
        return String(Substring(u[index..<end]))
    }
}
