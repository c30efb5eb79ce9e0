import Foundation
import ParleyPostgres
import ParleyTesting
import Synchronization
import Testing

/// LISTEN/NOTIFY delivery and reconnect.
@Suite struct ListenerTests {
    @Test func deliversNotificationsAndRelistensAfterReconnect() throws {
        let configuration = try freshDatabase(migrated: false)
        let received = Collector<String>()
        let reconnects = Atomic<Int>(0)
        // A channel name that needs quoting.
        let channel = "Events \"Q\" \(UInt32.random(in: 0...UInt32.max))"
        let listener = PostgresListener(
            configuration: configuration, channels: [channel, "other"],
            onReconnect: { reconnects.add(1, ordering: .relaxed) },
            onNotification: { channel, payload in received.append("\(channel)|\(payload)") })
        defer { listener.stop() }
        #expect(eventually(timeout: .seconds(10)) { listener.isListening })

        let db = try PostgresConnection(configuration)
        try PostgresListener.notify(on: db, channel: channel, payload: "up to 42 ✓")
        try db.notify(channel: "other", payload: "")
        try db.notify(channel: "not-listened", payload: "x")
        #expect(eventually(timeout: .seconds(5)) { received.all.count == 2 })
        #expect(received.all == ["\(channel)|up to 42 ✓", "other|"])

        // Kill the listener's session: it reconnects, re-LISTENs and tells us.
        try db.query(sql: "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND datname = current_database()")
        #expect(eventually(timeout: .seconds(10)) { reconnects.load(ordering: .relaxed) == 1 && listener.isListening })
        try db.notify(channel: channel, payload: "after")
        #expect(eventually(timeout: .seconds(5)) { received.all.last == "\(channel)|after" })
    }

    @Test func stopIsPromptAndIdempotent() throws {
        let listener = PostgresListener(configuration: try freshDatabase(migrated: false), channels: ["c"], onNotification: { _, _ in })
        #expect(eventually(timeout: .seconds(10)) { listener.isListening })
        let (_, seconds) = measure { listener.stop() }
        #expect(seconds < 1)
        listener.stop()
        #expect(!listener.isListening)
    }
}
