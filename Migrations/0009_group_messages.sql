-- Group messages (API.md §11.1 group branch), tips messages (§9.8), group conversation entries (§12) and the
-- "member at write time" rule of group message events (§21 item 44).
--
-- A group message is one `messages` row in the group's own sequence (conversation_seqs 'group' / group_id) and
-- one event, whatever the group's size: nothing per member is written at send time.
--
-- * Conversation entries of members follow the group's head: while `follows_group` is true an entry's last_seq,
--   last_ts and order come from conversation_seqs (read time), and unread counts and mentions are derived from
--   read_seq as for peers. Leaving, being kicked and dismissal freeze the entry (last_seq/last_ts copied, the flag
--   cleared): that is what `disabled` means.
-- * Group message events carry no audience array: `to_group_members` says "the group's members when this event
--   was written". Membership intervals are stamped with event ids (the id order is the commit order of an app's
--   events), so a reader decides exactly: user U saw event k of group G iff U joined G at an event < k and had
--   not left at an event < k.

ALTER TABLE events ADD COLUMN to_group_members boolean NOT NULL DEFAULT false;

-- The event that recorded a member's join (group.created or group.member_joined). NULL only inside the joining
-- transaction, until its event is written (the trigger below stamps it); members from before this migration are
-- stamped 0 (members since the start of the log).
ALTER TABLE group_members ADD COLUMN joined_event bigint;
UPDATE group_members SET joined_event = 0;
CREATE INDEX group_members_unstamped ON group_members (app_id, group_id) WHERE joined_event IS NULL;

-- Past memberships: written when a member row is deleted (leave, kick, hard user delete), stamped with the
-- group.member_left event by the trigger below.
CREATE TABLE group_member_history (
    app_id       text NOT NULL REFERENCES apps ON DELETE CASCADE,
    group_id     text NOT NULL,
    user_id      text NOT NULL,
    joined_event bigint NOT NULL,
    left_event   bigint,                    -- NULL only inside the leaving transaction
    PRIMARY KEY (app_id, group_id, user_id, joined_event)
);
CREATE INDEX group_member_history_unstamped ON group_member_history (app_id, group_id) WHERE left_event IS NULL;

CREATE FUNCTION parley_stamp_membership() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.type = 'group.member_left' THEN
        UPDATE group_member_history SET left_event = NEW.id
        WHERE app_id = NEW.app_id AND group_id = NEW.group_id AND left_event IS NULL;
    ELSE
        UPDATE group_members SET joined_event = NEW.id
        WHERE app_id = NEW.app_id AND group_id = NEW.group_id AND joined_event IS NULL;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER events_stamp_membership AFTER INSERT ON events FOR EACH ROW
    WHEN (NEW.type IN ('group.created', 'group.member_joined', 'group.member_left'))
    EXECUTE FUNCTION parley_stamp_membership();

-- Whether `p_user` was a member of `p_group` when event `p_event` was written.
CREATE FUNCTION parley_member_at(p_app text, p_group text, p_user text, p_event bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM group_members m
                   WHERE m.app_id = p_app AND m.group_id = p_group AND m.user_id = p_user
                     AND coalesce(m.joined_event, 0) < p_event)
        OR EXISTS (SELECT 1 FROM group_member_history h
                   WHERE h.app_id = p_app AND h.group_id = p_group AND h.user_id = p_user
                     AND h.joined_event < p_event AND h.left_event > p_event)
$$;

ALTER TABLE conversations ADD COLUMN follows_group boolean NOT NULL DEFAULT false;
-- A group send un-deletes the deleted entries of its group (they reappear on the next message, §12): few rows,
-- found through this index without touching the others.
CREATE INDEX conversations_group_deleted ON conversations (app_id, thread_id) WHERE deleted AND follows_group;

