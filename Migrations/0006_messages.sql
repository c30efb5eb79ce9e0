-- The message store, conversation sequences, client_msg_id dedupe keys, combine snapshots and per-user
-- conversation entries (API.md §11, §12), plus parley_send_message: one send = one statement (DESIGN.md "One
-- round trip"): dedupe, existence and policy checks, seq allocation, the message row, both conversation entries
-- and the message.sent event, committed together.
--
-- One row per message and one sequence per conversation: `conv_type` is 'peer' | 'group' | 'room' and `conv_id`
-- is, for peers, the unordered pair '<lower user_id> <higher user_id>' (user ids never contain a space) and for
-- groups and rooms their id. Unread counts and mentions are derived from a user's `read_seq` (never one row per
-- member per message), so group messages reuse these tables unchanged.
--
-- Hard user delete (API.md §4): the user's own conversation entries cascade with the users row; messages are the
-- other side's history, so they stay and the ones the user sent become tombstones (trigger below); the user's
-- client_msg_id keys are dropped so a user created again with the same id starts afresh.

-- One row per conversation that has a stored message: the head of its sequence. The row lock serialises the
-- sends of one conversation from seq allocation to commit, so seqs are gap-free and timestamps non-decreasing.
CREATE TABLE conversation_seqs (
    app_id    text NOT NULL REFERENCES apps ON DELETE CASCADE,
    conv_type text NOT NULL,
    conv_id   text NOT NULL,
    last_seq  bigint NOT NULL,
    last_ts   bigint NOT NULL,              -- timestamp of last_seq: the next one is never smaller
    PRIMARY KEY (app_id, conv_type, conv_id)
);

CREATE TABLE messages (
    app_id          text NOT NULL REFERENCES apps ON DELETE CASCADE,
    conv_type       text NOT NULL,
    conv_id         text NOT NULL,
    seq             bigint NOT NULL,
    message_id      text NOT NULL,
    client_msg_id   text,
    sender          text NOT NULL,          -- `from`
    recipient       text NOT NULL,          -- `to`: peer user, group or room id
    type            int NOT NULL,
    body            text,                   -- normalised body JSON; null for tombstones
    extended_data   text NOT NULL DEFAULT '',
    mention_ids     text[] NOT NULL DEFAULT '{}',
    mention_all     boolean NOT NULL DEFAULT false,
    mention_notify  boolean NOT NULL DEFAULT true,
    reply           text,                   -- the `reply` object JSON (snapshot at send time)
    root_message_id text,
    reply_count     int NOT NULL DEFAULT 0,
    priority        smallint NOT NULL DEFAULT 2,
    need_receipt    boolean NOT NULL DEFAULT false,
    no_unread       boolean NOT NULL DEFAULT false,
    repeat_count    int NOT NULL DEFAULT 1,
    push            text,                   -- normalised PushConfig JSON, for the push bridge
    suppressed      text,                   -- null, 'blacklist' or 'hook_drop': visible to the sender and app only
    deleted         boolean NOT NULL DEFAULT false,
    timestamp       bigint NOT NULL,
    PRIMARY KEY (app_id, conv_type, conv_id, seq)
);
CREATE UNIQUE INDEX messages_by_id ON messages (app_id, message_id);
-- Hard user delete turns the user's messages into tombstones.
CREATE INDEX messages_by_sender ON messages (app_id, sender);

-- client_msg_id dedupe keys (API.md §1.6): kept forever, also after the message is deleted or purged. `message`
-- holds the whole Message JSON of unstored messages (they have no row to read back).
CREATE TABLE message_keys (
    app_id        text NOT NULL REFERENCES apps ON DELETE CASCADE,
    sender        text NOT NULL,
    client_msg_id text NOT NULL,
    content_hash  text NOT NULL,
    message_id    text NOT NULL,
    conv_type     text NOT NULL,
    conv_id       text NOT NULL,
    recipient     text NOT NULL,
    type          int NOT NULL,
    seq           bigint,
    timestamp     bigint NOT NULL,
    message       text,
    PRIMARY KEY (app_id, sender, client_msg_id)
);

-- Snapshots of the messages a type-100 message combines, in combine order (API.md §11.4 `combined`).
CREATE TABLE message_combines (
    app_id     text NOT NULL REFERENCES apps ON DELETE CASCADE,
    combine_id text NOT NULL,
    position   int NOT NULL,
    message    text NOT NULL,               -- Message JSON as the sender saw it
    PRIMARY KEY (app_id, combine_id, position)
);

