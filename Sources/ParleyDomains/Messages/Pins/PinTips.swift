import ParleyAPI
import ParleyCore
import ParleyPostgres

/// Writes the tips message (type 32, event 9, change type 20, docs/groups.md#tips-messages) of a message pin or unpin
/// into the pinned message's own conversation, peer or group.
///
/// The group actions' tips live with the groups (`GroupTips`); a pin is a message action below the group domain and
/// may change a peer conversation too, so its tips is written here, through the same ``MessageWrite`` (the one seq
/// allocator). A value per tips message; it owns nothing mutable.
struct PinTips: Sendable {
    /// `body.event` of a pin change.
    static let event: Int64 = 9
    /// `body.change.type` of a pin change.
    static let changeType: Int64 = 20

    /// The pinned or unpinned message.
    var message: Message
    var isPinned: Bool
    /// The user who acted; nil when the app acted without `operator`.
    var operatorID: String?
    /// The tips' sender when the app acted without `operator`: the group owner, or the pinned message's sender.
    var fallbackFrom: String

    /// Stores the tips message as the next message of the pinned message's conversation and returns its
    /// `message.sent` event, for the caller to append after `message.pin_updated`. Written without checks: the pin
    /// itself was checked.
    func write(appID: String, now: Int64, on db: PostgresConnection) throws -> NewEvent {
        let from = operatorID ?? fallbackFrom
        // A peer tips goes between the two participants, whichever of them it is from.
        let to =
            message.conversationType == .peer ? (from == message.from ? message.to : message.from) : message.to
        let tips = Message(
            messageID: IdentifierKind.generateSortableID(prefix: "m", timestampMs: now), clientMsgID: nil,
            type: MessageType.tips.rawValue, conversationType: message.conversationType, from: from, to: to, seq: 0,
            timestamp: now, body: try body(appID: appID, on: db), extendedData: "", mentionIDs: [], mentionAll: false,
            reply: nil, rootMessageID: nil, replyCount: 0, priority: 2, needReceipt: false, noUnread: false,
            onlineOnly: false, repeatCount: 1, push: nil, suppressed: nil, deleted: false, visibleTo: tipsAudience(from: from))
        let item = MessageWrite.Item(
            appID: appID, now: now, message: tips, threadID: MessageStore.thread(message.conversationType, from, to),
            contentHash: "", checks: .none)
        guard let written = try MessageWrite.write([item], on: db).first, written.outcome == .sent,
            let event = MessageWrite.events(of: written).first
        else { throw APIError(.internalError, "pin tips of message \(message.messageID) not stored") }
        return event
    }

    /// Who sees the tips of a targeted message's pin besides its sender `from`: the message's own audience (its sender
    /// and the members it lists), so the rest of the group does not learn of it (docs/messages.md#targeted-group-messages);
    /// nil (everyone) for any other message.
    private func tipsAudience(from: String) -> [String]? {
        guard let visibleTo = message.visibleTo else { return nil }
        var seen: Set<String> = [from]
        return ([message.from] + visibleTo).filter { seen.insert($0).inserted }
    }

    /// The tips body: `{event: 9, operator, targets: [], change: {type: 20, message_id, is_pinned}}`.
    private func body(appID: String, on db: PostgresConnection) throws -> [UInt8] {
        var o = JSONObjectWriter(capacity: 192)
        o["event"] = Self.event
        if let operatorID {
            let name = try UserStore.fetchMany(appID: appID, userIDs: [operatorID], on: db).first?.name ?? ""
            o.write("operator") { w in
                w.object { w in
                    w.key("user_id")
                    w.writeString(operatorID)
                    w.key("name")
                    w.writeString(name)
                }
            }
        } else {
            o["operator"] = nil
        }
        o.write("targets") { w in w.array { _ in } }
        o.write("change") { w in
            w.object { w in
                w.key("type")
                w.writeInt(Self.changeType)
                w.key("message_id")
                w.writeString(message.messageID)
                w.key("is_pinned")
                w.writeBool(isPinned)
            }
        }
        return o.finish()
    }
}