-- parley_send_message with the group branch (peer behaviour unchanged). Group: p_conv_id = p_to = group_id.
-- Extra outcomes: 'group_dismissed', 'not_member', 'receipt_group_too_large'.
CREATE OR REPLACE FUNCTION parley_send_message(
    p_app text, p_now bigint, p_conv_type text, p_conv_id text, p_from text, p_to text, p_message_id text,
    p_client_msg_id text, p_hash text, p_stored boolean, p_type int, p_body text, p_extended_data text,
    p_mention_ids text[], p_mention_all boolean, p_mention_notify boolean, p_reply text, p_root_message_id text,
    p_reply_missing boolean, p_priority int, p_need_receipt boolean, p_no_unread boolean, p_repeat_count int,
    p_push text, p_skip_checks boolean, p_blacklist_error boolean, p_friend_only boolean, p_sensitive_reject boolean,
    p_json_head text, p_json_tail text, p_combine_id text, p_combine_items text[]
) RETURNS TABLE (outcome text, message_id text, seq bigint, ts bigint, suppressed text, dup_conv_type text,
                 dup_conv_id text, dup_message text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    k message_keys%ROWTYPE;
    g groups%ROWTYPE;
    v_group boolean := p_conv_type = 'group';
    v_role int;
    v_member_muted bigint;
    v_muted bigint;
    v_deleted bigint;
    v_seq bigint;
    v_ts bigint := p_now;
    v_suppressed text;
    v_json text;
    v_head bigint;
    v_reply_count int;
BEGIN
    -- Step 3: client_msg_id dedupe.
    IF p_client_msg_id IS NOT NULL THEN
        SELECT * INTO k FROM message_keys
        WHERE message_keys.app_id = p_app AND message_keys.sender = p_from AND message_keys.client_msg_id = p_client_msg_id;
        IF FOUND THEN
            RETURN QUERY SELECT CASE WHEN k.content_hash = p_hash THEN 'duplicate' ELSE 'conflict' END,
                k.message_id, k.seq, k.timestamp, NULL::text, k.conv_type, k.conv_id, k.message;
            RETURN;
        END IF;
    END IF;
    -- Step 4: existence.
    SELECT u.muted_until, u.deleted_at INTO v_muted, v_deleted FROM users u WHERE u.app_id = p_app AND u.user_id = p_from;
    IF NOT FOUND OR v_deleted IS NOT NULL THEN
        RETURN QUERY SELECT 'from_not_found', NULL::text, NULL::bigint, NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::text;
        RETURN;
    END IF;
    IF v_group THEN
        SELECT * INTO g FROM groups WHERE groups.app_id = p_app AND groups.group_id = p_to;
        IF NOT FOUND THEN
            RETURN QUERY SELECT 'to_not_found', NULL::text, NULL::bigint, NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::text;
            RETURN;
        END IF;
        IF g.dismissed_at IS NOT NULL THEN
            RETURN QUERY SELECT 'group_dismissed', NULL::text, NULL::bigint, NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::text;
            RETURN;
        END IF;
    ELSIF NOT EXISTS (SELECT 1 FROM users u WHERE u.app_id = p_app AND u.user_id = p_to AND u.deleted_at IS NULL) THEN
        RETURN QUERY SELECT 'to_not_found', NULL::text, NULL::bigint, NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::text;
        RETURN;
    END IF;
    IF p_reply_missing THEN
        RETURN QUERY SELECT 'reply_not_found', NULL::text, NULL::bigint, NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::text;
        RETURN;
    END IF;
    IF v_group AND p_need_receipt AND (g.is_big_group OR g.member_count > 500) THEN
        RETURN QUERY SELECT 'receipt_group_too_large', NULL::text, NULL::bigint, NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::text;
        RETURN;
    END IF;
    -- Step 5: policy (a) global mute, (b) group membership, (c) group and member mute, (d) blacklist,
    -- (e) friend-only, (f) sensitive words.
    IF NOT p_skip_checks THEN
        IF v_muted = -1 OR v_muted > p_now THEN
            RETURN QUERY SELECT 'muted', NULL::text, NULL::bigint, NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::text;
            RETURN;
        END IF;
        IF v_group THEN
            SELECT gm.role, gm.muted_until INTO v_role, v_member_muted
            FROM group_members gm WHERE gm.app_id = p_app AND gm.group_id = p_to AND gm.user_id = p_from;
            IF NOT FOUND THEN
                RETURN QUERY SELECT 'not_member', NULL::text, NULL::bigint, NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::text;
                RETURN;
            END IF;
            IF v_member_muted = -1 OR v_member_muted > p_now OR (
                g.mute_mode <> 'none' AND (g.mute_expires_at = -1 OR g.mute_expires_at > p_now) AND v_role <> 1
                AND (g.mute_mode = 'all' OR (g.mute_mode = 'normal' AND v_role >= 3)
                     OR (g.mute_mode = 'custom' AND v_role = ANY(g.mute_roles)))
            ) THEN
                RETURN QUERY SELECT 'muted', NULL::text, NULL::bigint, NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::text;
                RETURN;
            END IF;
        ELSE
            IF EXISTS (SELECT 1 FROM blacklist b WHERE b.app_id = p_app AND b.user_id = p_to AND b.blocked_id = p_from) THEN
                IF p_blacklist_error THEN
                    RETURN QUERY SELECT 'blocked', NULL::text, NULL::bigint, NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::text;
                    RETURN;
                END IF;
                v_suppressed := 'blacklist';   -- silent: accepted, delivered to nobody; later checks are skipped
            END IF;
            IF v_suppressed IS NULL AND p_friend_only AND (
                SELECT count(*) FROM friends f
                WHERE f.app_id = p_app AND ((f.user_id = p_from AND f.friend_id = p_to) OR (f.user_id = p_to AND f.friend_id = p_from))
            ) < 2 THEN
                RETURN QUERY SELECT 'not_friends', NULL::text, NULL::bigint, NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::text;
                RETURN;
            END IF;
        END IF;
        IF v_suppressed IS NULL AND p_sensitive_reject THEN
            RETURN QUERY SELECT 'sensitive', NULL::text, NULL::bigint, NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::text;
            RETURN;
        END IF;
    END IF;
    -- Step 7: commit. The seq head row is locked from here to the end of the statement's transaction.
    IF p_stored THEN
        INSERT INTO conversation_seqs AS h (app_id, conv_type, conv_id, last_seq, last_ts)
        VALUES (p_app, p_conv_type, p_conv_id, 1, p_now)
        ON CONFLICT (app_id, conv_type, conv_id)
        DO UPDATE SET last_seq = h.last_seq + 1, last_ts = greatest(h.last_ts, p_now)
        RETURNING h.last_seq, h.last_ts INTO v_seq, v_ts;
    END IF;
    v_json := p_json_head || coalesce(v_seq::text, 'null') || ',"timestamp":' || v_ts || p_json_tail
        || CASE WHEN v_suppressed IS NULL THEN '' ELSE ',"suppressed":' || to_json(v_suppressed)::text END || '}';
    IF p_client_msg_id IS NOT NULL THEN
        INSERT INTO message_keys (app_id, sender, client_msg_id, content_hash, message_id, conv_type, conv_id, recipient,
                                  type, seq, timestamp, message)
        VALUES (p_app, p_from, p_client_msg_id, p_hash, p_message_id, p_conv_type, p_conv_id, p_to, p_type, v_seq, v_ts,
                CASE WHEN p_stored THEN NULL ELSE v_json END);
    END IF;
    IF p_stored THEN
        INSERT INTO messages (app_id, conv_type, conv_id, seq, message_id, client_msg_id, sender, recipient, type, body,
                              extended_data, mention_ids, mention_all, mention_notify, reply, root_message_id, priority,
                              need_receipt, no_unread, repeat_count, push, suppressed, timestamp)
        VALUES (p_app, p_conv_type, p_conv_id, v_seq, p_message_id, p_client_msg_id, p_from, p_to, p_type, p_body,
                p_extended_data, p_mention_ids, p_mention_all, p_mention_notify, p_reply, p_root_message_id, p_priority,
                p_need_receipt, p_no_unread, p_repeat_count, p_push, v_suppressed, v_ts);
        IF v_group THEN
            -- Members' entries follow the group head; only the sender's read position moves (own messages are
            -- never unread), and deleted entries of the group reappear.
            UPDATE conversations c SET read_seq = greatest(c.read_seq, v_seq), updated_at = p_now
            WHERE c.app_id = p_app AND c.user_id = p_from AND c.conv_type = 'group' AND c.conv_id = p_to AND c.follows_group;
            UPDATE conversations c SET deleted = false, updated_at = p_now
            WHERE c.app_id = p_app AND c.thread_id = p_conv_id AND c.deleted AND c.follows_group AND c.conv_type = 'group';
        ELSE
            -- Both entries in one statement, sender first: the sender has read up to its own message; the
            -- recipient's entry is created or un-deleted (not for suppressed messages). Both rows are locked under
            -- the seq head.
            INSERT INTO conversations AS c (app_id, user_id, conv_type, conv_id, thread_id, read_seq, last_seq, last_ts,
                                            order_key, created_at, updated_at)
            SELECT p_app, e.user_id, p_conv_type, e.other, p_conv_id, e.read_seq, v_seq, v_ts, v_ts, p_now, p_now
            FROM (VALUES (p_from, p_to, v_seq, 0), (p_to, p_from, 0::bigint, 1)) AS e(user_id, other, read_seq, ord)
            WHERE e.ord = 0 OR v_suppressed IS NULL
            ORDER BY e.ord
            ON CONFLICT (app_id, user_id, conv_type, conv_id) DO UPDATE SET
                read_seq = greatest(c.read_seq, excluded.read_seq),
                last_seq = greatest(c.last_seq, excluded.last_seq),
                last_ts = greatest(c.last_ts, excluded.last_ts),
                order_key = greatest(c.order_key, excluded.last_ts),
                deleted = false,
                updated_at = excluded.updated_at;
        END IF;
        IF p_root_message_id IS NOT NULL AND v_suppressed IS NULL THEN
            UPDATE messages m SET reply_count = m.reply_count + 1
            WHERE m.app_id = p_app AND m.message_id = p_root_message_id
            RETURNING m.reply_count INTO v_reply_count;
        END IF;
        IF p_combine_id IS NOT NULL THEN
            INSERT INTO message_combines (app_id, combine_id, position, message)
            SELECT p_app, p_combine_id, i.ord - 1, i.message FROM unnest(p_combine_items) WITH ORDINALITY AS i(message, ord);
        END IF;
    END IF;
    -- Events last (EventLog's rule: the app's event head is locked from here to commit): message.sent, then the
    -- root's reply count when this is a reply. Group events go to the members at write time (no audience array).
    UPDATE event_heads SET head = head + CASE WHEN v_reply_count IS NULL THEN 1 ELSE 2 END WHERE event_heads.app_id = p_app
    RETURNING head INTO v_head;
    INSERT INTO events (app_id, id, type, created_at, data, audience, group_id, to_group_members, order_key)
    VALUES (p_app, v_head - CASE WHEN v_reply_count IS NULL THEN 0 ELSE 1 END, 'message.sent', p_now,
            '{"message":' || v_json || '}',
            CASE WHEN v_group THEN '{}' WHEN v_suppressed IS NULL THEN ARRAY[p_from, p_to] ELSE ARRAY[p_from] END,
            CASE WHEN v_group THEN p_to END, v_group, p_conv_type || ':' || p_conv_id);
    IF v_reply_count IS NOT NULL THEN
        INSERT INTO events (app_id, id, type, created_at, data, audience, group_id, to_group_members, order_key)
        VALUES (p_app, v_head, 'message.reply_count_updated', p_now,
                json_build_object('root_message_id', p_root_message_id, 'conversation_type', p_conv_type, 'to', p_to,
                                  'reply_count', v_reply_count)::text,
                CASE WHEN v_group THEN '{}' ELSE ARRAY[p_from, p_to] END, CASE WHEN v_group THEN p_to END, v_group,
                p_conv_type || ':' || p_conv_id);
    END IF;
    RETURN QUERY SELECT 'sent', p_message_id, v_seq, v_ts, v_suppressed, p_conv_type, p_conv_id, NULL::text;
END $$;
