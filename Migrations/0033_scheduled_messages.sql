-- Scheduled messages (docs/scheduled-messages.md): a send accepted now (`send_at`) and sent at its time through the
-- ordinary send path, with the rules in force then.
--
-- * `request` is the send request as it will be sent (`POST /v1/messages`, or `POST /v1/messages/batch` when `batch`),
--   without `send_at` and with a `client_msg_id` (the caller's, or one derived from `scheduled_id`), so a send repeated
--   after a crash is a deduplicated duplicate, never a second message.
-- * A node claims due rows (`scheduled` with `send_at` ≤ now, or `sending` with `lease_until` past on the database's
--   clock: their node stopped mid-send) with `FOR UPDATE SKIP LOCKED`, marks them `sending`, sends them, and records
--   the outcome (`sent`, `failed`) afterwards.
CREATE TABLE scheduled_messages (
    app_id       text    NOT NULL REFERENCES apps ON DELETE CASCADE,
    scheduled_id text    NOT NULL,
    user_id      text    NOT NULL,            -- the sender (`from`)
    as_user      boolean NOT NULL,            -- scheduled with the sender's user token: sent with it, else as the app
    batch        boolean NOT NULL,
    request      jsonb   NOT NULL,
    send_at      bigint  NOT NULL,
    state        text    NOT NULL,            -- scheduled | sending | sent | failed | cancelled
    created_at   bigint  NOT NULL,
    updated_at   bigint  NOT NULL,
    sent_at      bigint,
    message_id   text,
    seq          bigint,
    results      jsonb,                       -- a batch's per-recipient answer
    problem      jsonb,                       -- why it failed
    attempts     int     NOT NULL DEFAULT 0,
    lease_until  bigint,                      -- database-clock ms, while `sending`
    PRIMARY KEY (app_id, scheduled_id)
);
-- GET /v1/scheduled_messages: newest first.
CREATE INDEX scheduled_messages_created ON scheduled_messages (app_id, created_at DESC, scheduled_id DESC);
-- The sweep's claim: what is due, and what a stopped node left sending.
CREATE INDEX scheduled_messages_due ON scheduled_messages (send_at) WHERE state = 'scheduled';
CREATE INDEX scheduled_messages_sending ON scheduled_messages (lease_until) WHERE state = 'sending';
-- The per-app limit and the backlog gauge: what is still to be sent.
CREATE INDEX scheduled_messages_pending ON scheduled_messages (app_id) WHERE state IN ('scheduled', 'sending');
