import Testing

@testable import ParleyPostgres

/// The in-place integer parser behind `PostgresCell.int64`.
@Suite("Integer cells")
struct IntegerParsingTests {
    private func parse(_ text: String) -> Int64? {
        Array(text.utf8).withUnsafeBufferPointer { PostgresCell.parseInt64($0) }
    }

    @Test func acceptsWhatPostgreSQLPrints() {
        #expect(parse("0") == 0)
        #expect(parse("-0") == 0)
        #expect(parse("42") == 42)
        #expect(parse("-17") == -17)
        #expect(parse("9223372036854775807") == .max)
        #expect(parse("-9223372036854775808") == .min)
    }

    @Test func rejectsEverythingElse() {
        for bad in ["", "-", "+", "1a", " 1", "1 ", "1.0", "9223372036854775808", "-9223372036854775809", "99999999999999999999"] {
            #expect(parse(bad) == nil, "\(bad)")
        }
    }
}
