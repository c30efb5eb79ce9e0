import Glibc
import ParleySync

/// What outbound requests to other people's servers (webhooks) may reach and trust.
public struct OutboundPolicy: Sendable, Hashable {
    /// Whether destinations outside the global range (loopback, private networks, link-local, cloud metadata, …;
    /// see `OutboundAddressRange`) may be reached. Off by default: a customer's URL must not reach the server's own
    /// network.
    public var allowPrivateDestinations: Bool
    /// A PEM file of CAs trusted in addition to the system trust store (private receivers, tests).
    public var extraCAFile: String?

    public init(allowPrivateDestinations: Bool = false, extraCAFile: String? = nil) {
        self.allowPrivateDestinations = allowPrivateDestinations
        self.extraCAFile = extraCAFile
    }
}

/// The answer to an outbound request.
public struct OutboundResponse: Sendable {
    public var status: Int
    public var headers: HTTPHeaders
    /// The decoded body, at most the `maxResponseBytes` the request allowed.
    public var body: [UInt8]
    /// True when the body was longer than `maxResponseBytes`: `body` is its beginning, the rest was not read.
    public var truncated: Bool

    public init(status: Int, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = [], truncated: Bool = false) {
        self.status = status
        self.headers = headers
        self.body = body
        self.truncated = truncated
    }
}

/// Requests to URLs that other people chose (webhooks): `http` and `https`, guarded by an `OutboundPolicy`.
///
/// The host is resolved once; addresses the policy refuses are dropped and the connection goes only to an address
/// that was checked (a second resolution could answer differently: DNS rebinding). `https` verifies the certificate
/// chain (system trust store plus `OutboundPolicy.extraCAFile`) and the host name, with SNI. Redirects are not
/// followed: a `3xx` is returned like any other answer.
public enum OutboundHTTP {
    /// The longest URL `validate` accepts, in bytes.
    public static let maxURLBytes = 2048

    /// One request: on a fresh connection closed afterwards, or, with `connections`, on an idle keep-alive connection
    /// to the same destination when there is one (returned there after the answer if it can carry another).
    ///
    /// `timeout` bounds the whole exchange: resolving, connecting, the TLS handshake, writing the request and reading
    /// the response. A body longer than `maxResponseBytes` is cut there (`truncated`), not an error. Throws
    /// `HTTPClientError` (`.connectFailed`, `.timeout`, `.closed`, `.malformedResponse`, `.refused`, `.tls`,
    /// `.invalidRequest`).
    public static func send(
        _ method: HTTPMethod, url: String, headers: HTTPHeaders, body: [UInt8], timeout: Duration, policy: OutboundPolicy,
        maxResponseBytes: Int = 65_536, connections: OutboundConnections? = nil
    ) throws -> OutboundResponse {
        let deadline = ContinuousClock.now + timeout
        let target = try parsed(url)
        let key = OutboundConnections.Key(scheme: target.scheme, host: target.host, port: target.port, policy: policy)
        let connection: HTTPClientConnection
        if let idle = connections?.take(key) {
            connection = idle
            connection.deadline = deadline
            connection.timeout = timeout
        } else {
            let endpoint = try HTTPClientEndpoint(
                target, extraCAFile: policy.extraCAFile, allowPrivateDestinations: policy.allowPrivateDestinations)
            connection = try HTTPClientConnection(endpoint: endpoint, connectTimeout: timeout, timeout: timeout, deadline: deadline)
        }
        var kept = false
        defer { if !kept { connection.close() } }
        connection.maxBodyBytes = max(maxResponseBytes, 0)
        connection.truncatesLongBodies = true
        let response = try connection.send(method: method, path: target.target, headers: headers, body: body)
        if let connections, connection.canCarryAnother { kept = connections.put(key, connection) }
        return OutboundResponse(
            status: response.status, headers: response.headers, body: response.body, truncated: response.truncated)
    }

    /// URLs already validated and parsed, by their text: a webhook sends to the same few URLs thousands of times a
    /// second, and parsing one with `String` indexing cost more than signing its request. Bounded: emptied when full.
    ///
    /// Owner: its lock.
    private static let parsedURLs = LockedValue<[String: HTTPClientURL]>([:])
    private static let maxParsedURLs = 4096

    /// `url` validated (``validate(url:)``) and parsed, from ``parsedURLs`` when it was seen before.
    static func parsed(_ url: String) throws -> HTTPClientURL {
        if let known = parsedURLs.withLock({ $0[url] }) { return known }
        try validate(url: url)
        let target = try HTTPClientURL(url)
        parsedURLs.withLock { urls in
            if urls.count >= maxParsedURLs { urls.removeAll(keepingCapacity: true) }
            urls[url] = target
        }
        return target
    }

    /// Checks a URL before it is stored: `http` or `https`, a host (a DNS name, an IPv4 address or a bracketed IPv6
    /// one), an optional port, no user information, printable ASCII only, at most `maxURLBytes` bytes. Throws
    /// `.invalidRequest` saying what is wrong. Whether the host is allowed is decided when sending (it may resolve
    /// differently by then).
    public static func validate(url: String) throws {
        func invalid(_ why: String) -> HTTPClientError { HTTPClientError(.invalidRequest, "invalid URL: \(why)") }
        guard url.utf8.count <= maxURLBytes else { throw invalid("longer than \(maxURLBytes) bytes") }
        guard url.utf8.allSatisfy({ $0 > 32 && $0 < 127 }) else {
            throw invalid("only printable ASCII without spaces is allowed (percent-encode the rest)")
        }
        let parsed: HTTPClientURL
        do {
            parsed = try HTTPClientURL(url)
        } catch {
            throw invalid("an http:// or https:// URL with a host, an optional port and no user information is needed")
        }
        guard isValidHost(parsed.host) else { throw invalid("bad host \(HTTPClientBytes.printable(parsed.host.utf8))") }
    }

    /// The range of an IP address in text form (`10.1.2.3`, `::ffff:127.0.0.1`), nil when it is not one.
    public static func classify(address: String) -> OutboundAddressRange? {
        var v4 = in_addr()
        if inet_pton(AF_INET, address, &v4) == 1 { return OutboundAddressRange(bytes: withUnsafeBytes(of: v4) { Array($0) }) }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, address, &v6) == 1 { return OutboundAddressRange(bytes: withUnsafeBytes(of: v6) { Array($0) }) }
        return nil
    }

    /// A DNS name (letters, digits, `-` and `_` in dot-separated labels of at most 63 bytes, 253 in all) or an IP
    /// literal.
    private static func isValidHost(_ host: String) -> Bool {
        if host.contains(":") { return classify(address: host) != nil }
        var name = Substring(host)
        if name.hasSuffix(".") { name = name.dropLast() }
        guard !name.isEmpty, name.utf8.count <= 253 else { return false }
        return name.split(separator: ".", omittingEmptySubsequences: false).allSatisfy { label in
            !label.isEmpty && label.utf8.count <= 63 && label.first != "-" && label.last != "-"
                && label.utf8.allSatisfy { HTTPClientBytes.isDigit($0) || $0 == 45 || $0 == 95 || ($0 | 0x20 >= 97 && $0 | 0x20 <= 122) }
        }
    }
}
