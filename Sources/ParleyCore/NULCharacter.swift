/// U+0000 is refused in every piece of request text: PostgreSQL `text` and `jsonb` cannot hold it, so a NUL that
/// reached a statement was a 500 (issue 16: ~25 operations). Storing it escaped would change what clients read back
/// and what `q` filters match, so the rule is to refuse it, at the two places request text enters, for every route:
/// JSON bodies in `BodyReader.parse` (every string and member name, at any depth, unknown members included) and path
/// and query parameters in the request pipeline (`RequestPipeline.refuseNUL`). The answer is 400 `6000001` naming
/// each field; headers cannot carry it (the HTTP parser refuses control characters there).
package enum NULCharacter {
    /// The `errors[].message` of a field holding U+0000.
    package static let message = "must not contain U+0000 (NUL)"

    package static func isIn(_ text: String) -> Bool { text.utf8.contains(0) }

    /// A field error for each string in `value` that holds U+0000, and for each object whose member names do (the
    /// object is named: its member name would repeat the NUL). `path` is `value`'s own path; members are `path.key`
    /// (bare `key` when `path` is empty), items `path[i]`.
    package static func fields(in value: JSONValue, path: String, into errors: inout [FieldError]) {
        switch value {
        case .string(let s):
            if isIn(s) { errors.append(FieldError(field: path.isEmpty ? "body" : path, message: message)) }
        case .array(let items):
            for (i, item) in items.enumerated() { fields(in: item, path: "\(path)[\(i)]", into: &errors) }
        case .object(let object):
            var badName = false
            for member in object {
                if isIn(member.key) {
                    badName = true
                    continue
                }
                fields(in: member.value, path: path.isEmpty ? member.key : "\(path).\(member.key)", into: &errors)
            }
            if badName {
                errors.append(FieldError(field: path.isEmpty ? "body" : path, message: "member names " + message))
            }
        case .null, .bool, .int, .double:
            break
        }
    }
}
