import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// The test-side JSON Schema validator (`JSONSchemaValidator`): a valid and an invalid case per keyword, and that
/// it understands every keyword `openapi/openapi.json` uses.
@Suite("JSON Schema validator")
struct JSONSchemaValidatorTests {
    static let document: JSONValue = [
        "components": [
            "schemas": [
                "ID": ["type": "string", "minLength": 1],
                "Named": [
                    "type": "object", "required": ["name"],
                    "properties": ["name": ["type": "string"], "id": ["$ref": "#/components/schemas/ID"]],
                ],
                "a/b": ["const": 1],
            ]
        ]
    ]

    func failures(_ instance: String, _ schema: String, strict: Bool = false) throws -> [String] {
        var validator = JSONSchemaValidator(document: Self.document)
        validator.rejectUndeclaredProperties = strict
        return validator.validate(try JSONValue.parse(instance), against: try JSONValue.parse(schema)).map(\.description)
    }

    func valid(_ instance: String, _ schema: String, strict: Bool = false) throws -> Bool {
        try failures(instance, schema, strict: strict).isEmpty
    }

    @Test func typeNamesAndArrays() throws {
        #expect(try valid("1", #"{"type":"integer"}"#))
        #expect(try valid("3.0e0", #"{"type":"integer"}"#))
        #expect(try !valid("1.5", #"{"type":"integer"}"#))
        #expect(try valid("1.5", #"{"type":"number"}"#))
        #expect(try !valid("\"1\"", #"{"type":"number"}"#))
        #expect(try valid("null", #"{"type":["string","null"]}"#))
        #expect(try valid("\"x\"", #"{"type":["string","null"]}"#))
        #expect(try !valid("0", #"{"type":["string","null"]}"#))
        #expect(try !valid("{}", #"{"type":"array"}"#))
        #expect(try !valid("[]", #"{"type":"object"}"#))
        #expect(try !valid("0", #"{"type":"boolean"}"#))
        #expect(try failures("true", #"{"type":"string"}"#) == ["$: expected string, got boolean"])
    }

    @Test func enumAndConst() throws {
        #expect(try valid("\"a\"", #"{"enum":["a","b"]}"#))
        #expect(try !valid("\"c\"", #"{"enum":["a","b"]}"#))
        #expect(try valid("null", #"{"enum":["a",null]}"#))
        #expect(try valid("2.0", #"{"enum":[1,2]}"#))
        #expect(try valid("{\"b\":1,\"a\":2}", #"{"const":{"a":2,"b":1}}"#))
        #expect(try !valid("0", #"{"const":1}"#))
    }

    @Test func propertiesRequiredAndAdditionalProperties() throws {
        let schema = #"{"type":"object","required":["a"],"properties":{"a":{"type":"integer"},"b":{"type":"string"}}}"#
        #expect(try valid(#"{"a":1,"b":"x","c":true}"#, schema))
        #expect(try failures(#"{"b":"x"}"#, schema) == [#"$: required member "a" is missing"#])
        #expect(try failures(#"{"a":1,"b":2}"#, schema) == ["$.b: expected string, got integer"])
        let closed = #"{"type":"object","properties":{"a":{}},"additionalProperties":false}"#
        #expect(try valid(#"{"a":1}"#, closed))
        #expect(try !valid(#"{"a":1,"z":1}"#, closed))
        let map = #"{"type":"object","additionalProperties":{"type":"string","maxLength":2}}"#
        #expect(try valid(#"{"x":"ab","y":""}"#, map))
        #expect(try failures(#"{"x":"abc"}"#, map) == ["$.x: length 3 is above maxLength 2"])
    }

    @Test func propertyNamesAndPropertyCounts() throws {
        let schema = #"{"propertyNames":{"enum":["k0","k1"]},"minProperties":1,"maxProperties":1}"#
        #expect(try valid(#"{"k0":"v"}"#, schema))
        #expect(try !valid(#"{"k9":"v"}"#, schema))
        #expect(try !valid("{}", schema))
        #expect(try !valid(#"{"k0":"v","k1":"w"}"#, schema))
    }

