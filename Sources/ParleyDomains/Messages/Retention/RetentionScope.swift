import ParleyAPI
import ParleyCore
import ParleyPostgres

/// What a retention policy or a legal hold covers (docs/retention.md#scopes): the whole app, every conversation of a
/// type, one conversation, or (holds only) one user.
struct RetentionScope: Sendable {
    enum Kind: String, CaseIterable, Sendable {
        case app, peer, group, room, user
    }

    var type: Kind
    /// One conversation's `conv_id` (a peer pair is "a b", smaller id first), the user of a `user` scope, or "" for
    /// every conversation of the type (and for `app`).
    var target: String
    /// The scope as answered: its members in documented order.
    var json: JSONObject

    /// How specific it is: one conversation (2) wins over a conversation type (1), which wins over the app (0).
    var rank: Int { type == .app ? 0 : target.isEmpty ? 1 : 2 }

    /// Reads the `scope` member; `allowed` lists the types this object takes (policies: no `user`; holds: no `app`).
    static func read(_ body: inout BodyReader, allowed: [Kind]) -> RetentionScope? {
        let scope = body.object("scope", required: true) { s -> RetentionScope? in
            guard let type = s.enumeration("type", Kind.self, required: true) else { return nil }
            guard allowed.contains(type) else {
                s.addError("type", "must be one of " + allowed.map(\.rawValue).joined(separator: ", "))
                return nil
            }
            switch type {
            case .app:
                return RetentionScope(type: .app, target: "", json: ["type": .string("app")])
            case .user:
                guard let userID = s.id("user_id", .userID, required: true) else { return nil }
                return RetentionScope(type: .user, target: userID, json: ["type": .string("user"), "user_id": .string(userID)])
            case .group, .room:
                let key = type == .group ? "group_id" : "room_id"
                guard s.contains(key) else { return RetentionScope(type: type, target: "", json: ["type": .string(type.rawValue)]) }
                guard let id = s.id(key, type == .group ? .groupID : .roomID) else { return nil }
                return RetentionScope(type: type, target: id, json: ["type": .string(type.rawValue), key: .string(id)])
            case .peer:
                guard s.contains("user_ids") else { return RetentionScope(type: .peer, target: "", json: ["type": .string("peer")]) }
                guard let ids = s.stringArray("user_ids", minItems: 2, maxItems: 2, itemKind: .userID) else { return nil }
                guard ids[0] != ids[1] else {
                    s.addError("user_ids", "must name two different users")
                    return nil
                }
                let pair = MessageStore.peerThread(ids[0], ids[1])
                return RetentionScope(
                    type: .peer, target: pair, json: ["type": .string("peer"), "user_ids": .array(ids.sorted().map(JSONValue.string))])
            }
        }
        return scope ?? nil
    }

    /// The scope back from its stored columns.
    init(type: Kind, target: String, json: JSONObject) {
        self.type = type
        self.target = target
        self.json = json
    }
}
