import Foundation
import Glibc

/// A `parley serve` process of the built executable, for tests that kill a server as a crash or an operator does
/// (`kill -9`), which a server inside the test process cannot undergo.
///
/// It runs its own embedded cluster in `dataDirectory`, listens on 127.0.0.1 on a free port and logs to
/// `<dataDirectory>/parley.log`. Owner: the test that started it; `kill` and `waitForExit` by its pid only.
public final class ParleyProcess: @unchecked Sendable {
    // @unchecked: `process` is only used by the owning test's thread.
    private let process: Process
    public let pid: pid_t
    public let port: Int
    public let logFile: String

    private init(process: Process, port: Int, logFile: String) {
        self.process = process
        self.pid = process.processIdentifier
        self.port = port
        self.logFile = logFile
    }

    /// The `parley` executable beside the test runner (`swift build` puts both in the same directory), if built.
    public static var executablePath: String? {
        guard let runner = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") else { return nil }
        var directory = (runner as NSString).deletingLastPathComponent
        for _ in 0..<3 {
            let candidate = directory + "/parley"
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: candidate, isDirectory: &isDirectory), !isDirectory.boolValue,
                FileManager.default.isExecutableFile(atPath: candidate)
            {
                return candidate
            }
            directory = (directory as NSString).deletingLastPathComponent
        }
        return nil
    }

    /// util-linux's `prlimit`, which runs a command under the limits given (it sets them and execs: same pid).
    public static let prlimitPath = "/usr/bin/prlimit"

    /// Starts `parley serve` and waits (≤ 60 s) until it logs that it is ready; throws with its log if it exits first.
    /// `openFiles`: its hard and soft RLIMIT_NOFILE (through ``prlimitPath``).
    public static func start(executable: String, dataDirectory: String, adminKey: String, openFiles: Int? = nil) throws -> ParleyProcess {
        let logFile = dataDirectory + "/parley.log"
        _ = FileManager.default.createFile(atPath: logFile, contents: nil)
        let offset = (try? FileManager.default.attributesOfItem(atPath: logFile)[.size] as? UInt64) ?? 0
        guard let log = FileHandle(forWritingAtPath: logFile) else { throw TestFailure("cannot open \(logFile)") }
        defer { try? log.close() }
        try log.seekToEnd()
        let process = Process()
        if let openFiles {
            process.executableURL = URL(fileURLWithPath: prlimitPath)
            process.arguments = ["--nofile=\(openFiles):\(openFiles)", "--", executable, "serve"]
        } else {
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = ["serve"]
        }
        // Only what it needs: nothing of the test's environment (a DATABASE_URL) leaks in.
        process.environment = [
            "PATH": "/usr/local/bin:/usr/bin:/bin", "PARLEY_DATA_DIR": dataDirectory, "PARLEY_LISTEN": "127.0.0.1:0",
            "PARLEY_ADMIN_KEY": adminKey, "PARLEY_LOG_LEVEL": "info", "PARLEY_DB_POOL_SIZE": "4",
        ]
        process.standardOutput = log
        process.standardError = log
        process.standardInput = FileHandle.nullDevice
        try process.run()
        var port: Int?
        try eventually(timeout: .seconds(60), every: .milliseconds(20)) {
            let text = Self.text(of: logFile, from: offset)
            if let range = text.range(of: "msg=ready listen=127.0.0.1:") {
                port = Int(text[range.upperBound...].prefix { $0.isNumber })
                if port != nil { return true }
            }
            if !process.isRunning { throw TestFailure("parley exited before it was ready:\n\(text.suffix(3000))") }
            return false
        }
        if let port { return ParleyProcess(process: process, port: port, logFile: logFile) }
        Glibc.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        throw TestFailure("parley was not ready within 60 s:\n\(Self.text(of: logFile, from: offset).suffix(3000))")
    }

    /// Sends `signal` to the process.
    public func kill(_ signal: Int32) { _ = Glibc.kill(pid, signal) }

    /// Waits for the process to exit and reaps it.
    public func waitForExit() { process.waitUntilExit() }

    /// Spins (≤ `seconds`) until the process has died (a zombie, or reaped): the moment its children are orphaned, with
    /// none of `waitForExit`'s latency. True when it died in time.
    public func waitUntilDead(seconds: Double = 5) -> Bool {
        eventually(timeout: .milliseconds(Int(seconds * 1000)), every: .microseconds(100)) {
            guard let fields = processStatFields(of: pid) else { return true }
            return fields.first == "Z"
        }
    }

    /// The log from `offset` on.
    static func text(of path: String, from offset: UInt64) -> String {
        guard let handle = FileHandle(forReadingAtPath: path) else { return "" }
        defer { try? handle.close() }
        try? handle.seek(toOffset: offset)
        return String(decoding: (try? handle.readToEnd()) ?? Data(), as: UTF8.self)
    }
}
