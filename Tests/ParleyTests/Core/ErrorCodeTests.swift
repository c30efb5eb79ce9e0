import Testing

@testable import Parley
@testable import ParleyAPI
@testable import ParleyCore
@testable import ParleyDomains
@testable import ParleyLive

@Suite("Error catalogue and problem bodies")
struct ErrorCodeTests {
    /// The error catalogue, row by row (code, name, HTTP status), copied from the contract as data.
    static let contract: [(Int, String, Int)] = [
        (6000001, "invalid_params", 400),
        (6000005, "rate_limited", 429),
        (6000011, "user_not_found", 404),
        (6000013, "unsupported_operation", 422),
        (6000103, "token_invalid", 401),
        (6000106, "token_expired", 401),
        (6000204, "target_not_found", 404),
        (6000210, "file_error", 422),
        (6000211, "file_not_found", 404),
        (6000212, "file_storage_unavailable", 503),
        (6000213, "file_type_unsupported", 422),
        (6000214, "file_size_invalid", 413),
        (6000215, "file_duration_invalid", 422),
        (6000216, "file_permission_denied", 403),
        (6000221, "content_blocked", 422),
        (6000231, "sender_muted", 403),
        (6000270, "call_state_conflict", 409),
        (6000273, "not_inviter", 403),
        (6000274, "not_invitee", 403),
        (6000276, "call_not_found", 404),
        (6000277, "receipt_not_applicable", 422),
        (6000278, "revoke_window_expired", 403),
        (6000279, "already_revoked", 409),
        (6000280, "reaction_exists", 409),
        (6000281, "invitee_not_found", 404),
        (6000282, "receipt_group_too_large", 422),
        (6000283, "already_in_call", 409),
        (6000285, "message_permission_denied", 403),
        (6000286, "edit_window_expired", 403),
        (6000321, "not_in_room", 403),
        (6000322, "room_not_found", 404),
        (6000323, "room_already_exists", 409),
        (6000324, "room_limit", 422),
        (6000325, "joined_rooms_limit", 422),
        (6000331, "room_batch_aborted", 422),
        (6000334, "room_attribute_count_exceeded", 422),
        (6000335, "room_attribute_key_too_long", 422),
        (6000336, "room_attribute_value_too_long", 422),
        (6000337, "room_attributes_total_exceeded", 422),
        (6000351, "member_attributes_total_exceeded", 422),
        (6000352, "member_attribute_key_too_long", 422),
        (6000353, "member_attribute_value_too_long", 422),
        (6000357, "member_attributes_users_exceeded", 422),
        (6000401, "push_key_invalid", 422),
        (6000521, "not_group_member", 403),
        (6000522, "already_group_member", 409),
        (6000523, "group_not_found", 404),
        (6000524, "group_already_exists", 409),
        (6000525, "group_full", 422),
        (6000526, "group_attribute_not_found", 404),
        (6000527, "group_dismissed", 409),
        (6000531, "group_attribute_count_exceeded", 422),
        (6000532, "group_attribute_key_too_long", 422),
        (6000533, "group_attribute_value_too_long", 422),
        (6000534, "group_attributes_total_exceeded", 422),
        (6000541, "group_permission_denied", 403),
        (6000603, "conversation_not_found", 404),
        (6000604, "conversation_pin_limit", 422),
        (6000801, "friend_limit", 422),
        (6000802, "application_not_waiting", 409),
        (6000803, "already_friends", 409),
        (6000804, "already_blacklisted", 409),
        (6000805, "cannot_blacklist_self", 422),
        (6000807, "not_in_blacklist", 404),
        (6000808, "blacklist_limit", 422),
        (6000810, "cannot_friend_self", 422),
        (6000812, "not_friends", 404),
        (6000813, "cannot_delete_self", 422),
        (6000814, "application_expired", 409),
        (20007, "blocked_by_recipient", 403),
        (20009, "not_friends_c2c", 403),
        (80001, "sensitive_word", 422),
        (7000000, "internal_error", 500),
        (7000001, "unauthenticated", 401),
        (7000002, "forbidden", 403),
        (7000003, "idempotency_key_reused", 422),
        (7000004, "idempotency_key_in_flight", 409),
        (7000005, "payload_too_large", 413),
        (7000006, "not_found", 404),
        (7000007, "invalid_cursor", 400),
        (7000008, "unsupported_media_type", 415),
        (7000009, "conflict", 409),
        (7000010, "unavailable", 503),
        (7000011, "last_active_key", 409),
        (7000012, "invalid_last_event_id", 400),
        (7000013, "too_many_streams", 429),
        (7000014, "method_not_allowed", 405),
        (7000015, "request_timeout", 408),
        (7000016, "request_header_fields_too_large", 431),
        (7000017, "not_implemented", 501),
        (7000018, "http_version_not_supported", 505),
        (7000019, "bad_request", 400),
        (7000020, "stream_capacity_reached", 503),
        (7000101, "user_already_exists", 409),
        (7000102, "user_banned", 403),
        (7000103, "subscription_limit", 422),
        (7000201, "message_too_large", 413),
        (7000203, "client_msg_id_conflict", 409),
        (7000205, "pin_limit", 422),
        (7000206, "reaction_not_found", 404),
        (7000210, "message_not_found", 404),
        (7000211, "reaction_type_limit", 422),
        (7000301, "group_join_forbidden", 403),
        (7000303, "big_group_restricted", 403),
        (7000401, "room_attribute_owned", 403),
        (7000402, "room_attribute_not_found", 404),
        (7000403, "member_attribute_pairs_exceeded", 422),
        (7000501, "rejected_by_hook", 403),
        (7000502, "hook_unavailable", 503),
        (7000503, "hook_patch_invalid", 422),
        (7000504, "before_hook_taken", 409),
        (7000505, "webhook_limit", 422),
        (7000602, "call_no_invitee", 422),
        (7000603, "call_user_limit", 422),
        (7000701, "push_not_configured", 422),
        (7000801, "report_exists", 409),
        (7000802, "report_not_found", 404),
        (7000803, "report_closed", 409),
        (7000804, "invalid_blocklist_entry", 422),
        (7000805, "blocklist_exists", 409),
        (7000806, "blocklist_limit", 422),
        (7000901, "legal_hold", 409),
        (7000902, "scheduled_limit", 422),
        (7000903, "job_not_found", 404),
        (7000904, "job_finished", 409),
        (7000905, "upload_protocol_error", 416),
        (7000906, "scheduled_not_pending", 409),
    ]

