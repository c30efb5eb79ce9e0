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
public struct JSONWriter: @unchecked Sendable {
    // @unchecked: `storage` is copied on write (`reserve` clones it when shared), so a writer is a value like the
    // byte array it builds and can be sent like one.

    /// The bytes, in memory the writer appends to directly: `[UInt8].append` costs a call, a uniqueness check
    /// and a capacity check per piece, and a page of messages appends ~2,000 pieces (bench/RESULTS.md).
    private final class Storage {
        let base: UnsafeMutablePointer<UInt8>
        let capacity: Int

        init(capacity: Int) {
            self.capacity = capacity
            base = .allocate(capacity: capacity)
        }

        deinit { base.deallocate() }
    }

    private var storage: Storage
    /// Bytes written so far (the first `count` bytes of `storage`).
    public private(set) var count = 0
    /// Whether the next value or key needs a leading comma.
    private var needsComma = false
    /// Whether a key was just written, so the next value follows its colon without a comma.
    private var afterKey = false

    public init(capacity: Int = 256) {
        storage = Storage(capacity: max(16, capacity))
    }

    /// The output so far (a copy).
    public var bytes: [UInt8] {
        [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            buffer.baseAddress!.initialize(from: storage.base, count: count)
            initialized = count
        }
    }

    /// Room for `n` more bytes at the end; the caller writes them and then adds `n` to `count`.
    @inline(__always)
    private mutating func reserve(_ n: Int) -> UnsafeMutablePointer<UInt8> {
        if _slowPath(count + n > storage.capacity || !isKnownUniquelyReferenced(&storage)) { grow(toHold: count + n) }
        return storage.base + count
    }

    @inline(never)
    private mutating func grow(toHold needed: Int) {
        var capacity = storage.capacity
        while capacity < needed { capacity *= 2 }
        let fresh = Storage(capacity: capacity)
        fresh.base.initialize(from: storage.base, count: count)
        storage = fresh
    }

    @inline(__always)
    private mutating func append(_ byte: UInt8) {
        reserve(1).pointee = byte
        count += 1
    }

    @inline(__always)
    private mutating func append(_ source: UnsafePointer<UInt8>, count n: Int) {
        let target = reserve(n)
        // Keys and short values are a few bytes: a plain loop beats a call to memcpy for them.
        if n <= 16 {
            for i in 0..<n { target[i] = source[i] }
        } else {
            target.update(from: source, count: n)
        }
        count += n
    }

    private mutating func append(contentsOf array: [UInt8]) {
        array.withUnsafeBufferPointer { if let base = $0.baseAddress { append(base, count: $0.count) } }
    }

    @inline(__always)
    private mutating func beforeValue() {
        if afterKey {
            afterKey = false
        } else if needsComma {
            append(UInt8(ascii: ","))
        }
    }

    // MARK: - Containers

    public mutating func beginObject() {
        beforeValue()
        append(UInt8(ascii: "{"))
        needsComma = false
    }

    public mutating func endObject() {
        append(UInt8(ascii: "}"))
        needsComma = true
    }

    public mutating func beginArray() {
        beforeValue()
        append(UInt8(ascii: "["))
        needsComma = false
    }

    public mutating func endArray() {
        append(UInt8(ascii: "]"))
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
        if needsComma { append(UInt8(ascii: ",")) }
        appendQuoted(name)
        append(UInt8(ascii: ":"))
        afterKey = true
        needsComma = true
    }

    /// Writes a member name fixed at compile time, copied as is: it must be ASCII without `"`, `\` or control
    /// characters. Hot writers (a page of messages names ~30 members per item) skip the escaping pass this way.
    public mutating func key(static name: StaticString) {
        let length = name.utf8CodeUnitCount
        var target = reserve(length + 4)  // `,"` name `":`
        if needsComma {
            target.pointee = UInt8(ascii: ",")
            target += 1
            count += 1
        }
        target[0] = UInt8(ascii: "\"")
        for i in 0..<length { target[1 + i] = name.utf8Start[i] }
        target[1 + length] = UInt8(ascii: "\"")
        target[2 + length] = UInt8(ascii: ":")
        count += length + 3
        afterKey = true
        needsComma = true
    }

