import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Anything that carries a request: its body reads the same way wherever it is handled.
package protocol RequestCarrier {
    var request: Request { get }
}

extension RequestCarrier {
    /// The JSON body as a field reader (an empty body reads as `{}`).
    package func body() throws -> BodyReader { try BodyReader.parse(request.body) }
}

/// What every handler works with, app route or admin route: the request (path parameters, body, query string,
/// cursors), the server time, the worker's connection and the shared services.
package protocol RequestContext: RequestCarrier {
    /// Server-clock milliseconds, read once per request.
    var now: Int64 { get }
    /// The worker thread's own connection (handlers run on PostgreSQL worker threads).
    var db: PostgresConnection { get }
    var services: Services { get }
}

extension RequestContext {
    /// A percent-decoded path parameter (the router guarantees it exists).
    package func path(_ name: String) -> String { request.pathParameters[name] ?? "" }

    /// A path parameter that must be a valid identifier of `kind` (else 400 naming it).
    package func pathID(_ name: String, _ kind: IdentifierKind) throws -> String {
        let value = path(name)
        if let problem = kind.problem(value) { throw APIError.invalidParam(name, problem) }
        return value
    }

    /// Typed query-parameter reading that collects field errors.
    package func query() -> QueryReader { QueryReader(request.query) }

    /// Opaque cursors for lists.
    package var cursors: CursorCodec { services.cursors }

    /// The values of a cursor of `list` (400 `invalid_cursor` when it is not one).
    package func decodeCursor(_ cursor: String, list: String) throws -> [JSONValue] {
        do { return try cursors.decode(cursor, list: list) } catch { throw APIError(.invalidCursor, "invalid cursor") }
    }

    /// The `(created_at, id)` position of a keyset cursor of `list` (nil without a cursor): the shape of every list
    /// ordered by creation time, then id.
    package func timeAndIDCursor(_ cursor: String?, list: String) throws -> (Int64, String)? {
        guard let cursor else { return nil }
        let values = try decodeCursor(cursor, list: list)
        guard values.count == 2, let t = values[0].intValue, let id = values[1].stringValue else {
            throw APIError(.invalidCursor, "malformed cursor")
        }
        return (t, id)
    }
}

/// An app route's verified caller and its request: everything a handler knows before it touches the database. An
/// ``APIContext`` is one (with its worker's connection); so is a ``CallerContext``, what a route's event-loop path
/// works with (``API/add(_:_:_:_:maxBodyBytes:numbersItsEvents:onEventLoop:_:)``).
package protocol AppCaller: RequestCarrier {
    var credential: Credential { get }
    /// The app the request acts in.
    var app: AppRecord { get }
    /// Server-clock milliseconds, read once per request.
    var now: Int64 { get }
    var services: Services { get }
}

extension AppCaller {
    /// The app the request acts in.
    package var appID: String { app.appID }

    /// True when the caller is the app (app key or admin acting as the app).
    package var isApp: Bool { credential.isAppAdministrator }

    /// The user of a user token.
    package var tokenUserID: String? { credential.userID }

    /// With a user token, a field naming the acting user must be that user or absent (then it defaults to it);
    /// with an app key it is required (docs/users.md#user-tokens). Returns the acting user. `field` is the field's path
    /// in the request (`BodyReader.fieldPath`: `body.from`, or `body.message.from` in a nested send body).
    package func actingUser(_ value: String?, field: String) throws -> String {
        if let tokenUser = tokenUserID {
            if let value, value != tokenUser { throw APIError.forbidden("a user token acts only for its own user") }
            return tokenUser
        }
        guard let value else { throw APIError.invalidParam(field, "is required") }
        return value
    }

    /// `skip_checks`/`skip_hooks` are for app keys only (docs/users.md#user-tokens).
    package func appOnlyFlag(_ value: Bool?) throws -> Bool {
        guard let value, value else { return false }
        if !isApp { throw APIError.forbidden("skip_checks and skip_hooks need an app key") }
        return true
    }
}

/// The caller of an app route running on the HTTP event loop, where no database connection is at hand: a handler
/// that finds it needs one throws ``NeedsConnection``, and the request runs again from the start on a worker.
package struct CallerContext: AppCaller {
    package let request: Request
    package let credential: Credential
    package let app: AppRecord
    package let now: Int64
    package let services: Services
}