-- One user's entry for a peer or group conversation (API.md §12). `thread_id` is the messages.conv_id of its
-- messages. Unread counts and mentions are derived from read_seq and last_seq at read time.
CREATE TABLE conversations (
    app_id              text NOT NULL,
    user_id             text NOT NULL,
    conv_type           text NOT NULL,      -- 'peer' | 'group'
    conv_id             text NOT NULL,      -- peer: the other user; group: group_id
    thread_id           text NOT NULL,
    read_seq            bigint NOT NULL DEFAULT 0,
    last_seq            bigint NOT NULL DEFAULT 0,   -- highest seq visible to this user
    last_ts             bigint NOT NULL DEFAULT 0,   -- its timestamp
    order_key           bigint NOT NULL,             -- max(last_ts, draft_updated_at, created_at)
    pinned              boolean NOT NULL DEFAULT false,
    notification_status text NOT NULL DEFAULT 'notify',
    draft               text NOT NULL DEFAULT '',
    draft_updated_at    bigint NOT NULL DEFAULT 0,
    marks               int[] NOT NULL DEFAULT '{}',
    cleared_seq         bigint NOT NULL DEFAULT 0,
    deleted             boolean NOT NULL DEFAULT false,
    created_at          bigint NOT NULL,
    updated_at          bigint NOT NULL,
    PRIMARY KEY (app_id, user_id, conv_type, conv_id),
    FOREIGN KEY (app_id, user_id) REFERENCES users ON DELETE CASCADE
);
-- The list: by order_key desc, then type desc, then id desc (walked backwards).
CREATE INDEX conversations_listing ON conversations (app_id, user_id, order_key, conv_type, conv_id);

-- Hard user delete: the user's messages stay in the other side's history as tombstones (seq kept).
CREATE FUNCTION parley_user_hard_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE messages SET deleted = true, body = NULL
    WHERE app_id = OLD.app_id AND sender = OLD.user_id AND NOT deleted;
    DELETE FROM message_keys WHERE app_id = OLD.app_id AND sender = OLD.user_id;
    RETURN OLD;
END $$;
CREATE TRIGGER users_hard_deleted AFTER DELETE ON users FOR EACH ROW EXECUTE FUNCTION parley_user_hard_deleted();

-- One send (API.md §11.1 steps 3–5 and 7) in one statement. The caller validated the request (step 2), ran the
-- sensitive-word filter (passing `p_sensitive_reject` so that failure keeps its place in the check order) and
-- resolved reply_to / combine ids (`p_reply_missing`). The Message JSON comes as a template: `p_json_head` ends
-- with `"seq":`, `p_json_tail` runs from `,"body":` to the last member; the seq and timestamp chosen here go
-- between them and `suppressed` after them.
--
-- Returns one row: outcome ('sent', 'duplicate', 'conflict', 'from_not_found', 'to_not_found', 'reply_not_found',
-- 'muted', 'blocked', 'not_friends', 'sensitive'), the message's id, seq, timestamp, suppression and, for
-- duplicates, the stored conversation and unstored JSON. A concurrent first send with the same client_msg_id
-- makes this statement fail with unique_violation; the caller runs it again and gets 'duplicate'.
CREATE FUNCTION parley_send_message(
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
    IF NOT EXISTS (SELECT 1 FROM users u WHERE u.app_id = p_app AND u.user_id = p_to AND u.deleted_at IS NULL) THEN
        RETURN QUERY SELECT 'to_not_found', NULL::text, NULL::bigint, NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::text;
        RETURN;
    END IF;
    IF p_reply_missing THEN
        RETURN QUERY SELECT 'reply_not_found', NULL::text, NULL::bigint, NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::text;
        RETURN;
    END IF;
    -- Step 5: policy (a) global mute, (d) blacklist, (e) friend-only, (f) sensitive words.
    IF NOT p_skip_checks THEN
        IF v_muted = -1 OR v_muted > p_now THEN
            RETURN QUERY SELECT 'muted', NULL::text, NULL::bigint, NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::text;
            RETURN;
        END IF;
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
        -- Both entries in one statement, sender first: the sender has read up to its own message; the recipient's
        -- entry is created or un-deleted (not for suppressed messages). Both rows are locked under the seq head.
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
    -- root's reply count when this is a reply.
    UPDATE event_heads SET head = head + CASE WHEN v_reply_count IS NULL THEN 1 ELSE 2 END WHERE event_heads.app_id = p_app
    RETURNING head INTO v_head;
    INSERT INTO events (app_id, id, type, created_at, data, audience, order_key)
    VALUES (p_app, v_head - CASE WHEN v_reply_count IS NULL THEN 0 ELSE 1 END, 'message.sent', p_now,
            '{"message":' || v_json || '}',
            CASE WHEN v_suppressed IS NULL THEN ARRAY[p_from, p_to] ELSE ARRAY[p_from] END, p_conv_type || ':' || p_conv_id);
    IF v_reply_count IS NOT NULL THEN
        INSERT INTO events (app_id, id, type, created_at, data, audience, order_key)
        VALUES (p_app, v_head, 'message.reply_count_updated', p_now,
                json_build_object('root_message_id', p_root_message_id, 'conversation_type', p_conv_type, 'to', p_to,
                                  'reply_count', v_reply_count)::text,
                ARRAY[p_from, p_to], p_conv_type || ':' || p_conv_id);
    END IF;
    RETURN QUERY SELECT 'sent', p_message_id, v_seq, v_ts, v_suppressed, p_conv_type, p_conv_id, NULL::text;
END $$;
