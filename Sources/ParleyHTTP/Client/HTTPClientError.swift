/// A failure of the HTTP client, with a stable `kind` to branch on and a message for people.
public struct HTTPClientError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The stable category of a client failure.
    public enum Kind: String, Sendable, Equatable {
        /// Name resolution, `socket` or `connect` failed (refused, unreachable, no address).
        case connectFailed
        /// A connect, read or write did not finish within its time limit.
        case timeout
        /// The peer closed (or reset) the connection before the response was complete.
        case closed
        /// The response did not follow HTTP/1.1 (bad status line, header or framing).
        case malformedResponse
        /// The response head or body went past the client's limits.
        case tooLarge
        /// The caller asked for something the client cannot send (bad URL, CR/LF in a header, …).
        case invalidRequest
        /// Every address of the destination is in a range the outbound policy refuses (loopback, private,
        /// link-local, metadata, …): see `OutboundPolicy.allowPrivateDestinations`.
        case refused
        /// The TLS handshake failed, or the peer's certificate did not verify (untrusted issuer, wrong host name,
        /// expired); the message has OpenSSL's reason.
        case tls
    }

    public var kind: Kind
    public var message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { "HTTPClientError.\(kind.rawValue): \(message)" }
}
