// swift-tools-version:6.1
import PackageDescription

/// Every Swift target builds in Swift 6 mode (strict concurrency as errors) with the same upcoming features.
let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "Parley",
    products: [
        .executable(name: "parley", targets: ["parley"]),
        .library(name: "Parley", targets: ["Parley"]),
        // For the fuzz targets of fuzz/ (a package of their own; scripts/fuzz.sh).
        .library(name: "ParleyHTTP", targets: ["ParleyHTTP"]),
    ],
    targets: [
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CVips", pkgConfig: "vips", providers: [.apt(["libvips-dev"])]),
        .systemLibrary(name: "CHyperscan", pkgConfig: "libhs", providers: [.apt(["libhyperscan-dev"])]),
        .target(name: "CParleyShims", cSettings: [.define("_GNU_SOURCE")]),
        // Non-variadic wrappers of the libvips calls ImageDerivation makes (Swift cannot call C variadic functions);
        // a target of its own so only the modules that derive images link libvips, not everything CParleyShims serves.
        .target(name: "CParleyVips", dependencies: ["CVips"]),
        .target(name: "ParleySync", dependencies: ["CParleyShims"], swiftSettings: strict),
        .target(name: "ParleyHTTP", dependencies: ["CParleyShims", "COpenSSL", "ParleySync"], swiftSettings: strict),
        .target(name: "ParleyPostgres", dependencies: ["CLibPQ", "CParleyShims", "COpenSSL", "ParleySync"], swiftSettings: strict),
        // Parley's own layers, lowest first (docs/adding-a-domain.md, "Layers"): a module can use only the ones
        // listed before it, so an upward reference does not compile.
        .target(name: "ParleyCore", dependencies: ["ParleyHTTP", "ParleyPostgres", "ParleySync", "COpenSSL"], swiftSettings: strict),
        .target(name: "ParleyAPI", dependencies: ["ParleyCore", "ParleyHTTP", "ParleyPostgres", "ParleySync"], swiftSettings: strict),
        .target(
            name: "ParleyDomains",
            dependencies: [
                "ParleyCore", "ParleyAPI", "ParleyHTTP", "ParleyPostgres", "ParleySync", "CVips", "CParleyVips",
                "CHyperscan",
            ],
            swiftSettings: strict),
        .target(
            name: "ParleyLive",
            dependencies: ["ParleyCore", "ParleyAPI", "ParleyDomains", "ParleyHTTP", "ParleyPostgres", "ParleySync"],
            swiftSettings: strict),
        .target(
            name: "Parley",
            dependencies: [
                "ParleyCore", "ParleyAPI", "ParleyDomains", "ParleyLive", "ParleyHTTP", "ParleyPostgres", "ParleySync",
            ],
            swiftSettings: strict),
        .executableTarget(name: "parley", dependencies: ["Parley"], swiftSettings: strict),
        .target(
            name: "ParleyTesting", dependencies: ["Parley", "ParleyCore", "ParleyHTTP", "ParleyPostgres", "ParleySync", "COpenSSL"],
            swiftSettings: strict),
        .testTarget(name: "ParleyHTTPTests", dependencies: ["ParleyHTTP", "ParleyTesting"], swiftSettings: strict),
        .testTarget(name: "ParleyPostgresTests", dependencies: ["ParleyPostgres", "ParleyTesting"], swiftSettings: strict),
        .testTarget(
            name: "ParleyTests",
            dependencies: [
                "Parley", "ParleyCore", "ParleyAPI", "ParleyDomains", "ParleyLive", "ParleyTesting", "ParleyPostgres", "CVips",
                "CParleyVips",
            ],
            swiftSettings: strict),
    ]
)
