import Glibc
import ParleyCore

/// AWS Signature Version 4 for S3 requests, signed in the `Authorization` header: the canonical request (method,
/// URI-encoded path, sorted query, sorted signed headers, payload hash), the string to sign, and the key derived from
/// the secret through the date, region, service and `aws4_request`.
struct S3Signature: Sendable {
    var accessKeyID: String
    var secretAccessKey: String
    var region: String
    static let service = "s3"
    /// The payload hash of an empty body.
    static let emptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    /// The `Authorization` value of a request. `path` is the canonical URI (already URI-encoded once: S3 paths are
    /// not encoded twice), `headers` every header to sign (at least `host`, `x-amz-content-sha256` and `x-amz-date`,
    /// whose value `timestamp` must be), `payloadHash` the hex SHA-256 of the body.
    func authorization(
        method: String, path: String, query: [(String, String)], headers: [(String, String)], payloadHash: String, timestamp: String
    ) -> String {
        let (canonical, signedHeaders) = Self.canonicalRequest(
            method: method, path: path, query: query, headers: headers, payloadHash: payloadHash)
        let date = String(timestamp.prefix(8))
        let scope = "\(date)/\(region)/\(Self.service)/aws4_request"
        let stringToSign = "AWS4-HMAC-SHA256\n\(timestamp)\n\(scope)\n\(Crypto.hex(Crypto.sha256(canonical)))"
        let signature = Crypto.hex(Crypto.hmacSHA256(key: signingKey(date: date), message: Array(stringToSign.utf8)))
        return "AWS4-HMAC-SHA256 Credential=\(accessKeyID)/\(scope),SignedHeaders=\(signedHeaders),Signature=\(signature)"
    }

    /// The key of one day, region and service, derived from the secret.
    func signingKey(date: String) -> [UInt8] {
        var key = Crypto.hmacSHA256(key: Array("AWS4\(secretAccessKey)".utf8), message: Array(date.utf8))
        for part in [region, Self.service, "aws4_request"] { key = Crypto.hmacSHA256(key: key, message: Array(part.utf8)) }
        return key
    }

    /// The canonical request and its `SignedHeaders` list (lower-case names, sorted, values trimmed).
    static func canonicalRequest(
        method: String, path: String, query: [(String, String)], headers: [(String, String)], payloadHash: String
    ) -> (request: String, signedHeaders: String) {
        let canonicalQuery = query.map { (uriEncode($0.0, encodeSlash: true), uriEncode($0.1, encodeSlash: true)) }
            .sorted { $0.0 != $1.0 ? $0.0 < $1.0 : $0.1 < $1.1 }
            .map { "\($0.0)=\($0.1)" }.joined(separator: "&")
        let canonicalHeaders = headers.map { ($0.0.lowercased(), trimmed($0.1)) }.sorted { $0.0 < $1.0 }
        let signedHeaders = canonicalHeaders.map(\.0).joined(separator: ";")
        let headerLines = canonicalHeaders.map { "\($0.0):\($0.1)\n" }.joined()
        return ("\(method)\n\(path)\n\(canonicalQuery)\n\(headerLines)\n\(signedHeaders)\n\(payloadHash)", signedHeaders)
    }

    /// URI-encodes `text` the way SigV4 wants: every byte but the unreserved `A-Z a-z 0-9 - . _ ~` as `%XY` (upper-case
    /// hex); `/` kept in paths.
    static func uriEncode(_ text: String, encodeSlash: Bool) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: "/") where !encodeSlash:
                out += "/"
            default:
                let hex = Array("0123456789ABCDEF".utf8)
                out += "%" + String(decoding: [hex[Int(byte >> 4)], hex[Int(byte & 15)]], as: UTF8.self)
            }
        }
        return out
    }

    /// A header value with leading and trailing spaces removed and inner runs of spaces made one.
    private static func trimmed(_ value: String) -> String {
        value.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
    }

    /// `yyyyMMdd'T'HHmmss'Z'` of `seconds` since the Unix epoch, in UTC (the `x-amz-date` form).
    static func timestamp(seconds: Int) -> String {
        var time = time_t(seconds)
        var parts = tm()
        gmtime_r(&time, &parts)
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(parts.tm_year + 1900)\(two(parts.tm_mon + 1))\(two(parts.tm_mday))T\(two(parts.tm_hour))\(two(parts.tm_min))\(two(parts.tm_sec))Z"
    }
}
