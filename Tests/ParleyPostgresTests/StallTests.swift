import Foundation
import Glibc
import ParleyPostgres
import ParleyTesting
import Testing

/// A frozen server (`kill -STOP` on the postmaster and its processes): every call fails within the response timeout
/// (and the circuit's bound), the connections left waiting are replaced, not reused, and the pool recovers by itself.
/// Each test freezes a private cluster; `ClusterFreezer` thaws it on every path.
@Suite struct StallTests {
    static let timeout: Duration = .milliseconds(300)

    @Test func poolCallsOnAFrozenServerTimeOutAndThePoolRecovers() throws {
        let (cluster, database) = try TestDatabase.makePrivateDatabase()
        defer { cluster.stop(.immediate) }
        var serving = database
        serving.responseTimeout = Self.timeout
        let circuit = PostgresCircuit()
        serving.circuit = circuit
        let pool = PostgresPool(configuration: serving, size: 4, acquireTimeout: .seconds(5))
        defer { pool.shutdown() }
        onThreads(8) { _ in _ = try? pool.withConnection { try $0.query("SELECT pg_sleep(0.02)") } }

        let freezer = ClusterFreezer(postmaster: try #require(cluster.postmasterPID), maxFreeze: .seconds(10))
        freezer.freeze()
        defer { freezer.thaw() }
        // 8 callers, 3 calls each, on 4 workers: every call fails with a timeout within twice the timeout (the calls
        // in flight wait it out; the others fail fast while one probes), never hangs.
        let outcomes = Collector<(seconds: Double, error: PostgresError?)>()
        onThreads(8) { i in
            for j in 0..<3 {
                let (result, seconds) = measure {
                    Result { try pool.withConnection { try $0.query(sql: "SELECT $1::int", [i * 10 + j])[0][0].int } }
                }
                outcomes.append((seconds, result.failureError as? PostgresError))
            }
        }
        let slowest = outcomes.all.map(\.seconds).max() ?? 0
        print("stall: 24 pool calls on a frozen server, slowest failed in \(slowest) s (timeout 0.3 s)")
        #expect(outcomes.all.count == 24)
        #expect(outcomes.all.allSatisfy { $0.error?.isTimeout == true }, "\(outcomes.all.map { String(describing: $0.error) }.prefix(3))")
        #expect(slowest < 1.5)
        #expect(circuit.isOpen)
        // A fresh connection does not wait for a frozen server either.
        var direct = database
        direct.responseTimeout = Self.timeout
        let (connect, connectSeconds) = measure { Result { try PostgresConnection(direct) } }
        #expect((connect.failureError as? PostgresError)?.isTimeout == true)
        #expect(connectSeconds < 1)

        freezer.thaw()
        let (recovered, recoverySeconds) = measure {
            eventually(timeout: .seconds(5)) { (try? pool.withConnection { try $0.query("SELECT 1")[0][0].int }) == 1 }
        }
        print("stall: the pool answered again \(recoverySeconds) s after the thaw")
        #expect(recovered)
        #expect(!circuit.isOpen)
        // Every worker answers, each with its own statement's result: a connection that was left waiting for an
        // answer would hand out a stale one if it were reused.
        let wrong = Collector<String>()
        onThreads(16) { i in
            do {
                let value = try pool.withConnection { try $0.query(sql: "SELECT $1::int", [1000 + i])[0][0].int }
                if value != 1000 + i { wrong.append("call \(i) got \(value)") }
            } catch {
                wrong.append(String(reflecting: error))
            }
        }
        #expect(wrong.all.isEmpty, "\(wrong.all.prefix(3))")
    }

    @Test func aStatementSlowerThanTheTimeoutIsCancelledAndItsConnectionReplaced() throws {
        let (cluster, database) = try TestDatabase.makePrivateDatabase()
        defer { cluster.stop(.immediate) }
        var serving = database
        serving.responseTimeout = Self.timeout
        let connection = try PostgresConnection(serving)
        let pid = connection.backendPID
        let (result, seconds) = measure { Result { try connection.query("SELECT pg_sleep(5)") } }
        #expect((result.failureError as? PostgresError)?.isTimeout == true)
        #expect(seconds < 1)
        #expect(connection.isBroken)
        // The cancel reaches the server: the abandoned backend stops sleeping instead of running on.
        let admin = try PostgresConnection(database)
        let (stopped, stopSeconds) = measure {
            eventually(timeout: .milliseconds(4500)) {
                let state = try? admin.query(sql: "SELECT state FROM pg_stat_activity WHERE pid = $1", [Int(pid)])
                return (state?.rowCount ?? 0) == 0 || (try? state?[0][0].string) != "active"
            }
        }
        print("stall: the abandoned statement stopped \(stopSeconds) s after its timeout")
        // Uncancelled, pg_sleep(5) would run 4.7 s more.
        #expect(stopped && stopSeconds < 4)
        // A longer bound for one statement that rightly takes long.
        let slow = try PostgresConnection(serving)
        let value = try slow.withResponseTimeout(.seconds(5)) { try $0.query("SELECT 1 FROM pg_sleep(0.5)")[0][0].int }
        #expect(value == 1)
    }
}
