import Glibc
import ParleyCore

/// The blocklist micro-benchmark behind the hidden `parley bench-blocklists` (bench/moderation.sh,
/// docs/blocklists.md#cost): 100,000 entries over 50 lists (word, domain, e-mail and regex), evaluated on 200-byte texts
/// exactly as a send evaluates its text (``BlocklistCheck``), beside two memmem figures over the same texts.
package enum BlocklistBench {
    /// Prints one line of `key=value` figures; `texts` texts, each evaluated `rounds` times.
    package static func run(texts count: Int = 2000, rounds: Int = 5) -> String {
        var random = SystemRandomNumberGenerator()
        let vocabulary = (0..<5000).map { word($0) }
        // 50 lists: 36 word lists of 2,000 entries, 8 domain lists of 2,500, 4 e-mail lists of 1,750 and 2 regex lists
        // of 500 — 100,000 entries.
        var lists: [Blocklist] = []
        func add(_ kind: Blocklist.Kind, _ count: Int, _ entry: (Int) -> String) {
            let index = lists.count
            let entries = (0..<count).map { entry(index * 10_000 + $0) }
            lists.append(
                Blocklist(
                    name: "l\(index)", kind: kind, action: index % 7 == 0 ? .mask : .flag, appliesTo: [.text], entries: entries,
                    revision: 1, createdAt: 0, updatedAt: 0))
        }
        for _ in 0..<36 { add(.word, 2000) { "zq\(word($0))" } }
        for _ in 0..<8 { add(.domain, 2500) { "\(word($0)).bad\($0 % 97).example" } }
        for _ in 0..<4 { add(.email, 1750) { $0 % 2 == 0 ? "@spam\($0).example" : "user\($0)@mail.example" } }
        for _ in 0..<2 { add(.regex, 500) { "fr[e3]{2}\\s*\(word($0))[0-9]{2,}" } }
        let entryCount = lists.reduce(0) { $0 + $1.entries.count }
        var started = monotonicNanos()
        let compiled = lists.compactMap { try? CompiledBlocklist.compile($0).get() }
        let compileMs = Double(monotonicNanos() - started) / 1e6
        let snapshot = BlocklistSnapshot(version: 1, lists: compiled)

        // 200-byte texts of common words; one in ten carries an entry of a word list.
        var texts: [String] = []
        for i in 0..<count {
            var text = ""
            while text.utf8.count < 200 { text += vocabulary[Int.random(in: 0..<vocabulary.count, using: &random)] + " " }
            if i % 10 == 0 { text = "zq" + word(Int.random(in: 0..<2000, using: &random)) + " " + text }
            texts.append(String(text.utf8.prefix(200))!)
        }
        var samples: [Double] = []
        samples.reserveCapacity(count * rounds)
        var matched = 0
        for _ in 0..<rounds {
            for text in texts {
                started = monotonicNanos()
                var check = BlocklistCheck(snapshot)
                _ = check.check(text, .text)
                samples.append(Double(monotonicNanos() - started) / 1000)
                if check.action != nil { matched += 1 }
            }
        }
        samples.sort()
        // The same with cold caches, as between two sends of a busy server: 16 MB streamed through before each one.
        var cold: [Double] = []
        var thrash = [UInt8](repeating: 1, count: 16 << 20)
        var sum = 0
        for text in texts.prefix(500) {
            for i in stride(from: 0, to: thrash.count, by: 64) { thrash[i] &+= 1 }
            sum &+= Int(thrash[Int.random(in: 0..<thrash.count, using: &random)])
            started = monotonicNanos()
            var check = BlocklistCheck(snapshot)
            _ = check.check(text, .text)
            cold.append(Double(monotonicNanos() - started) / 1000)
        }
        cold.sort()

        // The floor: one memmem pass over each text (a needle that is not in it), the least any search touching the
        // text once costs; and the naive search, one memmem per literal entry (regexes left out), per text.
        let needle = Array("\u{1}absent-needle".utf8)
        var floor: [Double] = []
        for text in texts {
            let bytes = Array(text.utf8)
            started = monotonicNanos()
            _ = bytes.withUnsafeBytes { t in needle.withUnsafeBytes { n in cMemmem(t.baseAddress, t.count, n.baseAddress, n.count) } }
            floor.append(Double(monotonicNanos() - started) / 1000)
        }
        floor.sort()
        let literals = lists.filter { $0.kind != .regex }.flatMap { $0.entries.map { Array($0.utf8) } }
        var naive: [Double] = []
        for text in texts.prefix(50) {
            let bytes = Array(text.utf8)
            started = monotonicNanos()
            var found = 0
            bytes.withUnsafeBytes { t in
                for entry in literals {
                    entry.withUnsafeBytes { n in if cMemmem(t.baseAddress, t.count, n.baseAddress, n.count) != nil { found += 1 } }
                }
            }
            naive.append(Double(monotonicNanos() - started) / 1000)
        }
        naive.sort()
        func pct(_ s: [Double], _ p: Double) -> String {
            let v = s[min(s.count - 1, Int(Double(s.count) * p))]
            return v < 10 ? String(Int((v * 100).rounded())).leftPadded() : String(Int(v.rounded()))
        }
        return "lists=\(compiled.count) entries=\(entryCount) compile_ms=\(Int(compileMs)) evaluations=\(samples.count) "
            + "matched=\(matched) p50_us=\(pct(samples, 0.5)) p99_us=\(pct(samples, 0.99)) cold_p50_us=\(pct(cold, 0.5)) "
            + "cold_p99_us=\(pct(cold, 0.99)) thrash=\(sum % 2) "
            + "memmem_once_p50_us=\(pct(floor, 0.5)) memmem_per_entry_p50_us=\(pct(naive, 0.5)) literals=\(literals.count)"
    }

    /// A pronounceable lowercase word for `n`.
    private static func word(_ n: Int) -> String {
        let consonants = Array("bcdfghjklmnprstvwz")
        let vowels = Array("aeiou")
        var out = ""
        var x = n + 1
        repeat {
            out.append(consonants[x % consonants.count])
            x /= consonants.count
            out.append(vowels[x % vowels.count])
            x /= vowels.count
        } while x > 0
        return out
    }

    private static func monotonicNanos() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
    }
}

/// glibc's memmem (a GNU extension the Glibc module does not import).
@_silgen_name("memmem")
private func cMemmem(_ haystack: UnsafeRawPointer?, _ haystackLength: Int, _ needle: UnsafeRawPointer?, _ needleLength: Int)
    -> UnsafeMutableRawPointer?

extension String {
    /// A figure in hundredths ("123" for 1.23) written as a decimal.
    fileprivate func leftPadded() -> String {
        let digits = count < 3 ? String(repeating: "0", count: 3 - count) + self : self
        return String(digits.dropLast(2)) + "." + String(digits.suffix(2))
    }
}
