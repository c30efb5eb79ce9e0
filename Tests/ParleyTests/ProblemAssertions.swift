import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Assertions on RFC 9457 problem responses (docs/errors.md#problems-rfc-9457) shared by the end-to-end suites.
protocol ProblemAssertions {}

extension ProblemAssertions {
    /// The `errors[].field` values of a problem response.
    static func fields(_ r: TestResponse) -> [String] {
        r.json?["errors"]?.arrayValue?.compactMap { $0["field"]?.stringValue } ?? []
    }

    /// Asserts the full problem shape with `status` and `code`.
    static func expectProblem(
        _ r: TestResponse, _ status: Int, _ code: Int, _ comment: String = "", sourceLocation: SourceLocation = #_sourceLocation
    ) {
        expectProblem(status: r.status, headers: r.headers, body: r.body, status, code, comment, sourceLocation: sourceLocation)
    }

    /// Asserts the full problem shape with `status` and the catalogue entry `code` (`.userNotFound`).
    static func expectProblem(
        _ r: TestResponse, _ status: Int, _ code: ErrorCode, _ comment: String = "",
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        expectProblem(r, status, code.code, comment, sourceLocation: sourceLocation)
    }

    static func expectProblem(
        _ r: HTTPClientResponse, _ status: Int, _ code: ErrorCode, _ comment: String = "",
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        expectProblem(r, status, code.code, comment, sourceLocation: sourceLocation)
    }

    static func expectProblem(
        _ r: HTTPClientResponse, _ status: Int, _ code: Int, _ comment: String = "", sourceLocation: SourceLocation = #_sourceLocation
    ) {
        expectProblem(status: r.status, headers: r.headers, body: r.body, status, code, comment, sourceLocation: sourceLocation)
    }

    /// Status, `code`, content type, `status`/`type`/`title`/`detail` members and `request_id` = `X-Request-Id`.
    static func expectProblem(
        status actual: Int, headers: HTTPHeaders, body: [UInt8], _ status: Int, _ code: Int, _ comment: String,
        sourceLocation: SourceLocation
    ) {
        let json = try? JSONValue.parse(body)
        let text = String(decoding: body, as: UTF8.self)
        #expect(actual == status, "\(comment) \(text)", sourceLocation: sourceLocation)
        #expect(json?["code"]?.intValue == Int64(code), "\(comment) \(text)", sourceLocation: sourceLocation)
        #expect(
            headers["Content-Type"]?.hasPrefix("application/problem+json") == true,
            "\(comment) content type \(headers["Content-Type"] ?? "none")", sourceLocation: sourceLocation)
        #expect(json?["status"]?.intValue == Int64(actual), "\(comment)", sourceLocation: sourceLocation)
        #expect(json?["type"]?.stringValue == "urn:parley:error:\(code)", "\(comment)", sourceLocation: sourceLocation)
        #expect(json?["title"]?.stringValue?.isEmpty == false, "\(comment)", sourceLocation: sourceLocation)
        #expect(json?["detail"]?.stringValue != nil, "\(comment)", sourceLocation: sourceLocation)
        let requestID = headers["X-Request-Id"]
        #expect(requestID?.isEmpty == false, "\(comment) X-Request-Id", sourceLocation: sourceLocation)
        #expect(json?["request_id"]?.stringValue == requestID, "\(comment) request_id", sourceLocation: sourceLocation)
    }

    /// Asserts 400 `invalid_params` whose `errors[].field` contains `field`.
    static func expectInvalid(
        _ r: TestResponse, field: String, _ comment: String = "", sourceLocation: SourceLocation = #_sourceLocation
    ) {
        expectProblem(r, 400, .invalidParams, comment, sourceLocation: sourceLocation)
        #expect(fields(r).contains(field), "\(comment): expected field \(field) in \(r.text)", sourceLocation: sourceLocation)
    }
}
