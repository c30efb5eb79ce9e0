import ParleyHTTP
import ParleyTesting
import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

/// Real responses of a running server, validated against what `openapi/openapi.json` declares for the operation.
///
/// For every request the checker looks up the operation by method and path template and asserts that
/// - the status the server answered is declared for the operation;
/// - the response's media type is declared for that status (a 204 declares and carries no body);
/// - a JSON body validates against the declared schema (`JSONSchemaValidator`) with undeclared members rejected,
///   so every member the server emits is described by the document and every `required` member is emitted;
/// - for a 2xx answer, the JSON request body sent validates against the operation's request schema.
/// It also records which component schemas the validation went through, so the suite can assert that every object
/// type the server implements (and the list and batch wrappers) was checked against a real response.
@Suite("OpenAPI response schemas")
struct OpenAPIResponseSchemaTests {
    /// Operations not driven here: the two SSE streams (`text/event-stream`, covered by the live stream suites).
    static let notDriven: Set<String> = ["streamAppEvents", "streamUserEvents"]

    /// The component schemas that must have validated a real response: the API's objects, list and batch wrappers.
    static let objectTypes: Set<String> = [
        "App", "AppSettings", "AppList", "AppCreated", "AppKey", "AppKeyList", "AppKeyCreated", "User", "UserList",
        "UserBatchResult", "UserToken", "KickResult", "UserStatus", "UserStatusBatchResult", "StatusSubscription",
        "StatusSubscriptionPage", "StatusSubscriptionBatchResult", "PushRule", "Device", "DeviceList", "Friend",
        "FriendPage", "FriendAttributes", "FriendApplication", "FriendApplicationPage", "FriendCheckBatchResult",
        "FriendRelation", "BlacklistAdded", "MessageBatchSent", "BlacklistEntry", "BlacklistPage", "BlacklistCheck", "BlacklistAddBatchResult",
        "Group", "GroupMute", "Blocklist", "BlocklistList", "BlocklistTestResult",
        "GroupPage", "GroupCreated", "GroupMember", "GroupMemberPage", "GroupMemberCount", "UserGroupPage",
        "GroupApplication", "GroupApplicationPage", "GroupAttributes", "GroupLeft", "GroupInvited", "GroupInviteBatchResult",
        "GroupMemberMuted", "GroupMemberMuteBatchResult", "Room", "RoomPage", "RoomEntered", "RoomLeft", "RoomOnlineCount",
        "RoomMember", "RoomMemberPage", "RoomMemberBatchResult", "RoomAttribute", "RoomAttributes", "RoomAttributesBatchResult",
        "RoomMemberAttributes", "RoomMemberAttributesPage", "RoomMemberAttributesBatchResult", "Message", "MessagePage",
        "MessageReply", "Mentions", "MessageBatchSendResult", "MessageBroadcastAccepted", "Conversation",
        "ConversationPage", "MentionState", "ConversationReadAllResult", "UnreadCount", "Event", "EventLogPage",
        "BatchResult", "BatchResultItem", "BatchItemError", "Problem", "FieldError", "Stats", "StatsSeries", "TestClock",
        "HealthStatus", "ReadyStatus", "OpenAPIDocument", "Webhook", "WebhookList", "WebhookPingResult", "Delivery",
        "DeliveryDetail", "DeliveryList", "PushAttempt", "PushAttemptList", "PushTestResult", "PushTestDecision",
        "PushGatewayRequest", "PushGatewayResponse", "PushMatrixNotifyRequest", "PushMatrixNotification", "PushMatrixContent",
        "PushMatrixDevice", "PushGenericRequest", "PushGenericNotification", "Call", "CallUser", "CallPage", "CallBatchResult",
        "MessageReaction", "MessageReactionsResult", "MessageImportResult", "MessageReactionUserPage", "MessageReceipt", "MessageReceiptMemberPage",
        "MessageReceiptMember", "File", "FilePage", "Job", "JobPage",
        "Report", "ReportPage", "ReportWithReports", "ModerationAction", "ModerationActionPage",
        "ScheduledAccepted", "ScheduledMessage", "ScheduledMessagePage",
    ]

    /// The members of a User as the app key sees it (`deleted_at` is null unless soft-deleted).
    static let userKeys = [
        "user_id", "name", "avatar_url", "extended_data", "created_at", "updated_at", "muted_until", "banned_until",
        "deleted_at",
    ]

    @Test func everyOperationAnswersAsDocumented() throws {
        try withApp(testClock: true) { server, app in
            let c = try ContractChecker(server: server, app: app)

            try Self.opsAndApps(c)
            try Self.users(c)
            try Self.presenceAndDevices(c)
            try Self.friendsAndBlacklist(c)
            try Self.groups(c)
            try Self.rooms(c)
            try Self.calls(c)
            try Self.moderation(c)
            try Self.files(c)
            try Self.messagesAndConversations(c)
            try Self.messageLifecycle(c)
            try Self.scheduledMessages(c, server: server)
            try Self.jobs(c, server: server)
            try Self.events(c)
            try Self.webhooks(c)
            try Self.push(c)
            try Self.blocklists(c)
            try Self.problems(c)

            let refs = Set(c.refs.map { String($0.split(separator: "/").last ?? "") })
            #expect(Self.objectTypes.subtracting(refs).sorted() == [], "schemas no real response was validated against")
            let all = Set(ContractChecker.allOperationIDs(c.spec))
            #expect(all.subtracting(c.operations).subtracting(Self.notDriven).sorted() == [], "operations not driven")
        }
    }

    /// The document's own examples (schema `example`, media and parameter `example`/`examples`) validate against
    /// the schema they illustrate, with undeclared members rejected as for real responses.
    @Test func documentExamplesMatchTheirSchemas() throws {
        let spec = try OpenAPISpecTests.loadSpec()
        var validator = JSONSchemaValidator(document: spec)
        validator.rejectUndeclaredProperties = true
        var checked = 0
        var failures: [String] = []
        func check(_ example: JSONValue, _ schema: JSONValue, _ path: String) {
            checked += 1
            failures += validator.validate(example, against: schema).map { "\(path): \($0)" }
        }
        func walk(_ value: JSONValue, _ path: String) {
            if let object = value.objectValue {
                let isSchema = object["type"] != nil || object["$ref"] != nil || object["allOf"] != nil
                let schema: JSONValue? = object["schema"] ?? (isSchema ? value : nil)
                if let schema {
                    if let example = object["example"] { check(example, schema, path + "/example") }
                    for (name, example) in object["examples"]?.objectValue ?? JSONObject() {
                        if let example = example["value"] { check(example, schema, path + "/examples/" + name) }
                    }
                }
                for (key, member) in object where !["example", "examples", "default", "enum", "const"].contains(key) {
                    walk(member, path + "/" + key)
                }
            } else if let array = value.arrayValue {
                for (i, element) in array.enumerated() { walk(element, "\(path)[\(i)]") }
            }
        }
        walk(spec, "#")
        #expect(checked > 100)
        #expect(failures == [])
    }

    // MARK: - Areas

