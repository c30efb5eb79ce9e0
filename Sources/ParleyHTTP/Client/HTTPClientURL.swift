/// The parts of an absolute `http[s]://host[:port][/path][?query]` URL that the client needs.
struct HTTPClientURL: Sendable, Equatable {
    /// The URL schemes the client speaks.
    enum Scheme: String, Sendable, Equatable {
        case http
        case https

        /// The port of a URL that names none.
        var defaultPort: Int { self == .https ? 443 : 80 }
    }

    var scheme: Scheme
    /// The host name or address, without the brackets of an IPv6 literal.
    var host: String
    var port: Int
    /// The request target: path and query, `/` when the URL has no path; the fragment is dropped.
    var target: String

    /// Parses `url`: `http` or `https` (case-insensitive), a host, an optional port, no user information.
    init(_ url: String) throws {
        var invalid: HTTPClientError { HTTPClientError(.invalidRequest, "unsupported URL \(HTTPClientBytes.printable(url.utf8))") }
        guard let separator = url.firstRange(of: "://"), let scheme = Scheme(rawValue: url[..<separator.lowerBound].lowercased())
        else { throw invalid }
        self.scheme = scheme
        var rest = url[separator.upperBound...]
        if let hash = rest.firstIndex(of: "#") { rest = rest[..<hash] }
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        let path = rest[authorityEnd...]
        target = path.isEmpty ? "/" : (path.first == "?" ? "/" + path : String(path))
        guard !authority.isEmpty, !authority.contains("@") else { throw invalid }

        var hostPart: Substring
        var portPart: Substring?
        if authority.first == "[" {
            guard let close = authority.firstIndex(of: "]") else { throw invalid }
            hostPart = authority[authority.index(after: authority.startIndex)..<close]
            guard hostPart.contains(":") else { throw invalid }  // brackets are for IPv6 literals only
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.first == ":" else { throw invalid }
                portPart = after.dropFirst()
            }
        } else if let colon = authority.lastIndex(of: ":") {
            hostPart = authority[..<colon]
            portPart = authority[authority.index(after: colon)...]
            guard !hostPart.contains(":") else { throw invalid }  // an IPv6 literal needs its brackets
        } else {
            hostPart = authority
        }
        guard !hostPart.isEmpty else { throw invalid }
        host = String(hostPart)
        if let portPart {
            guard let value = Int(portPart), (1...65535).contains(value) else { throw invalid }
            port = value
        } else {
            port = scheme.defaultPort
        }
    }
}
