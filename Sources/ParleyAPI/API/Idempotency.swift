import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// `Idempotency-Key` storage and replay (docs/errors.md#retrying-safely), in PostgreSQL so every node sees the same
/// keys.
enum Idempotency {
    /// A key this request holds while it runs.
    struct Claim: Sendable {
        let appID: String
        let scope: String
        let key: String
    }

    enum Start {
        case proceed(Claim)
        case replay(Response)
        /// Nothing stored and nothing claimed: the request runs without storing its answer (a body over the limit).
        case unclaimed
    }

    /// How long a stored answer is replayed.
    static let retentionMillis: Int64 = 24 * 3600 * 1000
    /// A claim older than this whose request never completed (its node died) may be taken over.
    static let abandonedAfterMillis: Int64 = 60_000

    /// Claims `key` for this request, or returns the stored answer, or throws 422 `7000003` / 409 `7000004`.
    static func begin(key: String, request: Request, appID: String, scope: String, now: Int64, db: PostgresConnection) throws -> Start {
        guard (1...255).contains(key.utf8.count), key.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else {
            throw APIError.invalidParam("header Idempotency-Key", "must be 1 to 255 printable ASCII characters")
        }
        if request.bodyOverLimit { return try checkUnread(key: key, appID: appID, scope: scope, now: now, db: db) }
        let path = String(request.head.rawPath)
        let bodyHash = Crypto.hex(Crypto.sha256(request.body))
        let claimed = try db.query(
            """
            INSERT INTO idempotency_keys AS k (app_id, scope, key, method, path, body_hash, created_at, expires_at)
            VALUES (\(appID), \(scope), \(key), \(request.method.rawValue), \(path), \(bodyHash), \(now), \(now + retentionMillis))
            ON CONFLICT (app_id, scope, key) DO UPDATE
              SET method = EXCLUDED.method, path = EXCLUDED.path, body_hash = EXCLUDED.body_hash, status = NULL,
                  headers = NULL, body = NULL, created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
              WHERE k.expires_at <= \(now) OR (k.status IS NULL AND k.created_at < \(now)::bigint - \(abandonedAfterMillis)::bigint)
            RETURNING 1
            """)
        if claimed.rowCount == 1 { return .proceed(Claim(appID: appID, scope: scope, key: key)) }
        let existing = try db.query(
            "SELECT method, path, body_hash, status, headers, body FROM idempotency_keys WHERE app_id = \(appID) AND scope = \(scope) AND key = \(key)"
        )
        // The headers and body (bytea) are read from their cells once the request is known to be finished.
        guard
            let (method, storedPath, storedHash, status, headersCell, bodyCell) = try existing.decodeFirst(
                (String, String, String, Int?, PostgresCell, PostgresCell).self)
        else {
            // Deleted between the two statements (expired and purged): treat as new.
            return try begin(key: key, request: request, appID: appID, scope: scope, now: now, db: db)
        }
        guard method == request.method.rawValue, storedPath == path, storedHash == bodyHash else {
            throw APIError(.idempotencyKeyReused, "Idempotency-Key was used with a different request")
        }
        guard let status else { throw APIError(.idempotencyKeyInFlight, "the first request with this Idempotency-Key is still running") }
        var response = Response(status: status, body: try bodyCell.bytes)
        if case .array(let headers) = try JSONValue.parse(try headersCell.textBytes) {
            for pair in headers {
                if let name = pair[0]?.stringValue, let value = pair[1]?.stringValue { response.headers.add(name, value) }
            }
        }
        return .replay(response)
    }

    /// A request whose body was over the limit, so never read: it cannot be the request stored under a key (none with
    /// such a body is stored: its answer, 413, is not), so a key in use means another request (422 `7000003`); a free
    /// key is left unclaimed.
    private static func checkUnread(key: String, appID: String, scope: String, now: Int64, db: PostgresConnection) throws -> Start {
        let inUse = try db.query(
            """
            SELECT 1 FROM idempotency_keys
            WHERE app_id = \(appID) AND scope = \(scope) AND key = \(key) AND expires_at > \(now)
              AND NOT (status IS NULL AND created_at < \(now)::bigint - \(abandonedAfterMillis)::bigint)
            """)
        if inUse.rowCount > 0 { throw APIError(.idempotencyKeyReused, "Idempotency-Key was used with a different request") }
        return .unclaimed
    }

    /// Stores the answer (or releases the key for statuses that must execute again: 429 and ≥ 500).
    static func complete(_ claim: Claim, response: Response, db: PostgresConnection) throws {
        guard response.status != 429, response.status < 500, let body = response.bodyBytes else {
            try db.query("DELETE FROM idempotency_keys WHERE app_id = \(claim.appID) AND scope = \(claim.scope) AND key = \(claim.key)")
            return
        }
        let headers = JSONValue.array(
            response.headers.fields.map { JSONValue.array([.string($0.name), .string($0.value)]) }
        ).serialized()
        try db.query(
            "UPDATE idempotency_keys SET status = \(response.status), headers = \(String(decoding: headers, as: UTF8.self)), body = \(body) WHERE app_id = \(claim.appID) AND scope = \(claim.scope) AND key = \(claim.key)"
        )
    }
}
