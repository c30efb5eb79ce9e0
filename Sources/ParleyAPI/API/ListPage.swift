import ParleyCore
import ParleyHTTP

/// The list responses of docs/api.md (`{items, next_cursor}`) built from `limit + 1` rows read in the list's order, and
/// their cursors: the values of the last row's sort keys, sealed for that list (``CursorCodec``).
package enum ListPage {
    /// The values of `cursor` for `list` (nil without a cursor); a cursor of another shape → 400 `7000007`.
    package static func cursorValues(_ ctx: APIContext, _ cursor: String?, list: String, count: Int) throws -> [JSONValue]? {
        guard let cursor else { return nil }
        let values = try ctx.decodeCursor(cursor, list: list)
        guard values.count == count else { throw malformedCursor() }
        return values
    }

    package static func malformedCursor() -> APIError { APIError(.invalidCursor, "malformed cursor") }

    /// A list page: the first `limit` rows, and the cursor of the last one when more exist.
    package static func page<T>(
        _ rows: [T], limit: Int, list: String, ctx: APIContext, _ key: (T) -> [JSONValue], _ json: (T) -> [UInt8]
    ) -> Response {
        let page = rows.prefix(limit)
        let next = rows.count > limit ? page.last.map { ctx.cursors.encode(list: list, values: key($0)) } : nil
        return Reply.list(page.map(json), nextCursor: next)
    }
}
