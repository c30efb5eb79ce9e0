internal import CLibPQ

/// The one error type of the PostgreSQL layer: connection, query and pool failures, with the server's fields.
///
/// `description` is deliberately generic so that server details never reach an end user by accident;
/// `debugDescription` has everything (but never the SQL text or bound values).
public struct PostgresError: Error, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// What failed, broadly; stable for mapping to HTTP statuses.
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String { case connection, query, poolTimeout, poolClosed, `protocol`, timeout }
        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// Could not connect, or the connection broke.
        public static let connection = Kind(.connection)
        /// The server rejected a statement (see `sqlState`).
        public static let query = Kind(.query)
        /// No pool worker became free within the acquire timeout.
        public static let poolTimeout = Kind(.poolTimeout)
        /// The pool was shut down.
        public static let poolClosed = Kind(.poolClosed)
        /// Unexpected data from libpq or the server (a bug, or a type mismatch while decoding).
        public static let `protocol` = Kind(.protocol)
        /// The server did not answer within the configuration's `responseTimeout` (the connection was abandoned),
        /// or it did not answer another exchange lately and this one was not tried (`PostgresCircuit`).
        public static let timeout = Kind(.timeout)

        public var description: String { base.rawValue }
    }

    /// What failed, broadly.
    public var kind: Kind
    /// The five-character SQLSTATE, when the server sent one.
    public var sqlState: String?
    /// The server's primary message, or libpq's for connection failures.
    public var message: String
    /// The server's DETAIL (may contain row values: log it, never show it to clients).
    public var detail: String?
    /// The server's HINT.
    public var hint: String?
    /// The violated constraint's name (23xxx errors).
    public var constraint: String?
    /// The table the error concerns, when reported.
    public var table: String?
    /// The column the error concerns, when reported.
    public var column: String?

    public init(
        kind: Kind, sqlState: String? = nil, message: String, detail: String? = nil, hint: String? = nil,
        constraint: String? = nil, table: String? = nil, column: String? = nil
    ) {
        self.kind = kind
        self.sqlState = sqlState
        self.message = message
        self.detail = detail
        self.hint = hint
        self.constraint = constraint
        self.table = table
        self.column = column
    }

    /// 23505: a unique or primary-key constraint was violated.
    public var isUniqueViolation: Bool { sqlState == "23505" }
    /// 23503: a foreign-key constraint was violated.
    public var isForeignKeyViolation: Bool { sqlState == "23503" }
    /// 40001: the transaction must be retried.
    public var isSerializationFailure: Bool { sqlState == "40001" }
    /// 40P01: the transaction was chosen as a deadlock victim and must be retried.
    public var isDeadlock: Bool { sqlState == "40P01" }
    /// The server did not answer in time (see `Kind.timeout`): retrying at once would wait again.
    public var isTimeout: Bool { kind == .timeout }
    /// The server is unreachable, does not answer, or the session ended (class 08, admin/crash shutdown, cannot
    /// connect now).
    public var isConnectionFailure: Bool {
        if kind == .connection || kind == .timeout { return true }
        guard let state = sqlState else { return false }
        return state.hasPrefix("08") || state == "57P01" || state == "57P02" || state == "57P03"
    }

    public var description: String {
        "PostgresError(\(kind)\(sqlState.map { ", sqlState: \($0)" } ?? "")): generic description to avoid leaking details; use String(reflecting:) for debugging"
    }

    public var debugDescription: String {
        var parts = ["kind: \(kind)"]
        if let sqlState { parts.append("sqlState: \(sqlState)") }
        parts.append("message: \(message)")
        if let detail { parts.append("detail: \(detail)") }
        if let hint { parts.append("hint: \(hint)") }
        if let constraint { parts.append("constraint: \(constraint)") }
        if let table { parts.append("table: \(table)") }
        if let column { parts.append("column: \(column)") }
        return "PostgresError(\(parts.joined(separator: ", ")))"
    }
}

extension PostgresError {
    /// Builds the error from a failed result; `connectionBroken` upgrades it to the connection kind.
    static func from(result: OpaquePointer?, connection: OpaquePointer?, connectionBroken: Bool) -> PostgresError {
        func field(_ code: Int32) -> String? {
            guard let result, let value = PQresultErrorField(result, code) else { return nil }
            return String(cString: value)
        }
        let fallback = connection.flatMap { PQerrorMessage($0) }.map { String(cString: $0) } ?? "unknown libpq error"
        let message = field(CLIBPQ_DIAG_MESSAGE_PRIMARY) ?? fallback.trimmingTrailingNewlines()
        return PostgresError(
            kind: connectionBroken ? .connection : .query,
            sqlState: field(CLIBPQ_DIAG_SQLSTATE),
            message: message,
            detail: field(CLIBPQ_DIAG_MESSAGE_DETAIL),
            hint: field(CLIBPQ_DIAG_MESSAGE_HINT),
            constraint: field(CLIBPQ_DIAG_CONSTRAINT_NAME),
            table: field(CLIBPQ_DIAG_TABLE_NAME),
            column: field(CLIBPQ_DIAG_COLUMN_NAME)
        )
    }

    /// A connection-level failure described by libpq's last error message.
    static func connection(_ connection: OpaquePointer?, context: String) -> PostgresError {
        let text = connection.flatMap { PQerrorMessage($0) }.map { String(cString: $0) } ?? ""
        let trimmed = text.trimmingTrailingNewlines()
        return PostgresError(kind: .connection, message: trimmed.isEmpty ? context : "\(context): \(trimmed)")
    }

    @usableFromInline static func decoding(_ message: String) -> PostgresError {
        PostgresError(kind: .protocol, message: message)
    }
}

extension String {
    func trimmingTrailingNewlines() -> String {
        var s = Substring(self)
        while let last = s.last, last == "\n" || last == "\r" || last == " " { s = s.dropLast() }
        return String(s)
    }
}
