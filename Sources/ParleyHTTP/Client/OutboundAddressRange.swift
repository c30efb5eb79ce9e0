/// The kind of range an IP address lies in, as the outbound policy judges it (IANA special-purpose registries).
///
/// Only `.global` addresses are reached by default; every other range (the host itself, private networks, cloud
/// metadata, multicast, …) only when `OutboundPolicy.allowPrivateDestinations` says so. IPv4-mapped
/// (`::ffff:0:0/96`) and NAT64 (`64:ff9b::/96`) addresses are judged by the IPv4 address they carry.
public enum OutboundAddressRange: String, Sendable, Equatable, CaseIterable {
    /// A publicly routable address.
    case global
    /// `0.0.0.0/8` ("this network"), `::`.
    case unspecified
    /// `127.0.0.0/8`, `::1`.
    case loopback
    /// `10.0.0.0/8`, `172.16.0.0/12`, `192.168.0.0/16`, `fc00::/7` (unique local), `fec0::/10` (site-local),
    /// `64:ff9b:1::/48` (local-use NAT64).
    case privateUse
    /// `100.64.0.0/10` (carrier-grade NAT).
    case sharedAddressSpace
    /// `169.254.0.0/16`, `fe80::/10`.
    case linkLocal
    /// `169.254.169.254` and `fd00:ec2::254`: the cloud instance metadata services.
    case metadata
    /// `192.0.0.0/24` (IETF protocol assignments).
    case protocolAssignments
    /// `198.18.0.0/15` (benchmarking).
    case benchmarking
    /// `192.0.2.0/24`, `198.51.100.0/24`, `203.0.113.0/24`, `2001:db8::/32`.
    case documentation
    /// `224.0.0.0/4`, `ff00::/8`.
    case multicast
    /// `240.0.0.0/4` and IPv6 outside `2000::/3` (not allocated for global unicast).
    case reserved
    /// `255.255.255.255`.
    case broadcast

    /// True for the one range reached without `allowPrivateDestinations`.
    public var isGlobal: Bool { self == .global }

    /// The range of a 4-byte IPv4 or 16-byte IPv6 address (network byte order); nil for any other length.
    init?(bytes: some Collection<UInt8>) {
        let b = Array(bytes)
        switch b.count {
        case 4: self = Self.ipv4(b[0], b[1], b[2], b[3])
        case 16: self = Self.ipv6(b)
        default: return nil
        }
    }

    private static func ipv4(_ a: UInt8, _ b: UInt8, _ c: UInt8, _ d: UInt8) -> OutboundAddressRange {
        switch (a, b, c) {
        case (0, _, _): return .unspecified
        case (10, _, _): return .privateUse
        case (100, 64...127, _): return .sharedAddressSpace
        case (127, _, _): return .loopback
        case (169, 254, _): return c == 169 && d == 254 ? .metadata : .linkLocal
        case (172, 16...31, _): return .privateUse
        case (192, 0, 0): return .protocolAssignments
        case (192, 0, 2), (198, 51, 100), (203, 0, 113): return .documentation
        case (192, 168, _): return .privateUse
        case (198, 18...19, _): return .benchmarking
        case (224...239, _, _): return .multicast
        case (255, 255, 255) where d == 255: return .broadcast
        case (240...255, _, _): return .reserved
        default: return .global
        }
    }

    private static func ipv6(_ b: [UInt8]) -> OutboundAddressRange {
        let first12 = b[0..<12]
        if first12.allSatisfy({ $0 == 0 }) {
            if b[12..<15].allSatisfy({ $0 == 0 }) && b[15] <= 1 { return b[15] == 0 ? .unspecified : .loopback }
            return .reserved  // IPv4-compatible (::a.b.c.d), deprecated
        }
        let mapped: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF]
        let nat64: [UInt8] = [0, 0x64, 0xFF, 0x9B, 0, 0, 0, 0, 0, 0, 0, 0]
        if first12.elementsEqual(mapped) || first12.elementsEqual(nat64) { return ipv4(b[12], b[13], b[14], b[15]) }
        if b[0..<6].elementsEqual([0, 0x64, 0xFF, 0x9B, 0, 1]) { return .privateUse }
        if b[0..<4].elementsEqual([0xFD, 0, 0x0E, 0xC2]) && b[4..<14].allSatisfy({ $0 == 0 }) && b[14] == 2 && b[15] == 0x54 {
            return .metadata
        }
        switch (b[0], b[1]) {
        case (0xFC...0xFD, _): return .privateUse
        case (0xFE, 0x80...0xBF): return .linkLocal
        case (0xFE, 0xC0...0xFF): return .privateUse
        case (0xFF, _): return .multicast
        case (0x20, 0x01) where b[2] == 0x0D && b[3] == 0xB8: return .documentation
        case (0x20...0x3F, _): return .global
        default: return .reserved
        }
    }
}
