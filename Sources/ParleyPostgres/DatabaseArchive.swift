import Foundation
import Glibc

/// `pg_dump -Fc` archives of a Parley database, and their restore (docs/backup.md).
///
/// A custom-format `pg_dump` is one consistent snapshot (one repeatable-read transaction) taken while the server
/// runs, restorable into a newer PostgreSQL major version, and the same tool serves the embedded cluster and an
/// external server. The archive is written to a temporary file beside the target, synced, checked with
/// `pg_restore --list`, and only then renamed into place: a failed or interrupted backup leaves no file behind,
/// never a 0-byte or truncated one.
public enum DatabaseArchive {
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
        public init(description: String) { self.description = description }
    }

    /// Where `pg_dump` and `pg_restore` connect: an external server's URL, or the embedded cluster's socket.
    public enum Target: Sendable {
        case url(String)
        case configuration(PostgresConfiguration)

        var connectArguments: [String] {
            switch self {
            case .url(let url): return ["--dbname=" + url]
            case .configuration(let configuration):
                // Only the keywords the embedded cluster's configuration sets (its socket, superuser and database).
                return [
                    "--host=" + (configuration.host ?? ""), "--port=\(configuration.port ?? EmbeddedPostgres.port)",
                    "--username=" + (configuration.user ?? EmbeddedPostgres.superuser), "--dbname=" + (configuration.database ?? "postgres"),
                ]
            }
        }
    }

    /// Writes an archive of `target` to `file`; returns its size in bytes.
    public static func backup(_ target: Target, to file: String) throws(Failure) -> UInt64 {
        let binaries = try tools()
        let absolute = (file.hasPrefix("/") ? file : FileManager.default.currentDirectoryPath + "/" + file)
        let directory = (absolute as NSString).deletingLastPathComponent
        let temporary = directory + "/." + (absolute as NSString).lastPathComponent + ".partial-\(getpid())"
        unlink(temporary)
        // Mode 0600 from the start: the archive holds every app's secrets (pg_dump keeps the mode of a file it reuses).
        let created = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard created >= 0 else { throw Failure(description: "cannot create \(temporary): \(String(cString: strerror(errno)))") }
        close(created)
        do throws(Failure) {
            try run(binaries + "/pg_dump", ["--format=custom", "--file=" + temporary] + target.connectArguments)
            try syncFile(temporary)
            // An archive pg_restore cannot read is no backup: find out now, not on the day it is needed.
            try run(binaries + "/pg_restore", ["--list", temporary])
            guard rename(temporary, absolute) == 0 else {
                throw Failure(description: "cannot rename \(temporary) to \(absolute): \(String(cString: strerror(errno)))")
            }
            try syncFile(directory)
        } catch {
            unlink(temporary)
            throw error
        }
        var info = stat()
        return stat(absolute, &info) == 0 ? UInt64(info.st_size) : 0
    }

    /// Checks that `file` is an archive `pg_restore` reads (before anything is created for the restore).
    public static func check(_ file: String) throws(Failure) {
        guard access(file, R_OK) == 0 else { throw Failure(description: "cannot read \(file): \(String(cString: strerror(errno)))") }
        try run(try tools() + "/pg_restore", ["--list", file])
    }

    /// Restores `file` into `target`, which must hold no table yet (checked here): in one transaction, so a failed
    /// restore leaves the database empty again. Owners and grants are not restored: the restoring role owns
    /// everything, whatever role the source used.
    public static func restore(_ file: String, into target: Target) throws(Failure) {
        let existing: [String]
        do {
            let configuration: PostgresConfiguration
            switch target {
            case .url(let url): configuration = try PostgresConfiguration(url)
            case .configuration(let given): configuration = given
            }
            let result = try PostgresConnection(configuration).query(
                sql: """
                    SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                    WHERE c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
                      AND n.nspname NOT LIKE 'pg\\_toast%'
                    ORDER BY 1 LIMIT 3
                    """
            )
            existing = try result.map { row throws(PostgresError) in try row[0].string }
        } catch {
            throw Failure(description: "cannot connect to the target database: \(error.message)")
        }
        guard existing.isEmpty else {
            throw Failure(
                description:
                    "the target database is not empty (it holds \(existing.joined(separator: ", ")), …): restore into a fresh data directory or an empty database"
            )
        }
        try run(
            try tools() + "/pg_restore",
            ["--exit-on-error", "--single-transaction", "--no-owner", "--no-privileges"] + target.connectArguments + [file])
    }

    /// The directory of the PostgreSQL client tools: the embedded cluster's binaries (same version as its server).
    static func tools() throws(Failure) -> String {
        do {
            return try EmbeddedPostgres.findBinaries()
        } catch {
            throw Failure(description: error.message)
        }
    }

    /// Runs a tool to completion; fails with its standard error when it exits non-zero.
    static func run(_ path: String, _ arguments: [String]) throws(Failure) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        var environment = ProcessInfo.processInfo.environment
        environment["LC_ALL"] = "C"
        process.environment = environment
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        do {
            try process.run()
        } catch {
            throw Failure(description: "cannot run \(path): \(error)")
        }
        let output = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            let text = String(decoding: output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            throw Failure(
                description: "\((path as NSString).lastPathComponent) failed (exit \(process.terminationStatus)): \(text.suffix(2000))")
        }
    }

    private static func syncFile(_ path: String) throws(Failure) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0, fsync(fd) == 0 || errno == EINVAL else {
            let reason = String(cString: strerror(errno))
            if fd >= 0 { close(fd) }
            throw Failure(description: "cannot sync \(path): \(reason)")
        }
        close(fd)
    }
}
