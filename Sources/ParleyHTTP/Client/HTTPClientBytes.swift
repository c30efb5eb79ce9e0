/// Byte-level helpers shared by the client's parsers (namespaced so they cannot clash with the server's).
enum HTTPClientBytes {
    /// True for the characters of an RFC 9110 `token` (header names, methods).
    static func isToken(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return Array("!#$%&'*+-.^_`|~".utf8).contains(byte)
        }
    }

    /// True for an ASCII decimal digit.
    static func isDigit(_ byte: UInt8) -> Bool { byte >= 48 && byte <= 57 }

    /// A short, log-safe rendering of protocol bytes for error messages.
    static func printable(_ bytes: some Collection<UInt8>) -> String {
        let shown = bytes.prefix(80).map { $0 >= 32 && $0 < 127 ? Character(Unicode.Scalar($0)) : "." }
        return "\"" + String(shown) + (bytes.count > 80 ? "…" : "") + "\""
    }

    /// The text without leading and trailing spaces and tabs.
    static func trimmed(_ text: some StringProtocol) -> String {
        var s = Substring(text)
        while let f = s.first, f == " " || f == "\t" { s = s.dropFirst() }
        while let l = s.last, l == " " || l == "\t" { s = s.dropLast() }
        return String(s)
    }
}
