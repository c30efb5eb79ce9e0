import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley

/// The spec in openapi/ describes exactly what the router serves, in both directions.
@Suite struct OpenAPIContractTests {
    static let specPath: String = {
        let parts = #filePath.split(separator: "/", omittingEmptySubsequences: false)
        return parts.dropLast(3).joined(separator: "/") + "/openapi/openapi.json"
    }()

    static func specOperations() throws -> Set<String> {
        let text = try #require(DataDirectory.readFile(specPath), "openapi/openapi.json is missing")
        let spec = try JSONValue.parse(Array(text.utf8))
        let paths = try #require(spec["paths"]?.objectValue)
        var operations = Set<String>()
        for (path, item) in paths {
            for method in ["get", "put", "post", "patch", "delete"] where item[method] != nil {
                operations.insert("\(method.uppercased()) \(path)")
            }
        }
        return operations
    }

    @Test func routerAndSpecAgree() throws {
        let server = try TestServer.start()
        defer { server.stop() }
        let served = Set(server.app.routeTable.map { "\($0.method) \($0.template)" })
        let specified = try Self.specOperations()
        #expect(served.subtracting(specified).sorted() == [], "served but not in openapi/openapi.json")
        #expect(specified.subtracting(served).sorted() == [], "in openapi/openapi.json but not served")
        // Every route carries its operationId, and it matches the spec's.
        #expect(server.app.routeTable.allSatisfy { $0.operationID != nil })
    }

    @Test func openAPIRouteServesTheFile() throws {
        let server = try TestServer.start()
        defer { server.stop() }
        let response = try server.request(.get, "/openapi.json")
        #expect(response.status == 200)
        #expect(response.text == DataDirectory.readFile(Self.specPath))
    }
}
