import ParleyAPI
import ParleyCore

/// The message audience (docs/events.md#the-event-object) for the events of a change to a stored message
/// (`message.revoked`, `message.edited`, `message.deleted` for everyone, `message.pin_updated`,
/// `message.reactions_updated`, `message.reply_count_updated`): computed at the commit of the change — both peers, or
/// the group's or room's members when the event is written (`toGroupMembers`); a suppressed message's events stay with
/// its sender, and a targeted message's go to its sender and the members it lists.
enum MessageAudience {
    /// The event `type` with `data` about `message`, to its audience, ordered with its conversation
    /// (docs/webhooks.md#how-deliveries-are-made).
    static func event(_ type: String, data: [UInt8], about message: Message) -> NewEvent {
        let delivered = message.suppressed == nil
        // A targeted group message (docs/messages.md#targeted-group-messages): its sender and the members it lists,
        // never the rest of the group (their streams and logs do not learn it exists).
        if delivered, message.conversationType == .group, let visibleTo = message.visibleTo {
            var audience = [message.from]
            for id in visibleTo where id != message.from { audience.append(id) }
            return NewEvent(type: type, data: data, audience: audience, groupID: message.to, orderKey: orderKey(of: message))
        }
        let isGroup = message.conversationType == .group && delivered
        let isRoom = message.conversationType == .room && delivered
        let audience = isGroup || isRoom ? [] : delivered ? [message.from, message.to] : [message.from]
        return NewEvent(
            type: type, data: data, audience: audience, groupID: isGroup ? message.to : nil, roomID: isRoom ? message.to : nil,
            toGroupMembers: isGroup || isRoom, orderKey: orderKey(of: message))
    }

    /// The event `type` with `data` about `message` to its sender only (`message.receipt_updated`,
    /// docs/events.md#the-event-object), ordered with its conversation.
    static func senderEvent(_ type: String, data: [UInt8], about message: Message) -> NewEvent {
        NewEvent(type: type, data: data, audience: [message.from], orderKey: orderKey(of: message))
    }

    /// The webhook ordering key of `message`'s events (docs/webhooks.md#ordering): its conversation.
    private static func orderKey(of message: Message) -> String {
        message.conversationType.rawValue + ":" + MessageStore.thread(message.conversationType, message.from, message.to)
    }
}
