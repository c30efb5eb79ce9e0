import Foundation
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Structural checks of `openapi/openapi.json`, generated from `openapi/src/` by `scripts/openapi.py` (the
/// document served at `GET /openapi.json`). The comparison of the spec with the served router lives in a separate test.
@Suite("OpenAPI document")
struct OpenAPISpecTests {
    /// The HTTP methods an OpenAPI 3.1 Path Item may hold as operations.
    static let methods = ["get", "put", "post", "delete", "options", "head", "patch", "trace"]

    /// `<repo>/openapi/openapi.json`, found from this file's location (`<repo>/Tests/ParleyTests/…`).
    static var specPath: String {
        let repoRoot = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent()  // Tests/ParleyTests
            .deletingLastPathComponent()  // Tests
            .deletingLastPathComponent()  // <repo>
        return repoRoot.appendingPathComponent("openapi/openapi.json").path
    }

    static func loadSpec() throws -> JSONValue {
        let data = try Data(contentsOf: URL(fileURLWithPath: specPath))
        return try JSONValue.parse([UInt8](data), maxDepth: 256)
    }

    /// One operation of the document: under `paths` or under `webhooks`.
    struct Operation {
        var container: String  // "paths" or "webhooks"
        var key: String  // path template or webhook name
        var method: String
        var pathItem: JSONObject
        var operation: JSONObject
        var label: String { "\(method.uppercased()) \(key)" }
    }

    static func operations(in spec: JSONValue, container: String) -> [Operation] {
        guard let items = spec[container]?.objectValue else { return [] }
        var result: [Operation] = []
        for (key, item) in items {
            guard let pathItem = item.objectValue else { continue }
            for method in methods {
                if let operation = pathItem[method]?.objectValue {
                    result.append(
                        Operation(container: container, key: key, method: method, pathItem: pathItem, operation: operation))
                }
            }
        }
        return result
    }

    /// Resolves a local JSON pointer reference (`#/components/schemas/User`) inside the document.
    static func resolve(_ ref: String, in spec: JSONValue) -> JSONValue? {
        guard ref.hasPrefix("#") else { return nil }
        let pointer = ref.dropFirst()
        if pointer.isEmpty { return spec }
        guard pointer.hasPrefix("/") else { return nil }
        var current = spec
        for rawToken in pointer.dropFirst().split(separator: "/", omittingEmptySubsequences: false) {
            var token = String(rawToken).replacingOccurrences(of: "~1", with: "/")
                .replacingOccurrences(of: "~0", with: "~")
            token = token.removingPercentEncoding ?? token
            switch current {
            case .object(let object):
                guard let next = object[token] else { return nil }
                current = next
            case .array(let array):
                guard let index = Int(token), array.indices.contains(index) else { return nil }
                current = array[index]
            default:
                return nil
            }
        }
        return current
    }

    /// Follows `$ref` chains (an object whose `$ref` points elsewhere in the document).
    static func dereference(_ value: JSONValue, in spec: JSONValue) -> JSONValue? {
        var current = value
        var seen: Set<String> = []
        while let ref = current["$ref"]?.stringValue {
            guard seen.insert(ref).inserted, let next = resolve(ref, in: spec) else { return nil }
            current = next
        }
        return current
    }

    /// Every `$ref` string in the document with the JSON path where it occurs.
    static func collectRefs(_ value: JSONValue, at path: String, into refs: inout [(path: String, ref: String)]) {
        switch value {
        case .object(let object):
            for (key, member) in object {
                if key == "$ref", let ref = member.stringValue {
                    refs.append((path, ref))
                } else {
                    collectRefs(member, at: path + "/" + key, into: &refs)
                }
            }
        case .array(let array):
            for (i, element) in array.enumerated() { collectRefs(element, at: "\(path)[\(i)]", into: &refs) }
        default:
            break
        }
    }

    static let problemRef = "#/components/schemas/Problem"

    /// Whether `schema` is the Problem schema, or a schema built on it (`allOf` containing it).
    static func isProblemSchema(_ schema: JSONValue?, in spec: JSONValue) -> Bool {
        guard let schema else { return false }
        if schema["$ref"]?.stringValue == problemRef { return true }
        if let ref = schema["$ref"]?.stringValue {
            return isProblemSchema(resolve(ref, in: spec), in: spec)
        }
        if let parts = schema["allOf"]?.arrayValue {
            return parts.contains { isProblemSchema($0, in: spec) }
        }
        return false
    }

    // MARK: - Tests

    @Test func documentParsesAndIsOpenAPI310() throws {
        let spec = try Self.loadSpec()
        #expect(spec["openapi"]?.stringValue == "3.1.0")
        #expect(spec["info"]?["title"]?.stringValue != nil)
        #expect(spec["info"]?["version"]?.stringValue != nil)
        #expect(spec["paths"]?.objectValue?.isEmpty == false)
        #expect(spec["components"]?["schemas"]?["Problem"] != nil)
    }

    @Test func everyOperationHasAUniqueOperationID() throws {
        let spec = try Self.loadSpec()
        let routes = Self.operations(in: spec, container: "paths")
        #expect(!routes.isEmpty)
        var seen: [String: String] = [:]
        for op in routes {
            guard let id = op.operation["operationId"]?.stringValue, !id.isEmpty else {
                Issue.record("\(op.label) has no operationId")
                continue
            }
            if let previous = seen[id] {
                Issue.record("operationId \(id) used by both \(previous) and \(op.label)")
            }
            seen[id] = op.label
        }
        // Webhook operations need no operationId, but any they declare must not collide with a route's.
        for op in Self.operations(in: spec, container: "webhooks") {
            if let id = op.operation["operationId"]?.stringValue {
                #expect(seen[id] == nil, "webhook \(op.key) reuses operationId \(id)")
                seen[id] = op.label
            }
        }
    }

    @Test func everyRefResolvesInsideTheDocument() throws {
        let spec = try Self.loadSpec()
        var refs: [(path: String, ref: String)] = []
        Self.collectRefs(spec, at: "#", into: &refs)
        #expect(!refs.isEmpty)
        for (path, ref) in refs {
            #expect(ref.hasPrefix("#/"), "\(path): $ref \(ref) is not local to the document")
            #expect(Self.resolve(ref, in: spec) != nil, "\(path): $ref \(ref) does not resolve")
        }
    }

    @Test func everyErrorResponseIsAProblem() throws {
        let spec = try Self.loadSpec()
        let all = Self.operations(in: spec, container: "paths") + Self.operations(in: spec, container: "webhooks")
        for op in all {
            guard let responses = op.operation["responses"]?.objectValue, !responses.isEmpty else {
                Issue.record("\(op.label) has no responses")
                continue
            }
            #expect(responses.keys.contains { $0.hasPrefix("2") }, "\(op.label) has no 2xx response")
            // 304 Not Modified (a download the client has) is no error and has no body.
            for (status, response) in responses where !status.hasPrefix("2") && status != "304" {
                let context = "\(op.label) \(status)"
                if op.container == "paths", status != "default" {
                    #expect(
                        response["$ref"]?.stringValue?.hasPrefix("#/components/responses/") == true,
                        "\(context) does not reference #/components/responses/…")
                }
                guard let resolved = Self.dereference(response, in: spec) else {
                    Issue.record("\(context) does not resolve")
                    continue
                }
                guard let content = resolved["content"]?.objectValue, !content.isEmpty else {
                    Issue.record("\(context) has no content")
                    continue
                }
                let problem = content["application/problem+json"]
                #expect(problem != nil, "\(context) is not application/problem+json")
                #expect(Self.isProblemSchema(problem?["schema"], in: spec), "\(context) is not built on the Problem schema")
                #expect(content.keys.allSatisfy { $0 == "application/problem+json" }, "\(context) has other media types")
            }
        }
    }

    @Test func everyPathParameterIsDeclared() throws {
        let spec = try Self.loadSpec()
        for op in Self.operations(in: spec, container: "paths") {
            // Names in the template: `/v1/apps/{app_id}/keys/{key_id}` → app_id, key_id.
            var templated: [String] = []
            var rest = Substring(op.key)
            while let open = rest.firstIndex(of: "{") {
                guard let close = rest[open...].firstIndex(of: "}") else {
                    Issue.record("\(op.key): unbalanced braces")
                    break
                }
                templated.append(String(rest[rest.index(after: open)..<close]))
                rest = rest[rest.index(after: close)...]
            }
            #expect(Set(templated).count == templated.count, "\(op.key) repeats a path parameter")

            // Path-level parameters apply unless the operation overrides them (same name and location).
            var declared: [String: JSONValue] = [:]
            let lists = [op.pathItem["parameters"]?.arrayValue ?? [], op.operation["parameters"]?.arrayValue ?? []]
            for list in lists {
                for raw in list {
                    guard let parameter = Self.dereference(raw, in: spec) else {
                        Issue.record("\(op.label): a parameter does not resolve")
                        continue
                    }
                    guard parameter["in"]?.stringValue == "path", let name = parameter["name"]?.stringValue else { continue }
                    declared[name] = parameter
                }
            }
            for name in templated {
                guard let parameter = declared[name] else {
                    Issue.record("\(op.label): path parameter {\(name)} is not declared")
                    continue
                }
                #expect(parameter["required"]?.boolValue == true, "\(op.label): path parameter \(name) must be required")
                #expect(parameter["schema"] != nil, "\(op.label): path parameter \(name) has no schema")
            }
            for name in declared.keys where !templated.contains(name) {
                Issue.record("\(op.label): declares path parameter \(name) that is not in the template")
            }
        }
    }

    /// Every path parameter's schema says which values the server accepts (issue 16 item 7): an `enum`, or the
    /// character `pattern` and `maxLength` of its identifier format (`IdentifierKind`), so a generated "valid" id is
    /// one the server does not reject.
    @Test func everyPathParameterHasTheFormatTheServerChecks() throws {
        let spec = try Self.loadSpec()
        for op in Self.operations(in: spec, container: "paths") {
            for raw in op.operation["parameters"]?.arrayValue ?? [] {
                guard let parameter = Self.dereference(raw, in: spec), parameter["in"]?.stringValue == "path",
                    let name = parameter["name"]?.stringValue
                else { continue }
                guard let schema = parameter["schema"].flatMap({ Self.dereference($0, in: spec) }) else {
                    Issue.record("\(op.label): {\(name)} has no schema")
                    continue
                }
                let constrained = schema["enum"] != nil || (schema["pattern"] != nil && schema["maxLength"] != nil)
                #expect(constrained, "\(op.label): {\(name)} has neither an enum nor a pattern and maxLength: \(schema)")
            }
        }
    }

    @Test func securityRequirementsNameDefinedSchemes() throws {
        let spec = try Self.loadSpec()
        let schemes = Set(spec["components"]?["securitySchemes"]?.objectValue?.keys ?? [])
        #expect(schemes.isSuperset(of: ["adminKey", "appKey", "userToken"]))
        for op in Self.operations(in: spec, container: "paths") {
            guard let requirements = op.operation["security"]?.arrayValue else {
                Issue.record("\(op.label) has no security list")
                continue
            }
            for requirement in requirements {
                for name in requirement.objectValue?.keys ?? [] {
                    #expect(schemes.contains(name), "\(op.label): unknown security scheme \(name)")
                }
            }
        }
    }
}
