import CHyperscan
import ParleyCore
import ParleySync

/// One blocklist compiled into a Hyperscan database (docs/blocklists.md#why-hyperscan): every entry of the list is
/// found in one pass over the text, in time linear in the text whatever the entries; regular expressions that need
/// backtracking (backreferences, lookaround) are refused when the list is saved.
///
/// Word, domain and e-mail entries are literals of the normalised text; what Hyperscan cannot say (whole words, a
/// domain's edges, an address's local part) is checked around each match in ``BlocklistSnapshot``.
/// Owner: the database is immutable after compiling and freed with the value; scans share it across threads.
package final class CompiledBlocklist: @unchecked Sendable {
    package let list: Blocklist
    /// The literal each entry is matched by (normalised UTF-8): the entry itself, or for an e-mail entry naming a
    /// domain (`@spam.com`) the domain.
    let literals: [[UInt8]]
    /// For e-mail entries: whether the entry is a whole domain (`@spam.com`) rather than one address.
    let domainOnly: [Bool]
    let database: OpaquePointer

    private init(list: Blocklist, literals: [[UInt8]], domainOnly: [Bool], database: OpaquePointer) {
        (self.list, self.literals, self.domainOnly, self.database) = (list, literals, domainOnly, database)
    }

    deinit { hs_free_database(database) }

    /// Compiles `list` (its entries normalised already); a failure names the entry refused and why.
    package static func compile(_ list: Blocklist) -> Result<CompiledBlocklist, CompileError> {
        var literals: [[UInt8]] = []
        var domainOnly: [Bool] = []
        literals.reserveCapacity(list.entries.count)
        for entry in list.entries {
            if list.kind == .email, !entry.contains("@") || entry.hasPrefix("@") {
                literals.append(Array(entry.drop { $0 == "@" }.utf8))
                domainOnly.append(true)
            } else {
                literals.append(Array(entry.utf8))
                domainOnly.append(false)
            }
        }
        var database: OpaquePointer?
        var error: UnsafeMutablePointer<hs_compile_error_t>?
        let count = list.entries.count
        let ids = (0..<count).map { UInt32($0) }
        let status: hs_error_t
        // NUL-terminated copies (a regex is read up to its NUL; a literal by its length).
        let buffers = literals.map { bytes -> UnsafeMutablePointer<CChar> in
            let p = UnsafeMutablePointer<CChar>.allocate(capacity: bytes.count + 1)
            for (i, b) in bytes.enumerated() { p[i] = CChar(bitPattern: b) }
            p[bytes.count] = 0
            return p
        }
        defer { for p in buffers { p.deallocate() } }
        let pointers: [UnsafePointer<CChar>?] = buffers.map { UnsafePointer<CChar>($0) }
        if list.kind == .regex {
            let flags = [UInt32](
                repeating: UInt32(HS_FLAG_UTF8 | HS_FLAG_UCP | HS_FLAG_CASELESS | HS_FLAG_DOTALL | HS_FLAG_SOM_LEFTMOST), count: count)
            status = hs_compile_multi(pointers, flags, ids, UInt32(count), UInt32(HS_MODE_BLOCK), nil, &database, &error)
        } else {
            let lengths = literals.map { $0.count }
            let flags = [UInt32](repeating: 0, count: count)
            status = hs_compile_lit_multi(pointers, flags, ids, lengths, UInt32(count), UInt32(HS_MODE_BLOCK), nil, &database, &error)
        }
        guard status == HS_SUCCESS, let database else {
            let message = error.flatMap { $0.pointee.message.map { String(cString: $0) } } ?? "does not compile"
            let index = error.map { Int($0.pointee.expression) } ?? -1
            if let error { hs_free_compile_error(error) }
            return .failure(CompileError(entryIndex: index >= 0 && index < count ? index : nil, message: message))
        }
        return .success(CompiledBlocklist(list: list, literals: literals, domainOnly: domainOnly, database: database))
    }

    /// Why a list did not compile: the entry (by index into the normalised entries) when Hyperscan named one.
    package struct CompileError: Error, Sendable {
        package var entryIndex: Int?
        package var message: String
    }
}

