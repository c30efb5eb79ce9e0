import Foundation
import ParleyPostgres
import ParleyTesting
import Synchronization
import Testing

/// Worker threads, borrowing, time-outs and stats.
@Suite struct PoolTests {
    /// Tracks how many bodies run at once.
    final class Gauge: Sendable {
        private let state = Mutex((current: 0, max: 0))
        func enter() {
            state.withLock {
                $0.current += 1; $0.max = Swift.max($0.max, $0.current)
            }
        }
        func leave() { state.withLock { $0.current -= 1 } }
        var max: Int { state.withLock { $0.max } }
    }

    @Test func sixtyFourThreadsShareEightConnections() throws {
        let pool = PostgresPool(configuration: try freshDatabase(migrated: false), size: 8, acquireTimeout: .seconds(30))
        defer { pool.shutdown() }
        let gauge = Gauge()
        let failures = Collector<String>()
        let pids = Collector<Int32>()
        let maxInUse = Atomic<Int>(0)
        let (_, seconds) = measure {
            onThreads(64) { i in
                for j in 0..<10 {
                    do {
                        let value = try pool.withConnection { db -> Int in
                            gauge.enter()
                            defer { gauge.leave() }
                            maxInUse.max(pool.inUse, ordering: .relaxed)
                            pids.append(db.backendPID)
                            return try db.query(sql: "SELECT $1::int * 2, pg_sleep(0.002)", [i * 100 + j], prepared: true)[0][0].int
                        }
                        if value != (i * 100 + j) * 2 { failures.append("wrong value") }
                    } catch {
                        failures.append(String(reflecting: error))
                    }
                }
            }
        }
        #expect(failures.all.isEmpty, "\(failures.all.prefix(3))")
        #expect(gauge.max <= 8)
        #expect(maxInUse.load(ordering: .relaxed) <= 8)
        #expect(Set(pids.all).count <= 8)
        // The caller wakes just before its worker decrements `inUse`.
        #expect(eventually(timeout: .seconds(2)) { pool.inUse == 0 })
        #expect(pool.waiting == 0)
        #expect(pool.size == 8)
        print("pool: 640 borrows by 64 threads on 8 connections in \(seconds) s, max concurrent \(gauge.max)")
    }

    @Test func sixtyFourAsyncBorrowers() async throws {
        let pool = PostgresPool(configuration: try freshDatabase(migrated: false), size: 8, acquireTimeout: .seconds(30))
        defer { pool.shutdown() }
        let gauge = Gauge()
        let sum = try await withThrowingTaskGroup(of: Int.self) { group in
            for i in 0..<64 {
                group.addTask {
                    try await pool.withConnection { db in
                        gauge.enter()
                        defer { gauge.leave() }
                        return try db.query(sql: "SELECT $1::int, pg_sleep(0.01)", [i])[0][0].int
                    }
                }
            }
            return try await group.reduce(0, +)
        }
        #expect(sum == (0..<64).reduce(0, +))
        #expect(gauge.max <= 8)
    }

    @Test func acquireTimeoutGivesPoolTimeout() throws {
        let pool = PostgresPool(configuration: try freshDatabase(migrated: false), size: 1, acquireTimeout: .milliseconds(200))
        defer { pool.shutdown() }
        let started = Atomic<Bool>(false)
        pool.submit(
            {
                try? pool.withConnection { db in
                    started.store(true, ordering: .releasing)
                    try db.query(sql: "SELECT pg_sleep(1.5)")
                }
            }, rejected: {})
        #expect(eventually(timeout: .seconds(5)) { started.load(ordering: .acquiring) })
        let (result, seconds) = measure { Result { try pool.withConnection { try $0.query("SELECT 1") } } }
        guard case .failure(let error as PostgresError) = result else {
            Issue.record("expected a pool time-out")
            return
        }
        #expect(error.kind == .poolTimeout)
        #expect(seconds < 1)
        // Queued work that waited too long is rejected, not run.
        let ran = Atomic<Int>(0)
        let rejected = Atomic<Int>(0)
        pool.submit({ ran.add(1, ordering: .relaxed) }, rejected: { rejected.add(1, ordering: .relaxed) })
        #expect(eventually(timeout: .seconds(5)) { ran.load(ordering: .relaxed) + rejected.load(ordering: .relaxed) == 1 })
        #expect(rejected.load(ordering: .relaxed) == 1)
        // And the pool works again once the worker is free.
        #expect(try pool.withConnection { try $0.query("SELECT 7")[0][0].int } == 7)
    }

