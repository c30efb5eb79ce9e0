/// A fast JSON serializer that appends compact UTF-8 to a byte buffer.
///
/// Commas are placed automatically: call `beginObject`/`key`/values/`endObject` (or the closure forms) in
/// document order and the writer inserts separators. It does not check that calls form a valid document —
/// that is the caller's job, and the tests of each response shape catch mistakes.
///
/// ```swift
/// var w = JSONWriter()
/// w.object { w in
///     w.key("user_id"); w.writeString("u1")
///     w.key("tags"); w.array { w in w.writeInt(1); w.writeInt(2) }
/// }
/// // w.bytes == Array(#"{"user_id":"u1","tags":[1,2]}"#.utf8)
/// ```
public struct JSONWriter: Sendable {
    /// The output so far.
    public var bytes: [UInt8]
    /// Whether the next value or key needs a leading comma.
    private var needsComma = false
    /// Whether a key was just written, so the next value follows its colon without a comma.
    private var afterKey = false

    public init(capacity: Int = 256) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    @inline(__always)
    private mutating func beforeValue() {
        if afterKey {
            afterKey = false
        } else if needsComma {
            bytes.append(UInt8(ascii: ","))
        }
    }

    // MARK: - Containers

    public mutating func beginObject() {
        beforeValue()
        bytes.append(UInt8(ascii: "{"))
        needsComma = false
    }

    public mutating func endObject() {
        bytes.append(UInt8(ascii: "}"))
        needsComma = true
    }

    public mutating func beginArray() {
        beforeValue()
        bytes.append(UInt8(ascii: "["))
        needsComma = false
    }

    public mutating func endArray() {
        bytes.append(UInt8(ascii: "]"))
        needsComma = true
    }

    /// Writes an object whose members `body` writes.
    public mutating func object(_ body: (inout JSONWriter) -> Void) {
        beginObject()
        body(&self)
        endObject()
    }

    /// Writes an array whose elements `body` writes.
    public mutating func array(_ body: (inout JSONWriter) -> Void) {
        beginArray()
        body(&self)
        endArray()
    }

    /// Writes an object member name; the next write is its value.
    public mutating func key(_ name: String) {
        if needsComma { bytes.append(UInt8(ascii: ",")) }
        appendQuoted(name)
        bytes.append(UInt8(ascii: ":"))
        afterKey = true
        needsComma = true
    }

    /// Writes a member name fixed at compile time, copied as is: it must be ASCII without `"`, `\` or control
    /// characters. Hot writers (a page of messages names ~30 members per item) skip the escaping pass this way.
    public mutating func key(static name: StaticString) {
        if needsComma { bytes.append(UInt8(ascii: ",")) }
        bytes.append(UInt8(ascii: "\""))
        appendASCII(name)
        appendASCII("\":")
        afterKey = true
        needsComma = true
    }

    /// Appends members fixed at compile time (`"a":null,"b":0`), already serialized, inside the current object.
    public mutating func staticMembers(_ members: StaticString) {
        if needsComma { bytes.append(UInt8(ascii: ",")) }
        appendASCII(members)
        needsComma = true
    }

    // MARK: - Scalars

    public mutating func writeNull() {
        beforeValue()
        appendASCII("null")
        needsComma = true
    }

    public mutating func writeBool(_ value: Bool) {
        beforeValue()
        if value {
            appendASCII("true")
        } else {
            appendASCII("false")
        }
        needsComma = true
    }

    public mutating func writeInt(_ value: some BinaryInteger) {
        beforeValue()
        appendInteger(value)
        needsComma = true
    }

    /// Writes a double in its shortest round-tripping form; NaN and infinities (not JSON) become `null`.
    public mutating func writeDouble(_ value: Double) {
        guard value.isFinite else {
            writeNull()
            return
        }
        beforeValue()
        if value == value.rounded(.towardZero), abs(value) < 1e15 {
            // Integral doubles print as "3.0" (still a JSON number, still a double when parsed back).
            appendInteger(Int64(value))
            appendASCII(".0")
        } else {
            bytes.append(contentsOf: value.description.utf8)
        }
        needsComma = true
    }

    public mutating func writeString(_ value: String) {
        beforeValue()
        appendQuoted(value)
        needsComma = true
    }

    public mutating func writeString(_ value: Substring) {
        beforeValue()
        appendQuoted(String(value))
        needsComma = true
    }

    /// Appends bytes that are already one serialized JSON value (a cached resource, a stored payload).
    public mutating func writeRaw(_ json: some Sequence<UInt8>) {
        beforeValue()
        bytes.append(contentsOf: json)
        needsComma = true
    }

    public mutating func write(_ value: JSONValue) {
        switch value {
        case .null: writeNull()
        case .bool(let b): writeBool(b)
        case .int(let i): writeInt(i)
        case .double(let d): writeDouble(d)
        case .string(let s): writeString(s)
        case .array(let items):
            beginArray()
            for item in items { write(item) }
            endArray()
        case .object(let o):
            beginObject()
            for m in o {
                key(m.key)
                write(m.value)
            }
            endObject()
        }
    }

    // MARK: - Encoding

    @inline(__always)
    private mutating func appendASCII(_ s: StaticString) {
        bytes.append(contentsOf: UnsafeBufferPointer(start: s.utf8Start, count: s.utf8CodeUnitCount))
    }

    private mutating func appendInteger(_ value: some BinaryInteger) {
        if value == 0 {
            bytes.append(UInt8(ascii: "0"))
            return
        }
        // Work on the magnitude so Int64.min does not overflow.
        var magnitude = value.magnitude
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes of stack: enough for 20 digits (UInt64.max)
        var n = 0
        withUnsafeMutableBytes(of: &digits) { buf in
            while magnitude > 0 {
                let (q, r) = magnitude.quotientAndRemainder(dividingBy: 10)
                buf[n] = UInt8(ascii: "0") + UInt8(r)
                n += 1
                magnitude = q
            }
            var i = n - 1
            while i >= 0 {
                bytes.append(buf[i])
                i -= 1
            }
        }
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    private mutating func appendQuoted(_ value: String) {
        bytes.append(UInt8(ascii: "\""))
        var s = value
        s.withUTF8 { utf8 in
            var runStart = 0
            for i in 0..<utf8.count {
                let c = utf8[i]
                // Only '"', '\' and C0 controls need escaping; non-ASCII stays raw UTF-8.
                guard c < 0x20 || c == 0x22 || c == 0x5C else { continue }
                if runStart < i { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<i])) }
                runStart = i + 1
                bytes.append(UInt8(ascii: "\\"))
                switch c {
                case 0x22: bytes.append(0x22)
                case 0x5C: bytes.append(0x5C)
                case 0x0A: bytes.append(UInt8(ascii: "n"))
                case 0x0D: bytes.append(UInt8(ascii: "r"))
                case 0x09: bytes.append(UInt8(ascii: "t"))
                case 0x08: bytes.append(UInt8(ascii: "b"))
                case 0x0C: bytes.append(UInt8(ascii: "f"))
                default:
                    appendASCII("u00")
                    bytes.append(Self.hexDigits[Int(c >> 4)])
                    bytes.append(Self.hexDigits[Int(c & 0xF)])
                }
            }
            if runStart < utf8.count {
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<utf8.count]))
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }
}

extension JSONValue {
    /// The compact UTF-8 serialization of this value.
    public func serialized() -> [UInt8] {
        var w = JSONWriter()
        w.write(self)
        return w.bytes
    }
}
