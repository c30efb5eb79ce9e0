import Foundation
import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Rooms (docs/rooms.md): lifecycle, membership, attributes with ownership and quotas, member attributes, delayed
/// destruction and offline removal on the test clock, end to end through HTTP.
@Suite("Rooms", .inProcess)
struct RoomsTests: GroupTestSupport {
    static func enter(_ app: TestApp, _ room: String, _ user: String, extra: String = "") throws -> TestResponse {
        try app.request(.post, "/v1/rooms/\(room)/enter", json: "{\"user_id\":\"\(user)\"\(extra)}")
    }

    static func room(_ app: TestApp, _ room: String) throws -> TestResponse { try app.request(.get, "/v1/rooms/\(room)") }

    static func attributes(_ app: TestApp, _ room: String) throws -> [String: String] {
        let r = try app.request(.get, "/v1/rooms/\(room)/attributes")
        var out: [String: String] = [:]
        for a in r.json?["attributes"]?.arrayValue ?? [] {
            if let k = a["key"]?.stringValue, let v = a["value"]?.stringValue { out[k] = v }
        }
        return out
    }

    static func roomEvents(_ app: TestApp, _ type: String, room: String) throws -> [JSONValue] {
        try app.events(query: "types=\(type)&room_id=\(room)")
    }

