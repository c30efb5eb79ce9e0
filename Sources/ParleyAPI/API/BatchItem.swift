import ParleyCore

/// One input id of a batch request (docs/errors.md#problems-rfc-9457): its natural key and, when valid, the id to act
/// on.
package struct BatchItem {
    package var id: String
    /// Nil when the item failed validation (then `problem` says why).
    package var userID: String?
    package var problem: String?

    package init(id: String, userID: String? = nil, problem: String? = nil) {
        self.id = id
        self.userID = userID
        self.problem = problem
    }
}

extension BodyReader {
    /// The user-id items of the array `key` (request-level errors, such as its count, go to the reader): a
    /// non-string or malformed id, or a repeated one after its first occurrence, fails only its own item with
    /// `invalid_params` (docs/errors.md#problems-rfc-9457).
    package mutating func batchIDs(
        _ key: String = "user_ids", minItems: Int = 1, maxItems: Int = 100, required: Bool = true, kind: IdentifierKind = .userID
    ) -> [BatchItem] {
        guard let raw = array(key, required: required, minItems: minItems, maxItems: maxItems) else { return [] }
        var items: [BatchItem] = []
        var seen: Set<String> = []
        for (index, value) in raw.enumerated() {
            let path = "\(fieldPath(key))[\(index)]"
            guard case .string(let userID) = value else {
                items.append(BatchItem(id: "", problem: "\(path): expected string, got \(value.typeName)"))
                continue
            }
            if let problem = kind.problem(userID) {
                items.append(BatchItem(id: userID, problem: "\(path): \(problem)"))
            } else if !seen.insert(userID).inserted {
                items.append(BatchItem(id: userID, problem: "\(userID) is repeated in this request"))
            } else {
                items.append(BatchItem(id: userID, userID: userID))
            }
        }
        return items
    }
}

extension BatchResult {
    /// One result per item, in input order: invalid items fail with `invalid_params`, valid ones get `outcome`.
    package static func results(_ items: [BatchItem], _ outcome: (String) -> BatchResult.Outcome) -> [BatchResult] {
        items.enumerated().map { index, item in
            guard let id = item.userID else {
                return BatchResult(index: index, id: item.id, outcome: .failed(.invalidParams, item.problem ?? "invalid"))
            }
            return BatchResult(index: index, id: id, outcome: outcome(id))
        }
    }
}
