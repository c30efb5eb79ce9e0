import Glibc
import ParleyCore
import ParleyHTTP

/// A failed exchange with the object store: it did not answer, or answered with an error. An upload or download that
/// meets one answers 503 `6000212` (the file store does not answer).
struct S3Error: Error, CustomStringConvertible {
    var description: String
}

/// The few S3 operations the `s3` storage backend needs (docs/files.md#storage), over one blocking connection that
/// it reuses for every request of one transfer: single and multipart `PUT`, ranged `GET`, `DELETE`. Requests are
/// signed with AWS Signature Version 4, path-style (`/bucket/key`) or virtual-hosted (`bucket.host`, `/key`). Not
/// `Sendable`: one transfer thread owns it.
final class S3Client {
    let settings: S3Settings
    private let signature: S3Signature
    /// `scheme://host[:port]` the connection goes to (the bucket's own host when virtual-hosted).
    let origin: String
    /// The `Host` value sent and signed.
    let host: String
    private var connection: HTTPClientConnection?

    init(settings: S3Settings) {
        self.settings = settings
        signature = S3Signature(accessKeyID: settings.accessKeyID, secretAccessKey: settings.secretAccessKey, region: settings.region)
        let schemeEnd = settings.endpoint.firstRange(of: "://")?.upperBound ?? settings.endpoint.startIndex
        let scheme = String(settings.endpoint[..<schemeEnd])
        var authority = String(settings.endpoint[schemeEnd...])
        if !settings.pathStyle { authority = "\(settings.bucket).\(authority)" }
        origin = scheme + authority
        // The default port is left out of `Host`, as clients send it and servers sign it.
        if scheme == "https://" && authority.hasSuffix(":443") || scheme == "http://" && authority.hasSuffix(":80") {
            authority = String(authority[..<authority.lastIndex(of: ":")!])
        }
        host = authority
    }

    deinit { connection?.close() }

    /// The object key of a blob: the app and the blob ids, both made by the server (no user-controlled name).
    static func key(appID: String, blobID: String) -> String { "\(appID)/\(blobID)" }

    // MARK: - Operations

    /// `PUT` of a whole object.
    func putObject(key: String, body: [UInt8]) throws {
        _ = try request("PUT", key: key, body: body, expecting: [200])
    }

    /// Starts a multipart upload; returns its upload id.
    func createMultipartUpload(key: String) throws -> String {
        let response = try request("POST", key: key, query: [("uploads", "")], expecting: [200])
        guard let uploadID = S3XML.value(of: "UploadId", in: response.body) else {
            throw S3Error(description: "CreateMultipartUpload answered without an UploadId")
        }
        return uploadID
    }

    /// Uploads part `number` (from 1); returns its ETag, which the completion lists.
    func uploadPart(key: String, uploadID: String, number: Int, body: [UInt8]) throws -> String {
        let response = try request(
            "PUT", key: key, query: [("partNumber", String(number)), ("uploadId", uploadID)], body: body, expecting: [200])
        guard let etag = response.headers["ETag"] else { throw S3Error(description: "UploadPart answered without an ETag") }
        return etag
    }

    /// Completes a multipart upload from its parts' ETags, in order.
    func completeMultipartUpload(key: String, uploadID: String, etags: [String]) throws {
        var xml = "<CompleteMultipartUpload>"
        for (index, etag) in etags.enumerated() {
            xml += "<Part><PartNumber>\(index + 1)</PartNumber><ETag>\(S3XML.escaped(etag))</ETag></Part>"
        }
        xml += "</CompleteMultipartUpload>"
        let response = try request("POST", key: key, query: [("uploadId", uploadID)], body: Array(xml.utf8), expecting: [200])
        // S3 may answer 200 and still fail the completion, with an <Error> document in the body.
        if let code = S3XML.value(of: "Code", in: response.body) {
            let message = S3XML.value(of: "Message", in: response.body) ?? ""
            throw S3Error(description: "CompleteMultipartUpload failed: \(code) \(message)")
        }
    }

    /// Drops a multipart upload's parts.
    func abortMultipartUpload(key: String, uploadID: String) throws {
        _ = try request("DELETE", key: key, query: [("uploadId", uploadID)], expecting: [204, 200])
    }

