/// The identifier formats of the API, with validation and generation of server-assigned ids. The identifier set
/// is the letters, the digits and `!#$%&()+-:;<=.>?@[]^_{}|~`; an id that violates its format is 400 `6000001`
/// naming the field or parameter.
///
/// Validation works on UTF-8 bytes with a 128-bit membership mask, so checking an id costs a few instructions
/// per byte and no allocation.
public enum IdentifierKind: Sendable, Hashable, CaseIterable {
    /// 3–32 chars `[a-z0-9][a-z0-9_-]*`.
    case appID
    /// 1–32 bytes from the identifier set (``isIDByte(_:)``).
    case userID
    /// 1–32 bytes from the identifier set (``isIDByte(_:)``).
    case roomID
    /// 1–32 bytes from the identifier set (``isIDByte(_:)``), not starting with `#`.
    case groupID
    /// 1–64 bytes, no control characters.
    case clientMsgID
    /// 1–64 bytes, no control characters.
    case deviceID
    /// A server-assigned opaque id (message, call, application, webhook …): 1–32 bytes from the identifier set.
    case opaque

    /// Whether `value` is valid for this kind.
    public func isValid(_ value: String) -> Bool { problem(value) == nil }

    /// Why `value` is invalid for this kind, or nil when it is valid.
    public func problem(_ value: String) -> String? {
        var v = value
        return v.withUTF8 { u in
            switch self {
            case .appID:
                guard (3...32).contains(u.count) else { return "must be 3 to 32 characters" }
                guard Self.isLowerAlnum(u[0]) else { return "must start with a lowercase letter or digit" }
                for c in u where !(Self.isLowerAlnum(c) || c == UInt8(ascii: "_") || c == UInt8(ascii: "-")) {
                    return "may contain only a-z, 0-9, '_' and '-'"
                }
                return nil
            case .userID, .roomID, .groupID, .opaque:
                guard (1...32).contains(u.count) else {
                    return u.isEmpty ? "must not be empty" : "must be at most 32 bytes"
                }
                if self == .groupID && u[0] == UInt8(ascii: "#") { return "must not start with '#'" }
                for c in u where !Self.isIDByte(c) { return "contains a character outside the allowed set" }
                return nil
            case .clientMsgID, .deviceID:
                guard (1...64).contains(u.count) else {
                    return u.isEmpty ? "must not be empty" : "must be at most 64 bytes"
                }
                // Bytes ≥ 0x80 are parts of multi-byte scalars (the string is valid UTF-8), never C0/DEL; C1
                // controls U+0080–U+009F are encoded as C2 80–C2 9F.
                var prev: UInt8 = 0
                for c in u {
                    if c < 0x20 || c == 0x7F || (prev == 0xC2 && c >= 0x80 && c <= 0x9F) {
                        return "must not contain control characters"
                    }
                    prev = c
                }
                return nil
            }
        }
    }

    // MARK: - Byte classes

    @inline(__always)
    static func isLowerAlnum(_ c: UInt8) -> Bool {
        (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "z")) || (c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9"))
    }

    /// Bitmask of the ASCII bytes allowed in user/room/group ids, split into two 64-bit halves.
    private static let idMask: (UInt64, UInt64) = {
        var lo: UInt64 = 0
        var hi: UInt64 = 0
        let allowed = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()+-:;<=.>?@[]^_{}|~"
        for c in allowed.utf8 {
            if c < 64 { lo |= 1 << UInt64(c) } else { hi |= 1 << UInt64(c - 64) }
        }
        return (lo, hi)
    }()

    @inline(__always)
    static func isIDByte(_ c: UInt8) -> Bool {
        if c < 64 { return idMask.0 & (1 << UInt64(c)) != 0 }
        if c < 128 { return idMask.1 & (1 << UInt64(c - 64)) != 0 }
        return false
    }

    // MARK: - Generation

