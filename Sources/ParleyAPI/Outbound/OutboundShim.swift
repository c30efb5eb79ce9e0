import ParleyHTTP

// TEMPORARY: stands in for ParleyHTTP's OutboundHTTP (TLS, address policy) until that lands; same names and
// signatures, plain http only, no address policy. Deleted when the TLS client is merged.

package struct OutboundPolicy: Sendable, Equatable {
    package var allowPrivateDestinations: Bool
    package var extraCAFile: String?
    package init(allowPrivateDestinations: Bool = false, extraCAFile: String? = nil) {
        self.allowPrivateDestinations = allowPrivateDestinations
        self.extraCAFile = extraCAFile
    }
}

package struct OutboundResponse: Sendable {
    package var status: Int
    package var headers: HTTPHeaders
    package var body: [UInt8]
    package var truncated: Bool
}

package enum OutboundHTTP {
    package static func send(
        _ method: HTTPMethod, url: String, headers: HTTPHeaders, body: [UInt8], timeout: Duration, policy: OutboundPolicy,
        maxResponseBytes: Int = 65_536
    ) throws -> OutboundResponse {
        let response = try HTTPClient.request(method, url: url, headers: headers, body: body, timeout: timeout)
        return OutboundResponse(
            status: response.status, headers: response.headers, body: Array(response.body.prefix(maxResponseBytes)),
            truncated: response.body.count > maxResponseBytes)
    }
}
