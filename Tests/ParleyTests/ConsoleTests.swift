import Foundation
import ParleyCore
import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley

/// The built-in admin console (`GET /console`): the page and its assets come from the repository's `console/`
/// directory, with headers that keep the page to its own origin.
@Suite("Admin console")
struct ConsoleTests {
    /// `<repo>/console/<name>`, found from this file's location (`<repo>/Tests/ParleyTests/…`).
    static func repositoryFile(_ name: String, filePath: String = #filePath) -> String {
        let parts = filePath.split(separator: "/", omittingEmptySubsequences: false)
        return parts.dropLast(3).joined(separator: "/") + "/console/" + name
    }

    static func expectSecurityHeaders(_ response: TestResponse) {
        #expect(response.headers["Cache-Control"] == "no-store")
        #expect(response.headers["X-Content-Type-Options"] == "nosniff")
        let policy = response.headers["Content-Security-Policy"] ?? ""
        #expect(policy.hasPrefix("default-src 'self'"), "\(policy)")
        // Same origin only: no host, scheme or inline source anywhere in the policy.
        #expect(!policy.contains("http"), "\(policy)")
        #expect(!policy.contains("unsafe-inline"), "\(policy)")
    }

    @Test func thePageIsServedWithItsSecurityHeaders() throws {
        try withTestServer { server in
            let response = try server.request(.get, "/console")
            #expect(response.status == 200)
            #expect(response.headers["Content-Type"] == "text/html; charset=utf-8")
            Self.expectSecurityHeaders(response)
            #expect(response.text == DataDirectory.readFile(Self.repositoryFile("index.html")))
            // Every asset the page references is on this server.
            #expect(response.text.contains("src=\"/console/console.js\""))
            #expect(response.text.contains("href=\"/console/console.css\""))
            #expect(!response.text.contains("//"), "the page loads nothing from another origin")
        }
    }

    @Test(arguments: [
        ("console.js", "text/javascript; charset=utf-8"), ("console.css", "text/css; charset=utf-8"),
        ("index.html", "text/html; charset=utf-8"),
    ])
    func assetsAreServed(name: String, contentType: String) throws {
        try withTestServer { server in
            let response = try server.request(.get, "/console/" + name)
            #expect(response.status == 200)
            #expect(response.headers["Content-Type"] == contentType)
            Self.expectSecurityHeaders(response)
            #expect(response.text == DataDirectory.readFile(Self.repositoryFile(name)))
        }
    }

    @Test func otherNamesAreNotFound() throws {
        try withTestServer { server in
            for name in ["missing.js", "..%2FPackage.swift", "Package.swift"] {
                let response = try server.request(.get, "/console/" + name)
                #expect(response.status == 404, "\(name)")
                #expect(response.headers["Content-Type"]?.hasPrefix("application/problem+json") == true, "\(name)")
            }
        }
    }

    /// An image or install without `console/` says so at start and at `/console`, not with a bare 404; an override
    /// directory is the only place looked at, so this checkout's own files do not hide the missing ones.
    @Test func missingAssetsAreNamedInAWarningAndInTheProblem() throws {
        let nowhere = "/nonexistent/parley-console"
        let assets = ConsoleRoutes.load(overrideDirectory: nowhere)
        #expect(assets.isEmpty)
        let warning = try #require(ConsoleRoutes.missingAssetsWarning(assets: assets, overrideDirectory: nowhere))
        #expect(warning.contains("missing=console.css,console.js,index.html"), "\(warning)")
        #expect(warning.contains("looked_in=\(nowhere) "), "\(warning)")
        #expect(warning.contains("PARLEY_CONSOLE_DIR"), "\(warning)")

        let response = ConsoleRoutes.response(for: "index.html", assets: assets, requestID: "r1")
        #expect(response.status == 404)
        guard case .bytes(let body) = response.body else {
            Issue.record("the problem is not a byte body")
            return
        }
        let detail = try JSONValue.parse(body)["detail"]?.stringValue ?? ""
        #expect(detail.contains("not installed with this server"), "\(detail)")
    }

    @Test func noWarningWhenEveryAssetIsThere() {
        let directory = String(Self.repositoryFile("index.html").dropLast("/index.html".count))
        let assets = ConsoleRoutes.load(overrideDirectory: directory)
        #expect(ConsoleRoutes.requiredAssets.allSatisfy { assets[$0] != nil })
        #expect(ConsoleRoutes.missingAssetsWarning(assets: assets, overrideDirectory: directory) == nil)
    }

    /// The page may be split into more scripts: every plainly named script or style beside index.html is served, and
    /// nothing else (other extensions, hidden files, names with capitals or dots).
    @Test func scriptsBesideThePageAreServedAndNothingElse() throws {
        let directory = "/tmp/parley-console-assets-\(getpid())"
        mkdir(directory, 0o700)
        defer {
            for name in ["index.html", "console.js", "console.css", "charts-2.js", "Notes.js", "secret.txt", ".hidden.js"] {
                unlink(directory + "/" + name)
            }
            rmdir(directory)
        }
        for name in ["index.html", "console.js", "console.css", "charts-2.js", "Notes.js", "secret.txt", ".hidden.js"] {
            FileManager.default.createFile(atPath: directory + "/" + name, contents: Data("// \(name)\n".utf8))
        }
        let assets = ConsoleRoutes.load(overrideDirectory: directory)
        #expect(assets.keys.sorted() == ["charts-2.js", "console.css", "console.js", "index.html"])
        let served = ConsoleRoutes.response(for: "charts-2.js", assets: assets, requestID: "r1")
        #expect(served.status == 200)
        #expect(served.headers["Content-Type"] == "text/javascript; charset=utf-8")
        for name in ["Notes.js", "secret.txt", ".hidden.js", "missing.js"] {
            #expect(ConsoleRoutes.response(for: name, assets: assets, requestID: "r1").status == 404, "\(name)")
        }
    }
}
