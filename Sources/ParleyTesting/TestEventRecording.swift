import Foundation
import ParleyPostgres

/// Every event a test run wrote, for the check that each one matches its documented schema (EventSchemaTests).
///
/// With `PARLEY_TEST_EVENTS` naming a file, the test process writes at exit, before its databases go, one line per
/// event of every per-test database of the shared cluster: the Event object in the app view (docs/events.md), built by
/// PostgreSQL from the stored row as the server renders it (``EventJSON``), then the body of every before-event hook
/// call the delivery log kept (docs/webhooks.md#before-event-hooks). Nothing is recorded without the variable.
/// Servers that run their own cluster (outage tests, `parley` processes) are not covered.
enum TestEventRecording {
    static let path: String? = ProcessInfo.processInfo.environment["PARLEY_TEST_EVENTS"].flatMap { $0.isEmpty ? nil : $0 }

    /// The app view of each event row, `{"id":"…","type":…,"app_id":…,"created_at":…,"data":…}`, then each hook call's
    /// body as sent.
    private static let eventsSQL = """
        (SELECT '{"id":"' || id || '","type":' || to_json(type)::text || ',"app_id":' || to_json(app_id)::text
                || ',"created_at":' || created_at || ',"data":' || data || '}'
         FROM events ORDER BY app_id, id)
        UNION ALL
        (SELECT body FROM webhook_deliveries WHERE kind = 'before' ORDER BY app_id, id)
        """

    /// Appends the events of `databases` to the file; a database that cannot be read is reported on stderr (the check
    /// then misses its events, it does not pass them).
    static func write(databases: [(String, PostgresConfiguration)]) {
        guard let path, !databases.isEmpty else { return }
        if !FileManager.default.fileExists(atPath: path) { _ = FileManager.default.createFile(atPath: path, contents: nil) }
        guard let file = FileHandle(forWritingAtPath: path) else {
            FileHandle.standardError.write(Data("PARLEY_TEST_EVENTS: cannot open \(path)\n".utf8))
            return
        }
        defer { try? file.close() }
        _ = try? file.seekToEnd()
        var count = 0
        for (name, admin) in databases {
            do {
                let connection = try PostgresConnection(admin.with(database: name))
                var lines: [UInt8] = []
                for event in try connection.simpleQuery(eventsSQL).decode(String.self) {
                    lines += event.utf8
                    lines.append(UInt8(ascii: "\n"))
                    count += 1
                }
                file.write(Data(lines))
            } catch let error where error.sqlState == "42P01" {
                // A database a test left unmigrated (no events table): it holds no events.
            } catch {
                FileHandle.standardError.write(Data("PARLEY_TEST_EVENTS: database \(name): \(String(reflecting: error))\n".utf8))
            }
        }
        FileHandle.standardError.write(Data("PARLEY_TEST_EVENTS: \(count) events of \(databases.count) databases written to \(path)\n".utf8))
    }
}
