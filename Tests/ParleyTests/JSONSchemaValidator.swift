@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// A JSON Schema (2020-12) validator for the subset of keywords `openapi/openapi.json` uses, for tests that check
/// real request and response bodies against the document.
///
/// Assertions: `type` (a name or an array of names; `integer` accepts a whole-valued number however it is
/// written), `enum`, `const`, `properties`, `required`, `additionalProperties`, `propertyNames`, `minProperties`,
/// `maxProperties`, `items`, `minItems`, `maxItems`, `uniqueItems`, `minimum`, `maximum`, `exclusiveMinimum`,
/// `exclusiveMaximum`, `minLength`/`maxLength` (in Unicode code points, as JSON Schema counts), `pattern` (unanchored
/// search), `allOf`, `anyOf`, `oneOf`, `not`, and `$ref` to a local JSON pointer (`#/components/schemas/User`),
/// applied next to its sibling keywords as 2020-12 does. Annotations (`format`, `description`, `default`,
/// `example`, `examples`, `title`, `deprecated`, `readOnly`, `writeOnly`) are ignored; see `knownKeywords`.
///
/// `rejectUndeclaredProperties` adds one check JSON Schema does not make by default: an object member that no
/// schema applied to that object declares (in `properties`, across `$ref`/`allOf` and the matching `anyOf`/`oneOf`
/// branches) is an error, unless one of those schemas has `additionalProperties` or declares no `properties` at all
/// (a bare `{"type": "object"}` stays open). It finds fields the server emits that the document does not describe.
struct JSONSchemaValidator {
    /// The document `$ref`s resolve in.
    let document: JSONValue
    var rejectUndeclaredProperties = false

    /// Keywords the validator applies.
    static let assertionKeywords: Set<String> = [
        "type", "enum", "const", "properties", "required", "additionalProperties", "propertyNames", "minProperties",
        "maxProperties", "items", "minItems", "maxItems", "uniqueItems", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "minLength", "maxLength", "pattern", "allOf", "anyOf", "oneOf", "not", "$ref",
    ]
    /// Keywords that carry no assertion and are skipped (JSON Schema 2020-12's content vocabulary is annotation only:
    /// the SSE frames' `data` says it holds Event JSON with `contentMediaType` and `contentSchema`).
    static let annotationKeywords: Set<String> = [
        "format", "description", "default", "example", "examples", "title", "deprecated", "readOnly", "writeOnly",
        "$comment", "contentMediaType", "contentEncoding", "contentSchema",
    ]
    static var knownKeywords: Set<String> { assertionKeywords.union(annotationKeywords) }

    /// One violation: where in the instance (`$.items[0].user_id`) and what.
    struct Failure: CustomStringConvertible, Equatable {
        var path: String
        var message: String
        var description: String { "\(path): \(message)" }
    }

    /// What the schemas applied at one instance location say about its members (for `rejectUndeclaredProperties`).
    private struct Declared {
        var names: Set<String> = []
        var declaresProperties = false
        var open = false
        var instance: JSONObject = JSONObject()

        mutating func merge(_ other: Declared) {
            names.formUnion(other.names)
            declaresProperties = declaresProperties || other.declaresProperties
            open = open || other.open
        }
    }

    /// The validation state: failures so far, declarations per instance location, `$ref`s followed.
    private struct State {
        var failures: [Failure] = []
        var declared: [String: Declared] = [:]
        var refs: Set<String> = []

        mutating func fail(_ path: String, _ message: String) { failures.append(Failure(path: path, message: message)) }

        mutating func merge(_ other: State) {
            failures += other.failures
            for (path, d) in other.declared { declared[path, default: d].merge(d) }
            refs.formUnion(other.refs)
        }
    }

    /// Every violation of `schema` by `instance` (empty when it is valid).
    func validate(_ instance: JSONValue, against schema: JSONValue) -> [Failure] {
        validateRecordingRefs(instance, against: schema).failures
    }

    /// Every violation, and the `$ref` targets followed on the way (which component schemas were exercised).
    func validateRecordingRefs(_ instance: JSONValue, against schema: JSONValue) -> (failures: [Failure], refs: Set<String>) {
        var state = State()
        apply(schema, to: instance, at: "$", &state)
        if rejectUndeclaredProperties {
            for (path, declared) in state.declared.sorted(by: { $0.key < $1.key }) where declared.declaresProperties && !declared.open {
                for key in declared.instance.keys where !declared.names.contains(key) {
                    state.fail(path, "member \"\(key)\" is not declared by the schema")
                }
            }
        }
        return (state.failures, state.refs)
    }

