import Foundation
import ParleyHTTP
import ParleyPostgres
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Room events to "the members at write time" (Migrations/0015), below the room routes: rooms, members and events are
/// written directly as the Rooms domain writes them, the sequencer stamps the membership intervals, and the polling
/// log (`parley_room_member_at`) and the live hub (``MemberAudience``) must agree on who receives what.
@Suite("Room audience", .inProcess)
struct RoomAudienceTests {
    static func event(_ type: String, audience: [String] = [], members: Bool = true) -> NewEvent {
        NewEvent(
            type: type, data: Array(data(type, audience).utf8), audience: audience, roomID: "r1", toGroupMembers: members,
            orderKey: "room:r1")
    }

    /// A `data` of `type` for room r1 as the server writes it (docs/events.md#event-types): the event schema check
    /// validates every event of a test run, these included.
    static func data(_ type: String, _ users: [String]) -> String {
        let ids = users.map { "\"\($0)\"" }.joined(separator: ",")
        let joined = users.map { #"{"user_id":"\#($0)","name":"","avatar_url":"","extended_data":"","entered_at":0}"# }
        switch type {
        case "room.created":
            return #"{"room":{"room_id":"r1","name":"","member_count":0,"destroy_delay_s":0,"created_by":null,"created_at":0,"#
                + #""empty_since":null,"destroy_at":null}}"#
        case "room.member_joined": return #"{"room_id":"r1","members":[\#(joined.joined(separator: ","))]}"#
        case "room.member_left": return #"{"room_id":"r1","user_ids":[\#(ids)],"reason":"left"}"#
        case "room.attributes_updated": return #"{"room_id":"r1","action":"set","attributes":{"k":"v"},"operator":null}"#
        default: return #"{"room_id":"r1"}"#
        }
    }

    /// One writer transaction: `sql` statements, then `events`.
    static func write(_ server: TestServer, _ appID: String, _ sql: [String], _ events: [NewEvent]) throws {
        try server.app.services.pool.transaction { db in
            for statement in sql { _ = try db.query(sql: statement, [appID]) }
            try EventLog.append(events, appID: appID, now: 1, on: db)
        }
    }

    static func sequence(_ server: TestServer, _ appID: String) throws {
        try server.app.services.pool.withConnection { db in
            while try EventLog.sequence(appID: appID, on: db) != nil {}
        }
    }

    /// Moves members to room_member_history as the Rooms domain does.
    static func leave(_ users: [String]) -> String {
        let list = users.map { "'\($0)'" }.joined(separator: ",")
        return """
            WITH d AS (DELETE FROM room_members WHERE app_id = $1 AND room_id = 'r1' AND user_id IN (\(list))
                       RETURNING user_id, joined_event, joined_xact)
            INSERT INTO room_member_history (app_id, room_id, user_id, joined_event, joined_xact)
            SELECT $1, 'r1', user_id, joined_event, joined_xact FROM d
            """
    }

    @Test func roomEventsGoToTheMembersAtWriteTimeAndTheirAudience() throws {
        try withApp { server, app in
            for user in ["a", "b", "c", "d"] { try app.createUser(user) }
            let appID = app.appID

            // e1 room.created (to the creator), e2 the creator's join.
            try Self.write(
                server, appID,
                [
                    "INSERT INTO rooms (app_id, room_id, created_at, member_count) VALUES ($1, 'r1', 0, 1)",
                    "INSERT INTO room_members (app_id, room_id, user_id, entered_at) VALUES ($1, 'r1', 'a', 0)",
                ], [Self.event("room.created", audience: ["a"], members: false), Self.event("room.member_joined", audience: ["a"])])
            try Self.sequence(server, appID)
            // A hub cache loaded now: the membership events after it must drop it.
            var stale = MemberAudience()
            _ = try server.app.services.pool.withConnection { db in
                try stale.wasMember("a", of: .init(kind: .room, id: "r1"), appID: appID, at: 0, on: db)
            }
            // e3 b and c join, e4 to the members, e5 b leaves: sequenced in one batch (b's interval gets both ends).
            try Self.write(
                server, appID,
                ["INSERT INTO room_members (app_id, room_id, user_id, entered_at) SELECT $1, 'r1', u, 0 FROM unnest('{b,c}'::text[]) u"],
                [Self.event("room.member_joined", audience: ["b", "c"])])
            try Self.write(server, appID, [], [Self.event("room.attributes_updated")])
            try Self.write(server, appID, [Self.leave(["b"])], [Self.event("room.member_left", audience: ["b"])])
            try Self.sequence(server, appID)
            // e6 to the members, e7 destruction (to the members at destruction), e8 to nobody.
            try Self.write(server, appID, [], [Self.event("room.attributes_updated")])
            try Self.write(
                server, appID, [Self.leave(["a", "c"]), "DELETE FROM rooms WHERE app_id = $1 AND room_id = 'r1'"],
                [Self.event("room.destroyed", audience: ["a", "c"])])
            try Self.write(server, appID, [], [Self.event("room.attributes_updated")])
            try Self.sequence(server, appID)

            let ids = try server.app.services.pool.withConnection { db in
                try db.query(sql: "SELECT id FROM events WHERE app_id = $1 AND room_id = 'r1' ORDER BY id", [appID]).rows.map { try $0[0].int64 }
            }
            try #require(ids.count == 8)
            let e = [0] + ids  // e[1] … e[8]

            let history = try server.app.services.pool.withConnection { db in
                try db.query(
                    sql: "SELECT user_id, joined_event, left_event FROM room_member_history WHERE app_id = $1 ORDER BY user_id", [appID]
                ).rows.map { "\(try $0[0].string) \(try $0[1].int64) \(try $0[2].int64)" }
            }
            #expect(history == ["a \(e[1]) \(e[7])", "b \(e[3]) \(e[5])", "c \(e[3]) \(e[7])"])

            let expected: [String: [Int64]] = [
                "a": [e[1], e[2], e[3], e[4], e[5], e[6], e[7]],
                "b": [e[3], e[4], e[5]],
                "c": [e[3], e[4], e[5], e[6], e[7]],
                "d": [],
            ]
            let live = try server.app.services.pool.withConnection { db in
                try EventLog.readLive(appID: appID, after: e[1] - 1, upTo: nil, limit: 100, on: db)
            }
            for (user, want) in expected.sorted(by: { $0.key < $1.key }) {
                // The polling log.
                var filter = EventLog.Filter()
                filter.userID = user
                filter.roomID = "r1"
                let polled = try server.app.services.pool.withConnection { db in
                    try EventLog.read(appID: appID, after: 0, limit: 100, filter: filter, on: db).map(\.id)
                }
                #expect(polled == want, "log of \(user)")
                // The live hub, with a fresh cache and with one loaded before most of the events it answers for.
                for preload in [false, true] {
                    var audience = preload ? stale : MemberAudience()
                    let streamFilter = StreamFilter(userID: user)
                    let delivered = try server.app.services.pool.withConnection { db in
                        try live.filter { event in
                            audience.observe(event, appID: appID)
                            return try streamFilter.matches(event) { userID, key in
                                try audience.wasMember(userID, of: key, appID: appID, at: event.id, on: db)
                            }
                        }.map(\.id)
                    }
                    #expect(delivered.filter { ids.contains($0) } == want, "stream of \(user), preload \(preload)")
                }
            }

            // Retention: once the log is trimmed past the ends of the intervals, they go.
            _ = try EventRetention.trim(appID: appID, after: 0, before: Int64.max, services: server.app.services)
            #expect(try server.count("SELECT count(*) FROM room_member_history WHERE app_id = $1", [appID]) == 0)
        }
    }

    /// A member who leaves while the sequencer numbers its join (the sequencer waits on the leave's lock of the
    /// member row and finds it gone) still gets its join stamped, on the history row the leave wrote.
    @Test func aLeaveRacingTheNumberingOfItsJoinKeepsTheJoinStamp() throws {
        try withApp { server, app in
            try app.createUser("a")
            let appID = app.appID
            try Self.write(
                server, appID,
                [
                    "INSERT INTO rooms (app_id, room_id, created_at, member_count) VALUES ($1, 'r1', 0, 1)",
                    "INSERT INTO room_members (app_id, room_id, user_id, entered_at) VALUES ($1, 'r1', 'a', 0)",
                ], [Self.event("room.member_joined", audience: ["a"])])
            // The leave holds the member row (deleted, not committed) while the sequencer numbers the join.
            let leaving = DispatchSemaphore(value: 0)
            let commit = DispatchSemaphore(value: 0)
            let left = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                try? server.app.services.pool.transaction { db in
                    _ = try db.query(sql: Self.leave(["a"]), [appID])
                    try EventLog.append([Self.event("room.member_left", audience: ["a"])], appID: appID, now: 1, on: db)
                    leaving.signal()
                    commit.wait()
                }
                left.signal()
            }
            leaving.wait()
            Thread.detachNewThread {
                // Deliberate: the leave stays uncommitted while the sequencing below runs.
                Thread.sleep(forTimeInterval: 0.3)
                commit.signal()
            }
            try Self.sequence(server, appID)
            left.wait()
            try Self.sequence(server, appID)
            let unstamped = try server.count(
                "SELECT count(*) FROM room_member_history WHERE app_id = $1 AND (joined_event IS NULL OR left_event IS NULL)", [appID])
            #expect(unstamped == 0)
            #expect(try server.count("SELECT count(*) FROM room_member_history WHERE app_id = $1", [appID]) == 1)
        }
    }
}
