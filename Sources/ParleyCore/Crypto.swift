import COpenSSL
import ParleyHTTP
import ParleySync

/// Hashing, MACs, randomness and base64 codecs used for keys, tokens, cursors and signatures.
///
/// Stateless; every function is safe to call from any thread (OpenSSL 3 one-shot APIs are thread-safe).
public enum Crypto {
    // MARK: - Digests and MACs

    /// The SHA-256 implementation, fetched once.
    ///
    /// `SHA256()`/`HMAC()` with `EVP_sha256()` re-fetch the algorithm from the provider on every call in OpenSSL 3,
    /// which costs several microseconds, more than hashing a token. `@unchecked Sendable`: OpenSSL documents
    /// fetched `EVP_MD` objects as immutable and safe to share between threads; it is never freed.
    private struct Method: @unchecked Sendable {
        let md: OpaquePointer
    }

    private static let sha256Method: Method = {
        guard let md = EVP_MD_fetch(nil, "SHA256", nil) else { fatalError("OpenSSL has no SHA256") }
        return Method(md: md)
    }()

    /// Runs `body` with a fresh digest context initialised for SHA-256, then writes the digest into `out`.
    private static func digest(into out: UnsafeMutablePointer<UInt8>, _ body: (OpaquePointer) -> Void) {
        guard let ctx = EVP_MD_CTX_new() else { fatalError("EVP_MD_CTX_new failed") }
        defer { EVP_MD_CTX_free(ctx) }
        precondition(EVP_DigestInit_ex2(ctx, sha256Method.md, nil) == 1, "SHA-256 init failed")
        body(ctx)
        var len: UInt32 = 0
        precondition(EVP_DigestFinal_ex(ctx, out, &len) == 1 && len == 32, "SHA-256 final failed")
    }

    private static func update(_ ctx: OpaquePointer, _ bytes: UnsafeBufferPointer<UInt8>) {
        if bytes.count > 0 { precondition(EVP_DigestUpdate(ctx, bytes.baseAddress, bytes.count) == 1) }
    }

    /// SHA-256 over bytes that arrive in pieces (an upload's body): `update` with each, then `finish` once.
    ///
    /// Owner: whoever made it; one thread at a time. The OpenSSL context is freed by `finish` or `deinit`.
    public final class SHA256Hasher {
        private var ctx: OpaquePointer?

        public init() {
            guard let ctx = EVP_MD_CTX_new() else { fatalError("EVP_MD_CTX_new failed") }
            precondition(EVP_DigestInit_ex2(ctx, sha256Method.md, nil) == 1, "SHA-256 init failed")
            self.ctx = ctx
        }

        deinit { EVP_MD_CTX_free(ctx) }

        public func update(_ bytes: [UInt8]) {
            guard let ctx else { preconditionFailure("SHA-256 updated after finish") }
            bytes.withUnsafeBufferPointer { Crypto.update(ctx, $0) }
        }

        /// The digest (32 bytes); the hasher takes no more input.
        public func finish() -> [UInt8] {
            guard let ctx else { preconditionFailure("SHA-256 finished twice") }
            defer {
                EVP_MD_CTX_free(ctx)
                self.ctx = nil
            }
            return [UInt8](unsafeUninitializedCapacity: 32) { out, n in
                var len: UInt32 = 0
                precondition(EVP_DigestFinal_ex(ctx, out.baseAddress, &len) == 1 && len == 32, "SHA-256 final failed")
                n = 32
            }
        }
    }

    /// SHA-256 of `bytes` (32 bytes).
    public static func sha256(_ bytes: some Collection<UInt8>) -> [UInt8] {
        withContiguous(bytes) { buf in
            [UInt8](unsafeUninitializedCapacity: 32) { out, n in
                digest(into: out.baseAddress!) { ctx in update(ctx, buf) }
                n = 32
            }
        }
    }

