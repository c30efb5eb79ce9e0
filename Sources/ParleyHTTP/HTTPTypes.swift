/// An HTTP request method, kept as its token (`GET`, `POST`, …).
public struct HTTPMethod: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let get = HTTPMethod(rawValue: "GET")
    public static let head = HTTPMethod(rawValue: "HEAD")
    public static let post = HTTPMethod(rawValue: "POST")
    public static let put = HTTPMethod(rawValue: "PUT")
    public static let patch = HTTPMethod(rawValue: "PATCH")
    public static let delete = HTTPMethod(rawValue: "DELETE")
    public static let options = HTTPMethod(rawValue: "OPTIONS")

    public var description: String { rawValue }
}

/// HTTP protocol version of a request (only 1.0 and 1.1 are accepted by the parser).
public struct HTTPVersion: Hashable, Sendable, CustomStringConvertible {
    public var major: Int
    public var minor: Int
    public init(major: Int, minor: Int) {
        self.major = major
        self.minor = minor
    }
    public static let http1_0 = HTTPVersion(major: 1, minor: 0)
    public static let http1_1 = HTTPVersion(major: 1, minor: 1)
    public var description: String { "HTTP/\(major).\(minor)" }
}

/// Header fields in arrival order. Names compare case-insensitively (ASCII), values are kept verbatim.
public struct HTTPHeaders: Sendable, Sequence, ExpressibleByDictionaryLiteral, CustomStringConvertible {
    public typealias Field = (name: String, value: String)
    public private(set) var fields: [Field] = []

    public init() {}
    public init(_ fields: [Field]) { self.fields = fields }
    public init(dictionaryLiteral elements: (String, String)...) {
        fields = elements.map { (name: $0.0, value: $0.1) }
    }

    public var count: Int { fields.count }
    public func makeIterator() -> IndexingIterator<[Field]> { fields.makeIterator() }

    /// The first value of the field `name`, or nil.
    public subscript(name: String) -> String? {
        for field in fields where field.name.equalsASCIICaseInsensitive(name) { return field.value }
        return nil
    }

    /// Every value of the field `name`, in order.
    public func values(_ name: String) -> [String] {
        fields.filter { $0.name.equalsASCIICaseInsensitive(name) }.map(\.value)
    }

    public func contains(_ name: String) -> Bool { self[name] != nil }

    /// Appends a field (does not replace existing ones).
    public mutating func add(_ name: String, _ value: String) { fields.append((name: name, value: value)) }

    /// Replaces every field `name` with one field carrying `value`.
    public mutating func replace(_ name: String, _ value: String) {
        remove(name)
        fields.append((name: name, value: value))
    }

    public mutating func remove(_ name: String) { fields.removeAll { $0.name.equalsASCIICaseInsensitive(name) } }

    public var description: String { fields.map { "\($0.name): \($0.value)" }.joined(separator: "\n") }
}

/// The request line and headers of one request, with the framing facts the parser derived from them.
public struct HTTPRequestHead: Sendable {
    public var method: HTTPMethod
    /// The request target exactly as sent (origin form: path plus optional `?query`).
    public var target: String
    public var version: HTTPVersion
    public var headers: HTTPHeaders
    /// Whether the connection stays open after this request (HTTP/1.1 default unless `Connection: close`;
    /// HTTP/1.0 only with `Connection: keep-alive`).
    public var keepAlive: Bool
    /// `Content-Length` of the body, when the body is length-delimited.
    public var contentLength: Int?
    /// True when the body uses `Transfer-Encoding: chunked`.
    public var chunked: Bool
    /// True when the client sent `Expect: 100-continue`.
    public var expectsContinue: Bool

    public init(
        method: HTTPMethod, target: String, version: HTTPVersion = .http1_1, headers: HTTPHeaders = HTTPHeaders(),
        keepAlive: Bool = true, contentLength: Int? = nil, chunked: Bool = false, expectsContinue: Bool = false
    ) {
        self.method = method
        self.target = target
        self.version = version
        self.headers = headers
        self.keepAlive = keepAlive
        self.contentLength = contentLength
        self.chunked = chunked
        self.expectsContinue = expectsContinue
    }

    /// The path part of the target (before `?`), still percent-encoded.
    public var rawPath: Substring {
        guard let q = queryMarkIndex else { return target[...] }
        return target[..<q]
    }

    /// The query part of the target (after `?`), still percent-encoded, or nil.
    public var rawQuery: Substring? {
        guard let q = queryMarkIndex else { return nil }
        return target[target.utf8.index(after: q)...]
    }

    /// Where the `?` is, found with a byte search over the string's storage (walking `utf8` costs ~35
    /// instructions a byte, `Character`s far more).
    private var queryMarkIndex: String.Index? {
        let offset =
            target.utf8.withContiguousStorageIfAvailable { $0.firstIndex(of: UInt8(ascii: "?")) }
            ?? target.utf8.firstIndex(of: UInt8(ascii: "?")).map { target.utf8.distance(from: target.utf8.startIndex, to: $0) }
        guard let offset else { return nil }
        return target.utf8.index(target.utf8.startIndex, offsetBy: offset)
    }
}

extension String {
    /// ASCII case-insensitive equality (header names are ASCII tokens).
    @inlinable
    public func equalsASCIICaseInsensitive(_ other: String) -> Bool {
        // Lengths first (constant time): most header names differ in length from the one looked for.
        guard utf8.count == other.utf8.count else { return false }
        if self == other { return true }  // the usual case, and cheap for short (inline) strings
        var a = self.utf8.makeIterator()
        var b = other.utf8.makeIterator()
        while let x = a.next(), let y = b.next() {
            if x == y { continue }
            let lx = x >= 65 && x <= 90 ? x | 0x20 : x
            let ly = y >= 65 && y <= 90 ? y | 0x20 : y
            if lx != ly { return false }
        }
        return true
    }
}

/// Reason phrases for the statuses Parley sends.
public enum HTTPStatus {
    /// Status lines of 100…599 by `status - 100`, pre-rendered: an index per response, not a hash lookup.
    private static let statusLines: [[UInt8]] = (100..<600).map { Array("HTTP/1.1 \($0) \(reason($0))\r\n".utf8) }

    /// `HTTP/1.1 <status> <reason>\r\n`.
    public static func statusLine(_ status: Int) -> [UInt8] {
        if status >= 100 && status < 600 { return statusLines[status - 100] }
        return Array("HTTP/1.1 \(status) \(reason(status))\r\n".utf8)
    }

    public static func reason(_ status: Int) -> String {
        switch status {
        case 100: "Continue"
        case 200: "OK"
        case 201: "Created"
        case 202: "Accepted"
        case 204: "No Content"
        case 301: "Moved Permanently"
        case 304: "Not Modified"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 408: "Request Timeout"
        case 409: "Conflict"
        case 411: "Length Required"
        case 413: "Content Too Large"
        case 415: "Unsupported Media Type"
        case 422: "Unprocessable Content"
        case 429: "Too Many Requests"
        case 431: "Request Header Fields Too Large"
        case 500: "Internal Server Error"
        case 501: "Not Implemented"
        case 503: "Service Unavailable"
        case 505: "HTTP Version Not Supported"
        default: "Status \(status)"
        }
    }
}