/// What an app route's handler works with: the request, the verified caller, its app, the server time and the
/// database connection of the worker thread it runs on.
public struct APIContext: RequestContext, AppCaller {
    public let request: Request
    public let credential: Credential
    /// The app the request acts in.
    public let app: AppRecord
    /// Server-clock milliseconds, read once per request.
    public let now: Int64
    package let services: Services
    /// The worker thread's own connection (handlers run on PostgreSQL worker threads).
    public let db: PostgresConnection

    /// Writes `events` as the last statement of the current transaction.
    public func append(_ events: [NewEvent]) throws {
        try EventLog.append(events, appID: appID, now: now, on: db)
    }
}

/// What a server-admin route's handler works with (`/v1/apps/**`, `/v1/test/**`): no app of its own.
public struct AdminContext: RequestContext {
    public let request: Request
    /// Server-clock milliseconds, read once per request.
    public let now: Int64
    package let services: Services
    /// The worker thread's own connection.
    public let db: PostgresConnection
}

/// Query-string parameters read with the same error collection as bodies (`errors[].field` = the parameter).
public struct QueryReader {
    private let pairs: [(String, String)]
    public private(set) var errors: [FieldError] = []

    package init(_ pairs: [(String, String)]) { self.pairs = pairs }

    public func raw(_ name: String) -> String? {
        for (n, v) in pairs where n == name { return v }
        return nil
    }

    public mutating func string(_ name: String, maxBytes: Int? = nil) -> String? {
        guard let v = raw(name) else { return nil }
        if let maxBytes, v.utf8.count > maxBytes {
            errors.append(FieldError(field: name, message: "must be at most \(maxBytes) bytes"))
            return nil
        }
        return v
    }

    public mutating func int(_ name: String, range: ClosedRange<Int64>) -> Int64? {
        guard let v = raw(name) else { return nil }
        guard let i = Int64(v), range.contains(i) else {
            errors.append(FieldError(field: name, message: "must be an integer from \(range.lowerBound) to \(range.upperBound)"))
            return nil
        }
        return i
    }

    public mutating func bool(_ name: String) -> Bool? {
        guard let v = raw(name) else { return nil }
        switch v {
        case "true": return true
        case "false": return false
        default:
            errors.append(FieldError(field: name, message: "must be true or false"))
            return nil
        }
    }

    /// An identifier parameter of `kind` (``IdentifierKind``; a bad one → 400 naming the parameter).
    public mutating func id(_ name: String, _ kind: IdentifierKind) -> String? {
        guard let v = raw(name) else { return nil }
        if let problem = kind.problem(v) {
            errors.append(FieldError(field: name, message: problem))
            return nil
        }
        return v
    }

    public mutating func choice(_ name: String, _ options: [String]) -> String? {
        guard let v = raw(name) else { return nil }
        guard options.contains(v) else {
            errors.append(FieldError(field: name, message: "must be one of " + options.joined(separator: ", ")))
            return nil
        }
        return v
    }

    /// A comma-separated list.
    public mutating func list(_ name: String, maxItems: Int = 100) -> [String]? {
        guard let v = raw(name) else { return nil }
        let items = v.split(separator: ",", omittingEmptySubsequences: true).map(String.init)
        if items.count > maxItems {
            errors.append(FieldError(field: name, message: "at most \(maxItems) items"))
            return nil
        }
        return items
    }

    /// `limit` (1–100, default 20) of a list (docs/api.md).
    public mutating func limit() -> Int { Int(int("limit", range: 1...100) ?? 20) }

    /// `cursor` of a list (docs/api.md). An empty `cursor=` is no cursor (the first page): the OpenAPI document types
    /// it as a plain string, and a client that always sends the parameter starts with an empty one.
    public mutating func cursor() -> String? { string("cursor").flatMap { $0.isEmpty ? nil : $0 } }

    public mutating func addError(_ name: String, _ message: String) { errors.append(FieldError(field: name, message: message)) }

    /// Throws 400 listing every invalid parameter.
    public func check() throws {
        if !errors.isEmpty { throw APIError.invalidParams(errors) }
    }
}
