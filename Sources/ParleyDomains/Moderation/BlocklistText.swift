import Foundation

/// A text as blocklists match it (docs/blocklists.md#matching): Unicode-normalised (NFKC) and case-folded, with a map
/// from each byte of the normalised UTF-8 back to the original character it came from, so a match reports and masks
/// positions of the text as given.
///
/// ASCII text, the common case, only has its letters lowercased and its offsets are the original ones: no map is
/// built and Foundation is not called.
package struct BlocklistText: Sendable {
    /// The normalised text, UTF-8.
    package let bytes: [UInt8]
    /// For each normalised byte, the UTF-8 offset in the original text of the start of the character it came from;
    /// nil when offsets are the same (ASCII).
    private let starts: [Int32]?
    /// … and of that character's end (exclusive).
    private let ends: [Int32]?

    package init(_ text: String) {
        var text = text
        let ascii = text.withUTF8 { raw in
            var out = [UInt8](repeating: 0, count: raw.count)
            for i in 0..<raw.count {
                let b = raw[i]
                if b >= 0x80 { return nil as [UInt8]? }
                out[i] = b &- 0x41 < 26 ? b | 0x20 : b
            }
            return out
        }
        if let ascii {
            (bytes, starts, ends) = (ascii, nil, nil)
            return
        }
        var out: [UInt8] = []
        var starts: [Int32] = []
        var ends: [Int32] = []
        out.reserveCapacity(text.utf8.count + 16)
        starts.reserveCapacity(text.utf8.count + 16)
        ends.reserveCapacity(text.utf8.count + 16)
        var offset: Int32 = 0
        for character in text {
            let length = Int32(character.utf8.count)
            if let ascii = character.asciiValue {
                out.append(ascii &- 0x41 < 26 ? ascii | 0x20 : ascii)
                starts.append(offset)
                ends.append(offset + length)
            } else {
                for byte in Self.normalise(character: character).utf8 {
                    out.append(byte)
                    starts.append(offset)
                    ends.append(offset + length)
                }
            }
            offset += length
        }
        (bytes, self.starts, self.ends) = (out, starts, ends)
    }

    /// The original UTF-8 range of the normalised bytes `start..<end` (widened to whole original characters).
    package func original(_ start: Int, _ end: Int) -> Range<Int> {
        guard let starts, let ends, end > start else { return start..<end }
        return Int(starts[start])..<Int(ends[end - 1])
    }

    /// `s` normalised as entries are stored and texts matched: NFKC, then case folding.
    package static func normalise(_ s: String) -> String {
        if s.utf8.allSatisfy({ $0 < 0x80 }) { return s.lowercased() }
        var out = ""
        out.reserveCapacity(s.utf8.count)
        for character in s { out += normalise(character: character) }
        return out
    }

    /// One character normalised; it may become several (the ligature `ﬁ` becomes `fi`) or none.
    private static func normalise(character: Character) -> String {
        let compatible = String(character).precomposedStringWithCompatibilityMapping
        return compatible.folding(options: [.caseInsensitive], locale: nil).precomposedStringWithCompatibilityMapping
    }
}
