internal import CParleyShims
import Glibc

/// Starts child processes from one dedicated thread that lives as long as the process.
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, not the process; spawning every
/// child from this never-exiting thread makes the parent-death signal mean "Parley died". Its only state
/// is the request queue.
final class ProcessSpawner: Sendable {
    struct Request: Sendable {
        let path: String
        let arguments: [String]
        let environment: [String]
        let uid: Int32
        let gid: Int32
        let parentDeathSignal: Int32
        let outputFD: Int32
        let workingDirectory: String?
        let reply: WaitQueue<Result>
    }

    enum Result: Sendable {
        case started(pid_t)
        case failed(errno: Int32)
    }

    static let shared = ProcessSpawner()

    private let requests = WaitQueue<Request>()

    private init() {
        let requests = self.requests
        // Never joined: the thread must outlive every child it starts.
        _ = PostgresThread.start(name: "pg-spawner") {
            while let request = requests.pop() { request.reply.push(Self.perform(request)) }
        }
    }

    /// Starts `path` with `arguments` (argv[0] included) as `uid`/`gid` (-1 keeps ours), stdout and stderr
    /// to `outputFD`, and `parentDeathSignal` sent to it if this process dies.
    func spawn(
        path: String, arguments: [String], environment: [String], uid: Int32 = -1, gid: Int32 = -1,
        parentDeathSignal: Int32, outputFD: Int32, workingDirectory: String? = nil
    ) -> Result {
        let reply = WaitQueue<Result>()
        requests.push(
            Request(
                path: path, arguments: arguments, environment: environment, uid: uid, gid: gid,
                parentDeathSignal: parentDeathSignal, outputFD: outputFD, workingDirectory: workingDirectory,
                reply: reply))
        return reply.pop()!
    }

    private static func perform(_ request: Request) -> Result {
        // Everything the child needs is allocated before fork: the child only calls async-signal-safe code.
        var argv: [UnsafeMutablePointer<CChar>?] = request.arguments.map { strdup($0) } + [nil]
        var envp: [UnsafeMutablePointer<CChar>?] = request.environment.map { strdup($0) } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        let pid = argv.withUnsafeMutableBufferPointer { argvBuffer in
            envp.withUnsafeMutableBufferPointer { envpBuffer in
                parley_spawn(
                    request.path, argvBuffer.baseAddress, envpBuffer.baseAddress, request.uid, request.gid,
                    request.parentDeathSignal, request.outputFD, request.outputFD, request.workingDirectory)
            }
        }
        return pid > 0 ? .started(pid) : .failed(errno: errno)
    }
}
