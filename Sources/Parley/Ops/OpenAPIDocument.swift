import Glibc
import ParleyAPI
import ParleyCore
import ParleyDomains
import ParleyLive

/// The OpenAPI document served at `/openapi.json`, read once from `openapi/openapi.json`.
///
/// Found like the migrations: `PARLEY_OPENAPI_PATH`, next to the executable (`openapi/openapi.json`), in a
/// parent of the executable's directory that holds `Package.swift` (a build tree), the source checkout the
/// binary was built from, then `./openapi/openapi.json`.
enum OpenAPIDocument {
    static let bytes: [UInt8]? = {
        for path in candidates() {
            if let text = DataDirectory.readFile(path), !text.isEmpty { return Array(text.utf8) }
        }
        return nil
    }()

    static func candidates(filePath: String = #filePath) -> [String] {
        var paths: [String] = []
        if let env = getenv("PARLEY_OPENAPI_PATH") { paths.append(String(cString: env)) }
        if let exe = executableDirectory() {
            paths.append(exe + "/openapi/openapi.json")
            var dir = exe
            while dir.count > 1 {
                if access(dir + "/Package.swift", F_OK) == 0 { paths.append(dir + "/openapi/openapi.json") }
                dir = String(dir[..<(dir.lastIndex(of: "/") ?? dir.startIndex)])
            }
        }
        // #filePath is Sources/Parley/Ops/OpenAPIDocument.swift in the checkout the binary was built from.
        let parts = filePath.split(separator: "/", omittingEmptySubsequences: false)
        if parts.count > 4 { paths.append(parts.dropLast(4).joined(separator: "/") + "/openapi/openapi.json") }
        paths.append("openapi/openapi.json")
        return paths
    }

    private static func executableDirectory() -> String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard n > 0 else { return nil }
        let path = String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)])
    }
}
