/// The byte stream under an HTTP/1.1 exchange: a TCP socket (`HTTPClientSocket`) or TLS over one (`TLSStream`).
///
/// Every call is bounded by a deadline. Used by one thread at a time: a client connection, or one connection of the
/// test receiver (ParleyTesting), which serves requests over the same two transports.
package protocol HTTPClientTransport: AnyObject {
    /// Writes every byte, or throws (`.closed` if the peer is gone, `.timeout` past `deadline`).
    func sendAll(_ bytes: [UInt8], deadline: ContinuousClock.Instant) throws

    /// Waits for bytes until `deadline` (`.timeout` past it) and appends what arrived; returns the count, 0 at end
    /// of stream.
    func receive(appendingTo buffer: inout [UInt8], deadline: ContinuousClock.Instant) throws -> Int

    /// Closes the stream (idempotent).
    func close()
}
