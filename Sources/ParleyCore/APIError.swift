/// An error the API answers with a problem response (RFC 9457, docs/errors.md#problems-rfc-9457).
///
/// Services throw it with a catalogue code and a caller-safe `detail`; the HTTP layer renders it with
/// ``problemBody(requestID:)``, sends `code.status`, and adds `extraHeaders` (`Retry-After`, `WWW-Authenticate`).
///
/// ```swift
/// throw APIError(.userNotFound, "user u1 does not exist")
/// ```
public struct APIError: Error, Sendable, CustomStringConvertible {
    /// The catalogue entry; decides `type`, `title`, `status` and `code`.
    public var code: ErrorCode
    /// Caller-safe explanation. Never holds secrets or internal error text.
    public var detail: String
    /// Field-level validation errors (`errors[]`), only for `invalid_params`.
    public var fieldErrors: [FieldError]
    /// `hook_code` of a before-event hook problem: nil = omitted, `.some(nil)` = JSON `null`.
    public var hookCode: Int??
    /// Headers the response must carry besides the defaults (`Retry-After`, `WWW-Authenticate` …).
    public var extraHeaders: [(String, String)]
    /// Integer members the problem carries besides the standard ones (`quota` of a refused upload), in order.
    public var extraMembers: [(String, Int64)] = []
    /// The HTTP status when it is not the code's own: a code one protocol answers with several statuses
    /// (`upload_protocol_error`: 416 for a download range, 404, 409, 410, 412 or 415 for a tus upload,
    /// docs/files.md#resumable-uploads-tus). Nil for the code's status.
    public var statusOverride: Int?

    public init(
        _ code: ErrorCode, _ detail: String, fieldErrors: [FieldError] = [], hookCode: Int?? = nil,
        extraHeaders: [(String, String)] = []
    ) {
        self.code = code
        self.detail = detail
        self.fieldErrors = fieldErrors
        self.hookCode = hookCode
        self.extraHeaders = extraHeaders
    }

    /// The HTTP status of the response: the code's, unless ``statusOverride`` says otherwise.
    public var status: Int { statusOverride ?? code.status }

    public var description: String {
        var s = "\(code.code) \(code.name): \(detail)"
        if !fieldErrors.isEmpty { s += " [" + fieldErrors.map(\.description).joined(separator: "; ") + "]" }
        return s
    }

    // MARK: - Convenience constructors

    /// 400 `invalid_params` listing `fields`; the detail names them.
    public static func invalidParams(_ fields: [FieldError]) -> APIError {
        let detail: String
        if fields.isEmpty {
            detail = "invalid parameters"
        } else if fields.count == 1 {
            detail = "invalid field \(fields[0].field): \(fields[0].message)"
        } else {
            detail = "\(fields.count) invalid fields: " + fields.map(\.field).joined(separator: ", ")
        }
        return APIError(.invalidParams, detail, fieldErrors: fields)
    }

    /// 400 `invalid_params` for one field.
    public static func invalidParam(_ field: String, _ message: String) -> APIError {
        invalidParams([FieldError(field: field, message: message)])
    }

    /// 401 `unauthenticated` with `WWW-Authenticate: Bearer` (docs/users.md#user-tokens).
    public static func unauthenticated(_ detail: String = "missing or invalid credential") -> APIError {
        APIError(.unauthenticated, detail, extraHeaders: [("WWW-Authenticate", "Bearer")])
    }

    /// A 401 for a user token (`token_invalid` / `token_expired`), with `WWW-Authenticate: Bearer`.
    public static func tokenRejected(_ code: ErrorCode, _ detail: String) -> APIError {
        APIError(code, detail, extraHeaders: [("WWW-Authenticate", "Bearer")])
    }

    /// 403 `forbidden`.
    public static func forbidden(_ detail: String = "the credential may not do this") -> APIError {
        APIError(.forbidden, detail)
    }

    /// 429 `rate_limited` (or another 429/503 code) with `Retry-After` in whole seconds (at least 1).
    public static func retryLater(_ code: ErrorCode = .rateLimited, _ detail: String, retryAfterSeconds: Int)
        -> APIError
    {
        APIError(code, detail, extraHeaders: [("Retry-After", String(max(1, retryAfterSeconds)))])
    }

    /// 500 `internal_error` with a generic detail; the cause is logged, never sent.
    public static let internalError = APIError(.internalError, "internal server error")

    /// 403 `rejected_by_hook`: `detail` is the hook's reason, `hook_code` its code (possibly null).
    public static func rejectedByHook(reason: String, hookCode: Int?) -> APIError {
        APIError(.rejectedByHook, reason, hookCode: .some(hookCode))
    }

    // MARK: - Rendering

    /// The `application/problem+json` body, members in the order docs/errors.md#problems-rfc-9457 shows.
    public func problemBody(requestID: String) -> [UInt8] {
        var o = JSONObjectWriter(capacity: 192 + detail.utf8.count + fieldErrors.count * 64)
        o["type"] = "urn:parley:error:\(code.code)"
        o["title"] = code.name
        o["status"] = status
        o["detail"] = detail
        o["code"] = code.code
        o["request_id"] = requestID
        if !fieldErrors.isEmpty {
            o.write("errors") { w in
                w.array { w in
                    for e in fieldErrors {
                        w.object { w in
                            w.key("field")
                            w.writeString(e.field)
                            w.key("message")
                            w.writeString(e.message)
                        }
                    }
                }
            }
        }
        if let hookCode {
            o["hook_code"] = hookCode
        }
        for (name, value) in extraMembers { o[name] = value }
        return o.finish()
    }
}