    @Test func itemsAndArrayBounds() throws {
        let schema = #"{"type":"array","items":{"type":"integer","minimum":1},"minItems":1,"maxItems":2,"uniqueItems":true}"#
        #expect(try valid("[1,2]", schema))
        #expect(try failures("[1,0]", schema) == ["$[1]: 0.0 is below minimum 1.0"])
        #expect(try !valid("[]", schema))
        #expect(try !valid("[1,2,3]", schema))
        #expect(try failures("[2,2.0]", schema) == ["$[1]: repeats an earlier item (uniqueItems)"])
    }

    @Test func numericBounds() throws {
        #expect(try valid("-1", #"{"minimum":-1,"maximum":5}"#))
        #expect(try !valid("-2", #"{"minimum":-1}"#))
        #expect(try !valid("5.5", #"{"maximum":5}"#))
        #expect(try !valid("0", #"{"exclusiveMinimum":0}"#))
        #expect(try !valid("9", #"{"exclusiveMaximum":9}"#))
        // Bounds do not constrain other types.
        #expect(try valid("\"x\"", #"{"minimum":1}"#))
    }

    @Test func stringLengthsAndPatterns() throws {
        #expect(try valid("\"ab\"", #"{"minLength":2,"maxLength":2}"#))
        #expect(try !valid("\"a\"", #"{"minLength":2}"#))
        #expect(try !valid("\"abc\"", #"{"maxLength":2}"#))
        // Lengths count code points, not UTF-8 bytes.
        #expect(try valid("\"héé\"", #"{"maxLength":3}"#))
        #expect(try valid("\"urn:x:1\"", #"{"pattern":"^urn:[a-z]+:[0-9]+$"}"#))
        #expect(try !valid("\"urn:x:a\"", #"{"pattern":"^urn:[a-z]+:[0-9]+$"}"#))
        // pattern is a search, not an anchored match.
        #expect(try valid("\"xx42yy\"", #"{"pattern":"[0-9]"}"#))
    }

    @Test func compositions() throws {
        let nullable = #"{"oneOf":[{"type":"integer"},{"type":"null"}]}"#
        #expect(try valid("null", nullable))
        #expect(try valid("3", nullable))
        #expect(try !valid("\"3\"", nullable))
        #expect(try !valid("3", #"{"oneOf":[{"type":"integer"},{"minimum":0}]}"#))
        #expect(try valid("3", #"{"anyOf":[{"type":"integer"},{"minimum":0}]}"#))
        #expect(try !valid("-3.5", #"{"anyOf":[{"type":"integer"},{"minimum":0}]}"#))
        #expect(try valid("3", #"{"allOf":[{"type":"integer"},{"minimum":0}]}"#))
        #expect(try !valid("-3", #"{"allOf":[{"type":"integer"},{"minimum":0}]}"#))
        #expect(try valid("10", #"{"not":{"minimum":1,"maximum":9}}"#))
        #expect(try !valid("5", #"{"not":{"minimum":1,"maximum":9}}"#))
        #expect(try valid("1", "true"))
        #expect(try !valid("1", "false"))
    }

