-- The one statement GET /v1/groups/g500/messages (20 newest, app key: no viewer) runs (MessageStore.history).
SELECT m.message_id, m.client_msg_id, m.type, m.conv_type, m.sender, m.recipient, m.seq, m.timestamp, m.body, m.extended_data, m.mention_ids, m.mention_all, m.reply, m.root_message_id, m.reply_count, m.priority, m.need_receipt, m.no_unread, m.repeat_count, m.push, m.suppressed, m.deleted
FROM messages m
WHERE m.app_id = 'default' AND m.conv_type = 'group' AND m.conv_id = 'g500'
  AND m.seq > 0 AND m.seq < 9223372036854775807 AND m.timestamp >= -9223372036854775808 AND m.timestamp < 9223372036854775807
  AND (NULL::int[] IS NULL OR m.type = ANY(NULL::int[]))
  AND (NULL::text IS NULL OR false OR m.suppressed IS NULL OR m.sender = NULL::text)
  AND (NULL::text IS NULL OR m.seq > coalesce((SELECT c.cleared_seq FROM conversations c
        WHERE c.app_id = 'default' AND c.user_id = NULL::text AND c.conv_type = 'group' AND c.conv_id = 'g500'), 0))
ORDER BY m.seq DESC LIMIT 21;
