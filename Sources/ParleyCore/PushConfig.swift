/// The offline push options of a message, call or application action (docs/push.md#what-is-pushed-to-whom, the
/// ZIMPushConfig fields): validated once where a request carries them, then stored as JSON for the push bridge.
package enum PushConfig {
    /// VoIP `handle_type` (docs/api.md).
    enum HandleType: String, CaseIterable {
        case generic
        case phoneNumber = "phone_number"
        case emailAddress = "email_address"
    }

    /// Reads the member `key` of `reader`: nil when absent or null; otherwise the object with only the known
    /// fields and every default filled in, so consumers never re-apply defaults. Field errors go to `reader`.
    package static func read(from reader: inout BodyReader, key: String = "push") -> JSONValue? {
        guard reader.contains(key), !reader.isNull(key) else { return nil }
        let config = reader.object(key) { push -> JSONObject in
            var out = JSONObject()
            out["enable"] = .bool(push.bool("enable") ?? true)
            out["title"] = push.string("title", maxBytes: 256).map(JSONValue.string) ?? .null
            out["content"] = push.string("content", maxBytes: 1024).map(JSONValue.string) ?? .null
            out["payload"] = push.string("payload", maxBytes: 4096).map(JSONValue.string) ?? .null
            out["resources_id"] = resourcesID(&push).map(JSONValue.string) ?? .null
            out["enable_badge"] = .bool(push.bool("enable_badge") ?? false)
            out["badge_increment"] = .int(push.int("badge_increment", range: 0...99) ?? 1)
            out["sound"] = push.string("sound", maxBytes: 64).map(JSONValue.string) ?? .null
            out["voip"] = voip(&push) ?? .null
            out["private_message_template"] = privateMessageTemplate(&push) ?? .null
            return out
        }
        return config.map(JSONValue.object)
    }

    /// `resources_id` is limited in characters, not bytes (it names a console-configured resource).
    private static func resourcesID(_ push: inout BodyReader) -> String? {
        guard let id = push.string("resources_id") else { return nil }
        if id.count > 32 {
            push.addError("resources_id", "must be at most 32 characters")
            return nil
        }
        return id
    }

    private static func voip(_ push: inout BodyReader) -> JSONValue? {
        guard !push.isNull("voip") else { return nil }
        return push.object("voip") { voip -> JSONValue in
            let handleType = voip.enumeration("handle_type", HandleType.self) ?? .generic
            return .object([
                "handle_type": .string(handleType.rawValue),
                "handle_value": voip.string("handle_value", maxBytes: 256).map(JSONValue.string) ?? .null,
                "has_video": .bool(voip.bool("has_video") ?? false),
            ])
        }
    }

    /// The template parameters are strings holding a JSON object (the vendors' wire format), checked to parse.
    private static func privateMessageTemplate(_ push: inout BodyReader) -> JSONValue? {
        guard !push.isNull("private_message_template") else { return nil }
        return push.object("private_message_template") { template -> JSONValue in
            var out = JSONObject()
            out["template_id"] = template.string("template_id", maxBytes: 64).map(JSONValue.string) ?? .null
            for key in ["title_parameters", "content_parameters"] {
                guard let text = template.string(key, maxBytes: 1024) else {
                    out[key] = .null
                    continue
                }
                if (try? JSONValue.parse(text))?.objectValue == nil {
                    template.addError(key, "must be a string holding a JSON object")
                }
                out[key] = .string(text)
            }
            return .object(out)
        }
    }
}