    /// Resolves a local reference (`#/components/schemas/User`, JSON pointer escapes `~0` `~1`).
    func resolve(_ ref: String) -> JSONValue? {
        guard ref.hasPrefix("#") else { return nil }
        var current = document
        for token in ref.dropFirst().split(separator: "/", omittingEmptySubsequences: true) {
            let name = String(token).replacing("~1", with: "/").replacing("~0", with: "~")
            if let object = current.objectValue, let next = object[name] {
                current = next
            } else if let array = current.arrayValue, let i = Int(name), array.indices.contains(i) {
                current = array[i]
            } else {
                return nil
            }
        }
        return current
    }

    // MARK: - Applying one schema

    private func apply(_ schema: JSONValue, to instance: JSONValue, at path: String, _ state: inout State, depth: Int = 0) {
        if case .bool(let allowed) = schema {
            if !allowed { state.fail(path, "no value is allowed here") }
            return
        }
        guard let keywords = schema.objectValue else {
            state.fail(path, "schema is neither an object nor a boolean: \(schema)")
            return
        }
        guard depth < 64 else {
            state.fail(path, "$ref nesting deeper than 64")
            return
        }

        if let ref = keywords["$ref"]?.stringValue {
            if let target = resolve(ref) {
                state.refs.insert(ref)
                apply(target, to: instance, at: path, &state, depth: depth + 1)
            } else {
                state.fail(path, "unresolvable $ref \(ref)")
            }
        }
        if let type = keywords["type"] { checkType(type, instance, path, &state) }
        if let options = keywords["enum"]?.arrayValue, !options.contains(where: { Self.equal($0, instance) }) {
            state.fail(path, "\(instance) is not one of \(JSONValue.array(options))")
        }
        if let constant = keywords["const"], !Self.equal(constant, instance) {
            state.fail(path, "\(instance) is not \(constant)")
        }
        switch instance {
        case .object(let object): checkObject(keywords, object, path, &state)
        case .array(let array): checkArray(keywords, array, path, &state)
        case .string(let string): checkString(keywords, string, path, &state)
        case .int, .double: checkNumber(keywords, instance.doubleValue ?? 0, path, &state)
        case .null, .bool: break
        }
        checkComposition(keywords, instance, path, &state, depth)
    }

    private func checkType(_ type: JSONValue, _ instance: JSONValue, _ path: String, _ state: inout State) {
        let names = type.arrayValue?.compactMap(\.stringValue) ?? type.stringValue.map { [$0] } ?? []
        let matches = names.contains { name in
            switch (name, instance) {
            case ("null", .null), ("boolean", .bool), ("string", .string), ("array", .array), ("object", .object): true
            case ("number", .int), ("number", .double), ("integer", .int): true
            case ("integer", .double(let d)): d.rounded(.towardZero) == d && d.isFinite
            default: false
            }
        }
        if !matches { state.fail(path, "expected \(names.joined(separator: " or ")), got \(instance.typeName)") }
    }

    private func checkObject(_ keywords: JSONObject, _ object: JSONObject, _ path: String, _ state: inout State) {
        var declared = Declared()
        declared.instance = object
        let properties = keywords["properties"]?.objectValue
        if let properties {
            declared.declaresProperties = true
            for (name, subschema) in properties {
                declared.names.insert(name)
                if let value = object[name] { apply(subschema, to: value, at: Self.member(path, name), &state) }
            }
        }
        if let additional = keywords["additionalProperties"] {
            declared.open = true
            for (name, value) in object where properties?[name] == nil {
                apply(additional, to: value, at: Self.member(path, name), &state)
            }
        }
        state.declared[path, default: declared].merge(declared)
        for name in keywords["required"]?.arrayValue?.compactMap(\.stringValue) ?? [] where !object.contains(name) {
            state.fail(path, "required member \"\(name)\" is missing")
        }
        if let names = keywords["propertyNames"] {
            for (name, _) in object { apply(names, to: .string(name), at: Self.member(path, name), &state) }
        }
        if let min = keywords["minProperties"]?.intValue, object.count < min {
            state.fail(path, "\(object.count) members, fewer than minProperties \(min)")
        }
        if let max = keywords["maxProperties"]?.intValue, object.count > max {
            state.fail(path, "\(object.count) members, more than maxProperties \(max)")
        }
    }

