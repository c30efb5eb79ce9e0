-- The one statement GET /v1/users/u<a>/conversations/peer/u<b>/messages (20 newest, app key) runs
-- (MessageStore.historySQL, descending), with its parameters as that request binds them: viewer u<a>, no token user.
\set a random(1, 50)
\set d random(1, 49)
\set b (:a + :d - 1) % 50 + 1
SELECT m.message_id, m.client_msg_id, m.type, m.conv_type, m.sender, m.recipient, m.seq, m.timestamp, m.body, m.extended_data,
       m.mention_ids, m.mention_all, m.reply, m.root_message_id, m.reply_count, m.priority, m.need_receipt, m.no_unread,
       m.repeat_count, m.push, m.suppressed, m.deleted, m.edited_at, m.editor_id, m.edit_count, m.pinned_at, m.pinned_by,
       CASE WHEN NULL::text IS NULL OR m.reactions = '[]' THEN m.reactions ELSE NULL END,
       m.original_text, m.receipt_state, m.visible_to
FROM messages m
WHERE m.app_id = 'default' AND m.conv_type = 'peer' AND m.conv_id = least('u' || :a, 'u' || :b) || ' ' || greatest('u' || :a, 'u' || :b)
  AND m.seq > 0 AND m.seq < 9223372036854775807
  AND m.timestamp + 0 >= -9223372036854775808 AND m.timestamp + 0 < 9223372036854775807 AND (NULL::int[] IS NULL OR m.type = ANY(NULL::int[]))
  AND (('u' || :a)::text IS NULL OR false OR m.suppressed IS NULL OR m.sender = 'u' || :a)
  AND (('u' || :a)::text IS NULL OR m.visible_to IS NULL OR m.sender = 'u' || :a OR 'u' || :a = ANY(m.visible_to))
  AND (('u' || :a)::text IS NULL OR m.seq > coalesce((SELECT c.cleared_seq FROM conversations c
        WHERE c.app_id = 'default' AND c.user_id = 'u' || :a AND c.conv_type = 'peer' AND c.conv_id = 'u' || :b), 0))
  AND (NOT false OR EXISTS (SELECT 1 FROM groups g WHERE g.app_id = 'default' AND g.group_id = 'u' || :b AND g.dismissed_at IS NULL))
  AND (('u' || :a)::text IS NULL OR EXISTS (SELECT 1 FROM users u WHERE u.app_id = 'default' AND u.user_id = 'u' || :a AND u.deleted_at IS NULL))
  AND (('u' || :a)::text IS NULL OR false OR NOT EXISTS (SELECT 1 FROM message_hidden h
        WHERE h.app_id = 'default' AND h.user_id = 'u' || :a AND h.conv_type = 'peer'
          AND h.conv_id = least('u' || :a, 'u' || :b) || ' ' || greatest('u' || :a, 'u' || :b) AND h.seq = m.seq))
ORDER BY m.seq DESC LIMIT 21;
