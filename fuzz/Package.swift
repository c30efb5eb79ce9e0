// swift-tools-version:6.1
import PackageDescription

/// Fuzz targets, built only by scripts/fuzz.sh with `--sanitize=fuzzer` (libFuzzer supplies `main`, so they do not
/// link in an ordinary build; that is why they live in this package of their own rather than in Parley's).
let package = Package(
    name: "ParleyFuzz",
    dependencies: [.package(name: "Parley", path: "..")],
    targets: [
        .executableTarget(
            name: "HTTPParserFuzz", dependencies: [.product(name: "ParleyHTTP", package: "Parley")],
            swiftSettings: [.unsafeFlags(["-parse-as-library"])])
    ]
)
