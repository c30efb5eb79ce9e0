import Foundation
import Glibc
import ParleyPostgres
import ParleyTesting
import Testing

/// `parley backup`/`restore`/`data` below the command line (docs/backup.md): archives that restore, refusals, and
/// finding a cluster and its server from another process. scripts/backup-check.sh runs the commands under load.
@Suite struct BackupTests {
    @Test func anArchiveRestoresIntoAnEmptyDatabaseOnlyOnce() throws {
        let cluster = try TestDatabase.shared()
        let source = try cluster.makeDatabase(migrated: true)
        try PostgresConnection(source).simpleQuery("CREATE TABLE backup_test (x text); INSERT INTO backup_test VALUES ('kept')")
        let directory = try TestDatabase.makeDataDirectory()
        let before = try FileManager.default.contentsOfDirectory(atPath: directory)
        let file = directory + "/parley.dump"
        let size = try DatabaseArchive.backup(.configuration(source), to: file)
        #expect(size > 0)
        var info = stat()
        #expect(stat(file, &info) == 0 && info.st_mode & 0o777 == 0o600, "the archive holds secrets: owner only")
        #expect(try Set(FileManager.default.contentsOfDirectory(atPath: directory)) == Set(before + ["parley.dump"]), "no temporary file is left")

        let target = try cluster.makeDatabase(migrated: false)
        try DatabaseArchive.restore(file, into: .configuration(target))
        let restored = try PostgresConnection(target)
        #expect(try restored.query(sql: "SELECT x FROM backup_test")[0][0].string == "kept")
        let migrations = "SELECT count(*)::int FROM schema_migrations"
        #expect(try restored.query(sql: migrations)[0][0].int == (try PostgresConnection(source).query(sql: migrations)[0][0].int))

        #expect { try DatabaseArchive.restore(file, into: .configuration(target)) } throws: {
            String(describing: $0).contains("not empty")
        }
    }

    @Test func aFailedBackupLeavesNoFile() throws {
        let directory = try TestDatabase.makeDataDirectory()
        let before = try FileManager.default.contentsOfDirectory(atPath: directory)
        #expect(throws: DatabaseArchive.Failure.self) {
            _ = try DatabaseArchive.backup(.url("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2"), to: directory + "/x.dump")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == before, "neither the file nor a temporary one is left")
    }

    /// Another process finds the running server's socket in postmaster.pid, wherever it is (here a /tmp directory:
    /// the data directory's path is too long for a socket below it).
    @Test func aRunningServerIsFoundFromItsPidFile() throws {
        let base = try TestDatabase.makeDataDirectory()
        let long = base + "/" + String(repeating: "d", count: 80)
        let cluster = EmbeddedPostgres(dataDirectory: long)
        defer { cluster.stop(.immediate) }
        #expect(EmbeddedPostgres.locate(dataDirectory: long).server == nil)
        let configuration = try cluster.start()
        let location = EmbeddedPostgres.locate(dataDirectory: long)
        let server = try #require(location.server)
        #expect(server.socketDirectory == configuration.host)
        #expect(location.initialised && location.relocatedHome == nil)
        #expect(try PostgresConnection(server.configuration).query(sql: "SELECT 1")[0][0].int == 1)
    }

    /// `parley data list/remove`: a cluster whose recorded data directory is gone may go; one its data directory links
    /// to stays; one with no record stays unless forced.
    @Test func relocatedClustersTellWhetherTheirDataDirectoryIsGone() throws {
        let clusters = try TestDatabase.makeDataDirectory()
        let dataDirectory = try TestDatabase.makeDataDirectory()
        func make(_ name: String, owner: String?) throws -> String {
            let path = clusters + "/" + name
            try FileManager.default.createDirectory(atPath: path + "/pg", withIntermediateDirectories: true)
            if let owner { try (owner + "\n").write(toFile: path + "/data-directory", atomically: true, encoding: .utf8) }
            return path
        }
        let linked = try make("aaaaaaaaaaaaaaaa", owner: dataDirectory)
        try FileManager.default.createSymbolicLink(atPath: dataDirectory + "/pg", withDestinationPath: linked + "/pg")
        _ = try make("bbbbbbbbbbbbbbbb", owner: "/nowhere/parley-data")
        _ = try make("cccccccccccccccc", owner: nil)

        let listed = RelocatedCluster.list(in: clusters)
        #expect(listed.map(\.name) == ["aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb", "cccccccccccccccc"])
        #expect(listed.map(\.owner) == [.linked(dataDirectory), .gone("/nowhere/parley-data"), .unknown])
        #expect(listed[0].reasonToKeep(force: true)?.contains("links to it") == true)
        #expect(listed[1].reasonToKeep(force: false) == nil)
        #expect(listed[2].reasonToKeep(force: false) != nil)
        #expect(listed[2].reasonToKeep(force: true) == nil)
    }
}