    @Test func submittedWorkUsesItsWorkersConnectionDirectly() throws {
        let pool = PostgresPool(configuration: try freshDatabase(migrated: false), size: 2)
        defer { pool.shutdown() }
        let pids = Collector<Int32>()
        let done = Atomic<Int>(0)
        for _ in 0..<20 {
            pool.submit(
                {
                    // Nested borrows on a worker reuse the same connection (no hop, no deadlock).
                    let outer = try? pool.withConnection { db in
                        (db.backendPID, try? pool.withConnection { $0.backendPID })
                    }
                    if let outer, outer.0 == outer.1 { pids.append(outer.0) }
                    _ = try? pool.transaction { db in try db.query(sql: "SELECT 1") }
                    done.add(1, ordering: .relaxed)
                }, rejected: {})
        }
        #expect(eventually(timeout: .seconds(10)) { done.load(ordering: .relaxed) == 20 })
        #expect(pids.all.count == 20)
        #expect(Set(pids.all).count <= 2)
    }

    @Test func queueBoundRejectsImmediately() throws {
        let pool = PostgresPool(configuration: try freshDatabase(migrated: false), size: 1, acquireTimeout: .seconds(30))
        defer { pool.shutdown() }
        let release = Atomic<Bool>(false)
        let started = Atomic<Bool>(false)
        pool.submit(
            {
                started.store(true, ordering: .releasing)
                // A gate, not a wait: the job holds its connection until the test releases it.
                while !release.load(ordering: .acquiring) { usleep(1000) }
            }, rejected: {})
        #expect(eventually(timeout: .seconds(5)) { started.load(ordering: .acquiring) })
        let rejectedCount = Atomic<Int>(0)
        let ranCount = Atomic<Int>(0)
        for _ in 0..<(PostgresPool.maxQueuedJobs + 5) {
            pool.submit({ ranCount.add(1, ordering: .relaxed) }, rejected: { rejectedCount.add(1, ordering: .relaxed) })
        }
        #expect(pool.waiting == PostgresPool.maxQueuedJobs)
        #expect(rejectedCount.load(ordering: .relaxed) == 5)
        release.store(true, ordering: .releasing)
        #expect(eventually(timeout: .seconds(10)) { ranCount.load(ordering: .relaxed) == PostgresPool.maxQueuedJobs })
    }

    @Test func shutdownRejectsFurtherWork() throws {
        let pool = PostgresPool(configuration: try freshDatabase(migrated: false), size: 2)
        #expect(try pool.withConnection { try $0.query("SELECT 1")[0][0].int } == 1)
        pool.shutdown()
        #expect { try pool.withConnection { _ in 1 } } throws: { ($0 as? PostgresError)?.kind == .poolClosed }
        let rejected = Atomic<Bool>(false)
        pool.submit({}, rejected: { rejected.store(true, ordering: .relaxed) })
        let wasRejected = rejected.load(ordering: .relaxed)
        #expect(wasRejected)
    }

    @Test func brokenConnectionIsReplacedOnNextUse() throws {
        let pool = PostgresPool(configuration: try freshDatabase(migrated: false), size: 1)
        defer { pool.shutdown() }
        let first = try pool.withConnection { $0.backendPID }
        // Another session kills ours; the next borrow notices and reconnects instead of failing.
        let admin = try PostgresConnection(try sharedAdminConfiguration())
        try admin.query(sql: "SELECT pg_terminate_backend($1)", [Int(first)])
        #expect(try eventually { try admin.query(sql: "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", [Int(first)])[0][0].int == 0 })
        // A deliberate window, not a wait for a state we can see: the backend leaves pg_stat_activity before its
        // process exits and closes the socket, and the pool notices a dead session by the EOF on its socket.
        usleep(100_000)
        let second = try pool.withConnection { db -> Int32 in
            _ = try db.query(sql: "SELECT 1")
            return db.backendPID
        }
        #expect(second != first)
    }
}
