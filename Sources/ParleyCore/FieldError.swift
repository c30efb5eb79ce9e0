/// One invalid request field, as listed in a 400 problem's `errors[]` (docs/errors.md#problems-rfc-9457).
public struct FieldError: Sendable, Equatable, CustomStringConvertible {
    /// JSONPath-like location: `body.text`, `body.user_ids[2]`, `header Idempotency-Key`, `query limit`.
    public var field: String
    /// What is wrong, safe to show the caller.
    public var message: String

    public init(field: String, message: String) {
        self.field = field
        self.message = message
    }

    public var description: String { "\(field): \(message)" }
}
