/// RFC 3339 timestamps (`2026-12-06T10:00:00Z`, `2026-12-06T11:00:00.250+01:00`), as a client names a moment in a
/// request: `date-time` of RFC 3339 (section 5.6), with `T`/`t` and `Z`/`z` in either case, fractions of a second (kept to the
/// millisecond) and a numeric offset. Leap seconds (`:60`) are refused, as are dates that do not exist.
package enum RFC3339 {
    /// Milliseconds since the Unix epoch, or nil when `text` is not a `date-time`.
    package static func milliseconds(_ text: String) -> Int64? {
        let b = Array(text.utf8)
        func number(_ from: Int, _ count: Int) -> Int? {
            guard from + count <= b.count else { return nil }
            var value = 0
            for byte in b[from..<from + count] {
                guard byte >= 0x30 && byte <= 0x39 else { return nil }
                value = value * 10 + Int(byte - 0x30)
            }
            return value
        }
        func byte(_ i: Int, _ allowed: String) -> Bool { i < b.count && allowed.utf8.contains(b[i]) }
        guard let year = number(0, 4), byte(4, "-"), let month = number(5, 2), byte(7, "-"), let day = number(8, 2), byte(10, "Tt"),
            let hour = number(11, 2), byte(13, ":"), let minute = number(14, 2), byte(16, ":"), let second = number(17, 2)
        else { return nil }
        var i = 19
        var millis = 0
        if byte(i, ".") {
            i += 1
            let start = i
            while i < b.count, b[i] >= 0x30 && b[i] <= 0x39 {
                if i - start < 3 { millis = millis * 10 + Int(b[i] - 0x30) }
                i += 1
            }
            guard i > start else { return nil }
            for _ in 0..<max(0, 3 - (i - start)) { millis *= 10 }
        }
        var offsetMinutes = 0
        if byte(i, "Zz") {
            i += 1
        } else if byte(i, "+-"), let h = number(i + 1, 2), byte(i + 3, ":"), let m = number(i + 4, 2), h <= 23, m <= 59 {
            offsetMinutes = (h * 60 + m) * (b[i] == UInt8(ascii: "-") ? -1 : 1)
            i += 6
        } else {
            return nil
        }
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let monthDays = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        guard i == b.count, (1...12).contains(month), day >= 1, day <= monthDays[month - 1], hour <= 23, minute <= 59, second <= 59
        else { return nil }
        // Days from the civil date (proleptic Gregorian), as timegm would count them, without the C library's tm.
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = Int64(era * 146_097 + dayOfEra - 719_468)
        let seconds = days * 86_400 + Int64(hour * 3600 + minute * 60 + second) - Int64(offsetMinutes * 60)
        return seconds * 1000 + Int64(millis)
    }
}
