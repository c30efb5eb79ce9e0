import Glibc
import ParleySync
import ParleyTesting
import Testing

@testable import ParleyHTTP

// Outbound requests (webhooks): address policy, TLS verification, one deadline for the whole exchange, bounded
// bodies. Every request goes to a TestReceiver on 127.0.0.1 (a free port each); other addresses appear only in the
// pure classification and validation tests, never as destinations.

/// The `HTTPClientError` that `body` throws, or nil.
private func clientError(_ body: () throws -> Void) -> HTTPClientError? {
    do {
        try body()
        return nil
    } catch let error as HTTPClientError {
        return error
    } catch {
        Issue.record("unexpected error \(error)")
        return nil
    }
}

/// Loopback destinations allowed, the test CA trusted.
private func testPolicy(_ receiver: TestReceiver) -> OutboundPolicy {
    OutboundPolicy(allowPrivateDestinations: true, extraCAFile: receiver.caFile)
}

private func post(
    _ url: String, policy: OutboundPolicy, body: String = "{}", timeout: Duration = .seconds(10), maxResponseBytes: Int = 65_536
) throws -> OutboundResponse {
    try OutboundHTTP.send(
        .post, url: url, headers: ["Content-Type": "application/json", "X-Signature": "sig"], body: Array(body.utf8),
        timeout: timeout, policy: policy, maxResponseBytes: maxResponseBytes)
}

@Suite struct OutboundAddressRangeTests {
    @Test func everySpecialRangeIsClassified() {
        let cases: [(String, OutboundAddressRange)] = [
            ("0.0.0.0", .unspecified), ("0.255.1.2", .unspecified),
            ("10.0.0.1", .privateUse), ("10.255.255.255", .privateUse),
            ("100.64.0.1", .sharedAddressSpace), ("100.127.255.255", .sharedAddressSpace), ("100.128.0.1", .global),
            ("100.63.255.255", .global),
            ("127.0.0.1", .loopback), ("127.255.0.9", .loopback),
            ("169.254.0.1", .linkLocal), ("169.254.169.254", .metadata), ("169.254.169.253", .linkLocal),
            ("172.16.0.1", .privateUse), ("172.31.255.255", .privateUse), ("172.15.0.1", .global), ("172.32.0.1", .global),
            ("192.0.0.8", .protocolAssignments), ("192.0.2.1", .documentation), ("192.0.1.1", .global),
            ("192.168.1.1", .privateUse), ("192.169.0.1", .global),
            ("198.18.0.1", .benchmarking), ("198.19.255.255", .benchmarking), ("198.20.0.1", .global),
            ("198.51.100.7", .documentation), ("203.0.113.9", .documentation),
            ("224.0.0.1", .multicast), ("239.255.255.255", .multicast),
            ("240.0.0.1", .reserved), ("254.1.1.1", .reserved), ("255.255.255.254", .reserved),
            ("255.255.255.255", .broadcast),
            ("8.8.8.8", .global), ("1.1.1.1", .global), ("93.184.216.34", .global),
            ("::", .unspecified), ("::1", .loopback), ("::2", .reserved), ("::7f00:1", .reserved),
            ("fc00::1", .privateUse), ("fd12:3456::1", .privateUse), ("fe80::1", .linkLocal), ("febf::1", .linkLocal),
            ("fec0::1", .privateUse), ("ff02::1", .multicast), ("ff0e::1", .multicast),
            ("fd00:ec2::254", .metadata), ("2001:db8::1", .documentation), ("2606:4700::1111", .global),
            ("2001:4860:4860::8888", .global), ("100::1", .reserved), ("4000::1", .reserved),
            // IPv4-mapped and NAT64 addresses are judged by the IPv4 address inside.
            ("::ffff:127.0.0.1", .loopback), ("::ffff:10.1.2.3", .privateUse), ("::ffff:169.254.169.254", .metadata),
            ("::ffff:8.8.8.8", .global), ("::ffff:7f00:1", .loopback),
            ("64:ff9b::127.0.0.1", .loopback), ("64:ff9b::a00:1", .privateUse), ("64:ff9b::169.254.169.254", .metadata),
            ("64:ff9b::8.8.8.8", .global), ("64:ff9b:1::1", .privateUse),
        ]
        for (address, expected) in cases {
            #expect(OutboundHTTP.classify(address: address) == expected, "\(address)")
        }
        for notAnAddress in ["localhost", "example.com", "1.2.3", "[::1]", "", "::ffff:999.0.0.1"] {
            #expect(OutboundHTTP.classify(address: notAnAddress) == nil, "\(notAnAddress)")
        }
        #expect(OutboundAddressRange.allCases.filter(\.isGlobal) == [.global])
    }
}

@Suite struct OutboundURLValidationTests {
    @Test func validateAcceptsHTTPAndHTTPSURLsWithAHost() throws {
        for good in [
            "https://example.com/hooks/parley", "http://example.com", "HTTPS://Example.COM:8443/a?b=c#d",
            "https://hooks.example.com./x", "https://192.0.2.10/x", "https://[2001:db8::1]:8443/x",
            "https://my_host.example.com/x", "https://example.com/" + String(repeating: "a", count: 2048 - 20),
        ] {
            #expect(throws: Never.self, "\(good)") { try OutboundHTTP.validate(url: good) }
        }
    }

