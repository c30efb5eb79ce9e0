import Foundation
import Glibc
import ParleySync

/// Freezes a PostgreSQL cluster as an operator's `kill -STOP` would: SIGSTOP to its postmaster and every process it
/// forked, so the server accepts connections into its socket's queue but answers nothing. For stall tests, on a
/// cluster private to the test (never the shared test cluster).
///
/// Thawing (SIGCONT) is guaranteed three ways: call `thaw()` in a `defer` right after `freeze()`; a watchdog thread
/// thaws after `maxFreeze` whatever the test does (so a test of code that would hang fails instead of hanging); and the
/// test process thaws every cluster still frozen when it exits. Owner: `frozen` behind its lock.
public final class ClusterFreezer: Sendable {
    private let postmaster: pid_t
    private let maxFreeze: Duration
    /// The processes now stopped, and which freeze stopped them (a watchdog thaws only its own).
    private let frozen = LockedValue<(generation: Int, pids: [pid_t])>((0, []))
    private let wakeup = Wakeup()

    /// Every process frozen by any freezer, for the exit handler.
    private static let allFrozen = LockedValue<Set<pid_t>>([])
    private static let exitHandler: Void = { atexit { ClusterFreezer.thawAllAtExit() } }()

    /// Freezes the cluster of `postmaster`: the postmaster and its children.
    public init(postmaster: pid_t, maxFreeze: Duration = .seconds(20)) {
        self.postmaster = postmaster
        self.maxFreeze = maxFreeze
        _ = Self.exitHandler
    }

    /// The processes now stopped (empty: none was alive, or thawed).
    public var frozenProcesses: [pid_t] { frozen.withLock { $0.pids } }

    /// How many processes are now stopped.
    public var frozenCount: Int { frozenProcesses.count }

    /// Stops the postmaster first (so it forks no new process), then each of its children.
    public func freeze() {
        var stopped: [pid_t] = []
        if kill(postmaster, SIGSTOP) == 0 { stopped.append(postmaster) }
        for child in Self.children(of: postmaster) where kill(child, SIGSTOP) == 0 { stopped.append(child) }
        let generation = frozen.withLock { state -> Int in
            state.generation += 1
            state.pids += stopped
            return state.generation
        }
        Self.allFrozen.withLock { $0.formUnion(stopped) }
        let limit = Int(maxFreeze.components.seconds * 1000 + maxFreeze.components.attoseconds / 1_000_000_000_000_000)
        // Detached: it ends on `thaw()`'s signal or at the limit, whichever comes first.
        pthread_detach(
            BackgroundThread.start(name: "test-thaw") { [self] in
                let deadline = Date().addingTimeInterval(Double(limit) / 1000)
                while Date() < deadline, frozen.withLock({ $0.generation == generation && !$0.pids.isEmpty }) {
                    wakeup.wait(timeoutMillis: max(1, Int(deadline.timeIntervalSinceNow * 1000)))
                }
                thaw(generation: generation)
            })
    }

    /// Sends SIGCONT to everything `freeze` stopped; idempotent.
    public func thaw() { thaw(generation: nil) }

    /// Thaws the current freeze, or only the freeze `generation` (a watchdog's).
    private func thaw(generation: Int?) {
        let stopped = frozen.withLock { state -> [pid_t] in
            guard generation == nil || generation == state.generation else { return [] }
            defer { state.pids = [] }
            return state.pids
        }
        for pid in stopped { kill(pid, SIGCONT) }
        Self.allFrozen.withLock { $0.subtract(stopped) }
        wakeup.signal()
    }

    /// The processes whose parent is `parent` (from /proc/<pid>/stat; the name in parentheses may hold spaces).
    public static func children(of parent: pid_t) -> [pid_t] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { name -> pid_t? in
            guard let pid = pid_t(name), let fields = processStatFields(of: pid), fields.count > 1, pid_t(fields[1]) == parent else {
                return nil
            }
            return pid
        }
    }

    private static func thawAllAtExit() {
        for pid in allFrozen.withLock({ $0 }) { kill(pid, SIGCONT) }
    }
}
