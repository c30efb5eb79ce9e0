import ParleyHTTP
import ParleyPostgres
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Fixtures the end-to-end suites share: moving the test clock, and white-box SQL for bulk set-ups.
extension TestServer {
    /// Moves the server's test clock forward by `ms` (every due timer fires before it answers).
    func advanceClock(ms: Int) throws {
        let r = try request(.post, "/v1/test/clock/advance", bearer: adminKey, json: "{\"ms\":\(ms)}")
        #expect(r.status == 200, "clock advance: \(r.text)")
    }

    /// Runs `sql` directly against the server's database (white box: bulk fixtures), with no response timeout: a bulk
    /// insert may rightly take longer than the serving connections' bound on a busy test machine.
    func sql(_ sql: String, _ parameters: [(any PostgresEncodable)?]) throws {
        try app.services.pool.withConnection { db in try db.withResponseTimeout(nil) { _ = try $0.query(sql: sql, parameters) } }
    }

    /// The first column of the first row of `sql`, an integer (-1 without rows).
    func count(_ sql: String, _ parameters: [(any PostgresEncodable)?]) throws -> Int64 {
        try app.services.pool.withConnection { db in try db.query(sql: sql, parameters).first?[0].int64 ?? -1 }
    }
}
