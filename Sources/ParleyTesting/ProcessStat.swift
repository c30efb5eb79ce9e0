import Foundation

/// The fields of `/proc/<pid>/stat` after the process name (the name, in parentheses, may hold spaces and
/// parentheses, so the fields start after the last `)`): index 0 is the state, 1 the parent's pid, 11 and 12 the user
/// and system CPU in clock ticks (fields 3, 4, 14 and 15 of proc(5)). Nil when the process is gone.
public func processStatFields(of pid: pid_t) -> [Substring]? {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = stat.lastIndex(of: ")") else {
        return nil
    }
    return stat[stat.index(after: close)...].split(separator: " ")
}
