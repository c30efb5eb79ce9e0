import COpenSSL
import Glibc
import ParleyHTTP

/// An EC P-256 key and an X.509 certificate for it, made at run time with OpenSSL (no `openssl` binary needed).
///
/// `@unchecked Sendable`: both objects are immutable once made and OpenSSL allows sharing them between threads
/// (a server context takes its own references).
final class TestCertificate: @unchecked Sendable {
    /// `EVP_PKEY*`.
    let key: OpaquePointer
    /// `X509*`.
    let certificate: OpaquePointer

    /// A self-signed CA certificate (`issuer` nil), or a server certificate for `names` (DNS names and IP addresses)
    /// signed by `issuer`. Valid from an hour ago for a week.
    init(commonName: String, names: [String] = [], issuer: TestCertificate?) {
        key = Self.makeKey()
        guard let certificate = X509_new() else { fatalError("X509_new failed") }
        self.certificate = certificate
        let isAuthority = issuer == nil
        X509_set_version(certificate, 2)
        ASN1_INTEGER_set_int64(X509_get_serialNumber(certificate), Int64.random(in: 1...Int64.max))
        X509_gmtime_adj(X509_getm_notBefore(certificate), -3600)
        X509_gmtime_adj(X509_getm_notAfter(certificate), 7 * 24 * 3600)
        X509_set_pubkey(certificate, key)
        let subject = X509_get_subject_name(certificate)
        X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC, commonName, -1, -1, 0)
        let signer = issuer ?? self
        X509_set_issuer_name(certificate, X509_get_subject_name(signer.certificate))

        var extensions: [(Int32, String)] = [(NID_subject_key_identifier, "hash")]
        if isAuthority {
            extensions += [(NID_basic_constraints, "critical,CA:TRUE"), (NID_key_usage, "critical,keyCertSign,cRLSign")]
        } else {
            let alternatives = names.map { TLSStream.isIPLiteral($0) ? "IP:\($0)" : "DNS:\($0)" }
            extensions += [
                (NID_basic_constraints, "critical,CA:FALSE"), (NID_key_usage, "critical,digitalSignature"),
                (NID_ext_key_usage, "serverAuth"), (NID_subject_alt_name, alternatives.joined(separator: ",")),
            ]
        }
        var context = X509V3_CTX()
        X509V3_set_ctx(&context, signer.certificate, certificate, nil, nil, 0)
        for (nid, value) in extensions {
            guard let ext = X509V3_EXT_conf_nid(nil, &context, nid, value) else {
                fatalError("cannot make the certificate extension \(value)")
            }
            X509_add_ext(certificate, ext, -1)
            X509_EXTENSION_free(ext)
        }
        guard X509_sign(certificate, signer.key, EVP_sha256()) > 0 else { fatalError("X509_sign failed") }
    }

    deinit {
        X509_free(certificate)
        EVP_PKEY_free(key)
    }

    /// Writes the certificate as PEM to `path`.
    func writePEM(to path: String) {
        guard let file = fopen(path, "w") else { fatalError("cannot write \(path)") }
        defer { fclose(file) }
        guard PEM_write_X509(file, certificate) == 1 else { fatalError("cannot write \(path)") }
    }

    private static func makeKey() -> OpaquePointer {
        guard let context = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else { fatalError("no EC in OpenSSL") }
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(context) == 1, EVP_PKEY_CTX_set_group_name(context, "P-256") == 1,
            EVP_PKEY_generate(context, &key) == 1, let key
        else { fatalError("EC key generation failed") }
        return key
    }
}

/// A certificate authority made once per test process, its certificate in a PEM file of a fresh temporary directory.
final class TestAuthority: Sendable {
    let certificate: TestCertificate
    /// The PEM file of the CA certificate (what a client is given as `OutboundPolicy.extraCAFile`).
    let pemFile: String

    /// The CA that signs the test receivers' certificates.
    static let trusted = TestAuthority(commonName: "Parley Test CA")
    /// A CA that signs nothing a receiver serves: a client trusting only it fails verification.
    static let untrusted = TestAuthority(commonName: "Parley Untrusted Test CA")

    private init(commonName: String) {
        certificate = TestCertificate(commonName: commonName, issuer: nil)
        var template = Array("/tmp/parley-test-ca-XXXXXX".utf8CString)
        guard let directory = mkdtemp(&template) else { fatalError("mkdtemp failed") }
        pemFile = String(cString: directory) + "/ca.pem"
        certificate.writePEM(to: pemFile)
    }

    /// A server TLS context presenting a new certificate for `names`, signed by this CA.
    func serverContext(names: [String]) throws -> TLSContext {
        let leaf = TestCertificate(commonName: names.first ?? "localhost", names: names, issuer: certificate)
        return try TLSContext(certificate: leaf.certificate, key: leaf.key)
    }
}
