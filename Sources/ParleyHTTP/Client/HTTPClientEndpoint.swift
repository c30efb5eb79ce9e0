/// Where and how a client connection reaches its server: host, port, TLS or not, and which addresses it may use.
struct HTTPClientEndpoint: Sendable {
    var host: String
    var port: Int
    /// The client context for `https`; nil for plain `http`.
    var tls: TLSContext?
    /// False refuses every address outside the global range (`OutboundAddressRange`).
    var allowPrivateDestinations = true

    /// The port a `Host` header leaves out.
    var defaultPort: Int { tls == nil ? 80 : 443 }

    init(host: String, port: Int, tls: TLSContext? = nil, allowPrivateDestinations: Bool = true) {
        self.host = host
        self.port = port
        self.tls = tls
        self.allowPrivateDestinations = allowPrivateDestinations
    }

    /// The endpoint of `url`: TLS for `https`, trusting the system store plus `extraCAFile`.
    init(_ url: HTTPClientURL, extraCAFile: String? = nil, allowPrivateDestinations: Bool = true) throws {
        let tls = url.scheme == .https ? try TLSContext.client(extraCAFile: extraCAFile) : nil
        self.init(host: url.host, port: url.port, tls: tls, allowPrivateDestinations: allowPrivateDestinations)
    }

    /// Resolves the host once, drops the addresses the policy refuses, connects to one of those checked, and shakes
    /// hands for TLS: all before `deadline`. `ioTimeout` is the socket's backstop for each blocking call.
    func open(deadline: ContinuousClock.Instant, ioTimeout: Duration) throws -> any HTTPClientTransport {
        var addresses = try HTTPClientAddress.resolve(host: host, port: port, deadline: deadline)
        if !allowPrivateDestinations {
            let refused = addresses.filter { !$0.range.isGlobal }
            addresses.removeAll { !$0.range.isGlobal }
            if addresses.isEmpty {
                let list = refused.map { "\($0.text) (\($0.range.rawValue))" }.joined(separator: ", ")
                throw HTTPClientError(
                    .refused,
                    "destination \(host) is in a private or special-purpose range (\(list)): such destinations are "
                        + "allowed only when the server allows private webhook destinations")
            }
        }
        let socket = try HTTPClientSocket(
            connectingTo: addresses, name: "\(host):\(port)", deadline: deadline, ioTimeout: ioTimeout)
        guard let tls else { return socket }
        return try TLSStream.connect(over: socket, context: tls, host: host, deadline: deadline)
    }
}
