/// Where the PostgreSQL layer sends its log lines; the application adapts it to its own logger.
///
/// Immutable and `Sendable`: the closure is called from worker, listener and spawner threads.
public struct PostgresLogger: Sendable {
    /// How important a log line is.
    public enum Level: Int, Sendable, Comparable, CustomStringConvertible {
        case debug, info, notice, warning, error

        public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rawValue < rhs.rawValue }

        public var description: String {
            switch self {
            case .debug: "debug"
            case .info: "info"
            case .notice: "notice"
            case .warning: "warning"
            case .error: "error"
            }
        }
    }

    private let sink: @Sendable (Level, String) -> Void

    /// A logger that hands every line to `sink`.
    public init(_ sink: @escaping @Sendable (Level, String) -> Void) {
        self.sink = sink
    }

    /// Logs one line; the message must never contain secrets or bound values.
    public func log(_ level: Level, _ message: @autoclosure () -> String) {
        sink(level, message())
    }

    /// Discards everything (tests, tools).
    public static let disabled = PostgresLogger { _, _ in }
}
