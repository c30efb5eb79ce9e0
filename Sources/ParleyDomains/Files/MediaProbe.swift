import Foundation

/// What FFmpeg reads from an uploaded video or audio file (docs/files.md#video-and-audio): its duration and, for a
/// video, its first frame.
///
/// FFmpeg runs as a child process, not linked in: a decoder bug in a hostile file then costs one child, not the
/// server. Each run is bounded — killed after ``timeoutSeconds`` (`timeout -s KILL`) and limited to ``addressSpaceBytes``
/// of address space (`prlimit --as`) — and reads a private temporary copy of the upload. A file FFmpeg cannot read
/// is still stored, with no duration and no first frame.
enum MediaProbe {
    static let timeoutSeconds = 20
    static let addressSpaceBytes = 1 << 30

    struct Result: Sendable {
        var durationMillis: Int64?
        /// The first frame as PNG (lossless: the image derivation re-encodes it, without metadata).
        var firstFrame: [UInt8]?
    }

    static func probe(path: String, video: Bool) -> Result {
        var result = Result()
        if let output = run("ffprobe", ["-v", "error", "-show_entries", "format=duration", "-of", "default=nw=1:nk=1", path]),
            let seconds = Double(String(decoding: output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)),
            seconds.isFinite, seconds >= 0
        {
            result.durationMillis = Int64((seconds * 1000).rounded())
        }
        if video {
            let frame = path + ".frame.png"
            defer { unlink(frame) }
            if run("ffmpeg", ["-v", "error", "-nostdin", "-i", path, "-frames:v", "1", "-f", "image2", "-c:v", "png", "-y", frame]) != nil {
                result.firstFrame = FileManager.default.contents(atPath: frame).map { Array($0) }
            }
        }
        return result
    }

    /// Runs `tool` under the time and memory bounds; its standard output, or nil when it failed, was killed or is not
    /// installed.
    private static func run(_ tool: String, _ arguments: [String]) -> [UInt8]? {
        guard let toolPath = ["/usr/bin/\(tool)", "/usr/local/bin/\(tool)"].first(where: { FileManager.default.isExecutableFile(atPath: $0) })
        else { return nil }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/timeout")
        process.arguments = ["-s", "KILL", String(timeoutSeconds), "/usr/bin/prlimit", "--as=\(addressSpaceBytes)", "--", toolPath] + arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        do { try process.run() } catch { return nil }
        let bytes = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return process.terminationStatus == 0 ? Array(bytes) : nil
    }

    /// A private temporary file for an upload's bytes (mode 0600, created exclusively): its path and descriptor.
    static func temporaryFile() throws -> (path: String, fd: Int32) {
        let path = NSTemporaryDirectory() + "parley-media-" + UUID().uuidString
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        return (path, fd)
    }

    /// Closes and removes a temporary file of ``temporaryFile()``.
    static func discard(_ file: (path: String, fd: Int32)) {
        close(file.fd)
        unlink(file.path)
    }

    /// Appends `bytes` to `fd`, all of them.
    static func write(_ bytes: [UInt8], to fd: Int32) throws {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 {
                if errno == EINTR { continue }
                throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
            }
            offset += n
        }
    }
}
