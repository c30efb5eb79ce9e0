import Glibc

/// Appending text to byte buffers without building Strings: the response head and the request log line are
/// written this way on every request.
extension [UInt8] {
    /// Appends a string's UTF-8 bytes with one copy (the generic `append(contentsOf: s.utf8)` goes byte by byte).
    @inline(__always)
    mutating func appendUTF8(_ string: String) {
        if string.utf8.withContiguousStorageIfAvailable({ append(contentsOf: $0) }) == nil {
            append(contentsOf: string.utf8)
        }
    }

    /// Appends `value` in decimal (a minus sign first when negative).
    mutating func appendDecimal(_ value: Int) {
        write(atMost: 20) { $0.decimal(value) }
    }

    /// Appends `value` (0 ≤ value < 10^width) in decimal, left-padded with zeros to `width` digits.
    mutating func appendPadded(_ value: Int, width: Int) {
        write(atMost: width) { $0.padded(value, width: width) }
    }

    /// Appends what `body` writes, at most `limit` bytes (a write past it stops the process: it is a bug in the
    /// caller's bound). One capacity check and one count update for the whole piece, where `append` pays both
    /// per call: a response head is a dozen pieces.
    mutating func write(atMost limit: Int, _ body: (inout ByteWriter) -> Void) {
        let start = count
        // Grown by copying zeros (one memcpy); `repeatElement` goes element by element (~300 instructions here).
        var missing = limit
        while missing > 0 {
            let n = Swift.min(missing, byteWriterZeros.count)
            byteWriterZeros.withUnsafeBufferPointer { append(contentsOf: UnsafeBufferPointer(rebasing: $0[0..<n])) }
            missing -= n
        }
        let written = withUnsafeMutableBufferPointer { buffer in
            let base = buffer.baseAddress! + start
            var writer = ByteWriter(start: base, end: base + limit)
            body(&writer)
            return writer.position - base
        }
        removeLast(limit - written)
    }
}

/// The zeros `write(atMost:)` grows an array with before it writes over them.
private let byteWriterZeros = [UInt8](repeating: 0, count: 4096)

/// A bounded cursor over bytes being written (``Swift/Array/write(atMost:_:)``); every write checks the bound.
struct ByteWriter {
    private(set) var position: UnsafeMutablePointer<UInt8>
    private let end: UnsafeMutablePointer<UInt8>

    init(start: UnsafeMutablePointer<UInt8>, end: UnsafeMutablePointer<UInt8>) {
        position = start
        self.end = end
    }

    @inline(__always)
    private mutating func reserve(_ n: Int) -> UnsafeMutablePointer<UInt8> {
        precondition(end - position >= n, "ByteWriter: write past the bound")
        defer { position += n }
        return position
    }

    @inline(__always)
    mutating func byte(_ b: UInt8) { reserve(1).pointee = b }

    @inline(__always)
    mutating func bytes(_ source: UnsafeBufferPointer<UInt8>) {
        guard let base = source.baseAddress, !source.isEmpty else { return }
        memcpy(reserve(source.count), base, source.count)
    }

    @inline(__always)
    mutating func bytes(_ source: [UInt8]) { source.withUnsafeBufferPointer { bytes($0) } }

    /// A string's UTF-8 bytes.
    @inline(__always)
    mutating func utf8(_ string: String) {
        if string.utf8.withContiguousStorageIfAvailable({ bytes($0) }) == nil {
            for b in string.utf8 { byte(b) }
        }
    }

    /// `value` in decimal (a minus sign first when negative): at most 20 bytes.
    mutating func decimal(_ value: Int) {
        if value >= 0 && value < 10 {
            byte(UInt8(ascii: "0") &+ UInt8(value))
            return
        }
        if value < 0 { byte(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        var digits = 1
        var rest = magnitude / 10
        while rest > 0 {
            digits += 1
            rest /= 10
        }
        let out = reserve(digits)
        var i = digits
        repeat {
            i -= 1
            out[i] = UInt8(ascii: "0") &+ UInt8(magnitude % 10)
            magnitude /= 10
        } while magnitude > 0
    }

    /// `value` (0 ≤ value < 10^width) in decimal, left-padded with zeros to `width` digits.
    mutating func padded(_ value: Int, width: Int) {
        let out = reserve(width)
        var rest = value
        var i = width
        while i > 0 {
            i -= 1
            out[i] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: rest % 10)
            rest /= 10
        }
    }
}