    @Test func refsResolveWithSiblingsAndEscapes() throws {
        #expect(try valid(##"{"name":"n","id":"i"}"##, ##"{"$ref":"#/components/schemas/Named"}"##))
        #expect(
            try failures(##"{"name":"n","id":""}"##, ##"{"$ref":"#/components/schemas/Named"}"##) == [
                "$.id: length 0 is below minLength 1"
            ])
        #expect(try !valid(##"{"id":"i"}"##, ##"{"$ref":"#/components/schemas/Named"}"##))
        // Siblings of $ref apply too (2020-12).
        #expect(try !valid(##"{"name":"n"}"##, ##"{"$ref":"#/components/schemas/Named","required":["id"]}"##))
        #expect(try valid("1", ##"{"$ref":"#/components/schemas/a~1b"}"##))
        #expect(try failures("1", ##"{"$ref":"#/components/schemas/Nope"}"##) == ["$: unresolvable $ref #/components/schemas/Nope"])
        let validator = JSONSchemaValidator(document: Self.document)
        let outcome = validator.validateRecordingRefs(.object(["name": "n", "id": "i"]), against: ["$ref": "#/components/schemas/Named"])
        #expect(outcome.refs == ["#/components/schemas/Named", "#/components/schemas/ID"])
    }

    @Test func undeclaredPropertiesInStrictMode() throws {
        let schema = ##"{"$ref":"#/components/schemas/Named"}"##
        #expect(try valid(#"{"name":"n","extra":1}"#, schema))
        #expect(try failures(#"{"name":"n","extra":1}"#, schema, strict: true) == [#"$: member "extra" is not declared by the schema"#])
        // Declarations of every allOf part count, also for the items of an array declared in two parts.
        let split = #"{"allOf":[{"properties":{"r":{"items":{"properties":{"a":{}}}}}},{"properties":{"r":{"items":{"properties":{"b":{}}}}}}]}"#
        #expect(try valid(#"{"r":[{"a":1,"b":2}]}"#, split, strict: true))
        #expect(try !valid(#"{"r":[{"a":1,"c":2}]}"#, split, strict: true))
        // Only the oneOf branch that matched declares members.
        let branches = #"{"oneOf":[{"type":"object","properties":{"a":{}}},{"type":"null","properties":{"b":{}}}]}"#
        #expect(try !valid(#"{"a":1,"b":1}"#, branches, strict: true))
        // A bare object schema, or one with additionalProperties, stays open.
        #expect(try valid(#"{"any":1}"#, #"{"type":"object"}"#, strict: true))
        #expect(try valid(#"{"a":1,"z":1}"#, #"{"properties":{"a":{}},"additionalProperties":{}}"#, strict: true))
    }

    /// Every keyword the document uses inside a schema is one the validator applies or deliberately ignores, and
    /// every `pattern` compiles.
    @Test func understandsEveryKeywordOfTheDocument() throws {
        let spec = try OpenAPISpecTests.loadSpec()
        var schemas: [(String, JSONValue)] = []
        func collectSchemas(_ value: JSONValue, _ path: String) {
            if let object = value.objectValue {
                for (key, member) in object {
                    if key == "schema" { schemas.append((path + "/schema", member)) } else { collectSchemas(member, path + "/" + key) }
                }
            } else if let array = value.arrayValue {
                for (i, element) in array.enumerated() { collectSchemas(element, "\(path)[\(i)]") }
            }
        }
        collectSchemas(spec["paths"] ?? .null, "#/paths")
        collectSchemas(spec["components"]?["responses"] ?? .null, "#/components/responses")
        collectSchemas(spec["components"]?["parameters"] ?? .null, "#/components/parameters")
        collectSchemas(spec["components"]?["headers"] ?? .null, "#/components/headers")
        for (name, schema) in spec["components"]?["schemas"]?.objectValue ?? JSONObject() {
            schemas.append(("#/components/schemas/\(name)", schema))
        }
        #expect(schemas.count > 150)

        var unknown: [String] = []
        var patterns: [String] = []
        func walk(_ schema: JSONValue, _ path: String) {
            guard let object = schema.objectValue else { return }
            for (key, value) in object {
                if !JSONSchemaValidator.knownKeywords.contains(key) { unknown.append("\(path)/\(key)") }
                switch key {
                case "properties":
                    for (name, subschema) in value.objectValue ?? JSONObject() { walk(subschema, "\(path)/properties/\(name)") }
                case "items", "additionalProperties", "propertyNames", "not": walk(value, "\(path)/\(key)")
                case "allOf", "anyOf", "oneOf":
                    for (i, subschema) in (value.arrayValue ?? []).enumerated() { walk(subschema, "\(path)/\(key)[\(i)]") }
                case "pattern": if let p = value.stringValue { patterns.append(p) }
                default: break
                }
            }
        }
        for (path, schema) in schemas { walk(schema, path) }
        #expect(unknown == [])
        #expect(patterns.count >= 10)
        for pattern in patterns { #expect(throws: Never.self, "pattern /\(pattern)/") { _ = try Regex(pattern) } }
    }
}
