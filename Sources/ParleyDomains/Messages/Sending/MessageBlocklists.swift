import ParleyAPI
import ParleyCore

/// Blocklists on message bodies (docs/blocklists.md#where-lists-apply), beside the sensitive-word filter: the texts of
/// text-like bodies (`text`), custom data (`custom`) and the `file_name` of media bodies and media items (`file_name`),
/// each checked by the lists that apply to it and masked in place where a `mask` list matched.
enum MessageBlocklists {
    /// Checks `body` against `snapshot`; the check says which lists matched and what action wins.
    static func check(_ body: inout MessageBody, against snapshot: BlocklistSnapshot) -> BlocklistCheck {
        var check = BlocklistCheck(snapshot)
        if snapshot.isEmpty { return check }
        if snapshot.applies(to: .text) {
            // Read first; the body is rewritten only when a `mask` list changed a text.
            var masked: [String: String] = [:]
            for text in body.filterableTexts {
                let checked = check.check(text, .text)
                if checked != text { masked[text] = checked }
            }
            if !masked.isEmpty { body.mapFilterableTexts { masked[$0] ?? $0 } }
        }
        if body.type == .custom, snapshot.applies(to: .custom) {
            body.json = mapping("data", of: body.json) { check.check($0, .custom) }
        }
        if snapshot.applies(to: .fileName) {
            switch body.type {
            case .image, .file, .audio, .video:
                body.json = mapping("file_name", of: body.json) { check.check($0, .fileName) }
            case .multiple:
                guard case .object(var object) = body.json, case .array(var items)? = object["items"] else { break }
                for i in items.indices {
                    guard case .object(var item) = items[i], let itemBody = item["body"] else { continue }
                    item["body"] = mapping("file_name", of: itemBody) { check.check($0, .fileName) }
                    items[i] = .object(item)
                }
                object["items"] = .array(items)
                body.json = .object(object)
            default:
                break
            }
        }
        return check
    }

    /// Sets the blocklist outcome of a send on its write item: `block` refuses it in the write's check order,
    /// `shadow_block` writes it suppressed; the check rides along so its hit is reported with the outcome.
    static func apply(_ check: BlocklistCheck, to item: inout MessageWrite.Item) {
        guard check.action != nil else { return }
        item.blocklist = check
        item.blocklistBlock = check.blocks
        item.shadowBlock = check.action == .shadowBlock
    }

    /// The hit of a written send: a refused one (`content_blocked`) or a stored one (the Message in the app view);
    /// nil when no list matched or the send ended otherwise (a duplicate, another failure).
    static func hit(of item: MessageWrite.Item, _ written: MessageWrite.Written) -> BlocklistHit? {
        guard let check = item.blocklist else { return nil }
        let target: BlocklistHit.Target
        switch written.outcome {
        case .contentBlocked:
            target = .refusedSend
        case .sent:
            guard case .object(let snapshot)? = try? JSONValue.parse(written.json(.app)) else { return nil }
            target = .message(messageID: written.message.messageID, snapshot: snapshot)
        default:
            return nil
        }
        return check.hit(appID: item.appID, userID: item.message.from, target: target, at: item.now)
    }

    private static func mapping(_ key: String, of json: JSONValue, _ transform: (String) -> String) -> JSONValue {
        guard case .object(var object) = json, let text = object[key]?.stringValue else { return json }
        let mapped = transform(text)
        if mapped != text { object[key] = .string(mapped) }
        return .object(object)
    }
}
