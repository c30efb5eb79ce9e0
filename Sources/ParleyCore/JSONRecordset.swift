/// Rows sent to PostgreSQL as one JSON array that a statement reads with `json_to_recordset(…) AS x(<columns>)`.
///
/// The members each row writes and the statement's column list come from one table of fields, so the two cannot drift
/// apart: a field added, renamed or retyped changes both. A batch of rows costs one bind parameter and no text-array
/// escaping, whatever its size.
public struct JSONRecordset<Row>: Sendable {
    /// One column: its member name (also the `json_to_recordset` column), its SQL type, and how a row at position
    /// `index` of its batch writes the value.
    public struct Field: Sendable {
        public let name: StaticString
        public let type: String
        public let write: @Sendable (inout JSONWriter, Row, Int) -> Void

        public init(name: StaticString, type: String, write: @escaping @Sendable (inout JSONWriter, Row, Int) -> Void) {
            self.name = name
            self.type = type
            self.write = write
        }
    }

    public let fields: [Field]
    /// The column list for `json_to_recordset(…) AS x(…)`, a few columns a line (statements stay readable in the
    /// server's logs).
    public let columnList: String

    public init(_ fields: [Field]) {
        self.fields = fields
        let columns = fields.map { "\($0.name) \($0.type)" }
        columnList = stride(from: 0, to: columns.count, by: 8)
            .map { columns[$0..<min($0 + 8, columns.count)].joined(separator: ", ") }
            .joined(separator: ",\n")
    }

    /// The rows as one JSON array: an object per row with a member per field, in the table's order. `capacity` is the
    /// expected size in bytes (512 a row unless told).
    public func json(_ rows: [Row], capacity: Int? = nil) -> String {
        var w = JSONWriter(capacity: max(64, capacity ?? 512 * rows.count))
        w.beginArray()
        for (index, row) in rows.enumerated() {
            w.object { w in
                for field in fields {
                    w.key(static: field.name)
                    field.write(&w, row, index)
                }
            }
        }
        w.endArray()
        return String(decoding: w.bytes, as: UTF8.self)
    }
}
