import ParleyCore

/// Who is calling (docs/users.md#user-tokens), after the bearer value was recognised and verified.
public enum Credential: Sendable, Equatable {
    /// The server admin key, not acting for an app.
    case admin
    /// The server admin key with `Parley-App-Id`: acts exactly like that app's key.
    case adminAsApp(appID: String)
    /// An app key.
    case app(appID: String, keyID: String)
    /// A user token acting for one user.
    case user(appID: String, userID: String)

    /// The app this credential acts in, if any.
    public var appID: String? {
        switch self {
        case .admin: nil
        case .adminAsApp(let id), .app(let id, _), .user(let id, _): id
        }
    }

    /// The user of a user token.
    public var userID: String? {
        if case .user(_, let id) = self { return id }
        return nil
    }

    /// True for an app key or the admin key acting as an app (the app's administrator).
    public var isAppAdministrator: Bool {
        switch self {
        case .adminAsApp, .app: true
        default: false
        }
    }

    /// The idempotency scope (docs/errors.md#retrying-safely): the app's key kind, or the user for user tokens.
    var idempotencyScope: String {
        switch self {
        case .admin: "admin"
        case .adminAsApp, .app: "app"
        case .user(_, let userID): "user:" + userID
        }
    }
}

/// Which credentials an app route accepts (the "Who" of each operation in docs/api.md; server-admin routes, `S`, are
/// added with ``API/addAdmin(_:_:_:maxBodyBytes:_:)``).
public enum Access: Sendable {
    /// `A`: an app key (or admin + `Parley-App-Id`).
    case app
    /// `A, U`: an app key, or a user token acting for itself (the `{user_id}` path parameter must be its user).
    case appOrSelf
    /// `A, U·r` / `A, U·m`: an app key or any user token of the app; the handler applies membership rules.
    case appOrUser
}