    /// Appends members fixed at compile time (`"a":null,"b":0`), already serialized, inside the current object.
    public mutating func staticMembers(_ members: StaticString) {
        if needsComma { append(UInt8(ascii: ",")) }
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
        if let exact = Int64(exactly: value) {
            writeInt(exact)
        } else {
            // Beyond Int64 (UInt64 above Int64.max): the magnitude and a sign.
            beforeValue()
            appendInteger(magnitude: UInt64(value.magnitude), negative: value < 0)
            needsComma = true
        }
    }

    /// The concrete form callers in other modules reach (a generic one from another module runs unspecialised).
    public mutating func writeInt(_ value: Int64) {
        beforeValue()
        appendInteger(value)
        needsComma = true
    }

    public mutating func writeInt(_ value: Int) { writeInt(Int64(value)) }

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
            append(contentsOf: Array(value.description.utf8))
        }
        needsComma = true
    }

    public mutating func writeString(_ value: String) {
        beforeValue()
        appendQuoted(value)
        needsComma = true
    }

    /// Writes UTF-8 text (a database cell's bytes) as a JSON string, escaped like `writeString`.
    public mutating func writeString(utf8: UnsafeBufferPointer<UInt8>) {
        beforeValue()
        appendQuoted(utf8: utf8)
        needsComma = true
    }

    public mutating func writeString(_ value: Substring) {
        beforeValue()
        appendQuoted(String(value))
        needsComma = true
    }

    /// Appends bytes that are already one serialized JSON value (a cached resource, a stored payload).
    public mutating func writeRaw(_ json: [UInt8]) {
        beforeValue()
        append(contentsOf: json)
        needsComma = true
    }

    /// Appends bytes that are already one serialized JSON value (stored JSON in a database cell's buffer).
    public mutating func writeRaw(_ json: UnsafeBufferPointer<UInt8>) {
        beforeValue()
        if let base = json.baseAddress { append(base, count: json.count) }
        needsComma = true
    }

    /// Appends bytes that are already one serialized JSON value, from any byte sequence.
    public mutating func writeRaw(_ json: some Sequence<UInt8>) {
        writeRaw(Array(json))
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
        append(s.utf8Start, count: s.utf8CodeUnitCount)
    }

    private mutating func appendInteger(_ value: Int64) {
        appendInteger(magnitude: value.magnitude, negative: value < 0)
    }

    private mutating func appendInteger(magnitude value: UInt64, negative: Bool) {
        // Work on the magnitude so Int64.min does not overflow; UInt64.max has 20 digits, plus a sign.
        var magnitude = value
        var digits = 1
        var power: UInt64 = 10
        while digits < 20 && magnitude >= power {
            digits += 1
            power &*= 10
        }
        let sign = negative ? 1 : 0
        let target = reserve(sign + digits)
        if sign == 1 { target.pointee = UInt8(ascii: "-") }
        var i = sign + digits - 1
        repeat {
            let (q, r) = magnitude.quotientAndRemainder(dividingBy: 10)
            target[i] = UInt8(ascii: "0") + UInt8(r)
            magnitude = q
            i -= 1
        } while i >= sign
        count += sign + digits
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    private mutating func appendQuoted(_ value: String) {
        var s = value
        s.withUTF8 { appendQuoted(utf8: $0) }
    }

    private mutating func appendQuoted(utf8: UnsafeBufferPointer<UInt8>) {
        append(UInt8(ascii: "\""))
        var runStart = 0
        for i in 0..<utf8.count {
            let c = utf8[i]
            // Only '"', '\' and C0 controls need escaping; non-ASCII stays raw UTF-8.
            guard c < 0x20 || c == 0x22 || c == 0x5C else { continue }
            if runStart < i { append(utf8.baseAddress! + runStart, count: i - runStart) }
            runStart = i + 1
            append(UInt8(ascii: "\\"))
            switch c {
            case 0x22: append(0x22)
            case 0x5C: append(0x5C)
            case 0x0A: append(UInt8(ascii: "n"))
            case 0x0D: append(UInt8(ascii: "r"))
            case 0x09: append(UInt8(ascii: "t"))
            case 0x08: append(UInt8(ascii: "b"))
            case 0x0C: append(UInt8(ascii: "f"))
            default:
                appendASCII("u00")
                append(Self.hexDigits[Int(c >> 4)])
                append(Self.hexDigits[Int(c & 0xF)])
            }
        }
        if runStart < utf8.count {
            append(utf8.baseAddress! + runStart, count: utf8.count - runStart)
        }
        append(UInt8(ascii: "\""))
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
