import CParleyShims
import Glibc
import ParleySync
import Synchronization

/// A leveled logger writing one logfmt line per entry to standard error.
///
/// Lines are appended to a shared buffer and written by a background flusher (every 100 ms, or at once past
/// 64 KiB), so a request log line costs a lock and a copy, not a system call.
public struct Logger: Sendable {
    public enum Level: Int, Sendable, Comparable, CaseIterable {
        case debug = 0
        case info, warning, error, off

        public static func < (a: Level, b: Level) -> Bool { a.rawValue < b.rawValue }

        /// Parses `debug`, `info`, `warn`/`warning`, `error`, `off`.
        public init?(name: String) {
            switch name.lowercased() {
            case "debug", "trace": self = .debug
            case "info": self = .info
            case "warn", "warning": self = .warning
            case "error": self = .error
            case "off", "none": self = .off
            default: return nil
            }
        }

        var label: String {
            switch self {
            case .debug: "debug"
            case .info: "info"
            case .warning: "warn"
            case .error: "error"
            case .off: "off"
            }
        }
    }

    public var level: Level
    public var label: String
    private let sink: LogSink

    public init(label: String, level: Level = .info, sink: LogSink = .standardError) {
        self.label = label
        self.level = level
        self.sink = sink
    }

    /// The same logger under another component label.
    public func named(_ label: String) -> Logger {
        var copy = self
        copy.label = label
        return copy
    }

    public func debug(_ message: @autoclosure () -> String) { log(.debug, message()) }
    public func info(_ message: @autoclosure () -> String) { log(.info, message()) }
    public func warning(_ message: @autoclosure () -> String) { log(.warning, message()) }
    public func error(_ message: @autoclosure () -> String) { log(.error, message()) }

    public func log(_ entryLevel: Level, _ message: @autoclosure () -> String) {
        guard entryLevel >= level, level != .off else { return }
        var line = Timestamp.iso8601(millis: Timestamp.wallMillis())
        line += " level=\(entryLevel.label) component=\(label) "
        line += message()
        line += "\n"
        sink.write(line)
    }

    /// The same line as `log(_:_:)`, with the message appended as bytes by `message` (under the sink's lock, so it
    /// must be quick): for lines written on every request, where building Strings cost more than the rest.
    func log(_ entryLevel: Level, bytes message: (inout [UInt8]) -> Void) {
        guard entryLevel >= level, level != .off else { return }
        let millis = Timestamp.wallMillis()
        let levelLabel = entryLevel.label
        let limit = Self.levelPrefix.count + levelLabel.utf8.count + Self.componentPrefix.count + label.utf8.count + 1
        sink.append(stampedAt: millis) { line in
            line.write(atMost: limit) { out in
                out.bytes(Self.levelPrefix)
                out.utf8(levelLabel)
                out.bytes(Self.componentPrefix)
                out.utf8(label)
                out.byte(UInt8(ascii: " "))
            }
            message(&line)
            line.append(UInt8(ascii: "\n"))
        }
    }

    private static let levelPrefix = Array(" level=".utf8)
    private static let componentPrefix = Array(" component=".utf8)

    /// Writes what is buffered now (before exit).
    public func flush() { sink.flush() }
}

/// Where log lines go: a buffered file descriptor.
public final class LogSink: Sendable {
    private let fd: Int32
    private struct Buffer {
        var bytes: [UInt8] = []
        /// `iso8601` of `second` up to the seconds' dot (`2026-11-30T15:40:00.`): the part of a line's timestamp
        /// shared by every line in that second.
        var second: Int64 = -1
        var secondPrefix: [UInt8] = []
    }

    private let buffer = LockedValue(Buffer())
    private let flusherStarted = Atomic<Bool>(false)

    public static let standardError = LogSink(fd: 2)

    public init(fd: Int32) { self.fd = fd }

    func write(_ line: String) {
        append { $0.appendUTF8(line) }
    }

    /// Lets `body` append to the buffer under its lock.
    func append(_ body: (inout [UInt8]) -> Void) {
        let size = buffer.withLock { b -> Int in
            body(&b.bytes)
            return b.bytes.count
        }
        if size > 64 * 1024 { flush() } else { startFlusherIfNeeded() }
    }