    private func checkArray(_ keywords: JSONObject, _ array: [JSONValue], _ path: String, _ state: inout State) {
        if let items = keywords["items"] {
            for (i, element) in array.enumerated() { apply(items, to: element, at: "\(path)[\(i)]", &state) }
        }
        if let min = keywords["minItems"]?.intValue, array.count < min {
            state.fail(path, "\(array.count) items, fewer than minItems \(min)")
        }
        if let max = keywords["maxItems"]?.intValue, array.count > max {
            state.fail(path, "\(array.count) items, more than maxItems \(max)")
        }
        if keywords["uniqueItems"]?.boolValue == true {
            for i in array.indices where array[..<i].contains(where: { Self.equal($0, array[i]) }) {
                state.fail("\(path)[\(i)]", "repeats an earlier item (uniqueItems)")
            }
        }
    }

    private func checkString(_ keywords: JSONObject, _ string: String, _ path: String, _ state: inout State) {
        let length = string.unicodeScalars.count
        if let min = keywords["minLength"]?.intValue, length < min {
            state.fail(path, "length \(length) is below minLength \(min)")
        }
        if let max = keywords["maxLength"]?.intValue, length > max {
            state.fail(path, "length \(length) is above maxLength \(max)")
        }
        if let pattern = keywords["pattern"]?.stringValue {
            do {
                let regex = try Regex(pattern)
                if string.firstMatch(of: regex) == nil { state.fail(path, "\"\(string)\" does not match /\(pattern)/") }
            } catch {
                state.fail(path, "pattern /\(pattern)/ does not compile: \(error)")
            }
        }
    }

    private func checkNumber(_ keywords: JSONObject, _ number: Double, _ path: String, _ state: inout State) {
        if let min = keywords["minimum"]?.doubleValue, number < min { state.fail(path, "\(number) is below minimum \(min)") }
        if let max = keywords["maximum"]?.doubleValue, number > max { state.fail(path, "\(number) is above maximum \(max)") }
        if let min = keywords["exclusiveMinimum"]?.doubleValue, number <= min {
            state.fail(path, "\(number) is not above exclusiveMinimum \(min)")
        }
        if let max = keywords["exclusiveMaximum"]?.doubleValue, number >= max {
            state.fail(path, "\(number) is not below exclusiveMaximum \(max)")
        }
    }

    private func checkComposition(_ keywords: JSONObject, _ instance: JSONValue, _ path: String, _ state: inout State, _ depth: Int) {
        for subschema in keywords["allOf"]?.arrayValue ?? [] { apply(subschema, to: instance, at: path, &state, depth: depth + 1) }
        if let branches = keywords["anyOf"]?.arrayValue {
            let passing = branches.map { branch(of: $0, instance, path, depth) }.filter(\.failures.isEmpty)
            if passing.isEmpty { state.fail(path, "matches none of the anyOf schemas") }
            for outcome in passing { state.merge(outcome) }
        }
        if let branches = keywords["oneOf"]?.arrayValue {
            let outcomes = branches.map { branch(of: $0, instance, path, depth) }
            let passing = outcomes.filter(\.failures.isEmpty)
            if passing.count == 1 {
                state.merge(passing[0])
            } else if passing.isEmpty {
                let reasons = outcomes.flatMap(\.failures).map(\.description).joined(separator: "; ")
                state.fail(path, "matches none of the oneOf schemas (\(reasons))")
            } else {
                state.fail(path, "matches \(passing.count) of the oneOf schemas, not exactly one")
            }
        }
        if let negated = keywords["not"], branch(of: negated, instance, path, depth).failures.isEmpty {
            state.fail(path, "\(instance) matches the schema under not")
        }
    }

    /// Applies a branch of `anyOf`/`oneOf`/`not` on its own, so its failures and declarations count only if it
    /// is the branch that matched.
    private func branch(of schema: JSONValue, _ instance: JSONValue, _ path: String, _ depth: Int) -> State {
        var state = State()
        apply(schema, to: instance, at: path, &state, depth: depth + 1)
        return state
    }

    // MARK: - Helpers

    private static func member(_ path: String, _ name: String) -> String { "\(path).\(name)" }

    /// JSON equality for `enum`/`const`/`uniqueItems`: numbers compare by value (`1` equals `1.0`), objects
    /// ignore member order.
    static func equal(_ a: JSONValue, _ b: JSONValue) -> Bool {
        switch (a, b) {
        case (.int, .double), (.double, .int), (.double, .double): return a.doubleValue == b.doubleValue
        case (.array(let x), .array(let y)): return x.count == y.count && zip(x, y).allSatisfy { equal($0, $1) }
        case (.object(let x), .object(let y)):
            return x.count == y.count && x.allSatisfy { member in y[member.key].map { equal(member.value, $0) } ?? false }
        default: return a == b
        }
    }
}
