import ParleyAPI
import ParleyCore

/// One blocklist of an app (docs/blocklists.md#the-blocklist-object): named entries of one type, the action a match
/// takes and the content it applies to.
package struct Blocklist: Sendable {
    /// How entries match (docs/blocklists.md#matching).
    package enum Kind: String, Sendable, CaseIterable {
        case word, regex, domain, email
    }

    /// What a match does; ``strength`` orders them (the strongest action of all matching lists wins).
    package enum Action: String, Sendable, CaseIterable {
        case flag, block
        case shadowBlock = "shadow_block"
        case mask

        /// `block` > `shadow_block` > `mask` > `flag`.
        package var strength: Int {
            switch self {
            case .block: 4
            case .shadowBlock: 3
            case .mask: 2
            case .flag: 1
            }
        }

        /// The same action as the hook's type.
        var hit: BlocklistHit.Action {
            switch self {
            case .flag: .flag
            case .block: .block
            case .shadowBlock: .shadowBlock
            case .mask: .mask
            }
        }
    }

    /// Which content a list is evaluated on (docs/blocklists.md#where-lists-apply).
    package enum Scope: String, Sendable, CaseIterable {
        case text, custom
        case fileName = "file_name"
        case userProfile = "user_profile"
        case groupProfile = "group_profile"
    }

    package var name: String
    package var kind: Kind
    package var action: Action
    package var appliesTo: [Scope]
    /// Normalised (NFKC, case-folded), in the order given, without repeats.
    package var entries: [String]
    /// The app's blocklist version that last wrote this list.
    package var revision: Int64
    package var createdAt: Int64
    package var updatedAt: Int64

    /// The Blocklist object; `entries: false` leaves the entries out (the list answer, which carries `entry_count`).
    package func json(entries withEntries: Bool = true) -> [UInt8] {
        var o = JSONObjectWriter(capacity: 160 + (withEntries ? entries.reduce(0) { $0 + $1.utf8.count + 3 } : 0))
        o["name"] = name
        o["type"] = kind.rawValue
        o["action"] = action.rawValue
        o.write("applies_to") { w in w.array { w in for scope in appliesTo { w.writeString(scope.rawValue) } } }
        o["entry_count"] = Int64(entries.count)
        if withEntries {
            o.write("entries") { w in w.array { w in for entry in entries { w.writeString(entry) } } }
        }
        o["created_at"] = createdAt
        o["updated_at"] = updatedAt
        return o.finish()
    }
}

/// The limits of blocklists (docs/blocklists.md#limits).
package enum BlocklistLimits {
    package static let maxLists = 50
    package static let nameBytes = 1...64
    package static let entries = 1...10_000
    package static let regexEntryBytes = 256
    /// A word, domain or e-mail entry, normalised.
    package static let entryBytes = 1...256
    package static let testTextBytes = 65_536

    /// The entries of a list normalised as they are matched (NFKC, case folding, surrounding spaces trimmed),
    /// repeats dropped; a problem names the first entry refused (as given) and why. Regular expressions are checked by
    /// compiling them (``BlocklistMatcher``).
    static func normalised(_ entries: [String], kind: Blocklist.Kind) -> (entries: [String], problem: String?) {
        var out: [String] = []
        var seen: Set<String> = []
        out.reserveCapacity(entries.count)
        for (index, given) in entries.enumerated() {
            let trimmed = given.trimmingSpaces
            let entry = kind == .regex ? trimmed : BlocklistText.normalise(trimmed)
            let bytes = entry.utf8.count
            if bytes == 0 { return ([], "entries[\(index)] \(quoted(given)) is empty") }
            if kind == .regex && bytes > regexEntryBytes {
                return ([], "entries[\(index)] \(quoted(given)) is longer than \(regexEntryBytes) bytes")
            }
            if kind != .regex && bytes > entryBytes.upperBound {
                return ([], "entries[\(index)] \(quoted(given)) is longer than \(entryBytes.upperBound) bytes")
            }
            if let problem = shapeProblem(entry, kind: kind) { return ([], "entries[\(index)] \(quoted(given)) \(problem)") }
            if seen.insert(entry).inserted { out.append(entry) }
        }
        return (out, nil)
    }

    /// Why a normalised word, domain or e-mail entry cannot match as its type says (nil when it can).
    private static func shapeProblem(_ entry: String, kind: Blocklist.Kind) -> String? {
        switch kind {
        case .word, .regex:
            return nil
        case .domain:
            if entry.contains("@") || entry.contains("/") || entry.contains(where: { $0 == " " }) {
                return "is not a host name (a domain entry is like example.com)"
            }
            if entry.hasPrefix(".") || entry.hasSuffix(".") { return "must not start or end with a dot" }
            return nil
        case .email:
            if entry.contains(where: { $0 == " " }) { return "must not contain spaces" }
            let parts = entry.split(separator: "@", omittingEmptySubsequences: false)
            if parts.count > 2 { return "has more than one @" }
            guard let domain = parts.last, !domain.isEmpty, !domain.hasPrefix("."), !domain.hasSuffix(".") else {
                return "needs a domain (bob@example.com or @example.com)"
            }
            return nil
        }
    }

    static func quoted(_ s: String) -> String {
        var w = JSONWriter()
        w.writeString(s)
        return String(decoding: w.bytes, as: UTF8.self)
    }
}

extension String {
    /// Without leading and trailing spaces, tabs and line breaks.
    fileprivate var trimmingSpaces: String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else { return "" }
        return String(self[first...last])
    }
}
