import Glibc
import ParleyCore

/// Files Parley ships beside its sources rather than inside the binary (`openapi/`, `console/`), found at run time so a
/// release binary, a build tree and an installed copy all serve the same files without a build step.
///
/// Looked for in order: next to the executable, in a parent of the executable's directory that holds `Package.swift`
/// (a build tree), the source checkout the binary was built from, then the working directory. An override variable's
/// path, when set, is the only place looked at: a wrong override must show, not be hidden by another copy found
/// elsewhere (the checkout fallback would otherwise hide it on the machine that built the binary).
enum RepositoryFile {
    /// Where `relativePath` (e.g. `openapi/openapi.json`) may be; `overridePath` (from an environment variable) first.
    static func candidates(_ relativePath: String, overridePath: String?, filePath: String = #filePath) -> [String] {
        if let overridePath { return [overridePath] }
        var paths: [String] = []
        if let exe = executableDirectory() {
            paths.append(exe + "/" + relativePath)
            var dir = exe
            while dir.count > 1 {
                if access(dir + "/Package.swift", F_OK) == 0 { paths.append(dir + "/" + relativePath) }
                dir = String(dir[..<(dir.lastIndex(of: "/") ?? dir.startIndex)])
            }
        }
        // #filePath is Sources/Parley/Ops/RepositoryFile.swift in the checkout the binary was built from.
        let parts = filePath.split(separator: "/", omittingEmptySubsequences: false)
        if parts.count > 4 { paths.append(parts.dropLast(4).joined(separator: "/") + "/" + relativePath) }
        paths.append(relativePath)
        return paths
    }

    /// The first non-empty file among the candidates.
    static func read(_ relativePath: String, overridePath: String?) -> [UInt8]? {
        for path in candidates(relativePath, overridePath: overridePath) {
            if let text = DataDirectory.readFile(path), !text.isEmpty { return Array(text.utf8) }
        }
        return nil
    }

    /// An environment variable's value, nil when unset or empty.
    static func environment(_ name: String) -> String? {
        guard let value = getenv(name), value.pointee != 0 else { return nil }
        return String(cString: value)
    }

    private static func executableDirectory() -> String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard n > 0 else { return nil }
        let path = String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)])
    }
}
