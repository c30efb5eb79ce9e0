import Foundation
import ParleyPostgres
import ParleyTesting
import Synchronization
import Testing

/// A fresh database on the shared test cluster.
func freshDatabase(migrated: Bool = true) throws -> PostgresConfiguration {
    try TestDatabase.shared().makeDatabase(migrated: migrated)
}

/// A connection to a fresh, empty database.
func freshConnection() throws -> PostgresConnection {
    try PostgresConnection(freshDatabase(migrated: false))
}

/// Runs `body(i)` on `count` real threads at once and waits for all (never on Swift's cooperative pool).
func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
    let group = DispatchGroup()
    for index in 0..<count {
        group.enter()
        let thread = Thread {
            body(index)
            group.leave()
        }
        thread.start()
    }
    group.wait()
}

/// Seconds elapsed while running `body`.
func measure<T>(_ body: () throws -> T) rethrows -> (T, Double) {
    let start = DispatchTime.now().uptimeNanoseconds
    let value = try body()
    return (value, Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9)
}

/// Collects values from many threads.
final class Collector<T: Sendable>: Sendable {
    private let items = Mutex<[T]>([])
    func append(_ item: T) { items.withLock { $0.append(item) } }
    var all: [T] { items.withLock { $0 } }
}

/// Superuser settings of the shared test server.
func sharedAdminConfiguration() throws -> PostgresConfiguration {
    try TestDatabase.shared().adminConfiguration
}