    @Test func catalogueMatchesTheContractExactly() {
        #expect(Self.contract.count == 127, "the error catalogue has 127 codes")
        #expect(ErrorCode.all.count == Self.contract.count)
        for (entry, row) in zip(ErrorCode.all, Self.contract) {
            #expect(entry.code == row.0 && entry.name == row.1 && entry.status == row.2, "\(entry) vs \(row)")
        }
    }

    @Test func codesAndNamesAreUnique() {
        #expect(Set(ErrorCode.all.map(\.code)).count == ErrorCode.all.count)
        #expect(Set(ErrorCode.all.map(\.name)).count == ErrorCode.all.count)
        #expect(Set(ErrorCode.all).count == ErrorCode.all.count)
    }

    @Test func statusesAreErrorStatuses() {
        for e in ErrorCode.all {
            #expect([400, 401, 403, 404, 405, 408, 409, 413, 415, 416, 422, 429, 431, 500, 501, 503, 505].contains(e.status), "\(e)")
        }
    }

    @Test func namedConstants() {
        #expect(ErrorCode.invalidParams == ErrorCode(6_000_001, "invalid_params", 400))
        #expect(ErrorCode.rateLimited.code == 6_000_005 && ErrorCode.rateLimited.status == 429)
        #expect(ErrorCode.userNotFound.code == 6_000_011 && ErrorCode.userNotFound.status == 404)
        #expect(ErrorCode.blockedByRecipient.code == 20007)
        #expect(ErrorCode.notFriendsC2c.code == 20009)
        #expect(ErrorCode.sensitiveWord.code == 80001)
        #expect(ErrorCode.invalidCursor.status == 400)
        #expect(ErrorCode.forCode(7_000_010) == .unavailable)
        #expect(ErrorCode.forCode(42) == nil)
    }

