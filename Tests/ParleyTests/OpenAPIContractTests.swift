import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// The router and `openapi/openapi.json` serve and describe the same operations: the set of (method, path template)
/// pairs is the same both ways, and each pair carries the same `operationId` in the router as in the document.
/// This suite compares routes only; the bodies of real responses are checked against the document's schemas in
/// `OpenAPIResponseSchemaTests`.
@Suite struct OpenAPIContractTests {
    static let specPath: String = {
        let parts = #filePath.split(separator: "/", omittingEmptySubsequences: false)
        return parts.dropLast(3).joined(separator: "/") + "/openapi/openapi.json"
    }()

    /// "METHOD /path/template" → the document's `operationId` ("" when the operation has none).
    static func specOperations() throws -> [String: String] {
        let text = try #require(DataDirectory.readFile(specPath), "openapi/openapi.json is missing")
        let spec = try JSONValue.parse(Array(text.utf8), maxDepth: 256)
        let paths = try #require(spec["paths"]?.objectValue)
        var operations: [String: String] = [:]
        for (path, item) in paths {
            for method in ["get", "put", "post", "patch", "delete", "head", "options"] {
                if let operation = item[method] {
                    operations["\(method.uppercased()) \(path)"] = operation["operationId"]?.stringValue ?? ""
                }
            }
        }
        return operations
    }

    @Test func routerAndSpecAgree() throws {
        try withTestServer { server in
            var served: [String: String] = [:]
            for route in server.app.routeTable {
                let key = "\(route.method) \(route.template)"
                #expect(served[key] == nil, "\(key) is registered twice")
                served[key] = route.operationID ?? ""
            }
            let specified = try Self.specOperations()
            let servedKeys = Set(served.keys)
            let specifiedKeys = Set(specified.keys)
            #expect(servedKeys.subtracting(specifiedKeys).sorted() == [], "served but not in openapi/openapi.json")
            #expect(specifiedKeys.subtracting(servedKeys).sorted() == [], "in openapi/openapi.json but not served")

            // The operationIds, compared both ways for every operation both sides have.
            let shared = servedKeys.intersection(specifiedKeys).sorted()
            let mismatched = shared.filter { served[$0] != specified[$0] }.map {
                "\($0): router \(served[$0] ?? "") vs document \(specified[$0] ?? "")"
            }
            #expect(mismatched == [], "operationId differs")
            #expect(served.filter { $0.value.isEmpty }.keys.sorted() == [], "routes without an operationId")
            #expect(specified.filter { $0.value.isEmpty }.keys.sorted() == [], "operations without an operationId")
            // Distinct operations never share an id, on either side.
            #expect(Set(served.values).count == served.count, "an operationId is used by two routes")
            #expect(Set(specified.values).count == specified.count, "an operationId is used by two operations of the document")
        }
    }

    @Test func openAPIRouteServesTheFile() throws {
        try withTestServer { server in
            let response = try server.request(.get, "/openapi.json")
            #expect(response.status == 200)
            #expect(response.text == DataDirectory.readFile(Self.specPath))
        }
    }
}
