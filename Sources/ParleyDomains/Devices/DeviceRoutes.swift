import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Offline push rule and devices (docs/users.md#devices-and-the-offline-push-rule): HTTP ↔ ``DeviceService``.
package enum DeviceRoutes {
    package static func register(on api: inout API) {
        api.add(.get, "/v1/users/{user_id}/push_rule", .appOrSelf, "getPushRule") { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            return Reply.json(try DeviceService(ctx).pushRule(userID, on: ctx.db).json())
        }

        api.add(.put, "/v1/users/{user_id}/push_rule", .appOrSelf, "putPushRule") { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            var body = try ctx.body()
            let rule = PushRule.read(from: &body)
            try body.check()
            return Reply.json(try DeviceService(ctx).setPushRule(userID, rule).json())
        }

        api.add(.post, "/v1/users/{user_id}/devices", .appOrSelf, "registerDevice") { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            var body = try ctx.body()
            let registration = DeviceRegistration.read(from: &body)
            try body.check()
            guard let registration else { throw APIError.internalError }
            let outcome = try DeviceService(ctx).register(userID, registration)
            return outcome.created ? Reply.created(outcome.device.json()) : Reply.json(outcome.device.json())
        }

        api.add(.get, "/v1/users/{user_id}/devices", .appOrSelf, "listDevices") { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            let devices = try DeviceService(ctx).list(userID, on: ctx.db)
            return Reply.list(devices.map { $0.json() }, nextCursor: nil)
        }

        api.add(.delete, "/v1/users/{user_id}/devices/{device_id}", .appOrSelf, "deleteDevice") { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            let deviceID = try ctx.pathID("device_id", .deviceID)
            try DeviceService(ctx).delete(userID, deviceID: deviceID)
            return Reply.noContent()
        }
    }
}
