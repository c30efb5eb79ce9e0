import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The SQL of a keyword filter (the `q` of a list): every keyword must be a substring of one of the named fields,
/// both sides compared after Unicode lowercasing. The group lists share it.
enum KeywordMatch {
    /// Runs `body`, which builds its statement with the given clause maker (`match(fields)` → ` AND …` binding the
    /// lowercased keywords as one `text[]` value; no text at all without keywords). Lowercasing uses ICU's root locale
    /// because lower() under the "C" locale of the embedded cluster folds ASCII only; a server built without ICU (no
    /// "und-x-icu" collation) falls back to lower() of the database locale.
    static func query<T>(
        keywords: [String], on db: PostgresConnection, _ body: (_ match: ([String]) -> PostgresQuery) throws -> T
    ) throws -> T {
        do {
            return try body { fields in clause(fields, keywords, unicode: true) }
        } catch let error as PostgresError where error.sqlState == "42704" && !keywords.isEmpty {
            return try body { fields in clause(fields, keywords, unicode: false) }
        }
    }

    /// Splits `q` into lowercased keywords; more than 5 is a 400 naming `q`.
    static func keywords(_ query: inout QueryReader) -> [String] {
        let keywords = (query.string("q") ?? "").lowercased().split(separator: " ").map(String.init)
        if keywords.count > 5 { query.addError("q", "at most 5 keywords") }
        return keywords
    }

    private static func clause(_ fields: [String], _ keywords: [String], unicode: Bool) -> PostgresQuery {
        if keywords.isEmpty { return "" }
        func lower(_ column: String) -> String { unicode ? #"lower(\#(column) COLLATE "und-x-icu")"# : "lower(\(column))" }
        let any = fields.map { "strpos(\(lower($0)), k) > 0" }.joined(separator: " OR ")
        return " AND NOT EXISTS (SELECT 1 FROM unnest(\(keywords)::text[]) AS k WHERE NOT (\(unsafeSQL: any)))"
    }
}
