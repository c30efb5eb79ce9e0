/// URL members: the media URLs of message bodies, webhook endpoints and the push gateway are all absolute
/// `http`/`https` URLs of at most 2048 bytes (avatars, webhook and gateway URLs).
extension BodyReader {
    /// The longest URL the API accepts, in UTF-8 bytes.
    static let maxURLBytes = 2048

    /// A string member that must be an absolute `http`/`https` URL of at most `maxBytes` UTF-8 bytes.
    ///
    /// The server never fetches these URLs (message media) or fetches them later (webhooks), so the check is
    /// syntactic: a scheme, a non-empty host, an optional numeric port, and no whitespace or control characters.
    package mutating func httpURL(_ key: String, required: Bool = false, maxBytes: Int = maxURLBytes) -> String? {
        guard let url = string(key, required: required, minBytes: 1, maxBytes: maxBytes) else { return nil }
        if let message = Self.httpURLProblem(url) {
            addError(key, message)
            return nil
        }
        return url
    }

    /// Why `url` is not an absolute `http`/`https` URL, or nil when it is one.
    static func httpURLProblem(_ url: String) -> String? {
        let bytes = Array(url.utf8)
        // Spaces and controls would break the URL wherever it is later used (push payloads, HTTP request lines).
        if bytes.contains(where: { $0 <= 0x20 || $0 == 0x7F }) {
            return "must not contain spaces or control characters"
        }
        let notAbsolute = "must be an absolute http or https URL"
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")) else { return notAbsolute }
        let scheme = String(decoding: bytes[..<colon], as: UTF8.self).lowercased()
        guard scheme == "http" || scheme == "https",
            bytes[(colon + 1)...].starts(with: "//".utf8)
        else { return notAbsolute }
        let authorityStart = colon + 3
        let authorityEnd =
            bytes[authorityStart...].firstIndex(where: {
                $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#")
            }) ?? bytes.endIndex
        var hostPort = bytes[authorityStart..<authorityEnd]
        if let at = hostPort.lastIndex(of: UInt8(ascii: "@")) { hostPort = hostPort[(at + 1)...] }
        // An IPv6 literal (`[::1]:8080`) contains colons, so the port starts after its closing bracket.
        var host = hostPort
        var port: ArraySlice<UInt8> = []
        if hostPort.first == UInt8(ascii: "[") {
            guard let close = hostPort.firstIndex(of: UInt8(ascii: "]")) else { return "has a malformed host" }
            host = hostPort[...close]
            port = hostPort[(close + 1)...]
            if let first = port.first {
                guard first == UInt8(ascii: ":") else { return "has a malformed host" }
                port = port.dropFirst()
            }
        } else if let portColon = hostPort.firstIndex(of: UInt8(ascii: ":")) {
            host = hostPort[..<portColon]
            port = hostPort[(portColon + 1)...]
        }
        if host.isEmpty || host == [UInt8(ascii: "["), UInt8(ascii: "]")] { return "must name a host" }
        if !port.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) || port.count > 5 {
            return "has a malformed port"
        }
        return nil
    }
}