    @Test func validateRejectsOtherSchemesUserInfoBadHostsAndLongURLs() {
        let bad = [
            "", "example.com/hook", "ftp://example.com/", "file:///etc/passwd", "https://", "https:///path",
            "https://user:pass@example.com/", "https://user@example.com/", "https://exa mple.com/", "https://example.com/a b",
            "https://exam\u{0}ple.com/", "https://exämple.com/", "https://-bad.example.com/", "https://bad..example.com/",
            "https://example.com:0/", "https://example.com:70000/", "https://example.com:x/", "https://[::1/",
            "https://[not-an-address]/", "https://::1/", "https://%65xample.com/", "javascript:alert(1)",
            "https://example.com/" + String(repeating: "a", count: 2048),
        ]
        for url in bad {
            let error = clientError { try OutboundHTTP.validate(url: url) }
            #expect(error?.kind == .invalidRequest, "\(url)")
        }
    }
}

@Suite struct OutboundHTTPTests {
    @Test func httpsSucceedsWithTheTestCA() throws {
        let receiver = try TestReceiver(tls: true) { request in
            .status(201, body: "got \(request.text)")
        }
        defer { receiver.stop() }
        #expect(receiver.url.hasPrefix("https://localhost:"))
        let response = try post(receiver.url + "/hook?x=1", policy: testPolicy(receiver), body: #"{"a":1}"#)
        #expect(response.status == 201)
        #expect(String(decoding: response.body, as: UTF8.self) == #"got {"a":1}"#)
        #expect(!response.truncated)
        #expect(response.headers["Content-Length"] == "11")
        let received = receiver.waitFor(count: 1)
        #expect(received.count == 1)
        #expect(received.first?.method == "POST")
        #expect(received.first?.path == "/hook?x=1")
        #expect(received.first?.header("x-signature") == "sig")
        #expect(received.first?.header("HOST") == "localhost:\(receiver.port)")
        #expect(received.first?.text == #"{"a":1}"#)
    }

    @Test func httpsToAnIPLiteralVerifiesTheIPAddress() throws {
        let receiver = try TestReceiver(tls: true)
        defer { receiver.stop() }
        let response = try post("https://127.0.0.1:\(receiver.port)/", policy: testPolicy(receiver))
        #expect(response.status == 200)
    }

    @Test func httpsFailsWithoutTheTestCA() throws {
        let receiver = try TestReceiver(tls: true)
        defer { receiver.stop() }
        let error = clientError { _ = try post(receiver.url, policy: OutboundPolicy(allowPrivateDestinations: true)) }
        #expect(error?.kind == .tls)
        #expect(error?.message.contains("certificate verify failed: unable to get local issuer certificate") == true, "\(String(describing: error))")
        let untrusted = OutboundPolicy(allowPrivateDestinations: true, extraCAFile: TestReceiver.untrustedCAFile)
        #expect(clientError { _ = try post(receiver.url, policy: untrusted) }?.kind == .tls)
        #expect(receiver.requests.isEmpty)
    }

    @Test func httpsFailsWhenTheCertificateNamesAnotherHost() throws {
        let receiver = try TestReceiver(tls: true, certificateNames: ["other.example", "192.0.2.1"])
        defer { receiver.stop() }
        let byName = clientError { _ = try post(receiver.url, policy: testPolicy(receiver)) }
        #expect(byName?.kind == .tls)
        #expect(byName?.message.contains("hostname mismatch") == true, "\(String(describing: byName))")
        let byAddress = clientError { _ = try post("https://127.0.0.1:\(receiver.port)", policy: testPolicy(receiver)) }
        #expect(byAddress?.kind == .tls)
        #expect(byAddress?.message.contains("IP address mismatch") == true, "\(String(describing: byAddress))")
        #expect(receiver.requests.isEmpty)
    }

    @Test func aMissingCAFileIsATLSError() throws {
        let policy = OutboundPolicy(allowPrivateDestinations: true, extraCAFile: "/nonexistent/parley-ca.pem")
        let error = clientError { _ = try post("https://localhost:1/", policy: policy) }
        #expect(error?.kind == .tls)
        #expect(error?.message.contains("/nonexistent/parley-ca.pem") == true)
    }

    @Test func plainHTTPToAPrivateAddressIsRefusedByDefaultAndAllowedByPolicy() throws {
        let receiver = try TestReceiver()
        defer { receiver.stop() }
        let error = clientError { _ = try post(receiver.url, policy: OutboundPolicy()) }
        #expect(error?.kind == .refused)
        #expect(error?.message.contains("127.0.0.1 (loopback)") == true, "\(String(describing: error))")
        #expect(error?.message.contains("allowed only when the server allows private webhook destinations") == true)
        #expect(receiver.requests.isEmpty)

        let response = try post(receiver.url, policy: OutboundPolicy(allowPrivateDestinations: true))
        #expect(response.status == 200)
        #expect(receiver.waitFor(count: 1).count == 1)
    }

    @Test func localhostIsRefusedByDefault() throws {
        let receiver = try TestReceiver(tls: true)
        defer { receiver.stop() }
        let error = clientError { _ = try post(receiver.url, policy: OutboundPolicy(extraCAFile: receiver.caFile)) }
        #expect(error?.kind == .refused)
        #expect(error?.message.contains("localhost") == true)
        for url in ["http://[::1]:\(receiver.port)/", "http://[::ffff:127.0.0.1]:\(receiver.port)/", "http://0.0.0.0:\(receiver.port)/"] {
            #expect(clientError { _ = try post(url, policy: OutboundPolicy()) }?.kind == .refused, "\(url)")
        }
        #expect(receiver.requests.isEmpty)
    }

    @Test func oneDeadlineBoundsTheWholeExchange() throws {
        for tls in [false, true] {
            let receiver = try TestReceiver(tls: tls) { _ in TestReceiver.Answer(status: 200, delayMillis: 3000) }
            defer { receiver.stop() }
            let start = ContinuousClock.now
            let error = clientError { _ = try post(receiver.url, policy: testPolicy(receiver), timeout: .milliseconds(500)) }
            let elapsed = ContinuousClock.now - start
            #expect(error?.kind == .timeout)
            #expect(elapsed >= .milliseconds(450))
            #expect(elapsed < .milliseconds(1500), "took \(elapsed)")
        }
    }

    @Test func redirectsAreReturnedNotFollowed() throws {
        let target = try TestReceiver()
        defer { target.stop() }
        let receiver = try TestReceiver { _ in
            TestReceiver.Answer(status: 302, body: Array("moved".utf8), headers: [("Location", target.url + "/elsewhere")])
        }
        defer { receiver.stop() }
        let response = try post(receiver.url, policy: testPolicy(receiver))
        #expect(response.status == 302)
        #expect(response.headers["location"] == target.url + "/elsewhere")
        #expect(String(decoding: response.body, as: UTF8.self) == "moved")
        #expect(target.waitFor(count: 1, timeout: .milliseconds(200)).isEmpty)
    }

    @Test func theResponseBodyIsCutAtTheBound() throws {
        let big = [UInt8](repeating: UInt8(ascii: "x"), count: 300_000)
        let receiver = try TestReceiver(tls: true) { request in
            TestReceiver.Answer(status: 200, body: request.path == "/big" ? big : Array(big.prefix(1000)))
        }
        defer { receiver.stop() }
        let cut = try post(receiver.url + "/big", policy: testPolicy(receiver), maxResponseBytes: 1000)
        #expect(cut.status == 200)
        #expect(cut.body.count == 1000)
        #expect(cut.truncated)
        let exact = try post(receiver.url + "/exact", policy: testPolicy(receiver), maxResponseBytes: 1000)
        #expect(exact.body.count == 1000)
        #expect(!exact.truncated)
        let whole = try post(receiver.url + "/big", policy: testPolicy(receiver))
        #expect(whole.body.count == 65_536)
        #expect(whole.truncated)
    }

    @Test func aDelayedAnswerDoesNotHoldUpOtherConnections() throws {
        let receiver = try TestReceiver(tls: true) { request in
            TestReceiver.Answer(status: 200, delayMillis: request.path == "/slow" ? 2000 : 0)
        }
        defer { receiver.stop() }
        let slowStatus = LockedValue<Int?>(nil)
        let policy = testPolicy(receiver)
        let slow = BackgroundThread(name: "slow-post") {
            let status = try? post(receiver.url + "/slow", policy: policy).status
            slowStatus.withLock { $0 = status }
        }
        #expect(receiver.waitFor(count: 1).count == 1)
        let start = ContinuousClock.now
        for _ in 0..<5 { #expect(try post(receiver.url + "/fast", policy: policy).status == 200) }
        #expect(ContinuousClock.now - start < .milliseconds(1500))
        slow.join()
        #expect(slowStatus.withLock { $0 } == 200)
        #expect(receiver.requests.count == 6)
    }

    @Test func httpClientSpeaksHTTPSWithTheSystemTrustStore() throws {
        let receiver = try TestReceiver(tls: true)
        defer { receiver.stop() }
        let error = clientError { _ = try HTTPClient.request(.get, url: receiver.url, timeout: .seconds(5)) }
        #expect(error?.kind == .tls)
        let context = try TLSContext.client(extraCAFile: receiver.caFile)
        #expect(try TLSContext.client(extraCAFile: receiver.caFile) === context, "one context per CA configuration")
        let connection = try HTTPClientConnection(
            endpoint: HTTPClientEndpoint(host: "localhost", port: receiver.port, tls: context), connectTimeout: .seconds(5),
            timeout: .seconds(5))
        defer { connection.close() }
        #expect(try connection.send(method: .get, path: "/a").status == 200)
        #expect(try connection.send(method: .get, path: "/b").status == 200)
        #expect(connection.connectCount == 1, "the TLS connection is kept alive")
        #expect(receiver.waitFor(count: 2).count == 2)
        #expect(receiver.requests.first?.header("Host") == "localhost:\(receiver.port)")
    }
}
