import COpenSSL
import Glibc

/// TLS over a connected `HTTPClientSocket`, with OpenSSL.
///
/// The socket is switched to non-blocking mode and every OpenSSL call that wants to read or write waits with `poll`
/// until the caller's deadline, so a handshake, a read or a write never outlasts it. The client side (`connect`)
/// serves `https` URLs; the server side (`accept`) serves the test receiver. One thread at a time.
package final class TLSStream: HTTPClientTransport {
    private let socket: HTTPClientSocket
    private let ssl: OpaquePointer
    private var closed = false

    private init(socket: HTTPClientSocket, context: TLSContext) throws {
        ERR_clear_error()
        guard let ssl = SSL_new(context.context) else {
            throw HTTPClientError(.tls, "cannot create a TLS session: \(TLSContext.takeErrors())")
        }
        self.socket = socket
        self.ssl = ssl
        try socket.setNonBlocking()
        guard SSL_set_fd(ssl, socket.fd) == 1 else {
            throw HTTPClientError(.tls, "cannot attach TLS to the socket: \(TLSContext.takeErrors())")
        }
    }

    deinit {
        SSL_free(ssl)
        socket.close()
    }

    /// Shakes hands as a client with `host` (a name, sent as SNI, or an IP literal) and verifies that the server's
    /// certificate chains to a trusted CA and names `host`; `.tls` with OpenSSL's reason when it does not.
    static func connect(over socket: HTTPClientSocket, context: TLSContext, host: String, deadline: ContinuousClock.Instant)
        throws -> TLSStream
    {
        let stream = try TLSStream(socket: socket, context: context)
        let ssl = stream.ssl
        let named: Bool
        if isIPLiteral(host) {
            named = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) == 1
        } else {
            // SSL_set_tlsext_host_name is a macro over SSL_ctrl.
            let sni = host.withCString {
                SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, Int(TLSEXT_NAMETYPE_host_name), UnsafeMutableRawPointer(mutating: $0))
            }
            SSL_set_hostflags(ssl, UInt32(X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS))
            named = sni == 1 && SSL_set1_host(ssl, host) == 1
        }
        guard named else { throw HTTPClientError(.tls, "cannot verify the name \(host): \(TLSContext.takeErrors())") }
        try stream.handshake(deadline: deadline) { SSL_connect($0) }
        return stream
    }

    /// Shakes hands as a server presenting the certificate of `context`.
    package static func accept(over socket: HTTPClientSocket, context: TLSContext, deadline: ContinuousClock.Instant)
        throws -> TLSStream
    {
        let stream = try TLSStream(socket: socket, context: context)
        try stream.handshake(deadline: deadline) { SSL_accept($0) }
        return stream
    }

    package func sendAll(_ bytes: [UInt8], deadline: ContinuousClock.Instant) throws {
        try bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let chunk = Int32(clamping: raw.count - offset)
                let n = try drive("write", deadline: deadline, failure: .closed) { SSL_write($0, raw.baseAddress! + offset, chunk) }
                guard n > 0 else { throw HTTPClientError(.closed, "peer closed the TLS connection") }
                offset += Int(n)
            }
        }
    }

    package func receive(appendingTo buffer: inout [UInt8], deadline: ContinuousClock.Instant) throws -> Int {
        let limit: Int32 = 16 * 1024
        return try withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Int(limit)) { scratch in
            let n = Int(try drive("read", deadline: deadline, failure: .closed) { SSL_read($0, scratch.baseAddress!, limit) })
            buffer.append(contentsOf: UnsafeBufferPointer(rebasing: scratch[..<n]))
            return n
        }
    }

    /// Sends close_notify when it can without waiting, then closes the socket (idempotent).
    package func close() {
        guard !closed else { return }
        closed = true
        if SSL_is_init_finished(ssl) == 1 {
            ERR_clear_error()
            _ = SSL_shutdown(ssl)
            ERR_clear_error()
        }
        socket.close()
    }

    private func handshake(deadline: ContinuousClock.Instant, _ call: (OpaquePointer) -> Int32) throws {
        guard try drive("TLS handshake", deadline: deadline, failure: .tls, call) > 0 else {
            throw HTTPClientError(.tls, "TLS handshake failed: the peer closed the connection")
        }
    }

    /// Repeats an OpenSSL I/O `call` until it makes progress, waiting on the socket for whatever it needs (to read or
    /// to write) until `deadline`. Returns the call's positive result, or 0 when the peer ended the stream.
    private func drive(
        _ what: String, deadline: ContinuousClock.Instant, failure: HTTPClientError.Kind, _ call: (OpaquePointer) -> Int32
    ) throws -> Int32 {
        guard !closed else { throw HTTPClientError(.closed, "connection is closed") }
        while true {
            ERR_clear_error()
            let rc = call(ssl)
            if rc > 0 { return rc }
            let code = SSL_get_error(ssl, rc)
            let savedErrno = errno
            switch code {
            case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
                let events = code == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT
                guard try socket.wait(for: Int32(events), until: deadline) else {
                    throw HTTPClientError(.timeout, "\(what) timed out")
                }
            case SSL_ERROR_ZERO_RETURN:
                return 0
            case SSL_ERROR_SYSCALL where ERR_peek_error() == 0:
                if rc == 0 || savedErrno == ECONNRESET || savedErrno == EPIPE { return 0 }
                throw HTTPClientError(failure, "\(what) failed: \(String(cString: strerror(savedErrno)))")
            default:
                throw HTTPClientError(failure, "\(what) failed: \(errorText())")
            }
        }
    }

    /// OpenSSL's reasons, with the certificate verification result when that is what failed
    /// ("certificate verify failed: unable to get local issuer certificate").
    private func errorText() -> String {
        var text = TLSContext.takeErrors()
        let verify = SSL_get_verify_result(ssl)
        if verify != X509_V_OK { text += ": " + String(cString: X509_verify_cert_error_string(verify)) }
        return text
    }

    /// True for an IPv4 or IPv6 address literal (verified against the certificate's IP entries, sent without SNI).
    package static func isIPLiteral(_ host: String) -> Bool { OutboundHTTP.classify(address: host) != nil }
}
