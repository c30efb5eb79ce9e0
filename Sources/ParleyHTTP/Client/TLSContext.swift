import COpenSSL
import CParleyShims
import ParleySync

/// An OpenSSL `SSL_CTX`: TLS 1.2 or later, with what every stream made from it shares (trust, or the server's
/// certificate).
///
/// A client context verifies the peer against the system trust store plus an optional extra CA file; there is one
/// per CA configuration in the process (`client(extraCAFile:)`), shared by every connection and never freed.
/// `@unchecked Sendable`: the context is fully configured before it is shared, and OpenSSL allows `SSL_new` on a
/// configured context from any thread.
package final class TLSContext: @unchecked Sendable {
    let context: OpaquePointer

    private static let clients = LockedValue<[String: TLSContext]>([:])

    /// The shared client context that trusts the system store and, when given, the CAs of the PEM file `extraCAFile`.
    ///
    /// Cached by path: a file that changes afterwards is not read again.
    static func client(extraCAFile: String?) throws -> TLSContext {
        let key = extraCAFile ?? ""
        if let cached = clients.withLock({ $0[key] }) { return cached }
        let made = try TLSContext(extraCAFile: extraCAFile)
        return clients.withLock { cache in
            if let cached = cache[key] { return cached }
            cache[key] = made
            return made
        }
    }

    private init(extraCAFile: String?) throws {
        context = try Self.make(TLS_client_method())
        SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        guard SSL_CTX_set_default_verify_paths(context) == 1 else {
            throw HTTPClientError(.tls, "cannot load the system trust store: \(Self.takeErrors())")
        }
        if let extraCAFile, SSL_CTX_load_verify_file(context, extraCAFile) != 1 {
            throw HTTPClientError(.tls, "cannot load the CA file \(extraCAFile): \(Self.takeErrors())")
        }
    }

    /// A server context presenting `certificate` (an `X509*`) with its private key (`EVP_PKEY*`), both retained
    /// by the context (for the test receiver).
    package init(certificate: OpaquePointer, key: OpaquePointer) throws {
        context = try Self.make(TLS_server_method())
        guard SSL_CTX_use_certificate(context, certificate) == 1, SSL_CTX_use_PrivateKey(context, key) == 1,
            SSL_CTX_check_private_key(context) == 1
        else {
            throw HTTPClientError(.tls, "cannot use the server certificate: \(Self.takeErrors())")
        }
    }

    deinit { SSL_CTX_free(context) }

    private static func make(_ method: OpaquePointer?) throws -> OpaquePointer {
        // OpenSSL writes with write(2), not send(MSG_NOSIGNAL): writing to a peer that has gone would raise SIGPIPE
        // and end the process. Ignored process-wide, as `HTTPServer` does.
        parley_ignore_sigpipe()
        ERR_clear_error()
        guard let context = SSL_CTX_new(method) else {
            throw HTTPClientError(.tls, "cannot create a TLS context: \(takeErrors())")
        }
        // SSL_CTX_set_min_proto_version and SSL_CTX_set_mode are macros over SSL_CTX_ctrl.
        SSL_CTX_ctrl(context, SSL_CTRL_SET_MIN_PROTO_VERSION, Int(TLS1_2_VERSION), nil)
        SSL_CTX_ctrl(context, SSL_CTRL_MODE, Int(SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER), nil)
        // SSL_OP_IGNORE_UNEXPECTED_EOF (a macro Swift cannot import): a peer that closes without close_notify ends
        // the stream as TCP would; the HTTP framing (length, chunked) still detects a cut body.
        SSL_CTX_set_options(context, 1 << 7)
        return context
    }

    /// The reasons on this thread's OpenSSL error queue, joined, and the queue emptied.
    static func takeErrors() -> String {
        var reasons: [String] = []
        while true {
            let code = ERR_get_error()
            if code == 0 { break }
            if let reason = ERR_reason_error_string(code) {
                reasons.append(String(cString: reason))
            } else {
                reasons.append("error \(code)")
            }
        }
        return reasons.isEmpty ? "unknown TLS error" : reasons.joined(separator: "; ")
    }
}
