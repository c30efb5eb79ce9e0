import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Rooms (docs/rooms.md): HTTP ↔ ``RoomService``. Room messages are sent with `POST /v1/messages` and read through the
/// message routes (`GET /v1/rooms/{room_id}/messages`, `…/recent`).
package enum RoomRoutes {
    package static func register(on api: inout API) {
        registerLifecycle(on: &api)
        registerMembers(on: &api)
        registerAttributes(on: &api)
        registerMemberAttributes(on: &api)
    }

    private static func registerLifecycle(on api: inout API) {
        api.add(.post, "/v1/rooms", .appOrUser, "createRoom") { ctx in
            var body = try ctx.body()
            var input = RoomService.NewRoom()
            input.roomID = body.id("room_id", .roomID)
            readNewRoom(&body, into: &input)
            let creator = body.id("creator", .userID)
            let acting = ctx.tokenUserID == nil ? creator : try ctx.actingUser(creator, field: body.fieldPath("creator"))
            try body.check()
            return Reply.created(try RoomService(ctx).create(input, creator: acting).json())
        }

        api.add(.get, "/v1/rooms", .app, "listRooms") { ctx in
            var query = ctx.query()
            let limit = query.limit()
            let q = query.string("q")
            let cursor = query.cursor()
            try query.check()
            let list = "rooms|\(ctx.appID)|\(q ?? "")"
            let after = try ctx.timeAndIDCursor(cursor, list: list)
            let rooms = try RoomService(ctx).list(q: q, after: after, limit: limit + 1)
            return ListPage.page(rooms, limit: limit, list: list, ctx: ctx, { [.int($0.createdAt), .string($0.roomID)] }) { $0.json() }
        }

        api.add(.get, "/v1/rooms/{room_id}", .appOrUser, "getRoom") { ctx in
            let roomID = try ctx.pathID("room_id", .roomID)
            return Reply.json(try RoomService(ctx).get(roomID, on: ctx.db).json())
        }

        api.add(.delete, "/v1/rooms/{room_id}", .app, "destroyRoom") { ctx in
            let roomID = try ctx.pathID("room_id", .roomID)
            try RoomService(ctx).destroy(roomID)
            return Reply.noContent()
        }

        api.add(.get, "/v1/rooms/{room_id}/online_count", .appOrUser, "getRoomOnlineCount") { ctx in
            let roomID = try ctx.pathID("room_id", .roomID)
            let room = try RoomService(ctx).get(roomID, on: ctx.db)
            var o = JSONObjectWriter(capacity: 64 + roomID.utf8.count)
            o["room_id"] = roomID
            o["count"] = room.memberCount
            return Reply.json(o.finish())
        }
    }

    /// The fields a creation takes (`POST /v1/rooms`, and `enter`, which uses them only when it creates).
    private static func readNewRoom(_ body: inout BodyReader, into input: inout RoomService.NewRoom) {
        input.name = body.string("name", maxBytes: RoomLimits.maxNameBytes) ?? ""
        input.destroyDelayS = body.int("destroy_delay_s", range: 0...RoomLimits.maxDestroyDelayS) ?? 0
        if let attributes = body.rawObject("attributes") {
            var seen: Set<String> = []
            for (key, value) in attributes {
                guard let value = value.stringValue else {
                    body.addError(path: "\(body.fieldPath("attributes")).\(key)", "expected string, got \(value.typeName)")
                    continue
                }
                if !seen.insert(key).inserted { body.addError(path: "\(body.fieldPath("attributes")).\(key)", "is repeated") }
                input.attributes.append((key, value))
            }
        }
    }

    private static func registerMembers(on api: inout API) {
        api.add(.post, "/v1/rooms/{room_id}/enter", .appOrUser, "enterRoom") { ctx in
            let roomID = try ctx.pathID("room_id", .roomID)
            var body = try ctx.body()
            let userID = try ctx.actingUser(body.id("user_id", .userID), field: body.fieldPath("user_id"))
            let extendedData = body.string("extended_data", maxBytes: RoomLimits.maxExtendedDataBytes) ?? ""
            let createIfMissing = body.bool("create_if_missing") ?? true
            var input = RoomService.NewRoom()
            readNewRoom(&body, into: &input)
            try body.check()
            let entered = try RoomService(ctx).enter(
                roomID, userID: userID, extendedData: extendedData, createIfMissing: createIfMissing, newRoom: input)
            var o = JSONObjectWriter(capacity: 320)
            o.raw("room", entered.room.json())
            o["created"] = entered.created
            o["already_member"] = entered.alreadyMember
            return Reply.json(o.finish())
        }

        api.add(.post, "/v1/rooms/{room_id}/leave", .appOrUser, "leaveRoom") { ctx in
            let roomID = try ctx.pathID("room_id", .roomID)
            var body = try ctx.body()
            let userID = try ctx.actingUser(body.id("user_id", .userID), field: body.fieldPath("user_id"))
            try body.check()
            try RoomService(ctx).leave(roomID, userID: userID)
            var o = JSONObjectWriter(capacity: 96)
            o["room_id"] = roomID
            o["user_id"] = userID
            return Reply.json(o.finish())
        }

        api.add(.post, "/v1/rooms/{room_id}/members/kick", .app, "kickRoomMembers") { ctx in
            let roomID = try ctx.pathID("room_id", .roomID)
            var body = try ctx.body()
            let items = body.batchIDs(maxItems: RoomLimits.maxKick)
            try body.check()
            let failed = try RoomService(ctx).kick(roomID, userIDs: items.compactMap(\.userID))
            return Reply.batch(
                BatchResult.results(items) { id in
                    failed.contains(id) ? .failed(.notInRoom, "user \(id) is not in room \(roomID)") : .ok(nil)
                })
        }

        api.add(.get, "/v1/rooms/{room_id}/members", .appOrUser, "listRoomMembers") { ctx in
            let roomID = try ctx.pathID("room_id", .roomID)
            var query = ctx.query()
            let limit = query.limit()
            let cursor = query.cursor()
            try query.check()
            let service = RoomService(ctx)
            _ = try service.readable(roomID, by: ctx.tokenUserID)
            let list = "room_members|\(ctx.appID)|\(roomID)"
            let after = try ctx.timeAndIDCursor(cursor, list: list)
            let members = try service.members(of: roomID, after: after, limit: limit + 1)
            return ListPage.page(members, limit: limit, list: list, ctx: ctx, { [.int($0.enteredAt), .string($0.userID)] }) {
                $0.json()
            }
        }

        api.add(.post, "/v1/rooms/{room_id}/members/query", .appOrUser, "queryRoomMembers") { ctx in
            try queryMembers(ctx, maxItems: RoomLimits.maxMemberQuery) { service, roomID, userIDs in
                try service.members(of: roomID, among: userIDs).mapValues { $0.json() }
            }
        }
    }

    /// A members-only batch read (`…/members/query`, `…/member_attributes/query`): `data` = what `fetch` found for
    /// each user in the room; the others fail with `not_in_room`.
    private static func queryMembers(
        _ ctx: APIContext, maxItems: Int,
        _ fetch: (RoomService, _ roomID: String, _ userIDs: [String]) throws -> [String: [UInt8]]
    ) throws -> Response {
        let roomID = try ctx.pathID("room_id", .roomID)
        var body = try ctx.body()
        let items = body.batchIDs(maxItems: maxItems)
        try body.check()
        let service = RoomService(ctx)
        _ = try service.readable(roomID, by: ctx.tokenUserID)
        let found = try fetch(service, roomID, items.compactMap(\.userID))
        return Reply.batch(
            BatchResult.results(items) { id in
                found[id].map { .ok($0) } ?? .failed(.notInRoom, "user \(id) is not in room \(roomID)")
            })
    }

    /// The operator of an attribute request (docs/users.md#user-tokens): a user token acts for itself, the app for
    /// `operator` if it names one (then exactly as that user), else for itself.
    private static func attributeOperator(_ ctx: APIContext, _ body: inout BodyReader) throws -> RoomService.Operator {
        let named = body.id("operator", .userID)
        if ctx.tokenUserID != nil { return RoomService.Operator(userID: try ctx.actingUser(named, field: body.fieldPath("operator"))) }
        return RoomService.Operator(userID: named)
    }

    private static func registerAttributes(on api: inout API) {
        api.add(.get, "/v1/rooms/{room_id}/attributes", .appOrUser, "getRoomAttributes") { ctx in
            let roomID = try ctx.pathID("room_id", .roomID)
            let service = RoomService(ctx)
            _ = try service.readable(roomID, by: ctx.tokenUserID)
            let attributes = try service.attributes(of: roomID)
            var o = JSONObjectWriter(capacity: 128 + attributes.count * 96)
            o["room_id"] = roomID
            o.write("attributes") { w in w.array { w in for a in attributes { w.writeRaw(a.json()) } } }
            return Reply.json(o.finish())
        }

        api.add(.post, "/v1/rooms/{room_id}/attributes", .appOrUser, "setRoomAttributes") { ctx in
            let roomID = try ctx.pathID("room_id", .roomID)
            var body = try ctx.body()
            let op = try attributeOperator(ctx, &body)
            let options = readOptions(&body)
            var items: [(key: String, problem: String?, operation: RoomService.AttributeOperation?)] = []
            if let attributes = body.rawObject("attributes", required: true) {
                if attributes.isEmpty || attributes.count > RoomLimits.maxAttributes {
                    body.addError("attributes", "must have 1 to \(RoomLimits.maxAttributes) entries")
                }
                var seen: Set<String> = []
                for (key, value) in attributes {
                    if !seen.insert(key).inserted {
                        items.append((key, "key \(key) is repeated in this request", nil))
                    } else if let value = value.stringValue {
                        items.append((key, nil, .set(key: key, value: value)))
                    } else {
                        items.append((key, "expected string value, got \(value.typeName)", nil))
                    }
                }
            }
            try body.check()
            return try applyAttributes(ctx, roomID, op: op, items, options: options, atomic: false)
        }

        api.add(.post, "/v1/rooms/{room_id}/attributes/delete", .appOrUser, "deleteRoomAttributes") { ctx in
            let roomID = try ctx.pathID("room_id", .roomID)
            var body = try ctx.body()
            let op = try attributeOperator(ctx, &body)
            var options = RoomService.AttributeOptions()
            options.force = body.bool("is_force") ?? false
            var items: [(key: String, problem: String?, operation: RoomService.AttributeOperation?)] = []
            if let raw = body.array("keys", required: true, minItems: 1, maxItems: RoomLimits.maxAttributes) {
                var seen: Set<String> = []
                for value in raw {
                    guard let key = value.stringValue else {
                        items.append(("", "expected string, got \(value.typeName)", nil))
                        continue
                    }
                    items.append(seen.insert(key).inserted ? (key, nil, .delete(key: key)) : (key, "key \(key) is repeated in this request", nil))
                }
            }
            try body.check()
            return try applyAttributes(ctx, roomID, op: op, items, options: options, atomic: false)
        }

        api.add(.post, "/v1/rooms/{room_id}/attributes/batch", .appOrUser, "batchRoomAttributes") { ctx in
            let roomID = try ctx.pathID("room_id", .roomID)
            var body = try ctx.body()
            let op = try attributeOperator(ctx, &body)
            let options = readOptions(&body)
            var items: [(key: String, problem: String?, operation: RoomService.AttributeOperation?)] = []
            var seen: Set<String> = []
            _ = body.objectArray("operations", required: true, minItems: 1, maxItems: RoomLimits.maxAttributes) { item, _ in
                let kind = item.string("op", required: true)
                let key = item.string("key", required: true)
                let value = item.string("value")
                guard let kind, let key else { return }
                guard kind == "set" || kind == "delete" else { return item.addError("op", "must be set or delete") }
                if kind == "set" && value == nil { return item.addError("value", "is required for set") }
                guard seen.insert(key).inserted else {
                    return items.append((key, "key \(key) is repeated in this request", nil))
                }
                items.append((key, nil, kind == "set" ? .set(key: key, value: value ?? "") : .delete(key: key)))
            }
            try body.check()
            return try applyAttributes(ctx, roomID, op: op, items, options: options, atomic: true)
        }
    }

    private static func readOptions(_ body: inout BodyReader) -> RoomService.AttributeOptions {
        var options = RoomService.AttributeOptions()
        options.force = body.bool("is_force") ?? false
        options.updateOwner = body.bool("is_update_owner") ?? false
        options.deleteAfterOwnerLeft = body.bool("is_delete_after_owner_left") ?? false
        return options
    }

    /// Runs the valid operations and answers one result per item (`id` = key); items that failed validation fail
    /// with `invalid_params` (in the atomic batch they make the whole batch fail).
    private static func applyAttributes(
        _ ctx: APIContext, _ roomID: String, op: RoomService.Operator,
        _ items: [(key: String, problem: String?, operation: RoomService.AttributeOperation?)], options: RoomService.AttributeOptions,
        atomic: Bool
    ) throws -> Response {
        let service = RoomService(ctx)
        let invalid = items.contains { $0.problem != nil }
        var outcomes: [RoomService.ItemOutcome]
        if atomic && invalid {
            // Nothing runs: the room and operator are still checked (404, 403) before the items answer.
            _ = try service.get(roomID, on: ctx.db)
            try service.requireOperator(op, in: roomID, on: ctx.db)
            outcomes = []
        } else {
            outcomes = try service.changeAttributes(roomID, op: op, items.compactMap(\.operation), options: options, atomic: atomic)
        }
        var next = outcomes.makeIterator()
        let results = items.enumerated().map { index, item -> BatchResult in
            if let problem = item.problem { return BatchResult(index: index, id: item.key, outcome: .failed(.invalidParams, problem)) }
            if atomic && invalid {
                return BatchResult(index: index, id: item.key, outcome: .failed(.roomBatchAborted, "not applied: another operation failed"))
            }
            switch next.next() {
            case .applied?: return BatchResult(index: index, id: item.key, outcome: .ok(nil))
            case .failed(let code, let message)?: return BatchResult(index: index, id: item.key, outcome: .failed(code, message))
            case nil: return BatchResult(index: index, id: item.key, outcome: .failed(.internalError, "not processed"))
            }
        }
        guard atomic else { return Reply.batch(results) }
        let applied = !invalid && outcomes.allSatisfy { if case .applied = $0 { true } else { false } }
        return Reply.batch(results) { w in
            w.key(static: "applied")
            w.writeBool(applied)
        }
    }

    private static func registerMemberAttributes(on api: inout API) {
        api.add(.post, "/v1/rooms/{room_id}/member_attributes", .appOrUser, "setRoomMemberAttributes") { ctx in
            let roomID = try ctx.pathID("room_id", .roomID)
            var body = try ctx.body()
            let op = try attributeOperator(ctx, &body)
            let items = body.batchIDs(maxItems: RoomLimits.maxMemberAttributeUsers)
            var pairs: [(key: String, value: String)] = []
            if let attributes = body.rawObject("attributes", required: true) {
                if attributes.isEmpty { body.addError("attributes", "must have at least one pair") }
                for (key, value) in attributes {
                    guard let value = value.stringValue else {
                        body.addError(path: "\(body.fieldPath("attributes")).\(key)", "expected string, got \(value.typeName)")
                        continue
                    }
                    pairs.append((key, value))
                }
            }
            let flag = body.bool("is_delete_after_owner_left") ?? true
            try body.check()
            let outcomes = try RoomService(ctx).setMemberAttributes(
                roomID, op: op, userIDs: items.compactMap(\.userID), pairs: pairs, deleteAfterOwnerLeft: flag)
            return Reply.batch(
                BatchResult.results(items) { id in
                    switch outcomes[id] {
                    case .applied(let after)?: .ok(RoomService.memberAttributesJSON(id, after))
                    case .failed(let code, let message)?: .failed(code, message)
                    case nil: .failed(.internalError, "not processed")
                    }
                })
        }

        api.add(.post, "/v1/rooms/{room_id}/member_attributes/query", .appOrUser, "queryRoomMemberAttributes") { ctx in
            try queryMembers(ctx, maxItems: RoomLimits.maxMemberAttributeUsers) { service, roomID, userIDs in
                Dictionary(
                    uniqueKeysWithValues: try service.memberAttributes(of: roomID, userIDs: userIDs).map {
                        ($0.key, RoomService.memberAttributesJSON($0.key, $0.value))
                    })
            }
        }

        api.add(.get, "/v1/rooms/{room_id}/member_attributes", .appOrUser, "listRoomMemberAttributes") { ctx in
            let roomID = try ctx.pathID("room_id", .roomID)
            var query = ctx.query()
            let limit = query.limit()
            let cursor = query.cursor()
            try query.check()
            let service = RoomService(ctx)
            _ = try service.readable(roomID, by: ctx.tokenUserID)
            let list = "room_member_attributes|\(ctx.appID)|\(roomID)"
            let after = try ListPage.cursorValues(ctx, cursor, list: list, count: 1).map {
                guard let id = $0[0].stringValue else { throw ListPage.malformedCursor() }
                return id
            }
            let rows = try service.memberAttributesList(of: roomID, after: after, limit: limit + 1)
            return ListPage.page(rows, limit: limit, list: list, ctx: ctx, { [.string($0.userID)] }) {
                RoomService.memberAttributesJSON($0.userID, $0.attributes)
            }
        }
    }
}
