import ParleyAPI
import ParleyCore
import ParleyPostgres

/// The limits of group attributes (docs/groups.md#attributes), checked per key in request order against the keys
/// already set, and the set/delete operations on a locked group.
enum GroupAttributes {
    static let maxKeys = 10
    static let maxKeyBytes = 16
    static let maxValueBytes = 1024
    static let maxTotalBytes = 5120

    /// Why `key` = `value` cannot be set on top of `current`, checked in this order: a new key that would be the 11th,
    /// key empty or over 16 B, value over 1024 B, total of keys plus values over 5120 B.
    static func problem(key: String, value: String, in current: JSONObject) -> ErrorCode? {
        let existing = current[key]?.stringValue
        if existing == nil && current.count >= maxKeys { return .groupAttributeCountExceeded }
        if key.utf8.isEmpty || key.utf8.count > maxKeyBytes { return .groupAttributeKeyTooLong }
        if value.utf8.count > maxValueBytes { return .groupAttributeValueTooLong }
        let total = totalBytes(current) - (existing.map { key.utf8.count + $0.utf8.count } ?? 0) + key.utf8.count + value.utf8.count
        if total > maxTotalBytes { return .groupAttributesTotalExceeded }
        return nil
    }

    static func totalBytes(_ attributes: JSONObject) -> Int {
        attributes.reduce(0) { $0 + $1.key.utf8.count + ($1.value.stringValue?.utf8.count ?? 0) }
    }
}

extension GroupService {
    /// The outcome of one attribute key.
    enum AttributeOutcome: Sendable {
        case applied
        case failed(ErrorCode, String)
    }

    /// Sets `entries` in order (any member may); per key failures leave the others applied. One
    /// `group.attributes_updated` lists the applied keys.
    func setAttributes(_ groupID: String, actor: Actor, entries: [(key: String, value: String)]) throws -> [AttributeOutcome] {
        try changeAttributes(groupID, actor: actor, action: "set") { attributes in
            entries.map { key, value in
                if let code = GroupAttributes.problem(key: key, value: value, in: attributes) {
                    return (.failed(code, "attribute \(key): \(code.name)"), nil)
                }
                attributes[key] = .string(value)
                return (.applied, (key, value))
            }
        }
    }

    /// Deletes `keys`; a key that is not set fails with `group_attribute_not_found`.
    func deleteAttributes(_ groupID: String, actor: Actor, keys: [String]) throws -> [AttributeOutcome] {
        try changeAttributes(groupID, actor: actor, action: "delete") { attributes in
            keys.map { key in
                guard attributes[key] != nil else { return (.failed(.groupAttributeNotFound, "attribute \(key) is not set"), nil) }
                attributes[key] = nil
                return (.applied, (key, ""))
            }
        }
    }

    /// Lock, membership, `apply` to the attributes, save and the one event with the applied keys.
    private func changeAttributes(
        _ groupID: String, actor: Actor, action: String,
        _ apply: (inout JSONObject) -> [(AttributeOutcome, (key: String, value: String)?)]
    ) throws -> [AttributeOutcome] {
        try db.transaction { db in
            var group = try lockActive(groupID, on: db)
            _ = try operatorMember(actor, group, on: db)
            let results = apply(&group.attributes)
            let applied = results.compactMap(\.1)
            guard !applied.isEmpty else { return results.map(\.0) }
            try GroupStore.save(appID: appID, group, on: db)
            var data = JSONObjectWriter()
            data["group_id"] = groupID
            data["action"] = action
            data["attributes"] = JSONObject(applied.map { ($0.key, JSONValue.string($0.value)) })
            data["operator"] = actor.userID
            let audience = try GroupStore.memberIDs(appID: appID, groupID: groupID, on: db)
            try EventLog.append([event("group.attributes_updated", group, data, audience)], appID: appID, now: now, on: db)
            return results.map(\.0)
        }
    }
}
