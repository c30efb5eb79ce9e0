/// A value that can write itself as one JSON value; lets response builders assign Swift values directly.
public protocol JSONWritable {
    func writeJSON(to writer: inout JSONWriter)
}

extension String: JSONWritable {
    public func writeJSON(to writer: inout JSONWriter) { writer.writeString(self) }
}

extension Substring: JSONWritable {
    public func writeJSON(to writer: inout JSONWriter) { writer.writeString(self) }
}

extension Bool: JSONWritable {
    public func writeJSON(to writer: inout JSONWriter) { writer.writeBool(self) }
}

extension Int: JSONWritable {
    public func writeJSON(to writer: inout JSONWriter) { writer.writeInt(self) }
}

extension Int64: JSONWritable {
    public func writeJSON(to writer: inout JSONWriter) { writer.writeInt(self) }
}

extension Int32: JSONWritable {
    public func writeJSON(to writer: inout JSONWriter) { writer.writeInt(self) }
}

extension UInt64: JSONWritable {
    public func writeJSON(to writer: inout JSONWriter) { writer.writeInt(self) }
}

extension Double: JSONWritable {
    public func writeJSON(to writer: inout JSONWriter) { writer.writeDouble(self) }
}

extension JSONValue: JSONWritable {
    public func writeJSON(to writer: inout JSONWriter) { writer.write(self) }
}

extension JSONObject: JSONWritable {
    public func writeJSON(to writer: inout JSONWriter) { writer.write(.object(self)) }
}

extension Optional: JSONWritable where Wrapped: JSONWritable {
    /// `nil` is written as JSON `null`.
    public func writeJSON(to writer: inout JSONWriter) {
        if let self { self.writeJSON(to: &writer) } else { writer.writeNull() }
    }
}

extension Array: JSONWritable where Element: JSONWritable {
    public func writeJSON(to writer: inout JSONWriter) {
        writer.beginArray()
        for element in self { element.writeJSON(to: &writer) }
        writer.endArray()
    }
}

/// Bytes that are already one serialized JSON value, written verbatim (e.g. a cached resource).
public struct RawJSON: JSONWritable, Sendable {
    public var bytes: [UInt8]
    public init(_ bytes: [UInt8]) { self.bytes = bytes }
    public func writeJSON(to writer: inout JSONWriter) { writer.writeRaw(bytes) }
}

/// Builds one JSON object member by member, for response bodies.
///
/// Members appear in assignment order; assigning `nil` writes `null`. Keys are not de-duplicated (each
/// assignment appends), which keeps building O(1) per member — assign each key once.
///
/// ```swift
/// var o = JSONObjectWriter()
/// o["user_id"] = "u1"
/// o["count"] = 3
/// o["deleted_at"] = nil          // "deleted_at":null
/// o.raw("user", cachedUserBytes)
/// let body: [UInt8] = o.finish()
/// ```
public struct JSONObjectWriter: JSONWritable, Sendable {
    private var writer: JSONWriter

    public init(capacity: Int = 256) {
        writer = JSONWriter(capacity: capacity)
        writer.beginObject()
    }

    /// Appends the member `key`; the getter always returns nil (write-only).
    public subscript(key: String) -> (any JSONWritable)? {
        get { nil }
        set {
            writer.key(key)
            if let newValue { newValue.writeJSON(to: &writer) } else { writer.writeNull() }
        }
    }

    /// Appends the member `key` with an already-serialized JSON value.
    public mutating func raw(_ key: String, _ json: some Sequence<UInt8>) {
        writer.key(key)
        writer.writeRaw(json)
    }

    /// Appends the member `key` whose value `body` writes with the underlying writer.
    public mutating func write(_ key: String, _ body: (inout JSONWriter) -> Void) {
        writer.key(key)
        body(&writer)
    }

    /// Appends the member `key` only when `value` is non-nil (for fields absent rather than null).
    public mutating func setIfPresent(_ key: String, _ value: (any JSONWritable)?) {
        guard let value else { return }
        writer.key(key)
        value.writeJSON(to: &writer)
    }

    /// The finished object's bytes. Consuming, so the buffer is handed over rather than copied.
    public consuming func finish() -> [UInt8] {
        writer.endObject()
        return writer.bytes
    }

    public func writeJSON(to other: inout JSONWriter) {
        other.writeRaw(finish())
    }
}
