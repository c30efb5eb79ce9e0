/// Where file bytes are stored (docs/files.md#storage): in PostgreSQL (chunks of 256 KiB beside the metadata), or in
/// an S3-compatible object store. Metadata always stays in PostgreSQL.
public struct FileStorageSettings: Sendable, Equatable {
    /// Where new uploads go.
    public var backend: FileBackend
    /// The bucket of the `s3` backend. Also read with `postgres` as the backend when given, so the blobs a deployment
    /// stored in S3 before it switched back still download and delete.
    public var s3: S3Settings?

    public init(backend: FileBackend = .postgres, s3: S3Settings? = nil) {
        self.backend = backend
        self.s3 = s3
    }
}

/// A storage backend, by the name recorded with each blob (`file_blobs.storage`): reads and deletes follow where a
/// blob was written, whatever the backend is now.
public enum FileBackend: String, Sendable, Equatable {
    case postgres
    case s3
}

/// An S3-compatible bucket and the credentials that sign requests to it (AWS Signature Version 4).
public struct S3Settings: Sendable, Equatable {
    /// `http[s]://host[:port]` of the service, without a path.
    public var endpoint: String
    public var bucket: String
    public var region: String
    public var accessKeyID: String
    public var secretAccessKey: String
    /// True: `endpoint/bucket/key`; false: `bucket.host/key` (virtual-hosted).
    public var pathStyle: Bool

    public init(endpoint: String, bucket: String, region: String, accessKeyID: String, secretAccessKey: String, pathStyle: Bool) {
        self.endpoint = endpoint
        self.bucket = bucket
        self.region = region
        self.accessKeyID = accessKeyID
        self.secretAccessKey = secretAccessKey
        self.pathStyle = pathStyle
    }

    /// The default addressing style for `endpoint`: path-style for an IP address or `localhost` (no DNS name to put a
    /// bucket in front of), virtual-hosted otherwise.
    public static func defaultPathStyle(endpoint: String) -> Bool {
        var host = endpoint
        if let scheme = host.firstRange(of: "://") { host = String(host[scheme.upperBound...]) }
        if let slash = host.firstIndex(of: "/") { host = String(host[..<slash]) }
        if host.hasPrefix("[") { return true }  // an IPv6 literal
        if let colon = host.lastIndex(of: ":") { host = String(host[..<colon]) }
        let lowered = host.lowercased()
        if lowered == "localhost" || lowered.hasSuffix(".localhost") { return true }
        return !lowered.isEmpty && lowered.allSatisfy { $0.isNumber || $0 == "." }
    }
}