    static func opsAndApps(_ c: ContractChecker) throws {
        c.call(.get, "/healthz", as: .anonymous, status: 200)
        c.call(.get, "/readyz", as: .anonymous, status: 200)
        c.call(.get, "/metrics", as: .anonymous, status: 200)
        c.call(.get, "/openapi.json", as: .anonymous, status: 200)
        c.call(.get, "/console", as: .anonymous, status: 200)
        c.call(.get, "/console/{asset}", "console.js", as: .anonymous, status: 200)
        c.call(.get, "/console/{asset}", "missing.js", as: .anonymous, status: 404)

        let created = c.call(.post, "/v1/apps", as: .admin, json: #"{"app_id":"contract-x","name":"x"}"#, status: 201)
        #expect(created.json?["key"]?["secret"]?.stringValue != nil)
        c.call(.post, "/v1/apps", as: .admin, json: #"{"app_id":"contract-x","name":"x"}"#, status: 409)
        c.call(.get, "/v1/apps", query: "limit=1", as: .admin, status: 200)
        c.call(.get, "/v1/apps/{app_id}", "contract-x", as: .admin, status: 200)
        c.call(.get, "/v1/apps/{app_id}", "nope-app", as: .admin, status: 404)
        c.call(.patch, "/v1/apps/{app_id}", "contract-x", as: .admin, json: #"{"name":"renamed"}"#, status: 200)
        c.call(.get, "/v1/apps/{app_id}/settings", "contract-x", as: .admin, status: 200)
        c.call(.patch, "/v1/apps/{app_id}/settings", "contract-x", as: .admin, json: #"{"revoke_window_s":60}"#, status: 200)
        let key = c.call(.post, "/v1/apps/{app_id}/keys", "contract-x", as: .admin, json: #"{"name":"second"}"#, status: 201)
        c.call(.get, "/v1/apps/{app_id}/keys", "contract-x", as: .admin, status: 200)
        let keyID = key.json?["key_id"]?.stringValue ?? ""
        c.call(.delete, "/v1/apps/{app_id}/keys/{key_id}", "contract-x", keyID, as: .admin, status: 204)
        c.call(.delete, "/v1/apps/{app_id}", "contract-x", as: .admin, status: 204)

        c.call(.get, "/v1/settings", status: 200)
        c.call(.patch, "/v1/settings", json: #"{"revoke_window_s":300,"push":{"event_id_only":true}}"#, status: 200)
        c.call(.get, "/v1/stats", status: 200)
        c.call(.get, "/v1/stats/series", status: 200)
        c.call(.get, "/v1/stats/series", query: "range=7d&metrics=messages,http_5xx", status: 200)
        c.call(.get, "/v1/test/clock", as: .admin, status: 200)
        c.call(.post, "/v1/test/clock/advance", as: .admin, json: #"{"ms":1}"#, status: 200)
    }

    static func users(_ c: ContractChecker) throws {
        for id in ["a", "b", "c", "d"] {
            c.call(.post, "/v1/users", json: #"{"user_id":"\#(id)","name":"User \#(id)","extended_data":"x"}"#, status: 201)
        }
        c.call(.post, "/v1/users/import", json: #"{"users":[{"user_id":"e","name":"E"},{"user_id":"a"}]}"#, status: 200)
        // The two views of a User the schema allows (docs/users.md#the-user-object): the app key's, and another user's.
        let full = c.call(.get, "/v1/users/{user_id}", "a", status: 200)
        #expect(full.json?.objectValue?.keys == Self.userKeys)
        let other = c.call(.get, "/v1/users/{user_id}", "b", as: .user("a"), status: 200)
        #expect(other.json?.objectValue?.keys == ["user_id", "name", "avatar_url", "extended_data", "created_at"])
        c.call(.post, "/v1/users/query", json: #"{"user_ids":["a","ghost"]}"#, status: 200)
        c.call(.patch, "/v1/users/{user_id}", "a", json: #"{"name":"Alice","avatar_url":"https://x.test/a.png"}"#, status: 200)
        c.call(.get, "/v1/users", query: "limit=2", status: 200)
        c.call(.get, "/v1/users", query: "state=all&q=a", status: 200)
        c.call(.post, "/v1/users/{user_id}/tokens", "c", json: #"{"ttl_s":600}"#, status: 201)
        c.call(.post, "/v1/users/{user_id}/kick", "d", json: "{}", status: 200)
        c.call(.post, "/v1/users/{user_id}/mute", "d", json: #"{"duration_s":60}"#, status: 200)
        c.call(.post, "/v1/users/{user_id}/ban", "d", json: #"{"duration_s":60,"reason":"spam"}"#, status: 200)
        c.call(.post, "/v1/users/{user_id}/unban", "d", json: "{}", status: 200)
        c.call(.delete, "/v1/users/{user_id}", "d", status: 204)
        let deleted = c.call(.get, "/v1/users/{user_id}", "d", query: "include_deleted=true", status: 200)
        #expect(deleted.json?.objectValue?.keys == Self.userKeys)
        #expect(deleted.json?["deleted_at"]?.intValue != nil)
        c.call(.post, "/v1/users/{user_id}/restore", "d", json: "{}", status: 200)
    }

    static func presenceAndDevices(_ c: ContractChecker) throws {
        c.call(.get, "/v1/users/{user_id}/status", "a", status: 200)
        c.call(.post, "/v1/users/status/query", json: #"{"user_ids":["a","ghost"]}"#, status: 200)
        c.call(.put, "/v1/users/{user_id}/status/custom", "a", json: #"{"custom_status":"busy","expires_in_s":60}"#, status: 200)
        c.call(.post, "/v1/users/{user_id}/status/subscriptions", "a", json: #"{"user_ids":["b","a"],"duration_min":10}"#, status: 200)
        c.call(.get, "/v1/users/{user_id}/status/subscriptions", "a", status: 200)
        c.call(.post, "/v1/users/{user_id}/status/subscriptions/delete", "a", json: #"{"user_ids":["b","c"]}"#, status: 200)

        c.call(.get, "/v1/users/{user_id}/push_rule", "a", status: 200)
        c.call(
            .put, "/v1/users/{user_id}/push_rule", "a",
            json: #"{"online_platforms":["win","macos"],"not_to_receive_offline_push_platforms":["ios"]}"#, status: 200)
        let device = #"{"device_id":"phone","platform":"android","provider":"fcm","push_key":"k1","app_id":"com.x","lang":"en"}"#
        c.call(.post, "/v1/users/{user_id}/devices", "a", json: device, status: 201)
        c.call(.post, "/v1/users/{user_id}/devices", "a", json: device, status: 200)
        c.call(
            .post, "/v1/users/{user_id}/devices", "a",
            json: #"{"platform":"ios","provider":"apns","push_key":"zz","app_id":"com.x"}"#, status: 422)
        c.call(.get, "/v1/users/{user_id}/devices", "a", status: 200)
        c.call(.delete, "/v1/users/{user_id}/devices/{device_id}", "a", "phone", status: 204)
        c.call(.delete, "/v1/users/{user_id}/devices/{device_id}", "a", "phone", status: 404)
    }

    static func friendsAndBlacklist(_ c: ContractChecker) throws {
        let add = #"{"friend_id":"b","wording":"hi","alias":"Bee","attributes":{"k0":"v0"}}"#
        c.call(.post, "/v1/users/{user_id}/friends", "a", json: add, status: 201)
        c.call(.post, "/v1/users/{user_id}/friends", "a", json: add, status: 409)
        c.call(.post, "/v1/users/{user_id}/friends", "a", json: #"{"friend_id":"a"}"#, status: 422)
        c.call(.get, "/v1/users/{user_id}/friends", "a", query: "limit=1", status: 200)
        c.call(.get, "/v1/users/{user_id}/friends/{friend_id}", "a", "b", status: 200)
        c.call(.get, "/v1/users/{user_id}/friends/{friend_id}", "a", "e", status: 404)
        c.call(.patch, "/v1/users/{user_id}/friends/{friend_id}", "a", "b", json: #"{"alias":"B","attributes":{"k1":"v1"}}"#, status: 200)
        c.call(.post, "/v1/users/{user_id}/friends/check", "a", json: #"{"user_ids":["b","c","ghost"]}"#, status: 200)

        let applied = c.call(.post, "/v1/users/{user_id}/friend_applications", "a", json: #"{"to":"c","wording":"w"}"#, status: 201)
        c.call(.post, "/v1/users/{user_id}/friend_applications", "a", json: #"{"to":"c","wording":"w2"}"#, status: 200)
        // `direction` only in the list (a member of FriendApplication that only the list answers carry).
        #expect(applied.json?["direction"] == nil)
        let listed = c.call(.get, "/v1/users/{user_id}/friend_applications", "c", status: 200)
        #expect(listed.json?["items"]?[0]?["direction"] == "received")
        let id = applied.json?["application_id"]?.stringValue ?? ""
        c.call(.post, "/v1/users/{user_id}/friend_applications/{application_id}/accept", "c", id, json: #"{"alias":"A"}"#, status: 200)
        c.call(.post, "/v1/users/{user_id}/friend_applications/{application_id}/accept", "c", id, json: "{}", status: 409)
        let second = c.call(.post, "/v1/users/{user_id}/friend_applications", "e", json: #"{"to":"a"}"#, status: 201)
        let secondID = second.json?["application_id"]?.stringValue ?? ""
        c.call(.post, "/v1/users/{user_id}/friend_applications/{application_id}/reject", "a", secondID, json: "{}", status: 200)
        c.call(.delete, "/v1/users/{user_id}/friends/{friend_id}", "a", "c", status: 204)
        c.call(.post, "/v1/users/{user_id}/friends/delete", "c", json: #"{"user_ids":["a","b"],"mode":"single"}"#, status: 200)

        c.call(.post, "/v1/users/{user_id}/blacklist", "a", json: #"{"user_ids":["e","a","ghost"]}"#, status: 200)
        c.call(.get, "/v1/users/{user_id}/blacklist", "a", status: 200)
        c.call(.get, "/v1/users/{user_id}/blacklist/{blocked_id}", "a", "e", status: 200)
        c.call(.post, "/v1/users/{user_id}/blacklist/delete", "a", json: #"{"user_ids":["e","b"]}"#, status: 200)
        c.call(.post, "/v1/users/{user_id}/blacklist", "a", json: #"{"user_ids":["e"]}"#, status: 200)
        c.call(.delete, "/v1/users/{user_id}/blacklist/{blocked_id}", "a", "e", status: 204)
        c.call(.delete, "/v1/users/{user_id}/blacklist/{blocked_id}", "a", "e", status: 404)
    }

    static func groups(_ c: ContractChecker) throws {
        let created = c.call(
            .post, "/v1/groups",
            json: #"{"group_id":"g1","name":"G","operator":"a","members":["b","c","ghost"],"attributes":{"k":"v"}}"#, status: 201)
        #expect(created.json?["group"]?["group_id"] == "g1")
        c.call(.post, "/v1/groups", json: #"{"group_id":"g1","operator":"a"}"#, status: 409)
        c.call(.get, "/v1/groups/{group_id}", "g1", status: 200)
        c.call(.get, "/v1/groups/{group_id}", "nope", status: 404)
        c.call(.get, "/v1/groups", query: "limit=1", status: 200)
        c.call(.patch, "/v1/groups/{group_id}", "g1", json: #"{"operator":"a","notice":"hello","max_members":100}"#, status: 200)
        c.call(.patch, "/v1/groups/{group_id}", "g1", json: #"{"operator":"c","name":"no"}"#, status: 403)
        c.call(.get, "/v1/groups/{group_id}/members", "g1", query: "limit=2", status: 200)
        c.call(.get, "/v1/groups/{group_id}/members/{member_id}", "g1", "b", status: 200)
        c.call(.get, "/v1/groups/{group_id}/member_count", "g1", status: 200)
        c.call(.get, "/v1/users/{user_id}/groups", "b", status: 200)
        c.call(.put, "/v1/groups/{group_id}/members/{member_id}/role", "g1", "b", json: #"{"operator":"a","role":2}"#, status: 200)
        c.call(.put, "/v1/groups/{group_id}/members/{member_id}/nickname", "g1", "c", json: #"{"operator":"a","nickname":"cc"}"#, status: 200)
        c.call(.post, "/v1/groups/{group_id}/members/invite", "g1", json: #"{"user_ids":["e","b"]}"#, status: 200)
        c.call(.post, "/v1/groups/{group_id}/members/kick", "g1", json: #"{"operator":"a","user_ids":["e","ghost"]}"#, status: 200)
        c.call(.post, "/v1/groups/{group_id}/join", "g1", json: #"{"user_id":"e"}"#, status: 200)
        c.call(.post, "/v1/groups/{group_id}/join", "g1", json: #"{"user_id":"e"}"#, status: 409)
        c.call(.post, "/v1/groups/{group_id}/leave", "g1", json: #"{"user_id":"e"}"#, status: 200)
        c.call(.put, "/v1/groups/{group_id}/mute", "g1", json: #"{"operator":"a","mode":"custom","duration_s":60,"roles":[3]}"#, status: 200)
        c.call(.put, "/v1/groups/{group_id}/mute", "g1", json: #"{"operator":"a","mode":"none"}"#, status: 200)
        c.call(.post, "/v1/groups/{group_id}/members/mute", "g1", json: #"{"operator":"a","user_ids":["c","ghost"],"duration_s":60}"#, status: 200)
        c.call(.get, "/v1/groups/{group_id}/muted_members", "g1", status: 200)
        c.call(.post, "/v1/groups/{group_id}/members/mute", "g1", json: #"{"operator":"a","user_ids":["c"],"duration_s":0}"#, status: 200)
        c.call(.post, "/v1/groups/{group_id}/attributes", "g1", json: #"{"operator":"c","attributes":{"k2":"v2","":"x"}}"#, status: 200)
        c.call(.get, "/v1/groups/{group_id}/attributes", "g1", status: 200)
        c.call(.get, "/v1/groups/{group_id}/attributes", "g1", query: "keys=k2", status: 200)
        c.call(.post, "/v1/groups/{group_id}/attributes/delete", "g1", json: #"{"keys":["k2","nope"]}"#, status: 200)

        // Applications: join (auth) accepted and rejected, an invite application in a be_invite_mode=auth group.
        c.call(.post, "/v1/groups", json: #"{"group_id":"g2","operator":"a","join_mode":"auth","be_invite_mode":"auth"}"#, status: 201)
        let join = c.call(.post, "/v1/groups/{group_id}/join", "g2", json: #"{"user_id":"e","wording":"please"}"#, status: 202)
        c.call(.get, "/v1/groups/{group_id}/applications", "g2", status: 200)
        c.call(
            .post, "/v1/group_applications/{application_id}/accept", join.json?["application_id"]?.stringValue ?? "", json: #"{"operator":"a"}"#,
            status: 200)
        let other = c.call(.post, "/v1/groups/{group_id}/join", "g2", json: #"{"user_id":"d"}"#, status: 202)
        let otherID = other.json?["application_id"]?.stringValue ?? ""
        c.call(.post, "/v1/group_applications/{application_id}/reject", otherID, json: #"{"operator":"a"}"#, status: 200)
        c.call(.post, "/v1/group_applications/{application_id}/reject", otherID, json: #"{"operator":"a"}"#, status: 409)
        c.call(.post, "/v1/groups/{group_id}/members/invite", "g2", json: #"{"operator":"a","user_ids":["b"]}"#, status: 200)
        c.call(.get, "/v1/users/{user_id}/group_applications", "b", status: 200)
        c.call(.post, "/v1/groups/{group_id}/transfer_owner", "g2", json: #"{"operator":"a","to_user_id":"e"}"#, status: 200)
        c.call(.post, "/v1/groups/{group_id}/dismiss", "g2", json: #"{"operator":"e"}"#, status: 200)
        c.call(.patch, "/v1/groups/{group_id}", "g2", json: #"{"name":"late"}"#, status: 409)
    }

    /// Rooms (docs/rooms.md): every route with its success answer and the usual errors (404 unknown room, 403 a
    /// non-member's token or an operator outside the room, per-item codes in the batches), and a room destroyed both
    /// ways (`DELETE`, and the last member leaving a room with `destroy_delay_s` 0).
    static func rooms(_ c: ContractChecker) throws {
        let created = c.call(
            .post, "/v1/rooms", json: #"{"room_id":"r1","name":"Lobby","creator":"a","attributes":{"topic":"hi"},"destroy_delay_s":60}"#,
            status: 201)
        #expect(created.json?["created_by"] == "a" && created.json?["member_count"] == .int(1))
        c.call(.post, "/v1/rooms", json: #"{"room_id":"r1"}"#, status: 409)
        c.call(.post, "/v1/rooms", json: #"{"room_id":"r2","creator":"ghost"}"#, status: 404)
        c.call(.post, "/v1/rooms", json: #"{"attributes":{"kkkkkkkkkkkkkkkkk":"v"}}"#, status: 422)
        c.call(.post, "/v1/rooms", as: .user("b"), json: #"{"creator":"a"}"#, status: 403)
        let anonymous = c.call(.post, "/v1/rooms", json: #"{"name":"app room"}"#, status: 201)
        #expect(anonymous.json?["created_by"] == .null)
        c.call(.get, "/v1/rooms", query: "limit=1", status: 200)
        c.call(.get, "/v1/rooms", query: "q=LOB", status: 200)
        c.call(.get, "/v1/rooms", query: "cursor=bogus", status: 400)
        c.call(.get, "/v1/rooms/{room_id}", "r1", status: 200)
        c.call(.get, "/v1/rooms/{room_id}", "r1", as: .user("e"), status: 200)
        c.call(.get, "/v1/rooms/{room_id}", "nope", status: 404)
        c.call(.get, "/v1/rooms/{room_id}/online_count", "r1", as: .user("e"), status: 200)
        c.call(.get, "/v1/rooms/{room_id}/online_count", "nope", status: 404)

        c.call(.post, "/v1/rooms/{room_id}/enter", "r1", json: #"{"user_id":"b","extended_data":"seat 3"}"#, status: 200)
        let again = c.call(.post, "/v1/rooms/{room_id}/enter", "r1", as: .user("b"), json: "{}", status: 200)
        #expect(again.json?["already_member"] == .bool(true))
        c.call(.post, "/v1/rooms/{room_id}/enter", "r1", json: #"{"user_id":"ghost"}"#, status: 404)
        c.call(.post, "/v1/rooms/{room_id}/enter", "nope", json: #"{"user_id":"c","create_if_missing":false}"#, status: 404)
        c.call(.post, "/v1/rooms/{room_id}/enter", "r1", as: .user("c"), json: #"{"user_id":"a"}"#, status: 403)
        let made = c.call(.post, "/v1/rooms/{room_id}/enter", "r3", json: #"{"user_id":"c","name":"made","attributes":{"k":"v"}}"#, status: 200)
        #expect(made.json?["created"] == .bool(true))
        c.call(.post, "/v1/rooms/{room_id}/enter", "r1", json: #"{"user_id":"c"}"#, status: 200)

        let members = c.call(.get, "/v1/rooms/{room_id}/members", "r1", query: "limit=2", status: 200)
        if let cursor = members.json?["next_cursor"]?.stringValue {
            c.call(.get, "/v1/rooms/{room_id}/members", "r1", query: "limit=2&cursor=\(cursor)", as: .user("b"), status: 200)
        }
        c.call(.get, "/v1/rooms/{room_id}/members", "r1", query: "cursor=bogus", status: 400)
        c.call(.get, "/v1/rooms/{room_id}/members", "r1", as: .user("e"), status: 403)
        c.call(.get, "/v1/rooms/{room_id}/members", "nope", status: 404)
        c.call(.post, "/v1/rooms/{room_id}/members/query", "r1", json: #"{"user_ids":["b","e","ghost"]}"#, status: 200)
        c.call(.post, "/v1/rooms/{room_id}/members/query", "r1", as: .user("e"), json: #"{"user_ids":["b"]}"#, status: 403)
        c.call(.post, "/v1/rooms/{room_id}/members/query", "nope", json: #"{"user_ids":["b"]}"#, status: 404)

        // b's own flagged key, a's key refused without is_force, an over-long key; then a key the app owns (owner null).
        let set = c.call(
            .post, "/v1/rooms/{room_id}/attributes", "r1",
            json: #"{"operator":"b","attributes":{"mode":"quiz","topic":"x","kkkkkkkkkkkkkkkkk":"v"},"is_delete_after_owner_left":true}"#,
            status: 200)
        #expect(
            set.json?["results"]?.arrayValue?.map { $0["error"]?["code"]?.intValue.map(Int.init) } == [
                nil, ErrorCode.roomAttributeOwned.code, ErrorCode.roomAttributeKeyTooLong.code,
            ])
        c.call(.post, "/v1/rooms/{room_id}/attributes", "r1", json: #"{"attributes":{"app":"1"}}"#, status: 200)
        c.call(.post, "/v1/rooms/{room_id}/attributes", "r1", as: .user("e"), json: #"{"attributes":{"x":"y"}}"#, status: 403)
        c.call(.post, "/v1/rooms/{room_id}/attributes", "nope", json: #"{"attributes":{"x":"y"}}"#, status: 404)
        let attributes = c.call(.get, "/v1/rooms/{room_id}/attributes", "r1", as: .user("b"), status: 200)
        #expect(attributes.json?["attributes"]?.arrayValue?.map { $0["owner_id"] } == [.null, "b", "a"])
        c.call(.get, "/v1/rooms/{room_id}/attributes", "r1", as: .user("e"), status: 403)
        c.call(.get, "/v1/rooms/{room_id}/attributes", "nope", status: 404)
        c.call(.post, "/v1/rooms/{room_id}/attributes/delete", "r1", json: #"{"operator":"b","keys":["app","nope"]}"#, status: 200)
        c.call(.post, "/v1/rooms/{room_id}/attributes/delete", "r1", json: #"{"keys":["app"]}"#, status: 200)
        c.call(.post, "/v1/rooms/{room_id}/attributes/delete", "r1", as: .user("e"), json: #"{"keys":["mode"]}"#, status: 403)
        c.call(.post, "/v1/rooms/{room_id}/attributes/delete", "nope", json: #"{"keys":["mode"]}"#, status: 404)
        let applied = c.call(
            .post, "/v1/rooms/{room_id}/attributes/batch", "r1",
            json:
                #"{"operator":"b","operations":[{"op":"set","key":"score","value":"1"},{"op":"delete","key":"mode"}],"is_delete_after_owner_left":true}"#,
            status: 200)
        #expect(applied.json?["applied"] == .bool(true))
        let aborted = c.call(
            .post, "/v1/rooms/{room_id}/attributes/batch", "r1", as: .user("c"),
            json: #"{"operations":[{"op":"set","key":"x","value":"1"},{"op":"delete","key":"topic"}]}"#, status: 200)
        #expect(aborted.json?["applied"] == .bool(false))
        #expect(
            aborted.json?["results"]?.arrayValue?.map { $0["error"]?["code"]?.intValue.map(Int.init) } == [
                ErrorCode.roomBatchAborted.code, ErrorCode.roomAttributeOwned.code,
            ])
        c.call(.post, "/v1/rooms/{room_id}/attributes/batch", "r1", json: #"{"operator":"e","operations":[{"op":"delete","key":"x"}]}"#, status: 403)
        c.call(.post, "/v1/rooms/{room_id}/attributes/batch", "nope", json: #"{"operations":[{"op":"delete","key":"x"}]}"#, status: 404)

        c.call(
            .post, "/v1/rooms/{room_id}/member_attributes", "r1", as: .user("b"),
            json: #"{"user_ids":["b","c","e"],"attributes":{"mic":"on","seat":"3"}}"#, status: 200)
        c.call(
            .post, "/v1/rooms/{room_id}/member_attributes", "r1",
            json: #"{"user_ids":["c","a"],"attributes":{"hand":"up","toolongkey":"x"},"is_delete_after_owner_left":false}"#, status: 200)
        c.call(.post, "/v1/rooms/{room_id}/member_attributes", "r1", json: #"{"operator":"e","user_ids":["b"],"attributes":{"k":"v"}}"#, status: 403)
        c.call(.post, "/v1/rooms/{room_id}/member_attributes", "nope", json: #"{"user_ids":["b"],"attributes":{"k":"v"}}"#, status: 404)
        c.call(.post, "/v1/rooms/{room_id}/member_attributes/query", "r1", json: #"{"user_ids":["b","a","e"]}"#, status: 200)
        c.call(.post, "/v1/rooms/{room_id}/member_attributes/query", "r1", as: .user("e"), json: #"{"user_ids":["b"]}"#, status: 403)
        c.call(.post, "/v1/rooms/{room_id}/member_attributes/query", "nope", json: #"{"user_ids":["b"]}"#, status: 404)
        let holders = c.call(.get, "/v1/rooms/{room_id}/member_attributes", "r1", query: "limit=1", status: 200)
        if let cursor = holders.json?["next_cursor"]?.stringValue {
            c.call(.get, "/v1/rooms/{room_id}/member_attributes", "r1", query: "cursor=\(cursor)", as: .user("c"), status: 200)
        }
        c.call(.get, "/v1/rooms/{room_id}/member_attributes", "r1", query: "cursor=bogus", status: 400)
        c.call(.get, "/v1/rooms/{room_id}/member_attributes", "r1", as: .user("e"), status: 403)
        c.call(.get, "/v1/rooms/{room_id}/member_attributes", "nope", status: 404)

        // b leaves (its flagged `score` goes: room.attributes_updated with operator null); kicks; the empty room is
        // scheduled for destruction, then destroyed.
        c.call(.post, "/v1/rooms/{room_id}/leave", "r1", as: .user("b"), json: "{}", status: 200)
        c.call(.post, "/v1/rooms/{room_id}/leave", "r1", json: #"{"user_id":"b"}"#, status: 403)
        c.call(.post, "/v1/rooms/{room_id}/leave", "nope", json: #"{"user_id":"b"}"#, status: 404)
        c.call(.post, "/v1/rooms/{room_id}/members/kick", "r1", json: #"{"user_ids":["c","b","ghost","a"]}"#, status: 200)
        c.call(.post, "/v1/rooms/{room_id}/members/kick", "r1", as: .user("a"), json: #"{"user_ids":["a"]}"#, status: 403)
        c.call(.post, "/v1/rooms/{room_id}/members/kick", "nope", json: #"{"user_ids":["a"]}"#, status: 404)
        let empty = c.call(.get, "/v1/rooms/{room_id}", "r1", status: 200)
        #expect(empty.json?["destroy_at"]?.intValue != nil)
        c.call(.delete, "/v1/rooms/{room_id}", "r1", status: 204)
        c.call(.delete, "/v1/rooms/{room_id}", "r1", status: 404)
        c.call(.delete, "/v1/rooms/{room_id}", "r3", as: .user("c"), status: 403)
        c.call(.post, "/v1/rooms/{room_id}/leave", "r3", json: #"{"user_id":"c"}"#, status: 200)
        c.call(.get, "/v1/rooms/{room_id}", "r3", status: 404)
    }

    static func messagesAndConversations(_ c: ContractChecker) throws {
        let text = #"{"from":"a","conversation_type":"peer","to":"b","type":1,"body":{"text":"hi"},"client_msg_id":"m1"}"#
        let sent = c.call(.post, "/v1/messages", json: text, status: 201)
        c.call(.post, "/v1/messages", json: text, status: 200)
        c.call(
            .post, "/v1/messages",
            json: #"{"from":"a","conversation_type":"peer","to":"b","type":1,"body":{"text":"other"},"client_msg_id":"m1"}"#, status: 409)
        let messageID = sent.json?["message_id"]?.stringValue ?? ""
        c.call(
            .post, "/v1/messages", as: .user("b"),
            json: #"{"conversation_type":"peer","to":"a","type":1,"body":{"text":"re"},"reply_to":"\#(messageID)","push":{"title":"t"}}"#,
            status: 201)
        c.call(
            .post, "/v1/messages",
            json:
                #"{"from":"a","conversation_type":"peer","to":"b","type":11,"body":{"url":"https://x.test/i.png","file_name":"i.png","width":4,"height":3}}"#,
            status: 201)
        c.call(.post, "/v1/messages", json: #"{"from":"a","conversation_type":"peer","to":"b","type":2,"body":{"data":"aGk="}}"#, status: 201)
        c.call(.post, "/v1/messages", json: #"{"from":"a","conversation_type":"peer","to":"b","type":99,"body":{}}"#, status: 400)
        c.call(.post, "/v1/messages", json: #"{"from":"a","conversation_type":"peer","to":"ghost","type":1,"body":{"text":"x"}}"#, status: 404)
        let group = c.call(
            .post, "/v1/messages",
            json: #"{"from":"a","conversation_type":"group","to":"g1","type":1,"body":{"text":"@c"},"mentions":{"user_ids":["c"],"all":false}}"#,
            status: 201)
        let groupMessageID = group.json?["message_id"]?.stringValue ?? ""
        c.call(.get, "/v1/messages/{message_id}", messageID, status: 200)
        // The members of a Message only some readers see: `suppressed` for the app key, `push` for the app key and the
        // sender.
        let asApp = c.call(.get, "/v1/messages/{message_id}", groupMessageID, status: 200)
        #expect(asApp.json?.objectValue?.contains("suppressed") == true && asApp.json?.objectValue?.contains("push") == true)
        let asMember = c.call(.get, "/v1/messages/{message_id}", groupMessageID, as: .user("c"), status: 200)
        #expect(asMember.json?.objectValue?.contains("suppressed") == false && asMember.json?.objectValue?.contains("push") == false)
        let asSender = c.call(.get, "/v1/messages/{message_id}", groupMessageID, as: .user("a"), status: 200)
        #expect(asSender.json?.objectValue?.contains("suppressed") == false && asSender.json?.objectValue?.contains("push") == true)
        c.call(.get, "/v1/messages/{message_id}", "nope", status: 404)
        // Reactions (docs/messages.md#reactions-pins-and-replies).
        c.call(.post, "/v1/messages/{message_id}/reactions", messageID, json: #"{"user_id":"a","reaction_type":"like"}"#, status: 201)
        c.call(.post, "/v1/messages/{message_id}/reactions", messageID, as: .user("b"), json: #"{"reaction_type":"like"}"#, status: 201)
        c.call(.post, "/v1/messages/{message_id}/reactions", messageID, json: #"{"user_id":"a","reaction_type":"like"}"#, status: 409)
        c.call(.get, "/v1/messages/{message_id}/reactions/{reaction_type}/users", messageID, "like", status: 200)
        c.call(.delete, "/v1/messages/{message_id}/reactions/{reaction_type}", messageID, "like", query: "user_id=a", status: 204)
        c.call(.delete, "/v1/messages/{message_id}/reactions/{reaction_type}", messageID, "like", query: "user_id=a", status: 404)
        // Receipts (docs/messages.md#receipts).
        let receipted =
            c.call(
                .post, "/v1/messages",
                json: #"{"from":"a","conversation_type":"group","to":"g1","type":1,"body":{"text":"r"},"need_receipt":true}"#,
                status: 201
            ).json?["message_id"]?.stringValue ?? ""
        c.call(.post, "/v1/users/{user_id}/receipts/read", "c", json: #"{"message_ids":["\#(receipted)","nope"]}"#, status: 200)
        c.call(.post, "/v1/users/{user_id}/receipts/read", "ghost", json: #"{"message_ids":["x"]}"#, status: 404)
        c.call(.get, "/v1/messages/{message_id}/receipt", receipted, as: .user("a"), status: 200)
        c.call(.get, "/v1/messages/{message_id}/receipt", receipted, as: .user("c"), status: 403)
        c.call(.get, "/v1/messages/{message_id}/receipt", messageID, status: 422)
        c.call(.get, "/v1/messages/{message_id}/receipt", "nope", status: 404)
        c.call(.get, "/v1/messages/{message_id}/receipt/members", receipted, query: "state=read&limit=1", status: 200)
        c.call(.get, "/v1/messages/{message_id}/receipt/members", receipted, query: "state=unread", status: 200)
        c.call(.get, "/v1/messages/{message_id}/receipt/members", messageID, status: 422)
        // Delivery receipts (docs/messages.md#delivery-receipts) and signals (docs/conversations.md#typing-and-other-signals).
        c.call(.post, "/v1/messages/delivered", json: #"{"user_id":"c","message_ids":["\#(receipted)","nope"]}"#, status: 200)
        c.call(.post, "/v1/messages/delivered", as: .user("c"), json: #"{"message_ids":["\#(receipted)"]}"#, status: 200)
        c.call(.post, "/v1/messages/delivered", json: #"{"user_id":"ghost","message_ids":["x"]}"#, status: 404)
        c.call(.get, "/v1/messages/{message_id}/receipt/members", receipted, query: "state=delivered", status: 200)
        c.call(.post, "/v1/conversations/{type}/{id}/signals", "group", "g1", json: #"{"from":"a","signal":"typing_start"}"#, status: 202)
        c.call(.post, "/v1/conversations/{type}/{id}/signals", "group", "nosuch", json: #"{"from":"a","signal":"typing_stop"}"#, status: 404)
        c.call(.post, "/v1/conversations/{type}/{id}/signals", "peer", "b", json: #"{"from":"a","signal":"typing_stop","data":"x"}"#, status: 400)
        let combined = c.call(
            .post, "/v1/messages",
            json: #"{"from":"a","conversation_type":"peer","to":"b","type":100,"body":{"title":"t","message_ids":["\#(messageID)"]}}"#,
            status: 201)
        c.call(.get, "/v1/messages/{message_id}/combined", combined.json?["message_id"]?.stringValue ?? "", status: 200)
        c.call(.get, "/v1/messages/{message_id}/combined", messageID, status: 422)
        // Pins and the reply tree (docs/messages.md#reactions-pins-and-replies).
        c.call(.post, "/v1/messages/{message_id}/pin", messageID, as: .user("b"), json: "{}", status: 200)
        c.call(.post, "/v1/messages/{message_id}/pin", groupMessageID, json: "{}", status: 200)
        c.call(.post, "/v1/messages/{message_id}/pin", "nope", json: "{}", status: 404)
        c.call(.get, "/v1/users/{user_id}/conversations/{type}/{id}/pins", "a", "peer", "b", status: 200)
        c.call(.get, "/v1/users/{user_id}/conversations/{type}/{id}/pins", "c", "group", "g1", as: .user("c"), status: 200)
        c.call(.get, "/v1/users/{user_id}/conversations/{type}/{id}/pins", "a", "group", "g2", status: 409)
        c.call(.post, "/v1/messages/{message_id}/unpin", messageID, json: #"{"operator":"a"}"#, status: 200)
        c.call(.post, "/v1/messages/{message_id}/unpin", groupMessageID, json: #"{"operator":"c"}"#, status: 403)
        c.call(.get, "/v1/messages/{message_id}/replies", messageID, query: "limit=1", status: 200)
        c.call(.get, "/v1/messages/{message_id}/replies", "nope", status: 404)
        c.call(.post, "/v1/messages/batch", json: #"{"from":"a","to_user_ids":["b","c","ghost"],"type":1,"body":{"text":"all"}}"#, status: 200)
        // Search (docs/messages.md#search).
        c.call(.get, "/v1/messages/search", query: "q=all&limit=1", status: 200)
        c.call(.get, "/v1/messages/search", query: "conversation_type=group&conversation_id=g1", as: .user("c"), status: 200)
        c.call(.get, "/v1/messages/search", query: "start_at=2&end_at=1", status: 400)
        c.call(.get, "/v1/messages/search", query: "user_id=a&conversation_type=group&conversation_id=g2", status: 409)
        c.call(.get, "/v1/messages/search", query: "user_id=ghost", status: 404)
        c.call(.get, "/v1/messages/search", query: "user_id=a", as: .user("b"), status: 403)
        c.call(.post, "/v1/messages/broadcast", json: #"{"from":"a","type":1,"body":{"text":"news"}}"#, status: 202)

        c.call(.get, "/v1/users/{user_id}/conversations/{type}/{id}/messages", "a", "peer", "b", query: "limit=2", status: 200)
        c.call(.get, "/v1/users/{user_id}/conversations/{type}/{id}/messages", "c", "group", "g1", status: 200)
        c.call(.get, "/v1/users/{user_id}/conversations/{type}/{id}/messages", "a", "peer", "b", query: "cursor=bogus", status: 400)
        c.call(.get, "/v1/groups/{group_id}/messages", "g1", query: "direction=forward", status: 200)
        c.call(.get, "/v1/groups/{group_id}/messages", "g2", status: 409)

        // Rooms (white-box rows, Migrations/0015): a stored and cached room message, a non-member's send, the history
        // and the recent cache.
        try c.server.sql("INSERT INTO rooms (app_id, room_id, created_at, member_count) VALUES ($1, 'r1', 0, 1)", [c.app.appID])
        try c.server.sql("INSERT INTO room_members (app_id, room_id, user_id, entered_at) VALUES ($1, 'r1', 'a', 0)", [c.app.appID])
        c.call(
            .post, "/v1/messages",
            json: #"{"from":"a","conversation_type":"room","to":"r1","type":1,"body":{"text":"r"},"storage":true,"cache":true}"#,
            status: 201)
        c.call(.post, "/v1/messages", json: #"{"from":"b","conversation_type":"room","to":"r1","type":20,"body":{"text":"r"}}"#, status: 403)
        c.call(.get, "/v1/rooms/{room_id}/messages", "r1", status: 200)
        c.call(.get, "/v1/rooms/{room_id}/messages", "r1", as: .user("b"), status: 403)
        c.call(.get, "/v1/rooms/{room_id}/messages/recent", "r1", as: .user("a"), status: 200)
        c.call(.get, "/v1/rooms/{room_id}/messages/recent", "ghost", status: 404)

        c.call(.get, "/v1/users/{user_id}/conversations", "b", status: 200)
        c.call(.get, "/v1/users/{user_id}/conversations/{type}/{id}", "b", "peer", "a", status: 200)
        c.call(.get, "/v1/users/{user_id}/conversations/{type}/{id}", "c", "group", "g1", status: 200)
        c.call(.get, "/v1/users/{user_id}/conversations/{type}/{id}", "b", "peer", "e", status: 404)
        c.call(
            .patch, "/v1/users/{user_id}/conversations/{type}/{id}", "b", "peer", "a",
            json: #"{"pinned":true,"draft":"later","notification_status":"do_not_disturb"}"#, status: 200)
        c.call(.post, "/v1/users/{user_id}/conversations/{type}/{id}/read", "b", "peer", "a", json: #"{"seq":1}"#, status: 200)
        c.call(.post, "/v1/users/{user_id}/conversations/read_all", "b", json: "{}", status: 200)
        c.call(
            .post, "/v1/users/{user_id}/conversations/marks", "b",
            json: #"{"mark":3,"enable":true,"conversations":[{"type":"peer","id":"a"},{"type":"peer","id":"ghost"}]}"#, status: 200)
        c.call(.get, "/v1/users/{user_id}/unread_count", "c", status: 200)
        c.call(.delete, "/v1/users/{user_id}/conversations/{type}/{id}", "b", "peer", "a", status: 204)
        // Import and export (docs/messages.md#import-and-export): an NDJSON body in, an NDJSON stream out.
        c.call(
            .post, "/v1/messages/import",
            json: #"{"conversation_type":"room","from":"a","to":"r1","type":1,"body":{"text":"old"},"timestamp":1,"message_id":"x1"}"#
                + "\n\n{\n",
            contentType: "application/x-ndjson", status: 200)
        c.call(.get, "/v1/messages/export", query: "conversation_type=room&conversation_id=r1", status: 200)
        c.call(.get, "/v1/messages/export", query: "conversation_type=group&conversation_id=ghost", status: 404)
    }

    static func events(_ c: ContractChecker) throws {
        // Every event written so far, page by page.
        // Each event is checked against its type's webhook in the document, which every type must have: webhook bodies
        // are the app view the log shows (docs/events.md#two-views-of-the-same-event).
        var after = "earliest"
        var pages = 0
        var types: Set<String> = []
        while pages < 20 {
            let page = c.call(.get, "/v1/events/log", query: "after=\(after)&limit=100", status: 200)
            pages += 1
            for event in page.json?["items"]?.arrayValue ?? [] {
                if c.checkEventPayload(event) { types.insert(event["type"]?.stringValue ?? "") }
            }
            guard let next = page.json?["next_cursor"]?.stringValue else { break }
            after = next
        }
        #expect(pages > 1)
        let expected: Set<String> = [
            "app.settings_updated", "user.created", "user.updated", "user.deleted", "user.kicked", "user.status_updated",
            "friend.added", "friend.deleted", "friend.updated", "friend.application_created", "friend.application_updated",
            "device.registered", "device.removed", "blacklist.added", "blacklist.removed", "user.push_rule_updated",
            "room.created", "room.member_joined", "room.member_left", "room.attributes_updated", "room.attributes_batch_updated",
            "room.member_attributes_updated", "room.destroyed", "job.finished",
        ]
        #expect(expected.subtracting(types).sorted() == [], "event types not checked against a payload schema")
        c.call(.get, "/v1/events/log", query: "after=earliest&types=message.*&group_id=g1", status: 200)
        c.call(.get, "/v1/events/log", status: 200)
        c.call(.get, "/v1/events/log", query: "after=x", status: 400)
        // A user's log (docs/events.md#polling-the-log) in its user view, with the app key and the user's own token;
        // its items are checked against the same payload schemas.
        for credential in [ContractChecker.Credential.app, .user("a")] {
            let page = c.call(.get, "/v1/users/{user_id}/events/log", "a", query: "after=earliest&limit=100", as: credential, status: 200)
            #expect(page.json?["items"]?.arrayValue?.isEmpty == false)
            for event in page.json?["items"]?.arrayValue ?? [] { _ = c.checkEventPayload(event) }
        }
        c.call(.get, "/v1/users/{user_id}/events/log", "a", status: 200)
        c.call(.get, "/v1/users/{user_id}/events/log", "b", as: .user("a"), status: 403)
        c.call(.get, "/v1/users/{user_id}/events/log", "ghost", status: 404)
        c.call(.get, "/v1/users/{user_id}/events/log", "a", query: "after=x", status: 400)
    }

    /// Webhook endpoints and their delivery log (docs/webhooks.md#endpoints), against a destination nobody listens on
    /// (port 1): pings answer `ok: false`, deliveries fail and stay retryable. Runs after `events` so its own events do
    /// not matter there.
    static func webhooks(_ c: ContractChecker) throws {
        let url = "http://127.0.0.1:1/hook"
        let created = c.call(
            .post, "/v1/webhooks", json: "{\"url\":\"\(url)\",\"event_types\":[\"user.*\",\"message.before_send\"]}", status: 201)
        let id = created.json?["webhook_id"]?.stringValue ?? ""
        c.call(.post, "/v1/webhooks", json: "{\"url\":\"\(url)\",\"event_types\":[\"message.before_send\"]}", status: 409)
        c.call(.post, "/v1/webhooks", json: "{\"url\":\"\(url)\",\"event_types\":[\"webhook.ping\"]}", status: 400)
        let spare = c.call(
            .post, "/v1/webhooks", json: "{\"url\":\"\(url)\",\"event_types\":[\"message.before_send\"],\"enabled\":false}", status: 201)
        let spareID = spare.json?["webhook_id"]?.stringValue ?? ""
        c.call(.patch, "/v1/webhooks/{webhook_id}", spareID, json: #"{"enabled":true}"#, status: 409)
        c.call(.patch, "/v1/webhooks/{webhook_id}", spareID, json: #"{"description":"spare"}"#, status: 200)
        c.call(.get, "/v1/webhooks", query: "limit=1", status: 200)
        c.call(.get, "/v1/webhooks/{webhook_id}", id, status: 200)
        c.call(.get, "/v1/webhooks/{webhook_id}", "wh_nope", status: 404)
        c.call(.post, "/v1/webhooks/{webhook_id}/rotate_secret", id, status: 200)
        c.call(.post, "/v1/webhooks/{webhook_id}/recover", id, json: #"{"since":"0"}"#, status: 202)
        c.call(.post, "/v1/webhooks/{webhook_id}/recover", id, json: #"{"since":"soon"}"#, status: 400)
        c.call(.post, "/v1/webhooks/{webhook_id}/recover", "wh_nope", json: #"{"since":"0"}"#, status: 404)
        let ping = c.call(.post, "/v1/webhooks/{webhook_id}/ping", id, status: 200)
        #expect(ping.json?["ok"] == .bool(false))
        _ = try c.app.createUser("contract-webhook-user")
        #expect(c.server.app.services.webhooks.dispatcher.drain())
        c.call(.get, "/v1/webhooks/{webhook_id}/deliveries", id, query: "status=failed&kind=after&event_type=user.created", status: 200)
        let all = c.call(.get, "/v1/webhooks/{webhook_id}/deliveries", id, status: 200)
        let items = all.json?["items"]?.arrayValue ?? []
        let after = items.first { $0["kind"] == .string("after") }?["delivery_id"]?.stringValue ?? ""
        let pinged = items.first { $0["kind"] == .string("ping") }?["delivery_id"]?.stringValue ?? ""
        c.call(.get, "/v1/webhooks/{webhook_id}/deliveries/{delivery_id}", id, after, status: 200)
        c.call(.get, "/v1/webhooks/{webhook_id}/deliveries/{delivery_id}", id, "dlv_nope", status: 404)
        c.call(.post, "/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/retry", id, after, status: 202)
        c.call(.post, "/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/retry", id, pinged, status: 409)
        c.call(.delete, "/v1/webhooks/{webhook_id}", spareID, status: 204)
        c.call(.delete, "/v1/webhooks/{webhook_id}", id, status: 204)
        c.call(.delete, "/v1/webhooks/{webhook_id}", id, status: 404)
    }

    /// The push bridge (docs/push.md#the-attempt-log) against a gateway nobody listens on (port 1): dry runs in both
    /// formats, with and without `event_id_only` and a badge, a real test push that fails, the errors, and the attempt
    /// log.
    static func push(_ c: ContractChecker) throws {
        let device = #"{"device_id":"push-phone","platform":"android","provider":"fcm","push_key":"push-k1","app_id":"com.x"}"#
        c.call(.post, "/v1/users/{user_id}/devices", "a", json: device, status: 201)
        let unsent = #"{"from":"b","conversation_type":"peer","to":"a","type":1,"body":{"text":"hi"}}"#
        let notConfigured = c.call(.post, "/v1/push/test", json: #"{"user_id":"a","message":\#(unsent)}"#, status: 200)
        #expect(notConfigured.json?["decisions"]?[0]?["reason"] == "not_configured")
        c.call(.post, "/v1/push/test", json: #"{"user_id":"a","dry_run":false,"message":\#(unsent)}"#, status: 422)
        c.call(.post, "/v1/push/test", json: #"{"user_id":"e","dry_run":true,"message":\#(unsent)}"#, status: 422)
        c.call(
            .patch, "/v1/settings", json: #"{"push":{"enabled":true,"gateway_url":"http://127.0.0.1:1","format":"matrix","event_id_only":false}}"#,
            status: 200)
        let matrix = c.call(.post, "/v1/push/test", json: #"{"user_id":"a","message":\#(unsent)}"#, status: 200)
        #expect(matrix.json?["request"]?["body"]?["notification"]?["event_id"] == "")
        let badge =
            #"{"from":"b","conversation_type":"peer","to":"a","type":1,"body":{"text":"yo"},"push":{"enable_badge":true,"payload":"p","sound":"s.caf"}}"#
        let sent = c.call(.post, "/v1/messages", json: badge, status: 201)
        let id = sent.json?["message_id"]?.stringValue ?? ""
        c.call(.post, "/v1/push/test", json: "{\"user_id\":\"a\",\"message_id\":\"\(id)\"}", status: 200)
        c.call(.post, "/v1/push/test", json: "{\"user_id\":\"b\",\"message_id\":\"\(id)\"}", status: 422)
        c.call(.post, "/v1/push/test", json: #"{"user_id":"a","message_id":"nope"}"#, status: 404)
        c.call(.post, "/v1/push/test", json: #"{"user_id":"a","call_id":"c1"}"#, status: 404)
        c.call(.post, "/v1/push/test", json: #"{"user_id":"ghost","call_id":"c1"}"#, status: 404)
        c.call(.post, "/v1/push/test", json: #"{"user_id":"a"}"#, status: 400)
        c.call(
            .post, "/v1/push/test",
            json: #"{"user_id":"a","message":{"from":"b","conversation_type":"room","to":"r1","type":1,"body":{"text":"x"}}}"#, status: 422)
        c.call(.patch, "/v1/settings", json: #"{"push":{"event_id_only":true}}"#, status: 200)
        c.call(.post, "/v1/push/test", json: "{\"user_id\":\"a\",\"message_id\":\"\(id)\"}", status: 200)
        c.call(.patch, "/v1/settings", json: #"{"push":{"format":"generic"}}"#, status: 200)
        c.call(.post, "/v1/push/test", json: "{\"user_id\":\"a\",\"message_id\":\"\(id)\"}", status: 200)
        c.call(.patch, "/v1/settings", json: #"{"push":{"event_id_only":false}}"#, status: 200)
        let tested = c.call(.post, "/v1/push/test", json: "{\"user_id\":\"a\",\"message_id\":\"\(id)\",\"dry_run\":false}", status: 200)
        let attempt = tested.json?["attempt"]?["attempt_id"]?.stringValue ?? ""
        #expect(tested.json?["attempt"]?["status"] == "failed")
        #expect(c.server.app.push.drain())
        c.call(.get, "/v1/push/attempts", query: "user_id=a&kind=test&status=failed&limit=1", status: 200)
        c.call(.get, "/v1/push/attempts", query: "message_id=\(id)", status: 200)
        let all = c.call(.get, "/v1/push/attempts", query: "limit=1", status: 200)
        if let cursor = all.json?["next_cursor"]?.stringValue {
            c.call(.get, "/v1/push/attempts", query: "limit=1&cursor=\(cursor)", status: 200)
        }
        c.call(.get, "/v1/push/attempts", query: "kind=nope", status: 400)
        c.call(.get, "/v1/push/attempts/{attempt_id}", attempt, status: 200)
        c.call(.get, "/v1/push/attempts/{attempt_id}", "pa_nope", status: 404)
        c.call(.patch, "/v1/settings", json: #"{"push":{"enabled":false,"format":"matrix"}}"#, status: 200)
    }

    /// Files (docs/files.md): an upload as raw bytes, its metadata, the list, a download whole and in a range, and the
    /// refusals of each route.
    static func files(_ c: ContractChecker) throws {
        let octets = "application/octet-stream"
        let named = ["Parley-File-Name": "notes.bin"]
        let uploaded = c.call(.post, "/v1/files", query: "user_id=a", json: "hello file", contentType: octets, headers: named, status: 201)
        let id = uploaded.json?["file_id"]?.stringValue ?? ""
        let png = try ImageDerivationTests.encode(try ImageDerivationTests.image(width: 40, height: 30, bands: 3) { x, _, _ in UInt8(x) }, png: true)
        // PNG bytes are no text for `call`: the upload goes over its own connection; its File is checked through meta.
        let image = try HTTPClientConnection(host: "127.0.0.1", port: c.server.port, timeout: .seconds(30)).send(
            method: .post, path: "/v1/files?user_id=a", headers: ["Authorization": "Bearer \(c.app.key)", "Parley-File-Name": "dot.png"], body: png)
        #expect(image.status == 201, "\(String(decoding: image.body, as: UTF8.self))")
        let imageID = (try? JSONValue.parse(image.body))?["file_id"]?.stringValue ?? ""
        c.call(.get, "/v1/files/{file_id}/meta", imageID, status: 200)
        c.call(.get, "/v1/files/{file_id}", imageID, query: "variant=thumbnail", status: 200)
        c.call(.post, "/v1/files", json: "no image", contentType: octets, headers: ["Parley-File-Name": "p.jpg"], status: 422)
        c.call(.post, "/v1/files", query: "user_id=ghost", json: "x", contentType: octets, headers: named, status: 404)
        c.call(.post, "/v1/files", json: "x", contentType: octets, status: 400)
        c.call(.get, "/v1/files", query: "user_id=a&kind=file", status: 200)
        c.call(.get, "/v1/files", query: "kind=nope", status: 400)
        c.call(.get, "/v1/files/{file_id}/meta", id, status: 200)
        c.call(.get, "/v1/files/{file_id}/meta", id, as: .user("b"), status: 403)
        c.call(.get, "/v1/files/{file_id}", id, status: 200)
        c.call(.get, "/v1/files/{file_id}", id, headers: ["Range": "bytes=0-3"], status: 206)
        c.call(.get, "/v1/files/{file_id}", id, headers: ["Range": "bytes=100-"], status: 416)
        c.call(.get, "/v1/files/{file_id}", "f_nope", status: 404)
        c.call(.delete, "/v1/files/{file_id}", id, as: .user("b"), status: 403)
        c.call(.delete, "/v1/files/{file_id}", id, status: 204)
        c.call(.delete, "/v1/files/{file_id}", id, status: 404)

        // Resumable uploads (tus, docs/files.md#resumable-uploads-tus): discovery without a credential, creation, HEAD,
        // PATCH to completion, termination, and the protocol's refusals.
        let bytes = "application/offset+octet-stream"
        let tus = ["Tus-Resumable": "1.0.0"]
        func with(_ base: [String: String], _ more: [String: String]) -> [String: String] { base.merging(more, uniquingKeysWith: { $1 }) }
        let creation = with(tus, ["Upload-Length": "10", "Upload-Metadata": "filename " + Crypto.base64Encode(Array("tus.bin".utf8))])
        c.call(.options, "/v1/uploads", as: .anonymous, status: 204)
        let created = c.call(.post, "/v1/uploads", headers: creation, status: 201)
        let uploadID = String(created.headers["Location"]?.split(separator: "/").last ?? "")
        c.call(.head, "/v1/uploads/{upload_id}", uploadID, headers: tus, status: 200)
        func at(_ offset: Int) -> [String: String] { with(tus, ["Upload-Offset": String(offset)]) }
        c.call(.patch, "/v1/uploads/{upload_id}", uploadID, json: "hello", contentType: bytes, headers: at(0), status: 204)
        c.call(.patch, "/v1/uploads/{upload_id}", uploadID, json: "hello", contentType: bytes, headers: at(0), status: 409)
        c.call(.patch, "/v1/uploads/{upload_id}", uploadID, json: "world", contentType: "text/plain", headers: at(5), status: 415)
        c.call(.patch, "/v1/uploads/{upload_id}", uploadID, json: "world", contentType: bytes, headers: ["Upload-Offset": "5"], status: 412)
        c.call(.patch, "/v1/uploads/{upload_id}", uploadID, as: .user("b"), json: "world", contentType: bytes, headers: at(5), status: 403)
        c.call(.patch, "/v1/uploads/{upload_id}", "up_nope", json: "world", contentType: bytes, headers: at(5), status: 404)
        c.call(.patch, "/v1/uploads/{upload_id}", uploadID, json: "world", contentType: bytes, headers: at(5), status: 204)
        c.call(.post, "/v1/uploads", json: "0123456789", contentType: bytes, headers: creation, status: 201)
        c.call(.post, "/v1/uploads", headers: with(tus, ["Upload-Length": "10"]), status: 400)
        c.call(.post, "/v1/uploads", headers: with(creation, ["Upload-Length": "99999999999"]), status: 413)
        let terminated = String(c.call(.post, "/v1/uploads", headers: creation, status: 201).headers["Location"]?.split(separator: "/").last ?? "")
        c.call(.delete, "/v1/uploads/{upload_id}", terminated, headers: tus, status: 204)
        c.call(.delete, "/v1/uploads/{upload_id}", terminated, headers: tus, status: 404)
    }

    /// Calls (docs/calls.md): every route with its success answer and its codes, a general call resolved and an
    /// advanced call through invite-more, join, quit and end (its events are checked against their payload schemas).
    static func calls(_ c: ContractChecker) throws {
        c.call(.post, "/v1/users", json: #"{"user_id":"cx"}"#, status: 201)
        let general = c.call(.post, "/v1/calls", json: #"{"caller":"a","invitees":["b","ghost"],"extended_data":"x"}"#, status: 200)
        let callID = general.json?["call"]?["call_id"]?.stringValue ?? ""
        c.call(.post, "/v1/calls", json: #"{"caller":"a","invitees":["ghost"]}"#, status: 422)
        c.call(.post, "/v1/calls", json: #"{"caller":"ghost","invitees":["b"]}"#, status: 404)
        c.call(.post, "/v1/calls", json: #"{"caller":"a","invitees":[]}"#, status: 400)
        c.call(.post, "/v1/calls", as: .user("b"), json: #"{"caller":"a","invitees":["e"]}"#, status: 403)
        c.call(.get, "/v1/calls/{call_id}", callID, status: 200)
        c.call(.get, "/v1/calls/{call_id}", callID, as: .user("b"), status: 200)
        c.call(.get, "/v1/calls/{call_id}", callID, as: .user("e"), status: 404)
        c.call(.post, "/v1/calls/{call_id}/accept", callID, json: #"{"user_id":"a"}"#, status: 403)
        c.call(.post, "/v1/calls/{call_id}/join", callID, json: #"{"user_id":"e"}"#, status: 422)
        c.call(.post, "/v1/calls/{call_id}/quit", callID, json: #"{"user_id":"a"}"#, status: 422)
        c.call(.post, "/v1/calls/{call_id}/end", callID, json: #"{"operator":"a"}"#, status: 422)
        c.call(.post, "/v1/calls/{call_id}/invite", callID, json: #"{"operator":"a","invitees":["e"]}"#, status: 422)
        c.call(.post, "/v1/calls/{call_id}/accept", callID, as: .user("b"), json: #"{"extended_data":"hi"}"#, status: 200)
        c.call(.post, "/v1/calls/{call_id}/reject", callID, json: #"{"user_id":"b"}"#, status: 409)
        c.call(.post, "/v1/calls/{call_id}/cancel", callID, json: #"{"operator":"a"}"#, status: 409)
        c.call(.post, "/v1/calls/{call_id}/accept", "nope", json: #"{"user_id":"b"}"#, status: 404)

        let advanced = c.call(.post, "/v1/calls", json: #"{"caller":"a","invitees":["b","e"],"mode":"advanced"}"#, status: 200)
        let id = advanced.json?["call"]?["call_id"]?.stringValue ?? ""
        c.call(.post, "/v1/calls/{call_id}/cancel", id, json: #"{"operator":"a","invitees":["e","cx"]}"#, status: 200)
        c.call(.post, "/v1/calls/{call_id}/reject", id, json: #"{"user_id":"b"}"#, status: 200)
        c.call(.post, "/v1/calls/{call_id}/invite", id, json: #"{"operator":"a","invitees":["e","a"]}"#, status: 200)
        c.call(.post, "/v1/calls/{call_id}/invite", id, json: #"{"operator":"e","invitees":["b"]}"#, status: 409)
        c.call(.post, "/v1/calls/{call_id}/join", id, json: #"{"user_id":"cx","extended_data":"late"}"#, status: 200)
        c.call(.post, "/v1/calls/{call_id}/join", id, json: #"{"user_id":"cx"}"#, status: 409)
        c.call(.post, "/v1/calls/{call_id}/quit", id, json: #"{"user_id":"cx","push":{"enable":false}}"#, status: 200)
        c.call(.post, "/v1/calls/{call_id}/quit", id, json: #"{"user_id":"cx"}"#, status: 409)
        c.call(.post, "/v1/calls/{call_id}/end", id, json: #"{"operator":"e"}"#, status: 409)
        c.call(.post, "/v1/calls/{call_id}/end", id, json: #"{"operator":"a","extended_data":"bye"}"#, status: 200)
        c.call(.post, "/v1/calls/{call_id}/end", id, json: #"{"operator":"a"}"#, status: 409)

        let page = c.call(.get, "/v1/users/{user_id}/calls", "a", query: "limit=1", status: 200)
        if let cursor = page.json?["next_cursor"]?.stringValue {
            c.call(.get, "/v1/users/{user_id}/calls", "a", query: "limit=1&cursor=\(cursor)", status: 200)
        }
        c.call(.get, "/v1/users/{user_id}/calls", "b", query: "state=ended", as: .user("b"), status: 200)
        c.call(.get, "/v1/users/{user_id}/calls", "a", query: "state=ringing", status: 400)
        c.call(.get, "/v1/users/{user_id}/calls", "a", as: .user("b"), status: 403)
        c.call(.get, "/v1/users/{user_id}/calls", "ghost", status: 404)
    }

    /// Reports, report actions and the moderation log (docs/moderation.md), with users of their own (one is banned).
    static func moderation(_ c: ContractChecker) throws {
        for id in ["rpa", "rpb", "rpc"] { c.call(.post, "/v1/users", json: #"{"user_id":"\#(id)"}"#, status: 201) }
        let sent = c.call(
            .post, "/v1/messages", json: #"{"from":"rpa","conversation_type":"peer","to":"rpb","type":1,"body":{"text":"spam"}}"#, status: 201)
        let messageID = sent.json?["message_id"]?.stringValue ?? ""
        let target = #"{"type":"message","message_id":"\#(messageID)"}"#
        let created = c.call(.post, "/v1/reports", as: .user("rpb"), json: #"{"target":\#(target),"reason":"spam","comment":"ads"}"#, status: 201)
        let reportID = created.json?["report_id"]?.stringValue ?? ""
        c.call(.post, "/v1/reports", as: .user("rpb"), json: #"{"target":\#(target),"reason":"spam"}"#, status: 409)
        c.call(.post, "/v1/reports", json: #"{"reporter_id":"rpc","target":\#(target),"reason":"spam"}"#, status: 404)
        c.call(.post, "/v1/reports", json: #"{"reporter_id":"rpc","target":{"type":"user","user_id":"rpa"},"reason":"nope"}"#, status: 400)
        c.call(
            .post, "/v1/reports", as: .user("rpb"), json: #"{"reporter_id":"rpc","target":{"type":"user","user_id":"rpa"},"reason":"spam"}"#,
            status: 403)
        let onUser = c.call(
            .post, "/v1/reports", json: #"{"reporter_id":"rpc","target":{"type":"user","user_id":"rpa"},"reason":"abuse"}"#, status: 201)
        let userReportID = onUser.json?["report_id"]?.stringValue ?? ""
        let page = c.call(.get, "/v1/reports", query: "limit=1", status: 200)
        if let cursor = page.json?["next_cursor"]?.stringValue { c.call(.get, "/v1/reports", query: "limit=1&cursor=\(cursor)", status: 200) }
        c.call(.get, "/v1/reports", query: "status=open&target_type=message&reason=spam&user_id=rpa", status: 200)
        c.call(.get, "/v1/reports", query: "status=closed", status: 400)
        c.call(.get, "/v1/reports", as: .user("rpb"), status: 403)
        c.call(.get, "/v1/reports/{report_id}", reportID, status: 200)
        c.call(.get, "/v1/reports/{report_id}", "rp_none", status: 404)
        c.call(.post, "/v1/reports/{report_id}/actions", reportID, json: #"{"action":"remove_from_group"}"#, status: 422)
        c.call(.post, "/v1/reports/{report_id}/actions", reportID, json: #"{"action":"explode"}"#, status: 400)
        c.call(.post, "/v1/reports/{report_id}/actions", "rp_none", json: #"{"action":"dismiss"}"#, status: 404)
        c.call(.post, "/v1/reports/{report_id}/actions", userReportID, json: #"{"action":"remove_from_group","group_id":"nogroup"}"#, status: 404)
        c.call(
            .post, "/v1/reports/{report_id}/actions", reportID, json: #"{"action":"warn_user","text":"be nice","note":"first","moderator":"m"}"#,
            status: 200)
        c.call(.post, "/v1/reports/{report_id}/actions", reportID, json: #"{"action":"dismiss"}"#, status: 409)
        c.call(.post, "/v1/reports/{report_id}/actions", userReportID, json: #"{"action":"ban_user","duration_s":60}"#, status: 200)
        c.call(.post, "/v1/users/{user_id}/mute", "rpc", json: #"{"duration_s":60}"#, status: 200)
        let log = c.call(.get, "/v1/moderation/log", query: "limit=1", status: 200)
        if let cursor = log.json?["next_cursor"]?.stringValue { c.call(.get, "/v1/moderation/log", query: "limit=1&cursor=\(cursor)", status: 200) }
        c.call(.get, "/v1/moderation/log", query: "user_id=rpa&action=ban_user&moderator=m&from=0&to=9999999999999", status: 200)
        c.call(.get, "/v1/moderation/log", query: "cursor=junk", status: 400)
        c.call(.get, "/v1/moderation/log", as: .user("rpb"), status: 403)
    }

    /// Jobs and bulk removal (docs/jobs.md): a dry run and a hide to their end, the lists, the problems; last, with the
    /// node's runner stopped, a job that stays queued and is cancelled.
    static func jobs(_ c: ContractChecker, server: TestServer) throws {
        let removal = #"{"user_id":"a","from":0,"to":9000000000000,"mode":"hide"}"#
        let dryRun = c.call(.post, "/v1/moderation/remove_messages", json: removal, status: 202)
        let dryRunID = dryRun.json?["job_id"]?.stringValue ?? ""
        #expect(
            eventually(timeout: .seconds(30)) {
                c.call(.get, "/v1/jobs/{job_id}", dryRunID, status: 200).json?["state"] == .string("succeeded")
            })
        // A user's data export (docs/privacy.md#user-data-export), and an export as a job.
        let export = c.call(.post, "/v1/users/{user_id}/export", "a", status: 202)
        #expect(
            eventually(timeout: .seconds(60)) {
                c.call(.get, "/v1/jobs/{job_id}", export.json?["job_id"]?.stringValue ?? "", status: 200).json?["state"] == .string("succeeded")
            })
        c.call(.post, "/v1/users/{user_id}/export", "ghost", status: 404)
        c.call(.post, "/v1/users/{user_id}/export", "a", as: .user("a"), status: 403)
        c.call(.get, "/v1/messages/export", query: "async=true&conversation_type=peer&user_id=a&peer_id=b", status: 202)
        c.call(.post, "/v1/moderation/remove_messages", json: #"{"user_id":"a","from":5,"to":5,"mode":"hide"}"#, status: 400)
        c.call(.post, "/v1/moderation/remove_messages", json: #"{"user_id":"ghost","from":0,"to":5,"mode":"hide"}"#, status: 404)
        c.call(.post, "/v1/moderation/remove_messages", as: .user("a"), json: removal, status: 403)
        let page = c.call(.get, "/v1/jobs", query: "limit=1", status: 200)
        #expect(page.json?["items"]?.arrayValue?.count == 1)
        c.call(.get, "/v1/jobs", query: "kind=remove_messages&state=succeeded", status: 200)
        c.call(.get, "/v1/jobs", query: "state=done", status: 400)
        c.call(.get, "/v1/jobs", as: .user("a"), status: 403)
        c.call(.get, "/v1/jobs/{job_id}", "job_nope", status: 404)
        c.call(.delete, "/v1/jobs/{job_id}", dryRunID, status: 409)
        c.call(.delete, "/v1/jobs/{job_id}", "job_nope", status: 404)
        // Retention (docs/retention.md): a policy set, replaced and deleted, a hold, a dry and a real run with no policy
        // left (it purges nothing), and an erasure's dry run as a job (docs/privacy.md#erasure).
        let policy = c.call(.post, "/v1/retention/policies", json: #"{"scope":{"type":"group"},"max_age_days":30}"#, status: 201)
        c.call(.post, "/v1/retention/policies", json: #"{"scope":{"type":"group"},"max_age_days":31}"#, status: 200)
        c.call(.post, "/v1/retention/policies", json: #"{"scope":{"type":"moon"},"max_age_days":31}"#, status: 400)
        c.call(.get, "/v1/retention/policies", status: 200)
        c.call(.get, "/v1/retention/policies", as: .user("a"), status: 403)
        c.call(.delete, "/v1/retention/policies/{policy_id}", policy.json?["policy_id"]?.stringValue ?? "", status: 204)
        c.call(.delete, "/v1/retention/policies/{policy_id}", "rp_nope", status: 404)
        let hold = c.call(.post, "/v1/retention/holds", json: #"{"scope":{"type":"user","user_id":"a"},"reason":"case 42"}"#, status: 201)
        c.call(.post, "/v1/retention/holds", json: #"{"scope":{"type":"user"},"reason":"case 42"}"#, status: 400)
        c.call(.get, "/v1/retention/holds", status: 200)
        c.call(.post, "/v1/retention/runs", json: #"{"dry_run":true}"#, status: 200)
        c.call(.post, "/v1/retention/runs", json: #"{"dry_run":false}"#, status: 202)
        c.call(.post, "/v1/retention/runs", json: #"{"dry_run":"no"}"#, status: 400)
        c.call(.get, "/v1/retention/runs", status: 200)
        c.call(.delete, "/v1/retention/holds/{hold_id}", hold.json?["hold_id"]?.stringValue ?? "", status: 204)
        c.call(.delete, "/v1/retention/holds/{hold_id}", "lh_nope", status: 404)
        c.call(.post, "/v1/users/{user_id}/erase", "a", json: #"{"dry_run":true}"#, status: 202)
        c.call(.post, "/v1/users/{user_id}/erase", "ghost", json: "{}", status: 404)
        c.call(.post, "/v1/users/{user_id}/erase", "a", as: .user("a"), json: "{}", status: 403)
        server.app.jobs.stop()
        let queued = c.call(.post, "/v1/moderation/remove_messages", json: removal, status: 202)
        let cancelled = c.call(.delete, "/v1/jobs/{job_id}", queued.json?["job_id"]?.stringValue ?? "", status: 200)
        #expect(cancelled.json?["state"] == .string("cancelled"))
    }

    /// Scheduled messages (docs/scheduled-messages.md): scheduling a send and a batch (202), the routes and their codes,
    /// and the objects once sent (a message, a batch's results) or failed (a problem).
    static func scheduledMessages(_ c: ContractChecker, server: TestServer) throws {
        let now = try server.request(.get, "/v1/test/clock", bearer: server.adminKey).json?["now"]?.intValue ?? 0
        let send = #"{"from":"a","conversation_type":"peer","to":"b","type":1,"body":{"text":"later"},"send_at":\#(now + 20_000)}"#
        let one = c.call(.post, "/v1/messages", json: send, status: 202).json?["scheduled_id"]?.stringValue ?? ""
        let ghost = #"{"from":"a","conversation_type":"peer","to":"ghost","type":1,"body":{"text":"x"},"send_at":\#(now + 20_000)}"#
        let failing = c.call(.post, "/v1/messages", json: ghost, status: 202).json?["scheduled_id"]?.stringValue ?? ""
        let batch = #"{"from":"a","to_user_ids":["b","ghost"],"type":1,"body":{"text":"all"},"send_at":\#(now + 20_000)}"#
        let batchID = c.call(.post, "/v1/messages/batch", json: batch, status: 202).json?["scheduled_id"]?.stringValue ?? ""
        let cancelled = c.call(.post, "/v1/messages", json: send, status: 202).json?["scheduled_id"]?.stringValue ?? ""
        c.call(
            .post, "/v1/messages", json: #"{"from":"a","conversation_type":"peer","to":"b","type":1,"body":{"text":"x"},"send_at":1}"#, status: 400)
        c.call(.get, "/v1/scheduled_messages/{scheduled_id}", one, status: 200)
        c.call(.get, "/v1/scheduled_messages/{scheduled_id}", one, as: .user("a"), status: 200)
        c.call(.get, "/v1/scheduled_messages/{scheduled_id}", "sch_nope", status: 404)
        c.call(.patch, "/v1/scheduled_messages/{scheduled_id}", one, json: #"{"body":{"text":"later, changed"}}"#, status: 200)
        c.call(.patch, "/v1/scheduled_messages/{scheduled_id}", one, json: #"{"send_at":1}"#, status: 400)
        c.call(.patch, "/v1/scheduled_messages/{scheduled_id}", "sch_nope", json: "{}", status: 404)
        c.call(.delete, "/v1/scheduled_messages/{scheduled_id}", cancelled, status: 204)
        c.call(.delete, "/v1/scheduled_messages/{scheduled_id}", cancelled, status: 409)
        c.call(.patch, "/v1/scheduled_messages/{scheduled_id}", cancelled, json: "{}", status: 409)
        c.call(.delete, "/v1/scheduled_messages/{scheduled_id}", "sch_nope", status: 404)
        c.call(.get, "/v1/scheduled_messages", query: "state=scheduled&limit=1", status: 200)
        c.call(.get, "/v1/scheduled_messages", query: "state=waiting", status: 400)
        c.call(.get, "/v1/scheduled_messages", as: .user("a"), status: 403)
        try server.advanceClock(ms: 21_000)
        #expect(c.call(.get, "/v1/scheduled_messages/{scheduled_id}", one, status: 200).json?["state"] == .string("sent"))
        #expect(c.call(.get, "/v1/scheduled_messages/{scheduled_id}", failing, status: 200).json?["state"] == .string("failed"))
        #expect(c.call(.get, "/v1/scheduled_messages/{scheduled_id}", batchID, status: 200).json?["state"] == .string("sent"))
        c.call(.get, "/v1/scheduled_messages", query: "user_id=a", status: 200)
    }

    /// Revoke, edit, delete and the edit history (docs/messages.md#revoke-edit-delete), with their codes.
    static func messageLifecycle(_ c: ContractChecker) throws {
        func send(_ text: String) -> String {
            let r = c.call(
                .post, "/v1/messages", json: #"{"from":"a","conversation_type":"peer","to":"b","type":1,"body":{"text":"\#(text)"}}"#,
                status: 201)
            return r.json?["message_id"]?.stringValue ?? ""
        }
        let edited = send("v1")
        c.call(.patch, "/v1/messages/{message_id}", edited, as: .user("a"), json: #"{"body":{"text":"v2"}}"#, status: 200)
        c.call(.patch, "/v1/messages/{message_id}", edited, as: .user("b"), json: #"{"body":{"text":"v3"}}"#, status: 403)
        c.call(.patch, "/v1/messages/{message_id}", edited, json: #"{"body":{"text":""}}"#, status: 400)
        c.call(.patch, "/v1/messages/{message_id}", "nope", json: #"{"body":{"text":"x"}}"#, status: 404)
        let versions = c.call(.get, "/v1/messages/{message_id}/edits", edited, query: "limit=1", status: 200)
        if let cursor = versions.json?["next_cursor"]?.stringValue {
            c.call(.get, "/v1/messages/{message_id}/edits", edited, query: "limit=1&cursor=\(cursor)", status: 200)
        }
        c.call(.get, "/v1/messages/{message_id}/edits", "nope", status: 404)
        let revoked = send("bye")
        c.call(.post, "/v1/messages/{message_id}/revoke", revoked, as: .user("b"), json: "{}", status: 403)
        c.call(.post, "/v1/messages/{message_id}/revoke", revoked, as: .user("a"), json: #"{"revoke_extended_data":"x"}"#, status: 200)
        c.call(.post, "/v1/messages/{message_id}/revoke", revoked, json: "{}", status: 409)
        c.call(.post, "/v1/messages/{message_id}/revoke", "nope", json: "{}", status: 404)
        c.call(.patch, "/v1/messages/{message_id}", revoked, json: #"{"body":{"text":"x"}}"#, status: 409)
        let hidden = send("mine")
        c.call(.post, "/v1/messages/delete", json: #"{"scope":"self","user_id":"b","message_ids":["\#(hidden)","nope"]}"#, status: 200)
        c.call(.post, "/v1/messages/delete", json: #"{"scope":"everyone","message_ids":["\#(edited)"]}"#, status: 200)
        c.call(.post, "/v1/messages/delete", json: #"{"scope":"self","user_id":"ghost","message_ids":["x"]}"#, status: 404)
        c.call(.post, "/v1/messages/delete", json: #"{"scope":"some","message_ids":["x"]}"#, status: 400)
    }

    /// Problem responses of the kinds every operation declares: 401, 403, 415.
    static func blocklists(_ c: ContractChecker) throws {
        let create = #"{"name":"words","type":"word","action":"mask","entries":["darn"]}"#
        c.call(.post, "/v1/blocklists", json: create, status: 201)
        c.call(.post, "/v1/blocklists", json: create, status: 409)
        c.call(.post, "/v1/blocklists", json: #"{"name":"re","type":"regex","action":"flag","entries":["(a)\\1"]}"#, status: 422)
        c.call(.get, "/v1/blocklists", status: 200)
        c.call(.get, "/v1/blocklists/{name}", "words", status: 200)
        c.call(.get, "/v1/blocklists/{name}", "nope", status: 404)
        c.call(.patch, "/v1/blocklists/{name}", "words", json: #"{"applies_to":["text"]}"#, status: 200)
        c.call(.patch, "/v1/blocklists/{name}", "words", json: #"{"type":"regex","entries":["[z"]}"#, status: 422)
        c.call(.post, "/v1/blocklists/test", json: #"{"text":"Darn it"}"#, status: 200)
        c.call(.post, "/v1/blocklists/test", json: #"{"text":"x","names":["nope"]}"#, status: 404)
        c.call(.delete, "/v1/blocklists/{name}", "words", status: 204)
        c.call(.delete, "/v1/blocklists/{name}", "words", status: 404)
    }

    static func problems(_ c: ContractChecker) throws {
        c.call(.get, "/v1/users", as: .anonymous, status: 401)
        c.call(.get, "/v1/users", as: .user("a"), status: 403)
        c.call(.get, "/v1/apps", status: 403)
        let invalid = c.call(.post, "/v1/users", json: #"{"user_id":"x y"}"#, status: 400)
        // docs/errors.md#problems-rfc-9457: errors[] for 6000001; a body member is named `body.<member>` (the
        // document's FieldError).
        #expect(invalid.json?["errors"]?[0]?["field"] == "body.user_id")
        c.call(.post, "/v1/users", json: #"{"user_id":"z"}"#, contentType: "text/plain", status: 415)
        c.call(.get, "/v1/users", query: "limit=0", status: 400)
    }
}

/// Sends requests to a test server and checks each exchange against the OpenAPI document (see the suite comment).
final class ContractChecker {
    enum Credential {
        case app, admin, anonymous
        case user(String)
    }

    let spec: JSONValue
    let server: TestServer
    let app: TestApp
    private var tokens: [String: String] = [:]
    private(set) var refs: Set<String> = []
    private(set) var operations: Set<String> = []

    init(server: TestServer, app: TestApp) throws {
        self.spec = try OpenAPISpecTests.loadSpec()
        self.server = server
        self.app = app
    }

    static func allOperationIDs(_ spec: JSONValue) -> [String] {
        OpenAPISpecTests.operations(in: spec, container: "paths").compactMap { $0.operation["operationId"]?.stringValue }
    }

    /// Sends `method` on `template` with its `{…}` parameters replaced in order by `parameters`, and checks the
    /// exchange. Failures are recorded as issues at the caller's line; the response is returned either way.
    @discardableResult
    func call(
        _ method: HTTPMethod, _ template: String, _ parameters: String..., query: String = "", as credential: Credential = .app,
        json: String? = nil, contentType: String? = nil, headers extra: [String: String] = [:], status: Int,
        sourceLocation: SourceLocation = #_sourceLocation
    ) -> TestResponse {
        let label = "\(method) \(template)"
        do {
            var path = ""
            var remaining = parameters[...]
            var rest = template[...]
            while let open = rest.firstIndex(of: "{"), let close = rest[open...].firstIndex(of: "}") {
                path += rest[..<open]
                path += remaining.popFirst() ?? ""
                rest = rest[rest.index(after: close)...]
            }
            path += rest
            if !query.isEmpty { path += "?" + query }
            var headers = HTTPHeaders()
            if let contentType { headers.add("Content-Type", contentType) }
            for (name, value) in extra.sorted(by: { $0.key < $1.key }) { headers.add(name, value) }
            var bearer: String?
            switch credential {
            case .app: bearer = app.key
            case .admin: bearer = server.adminKey
            case .anonymous: bearer = nil
            case .user(let id): bearer = try token(id)
            }
            let response = try server.request(method, path, bearer: bearer, json: json, headers: headers)
            #expect(response.status == status, "\(label) answered \(response.status): \(response.text)", sourceLocation: sourceLocation)
            check(response, method, template, json, label, sourceLocation)
            return response
        } catch {
            Issue.record("\(label): \(error)", sourceLocation: sourceLocation)
            return TestResponse(status: 0, headers: HTTPHeaders(), body: [])
        }
    }

    /// Validates one event of the log against the body of its type's webhook in the document; an event whose type has
    /// none is an issue. Returns whether it was checked.
    func checkEventPayload(_ event: JSONValue, sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
        let type = event["type"]?.stringValue ?? ""
        let label = "event \(event["id"]?.stringValue ?? "?") \(type)"
        guard let schema = EventSchemaTests.bodySchema(spec, type) else {
            Issue.record("\(label): no webhook of the document describes this type", sourceLocation: sourceLocation)
            return false
        }
        report(event, schema, label, strict: true, sourceLocation)
        return true
    }

    private func token(_ user: String) throws -> String {
        if let token = tokens[user] { return token }
        let token = try app.token(for: user)
        tokens[user] = token
        return token
    }

    private func check(_ r: TestResponse, _ method: HTTPMethod, _ template: String, _ json: String?, _ label: String, _ location: SourceLocation) {
        guard let operation = spec["paths"]?[template]?[method.rawValue.lowercased()] else {
            Issue.record("\(label) is not in the document", sourceLocation: location)
            return
        }
        if let id = operation["operationId"]?.stringValue { operations.insert(id) }
        let responses = operation["responses"]
        guard var declared = responses?[String(r.status)] ?? responses?["\(r.status / 100)XX"] ?? responses?["default"] else {
            Issue.record("\(label): status \(r.status) is not declared (\(r.text))", sourceLocation: location)
            return
        }
        if let ref = declared["$ref"]?.stringValue, let target = validator.resolve(ref) { declared = target }
        checkHeaders(r, declared, label, location)
        let content = declared["content"]?.objectValue ?? JSONObject()
        if r.status == 204 || r.body.isEmpty {
            #expect(content.isEmpty, "\(label) \(r.status): empty body, but the document declares content", sourceLocation: location)
            #expect(r.body.isEmpty, "\(label) 204 with a body", sourceLocation: location)
            return
        }
        let mediaType = Self.essence(r.headers["Content-Type"] ?? "")
        // `*/*`: a download, whose type is the stored file's.
        guard let media = content.first(where: { Self.essence($0.key) == mediaType || $0.key == "*/*" })?.value else {
            Issue.record(
                "\(label) \(r.status): content type \(mediaType) is not declared (\(content.keys))", sourceLocation: location)
            return
        }
        if mediaType == "application/x-ndjson" {
            // NDJSON (the message export, docs/messages.md#import-and-export): every line is a Message.
            for line in r.body.split(separator: 0x0A) {
                guard let body = try? JSONValue.parse(Array(line), maxDepth: 256) else {
                    Issue.record("\(label) \(r.status): a line is not JSON", sourceLocation: location)
                    return
                }
                report(body, ["$ref": "#/components/schemas/Message"], "\(label) \(r.status) line", strict: true, location)
            }
        } else if mediaType.hasSuffix("json"), let schema = media["schema"] {
            guard let body = try? JSONValue.parse(r.body, maxDepth: 256) else {
                Issue.record("\(label) \(r.status): body is not JSON: \(r.text)", sourceLocation: location)
                return
            }
            report(body, schema, "\(label) \(r.status) response", strict: true, location)
            if mediaType == "application/problem+json" { checkProblem(body, r, label, location) }
        }
        if (200..<300).contains(r.status), let json,
            let schema = operation["requestBody"]?["content"]?["application/json"]?["schema"], let body = try? JSONValue.parse(json)
        {
            report(body, schema, "\(label) request", strict: false, location)
        }
    }

    /// `X-Request-Id` on every response (docs/errors.md#problems-rfc-9457); every declared header that is present
    /// matches its schema (an integer header is a decimal integer).
    private func checkHeaders(_ r: TestResponse, _ declared: JSONValue, _ label: String, _ location: SourceLocation) {
        #expect(r.headers["X-Request-Id"]?.isEmpty == false, "\(label) \(r.status): no X-Request-Id", sourceLocation: location)
        for (name, header) in declared["headers"]?.objectValue ?? JSONObject() {
            guard let value = r.headers[name] else { continue }
            var header = header
            if let ref = header["$ref"]?.stringValue, let target = validator.resolve(ref) { header = target }
            guard let schema = header["schema"] else { continue }
            let instance: JSONValue =
                schema["type"]?.stringValue == "integer" ? Int64(value).map(JSONValue.int) ?? .string(value) : .string(value)
            report(instance, schema, "\(label) \(r.status) header \(name)", strict: true, location)
        }
    }

    /// A problem body agrees with its response (docs/errors.md#problems-rfc-9457): `status` is the HTTP status, `type`
    /// names the `code`, and `request_id` repeats `X-Request-Id`.
    private func checkProblem(_ body: JSONValue, _ r: TestResponse, _ label: String, _ location: SourceLocation) {
        #expect(body["status"]?.intValue == Int64(r.status), "\(label): problem status", sourceLocation: location)
        let code = body["code"]?.intValue.map { "urn:parley:error:\($0)" }
        #expect(code != nil && body["type"]?.stringValue == code, "\(label): problem type \(body)", sourceLocation: location)
        #expect(body["request_id"]?.stringValue == r.headers["X-Request-Id"], "\(label): problem request_id", sourceLocation: location)
    }

    private var validator: JSONSchemaValidator { JSONSchemaValidator(document: spec) }

    private func report(_ body: JSONValue, _ schema: JSONValue, _ what: String, strict: Bool, _ location: SourceLocation) {
        var validator = self.validator
        validator.rejectUndeclaredProperties = strict
        let outcome = validator.validateRecordingRefs(body, against: schema)
        refs.formUnion(outcome.refs)
        for failure in outcome.failures { Issue.record("\(what): \(failure)", sourceLocation: location) }
    }

    /// The media type without parameters, lowercased (`application/json; charset=utf-8` → `application/json`).
    static func essence(_ contentType: String) -> String {
        String(contentType.split(separator: ";").first ?? "").filter { !$0.isWhitespace }.lowercased()
    }
}
