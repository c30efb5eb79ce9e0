-- Retention policies, legal holds and the purge run log (docs/retention.md).
--
-- * A policy's scope is every message of the app (`scope_type` 'app'), of one conversation type ('peer', 'group',
--   'room' with `conv_id` ''), or of one conversation (its `messages.conv_id`); one policy per scope, so a create of an
--   existing scope replaces it in place (its `policy_id` stays). The most specific policy of a message applies.
-- * A hold covers every message a user sent and every message of its peer conversations (`scope_type` 'user',
--   `target` the user id), or the messages of a conversation type / one conversation (`target` '' / the conv_id).
--   `parley_message_held` (functions/) is the one test of whether a message is held.
-- * A run is one purge (timer or request), dry or real; `finished_at` NULL while it runs.
-- New tables only: the previous release's binary never reads them.
CREATE TABLE retention_policies (
    app_id       text    NOT NULL REFERENCES apps ON DELETE CASCADE,
    policy_id    text    NOT NULL,
    scope_type   text    NOT NULL,            -- app | peer | group | room
    conv_id      text    NOT NULL DEFAULT '', -- '' for every conversation of the type (and for 'app')
    scope        jsonb   NOT NULL,            -- the scope as given
    max_age_days int     NOT NULL,
    purge_files  boolean NOT NULL,
    created_at   bigint  NOT NULL,
    updated_at   bigint  NOT NULL,
    PRIMARY KEY (app_id, policy_id),
    UNIQUE (app_id, scope_type, conv_id)
);

CREATE TABLE legal_holds (
    app_id     text   NOT NULL REFERENCES apps ON DELETE CASCADE,
    hold_id    text   NOT NULL,
    scope_type text   NOT NULL,               -- user | peer | group | room
    target     text   NOT NULL DEFAULT '',    -- the user id, a conv_id, or '' for every conversation of the type
    scope      jsonb  NOT NULL,
    reason     text   NOT NULL DEFAULT '',
    created_at bigint NOT NULL,
    PRIMARY KEY (app_id, hold_id)
);
-- parley_message_held's probe.
CREATE INDEX legal_holds_target ON legal_holds (app_id, scope_type, target);

CREATE TABLE retention_runs (
    app_id          text    NOT NULL REFERENCES apps ON DELETE CASCADE,
    run_id          text    NOT NULL,
    started_at      bigint  NOT NULL,
    finished_at     bigint,
    dry_run         boolean NOT NULL,
    policies        jsonb   NOT NULL DEFAULT '[]',
    messages_purged bigint  NOT NULL DEFAULT 0,
    files_purged    bigint  NOT NULL DEFAULT 0,
    held_skipped    bigint  NOT NULL DEFAULT 0,
    error           text,
    PRIMARY KEY (app_id, run_id)
);
-- GET /v1/retention/runs: newest first.
CREATE INDEX retention_runs_started ON retention_runs (app_id, started_at DESC, run_id DESC);

-- Hard user delete (Migrations/0006, 0022) tombstones the user's messages, except those a legal hold covers: they
-- stay as they were (docs/retention.md#legal-hold).
CREATE OR REPLACE FUNCTION parley_user_hard_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE messages SET deleted = true, body = NULL, search_text = NULL
    WHERE app_id = OLD.app_id AND sender = OLD.user_id AND NOT deleted
      AND NOT parley_message_held(app_id, conv_type, conv_id, sender);
    DELETE FROM message_keys WHERE app_id = OLD.app_id AND sender = OLD.user_id;
    RETURN OLD;
END $$;
