import ParleyAPI
import ParleyCore

/// The app's sensitive-word rule (the app settings `sensitive_words` and `sensitive_word_action`, checked as a policy
/// step of docs/messages.md#sending): case-insensitive substring matching on the filtered texts of a body, then reject
/// or mask.
///
/// Matching compares characters after Unicode lowercasing on both sides, so masking replaces exactly the matched
/// characters of the original text with `*`. A value made per request from the app's settings.
struct SensitiveWordFilter: Sendable {
    /// The words lowercased, as characters; empty words are never stored by the settings validator.
    private let words: [[Character]]
    let masks: Bool

    init(settings: AppSettings) {
        let list = settings.object["sensitive_words"]?.arrayValue ?? []
        words = list.compactMap { $0.stringValue }.filter { !$0.isEmpty }.map { Array($0.lowercased()) }
        masks = settings.string("sensitive_word_action") == "mask"
    }

    var isEmpty: Bool { words.isEmpty }

    /// Whether `text` contains a word.
    package func matches(_ text: String) -> Bool {
        if words.isEmpty { return false }
        let lowered = Self.lowered(text)
        for word in words where Self.firstMatch(word, in: lowered, from: 0) != nil { return true }
        return false
    }

    /// `text` with every character of every occurrence of a word replaced by `*`.
    func mask(_ text: String) -> String {
        if words.isEmpty { return text }
        let original = Array(text)
        let lowered = Self.lowered(text)
        var masked = [Bool](repeating: false, count: original.count)
        for word in words {
            var start = 0
            while let at = Self.firstMatch(word, in: lowered, from: start) {
                for i in at..<(at + word.count) { masked[i] = true }
                start = at + 1
            }
        }
        guard masked.contains(true) else { return text }
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for (i, c) in original.enumerated() { out.append(masked[i] ? "*" : c) }
        return out
    }

    /// Applies the rule to `body`: true when it must be rejected (action `reject` and a match); with `mask` the
    /// filtered texts are masked in place.
    func apply(to body: inout MessageBody) -> Bool {
        if words.isEmpty { return false }
        let hit = body.filterableTexts.contains(where: matches)
        guard hit else { return false }
        if !masks { return true }
        body.mapFilterableTexts(mask)
        return false
    }

    /// One lowercased character per character of `text` (a lowercase mapping that yields several characters is
    /// kept as one string, so positions stay aligned with the original).
    private static func lowered(_ text: String) -> [String] {
        text.map { String($0).lowercased() }
    }

    private static func firstMatch(_ word: [Character], in text: [String], from start: Int) -> Int? {
        guard word.count <= text.count, start <= text.count - word.count else { return nil }
        outer: for i in start...(text.count - word.count) {
            for k in 0..<word.count where text[i + k] != String(word[k]) { continue outer }
            return i
        }
        return nil
    }
}
