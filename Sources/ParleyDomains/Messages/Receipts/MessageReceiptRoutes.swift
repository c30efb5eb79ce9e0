import ParleyAPI
import ParleyCore
import ParleyHTTP
import ParleyPostgres

/// Read and delivery receipts (docs/messages.md#receipts, docs/messages.md#delivery-receipts): HTTP ↔ ``MessageReceipts``.
package enum MessageReceiptRoutes {
    package static func register(on api: inout API) {
        api.add(.post, "/v1/users/{user_id}/receipts/read", .appOrSelf, "readMessageReceipts") { ctx in
            let userID = try ctx.pathID("user_id", .userID)
            var body = try ctx.body()
            let items = body.batchIDs("message_ids", minItems: 1, maxItems: 100, kind: .opaque)
            try body.check()
            return Reply.batch(try MessageReceipts(ctx).read(items, by: userID, ctx: ctx))
        }

        api.add(.post, "/v1/messages/delivered", .appOrUser, "markMessagesDelivered") { ctx in
            var body = try ctx.body()
            let userID = try ctx.actingUser(body.id("user_id", .userID), field: "user_id")
            let items = body.batchIDs("message_ids", minItems: 1, maxItems: 100, kind: .opaque)
            try body.check()
            return Reply.batch(try MessageReceipts(ctx).deliver(items, to: userID))
        }

        api.add(.get, "/v1/messages/{message_id}/receipt", .appOrUser, "getMessageReceipt") { ctx in
            let messageID = try ctx.pathID("message_id", .opaque)
            try ctx.query().check()
            let receipt = try MessageReceipts.tellingUnstored(messageID, ctx) {
                try MessageReceipts(ctx).receipt(messageID, viewer: MessageViewer(ctx))
            }
            var o = JSONObjectWriter(capacity: 160)
            o["message_id"] = messageID
            o["receipt_status"] = receipt.status.rawValue
            o["read_count"] = receipt.readCount
            o["unread_count"] = receipt.unreadCount
            o["done_at"] = receipt.doneAt
            o["delivered_count"] = receipt.deliveredCount
            if receipt.peer { o["delivered"] = receipt.deliveredCount > 0 }
            return Reply.json(o.finish())
        }

        api.add(.get, "/v1/messages/{message_id}/receipt/members", .appOrUser, "listMessageReceiptMembers") { ctx in
            let messageID = try ctx.pathID("message_id", .opaque)
            var query = ctx.query()
            let state =
                query.choice("state", MessageReceipts.MemberState.allCases.map(\.rawValue)).flatMap(MessageReceipts.MemberState.init(rawValue:))
                ?? .read
            let limit = query.limit()
            let cursor = query.cursor()
            try query.check()
            let list = "receipt_members|\(ctx.appID)|\(messageID)|\(state.rawValue)"
            let after = try ListPage.cursorValues(ctx, cursor, list: list, count: 1).map { values in
                guard let userID = values[0].stringValue else { throw ListPage.malformedCursor() }
                return userID
            }
            let members = try MessageReceipts.tellingUnstored(messageID, ctx) {
                try MessageReceipts(ctx).members(messageID, viewer: MessageViewer(ctx), state: state, after: after, limit: limit + 1)
            }
            return ListPage.page(members, limit: limit, list: list, ctx: ctx, { [.string($0.userID)] }, { $0.json() })
        }
    }
}
