import ParleyAPI
import ParleyCore

/// The gateway request bodies (docs/push.md#how-the-bridge-sends), byte for byte what every try of an attempt sends.
enum PushGateway {
    /// The body of the request for `item` to `userID`'s `devices`. `attemptID` is the generic format's `push_id`;
    /// `now` its `created_at`.
    static func body(
        _ item: PushItem, to userID: String, devices: [Device], unread: Int64?, settings: PushSettings, appID: String,
        attemptID: String, now: Int64
    ) -> [UInt8] {
        switch settings.format {
        case .matrix: matrix(item, to: userID, devices: devices, unread: unread, eventIDOnly: settings.eventIDOnly)
        case .generic:
            generic(item, to: userID, devices: devices, unread: unread, eventIDOnly: settings.eventIDOnly, appID: appID, pushID: attemptID, now: now)
        }
    }

    /// `{"notification": {...}}` of the Matrix Push Gateway API (`/_matrix/push/v1/notify`).
    static func matrix(_ item: PushItem, to userID: String, devices: [Device], unread: Int64?, eventIDOnly: Bool) -> [UInt8] {
        var n = JSONObjectWriter(capacity: 1024)
        n["event_id"] = item.eventID
        n["room_id"] = item.roomID(for: userID)
        n["type"] = item.kind.notificationType
        n["sender"] = item.sender
        if !eventIDOnly {
            n["sender_display_name"] = item.senderName
            n["room_name"] = item.roomName
        }
        n["prio"] = item.priority == 1 ? "low" : "high"
        if item.enableBadge {
            var counts = JSONObjectWriter(capacity: 32)
            counts["unread"] = unread ?? 0
            n.raw("counts", counts.finish())
        }
        if !eventIDOnly { n.raw("content", content(item)) }
        n.write("devices") { w in
            w.beginArray()
            for device in devices {
                var d = JSONObjectWriter(capacity: 256 + device.pushKey.utf8.count)
                d["app_id"] = device.pushAppID
                d["pushkey"] = device.pushKey
                // Matrix wants whole seconds, rounded down.
                d["pushkey_ts"] = device.updatedAt / 1000
                var data = JSONObjectWriter(capacity: 160)
                data["device_id"] = device.deviceID
                data["provider"] = device.provider.rawValue
                data["platform"] = device.platform.rawValue
                data["voip"] = device.voip
                data["apptype"] = device.apptype
                if eventIDOnly { data["format"] = "event_id_only" }
                d.raw("data", data.finish())
                var tweaks = JSONObjectWriter(capacity: 48)
                tweaks["sound"] = item.push["sound"]?.stringValue ?? "default"
                d.raw("tweaks", tweaks.finish())
                w.writeRaw(d.finish())
            }
            w.endArray()
        }
        var o = JSONObjectWriter(capacity: 1200)
        o.raw("notification", n.finish())
        return o.finish()
    }

    /// The `content` object of a Matrix notification.
    private static func content(_ item: PushItem) -> [UInt8] {
        var c = JSONObjectWriter(capacity: 512)
        c["kind"] = item.kind.rawValue
        c["title"] = item.title
        c["body"] = item.content
        c["payload"] = item.push["payload"]?.stringValue
        c["message_type"] = item.messageType.map { Int64($0) }
        c["seq"] = item.seq
        c["sound"] = item.push["sound"]?.stringValue
        c["badge_increment"] = item.push["badge_increment"]?.intValue ?? 1
        c["resources_id"] = item.push["resources_id"]?.stringValue
        c["voip"] = item.push["voip"] ?? .null
        c["call_id"] = item.callID
        c["private_message_template"] = item.push["private_message_template"] ?? .null
        return c.finish()
    }

    /// The generic format: `{push_id, kind, app_id, user_id, created_at, notification, devices}`, signed like a webhook.
    static func generic(
        _ item: PushItem, to userID: String, devices: [Device], unread: Int64?, eventIDOnly: Bool, appID: String, pushID: String, now: Int64
    ) -> [UInt8] {
        var n = JSONObjectWriter(capacity: 768)
        n["title"] = eventIDOnly ? nil : item.title
        n["body"] = eventIDOnly ? nil : item.content
        n["payload"] = item.push["payload"]?.stringValue
        n["sound"] = item.push["sound"]?.stringValue
        n["badge_increment"] = item.push["badge_increment"]?.intValue ?? 1
        n["unread"] = item.enableBadge ? unread ?? 0 : nil
        n["resources_id"] = item.push["resources_id"]?.stringValue
        n["voip"] = item.push["voip"] ?? .null
        n["private_message_template"] = item.push["private_message_template"] ?? .null
        n["conversation_type"] = item.conversationType
        n["conversation_id"] = item.conversationID
        n["message_id"] = item.messageID
        n["message_type"] = item.messageType.map { Int64($0) }
        n["seq"] = item.seq
        n["call_id"] = item.callID
        n["image_url"] = eventIDOnly ? nil : item.imageURL
        var o = JSONObjectWriter(capacity: 1200)
        o["push_id"] = pushID
        o["kind"] = item.kind.rawValue
        o["app_id"] = appID
        o["user_id"] = userID
        o["created_at"] = now
        o.raw("notification", n.finish())
        o.write("devices") { w in
            w.beginArray()
            for device in devices { w.writeRaw(device.json()) }
            w.endArray()
        }
        return o.finish()
    }
}
