import ParleyAPI
import ParleyCore
import ParleyPostgres

/// Room attributes and member attributes (docs/rooms.md#room-attributes, docs/rooms.md#member-attributes).
extension RoomService {
    /// The options of an attribute set, delete or batch.
    struct AttributeOptions: Sendable {
        var force = false
        var updateOwner = false
        var deleteAfterOwnerLeft = false
    }

    /// One operation of a set, delete or atomic batch, in request order.
    enum AttributeOperation: Sendable {
        case set(key: String, value: String)
        case delete(key: String)

        var key: String {
            switch self {
            case .set(let key, _), .delete(let key): key
            }
        }
    }

    /// The outcome of one operation: applied, or failed with its code.
    enum ItemOutcome: Sendable {
        case applied
        case failed(ErrorCode, String)
    }

    func attributes(of roomID: String) throws -> [RoomAttribute] {
        try RoomStore.attributes(appID: appID, roomID: roomID, on: db)
    }

    /// Applies `operations` in request order on the locked room. Not atomic: each failure leaves the others applied,
    /// and one `room.attributes_updated` lists the applied keys (every operation of a call has the same action).
    /// Atomic (the batch): nothing is applied when one fails, the others fail with `room_batch_aborted`, and one
    /// `room.attributes_batch_updated` lists every operation.
    func changeAttributes(_ roomID: String, op: Operator, _ operations: [AttributeOperation], options: AttributeOptions, atomic: Bool)
        throws -> [ItemOutcome]
    {
        try db.transaction { db in
            _ = try lock(roomID, on: db)
            try requireOperator(op, in: roomID, on: db)
            var current: [String: RoomAttribute] = [:]
            for a in try RoomStore.attributes(appID: appID, roomID: roomID, on: db) { current[a.key] = a }
            let before = current
            var outcomes: [ItemOutcome] = []
            var applied: [(action: String, key: String, value: String)] = []
            for operation in operations {
                if let (code, message) = problem(operation, current: current, op: op, options: options) {
                    outcomes.append(.failed(code, message))
                    continue
                }
                switch operation {
                case .set(let key, let value):
                    let existing = current[key]
                    let owner = existing == nil || options.updateOwner ? op.userID : existing?.ownerID
                    current[key] = RoomAttribute(
                        key: key, value: value, ownerID: owner, deleteAfterOwnerLeft: options.deleteAfterOwnerLeft, updatedAt: now)
                    applied.append(("set", key, value))
                case .delete(let key):
                    current[key] = nil
                    applied.append(("delete", key, ""))
                }
                outcomes.append(.applied)
            }
            if atomic && applied.count < operations.count {
                return outcomes.map {
                    if case .failed = $0 { return $0 }
                    return .failed(.roomBatchAborted, "not applied: another operation of the batch failed")
                }
            }
            guard !applied.isEmpty else { return outcomes }
            let deleted = before.keys.filter { current[$0] == nil }
            let set = current.values.filter { before[$0.key] != $0 }
            try RoomStore.writeAttributes(appID: appID, roomID: roomID, set: Array(set), deleted: Array(deleted), on: db)
            let event: NewEvent
            if atomic {
                var data = JSONObjectWriter(capacity: 512)
                data["room_id"] = roomID
                data.write("updates") { w in
                    w.array { w in
                        for a in applied {
                            var u = JSONObjectWriter(capacity: 64)
                            u["action"] = a.action
                            u["attributes"] = JSONObject([(a.key, JSONValue.string(a.value))])
                            w.writeRaw(u.finish())
                        }
                    }
                }
                data["operator"] = op.userID
                event = self.event("room.attributes_batch_updated", roomID, data)
            } else {
                event = attributesUpdated(roomID, action: applied[0].action, applied.map { ($0.key, $0.value) }, operator: op.userID)
            }
            try EventLog.append([event], appID: appID, now: now, on: db)
            return outcomes
        }
    }

    /// Why `operation` fails on top of `current`: for a delete, a missing key then someone else's key; for a set,
    /// someone else's key, then the quotas in the order of ``Room/attributeProblem``.
    private func problem(_ operation: AttributeOperation, current: [String: RoomAttribute], op: Operator, options: AttributeOptions)
        -> (ErrorCode, String)?
    {
        let key = operation.key
        let existing = current[key]
        if case .delete = operation, existing == nil { return (.roomAttributeNotFound, "attribute \(key) is not set") }
        // The app without `operator` always forces; a key owned by the app (null) is someone else's for any user.
        if let existing, let userID = op.userID, existing.ownerID != userID, !options.force {
            return (.roomAttributeOwned, "attribute \(key) is owned by \(existing.ownerID ?? "the app")")
        }
        guard case .set(_, let value) = operation else { return nil }
        if let code = RoomLimits.attributeProblem(key: key, value: value, in: current.mapValues(\.value)) {
            return (code, "attribute \(key): \(code.name)")
        }
        return nil
    }

