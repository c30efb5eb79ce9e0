import ParleyHTTP
import ParleyTesting
import Synchronization
import Testing

@testable import Parley
@testable import ParleyCore

/// The first start's keys (README.md, Quick start): printed once, after the ready line, in a block that stands out
/// from the log and pastes into a shell; scripts read its `PARLEY_KEY=` line.
@Suite("First start: the keys block")
struct FirstStartBannerTests {
    @Test func bothKeysPasteIntoAShell() {
        let lines = ParleyApp.firstStartBanner(adminKey: "admin-1", defaultAppKey: "pk.default.x", dataDirectory: "./parley-data")
        #expect(lines.first == String(repeating: "=", count: 80))
        #expect(lines.last == lines.first)
        #expect(lines.contains("PARLEY_ADMIN_KEY=admin-1"))
        #expect(lines.contains("PARLEY_KEY=pk.default.x"))
        #expect(lines.contains("export PARLEY_ADMIN_KEY PARLEY_KEY"))
        #expect(lines.contains { $0.contains("./parley-data/admin_key") })
    }

    @Test func aStartThatMadeNoKeyPrintsNothing() {
        #expect(ParleyApp.firstStartBanner(adminKey: nil, defaultAppKey: nil, dataDirectory: "d").isEmpty)
    }

    /// A generated admin key is shown once, after the ready line; the next start reuses the saved key silently.
    @Test func aGeneratedAdminKeyIsShownOnceAfterStartUp() throws {
        var configuration = Configuration()
        configuration.listenHost = "127.0.0.1"
        configuration.listenPort = 0
        configuration.poolSize = 2
        configuration.logLevel = .warning
        configuration.dataDirectory = try TestDatabase.makeDataDirectory()
        let database = try TestDatabase.shared().makeDatabase()
        let printed = Mutex<[String]>([])
        let first = try ParleyApp(configuration: configuration, database: database) { line in printed.withLock { $0.append(line) } }
        first.shutdown()
        let lines = printed.withLock { $0 }
        #expect(lines.contains("PARLEY_ADMIN_KEY=\(first.adminKey)"), "\(lines)")
        #expect(lines.contains("export PARLEY_ADMIN_KEY"), "\(lines)")
        #expect(!lines.contains { $0.hasPrefix("PARLEY_KEY=") }, "an external database gets no default app")

        printed.withLock { $0.removeAll() }
        let second = try ParleyApp(configuration: configuration, database: database) { line in printed.withLock { $0.append(line) } }
        second.shutdown()
        #expect(second.adminKey == first.adminKey)
        #expect(printed.withLock { $0 }.isEmpty)
    }
}