    /// Bytes `start..<end` of an object.
    func getObject(key: String, start: Int64, end: Int64) throws -> [UInt8] {
        // A store may answer a range that covers the whole object with all of it (200): the length check below holds.
        let response = try request("GET", key: key, headers: [("Range", "bytes=\(start)-\(end - 1)")], expecting: start == 0 ? [206, 200] : [206])
        guard response.body.count == Int(end - start) else {
            throw S3Error(description: "GET \(key) answered \(response.body.count) bytes for a range of \(end - start)")
        }
        return response.body
    }

    /// Deletes an object (deleting one that is not there succeeds too).
    func deleteObject(key: String) throws {
        _ = try request("DELETE", key: key, expecting: [204, 200])
    }

    // MARK: - Requests

    /// The request path of `key`, URI-encoded once (S3 does not encode its paths twice to sign them).
    func path(key: String) -> String {
        (settings.pathStyle ? "/\(settings.bucket)/" : "/") + S3Signature.uriEncode(key, encodeSlash: false)
    }

    /// `name=value` URI-encoded, or `name` alone for a parameter without a value (`?uploads`), as S3 expects it sent.
    private static func queryItem(_ item: (String, String)) -> String {
        let name = S3Signature.uriEncode(item.0, encodeSlash: true)
        return item.1.isEmpty ? name : "\(name)=\(S3Signature.uriEncode(item.1, encodeSlash: true))"
    }

    /// Sends one signed request and returns its response when its status is one `expecting`; anything else, or no answer,
    /// throws ``S3Error`` with the store's error code and message (never the credentials).
    private func request(
        _ method: String, key: String, query: [(String, String)] = [], headers extra: [(String, String)] = [], body: [UInt8]? = nil,
        expecting statuses: [Int]
    ) throws -> HTTPClientResponse {
        let path = path(key: key)
        let payloadHash = body.map { Crypto.hex(Crypto.sha256($0)) } ?? S3Signature.emptyPayloadHash
        let timestamp = S3Signature.timestamp(seconds: Int(time(nil)))
        var signed = [("host", host), ("x-amz-content-sha256", payloadHash), ("x-amz-date", timestamp)]
        signed += extra.map { ($0.0.lowercased(), $0.1) }
        let authorization = signature.authorization(
            method: method, path: path, query: query, headers: signed, payloadHash: payloadHash, timestamp: timestamp)
        var headers = HTTPHeaders()
        headers.add("Host", host)
        for (name, value) in signed where name != "host" { headers.add(name, value) }
        headers.add("Authorization", authorization)
        let target = query.isEmpty ? path : path + "?" + query.map(Self.queryItem).joined(separator: "&")
        let response: HTTPClientResponse
        do {
            let connection = try self.connection ?? HTTPClientConnection(url: origin, connectTimeout: .seconds(5), timeout: .seconds(60))
            self.connection = connection
            response = try connection.send(method: HTTPMethod(rawValue: method), path: target, headers: headers, body: body)
        } catch let error as HTTPClientError {
            connection?.close()
            connection = nil
            throw S3Error(description: "\(method) \(key): \(error.message)")
        }
        guard statuses.contains(response.status) else {
            let code = S3XML.value(of: "Code", in: response.body) ?? "no error code"
            let message = S3XML.value(of: "Message", in: response.body) ?? ""
            throw S3Error(description: "\(method) \(key) answered \(response.status) \(code) \(message)")
        }
        return response
    }
}

/// The little XML S3 answers with that Parley reads: the text of an element by name (`UploadId`, an error's `Code`
/// and `Message`), and escaping for the completion document. S3's documents are flat enough that the first element of
/// a name is the one meant.
enum S3XML {
    /// The text of the first `<name>` element of `document`, entities decoded; nil when there is none.
    static func value(of name: String, in document: [UInt8]) -> String? {
        let text = String(decoding: document, as: UTF8.self)
        guard let open = text.firstRange(of: "<\(name)>"), let close = text[open.upperBound...].firstRange(of: "</\(name)>") else { return nil }
        return unescaped(String(text[open.upperBound..<close.lowerBound]))
    }

    /// `text` with XML's five special characters as entities.
    static func escaped(_ text: String) -> String {
        var out = ""
        for character in text {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&apos;"
            default: out.append(character)
            }
        }
        return out
    }

    /// `text` with the five predefined entities decoded (S3 quotes ETags as `&quot;`).
    static func unescaped(_ text: String) -> String {
        guard text.contains("&") else { return text }
        return text.replacing("&quot;", with: "\"").replacing("&apos;", with: "'").replacing("&lt;", with: "<").replacing("&gt;", with: ">")
            .replacing("&amp;", with: "&")
    }
}