    // MARK: - Member attributes

    /// The outcome of one user of a member-attribute set: its full set after, or its failure.
    enum MemberAttributesOutcome: Sendable {
        case applied([String: String])
        case failed(ErrorCode, String)
    }

    /// Sets (`""` removes) `pairs` on each of `userIDs` in order, each checked on its full set after the change;
    /// one `room.member_attributes_updated` lists the users changed.
    func setMemberAttributes(
        _ roomID: String, op: Operator, userIDs: [String], pairs: [(key: String, value: String)], deleteAfterOwnerLeft: Bool
    ) throws -> [String: MemberAttributesOutcome] {
        try db.transaction { db in
            _ = try lock(roomID, on: db)
            try requireOperator(op, in: roomID, on: db)
            let members = try RoomStore.members(appID: appID, roomID: roomID, among: userIDs, on: db)
            let current = try RoomStore.memberAttributes(appID: appID, roomID: roomID, userIDs: userIDs, on: db)
            var holders = try RoomStore.usersWithMemberAttributes(appID: appID, roomID: roomID, on: db)
            var outcomes: [String: MemberAttributesOutcome] = [:]
            var infos: [(userID: String, attributes: [String: String])] = []
            for userID in userIDs {
                guard members.contains(userID) else {
                    outcomes[userID] = .failed(.notInRoom, "user \(userID) is not in room \(roomID)")
                    continue
                }
                let before = current[userID] ?? [:]
                var after = before
                for (key, value) in pairs { after[key] = value.isEmpty ? nil : value }
                if let code = RoomLimits.memberAttributesProblem(after: after, changed: pairs) {
                    outcomes[userID] = .failed(code, "member attributes of \(userID): \(code.name)")
                    continue
                }
                if before.isEmpty && !after.isEmpty {
                    guard holders < Int64(RoomLimits.maxUsersWithMemberAttributes) else {
                        outcomes[userID] = .failed(
                            .memberAttributesUsersExceeded, "more than \(RoomLimits.maxUsersWithMemberAttributes) users would hold attributes")
                        continue
                    }
                    holders += 1
                } else if !before.isEmpty && after.isEmpty {
                    holders -= 1
                }
                try RoomStore.writeMemberAttributes(
                    appID: appID, roomID: roomID, userID: userID, pairs: pairs, deleteAfterOwnerLeft: deleteAfterOwnerLeft, on: db)
                outcomes[userID] = .applied(after)
                infos.append((userID, after))
            }
            guard !infos.isEmpty else { return outcomes }
            var data = JSONObjectWriter(capacity: 256)
            data["room_id"] = roomID
            data.write("infos") { w in
                w.array { w in for info in infos { w.writeRaw(Self.memberAttributesJSON(info.userID, info.attributes)) } }
            }
            data["operator"] = op.userID
            try EventLog.append([event("room.member_attributes_updated", roomID, data)], appID: appID, now: now, on: db)
            return outcomes
        }
    }

    /// The member attributes of `userIDs`, for those in the room (the others are absent).
    func memberAttributes(of roomID: String, userIDs: [String]) throws -> [String: [String: String]] {
        let members = try RoomStore.members(appID: appID, roomID: roomID, among: userIDs, on: db)
        let current = try RoomStore.memberAttributes(appID: appID, roomID: roomID, userIDs: Array(members), on: db)
        return Dictionary(uniqueKeysWithValues: members.map { ($0, current[$0] ?? [:]) })
    }

    func memberAttributesList(of roomID: String, after: String?, limit: Int) throws -> [(userID: String, attributes: [String: String])] {
        try RoomStore.listMemberAttributes(appID: appID, roomID: roomID, after: after, limit: limit, on: db)
    }

    /// `{user_id, attributes}` with the keys in byte order.
    static func memberAttributesJSON(_ userID: String, _ attributes: [String: String]) -> [UInt8] {
        var o = JSONObjectWriter(capacity: 64 + attributes.count * 24)
        o["user_id"] = userID
        let sorted = attributes.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
        o["attributes"] = JSONObject(sorted.map { ($0.key, JSONValue.string($0.value)) })
        return o.finish()
    }
}