    /// `[0-9A-Za-z]` in ASCII order, so fixed-width base-62 strings sort like the numbers they encode.
    public static let base62: [UInt8] = Array("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz".utf8)
    public static let lowerAlnum: [UInt8] = Array("0123456789abcdefghijklmnopqrstuvwxyz".utf8)

    /// `prefix` followed by `length` random characters from `alphabet` (default `[0-9A-Za-z]`), uniformly drawn.
    public static func generateID(prefix: String = "", length: Int, alphabet: [UInt8] = base62) -> String {
        precondition(!alphabet.isEmpty && alphabet.count <= 256)
        let prefixCount = prefix.utf8.count
        var out = [UInt8]()
        out.reserveCapacity(prefixCount + length)
        out.append(contentsOf: prefix.utf8)
        appendRandom(length, from: alphabet, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// Appends `length` characters drawn uniformly from `alphabet`.
    private static func appendRandom(_ length: Int, from alphabet: [UInt8], to out: inout [UInt8]) {
        // Rejection sampling: accept bytes below the largest multiple of the alphabet size, so no character is
        // more likely than another.
        let limit = 256 - 256 % alphabet.count
        var left = length
        withUnsafeTemporaryAllocation(byteCount: length + 8, alignment: 1) { random in
            while left > 0 {
                Crypto.fillRandom(random)
                for b in random where Int(b) < limit {
                    out.append(alphabet[Int(b) % alphabet.count])
                    left -= 1
                    if left == 0 { break }
                }
            }
        }
    }

    /// A generated group or room id: 20 chars `[A-Za-z0-9]`.
    public static func generateGroupID() -> String { generateID(length: 20) }

    /// A generated room id: 20 chars `[A-Za-z0-9]`.
    public static func generateRoomID() -> String { generateID(length: 20) }

    /// A generated app id: `app_` + 12 chars `[a-z0-9]` (lowercase, so it is itself a valid app_id).
    public static func generateAppID() -> String { generateID(prefix: "app_", length: 12, alphabet: lowerAlnum) }

    /// The creation time of an id made by ``generateSortableID(prefix:timestampMs:randomLength:)`` with `prefix`, or nil
    /// when `id` is not of that shape.
    public static func sortableTimestamp(of id: String, prefix: String) -> Int64? {
        let bytes = Array(id.utf8)
        let start = prefix.utf8.count
        guard id.hasPrefix(prefix), bytes.count >= start + 8 else { return nil }
        var t: Int64 = 0
        for b in bytes[start..<start + 8] {
            guard let digit = base62.firstIndex(of: b) else { return nil }
            t = t * 62 + Int64(digit)
        }
        return t
    }

    /// An opaque server id (≤ 32 bytes) that sorts roughly by creation time.
    ///
    /// Layout: `prefix` + 8 base-62 chars of `timestampMs` (fixed width, ASCII-ordered, good until year 8888) +
    /// `randomLength` random base-62 chars. With the default 14 random chars (≈ 83 bits) collisions are negligible
    /// even within one millisecond; ids from one millisecond are not ordered among themselves.
    ///
    /// - Parameters:
    ///   - prefix: a short type tag such as `"m"` (message) or `"c"` (call); keep `prefix + 22` ≤ 32.
    ///   - timestampMs: milliseconds since the epoch, from the server clock (the test clock in tests).
    public static func generateSortableID(prefix: String, timestampMs: Int64, randomLength: Int = 14) -> String {
        var out = [UInt8]()
        out.reserveCapacity(prefix.utf8.count + 8 + randomLength)
        out.append(contentsOf: prefix.utf8)
        var t = UInt64(max(0, timestampMs))
        let stampStart = out.count
        out.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: 8))
        var i = stampStart + 7
        while i >= stampStart {
            out[i] = base62[Int(t % 62)]
            t /= 62
            i -= 1
        }
        appendRandom(randomLength, from: base62, to: &out)
        assert(out.count <= 32, "opaque ids are at most 32 bytes")
        return String(decoding: out, as: UTF8.self)
    }
}
