/// Typed extraction of request-body fields that collects every field error instead of stopping at the first.
///
/// A handler reads all the fields it needs, then calls ``check()``, so one 400 `6000001` lists every invalid
/// field (docs/errors.md#problems-rfc-9457). Each accessor returns nil when the field is absent *or* invalid; in the
/// invalid case it has recorded a ``FieldError`` with the field's path. Unknown fields are ignored (docs/api.md). An
/// explicit `null` is a type error except through ``value(_:required:)`` and ``isNull(_:)``, which callers use for
/// fields that are documented as nullable.
///
/// ```swift
/// var r = try BodyReader.parse(body)
/// let name = r.string("name", maxBytes: 256)
/// let ids = r.stringArray("user_ids", required: true, maxItems: 100, itemKind: .userID)
/// try r.check()
/// ```
public struct BodyReader: Sendable {
    /// The object being read.
    public let object: JSONObject
    /// The path of `object` itself (`"body"`, `"body.users[2]"`); `""` makes field paths bare keys.
    public let path: String
    /// Errors recorded so far, in reading order.
    public private(set) var errors: [FieldError] = []

    public init(_ object: JSONObject, path: String = "body") {
        self.object = object
        self.path = path
    }

    /// Parses a request body that must be a JSON object; an empty body reads as `{}` (docs/api.md).
    ///
    /// - Throws: ``APIError`` `invalid_params` naming `path` when the body is not JSON or not an object, and naming
    ///   every field that holds U+0000 (``NULCharacter``: refused in request text, at any depth).
    public static func parse(_ body: [UInt8], path: String = "body", maxDepth: Int = JSONValue.defaultMaxDepth)
        throws(APIError) -> BodyReader
    {
        if body.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D }) {
            return BodyReader(JSONObject(), path: path)
        }
        let value: JSONValue
        let containsNUL: Bool
        do {
            (value, containsNUL) = try JSONValue.parseNotingNUL(body, maxDepth: maxDepth)
        } catch {
            throw APIError.invalidParams([
                FieldError(field: path.isEmpty ? "body" : path, message: "malformed JSON: \(error)")
            ])
        }
        guard case .object(let o) = value else {
            throw APIError.invalidParams([
                FieldError(field: path.isEmpty ? "body" : path, message: "expected object, got \(value.typeName)")
            ])
        }
        if containsNUL {
            var errors: [FieldError] = []
            NULCharacter.fields(in: value, path: path, into: &errors)
            throw APIError.invalidParams(errors)
        }
        return BodyReader(o, path: path)
    }

    /// The path of member `key` of this object.
    public func fieldPath(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    /// Whether `key` is present (possibly `null`).
    public func contains(_ key: String) -> Bool { object.contains(key) }

    /// Whether `key` is present with the value `null`.
    public func isNull(_ key: String) -> Bool { object[key]?.isNull == true }

    /// Records an error for member `key` (or for this object itself when `key` is nil).
    public mutating func addError(_ key: String?, _ message: String) {
        errors.append(FieldError(field: key.map(fieldPath) ?? (path.isEmpty ? "body" : path), message: message))
    }

    /// Records an error at an explicit path (for cross-field rules).
    public mutating func addError(path: String, _ message: String) {
        errors.append(FieldError(field: path, message: message))
    }

    /// Throws `invalid_params` listing every recorded error, if any.
    public func check() throws(APIError) {
        if !errors.isEmpty { throw APIError.invalidParams(errors) }
    }

    // MARK: - Raw access

    /// The member's value as is (including `null`), or nil when absent; records "is required" if needed.
    public mutating func value(_ key: String, required: Bool = false) -> JSONValue? {
        guard let v = object[key] else {
            if required { addError(key, "is required") }
            return nil
        }
        return v
    }

    private mutating func typed<T>(
        _ key: String, required: Bool, expected: String, _ extract: (JSONValue) -> T?
    ) -> T? {
        guard let v = value(key, required: required) else { return nil }
        guard let t = extract(v) else {
            addError(key, "expected \(expected), got \(v.typeName)")
            return nil
        }
        return t
    }

    // MARK: - Scalars

    /// A string member, checked against a UTF-8 byte-length range.
    public mutating func string(
        _ key: String, required: Bool = false, minBytes: Int = 0, maxBytes: Int? = nil
    ) -> String? {
        guard let s = typed(key, required: required, expected: "string", { $0.stringValue }) else { return nil }
        guard let message = Self.lengthProblem(s, minBytes: minBytes, maxBytes: maxBytes) else { return s }
        addError(key, message)
        return nil
    }

    /// A string member that must be a valid identifier of `kind` (``IdentifierKind``).
    public mutating func id(_ key: String, _ kind: IdentifierKind, required: Bool = false) -> String? {
        guard let s = typed(key, required: required, expected: "string", { $0.stringValue }) else { return nil }
        if let message = kind.problem(s) {
            addError(key, message)
            return nil
        }
        return s
    }

    /// An integer member: a whole number however written (`3600`, `3600.0`, `3.6e3`; ``JSONValue/intValue``); `1.5`
    /// and `"1"` are type errors (docs/api.md).
    public mutating func int(_ key: String, required: Bool = false, range: ClosedRange<Int64>? = nil) -> Int64? {
        guard let i = typed(key, required: required, expected: "integer", { $0.intValue }) else { return nil }
        if let range, !range.contains(i) {
            addError(key, Self.rangeMessage(range))
            return nil
        }
        return i
    }

    /// A number member (integer or fraction).
    public mutating func double(_ key: String, required: Bool = false) -> Double? {
        typed(key, required: required, expected: "number", { $0.doubleValue })
    }

    public mutating func bool(_ key: String, required: Bool = false) -> Bool? {
        typed(key, required: required, expected: "boolean", { $0.boolValue })
    }

    /// A string enumeration member (docs/api.md); an unknown value lists the accepted ones.
    public mutating func enumeration<E: RawRepresentable & CaseIterable>(
        _ key: String, _ type: E.Type, required: Bool = false
    ) -> E? where E.RawValue == String {
        guard let s = typed(key, required: required, expected: "string", { $0.stringValue }) else { return nil }
        if let e = E(rawValue: s) { return e }
        addError(key, "must be one of " + E.allCases.map { $0.rawValue }.joined(separator: ", "))
        return nil
    }

    /// An integer enumeration member (message `type`, `priority`, `role` …).
    public mutating func intEnumeration<E: RawRepresentable>(
        _ key: String, _ type: E.Type, required: Bool = false
    ) -> E? where E.RawValue: FixedWidthInteger {
        guard let i = typed(key, required: required, expected: "integer", { $0.intValue }) else { return nil }
        if let raw = E.RawValue(exactly: i), let e = E(rawValue: raw) { return e }
        addError(key, "unsupported value \(i)")
        return nil
    }

    // MARK: - Arrays

    /// An array-of-strings member; each item is length- or identifier-checked with the path `key[i]`.
    public mutating func stringArray(
        _ key: String, required: Bool = false, minItems: Int = 0, maxItems: Int? = nil,
        maxItemBytes: Int? = nil, itemKind: IdentifierKind? = nil
    ) -> [String]? {
        guard let items = array(key, required: required, minItems: minItems, maxItems: maxItems) else { return nil }
        var out: [String] = []
        out.reserveCapacity(items.count)
        let before = errors.count
        for (i, item) in items.enumerated() {
            let p = "\(fieldPath(key))[\(i)]"
            guard case .string(let s) = item else {
                addError(path: p, "expected string, got \(item.typeName)")
                continue
            }
            if let itemKind, let message = itemKind.problem(s) {
                addError(path: p, message)
            } else if let message = Self.lengthProblem(s, minBytes: 0, maxBytes: maxItemBytes) {
                addError(path: p, message)
            } else {
                out.append(s)
            }
        }
        return errors.count == before ? out : nil
    }

    /// An array-of-integers member.
    public mutating func intArray(
        _ key: String, required: Bool = false, minItems: Int = 0, maxItems: Int? = nil,
        range: ClosedRange<Int64>? = nil
    ) -> [Int64]? {
        guard let items = array(key, required: required, minItems: minItems, maxItems: maxItems) else { return nil }
        var out: [Int64] = []
        out.reserveCapacity(items.count)
        let before = errors.count
        for (i, item) in items.enumerated() {
            let p = "\(fieldPath(key))[\(i)]"
            guard let v = item.intValue else {
                addError(path: p, "expected integer, got \(item.typeName)")
                continue
            }
            if let range, !range.contains(v) {
                addError(path: p, Self.rangeMessage(range))
            } else {
                out.append(v)
            }
        }
        return errors.count == before ? out : nil
    }

    /// An array member with an item-count check; items are not inspected.
    public mutating func array(
        _ key: String, required: Bool = false, minItems: Int = 0, maxItems: Int? = nil
    ) -> [JSONValue]? {
        guard let items = typed(key, required: required, expected: "array", { $0.arrayValue }) else { return nil }
        if items.count < minItems {
            addError(key, minItems == 1 ? "must not be empty" : "must have at least \(minItems) items")
            return nil
        }
        if let maxItems, items.count > maxItems {
            addError(key, "must have at most \(maxItems) items")
            return nil
        }
        return items
    }

    // MARK: - Objects

    /// A nested object member, read by `body` with a reader whose paths are prefixed `key.`; its errors are
    /// merged into this reader's.
    public mutating func object<T>(
        _ key: String, required: Bool = false, _ body: (inout BodyReader) -> T
    ) -> T? {
        guard let o = typed(key, required: required, expected: "object", { $0.objectValue }) else { return nil }
        var sub = BodyReader(o, path: fieldPath(key))
        let result = body(&sub)
        errors.append(contentsOf: sub.errors)
        return sub.errors.isEmpty ? result : nil
    }

    /// A nested object member returned as is (opaque objects such as `attributes`).
    public mutating func rawObject(_ key: String, required: Bool = false) -> JSONObject? {
        typed(key, required: required, expected: "object", { $0.objectValue })
    }

    /// An array of objects, each read by `body(reader, index)` with paths `key[i].field`. Returns nil if any item
    /// had an error, so callers never act on a partially valid list.
    public mutating func objectArray<T>(
        _ key: String, required: Bool = false, minItems: Int = 0, maxItems: Int? = nil,
        _ body: (inout BodyReader, Int) -> T
    ) -> [T]? {
        guard let items = array(key, required: required, minItems: minItems, maxItems: maxItems) else { return nil }
        var out: [T] = []
        out.reserveCapacity(items.count)
        let before = errors.count
        for (i, item) in items.enumerated() {
            let p = "\(fieldPath(key))[\(i)]"
            guard case .object(let o) = item else {
                addError(path: p, "expected object, got \(item.typeName)")
                continue
            }
            var sub = BodyReader(o, path: p)
            let result = body(&sub, i)
            errors.append(contentsOf: sub.errors)
            if sub.errors.isEmpty { out.append(result) }
        }
        return errors.count == before ? out : nil
    }

    // MARK: - Messages

    package static func lengthProblem(_ s: String, minBytes: Int, maxBytes: Int?) -> String? {
        let n = s.utf8.count
        if n < minBytes { return minBytes == 1 ? "must not be empty" : "must be at least \(minBytes) bytes" }
        if let maxBytes, n > maxBytes { return "must be at most \(maxBytes) bytes" }
        return nil
    }

    static func rangeMessage(_ range: ClosedRange<Int64>) -> String {
        "must be between \(range.lowerBound) and \(range.upperBound)"
    }
}
