import ParleyHTTP
import ParleySync
import Synchronization

/// Prometheus counters and histograms of the HTTP layer and of accepted messages (`/metrics`,
/// docs/operations.md#health-readiness-and-metrics).
///
/// Owner: `state` behind its `LockedValue`; recorded from the event loops after each response.
package final class Metrics: Sendable {
    package static let buckets: [Double] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

    private struct RequestKey: Hashable {
        let method: String
        let route: String
        let status: Int
    }

    private struct State {
        /// Requests by route, method and status: matched routes of the common methods under one packed integer
        /// (``packedKey(_:)``: hashing an Int, not two strings, on every request), the rest by name.
        var packed: [Int: (key: RequestKey, count: Int)] = [:]
        var requests: [RequestKey: Int] = [:]
        /// Requests per latency bucket (not cumulative: `render` adds them up).
        var bucketCounts = [Int](repeating: 0, count: Metrics.buckets.count)
        var durationCount = 0
        var durationSum = 0.0
        var openConnections = 0
        /// Accepted messages by "conversation_type stored" (`parley_messages_total`).
        var messages: [String: Int] = [:]
        /// Uploads stored, by kind, and the bytes they carried (`parley_file_uploads_total`, `…_bytes_total`).
        var uploads: [String: Int] = [:]
        var uploadedBytes: Int64 = 0
        var downloadedBytes: Int64 = 0
        /// Image and first-frame derivations per latency bucket (not cumulative), their count and total seconds.
        var derivationBuckets = [Int](repeating: 0, count: Metrics.derivationBuckets.count)
        var derivationCount = 0
        var derivationSum = 0.0
        /// Uploads and downloads the file store failed (`parley_file_store_errors_total`).
        var fileStoreErrors = 0
        /// Content that matched a blocklist, by action (`parley_blocklist_hits_total`).
        var blocklistHits: [String: Int] = [:]
    }

    /// Bounds of the derivation histogram (seconds): a thumbnail takes tens of milliseconds, a 50-megapixel photo a
    /// second or more.
    package static let derivationBuckets: [Double] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]

    private let state = LockedValue(State())

    package init() {}

    package func record(_ r: RequestRecord) {
        let packed = Self.packedKey(r)
        let bucket = Self.bucket(of: r.durationSeconds)
        state.withLock { s in
            if let packed {
                if let index = s.packed.index(forKey: packed) {
                    s.packed.values[index].count += 1
                } else {
                    s.packed[packed] = (RequestKey(method: r.method.rawValue, route: r.route, status: r.status), 1)
                }
            } else {
                s.requests[RequestKey(method: r.method.rawValue, route: r.route, status: r.status), default: 0] += 1
            }
            s.durationCount += 1
            s.durationSum += r.durationSeconds
            if bucket < s.bucketCounts.count { s.bucketCounts[bucket] += 1 }
        }
    }

    /// Route index, method and status in one integer, for a matched route and a method of the API; nil otherwise.
    private static func packedKey(_ r: RequestRecord) -> Int? {
        guard let route = r.routeIndex, r.status >= 0, r.status < 1000 else { return nil }
        let method: Int
        switch r.method {
        case .get: method = 0
        case .post: method = 1
        case .put: method = 2
        case .patch: method = 3
        case .delete: method = 4
        case .head: method = 5
        case .options: method = 6
        default: return nil
        }
        return (route << 13) | (method << 10) | r.status
    }

    /// The first bucket whose bound holds `seconds` (`buckets.count` past the last).
    private static func bucket(of seconds: Double) -> Int {
        var i = 0
        for bound in buckets {
            if seconds <= bound { return i }
            i += 1
        }
        return i
    }

    package func connections(_ count: Int) { state.withLock { $0.openConnections = count } }

    /// Counts one message accepted by a send or batch send (duplicates are not new messages); `conversationType` is
    /// the API's value (`peer`, `group`, …).
    package func messageAccepted(conversationType: String, stored: Bool) {
        state.withLock { $0.messages["\(conversationType) \(stored)", default: 0] += 1 }
    }

    /// Counts one upload stored as a file of `kind`, of `bytes` bytes.
    package func fileUploaded(kind: String, bytes: Int64) {
        state.withLock {
            $0.uploads[kind, default: 0] += 1
            $0.uploadedBytes += bytes
        }
    }

    /// Counts bytes a download sent.
    package func fileDownloaded(bytes: Int64) { state.withLock { $0.downloadedBytes += bytes } }

    /// Records one derivation (an image's variants, or a video's first frame) that took `seconds`.
    package func fileDerived(seconds: Double) {
        let bucket = Self.derivationBuckets.firstIndex { seconds <= $0 } ?? Self.derivationBuckets.count
        state.withLock { s in
            s.derivationCount += 1
            s.derivationSum += seconds
            if bucket < s.derivationBuckets.count { s.derivationBuckets[bucket] += 1 }
        }
    }

    /// Counts one upload or download the file store failed (it did not answer, or a download was cut short).
    package func fileStoreFailed() { state.withLock { $0.fileStoreErrors += 1 } }

    /// Counts one blocklist hit whose strongest action was `action` (docs/blocklists.md#actions).
    package func blocklistHit(action: String) { state.withLock { $0.blocklistHits[action, default: 0] += 1 } }

    /// The HTTP part of the exposition text.
    package func render() -> String {
        let s = state.withLock { $0 }
        var out = Self.family("parley_http_requests_total", "counter", "HTTP requests by method, route template and status.")
        var requests = s.requests
        for (key, count) in s.packed.values { requests[key, default: 0] += count }
        let sorted = requests.sorted { ($0.key.route, $0.key.method, $0.key.status) < ($1.key.route, $1.key.method, $1.key.status) }
        for (key, count) in sorted {
            out += "parley_http_requests_total{method=\"\(key.method)\",route=\"\(Self.escape(key.route))\",status=\"\(key.status)\"} \(count)\n"
        }
        out += Self.histogram(
            "parley_http_request_duration_seconds", "HTTP request latency.", buckets: Self.cumulative(s.bucketCounts), count: s.durationCount,
            sum: s.durationSum)
        out += Self.metric("parley_http_connections_open", "gauge", "Open HTTP connections.", s.openConnections)
        out += Self.family("parley_messages_total", "counter", "Messages accepted by sends, by conversation type and storage.")
        for (key, count) in s.messages.sorted(by: { $0.key < $1.key }) {
            let parts = key.split(separator: " ")
            out += "parley_messages_total{conversation_type=\"\(parts[0])\",stored=\"\(parts[1])\"} \(count)\n"
        }
        out += Self.family("parley_file_uploads_total", "counter", "Uploads stored as files, by kind.")
        for (kind, count) in s.uploads.sorted(by: { $0.key < $1.key }) { out += "parley_file_uploads_total{kind=\"\(kind)\"} \(count)\n" }
        out += Self.metric("parley_file_uploaded_bytes_total", "counter", "Bytes of the uploads stored as files.", s.uploadedBytes)
        out += Self.metric("parley_file_downloaded_bytes_total", "counter", "Bytes sent by file downloads.", s.downloadedBytes)
        out += Self.histogram(
            "parley_file_derivation_seconds", "Time to derive an image's variants or a video's first frame.", bounds: Self.derivationBuckets,
            buckets: Self.cumulative(s.derivationBuckets), count: s.derivationCount, sum: s.derivationSum)
        out += Self.metric("parley_file_store_errors_total", "counter", "Uploads and downloads the file store failed.", s.fileStoreErrors)
        out += Self.family("parley_blocklist_hits_total", "counter", "Content that matched a blocklist, by the strongest action taken.")
        for action in ["block", "shadow_block", "mask", "flag"] {
            out += "parley_blocklist_hits_total{action=\"\(action)\"} \(s.blocklistHits[action, default: 0])\n"
        }
        return out
    }

    /// Running totals of per-bucket counts: the cumulative counts a histogram's `_bucket` samples carry.
    package static func cumulative(_ counts: [Int]) -> [Int] {
        var total = 0
        return counts.map { count in
            total += count
            return total
        }
    }

    /// The `# HELP` and `# TYPE` lines of a metric in the exposition text; its samples follow.
    package static func family(_ name: String, _ type: String, _ help: String) -> String {
        "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
    }

    /// A histogram over ``buckets`` (cumulative counts per bound, as recorded), with its `+Inf` bucket, sum and count.
    package static func histogram(
        _ name: String, _ help: String, bounds: [Double] = buckets, buckets counts: [Int], count: Int, sum: Double
    ) -> String {
        var out = family(name, "histogram", help)
        for (i, bound) in bounds.enumerated() { out += "\(name)_bucket{le=\"\(bound)\"} \(counts[i])\n" }
        return out + "\(name)_bucket{le=\"+Inf\"} \(count)\n\(name)_sum \(sum)\n\(name)_count \(count)\n"
    }

    /// A metric with one unlabelled sample.
    package static func metric(_ name: String, _ type: String, _ help: String, _ value: some CustomStringConvertible) -> String {
        family(name, type, help) + "\(name) \(value)\n"
    }

    package static func escape(_ value: String) -> String {
        var out = ""
        for ch in value {
            switch ch {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.append(ch)
            }
        }
        return out
    }
}
