import Foundation
import Glibc
import ParleyPostgres
import ParleyTesting
import Synchronization
import Testing

/// The embedded cluster: data reuse, stale and live pid files, and the outage behaviour of the pool.
@Suite struct EmbeddedPostgresTests {
    @Test func restartReusesDataAndHandlesPidFiles() throws {
        let cluster = try TestDatabase.makeCluster()
        defer { cluster.stop() }
        let configuration = try cluster.start()
        try cluster.createDatabase("keep")
        try cluster.createDatabase("keep")  // idempotent
        let db = try PostgresConnection(configuration.with(database: "keep"))
        try db.simpleQuery("CREATE TABLE kept (x text); INSERT INTO kept VALUES ('survives')")
        #expect(try db.query(sql: "SHOW max_connections")[0][0].string == "300")
        #expect(try db.query(sql: "SHOW fsync")[0][0].string == "on")
        #expect(try db.query(sql: "SHOW listen_addresses")[0][0].string == "")

        // A second instance on the same directory is refused while the first runs.
        let intruder = EmbeddedPostgres(dataDirectory: cluster.dataDirectory)
        #expect { _ = try intruder.start() } throws: { String(reflecting: $0).contains("in use by pid") }

        cluster.stop()
        #expect(!cluster.isRunning)
        // A crash leaves a postmaster.pid naming a dead process: the next start removes it.
        let dead = Process()
        dead.executableURL = URL(fileURLWithPath: "/bin/true")
        try dead.run()
        dead.waitUntilExit()
        try "\(dead.processIdentifier)\n\(cluster.clusterDirectory)\n".write(
            toFile: cluster.clusterDirectory + "/postmaster.pid", atomically: true, encoding: .utf8)

        let (again, seconds) = try measure { try cluster.start() }
        print("embedded postgres: restart in \(seconds) s")
        let reopened = try PostgresConnection(again.with(database: "keep"))
        #expect(try reopened.query(sql: "SELECT x FROM kept")[0][0].string == "survives")
        // URL form with a socket directory works too.
        let url = try PostgresConfiguration("postgresql://parley@/keep?host=\(again.host!)")
        #expect(try PostgresConnection(url).query("SELECT count(*) FROM kept")[0][0].int == 1)
    }

    @Test func outageFailsFastAndRecoversWithoutRecreatingThePool() throws {
        let cluster = try TestDatabase.makeCluster()
        defer { cluster.stop() }
        let configuration = try cluster.start()
        // The acquire timeout is long so that only the outage can fail a call: the whole suite runs in parallel on two
        // cores, and a burst of 16 calls behind 4 reconnecting workers may queue past a short one.
        let pool = PostgresPool(configuration: configuration, size: 4, acquireTimeout: .seconds(10))
        defer { pool.shutdown() }
        // Warm every worker's connection.
        onThreads(8) { _ in _ = try? pool.withConnection { try $0.query("SELECT pg_sleep(0.05)") } }
        #expect(try pool.withConnection { try $0.query("SELECT 1")[0][0].int } == 1)

        cluster.stop()
        for _ in 0..<10 {
            let (result, seconds) = measure { Result { try pool.withConnection { try $0.query("SELECT 1")[0][0].int } } }
            #expect(seconds < 2, "a call during the outage took \(seconds) s")
            switch result {
            case .success: Issue.record("a query succeeded while PostgreSQL was down")
            case .failure(let error):
                #expect((error as? PostgresError)?.isConnectionFailure == true, "\(String(reflecting: error))")
            }
        }
        let (transactionResult, transactionSeconds) = measure { Result { try pool.transaction { try $0.query("SELECT 1") } } }
        #expect(transactionSeconds < 2, "a transaction during the outage took \(transactionSeconds) s")
        #expect((transactionResult.failureError as? PostgresError)?.isConnectionFailure == true)

        _ = try cluster.start()
        let restarted = DispatchTime.now().uptimeNanoseconds
        let recovered = eventually(every: .milliseconds(50)) {
            (try? pool.withConnection({ try $0.query("SELECT 1")[0][0].int })) == 1
        }
        #expect(recovered, "no call succeeded within 5 s of the restart")
        print("outage: recovered \(Double(DispatchTime.now().uptimeNanoseconds - restarted) / 1e9) s after restart")
        // Every worker recovers, not just one.
        let failures = Collector<String>()
        onThreads(16) { _ in
            do { _ = try pool.withConnection { try $0.query("SELECT 1") } } catch { failures.append(String(reflecting: error)) }
        }
        #expect(failures.all.isEmpty, "\(failures.all.prefix(2))")
    }

    @Test func longDataDirectoryGetsAShortSocketDirectory() throws {
        let base = try TestDatabase.makeCluster().dataDirectory
        let long = base + "/" + String(repeating: "d", count: 40) + "/" + String(repeating: "e", count: 40)
        let cluster = EmbeddedPostgres(dataDirectory: long)
        defer { cluster.stop(.immediate) }
        try FileManager.default.createDirectory(atPath: long, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        let configuration = try cluster.start()
        let socketDirectory = try #require(configuration.host)
        #expect(socketDirectory.hasPrefix("/tmp/parley-pg-"))
        #expect(try PostgresConnection(configuration).query("SELECT 1")[0][0].int == 1)
        cluster.stop(.immediate)
        #expect(!FileManager.default.fileExists(atPath: socketDirectory))
    }

    /// Root with a data directory user `postgres` cannot reach (a clone under root's home, mode 0700): the cluster goes
    /// to a relocated directory it can reach, linked from the data directory; nothing of the user's directories
    /// changes, and the next start finds the cluster through the link.
    @Test(.enabled(if: getuid() == 0, "only root hands the cluster to another user"))
    func untraversableParentRelocatesTheCluster() throws {
        let base = try TestDatabase.makeCluster().dataDirectory
        let closed = base + "/closed"
        try FileManager.default.createDirectory(atPath: closed + "/data", withIntermediateDirectories: true)
        chmod(closed, 0o700)
        let cluster = EmbeddedPostgres(dataDirectory: closed + "/data")
        var relocated: String?
        defer {
            cluster.stop(.immediate)
            if let relocated { try? FileManager.default.removeItem(atPath: relocated) }
        }
        let configuration = try cluster.start()
        let target = try FileManager.default.destinationOfSymbolicLink(atPath: closed + "/data/pg")
        relocated = String(target.dropLast(3))
        #expect(target.hasPrefix(EmbeddedPostgres.relocatedClustersDirectory + "/"))
        #expect(cluster.clusterDirectory == target)
        #expect(
            RelocatedCluster.inspect(relocated ?? "?").owner == .linked(closed + "/data"),
            "the relocated directory names its data directory (parley data list)")
        #expect(configuration.host?.hasPrefix(relocated ?? "?") == true, "the socket directory is reachable too")
        #expect(try PostgresConnection(configuration).query("SELECT 1")[0][0].int == 1)
        var info = stat()
        #expect(stat(closed, &info) == 0 && info.st_mode & 0o777 == 0o700, "the user's directory keeps its mode")
        cluster.stop(.fast)
        let again = EmbeddedPostgres(dataDirectory: closed + "/data")
        defer { again.stop(.immediate) }
        #expect(try PostgresConnection(try again.start()).query("SELECT 1")[0][0].int == 1)
        #expect(again.clusterDirectory == target)
    }

    @Test func findsBinaries() throws {
        let directory = try EmbeddedPostgres.findBinaries()
        #expect(FileManager.default.isExecutableFile(atPath: directory + "/postgres"))
    }
}

extension Result {
    var failureError: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