    /// Appends the ISO 8601 timestamp of `millis` (as `Timestamp.iso8601`), then lets `body` append the rest of the
    /// line, under the buffer's lock. The date and time up to the second are formatted once a second.
    func append(stampedAt millis: Int64, _ body: (inout [UInt8]) -> Void) {
        let size = buffer.withLock { b -> Int in
            let second = millis / 1000
            if second != b.second {
                b.second = second
                b.secondPrefix.removeAll(keepingCapacity: true)
                Timestamp.appendISO8601(millis: second * 1000, to: &b.secondPrefix)
                b.secondPrefix.removeLast(4)  // "000Z"
            }
            let prefix = b.secondPrefix
            b.bytes.write(atMost: prefix.count + 4) { out in
                out.bytes(prefix)
                out.padded(Int(millis % 1000), width: 3)
                out.byte(UInt8(ascii: "Z"))
            }
            body(&b.bytes)
            return b.bytes.count
        }
        if size > 64 * 1024 { flush() } else { startFlusherIfNeeded() }
    }

    public func flush() {
        let bytes = buffer.withLock { b -> [UInt8] in
            let out = b.bytes
            b.bytes.removeAll(keepingCapacity: true)
            return out
        }
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, bytes.count - offset) }
            if n <= 0 {
                if n < 0 && errno == EINTR { continue }
                return
            }
            offset += n
        }
    }

    private func startFlusherIfNeeded() {
        if flusherStarted.load(ordering: .relaxed) || flusherStarted.exchange(true, ordering: .acquiringAndReleasing) {
            return
        }
        let box = Unmanaged.passRetained(self)
        var tid = pthread_t()
        pthread_create(
            &tid, nil,
            { arg in
                let sink = Unmanaged<LogSink>.fromOpaque(arg!).takeRetainedValue()
                while true {
                    usleep(100_000)
                    sink.flush()
                }
            }, box.toOpaque())
        pthread_detach(tid)
    }
}

/// Wall-clock helpers that avoid Foundation's formatters on hot paths.
public enum Timestamp {
    /// Milliseconds since the Unix epoch from the system clock.
    public static func wallMillis() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }

    /// `2026-11-30T15:40:00.123Z`.
    public static func iso8601(millis: Int64) -> String {
        let (y, mo, d, h, mi, s) = civil(seconds: millis / 1000)
        let ms = Int(millis % 1000)
        return "\(y)-\(pad(mo))-\(pad(d))T\(pad(h)):\(pad(mi)):\(pad(s)).\(pad3(ms))Z"
    }

    /// Appends `iso8601(millis:)`'s text as bytes.
    static func appendISO8601(millis: Int64, to out: inout [UInt8]) {
        let (y, mo, d, h, mi, s) = civil(seconds: millis / 1000)
        out.appendDecimal(y)
        out.append(UInt8(ascii: "-"))
        out.appendPadded(mo, width: 2)
        out.append(UInt8(ascii: "-"))
        out.appendPadded(d, width: 2)
        out.append(UInt8(ascii: "T"))
        out.appendPadded(h, width: 2)
        out.append(UInt8(ascii: ":"))
        out.appendPadded(mi, width: 2)
        out.append(UInt8(ascii: ":"))
        out.appendPadded(s, width: 2)
        out.append(UInt8(ascii: "."))
        out.appendPadded(Int(millis % 1000), width: 3)
        out.append(UInt8(ascii: "Z"))
    }

    /// `Mon, 30 Nov 2026 15:40:00 GMT` (the HTTP `Date` header format).
    public static func httpDate(seconds: Int64) -> String {
        let (y, mo, d, h, mi, s) = civil(seconds: seconds)
        let weekdays = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        let days = seconds >= 0 ? seconds / 86400 : (seconds - 86399) / 86400
        let weekday = weekdays[Int(((days % 7) + 7) % 7)]
        return "\(weekday), \(pad(d)) \(months[mo - 1]) \(y) \(pad(h)):\(pad(mi)):\(pad(s)) GMT"
    }

    /// Converts seconds since the epoch to UTC calendar fields (Howard Hinnant's days-from-civil inverse).
    static func civil(seconds: Int64) -> (Int, Int, Int, Int, Int, Int) {
        let days = seconds >= 0 ? seconds / 86400 : (seconds - 86399) / 86400
        let secs = seconds - days * 86400
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        let y = yoe + era * 400 + (m <= 2 ? 1 : 0)
        return (Int(y), Int(m), Int(d), Int(secs / 3600), Int(secs % 3600 / 60), Int(secs % 60))
    }

    private static func pad(_ v: Int) -> String { v < 10 ? "0\(v)" : "\(v)" }
    private static func pad3(_ v: Int) -> String { v < 10 ? "00\(v)" : v < 100 ? "0\(v)" : "\(v)" }
}