    @Test func createEnterLeaveAndTheirErrors() throws {
        try withApp { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }

            let created = try app.request(
                .post, "/v1/rooms", json: #"{"room_id":"r1","name":"Lobby","creator":"a","attributes":{"topic":"hi"},"destroy_delay_s":60}"#)
            #expect(created.status == 201, "\(created.text)")
            #expect(created.json?["member_count"] == .int(1))
            #expect(created.json?["created_by"] == .string("a"))
            #expect(created.json?["destroy_delay_s"] == .int(60))
            #expect(created.json?["empty_since"] == .null)
            Self.expectProblem(try app.request(.post, "/v1/rooms", json: #"{"room_id":"r1"}"#), 409, .roomAlreadyExists)
            Self.expectProblem(try app.request(.post, "/v1/rooms", json: #"{"room_id":"r2","creator":"nobody"}"#), 404, .userNotFound)
            Self.expectInvalid(try app.request(.post, "/v1/rooms", json: #"{"destroy_delay_s":10801}"#), field: "body.destroy_delay_s")
            Self.expectInvalid(
                try app.request(.post, "/v1/rooms", json: "{\"name\":\"\(String(repeating: "n", count: 65))\"}"), field: "body.name")
            Self.expectProblem(
                try app.request(.post, "/v1/rooms", json: #"{"attributes":{"k":"\#(String(repeating: "v", count: 1025))"}}"#), 422,
                .roomAttributeValueTooLong)
            #expect(try server.count("SELECT count(*) FROM rooms", []) == 1, "a failed create creates nothing")
            // A generated id; no creator: nobody entered.
            let anonymous = try app.request(.post, "/v1/rooms", json: #"{"name":"x"}"#)
            #expect(anonymous.status == 201)
            #expect(anonymous.json?["room_id"]?.stringValue?.utf8.count == 20)
            #expect(anonymous.json?["created_by"] == .null)
            #expect(anonymous.json?["member_count"] == .int(0))

            let entered = try Self.enter(app, "r1", "b", extra: #","extended_data":"seat 3""#)
            #expect(entered.status == 200, "\(entered.text)")
            #expect(entered.json?["created"] == .bool(false))
            #expect(entered.json?["already_member"] == .bool(false))
            #expect(entered.json?["room"]?["member_count"] == .int(2))
            let again = try Self.enter(app, "r1", "b")
            #expect(again.json?["already_member"] == .bool(true))
            #expect(try Self.roomEvents(app, "room.member_joined", room: "r1").count == 2, "entering again is a no-op")
            Self.expectProblem(try Self.enter(app, "r1", "nobody"), 404, .userNotFound)
            Self.expectProblem(try Self.enter(app, "nope", "c", extra: #","create_if_missing":false"#), 404, .roomNotFound)
            // Enter creates by default; the enterer is created_by and gets room.created.
            let made = try Self.enter(app, "r9", "c", extra: #","name":"made","attributes":{"k":"v"}"#)
            #expect(made.json?["created"] == .bool(true))
            #expect(made.json?["room"]?["created_by"] == .string("c"))
            let createdEvents = try Self.roomEvents(app, "room.created", room: "r9")
            #expect(createdEvents.count == 1)
            let joinEvents = try app.events(query: "room_id=r9")
            #expect(joinEvents.compactMap { $0["type"]?.stringValue } == ["room.created", "room.member_joined"])
            #expect(try Self.attributes(app, "r9") == ["k": "v"])

            let members = try app.request(.get, "/v1/rooms/r1/members")
            #expect(members.json?["items"]?.arrayValue?.compactMap { $0["user_id"]?.stringValue } == ["a", "b"])
            #expect(members.json?["items"]?.arrayValue?.last?["extended_data"] == .string("seat 3"))
            let query = try app.request(.post, "/v1/rooms/r1/members/query", json: #"{"user_ids":["b","c","nobody"]}"#)
            #expect(Self.codes(query) == [nil, ErrorCode.notInRoom.code, ErrorCode.notInRoom.code])
            #expect(Self.results(query).first?["data"]?["user_id"] == .string("b"))
            Self.expectInvalid(
                try app.request(.post, "/v1/rooms/r1/members/query", json: "{\"user_ids\":\(Self.array((1...11).map { "u\($0)" }))}"),
                field: "body.user_ids")
            #expect(try app.request(.get, "/v1/rooms/r1/online_count").json?["count"] == .int(2))

            // User tokens: U·m routes answer 403 to non-members, U·r routes to anyone.
            let cToken = try app.token(for: "c")
            Self.expectProblem(try Self.asUser(app, cToken, .get, "/v1/rooms/r1/members"), 403, .notInRoom)
            Self.expectProblem(try Self.asUser(app, cToken, .get, "/v1/rooms/r1/attributes"), 403, .notInRoom)
            #expect(try Self.asUser(app, cToken, .get, "/v1/rooms/r1").status == 200)
            #expect(try Self.asUser(app, cToken, .get, "/v1/rooms/r1/online_count").status == 200)
            Self.expectProblem(try Self.asUser(app, cToken, .get, "/v1/rooms/nope"), 404, .roomNotFound)
            Self.expectProblem(try Self.asUser(app, cToken, .post, "/v1/rooms/r1/leave", json: "{}"), 403, .notInRoom)
            Self.expectProblem(try Self.asUser(app, cToken, .post, "/v1/rooms/r1/enter", json: #"{"user_id":"a"}"#), 403, .forbidden)
            #expect(try Self.asUser(app, cToken, .post, "/v1/rooms/r1/enter", json: "{}").status == 200)

            let left = try app.request(.post, "/v1/rooms/r1/leave", json: #"{"user_id":"b"}"#)
            #expect(left.status == 200)
            #expect(left.json?["user_id"] == .string("b"))
            let leftEvent = try Self.roomEvents(app, "room.member_left", room: "r1").last
            #expect(leftEvent?["data"]?["user_ids"] == .array([.string("b")]))
            #expect(leftEvent?["data"]?["reason"] == .string("left"))

            let kick = try app.request(.post, "/v1/rooms/r1/members/kick", json: #"{"user_ids":["c","b","a"]}"#)
            #expect(Self.codes(kick) == [nil, ErrorCode.notInRoom.code, nil])
            let kicked = try Self.roomEvents(app, "room.member_left", room: "r1").last
            #expect(kicked?["data"]?["user_ids"] == .array([.string("c"), .string("a")]), "one event, request order")
            #expect(kicked?["data"]?["reason"] == .string("kicked"))
            let empty = try Self.room(app, "r1").json
            #expect(empty?["member_count"] == .int(0))
            #expect(empty?["empty_since"]?.intValue != nil)
            #expect(empty?["destroy_at"]?.intValue == (empty?["empty_since"]?.intValue ?? 0) + 60_000)

            // Listing and deletion.
            let list = try app.request(.get, "/v1/rooms?q=R&limit=1")
            #expect(list.json?["items"]?.arrayValue?.count == 1)
            let next = list.json?["next_cursor"]?.stringValue
            #expect(next != nil)
            let rest = try app.request(.get, "/v1/rooms?q=R&limit=1&cursor=\(next ?? "")")
            #expect(rest.json?["items"]?.arrayValue?.count == 1)
            #expect(try app.request(.get, "/v1/rooms?q=lob").json?["items"]?.arrayValue?.first?["room_id"] == .string("r1"))
            #expect(try app.request(.delete, "/v1/rooms/r9").status == 204)
            Self.expectProblem(try Self.room(app, "r9"), 404, .roomNotFound)
            let destroyed = try Self.roomEvents(app, "room.destroyed", room: "r9")
            #expect(destroyed.count == 1)
            Self.expectProblem(try app.request(.delete, "/v1/rooms/r9"), 404, .roomNotFound)
            #expect(try server.count("SELECT count(*) FROM room_attributes WHERE room_id = 'r9'", []) == 0)
            // The id may be used again.
            #expect(try app.request(.post, "/v1/rooms", json: #"{"room_id":"r9"}"#).status == 201)
        }
    }

    @Test func roomLimitsPerUserAndPerApp() throws {
        try withApp { server, app in
            try app.createUser("u")
            #expect(try app.request(.patch, "/v1/settings", json: #"{"max_rooms_per_user":2}"#).status == 200)
            #expect(try Self.enter(app, "x1", "u").status == 200)
            #expect(try Self.enter(app, "x2", "u").status == 200)
            Self.expectProblem(try Self.enter(app, "x3", "u"), 422, .joinedRoomsLimit)
            #expect(try Self.enter(app, "x2", "u").json?["already_member"] == .bool(true), "already a member: a no-op even at the limit")
            Self.expectProblem(try app.request(.post, "/v1/rooms", json: #"{"room_id":"x4","creator":"u"}"#), 422, .joinedRoomsLimit)
            Self.expectProblem(try Self.room(app, "x3"), 404, .roomNotFound)
            // 10,000 rooms per app (bulk fixture).
            try server.sql(
                "INSERT INTO rooms (app_id, room_id, created_at) SELECT $1, 'bulk' || g, 0 FROM generate_series(1, 9998) g", [app.appID])
            Self.expectProblem(try app.request(.post, "/v1/rooms", json: #"{"room_id":"y"}"#), 422, .roomLimit)
            Self.expectProblem(try Self.enter(app, "y", "u"), 422, .roomLimit)
            #expect(try Self.enter(app, "x1", "u").status == 200, "entering an existing room is not a creation")
        }
    }

    @Test func attributeOwnershipForceAndQuotasInRequestOrder() throws {
        try withApp { server, app in
            for id in ["a", "b", "out"] { try app.createUser(id) }
            #expect(try Self.enter(app, "r", "a").status == 200)
            #expect(try Self.enter(app, "r", "b").status == 200)
            let aToken = try app.token(for: "a")
            let bToken = try app.token(for: "b")

            let set = try Self.asUser(
                app, aToken, .post, "/v1/rooms/r/attributes", json: #"{"attributes":{"seat1":"a","seat2":"a"},"is_delete_after_owner_left":true}"#)
            #expect(Self.codes(set) == [nil, nil], "\(set.text)")
            let updated = try Self.roomEvents(app, "room.attributes_updated", room: "r").last
            #expect(updated?["data"]?["action"] == .string("set"))
            #expect(updated?["data"]?["operator"] == .string("a"))
            #expect(updated?["data"]?["attributes"]?["seat1"] == .string("a"))
            // b cannot overwrite a's key without force; with force it can, and the owner stays a unless is_update_owner.
            let denied = try Self.asUser(app, bToken, .post, "/v1/rooms/r/attributes", json: #"{"attributes":{"seat1":"b","seat3":"b"}}"#)
            #expect(Self.codes(denied) == [ErrorCode.roomAttributeOwned.code, nil])
            let forced = try Self.asUser(app, bToken, .post, "/v1/rooms/r/attributes", json: #"{"attributes":{"seat1":"b"},"is_force":true}"#)
            #expect(Self.codes(forced) == [nil])
            var rows = try app.request(.get, "/v1/rooms/r/attributes").json?["attributes"]?.arrayValue ?? []
            #expect(rows.compactMap { $0["key"]?.stringValue } == ["seat1", "seat2", "seat3"])
            #expect(rows.first?["owner_id"] == .string("a"))
            #expect(rows.first?["delete_after_owner_left"] == .bool(false), "each set replaces the flag")
            let transfer = try Self.asUser(
                app, bToken, .post, "/v1/rooms/r/attributes", json: #"{"attributes":{"seat2":"b"},"is_force":true,"is_update_owner":true}"#)
            #expect(Self.codes(transfer) == [nil])
            rows = try app.request(.get, "/v1/rooms/r/attributes").json?["attributes"]?.arrayValue ?? []
            #expect(rows[1]["owner_id"] == .string("b"))
            // The app without operator always forces and owns nothing; a user cannot then touch the key unforced.
            #expect(Self.codes(try app.request(.post, "/v1/rooms/r/attributes", json: #"{"attributes":{"app":"1","seat3":"app"}}"#)) == [nil, nil])
            #expect(
                Self.codes(try Self.asUser(app, bToken, .post, "/v1/rooms/r/attributes/delete", json: #"{"keys":["app","nokey"]}"#)) == [
                    ErrorCode.roomAttributeOwned.code, ErrorCode.roomAttributeNotFound.code,
                ])
            // The app naming an operator acts as that user: outside the room → 403.
            Self.expectProblem(try app.request(.post, "/v1/rooms/r/attributes", json: #"{"operator":"out","attributes":{"k":"v"}}"#), 403, .notInRoom)
            Self.expectProblem(try app.request(.post, "/v1/rooms/nope/attributes", json: #"{"attributes":{"k":"v"}}"#), 404, .roomNotFound)

            // Quotas in request order: 5 keys exist (seat1-3, app); fill to 20, then the 21st fails while others apply.
            var fill: [String] = []
            for i in 0..<16 { fill.append("\"f\(i)\":\"x\"") }
            #expect(
                Self.codes(try app.request(.post, "/v1/rooms/r/attributes", json: "{\"attributes\":{\(fill.joined(separator: ","))}}")).allSatisfy {
                    $0 == nil
                })
            let over = try app.request(.post, "/v1/rooms/r/attributes", json: #"{"attributes":{"new":"x","seat1":"changed"}}"#)
            #expect(Self.codes(over) == [ErrorCode.roomAttributeCountExceeded.code, nil])
            let long = try app.request(
                .post, "/v1/rooms/r/attributes",
                json:
                    "{\"attributes\":{\"\(String(repeating: "k", count: 17))\":\"x\",\"f0\":\"\(String(repeating: "v", count: 1025))\",\"f1\":\"\(String(repeating: "v", count: 1000))\",\"f2\":\"\(String(repeating: "v", count: 1000))\",\"f3\":\"\(String(repeating: "v", count: 1000))\",\"f4\":\"\(String(repeating: "v", count: 1000))\",\"f5\":\"\(String(repeating: "v", count: 1000))\",\"f6\":\"\(String(repeating: "v", count: 1000))\"}}"
            )
            #expect(
                Self.codes(long) == [
                    ErrorCode.roomAttributeCountExceeded.code, ErrorCode.roomAttributeValueTooLong.code, nil, nil, nil, nil, nil,
                    ErrorCode.roomAttributesTotalExceeded.code,
                ], "\(long.text)")
            let total = try Self.attributes(app, "r").reduce(0) { $0 + $1.key.utf8.count + $1.value.utf8.count }
            #expect(total <= 5120)
            Self.expectInvalid(
                try app.request(
                    .post, "/v1/rooms/r/attributes", json: "{\"attributes\":{\((0..<21).map { "\"z\($0)\":\"x\"" }.joined(separator: ","))}}"),
                field: "body.attributes")

            // Owner-left: a's flagged keys are deleted (seat1 was re-flagged false by b's forced set, seat2 moved to b).
            #expect(Self.codes(try app.request(.post, "/v1/rooms/r/attributes/delete", json: #"{"keys":["f1","f2","f3"]}"#)) == [nil, nil, nil])
            let before = try Self.attributes(app, "r")
            #expect(
                try Self.asUser(app, aToken, .post, "/v1/rooms/r/attributes", json: #"{"attributes":{"mine":"1"},"is_delete_after_owner_left":true}"#)
                    .status == 200)
            #expect(try app.request(.post, "/v1/rooms/r/leave", json: #"{"user_id":"a"}"#).status == 200)
            let after = try Self.attributes(app, "r")
            #expect(after == before, "only `mine` (flagged, owned by a) went away")
            let types = try app.events(query: "room_id=r").suffix(2).compactMap { $0["type"]?.stringValue }
            #expect(types == ["room.member_left", "room.attributes_updated"])
            let deleteEvent = try Self.roomEvents(app, "room.attributes_updated", room: "r").last
            #expect(deleteEvent?["data"]?["action"] == .string("delete"))
            #expect(deleteEvent?["data"]?["operator"] == .null)
            #expect(deleteEvent?["data"]?["attributes"] == .object(["mine": .string("")]))
        }
    }

    @Test func atomicBatchAppliesAllOrNone() throws {
        try withApp { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            #expect(try Self.enter(app, "r", "a").status == 200)
            #expect(try Self.enter(app, "r", "b").status == 200)
            #expect(Self.codes(try app.request(.post, "/v1/rooms/r/attributes", json: #"{"operator":"a","attributes":{"owned":"a"}}"#)) == [nil])
            let failing = try app.request(
                .post, "/v1/rooms/r/attributes/batch",
                json:
                    #"{"operator":"b","operations":[{"op":"set","key":"x","value":"1"},{"op":"delete","key":"owned"},{"op":"set","key":"y","value":"2"}]}"#
            )
            #expect(failing.status == 200, "\(failing.text)")
            #expect(failing.json?["applied"] == .bool(false))
            #expect(Self.codes(failing) == [ErrorCode.roomBatchAborted.code, ErrorCode.roomAttributeOwned.code, ErrorCode.roomBatchAborted.code])
            #expect(try Self.attributes(app, "r") == ["owned": "a"])
            #expect(try Self.roomEvents(app, "room.attributes_batch_updated", room: "r").isEmpty)
            let repeated = try app.request(
                .post, "/v1/rooms/r/attributes/batch", json: #"{"operations":[{"op":"set","key":"x","value":"1"},{"op":"delete","key":"x"}]}"#)
            #expect(repeated.json?["applied"] == .bool(false))
            #expect(Self.codes(repeated) == [ErrorCode.roomBatchAborted.code, ErrorCode.invalidParams.code])

            let ok = try app.request(
                .post, "/v1/rooms/r/attributes/batch",
                json:
                    #"{"operator":"b","is_force":true,"operations":[{"op":"set","key":"x","value":"1"},{"op":"delete","key":"owned"},{"op":"set","key":"y","value":"2"}]}"#
            )
            #expect(ok.json?["applied"] == .bool(true))
            #expect(Self.codes(ok) == [nil, nil, nil])
            #expect(try Self.attributes(app, "r") == ["x": "1", "y": "2"])
            let events = try Self.roomEvents(app, "room.attributes_batch_updated", room: "r")
            #expect(events.count == 1)
            #expect(events.first?["data"]?["updates"]?.arrayValue?.count == 3)
            #expect(events.first?["data"]?["updates"]?.arrayValue?[1]["action"] == .string("delete"))
            #expect(events.first?["data"]?["operator"] == .string("b"))
            Self.expectInvalid(
                try app.request(
                    .post, "/v1/rooms/r/attributes/batch",
                    json: "{\"operations\":[\((0..<21).map { "{\"op\":\"delete\",\"key\":\"k\($0)\"}" }.joined(separator: ","))]}"),
                field: "body.operations")
            Self.expectInvalid(
                try app.request(.post, "/v1/rooms/r/attributes/batch", json: #"{"operations":[{"op":"move","key":"k"}]}"#),
                field: "body.operations[0].op"
            )
        }
    }

    @Test func memberAttributesLimitsAndOwnerLeft() throws {
        try withApp { server, app in
            for id in ["a", "b", "c", "out"] { try app.createUser(id) }
            for id in ["a", "b", "c"] { #expect(try Self.enter(app, "r", id).status == 200) }
            let set = try app.request(
                .post, "/v1/rooms/r/member_attributes", json: #"{"operator":"a","user_ids":["a","b","out"],"attributes":{"mic":"on","cam":"off"}}"#)
            #expect(Self.codes(set) == [nil, nil, ErrorCode.notInRoom.code], "\(set.text)")
            #expect(Self.results(set).first?["data"]?["attributes"] == .object(["cam": .string("off"), "mic": .string("on")]))
            let event = try Self.roomEvents(app, "room.member_attributes_updated", room: "r").last
            #expect(event?["data"]?["infos"]?.arrayValue?.count == 2)
            #expect(event?["data"]?["operator"] == .string("a"))
            // "" removes a key; the data is the full set after.
            let removed = try app.request(
                .post, "/v1/rooms/r/member_attributes",
                json: #"{"user_ids":["b"],"attributes":{"cam":"","mic":"on"},"is_delete_after_owner_left":false}"#
            )
            #expect(Self.results(removed).first?["data"]?["attributes"] == .object(["mic": .string("on")]))
            // Limits per user: pairs, key, value, total.
            let pairs = (0..<31).map { "\"k\($0)\":\"v\"" }.joined(separator: ",")
            #expect(
                Self.codes(try app.request(.post, "/v1/rooms/r/member_attributes", json: "{\"user_ids\":[\"c\"],\"attributes\":{\(pairs)}}")) == [
                    ErrorCode.memberAttributePairsExceeded.code
                ])
            #expect(
                Self.codes(try app.request(.post, "/v1/rooms/r/member_attributes", json: #"{"user_ids":["c"],"attributes":{"ninebytes":"v"}}"#)) == [
                    ErrorCode.memberAttributeKeyTooLong.code
                ])
            #expect(
                Self.codes(
                    try app.request(
                        .post, "/v1/rooms/r/member_attributes",
                        json: "{\"user_ids\":[\"c\"],\"attributes\":{\"k\":\"\(String(repeating: "v", count: 65))\"}}"))
                    == [ErrorCode.memberAttributeValueTooLong.code])
            let big = (0..<3).map { "\"k\($0)\":\"\(String(repeating: "v", count: 50))\"" }.joined(separator: ",")
            #expect(
                Self.codes(try app.request(.post, "/v1/rooms/r/member_attributes", json: "{\"user_ids\":[\"c\"],\"attributes\":{\(big)}}")) == [
                    ErrorCode.memberAttributesTotalExceeded.code
                ]
            )
            let query = try app.request(.post, "/v1/rooms/r/member_attributes/query", json: #"{"user_ids":["a","c","out"]}"#)
            #expect(Self.codes(query) == [nil, nil, ErrorCode.notInRoom.code])
            #expect(Self.results(query)[1]["data"]?["attributes"] == .object([:]))
            // Leaving drops flagged member attributes (a's), keeps unflagged ones (b's) in the list.
            #expect(try app.request(.post, "/v1/rooms/r/leave", json: #"{"user_id":"a"}"#).status == 200)
            #expect(try app.request(.post, "/v1/rooms/r/leave", json: #"{"user_id":"b"}"#).status == 200)
            let list = try app.request(.get, "/v1/rooms/r/member_attributes")
            #expect(list.json?["items"]?.arrayValue?.compactMap { $0["user_id"]?.stringValue } == ["b"], "\(list.text)")
            Self.expectProblem(
                try app.request(.post, "/v1/rooms/r/member_attributes", json: #"{"operator":"b","user_ids":["c"],"attributes":{"x":"1"}}"#), 403,
                .notInRoom)
            // 500 users holding attributes per room (bulk fixture of 499 more holders, b included = 500).
            try server.sql(
                "INSERT INTO room_member_attributes (app_id, room_id, user_id, key, value, delete_after_owner_left) SELECT $1, 'r', 'h' || g, 'k', 'v', false FROM generate_series(1, 499) g",
                [app.appID])
            #expect(
                Self.codes(try app.request(.post, "/v1/rooms/r/member_attributes", json: #"{"user_ids":["c"],"attributes":{"x":"1"}}"#)) == [
                    ErrorCode.memberAttributesUsersExceeded.code
                ])
        }
    }

    @Test func delayedDestructionOnTheTestClock() throws {
        try withApp(testClock: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            #expect(
                try app.request(.post, "/v1/rooms", json: #"{"room_id":"d","creator":"a","destroy_delay_s":30,"attributes":{"k":"v"}}"#).status == 201
            )
            #expect(try app.request(.post, "/v1/rooms", json: #"{"room_id":"never","destroy_delay_s":1}"#).status == 201)
            #expect(try app.request(.post, "/v1/rooms/d/leave", json: #"{"user_id":"a"}"#).status == 200)
            try server.advanceClock(ms: 29_000)
            #expect(try Self.room(app, "d").status == 200)
            // An enter cancels; the next empty period starts the delay again.
            #expect(try Self.enter(app, "d", "b").json?["room"]?["destroy_at"] == .null)
            try server.advanceClock(ms: 5_000)
            #expect(try Self.room(app, "d").status == 200)
            #expect(try app.request(.post, "/v1/rooms/d/leave", json: #"{"user_id":"b"}"#).status == 200)
            // The test clock is the system time plus the offset: leave real milliseconds of slack.
            try server.advanceClock(ms: 29_500)
            #expect(try Self.room(app, "d").status == 200)
            try server.advanceClock(ms: 500)
            Self.expectProblem(try Self.room(app, "d"), 404, .roomNotFound)
            #expect(try Self.roomEvents(app, "room.destroyed", room: "d").count == 1)
            #expect(try server.count("SELECT count(*) FROM room_attributes WHERE room_id = 'd'", []) == 0)
            // Never entered: never auto-destroyed.
            try server.advanceClock(ms: 60_000)
            #expect(try Self.room(app, "never").status == 200)
            // Delay 0: destroyed with the last removal, after its events.
            #expect(try Self.enter(app, "zero", "a").status == 200)
            #expect(try app.request(.post, "/v1/rooms/zero/leave", json: #"{"user_id":"a"}"#).status == 200)
            Self.expectProblem(try Self.room(app, "zero"), 404, .roomNotFound)
            let types = try app.events(query: "room_id=zero").compactMap { $0["type"]?.stringValue }
            #expect(types == ["room.created", "room.member_joined", "room.member_left", "room.destroyed"])
        }
    }

    @Test func offlineMembersAreRemovedAfterTheSettingAndAReconnectCancels() throws {
        try withApp(testClock: true) { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            #expect(try app.request(.patch, "/v1/settings", json: #"{"room_offline_leave_s":10}"#).status == 200)
            #expect(try Self.enter(app, "r", "a", extra: #","destroy_delay_s":600"#).status == 200)
            #expect(try Self.enter(app, "r", "b").status == 200)
            // b holds a presence-counting stream; a has none.
            let stream = try LiveStreams.open(server, "/v1/users/b/events", bearer: try app.token(for: "b"))
            defer { stream.close() }
            try #require(
                eventually { try server.count("SELECT count(*) FROM user_streams WHERE user_id = 'b'", []) == 1 },
                "b's stream was not registered")
            try server.advanceClock(ms: 9_000)
            #expect(try Self.room(app, "r").json?["member_count"] == .int(2))
            try server.advanceClock(ms: 1_000)
            #expect(try Self.room(app, "r").json?["member_count"] == .int(1))
            let left = try Self.roomEvents(app, "room.member_left", room: "r")
            #expect(left.count == 1)
            #expect(left.first?["data"]?["user_ids"] == .array([.string("a")]))
            #expect(left.first?["data"]?["reason"] == .string("offline"))
            // b's stream closes: removal 10 s after the detected close, cancelled by a reconnect.
            stream.close()
            try #require(
                eventually { try server.count("SELECT count(*) FROM user_streams WHERE user_id = 'b'", []) == 0 },
                "b's closed stream was not removed")
            try server.advanceClock(ms: 5_000)
            let again = try LiveStreams.open(server, "/v1/users/b/events", bearer: try app.token(for: "b"))
            defer { again.close() }
            try #require(
                eventually { try server.count("SELECT count(*) FROM user_streams WHERE user_id = 'b'", []) == 1 },
                "b's stream was not registered")
            try server.advanceClock(ms: 20_000)
            #expect(try Self.room(app, "r").json?["member_count"] == .int(1))
        }
    }

    @Test func hardDeletedUserLeavesItsRooms() throws {
        try withApp { server, app in
            for id in ["a", "b"] { try app.createUser(id) }
            #expect(try Self.enter(app, "r", "a").status == 200)
            #expect(try Self.enter(app, "r", "b").status == 200)
            #expect(
                try app.request(.post, "/v1/rooms/r/attributes", json: #"{"operator":"a","attributes":{"k":"v"},"is_delete_after_owner_left":true}"#)
                    .status == 200)
            #expect(try app.request(.delete, "/v1/users/a?mode=hard").status == 204)
            let left = try Self.roomEvents(app, "room.member_left", room: "r").last
            #expect(left?["data"]?["reason"] == .string("deleted"))
            #expect(try Self.attributes(app, "r").isEmpty)
            #expect(try Self.room(app, "r").json?["member_count"] == .int(1))
        }
    }

    @Test func roomEventsReachTheMembersAtWriteTimeOnStreamsAndInTheLog() throws {
        try withApp { server, app in
            for id in ["a", "b", "c"] { try app.createUser(id) }
            #expect(try Self.enter(app, "r", "a").status == 200)
            let bStream = try LiveStreams.open(server, "/v1/users/b/events?types=room.*", bearer: try app.token(for: "b"))
            defer { bStream.close() }
            let cStream = try LiveStreams.open(server, "/v1/users/c/events?types=room.*", bearer: try app.token(for: "c"))
            defer { cStream.close() }
            let appStream = try LiveStreams.open(server, "/v1/events?room_id=r", bearer: app.key)
            defer { appStream.close() }

            #expect(try Self.enter(app, "r", "b").status == 200)
            #expect(try LiveStreams.nextEvent(bStream)?.event == "room.member_joined", "the joiner gets its own join")
            #expect(Self.codes(try app.request(.post, "/v1/rooms/r/attributes", json: #"{"attributes":{"k":"v"}}"#)) == [nil])
            #expect(try LiveStreams.nextEvent(bStream)?.event == "room.attributes_updated")
            #expect(try app.request(.post, "/v1/rooms/r/leave", json: #"{"user_id":"b"}"#).status == 200)
            #expect(try LiveStreams.nextEvent(bStream)?.event == "room.member_left", "the leaver gets its own leave")
            #expect(Self.codes(try app.request(.post, "/v1/rooms/r/attributes", json: #"{"attributes":{"k":"w"}}"#)) == [nil])
            // c was never in the room; b left: neither gets the last set. A marker event to c proves its stream is live.
            #expect(try Self.enter(app, "other", "c").status == 200)
            #expect(try LiveStreams.nextEvent(cStream)?.event == "room.created")
            #expect((try? LiveStreams.nextEvent(bStream, timeout: .milliseconds(500))) == nil, "a read timeout: nothing came")
            var appTypes: [String] = []
            while appTypes.count < 4, let e = try LiveStreams.nextEvent(appStream) { appTypes.append(e.event ?? "") }
            #expect(appTypes == ["room.member_joined", "room.attributes_updated", "room.member_left", "room.attributes_updated"])
            // The polling log answers the same membership question.
            let bLog = try app.events(query: "user_id=b&room_id=r").compactMap { $0["type"]?.stringValue }
            #expect(bLog == ["room.member_joined", "room.attributes_updated", "room.member_left"])
            let aLog = try app.events(query: "user_id=a&room_id=r").compactMap { $0["type"]?.stringValue }
            #expect(
                aLog == [
                    "room.created", "room.member_joined", "room.member_joined", "room.attributes_updated", "room.member_left",
                    "room.attributes_updated",
                ])
            #expect(try app.events(query: "user_id=c&room_id=r").isEmpty)
        }
    }

    @Test func sixteenConcurrentAttributeWritersLoseNothing() throws {
        try withApp { server, app in
            #expect(try app.request(.post, "/v1/rooms", json: #"{"room_id":"r"}"#).status == 201)
            let failures = LockedCounter()
            DispatchQueue.concurrentPerform(iterations: 16) { writer in
                for round in 0..<3 {
                    // Each writer sets two keys of its own; 16 × 2 = 32 keys compete for 20 slots.
                    let r = try? app.request(
                        .post, "/v1/rooms/r/attributes", json: "{\"attributes\":{\"w\(writer)a\":\"\(round)\",\"w\(writer)b\":\"\(round)\"}}")
                    if r?.status != 200 { failures.add() }
                }
            }
            #expect(failures.value == 0)
            let attributes = try Self.attributes(app, "r")
            #expect(attributes.count == 20, "the quota is exact under concurrency")
            #expect(attributes.values.allSatisfy { $0 == "2" }, "every applied key has its writer's last value")
            let applied = try Self.roomEvents(app, "room.attributes_updated", room: "r").reduce(0) {
                $0 + ($1["data"]?["attributes"]?.objectValue?.count ?? 0)
            }
            #expect(applied == 20 * 3, "every applied set was announced once")
        }
    }
}

/// A thread-safe counter for concurrent test loops.
final class LockedCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func add() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}
