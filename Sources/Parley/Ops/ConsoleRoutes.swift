import Foundation
import ParleyAPI
import ParleyCore
import ParleyHTTP

/// The built-in admin console (`GET /console` and its assets): static files of the repository's `console/` directory
/// (`PARLEY_CONSOLE_DIR` overrides where), read once and served from memory. The page talks to the public API only,
/// so it needs no route of its own beyond these.
struct ConsoleRoutes {
    /// What the page cannot work without: a missing one is warned about at start.
    static let requiredAssets = ["index.html", "console.js", "console.css"]

    /// Content types by extension. Besides the required assets, every file of the console directory (the one the
    /// required `index.html` was found in) with a plain lowercase name (`[a-z0-9-]+`) and one of these extensions is
    /// served, so the page may be split into scripts without a server change; nothing else under `/console/` is, and a
    /// name can never reach another directory.
    static let contentTypes: [String: String] = [
        "html": "text/html; charset=utf-8",
        "js": "text/javascript; charset=utf-8",
        "css": "text/css; charset=utf-8",
        "svg": "image/svg+xml",
    ]

    /// The content type of an asset name, nil for a name that is never served.
    static func contentType(of name: String) -> String? {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return nil }
        let stem = name[..<dot]
        guard stem.allSatisfy({ ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "-" }) else { return nil }
        return contentTypes[String(name[name.index(after: dot)...])]
    }

    /// Same-origin everything: no inline script or style, no framing, nothing fetched from elsewhere.
    static let securityHeaders: [HTTPHeaders.Field] = [
        ("Cache-Control", "no-store"),
        (
            "Content-Security-Policy",
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
                + "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        ),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        ("X-Frame-Options", "DENY"),
    ]

    /// Where the operator put the console's files, if anywhere (then only there is looked at: RepositoryFile).
    static let overrideDirectory = RepositoryFile.environment("PARLEY_CONSOLE_DIR")

    static let assets: [String: [UInt8]] = load(overrideDirectory: overrideDirectory)

    /// The assets found, by name; a missing one is absent.
    static func load(overrideDirectory: String?) -> [String: [UInt8]] {
        var found: [String: [UInt8]] = [:]
        for name in requiredAssets {
            if let bytes = RepositoryFile.read("console/" + name, overridePath: overrideDirectory.map { $0 + "/" + name }) {
                found[name] = bytes
            }
        }
        // The other scripts and styles come from the directory the page itself came from, never a mix of two copies.
        let index = RepositoryFile.candidates("console/index.html", overridePath: overrideDirectory.map { $0 + "/index.html" })
            .first { DataDirectory.readFile($0).map { !$0.isEmpty } ?? false }
        guard let index else { return found }
        let directory = String(index.dropLast("/index.html".count))
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.isEmpty ? "." : directory)) ?? []
        for name in names where found[name] == nil && contentType(of: name) != nil {
            if let text = DataDirectory.readFile(directory + "/" + name), !text.isEmpty { found[name] = Array(text.utf8) }
        }
        return found
    }

    /// The warning the server logs at start when an asset is missing (an image or install without `console/`), nil
    /// when all are there: otherwise the only sign would be a 404 at `/console`, long after the deployment.
    static func missingAssetsWarning(assets: [String: [UInt8]], overrideDirectory: String?) -> String? {
        let missing = requiredAssets.filter { assets[$0] == nil }.sorted()
        guard !missing.isEmpty else { return nil }
        let lookedIn = RepositoryFile.candidates("console/index.html", overridePath: overrideDirectory.map { $0 + "/index.html" })
            .map { $0.hasSuffix("/index.html") ? String($0.dropLast("/index.html".count)) : "." }
        return "msg=\"console assets missing: /console answers 404 until they are installed\" missing=\(missing.joined(separator: ","))"
            + " looked_in=\(lookedIn.joined(separator: ","))"
            + " fix=\"copy the repository's console/ directory next to the parley executable, or set PARLEY_CONSOLE_DIR\""
    }

    static func register(on builder: inout RouterBuilder) {
        builder.add(.get, "/console", options: RouteOptions(runsOnEventLoop: true, operationID: "getConsole")) { request in
            serve("index.html", request)
        }
        builder.add(.get, "/console/{asset}", options: RouteOptions(runsOnEventLoop: true, operationID: "getConsoleAsset")) {
            request in
            serve(request.pathParameters["asset"] ?? "", request)
        }
    }

    private static func serve(_ name: String, _ request: Request) -> Response {
        response(for: name, assets: assets, requestID: request.requestID)
    }

    /// The asset, or a problem saying whether the name is not an asset or the server was installed without it.
    static func response(for name: String, assets: [String: [UInt8]], requestID: String) -> Response {
        guard let contentType = contentType(of: name), assets[name] != nil || requiredAssets.contains(name) else {
            return ProblemRendering.response(APIError(.notFound, "no console asset \(name)"), requestID: requestID)
        }
        guard let body = assets[name] else {
            let detail =
                "the console's \(name) was not installed with this server: copy the repository's console/ directory next to"
                + " the parley executable or set PARLEY_CONSOLE_DIR (the start-up log names where it looked)"
            return ProblemRendering.response(APIError(.notFound, detail), requestID: requestID)
        }
        return Response(status: 200, headers: HTTPHeaders([(name: "Content-Type", value: contentType)] + securityHeaders), body: body)
    }
}