    /// SHA-256 of `bytes`: the concrete form the callers in other modules reach (a generic one from another module
    /// runs unspecialised, through protocol witnesses for every element).
    public static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        bytes.withUnsafeBufferPointer { sha256($0) }
    }

    /// SHA-256 of the bytes of `buffer`.
    public static func sha256(_ buffer: UnsafeBufferPointer<UInt8>) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: 32) { out, n in
            digest(into: out.baseAddress!) { ctx in update(ctx, buffer) }
            n = 32
        }
    }

    /// SHA-256 of a string's UTF-8.
    public static func sha256(_ text: String) -> [UInt8] {
        var text = text
        return text.withUTF8 { sha256($0) }
    }

    /// HMAC-SHA256 of `message` under `key` (32 bytes), RFC 2104 over the cached SHA-256.
    public static func hmacSHA256(key: some Collection<UInt8>, message: some Collection<UInt8>) -> [UInt8] {
        let blockSize = 64
        // Keys longer than a block are hashed first (RFC 2104, section 2).
        var block = key.count > blockSize ? sha256(key) : Array(key)
        block.append(contentsOf: repeatElement(0, count: blockSize - block.count))
        var pad = [UInt8](repeating: 0, count: blockSize)
        return withContiguous(message) { m in
            [UInt8](unsafeUninitializedCapacity: 32) { out, n in
                var inner = [UInt8](repeating: 0, count: 32)
                for i in 0..<blockSize { pad[i] = block[i] ^ 0x36 }
                inner.withUnsafeMutableBufferPointer { innerOut in
                    digest(into: innerOut.baseAddress!) { ctx in
                        pad.withUnsafeBufferPointer { update(ctx, $0) }
                        update(ctx, m)
                    }
                }
                for i in 0..<blockSize { pad[i] = block[i] ^ 0x5C }
                digest(into: out.baseAddress!) { ctx in
                    pad.withUnsafeBufferPointer { update(ctx, $0) }
                    inner.withUnsafeBufferPointer { update(ctx, $0) }
                }
                n = 32
            }
        }
    }

    /// Compares two byte strings in time that depends only on their lengths (different lengths → false).
    public static func constantTimeEquals(_ a: some Collection<UInt8>, _ b: some Collection<UInt8>) -> Bool {
        guard a.count == b.count else { return false }
        if a.isEmpty { return true }
        return withContiguous(a) { pa in
            withContiguous(b) { pb in CRYPTO_memcmp(pa.baseAddress, pb.baseAddress, pa.count) == 0 }
        }
    }

    /// `n` cryptographically secure random bytes; traps if the CSPRNG fails (nothing secure can continue).
    public static func randomBytes(_ n: Int) -> [UInt8] {
        precondition(n >= 0)
        return [UInt8](unsafeUninitializedCapacity: n) { out, count in
            if n > 0 { fillRandom(UnsafeMutableRawBufferPointer(out)) }
            count = n
        }
    }

    /// Fills `buffer` with cryptographically secure random bytes. Small requests (the ids made for every message)
    /// are served from a pool refilled 4 KiB at a time: one `RAND_bytes` call costs as much as hashing a short text,
    /// and a send makes two ids.
    public static func fillRandom(_ buffer: UnsafeMutableRawBufferPointer) {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return }
        if buffer.count > RandomPool.size / 4 {
            guard RAND_bytes(base.assumingMemoryBound(to: UInt8.self), Int32(buffer.count)) == 1 else { fatalError("RAND_bytes failed") }
            return
        }
        randomPool.withLock { pool in pool.take(into: buffer) }
    }

    private static let randomPool = LockedValue(RandomPool())

    /// Random bytes fetched ahead; each byte is handed out once. Owner: `randomPool`'s lock (the buffer lives as long
    /// as the process).
    private struct RandomPool {
        static let size = 4096
        private let bytes = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 8)
        /// Bytes handed out so far; the pool is refilled once fewer than a request remain.
        private var used = size

        mutating func take(into buffer: UnsafeMutableRawBufferPointer) {
            if Self.size - used < buffer.count {
                guard RAND_bytes(bytes.baseAddress!.assumingMemoryBound(to: UInt8.self), Int32(Self.size)) == 1 else {
                    fatalError("RAND_bytes failed")
                }
                used = 0
            }
            buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[used..<used + buffer.count]))
            // Handed-out bytes are not left behind in the pool.
            bytes[used..<used + buffer.count].initializeMemory(as: UInt8.self, repeating: 0)
            used += buffer.count
        }
    }

    private static func withContiguous<R>(
        _ bytes: some Collection<UInt8>, _ body: (UnsafeBufferPointer<UInt8>) -> R
    ) -> R {
        if let r = bytes.withContiguousStorageIfAvailable(body) { return r }
        return Array(bytes).withUnsafeBufferPointer(body)
    }

    // MARK: - Hex

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    /// Lowercase hex of `bytes`.
    public static func hex(_ bytes: [UInt8]) -> String {
        String(unsafeUninitializedCapacity: bytes.count * 2) { out in
            hexDigits.withUnsafeBufferPointer { digits in
                for (i, b) in bytes.enumerated() {
                    out[2 * i] = digits[Int(b >> 4)]
                    out[2 * i + 1] = digits[Int(b & 0x0F)]
                }
            }
            return bytes.count * 2
        }
    }

    /// Lowercase hex of `bytes`.
    public static func hex(_ bytes: some Sequence<UInt8>) -> String { hex(Array(bytes)) }

    /// Bytes of a hex string (either case); nil for odd length or a non-hex character.
    public static func fromHex(_ text: String) -> [UInt8]? {
        let u = Array(text.utf8)
        guard u.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(u.count / 2)
        var i = 0
        while i < u.count {
            guard let hi = PercentDecoding.hexValue(u[i]), let lo = PercentDecoding.hexValue(u[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        return out
    }

    // MARK: - Base64

    private static let standardAlphabet: [UInt8] = Array(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    private static let urlAlphabet: [UInt8] = Array(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// Decoding tables: byte → 6-bit value, 0xFF for bytes outside the alphabet.
    private static let standardTable: [UInt8] = decodeTable(standardAlphabet)
    private static let urlTable: [UInt8] = decodeTable(urlAlphabet)

    private static func decodeTable(_ alphabet: [UInt8]) -> [UInt8] {
        var t = [UInt8](repeating: 0xFF, count: 256)
        for (i, c) in alphabet.enumerated() { t[Int(c)] = UInt8(i) }
        return t
    }

    /// Base64url (RFC 4648, section 5) without padding, as JWTs, keys and cursors use it.
    public static func base64URLEncode(_ bytes: some Collection<UInt8>) -> String {
        String(decoding: encode(bytes, alphabet: urlAlphabet, pad: false), as: UTF8.self)
    }

    /// Decodes unpadded base64url; nil on any character outside the alphabet, `=`, an impossible length
    /// (4n+1) or non-zero trailing bits (so every byte string has exactly one accepted encoding).
    public static func base64URLDecode(_ text: String) -> [UInt8]? {
        var text = text
        return text.withUTF8 { base64URLDecode($0) }
    }

    /// Decodes unpadded base64url held in a substring (a segment of a token or cursor).
    public static func base64URLDecode(_ text: Substring) -> [UInt8]? {
        var text = text
        return text.withUTF8 { base64URLDecode($0) }
    }

    /// Decodes unpadded base64url bytes.
    public static func base64URLDecode(_ utf8: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        urlTable.withUnsafeBufferPointer { decode(utf8, table: $0, padded: false) }
    }

    /// Standard base64 (RFC 4648, section 4) with `=` padding.
    public static func base64Encode(_ bytes: some Collection<UInt8>) -> String {
        String(decoding: encode(bytes, alphabet: standardAlphabet, pad: true), as: UTF8.self)
    }

    /// Decodes padded standard base64 (length a multiple of 4); nil on anything else.
    public static func base64Decode(_ text: String) -> [UInt8]? {
        var text = text
        return text.withUTF8 { utf8 in standardTable.withUnsafeBufferPointer { decode(utf8, table: $0, padded: true) } }
    }

    private static func encode(_ input: some Collection<UInt8>, alphabet: [UInt8], pad: Bool) -> [UInt8] {
        withContiguous(input) { src in
            var out: [UInt8] = []
            out.reserveCapacity((src.count + 2) / 3 * 4)
            alphabet.withUnsafeBufferPointer { a in
                var i = 0
                while i + 3 <= src.count {
                    let v = UInt32(src[i]) << 16 | UInt32(src[i + 1]) << 8 | UInt32(src[i + 2])
                    out.append(a[Int(v >> 18)])
                    out.append(a[Int(v >> 12 & 0x3F)])
                    out.append(a[Int(v >> 6 & 0x3F)])
                    out.append(a[Int(v & 0x3F)])
                    i += 3
                }
                let rest = src.count - i
                if rest == 1 {
                    let v = UInt32(src[i]) << 16
                    out.append(a[Int(v >> 18)])
                    out.append(a[Int(v >> 12 & 0x3F)])
                    if pad { out.append(contentsOf: [0x3D, 0x3D]) }
                } else if rest == 2 {
                    let v = UInt32(src[i]) << 16 | UInt32(src[i + 1]) << 8
                    out.append(a[Int(v >> 18)])
                    out.append(a[Int(v >> 12 & 0x3F)])
                    out.append(a[Int(v >> 6 & 0x3F)])
                    if pad { out.append(0x3D) }
                }
            }
            return out
        }
    }

    private static func decode(_ input: UnsafeBufferPointer<UInt8>, table: UnsafeBufferPointer<UInt8>, padded: Bool)
        -> [UInt8]?
    {
        var n = input.count
        if padded {
            guard n % 4 == 0 else { return nil }
            if n > 0 && input[n - 1] == 0x3D { n -= 1 }
            if n > 0 && input[n - 1] == 0x3D { n -= 1 }
        }
        guard n % 4 != 1 else { return nil }
        var ok = true
        let out = [UInt8](unsafeUninitializedCapacity: n * 3 / 4) { buf, count in
            var acc: UInt32 = 0
            var bits: UInt32 = 0
            var o = 0
            for i in 0..<n {
                let v = table[Int(input[i])]
                if v == 0xFF {
                    ok = false
                    break
                }
                acc = acc << 6 | UInt32(v)
                bits += 6
                if bits >= 8 {
                    bits -= 8
                    buf[o] = UInt8(truncatingIfNeeded: acc >> bits)
                    o += 1
                    acc &= (1 << bits) - 1
                }
            }
            // Leftover bits must be zero, otherwise two encodings would decode to the same bytes.
            if acc != 0 { ok = false }
            count = o
        }
        guard ok else { return nil }
        return out
    }
}
