/// One entry of the error catalogue (docs/errors.md#code-families): the numeric code, its name and its one HTTP status.
///
/// Every problem response the server sends uses one of the constants below; `all` lists them in catalogue order
/// so tests and the OpenAPI document can check the catalogue is complete and unique.
public struct ErrorCode: Hashable, Sendable, CustomStringConvertible {
    /// The numeric catalogue code (`6000001`, `20007` …), sent as `code` and in `type`.
    public let code: Int
    /// The snake_case catalogue name, sent as `title`.
    public let name: String
    /// The HTTP status this code is sent with (``APIError/statusOverride`` changes it for the one code a protocol
    /// answers with several: `upload_protocol_error`).
    public let status: Int

    init(_ code: Int, _ name: String, _ status: Int) {
        self.code = code
        self.name = name
        self.status = status
    }

    public var description: String { "\(code) \(name)" }

    /// The catalogue entry for a numeric code, if any.
    public static func forCode(_ code: Int) -> ErrorCode? { byCode[code] }

    private static let byCode: [Int: ErrorCode] = Dictionary(uniqueKeysWithValues: all.map { ($0.code, $0) })

    /// Malformed JSON, wrong type, missing or unknown-enum field, bad id format, limit out of range, duplicate item
    /// in a batch. `errors[]` lists the fields.
    public static let invalidParams = ErrorCode(6000001, "invalid_params", 400)
    /// Credential or per-user send rate exceeded; see `Retry-After`.
    public static let rateLimited = ErrorCode(6000005, "rate_limited", 429)
    /// The user does not exist (or is soft-deleted).
    public static let userNotFound = ErrorCode(6000011, "user_not_found", 404)
    /// The operation or option does not apply to this target: message type vs conversation type, room-only/peer-only
    /// options, operations on unstored or system messages, advanced-only call operations in general mode.
    public static let unsupportedOperation = ErrorCode(6000013, "unsupported_operation", 422)
    /// A value of the JWT form that fails verification as a user token: wrong algorithm or signature, unknown app,
    /// unknown or deleted user, or revoked by kick (docs/users.md#user-tokens).
    public static let tokenInvalid = ErrorCode(6000103, "token_invalid", 401)
    /// User token past `exp`.
    public static let tokenExpired = ErrorCode(6000106, "token_expired", 401)
    /// The recipient user, group or room of a send, an import line or an export, or the other user of a new peer
    /// conversation entry, does not exist.
    public static let targetNotFound = ErrorCode(6000204, "target_not_found", 404)
    /// A recognised image format that fails to decode, or an image over `image_max_pixels` (docs/files.md).
    public static let fileError = ErrorCode(6000210, "file_error", 422)
    /// The file does not exist in this app or was deleted.
    public static let fileNotFound = ErrorCode(6000211, "file_not_found", 404)
    /// The file store does not answer.
    public static let fileStorageUnavailable = ErrorCode(6000212, "file_storage_unavailable", 503)
    /// Media file extension not allowed for the message type or the upload's kind, or an image upload whose content is
    /// no image format Parley reads.
    public static let fileTypeUnsupported = ErrorCode(6000213, "file_type_unsupported", 422)
    /// Over the kind's size limit or the app's storage quota.
    public static let fileSizeInvalid = ErrorCode(6000214, "file_size_invalid", 413)
    /// A message's `duration_ms` that contradicts the duration read from its file by more than 2 seconds.
    public static let fileDurationInvalid = ErrorCode(6000215, "file_duration_invalid", 422)
    /// Not allowed to use or download this file, or a wrong or expired signed URL.
    public static let filePermissionDenied = ErrorCode(6000216, "file_permission_denied", 403)
    /// A blocklist with action `block` matched the content (the blocklist is named in the problem, never the entry).
    public static let contentBlocked = ErrorCode(6000221, "content_blocked", 422)
    /// Sender globally muted, muted in the group, or covered by the group mute.
    public static let senderMuted = ErrorCode(6000231, "sender_muted", 403)
    /// The call or the user's call state does not allow the operation (ended, not pending, not accepted).
    public static let callStateConflict = ErrorCode(6000270, "call_state_conflict", 409)
    /// Only the user who invited may cancel that invitation.
    public static let notInviter = ErrorCode(6000273, "not_inviter", 403)
    /// Only an invitee may accept or reject.
    public static let notInvitee = ErrorCode(6000274, "not_invitee", 403)
    /// Unknown call, or the acting user is not one of its users.
    public static let callNotFound = ErrorCode(6000276, "call_not_found", 404)
    /// No receipt requested, reader is the sender or not a recipient, or receipt expired.
    public static let receiptNotApplicable = ErrorCode(6000277, "receipt_not_applicable", 422)
    /// The sender's revoke window has passed (or is 0).
    public static let revokeWindowExpired = ErrorCode(6000278, "revoke_window_expired", 403)
    /// The message is already revoked.
    public static let alreadyRevoked = ErrorCode(6000279, "already_revoked", 409)
    /// This user already added this reaction type to this message.
    public static let reactionExists = ErrorCode(6000280, "reaction_exists", 409)
    /// A call invitee does not exist.
    public static let inviteeNotFound = ErrorCode(6000281, "invitee_not_found", 404)
    /// `need_receipt` in a group with more than 500 members or a big group.
    public static let receiptGroupTooLarge = ErrorCode(6000282, "receipt_group_too_large", 422)
    /// The user is already pending or accepted in the call.
    public static let alreadyInCall = ErrorCode(6000283, "already_in_call", 409)
    /// The caller may not revoke, edit, delete, pin or read receipts of this message.
    public static let messagePermissionDenied = ErrorCode(6000285, "message_permission_denied", 403)
    /// The edit window has passed (or editing is disabled).
    public static let editWindowExpired = ErrorCode(6000286, "edit_window_expired", 403)
    /// The acting or target user is not in the room.
    public static let notInRoom = ErrorCode(6000321, "not_in_room", 403)
    /// Unknown room.
    public static let roomNotFound = ErrorCode(6000322, "room_not_found", 404)
    /// Create with an existing room_id.
    public static let roomAlreadyExists = ErrorCode(6000323, "room_already_exists", 409)
    /// The app already has 10000 rooms.
    public static let roomLimit = ErrorCode(6000324, "room_limit", 422)
    /// The user is already in `max_rooms_per_user` rooms.
    public static let joinedRoomsLimit = ErrorCode(6000325, "joined_rooms_limit", 422)
    /// Item not applied because another item of an atomic batch failed.
    public static let roomBatchAborted = ErrorCode(6000331, "room_batch_aborted", 422)
    /// More than 20 room attributes.
    public static let roomAttributeCountExceeded = ErrorCode(6000334, "room_attribute_count_exceeded", 422)
    /// Room attribute key empty or over 16 B.
    public static let roomAttributeKeyTooLong = ErrorCode(6000335, "room_attribute_key_too_long", 422)
    /// Room attribute value over 1024 B.
    public static let roomAttributeValueTooLong = ErrorCode(6000336, "room_attribute_value_too_long", 422)
    /// Room attributes over 5120 B in total (keys + values).
    public static let roomAttributesTotalExceeded = ErrorCode(6000337, "room_attributes_total_exceeded", 422)
    /// One member's attributes over 144 B in total.
    public static let memberAttributesTotalExceeded = ErrorCode(6000351, "member_attributes_total_exceeded", 422)
    /// Member attribute key empty or over 8 B.
    public static let memberAttributeKeyTooLong = ErrorCode(6000352, "member_attribute_key_too_long", 422)
    /// Member attribute value over 64 B.
    public static let memberAttributeValueTooLong = ErrorCode(6000353, "member_attribute_value_too_long", 422)
    /// More than 500 users in the room would have attributes.
    public static let memberAttributesUsersExceeded = ErrorCode(6000357, "member_attributes_users_exceeded", 422)
    /// Device push key fails the provider's format check.
    public static let pushKeyInvalid = ErrorCode(6000401, "push_key_invalid", 422)
    /// The acting or target user is not a member of the group.
    public static let notGroupMember = ErrorCode(6000521, "not_group_member", 403)
    /// The user is already a member.
    public static let alreadyGroupMember = ErrorCode(6000522, "already_group_member", 409)
    /// Unknown group.
    public static let groupNotFound = ErrorCode(6000523, "group_not_found", 404)
    /// Create with an existing (or dismissed) group_id.
    public static let groupAlreadyExists = ErrorCode(6000524, "group_already_exists", 409)
    /// Joining would exceed `max_members`, or `max_members` below the member count / above the app maximum.
    public static let groupFull = ErrorCode(6000525, "group_full", 422)
    /// Delete of a missing group attribute key.
    public static let groupAttributeNotFound = ErrorCode(6000526, "group_attribute_not_found", 404)
    /// Mutating or sending to a dismissed group.
    public static let groupDismissed = ErrorCode(6000527, "group_dismissed", 409)
    /// More than 10 group attributes.
    public static let groupAttributeCountExceeded = ErrorCode(6000531, "group_attribute_count_exceeded", 422)
    /// Group attribute key empty or over 16 B.
    public static let groupAttributeKeyTooLong = ErrorCode(6000532, "group_attribute_key_too_long", 422)
    /// Group attribute value over 1024 B.
    public static let groupAttributeValueTooLong = ErrorCode(6000533, "group_attribute_value_too_long", 422)
    /// Group attributes over 5120 B in total.
    public static let groupAttributesTotalExceeded = ErrorCode(6000534, "group_attributes_total_exceeded", 422)
    /// The operator's role does not allow the group action (docs/groups.md#roles).
    public static let groupPermissionDenied = ErrorCode(6000541, "group_permission_denied", 403)
    /// The user has no (undeleted) entry for that conversation.
    public static let conversationNotFound = ErrorCode(6000603, "conversation_not_found", 404)
    /// More than 100 pinned conversations.
    public static let conversationPinLimit = ErrorCode(6000604, "conversation_pin_limit", 422)
    /// A friend list would exceed 3000 entries.
    public static let friendLimit = ErrorCode(6000801, "friend_limit", 422)
    /// The friend or group application is no longer `waiting`.
    public static let applicationNotWaiting = ErrorCode(6000802, "application_not_waiting", 409)
    /// The owner already has this friend.
    public static let alreadyFriends = ErrorCode(6000803, "already_friends", 409)
    /// Already on the blacklist.
    public static let alreadyBlacklisted = ErrorCode(6000804, "already_blacklisted", 409)
    /// A user cannot blacklist itself.
    public static let cannotBlacklistSelf = ErrorCode(6000805, "cannot_blacklist_self", 422)
    /// The user is not on the blacklist.
    public static let notInBlacklist = ErrorCode(6000807, "not_in_blacklist", 404)
    /// The blacklist would exceed 1000 entries.
    public static let blacklistLimit = ErrorCode(6000808, "blacklist_limit", 422)
    /// A user cannot befriend itself.
    public static let cannotFriendSelf = ErrorCode(6000810, "cannot_friend_self", 422)
    /// The friend is not in the owner's list.
    public static let notFriends = ErrorCode(6000812, "not_friends", 404)
    /// A user cannot delete itself as a friend.
    public static let cannotDeleteSelf = ErrorCode(6000813, "cannot_delete_self", 422)
    /// The friend or group application has expired.
    public static let applicationExpired = ErrorCode(6000814, "application_expired", 409)
    /// The sender is on the recipient's blacklist (`blacklist_feedback=error`; always for friend requests and call
    /// invites).
    public static let blockedByRecipient = ErrorCode(20007, "blocked_by_recipient", 403)
    /// `friend_only_c2c` is on and the two users are not mutual friends.
    public static let notFriendsC2c = ErrorCode(20009, "not_friends_c2c", 403)
    /// The text contains a configured sensitive word (`sensitive_word_action=reject`).
    public static let sensitiveWord = ErrorCode(80001, "sensitive_word", 422)
    /// Unexpected server failure (the transaction was rolled back).
    public static let internalError = ErrorCode(7000000, "internal_error", 500)
    /// Missing credential, a bearer value that is neither the admin key, an app key nor of the JWT form, or an
    /// unknown or revoked app key (docs/getting-started.md#2-keys-the-admin-key-and-an-app-key); a wrong metrics token.
    public static let unauthenticated = ErrorCode(7000001, "unauthenticated", 401)
    /// The credential may not do this: wrong scope, another user's resource, `skip_checks`/`skip_hooks` with a user
    /// token.
    public static let forbidden = ErrorCode(7000002, "forbidden", 403)
    /// Same `Idempotency-Key` with a different method, path or body.
    public static let idempotencyKeyReused = ErrorCode(7000003, "idempotency_key_reused", 422)
    /// The first request with this key is still executing.
    public static let idempotencyKeyInFlight = ErrorCode(7000004, "idempotency_key_in_flight", 409)
    /// Request body over 1 MiB (import: 32 MiB).
    public static let payloadTooLarge = ErrorCode(7000005, "payload_too_large", 413)
    /// Unknown route or resource without a more specific code (app, key, webhook, delivery, device, application,
    /// subscription).
    public static let notFound = ErrorCode(7000006, "not_found", 404)
    /// Cursor malformed, expired or from another list.
    public static let invalidCursor = ErrorCode(7000007, "invalid_cursor", 400)
    /// Wrong request `Content-Type`.
    public static let unsupportedMediaType = ErrorCode(7000008, "unsupported_media_type", 415)
    /// Generic uniqueness/state conflict (app_id taken, delivery already pending).
    public static let conflict = ErrorCode(7000009, "conflict", 409)
    /// Database unavailable, not ready, or shutting down.
    public static let unavailable = ErrorCode(7000010, "unavailable", 503)
    /// The app's last active key cannot be revoked.
    public static let lastActiveKey = ErrorCode(7000011, "last_active_key", 409)
    /// Resume id or polling `after` that is neither `earliest` nor ASCII digits, or beyond the log head.
    public static let invalidLastEventId = ErrorCode(7000012, "invalid_last_event_id", 400)
    /// More than 10 open streams for the user (100 app streams).
    public static let tooManyStreams = ErrorCode(7000013, "too_many_streams", 429)
    /// The path exists but not with this method (with `Allow`).
    public static let methodNotAllowed = ErrorCode(7000014, "method_not_allowed", 405)
    /// The request head or body did not arrive in time; the connection closes after the answer.
    public static let requestTimeout = ErrorCode(7000015, "request_timeout", 408)
    /// Request line or headers over their limits.
    public static let requestHeaderFieldsTooLarge = ErrorCode(7000016, "request_header_fields_too_large", 431)
    /// A `Transfer-Encoding` or HTTP feature the server does not implement.
    public static let notImplemented = ErrorCode(7000017, "not_implemented", 501)
    /// An HTTP version other than 1.0 and 1.1.
    public static let httpVersionNotSupported = ErrorCode(7000018, "http_version_not_supported", 505)
    /// A malformed HTTP request that is not a validation error of a field (missing `Host` on HTTP/1.1, conflicting
    /// `Content-Length`/`Transfer-Encoding`, a bad chunk size, bad percent-encoding in the path or query).
    public static let badRequest = ErrorCode(7000019, "bad_request", 400)
    /// The node holds all the event streams its open-files limit allows less its reserve (`PARLEY_FD_RESERVE`); with
    /// `Retry-After`: reconnect later, or through the balancer to another node.
    public static let streamCapacityReached = ErrorCode(7000020, "stream_capacity_reached", 503)
    /// The user_id exists (active or soft-deleted).
    public static let userAlreadyExists = ErrorCode(7000101, "user_already_exists", 409)
    /// The user is banned.
    public static let userBanned = ErrorCode(7000102, "user_banned", 403)
    /// More than 1000 status subscriptions.
    public static let subscriptionLimit = ErrorCode(7000103, "subscription_limit", 422)
    /// A message's `text` or `data` exceeds its byte limit (`text_max_bytes`, or the fixed limit of its type).
    public static let messageTooLarge = ErrorCode(7000201, "message_too_large", 413)
    /// `client_msg_id` reused by the same sender with different content.
    public static let clientMsgIdConflict = ErrorCode(7000203, "client_msg_id_conflict", 409)
    /// More than 20 pinned messages in the conversation.
    public static let pinLimit = ErrorCode(7000205, "pin_limit", 422)
    /// Removing a reaction the user has not added.
    public static let reactionNotFound = ErrorCode(7000206, "reaction_not_found", 404)
    /// Unknown message, not visible to the caller, or a tombstone for a mutating operation.
    public static let messageNotFound = ErrorCode(7000210, "message_not_found", 404)
    /// More than 50 distinct reaction types on the message.
    public static let reactionTypeLimit = ErrorCode(7000211, "reaction_type_limit", 422)
    /// `join_mode` is `forbid`.
    public static let groupJoinForbidden = ErrorCode(7000301, "group_join_forbidden", 403)
    /// Ordinary members cannot list members of a big group.
    public static let bigGroupRestricted = ErrorCode(7000303, "big_group_restricted", 403)
    /// The key belongs to another user and `is_force` is false.
    public static let roomAttributeOwned = ErrorCode(7000401, "room_attribute_owned", 403)
    /// Delete of a missing room attribute key.
    public static let roomAttributeNotFound = ErrorCode(7000402, "room_attribute_not_found", 404)
    /// More than 30 attribute pairs for one member.
    public static let memberAttributePairsExceeded = ErrorCode(7000403, "member_attribute_pairs_exceeded", 422)
    /// A before-event hook rejected the request (`hook_code`, `detail` = reason).
    public static let rejectedByHook = ErrorCode(7000501, "rejected_by_hook", 403)
    /// A fail-closed before-event hook timed out or failed.
    public static let hookUnavailable = ErrorCode(7000502, "hook_unavailable", 503)
    /// A `modify` patch produced an invalid request.
    public static let hookPatchInvalid = ErrorCode(7000503, "hook_patch_invalid", 422)
    /// Another enabled endpoint already serves that before-event type.
    public static let beforeHookTaken = ErrorCode(7000504, "before_hook_taken", 409)
    /// More than 20 webhook endpoints.
    public static let webhookLimit = ErrorCode(7000505, "webhook_limit", 422)
    /// No invitee of a new call could be invited.
    public static let callNoInvitee = ErrorCode(7000602, "call_no_invitee", 422)
    /// An advanced call would have more than 50 users pending or `accepted`.
    public static let callUserLimit = ErrorCode(7000603, "call_user_limit", 422)
    /// No push gateway configured for a real (non-dry-run) push test.
    public static let pushNotConfigured = ErrorCode(7000701, "push_not_configured", 422)
    /// The same reporter already has an open report on that target.
    public static let reportExists = ErrorCode(7000801, "report_exists", 409)
    /// Unknown report.
    public static let reportNotFound = ErrorCode(7000802, "report_not_found", 404)
    /// An action on a report that is already resolved or dismissed.
    public static let reportClosed = ErrorCode(7000803, "report_closed", 409)
    /// A blocklist entry that cannot be compiled (the entry is named in the problem).
    public static let invalidBlocklistEntry = ErrorCode(7000804, "invalid_blocklist_entry", 422)
    /// A blocklist of that name already exists in the app.
    public static let blocklistExists = ErrorCode(7000805, "blocklist_exists", 409)
    /// More than 50 blocklists in the app.
    public static let blocklistLimit = ErrorCode(7000806, "blocklist_limit", 422)
    /// A message (or its file) that a legal hold covers: it cannot be deleted for everyone, bulk-removed or purged while
    /// the hold stands (docs/retention.md#legal-hold).
    public static let legalHold = ErrorCode(7000901, "legal_hold", 409)
    /// More than 10,000 scheduled messages waiting in the app (a scheduled batch counts one).
    public static let scheduledLimit = ErrorCode(7000902, "scheduled_limit", 422)
    /// Unknown job.
    public static let jobNotFound = ErrorCode(7000903, "job_not_found", 404)
    /// Cancelling a job that has already finished.
    public static let jobFinished = ErrorCode(7000904, "job_finished", 409)
    /// An unsatisfiable `Range` of a download (416), or a refusal of the tus resumable-upload protocol, sent with the
    /// status tus gives it (404, 409, 410, 412, 415: ``APIError/statusOverride``, docs/files.md#resumable-uploads-tus).
    public static let uploadProtocolError = ErrorCode(7000905, "upload_protocol_error", 416)
    /// Editing or cancelling a scheduled message that is no longer `scheduled` (sent, failed or cancelled).
    public static let scheduledNotPending = ErrorCode(7000906, "scheduled_not_pending", 409)