/// The compiled blocklists of one app at one version, with the scratch space scans need (docs/blocklists.md#caching-and-propagation).
///
/// Owner: the lists are immutable; `scratches` holds idle Hyperscan scratch spaces (one per concurrent scan, cloned
/// from the prototype on demand) behind its lock, taken for one scan and given back.
package final class BlocklistSnapshot: @unchecked Sendable {
    package let version: Int64
    package let lists: [CompiledBlocklist]
    private let prototype: OpaquePointer?
    private let scratches = LockedValue<[OpaquePointer]>([])

    package init(version: Int64, lists: [CompiledBlocklist]) {
        self.version = version
        self.lists = lists
        var scratch: OpaquePointer?
        for list in lists { hs_alloc_scratch(list.database, &scratch) }
        prototype = scratch
    }

    deinit {
        for scratch in scratches.withLock({ $0 }) { hs_free_scratch(scratch) }
        if let prototype { hs_free_scratch(prototype) }
    }

    package var isEmpty: Bool { lists.isEmpty }

    /// Whether any list applies to `scope`.
    package func applies(to scope: Blocklist.Scope) -> Bool {
        lists.contains { $0.list.appliesTo.contains(scope) }
    }

    /// One match: the list (index into ``lists``), the entry as stored and its range, in bytes of the normalised text
    /// and of the original.
    package struct Match: Sendable {
        package var list: Int
        package var entry: Int
        package var normalised: Range<Int>
        package var original: Range<Int>
    }

    /// Every match of the lists selected by `include` in `text`, list by list, each list's matches in text order.
    package func matches(in text: BlocklistText, where include: (Blocklist) -> Bool) -> [Match] {
        guard let prototype, !text.bytes.isEmpty else { return [] }
        var scratch = scratches.withLock { $0.popLast() }
        if scratch == nil { hs_clone_scratch(prototype, &scratch) }
        guard let scratch else { return [] }
        defer { scratches.withLock { $0.append(scratch) } }
        var out: [Match] = []
        let sink = MatchSink()
        let context = Unmanaged.passUnretained(sink).toOpaque()
        text.bytes.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { chars in
                for (index, compiled) in lists.enumerated() where include(compiled.list) {
                    sink.raw.removeAll(keepingCapacity: true)
                    hs_scan(compiled.database, chars.baseAddress, UInt32(chars.count), 0, scratch, onMatch, context)
                    if sink.raw.isEmpty { continue }
                    accept(sink.raw, of: compiled, list: index, in: buffer, text: text, into: &out)
                }
            }
        }
        return out
    }

    /// The raw matches of one list, checked (whole words, domain edges, addresses) and mapped to the original text.
    private func accept(
        _ raw: [(id: UInt32, from: Int, to: Int)], of compiled: CompiledBlocklist, list: Int, in s: UnsafeBufferPointer<UInt8>,
        text: BlocklistText, into out: inout [Match]
    ) {
        let first = out.count
        for (id, from, to) in raw {
            let entry = Int(id)
            var start = compiled.list.kind == .regex ? from : to - compiled.literals[entry].count
            switch compiled.list.kind {
            case .regex:
                // Hyperscan reports every end of a match; one match per start, as long as it grows.
                if let last = out.last, out.count > first, last.entry == entry, start < last.normalised.upperBound {
                    out[out.count - 1].normalised = last.normalised.lowerBound..<max(to, last.normalised.upperBound)
                    out[out.count - 1].original = text.original(last.normalised.lowerBound, max(to, last.normalised.upperBound))
                    continue
                }
            case .word:
                guard BlocklistBoundary.isWholeWord(s, start, to) else { continue }
            case .domain:
                guard BlocklistBoundary.isHostStart(s, start), BlocklistBoundary.isHostEnd(s, to) else { continue }
            case .email:
                guard BlocklistBoundary.isHostEnd(s, to) else { continue }
                if compiled.domainOnly[entry] {
                    guard let address = BlocklistBoundary.addressStart(s, domainAt: start) else { continue }
                    start = address
                } else {
                    guard BlocklistBoundary.isLocalStart(s, start) else { continue }
                }
            }
            out.append(Match(list: list, entry: entry, normalised: start..<to, original: text.original(start, to)))
        }
    }
}

/// Collects one scan's raw matches (Hyperscan calls back with a context pointer).
private final class MatchSink {
    var raw: [(id: UInt32, from: Int, to: Int)] = []
}

/// Hyperscan's match callback: records the match and goes on scanning.
private let onMatch: match_event_handler = { id, from, to, _, context in
    guard let context else { return 1 }
    let sink = Unmanaged<MatchSink>.fromOpaque(context).takeUnretainedValue()
    if sink.raw.count >= 10_000 { return 1 }
    sink.raw.append((id, Int(from), Int(to)))
    return 0
}

/// The edge checks of word, domain and e-mail entries on normalised UTF-8 (docs/blocklists.md#matching).
enum BlocklistBoundary {
    /// A byte of a host name: ASCII letter, digit, `-`, `_`, or any byte of a non-ASCII character.
    static func isHostByte(_ b: UInt8) -> Bool {
        (b >= 0x61 && b <= 0x7A) || (b >= 0x30 && b <= 0x39) || b == 0x2D || b == 0x5F || b >= 0x80
    }

