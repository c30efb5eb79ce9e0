import ParleyAPI
import ParleyCore
import ParleyPostgres

/// Writes the tips messages (type 32, docs/groups.md#tips-messages) of group actions: the one place a tips message is
/// stored and its `message.sent` event built, called by each group action inside its transaction.
///
/// A value per tips message; it owns nothing mutable.
struct GroupTips: Sendable {
    /// `body.event`: what happened to the group.
    enum Event: Int64, Sendable {
        case created = 1
        case dismissed = 2
        case joined = 3
        case invited = 4
        case left = 5
        case kicked = 6
        case groupChanged = 7
        case memberChanged = 8
    }

    /// `body.change`: the detail of the events that carry one.
    enum Change: Sendable, Equatable {
        /// Name, notice and/or avatar update: the new values of the changed fields only (nil = unchanged).
        case groupData(name: String?, notice: String?, avatarURL: String?)
        /// Group mute (type 5).
        case groupMute(Group.Mute)
        /// Ownership moved (type 10): by transfer, or by owner continuity on a leave or kick.
        case newOwner(String)
        /// Member role set (type 11).
        case role(Int64)
        /// Member mute set or lifted (type 12).
        case mutedUntil(Int64)

        /// Bits of `group_data_flag`: which group fields a type 1–4 change touched (1 name, 2 notice, 4 avatar_url).
        static let nameFlag: Int64 = 1
        static let noticeFlag: Int64 = 2
        static let avatarFlag: Int64 = 4

        /// The `change` object, with only the keys of its type.
        var json: [UInt8] {
            var o = JSONObjectWriter(capacity: 128)
            switch self {
            case .groupData(let name, let notice, let avatarURL):
                let flag =
                    (name != nil ? Self.nameFlag : 0) | (notice != nil ? Self.noticeFlag : 0) | (avatarURL != nil ? Self.avatarFlag : 0)
                // One field changed: its own type (3 name, 2 notice, 4 avatar); several: 1.
                let type: Int64 =
                    switch flag {
                    case Self.nameFlag: 3
                    case Self.noticeFlag: 2
                    case Self.avatarFlag: 4
                    default: 1
                    }
                o["type"] = type
                o["group_data_flag"] = flag
                o.setIfPresent("name", name)
                o.setIfPresent("notice", notice)
                o.setIfPresent("avatar_url", avatarURL)
            case .groupMute(let mute):
                o["type"] = Int64(5)
                o.raw("mute", mute.json)
            case .newOwner(let userID):
                o["type"] = Int64(10)
                o["new_owner_id"] = userID
            case .role(let role):
                o["type"] = Int64(11)
                o["role"] = role
            case .mutedUntil(let until):
                o["type"] = Int64(12)
                o["muted_until"] = until
            }
            return o.finish()
        }
    }

    var event: Event
    /// The user who acted; nil when the app acted without `operator` (the message is then from the group owner).
    var operatorID: String?
    /// The users the action applied to, in request order (empty for dismiss, group data and group mute).
    var targets: [String] = []
    var change: Change?

    /// Stores the tips message as the next message of `group`'s conversation and returns its `message.sent` event
    /// for the caller to append after the action's membership event (dismissal: before `group.dismissed`).
    ///
    /// Written by ``MessageWrite`` like any group send (the one seq allocator), from the operator or the owner,
    /// without checks: the action itself was checked.
    func write(appID: String, group: Group, now: Int64, on db: PostgresConnection) throws -> NewEvent {
        let from = operatorID ?? group.ownerID
        let message = Message(
            messageID: IdentifierKind.generateSortableID(prefix: "m", timestampMs: now), clientMsgID: nil,
            type: MessageType.tips.rawValue, conversationType: .group, from: from, to: group.groupID, seq: 0, timestamp: now,
            body: try self.body(appID: appID, on: db), extendedData: "", mentionIDs: [], mentionAll: false, reply: nil,
            rootMessageID: nil, replyCount: 0, priority: 2, needReceipt: false, noUnread: false, onlineOnly: false, repeatCount: 1,
            push: nil, suppressed: nil, deleted: false)
        let item = MessageWrite.Item(appID: appID, now: now, message: message, threadID: group.groupID, contentHash: "", checks: .none)
        guard let written = try MessageWrite.write([item], on: db).first, written.outcome == .sent,
            let event = MessageWrite.events(of: written).first
        else { throw APIError(.internalError, "tips message of group \(group.groupID) not stored") }
        return event
    }

    /// The tips body: `{event, operator, targets, change}` with the users' current names.
    private func body(appID: String, on db: PostgresConnection) throws -> [UInt8] {
        let users = try UserStore.fetchMany(appID: appID, userIDs: GroupService.distinct(targets + (operatorID.map { [$0] } ?? [])), on: db)
        let names = Dictionary(users.map { ($0.userID, $0.name) }, uniquingKeysWith: { a, _ in a })
        func writeUser(_ w: inout JSONWriter, _ userID: String) {
            w.object { w in
                w.key("user_id")
                w.writeString(userID)
                w.key("name")
                w.writeString(names[userID] ?? "")
            }
        }
        var o = JSONObjectWriter(capacity: 128 + 64 * targets.count)
        o["event"] = event.rawValue
        if let operatorID {
            o.write("operator") { w in writeUser(&w, operatorID) }
        } else {
            o["operator"] = nil
        }
        o.write("targets") { w in
            w.array { w in for id in targets { writeUser(&w, id) } }
        }
        if let change {
            o.raw("change", change.json)
        } else {
            o["change"] = nil
        }
        return o.finish()
    }
}