    /// Every catalogue entry, in code order within each family (docs/errors.md#code-families).
    public static let all: [ErrorCode] = [
        .invalidParams,
        .rateLimited,
        .userNotFound,
        .unsupportedOperation,
        .tokenInvalid,
        .tokenExpired,
        .targetNotFound,
        .fileError,
        .fileNotFound,
        .fileStorageUnavailable,
        .fileTypeUnsupported,
        .fileSizeInvalid,
        .fileDurationInvalid,
        .filePermissionDenied,
        .contentBlocked,
        .senderMuted,
        .callStateConflict,
        .notInviter,
        .notInvitee,
        .callNotFound,
        .receiptNotApplicable,
        .revokeWindowExpired,
        .alreadyRevoked,
        .reactionExists,
        .inviteeNotFound,
        .receiptGroupTooLarge,
        .alreadyInCall,
        .messagePermissionDenied,
        .editWindowExpired,
        .notInRoom,
        .roomNotFound,
        .roomAlreadyExists,
        .roomLimit,
        .joinedRoomsLimit,
        .roomBatchAborted,
        .roomAttributeCountExceeded,
        .roomAttributeKeyTooLong,
        .roomAttributeValueTooLong,
        .roomAttributesTotalExceeded,
        .memberAttributesTotalExceeded,
        .memberAttributeKeyTooLong,
        .memberAttributeValueTooLong,
        .memberAttributesUsersExceeded,
        .pushKeyInvalid,
        .notGroupMember,
        .alreadyGroupMember,
        .groupNotFound,
        .groupAlreadyExists,
        .groupFull,
        .groupAttributeNotFound,
        .groupDismissed,
        .groupAttributeCountExceeded,
        .groupAttributeKeyTooLong,
        .groupAttributeValueTooLong,
        .groupAttributesTotalExceeded,
        .groupPermissionDenied,
        .conversationNotFound,
        .conversationPinLimit,
        .friendLimit,
        .applicationNotWaiting,
        .alreadyFriends,
        .alreadyBlacklisted,
        .cannotBlacklistSelf,
        .notInBlacklist,
        .blacklistLimit,
        .cannotFriendSelf,
        .notFriends,
        .cannotDeleteSelf,
        .applicationExpired,
        .blockedByRecipient,
        .notFriendsC2c,
        .sensitiveWord,
        .internalError,
        .unauthenticated,
        .forbidden,
        .idempotencyKeyReused,
        .idempotencyKeyInFlight,
        .payloadTooLarge,
        .notFound,
        .invalidCursor,
        .unsupportedMediaType,
        .conflict,
        .unavailable,
        .lastActiveKey,
        .invalidLastEventId,
        .tooManyStreams,
        .methodNotAllowed,
        .requestTimeout,
        .requestHeaderFieldsTooLarge,
        .notImplemented,
        .httpVersionNotSupported,
        .badRequest,
        .streamCapacityReached,
        .userAlreadyExists,
        .userBanned,
        .subscriptionLimit,
        .messageTooLarge,
        .clientMsgIdConflict,
        .pinLimit,
        .reactionNotFound,
        .messageNotFound,
        .reactionTypeLimit,
        .groupJoinForbidden,
        .bigGroupRestricted,
        .roomAttributeOwned,
        .roomAttributeNotFound,
        .memberAttributePairsExceeded,
        .rejectedByHook,
        .hookUnavailable,
        .hookPatchInvalid,
        .beforeHookTaken,
        .webhookLimit,
        .callNoInvitee,
        .callUserLimit,
        .pushNotConfigured,
        .reportExists,
        .reportNotFound,
        .reportClosed,
        .invalidBlocklistEntry,
        .blocklistExists,
        .blocklistLimit,
        .legalHold,
        .scheduledLimit,
        .jobNotFound,
        .jobFinished,
        .uploadProtocolError,
        .scheduledNotPending,
    ]
}