    /// A byte of an address's local part besides host bytes: `.`, `+` and the other specials RFC 5322 allows.
    static func isLocalByte(_ b: UInt8) -> Bool {
        isHostByte(b) || b == 0x2E || b == 0x2B || b == 0x21 || b == 0x23 || b == 0x24 || b == 0x25 || b == 0x26 || b == 0x27
            || b == 0x2A || b == 0x2F || b == 0x3D || b == 0x3F || b == 0x5E || b == 0x60 || b == 0x7B || b == 0x7C || b == 0x7D || b == 0x7E
    }

    /// A domain starts at `start`: not inside a longer label (`badexample.com`); a subdomain's dot, a scheme's slash
    /// or an address's `@` may come before it.
    static func isHostStart(_ s: UnsafeBufferPointer<UInt8>, _ start: Int) -> Bool {
        start == 0 || !isHostByte(s[start - 1])
    }

    /// A host name ends at `end`: no more label characters, and not a dot followed by another label
    /// (`example.com.evil.org` is a host under `evil.org`); a sentence's full stop is fine.
    static func isHostEnd(_ s: UnsafeBufferPointer<UInt8>, _ end: Int) -> Bool {
        guard end < s.count else { return true }
        if isHostByte(s[end]) { return false }
        if s[end] == 0x2E, end + 1 < s.count, isHostByte(s[end + 1]) { return false }
        return true
    }

    /// An address entry (`bob@x.com`) starts at `start`: not inside a longer local part.
    static func isLocalStart(_ s: UnsafeBufferPointer<UInt8>, _ start: Int) -> Bool {
        start == 0 || !isLocalByte(s[start - 1])
    }

    /// For a domain found at `start`: the start of the address it ends, when it is an address's domain or a subdomain
    /// of it (`a@spam.com`, `a@mail.spam.com`) with a non-empty local part; nil otherwise.
    static func addressStart(_ s: UnsafeBufferPointer<UInt8>, domainAt start: Int) -> Int? {
        var i = start
        if i > 0 && s[i - 1] == 0x2E {
            // A subdomain: walk back over the labels before it to the `@`.
            i -= 1
            while i > 0 && (isHostByte(s[i - 1]) || s[i - 1] == 0x2E) { i -= 1 }
        }
        guard i > 0, s[i - 1] == 0x40 else { return nil }
        var local = i - 1
        while local > 0 && isLocalByte(s[local - 1]) { local -= 1 }
        return local < i - 1 ? local : nil
    }

    /// `start..<end` is a whole word: where the entry's first (last) character is a letter or digit, the character
    /// before (after) it is not one. Letters of scripts written without spaces (Han, kana, Thai…) never need a boundary.
    static func isWholeWord(_ s: UnsafeBufferPointer<UInt8>, _ start: Int, _ end: Int) -> Bool {
        guard end > start else { return false }
        if start > 0, let before = scalar(endingAt: start, in: s), let first = scalar(at: start, in: s),
            isWordCharacter(before), isWordCharacter(first)
        {
            return false
        }
        if end < s.count, let after = scalar(at: end, in: s), let last = scalar(endingAt: end, in: s), isWordCharacter(after),
            isWordCharacter(last)
        {
            return false
        }
        return true
    }

    private static func isWordCharacter(_ u: Unicode.Scalar) -> Bool {
        if u.isASCII {
            let b = UInt8(u.value)
            return (b >= 0x61 && b <= 0x7A) || (b >= 0x41 && b <= 0x5A) || (b >= 0x30 && b <= 0x39) || b == 0x5F
        }
        let p = u.properties
        guard p.isAlphabetic || p.numericType != nil else { return false }
        if p.isIdeographic { return false }
        // Kana, Thai, Lao, Khmer, Myanmar and Hangul are written without spaces between words (or with optional ones).
        switch u.value {
        case 0x3040...0x30FF, 0x0E00...0x0EFF, 0x1780...0x17FF, 0x1000...0x109F, 0xAC00...0xD7AF: return false
        default: return true
        }
    }

    /// The scalar starting at byte `i`.
    private static func scalar(at i: Int, in s: UnsafeBufferPointer<UInt8>) -> Unicode.Scalar? {
        var iterator = s[i...].makeIterator()
        var decoder = UTF8()
        if case .scalarValue(let u) = decoder.decode(&iterator) { return u }
        return nil
    }

    /// The scalar ending just before byte `i`.
    private static func scalar(endingAt i: Int, in s: UnsafeBufferPointer<UInt8>) -> Unicode.Scalar? {
        var start = i - 1
        while start > 0 && s[start] & 0xC0 == 0x80 { start -= 1 }
        return scalar(at: start, in: s)
    }
}
