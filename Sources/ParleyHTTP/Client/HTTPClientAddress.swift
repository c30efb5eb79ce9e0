import Dispatch
import Glibc
import ParleySync

/// One resolved socket address, kept as `getaddrinfo` returned it so that the client connects to exactly the
/// address it checked (no second resolution between the policy check and `connect`).
struct HTTPClientAddress: Sendable {
    var family: Int32
    var socketType: Int32
    var socketProtocol: Int32
    var storage: sockaddr_storage
    var length: socklen_t

    /// The 4 (IPv4) or 16 (IPv6) address bytes in network order.
    var bytes: [UInt8] {
        withUnsafeBytes(of: storage) { raw in
            if family == AF_INET6 {
                return Array(raw[MemoryLayout<sockaddr_in6>.offset(of: \.sin6_addr)!...].prefix(16))
            }
            return Array(raw[MemoryLayout<sockaddr_in>.offset(of: \.sin_addr)!...].prefix(4))
        }
    }

    /// The range the address lies in.
    var range: OutboundAddressRange { OutboundAddressRange(bytes: bytes) ?? .reserved }

    /// The address in text form (`192.0.2.1`, `2001:db8::1`), for messages.
    var text: String {
        var output = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let address = bytes
        guard inet_ntop(family, address, &output, socklen_t(output.count)) != nil else { return "?" }
        return String(decoding: output.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The addresses of `host` (a name or an IP literal) for TCP to `port`, resolved once before `deadline`.
    ///
    /// A literal is converted at once. A name is looked up with `getaddrinfo` on a helper thread, so a slow
    /// resolver cannot outlast the deadline: past it this throws `.timeout` and the lookup's answer is dropped.
    static func resolve(host: String, port: Int, deadline: ContinuousClock.Instant) throws -> [HTTPClientAddress] {
        if let literal = try lookup(host: host, port: port, numericOnly: true) { return literal }
        let answer = LockedValue<Result<[HTTPClientAddress], any Error>?>(nil)
        let answered = DispatchSemaphore(value: 0)
        let started = HTTPClientWorkerThread.start {
            let result = Result { try lookup(host: host, port: port, numericOnly: false) ?? [] }
            answer.withLock { $0 = result }
            answered.signal()
        }
        guard started else { throw HTTPClientError(.connectFailed, "cannot start a thread to resolve \(host)") }
        let remaining = max(deadline - ContinuousClock.now, .zero)
        guard answered.wait(timeout: .now() + remaining / .seconds(1)) == .success, let result = answer.withLock({ $0 })
        else {
            throw HTTPClientError(.timeout, "resolving \(host) timed out")
        }
        return try result.get()
    }

    /// Runs `getaddrinfo`; with `numericOnly`, nil when `host` is not an IP literal.
    private static func lookup(host: String, port: Int, numericOnly: Bool) throws -> [HTTPClientAddress]? {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_protocol = Int32(IPPROTO_TCP)
        hints.ai_flags = AI_NUMERICSERV | (numericOnly ? AI_NUMERICHOST : 0)
        var list: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &list)
        if numericOnly && rc == EAI_NONAME { return nil }
        guard rc == 0, let list else {
            let reason = String(cString: gai_strerror(rc))
            throw HTTPClientError(.connectFailed, "cannot resolve \(host): \(reason)")
        }
        defer { freeaddrinfo(list) }
        var addresses: [HTTPClientAddress] = []
        var next: UnsafeMutablePointer<addrinfo>? = list
        while let info = next?.pointee {
            next = info.ai_next
            guard info.ai_family == AF_INET || info.ai_family == AF_INET6, let source = info.ai_addr,
                Int(info.ai_addrlen) <= MemoryLayout<sockaddr_storage>.size
            else { continue }
            var storage = sockaddr_storage()
            withUnsafeMutableBytes(of: &storage) { target in
                target.copyMemory(from: UnsafeRawBufferPointer(start: source, count: Int(info.ai_addrlen)))
            }
            addresses.append(
                HTTPClientAddress(
                    family: info.ai_family, socketType: info.ai_socktype, socketProtocol: info.ai_protocol,
                    storage: storage, length: info.ai_addrlen))
        }
        guard !addresses.isEmpty else { throw HTTPClientError(.connectFailed, "no address for \(host)") }
        return addresses
    }
}
