import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Typing and other ephemeral signals (docs/conversations.md#typing-and-other-signals): HTTP ↔ ``ConversationSignals``.
package enum ConversationSignalRoutes {
    package static func register(on api: inout API) {
        api.add(.post, "/v1/conversations/{type}/{id}/signals", .appOrUser, "sendConversationSignal") { ctx in
            guard let type = ConversationType(rawValue: ctx.path("type")) else {
                throw APIError.invalidParam("type", "must be peer, group or room")
            }
            let id = try ctx.pathID("id", type == .peer ? .userID : type == .group ? .groupID : .roomID)
            var body = try ctx.body()
            let from = body.id("from", .userID)
            let raw = body.string("signal", required: true)
            let signal = raw.flatMap(ConversationSignals.Signal.init(rawValue:))
            if raw != nil, signal == nil { body.addError("signal", "must be typing_start, typing_stop or custom") }
            let data = body.string("data", maxBytes: 1024)
            if data != nil, signal != nil, signal != .custom { body.addError("data", "only a custom signal carries data") }
            try body.check()
            let sender = try ctx.actingUser(from, field: "from")
            if type == .peer, id == sender { throw APIError.invalidParam("id", "a peer signal goes to another user") }
            try ConversationSignals(ctx).send(from: sender, type: type, id: id, signal: signal ?? .custom, data: data)
            return Response(status: 202)
        }
    }
}
