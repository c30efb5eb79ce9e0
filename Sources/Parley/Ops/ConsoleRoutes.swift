import ParleyAPI
import ParleyCore
import ParleyHTTP

/// The built-in admin console (`GET /console` and its assets): static files of the repository's `console/` directory
/// (`PARLEY_CONSOLE_DIR` overrides where), read once and served from memory. The page talks to the public API only,
/// so it needs no route of its own beyond these.
struct ConsoleRoutes {
    /// What the page loads; nothing else under `/console/` is served, so no request can name another file.
    static let assetTypes: [String: String] = [
        "index.html": "text/html; charset=utf-8",
        "console.js": "text/javascript; charset=utf-8",
        "console.css": "text/css; charset=utf-8",
    ]

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

    static let assets: [String: [UInt8]] = {
        let directory = RepositoryFile.environment("PARLEY_CONSOLE_DIR")
        var found: [String: [UInt8]] = [:]
        for name in assetTypes.keys {
            if let bytes = RepositoryFile.read("console/" + name, overridePath: directory.map { $0 + "/" + name }) {
                found[name] = bytes
            }
        }
        return found
    }()

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
        guard let contentType = assetTypes[name], let body = assets[name] else {
            return ProblemRendering.response(APIError(.notFound, "no console asset \(name)"), requestID: request.requestID)
        }
        return Response(status: 200, headers: HTTPHeaders([(name: "Content-Type", value: contentType)] + securityHeaders), body: body)
    }
}