    private func json(_ bytes: [UInt8]) throws -> JSONValue { try JSONValue.parse(bytes) }

    @Test func problemBodyHasTheDocumentedShapeAndOrder() throws {
        let e = APIError(.groupFull, "group g1 has 2000 members (max_members 2000)")
        let body = String(decoding: e.problemBody(requestID: "r-1"), as: UTF8.self)
        #expect(
            body
                == #"{"type":"urn:parley:error:6000525","title":"group_full","status":422,"#
                + #""detail":"group g1 has 2000 members (max_members 2000)","code":6000525,"request_id":"r-1"}"#)
        #expect(e.status == 422)
    }

    @Test func invalidParamsListsEveryField() throws {
        let e = APIError.invalidParams([
            FieldError(field: "user_ids[3]", message: "must be at most 32 bytes"),
            FieldError(field: "body.text", message: "is required"),
        ])
        let v = try json(e.problemBody(requestID: "r-2"))
        #expect(v["status"] == 400 && v["code"] == 6_000_001 && v["title"] == "invalid_params")
        #expect(v["type"] == "urn:parley:error:6000001")
        #expect(v["request_id"] == "r-2")
        #expect(
            v["errors"] == [
                ["field": "user_ids[3]", "message": "must be at most 32 bytes"],
                ["field": "body.text", "message": "is required"],
            ])
        #expect(v["hook_code"] == nil)
        #expect(e.fieldErrors.count == 2)
        #expect(APIError.invalidParam("limit", "x").fieldErrors == [FieldError(field: "limit", message: "x")])
    }

    @Test func hookCodeIsOmittedNullOrInteger() throws {
        #expect(try json(APIError(.forbidden, "no").problemBody(requestID: "r"))["hook_code"] == nil)
        let nullCode = try json(APIError.rejectedByHook(reason: "spam", hookCode: nil).problemBody(requestID: "r"))
        #expect(nullCode["hook_code"] == .null)
        #expect(nullCode["detail"] == "spam")
        #expect(nullCode["status"] == 403)
        let withCode = try json(APIError.rejectedByHook(reason: "r", hookCode: 4001).problemBody(requestID: "r"))
        #expect(withCode["hook_code"] == 4001)
        #expect(withCode["errors"] == nil)
    }

    @Test func detailAndRequestIDAreEscaped() throws {
        let e = APIError(.userNotFound, "user \"a\\b\n\" does not exist")
        let v = try json(e.problemBody(requestID: "r\"x"))
        #expect(v["detail"] == "user \"a\\b\n\" does not exist")
        #expect(v["request_id"] == "r\"x")
    }

    @Test func headersOfConvenienceConstructors() {
        let limited = APIError.retryLater(.rateLimited, "slow down", retryAfterSeconds: 0)
        #expect(limited.extraHeaders.map { "\($0.0): \($0.1)" } == ["Retry-After: 1"])
        #expect(limited.status == 429)
        #expect(APIError.unauthenticated().extraHeaders.map(\.1) == ["Bearer"])
        #expect(APIError.unauthenticated().code == .unauthenticated)
        #expect(APIError.tokenRejected(.tokenExpired, "expired").status == 401)
        #expect(APIError.internalError.status == 500)
        #expect(APIError.forbidden().code == .forbidden)
        #expect(APIError(.userNotFound, "user u1 does not exist").description.contains("6000011"))
    }
}
