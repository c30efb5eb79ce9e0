-- The message lifecycle (API.md §11.5, §11.6): revoke, edit with history, delete for self or everyone, pins, reactions,
-- and the reply tree's reads.
--
-- * Revoke rewrites the row in place (same message_id, seq, sender, timestamp): type 31 with the revoke body; the
--   original text of a type-1 message moves to `original_text`, rendered inside the body only for the original sender
--   and the app key.
-- * Edits bump `edit_count` and stamp `edited_at`/`editor_id`; `message_edits` keeps every version (1 = the original,
--   saved by the first edit).
-- * Delete for self hides a message from one user (`message_hidden`, keyed by the conversation position the
--   history and unread queries scan); delete for everyone makes the row a tombstone (`deleted`, body null).
-- * `pinned_at` / `pinned_by` (null by with a time: pinned by the app); `reactions` holds the message's reaction summary
--   as rendered (`[{reaction_type, count, user_ids}]`, recomputed from `message_reactions` under the message's row lock
--   by every change), so a history page copies it like any other cell.

ALTER TABLE messages
    ADD COLUMN edited_at     bigint,
    ADD COLUMN editor_id     text,
    ADD COLUMN edit_count    int NOT NULL DEFAULT 0,
    ADD COLUMN pinned_at     bigint,
    ADD COLUMN pinned_by     text,
    ADD COLUMN reactions     text NOT NULL DEFAULT '[]',
    ADD COLUMN original_text text;

-- Replies of a message (revoke and delete switch their `reply.state`), and the messages of a reply tree (reply counts,
-- GET …/replies).
CREATE INDEX messages_reply_to ON messages (app_id, ((reply::json) ->> 'message_id')) WHERE reply IS NOT NULL;
CREATE INDEX messages_by_root ON messages (app_id, root_message_id, seq) WHERE root_message_id IS NOT NULL;
-- The pinned messages of a conversation (the 20-pin limit, GET …/pins).
CREATE INDEX messages_pinned ON messages (app_id, conv_type, conv_id) WHERE pinned_at IS NOT NULL;

CREATE TABLE message_edits (
    app_id        text NOT NULL,
    message_id    text NOT NULL,
    version       int NOT NULL,            -- 1 = the original
    body          text NOT NULL,
    extended_data text NOT NULL,
    edited_at     bigint NOT NULL,         -- version 1: the message's timestamp
    editor_id     text,                    -- version 1: the sender; null: the app
    PRIMARY KEY (app_id, message_id, version),
    FOREIGN KEY (app_id, message_id) REFERENCES messages (app_id, message_id) ON DELETE CASCADE
);

CREATE TABLE message_reactions (
    app_id        text NOT NULL,
    message_id    text NOT NULL,
    reaction_type text NOT NULL,
    user_id       text NOT NULL,
    reacted_at    bigint NOT NULL,
    PRIMARY KEY (app_id, message_id, reaction_type, user_id),
    FOREIGN KEY (app_id, message_id) REFERENCES messages (app_id, message_id) ON DELETE CASCADE
);
-- GET …/reactions/{type}/users: by reacted_at, then user_id.
CREATE INDEX message_reactions_users ON message_reactions (app_id, message_id, reaction_type, reacted_at, user_id COLLATE "C");

CREATE TABLE message_hidden (
    app_id     text NOT NULL,
    user_id    text NOT NULL,
    conv_type  text NOT NULL,
    conv_id    text NOT NULL,
    seq        bigint NOT NULL,
    message_id text NOT NULL,
    PRIMARY KEY (app_id, user_id, conv_type, conv_id, seq),
    FOREIGN KEY (app_id, message_id) REFERENCES messages (app_id, message_id) ON DELETE CASCADE
);
CREATE INDEX message_hidden_message ON message_hidden (app_id, message_id);
