/// A parsed JSON document: the request-side model of every body the API accepts.
///
/// Numbers keep the distinction the API needs: a literal without fraction or exponent that fits `Int64` is
/// `.int`, anything else is `.double`, so "a number with a fraction where an integer is expected" can be rejected
/// (docs/api.md). Objects keep key order (``JSONObject``).
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)

    /// The JSON type name used in validation messages ("expected integer, got string").
    public var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "boolean"
        case .int: "integer"
        case .double: "number"
        case .string: "string"
        case .array: "array"
        case .object: "object"
        }
    }

    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }

    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    /// The value as an integer, as JSON Schema defines one (docs/api.md): `.int`, or a `.double` with no fraction
    /// that `Int64` holds exactly (`3600.0`, `3.6e3`); nil for `1.5`, `1e300` and non-numbers. Every reader of
    /// request integers goes through this, so "integer" means the same as in the OpenAPI document.
    public var intValue: Int64? {
        switch self {
        case .int(let i): i
        case .double(let d): Int64(exactly: d)
        default: nil
        }
    }

    public var boolValue: Bool? {
        if case .bool(let b) = self { return b }
        return nil
    }

    /// The numeric value as a `Double`, for integers and doubles alike.
    public var doubleValue: Double? {
        switch self {
        case .int(let i): Double(i)
        case .double(let d): d
        default: nil
        }
    }

    public var arrayValue: [JSONValue]? {
        if case .array(let a) = self { return a }
        return nil
    }

    public var objectValue: JSONObject? {
        if case .object(let o) = self { return o }
        return nil
    }

    /// The member `key` when this is an object, else nil.
    public subscript(key: String) -> JSONValue? {
        if case .object(let o) = self { return o[key] }
        return nil
    }

    /// The element at `index` when this is an array and the index is in range, else nil.
    public subscript(index: Int) -> JSONValue? {
        if case .array(let a) = self, a.indices.contains(index) { return a[index] }
        return nil
    }
}

extension JSONValue: ExpressibleByNilLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByStringLiteral, ExpressibleByArrayLiteral,
    ExpressibleByDictionaryLiteral
{
    public init(nilLiteral: ()) { self = .null }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(stringLiteral value: String) { self = .string(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        var o = JSONObject()
        for (k, v) in elements { o[k] = v }
        self = .object(o)
    }
}

extension JSONValue: CustomStringConvertible {
    /// The compact serialization, for logs and test failure messages.
    public var description: String { String(decoding: serialized(), as: UTF8.self) }
}

// MARK: - JSONObject

/// A JSON object that keeps its members in insertion order.
///
/// Order is kept so responses and round trips are stable. Lookup is a linear scan for small objects (the
/// common request body) and a hash index once the object grows past a handful of keys. Setting an existing key
/// replaces its value in place, so parsing `{"a":1,"a":2}` yields `a = 2` at the first position (last wins).
/// Equality ignores member order, as JSON object semantics do.
public struct JSONObject: Sendable, Equatable, Sequence, ExpressibleByDictionaryLiteral {
    public typealias Member = (key: String, value: JSONValue)

    /// The members in order.
    public private(set) var members: [Member] = []
    /// key → position in `members`; only built past `indexThreshold` members, where scanning stops paying off (a scan
    /// compares stored lengths first, so a Message object's ~30 members scan faster than a dictionary is built).
    private var index: [String: Int]? = nil
    private static let indexThreshold = 32

    public init() {}

    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        for (k, v) in elements { self[k] = v }
    }

    /// Builds an object from members in order; a repeated key keeps its first position and its last value.
    public init(_ members: some Sequence<(String, JSONValue)>) {
        for (k, v) in members { self[k] = v }
    }

    /// Reserves room for `n` members (the parser does this to avoid regrowing small objects).
    public mutating func reserveCapacity(_ n: Int) { members.reserveCapacity(n) }

    public var count: Int { members.count }
    public var isEmpty: Bool { members.isEmpty }
    public var keys: [String] { members.map(\.key) }

    public func makeIterator() -> IndexingIterator<[Member]> { members.makeIterator() }

    /// Whether `key` is present (also when its value is `null`).
    public func contains(_ key: String) -> Bool { position(of: key) != nil }

    /// The value of `key`; setting nil removes the member, setting a value replaces it in place or appends it.
    public subscript(key: String) -> JSONValue? {
        get {
            guard let i = position(of: key) else { return nil }
            return members[i].value
        }
        set {
            if let i = position(of: key) {
                if let newValue {
                    members[i].value = newValue
                } else {
                    members.remove(at: i)
                    rebuildIndex()
                }
            } else if let newValue {
                members.append((key: key, value: newValue))
                if index != nil {
                    index![key] = members.count - 1
                } else if members.count > Self.indexThreshold {
                    rebuildIndex()
                }
            }
        }
    }

    private func position(of key: String) -> Int? {
        if let index { return index[key] }
        // Lengths first: a stored count, while `==` on two different strings goes through the slow comparison (request
        // bodies are read key by key, most keys absent, so nearly every comparison is a mismatch).
        let length = key.utf8.count
        for i in members.indices where members[i].key.utf8.count == length && members[i].key == key { return i }
        return nil
    }

    private mutating func rebuildIndex() {
        guard members.count > Self.indexThreshold else {
            index = nil
            return
        }
        var idx = [String: Int](minimumCapacity: members.count)
        for (i, m) in members.enumerated() { idx[m.key] = i }
        index = idx
    }

    public static func == (lhs: JSONObject, rhs: JSONObject) -> Bool {
        guard lhs.count == rhs.count else { return false }
        for m in lhs.members {
            guard let other = rhs[m.key], other == m.value else { return false }
        }
        return true
    }
}
