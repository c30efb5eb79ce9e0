import ParleyAPI
import ParleyCore

/// One entry of a friend list (docs/social.md#friends): the owner's alias, attributes and add postscript for the
/// friend, with the friend's public profile joined in.
///
/// A value read from one `friends` row (joined with the friend's `users` row); services build it and render it.
struct Friend: Sendable, Equatable {
    /// The friend (the `friend_id` column; `user_id` on the wire).
    var userID: String
    package var name: String
    var avatarURL: String
    var alias: String
    var attributes: JSONObject
    var wording: String
    package var createdAt: Int64
    var updatedAt: Int64

    /// The Friend JSON object.
    var json: [UInt8] {
        var o = JSONObjectWriter(capacity: 192 + name.utf8.count + avatarURL.utf8.count + alias.utf8.count + wording.utf8.count)
        o["user_id"] = userID
        o["name"] = name
        o["avatar_url"] = avatarURL
        o["alias"] = alias
        o["attributes"] = attributes
        o["wording"] = wording
        o["created_at"] = createdAt
        o["updated_at"] = updatedAt
        return o.finish()
    }

    /// Longest `alias` and `wording`, in bytes.
    static let maxAliasBytes = 256
    static let maxWordingBytes = 256
    /// Most entries one friend list may hold (more: 422 `6000801`).
    static let maxFriends = 3000

    /// The `relation` of a check (docs/api.md).
    enum Relation: String, Sendable {
        case singleNo = "single_no"
        case singleHave = "single_have"
        case bothAllNo = "both_all_no"
        case bothSelfHave = "both_self_have"
        case bothOtherHave = "both_other_have"
        case bothAllHave = "both_all_have"

        /// The relation seen from the owner: `single` looks at the owner's list only, `both` at both lists.
        init(mode: DeleteMode, ownerHas: Bool, otherHas: Bool) {
            switch (mode, ownerHas, otherHas) {
            case (.single, false, _): self = .singleNo
            case (.single, true, _): self = .singleHave
            case (.both, false, false): self = .bothAllNo
            case (.both, true, false): self = .bothSelfHave
            case (.both, false, true): self = .bothOtherHave
            case (.both, true, true): self = .bothAllHave
            }
        }
    }

    /// The delete / check `mode` (docs/api.md): `both` covers both lists, `single` only the owner's.
    enum DeleteMode: String, CaseIterable, Sendable {
        case both, single
    }
}

/// Friend attributes (docs/social.md): at most the keys `k0`–`k4`, string values of at most 256 bytes.
enum FriendAttributes {
    package static let keys: Set<String> = ["k0", "k1", "k2", "k3", "k4"]
    static let maxValueBytes = 256

    /// Reads the object member `key` of `reader` (nil when absent or invalid; errors go to `reader`). Values are
    /// returned as given, `""` included: a patch uses it to remove a key, a create drops it (see ``merged(_:_:)``).
    static func read(from reader: inout BodyReader, key: String = "attributes") -> JSONObject? {
        reader.object(key) { attributes -> JSONObject in
            var out = JSONObject()
            for (name, value) in attributes.object {
                guard keys.contains(name) else {
                    attributes.addError(name, "only the keys k0 to k4 are allowed")
                    continue
                }
                guard let text = value.stringValue else {
                    attributes.addError(name, "expected string, got \(value.typeName)")
                    continue
                }
                if let problem = BodyReader.lengthProblem(text, minBytes: 0, maxBytes: maxValueBytes) {
                    attributes.addError(name, problem)
                    continue
                }
                out[name] = .string(text)
            }
            return out
        }
    }

    /// `base` with `patch` applied key by key: a value replaces, `""` removes. Keys come out in `k0`…`k4` order, so
    /// equal attribute sets render identically.
    static func merged(_ base: JSONObject, _ patch: JSONObject) -> JSONObject {
        var out = JSONObject()
        for name in keys.sorted() {
            let value = patch.contains(name) ? patch[name] : base[name]
            if let value, value != .string("") { out[name] = value }
        }
        return out
    }
}
