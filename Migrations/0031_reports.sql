-- Reports and the review queue (docs/moderation.md#reports-and-the-review-queue). One row per report; every report on
-- a target shares the target's snapshot while any report on it is open (the first open report took it), and an
-- action closes every open report on the target together.
CREATE TABLE reports (
    app_id         text   NOT NULL REFERENCES apps ON DELETE CASCADE,
    report_id      text   NOT NULL,
    status         text   NOT NULL DEFAULT 'open',
    reason         text   NOT NULL,
    comment        text   NOT NULL DEFAULT '',
    -- Null for an automatic report (a blocklist flag).
    reporter_id    text,
    target_type    text   NOT NULL,
    target_id      text   NOT NULL,
    -- The message's sender or the reported user (the `user_id` filter of the queue); null for a group.
    target_user_id text,
    snapshot       jsonb  NOT NULL,
    created_at     bigint NOT NULL,
    resolved_at    bigint,
    actions        jsonb  NOT NULL DEFAULT '[]',
    PRIMARY KEY (app_id, report_id)
);
-- One open report per reporter and target (409 report_exists).
CREATE UNIQUE INDEX reports_open_per_reporter ON reports (app_id, target_type, target_id, reporter_id)
    WHERE status = 'open' AND reporter_id IS NOT NULL;
-- The queue: open reports first, then closed ones, each oldest first (its pages are ranges of this index).
CREATE INDEX reports_queue ON reports (app_id, (CASE WHEN status = 'open' THEN 0 ELSE 1 END), created_at, report_id);
-- The open reports alone (the `/metrics` gauge counts them per app without reading closed ones).
CREATE INDEX reports_open ON reports (app_id, created_at) WHERE status = 'open';
-- The reports on a target; the reports about a user.
CREATE INDEX reports_target ON reports (app_id, target_type, target_id, created_at);
CREATE INDEX reports_user ON reports (app_id, target_user_id, created_at, report_id);

-- Blocked and flagged content per user (docs/moderation.md#automatic-escalation): one row per hit, so the count
-- within `automod_window_s` is the same on every node. `escalated` strikes were already acted on.
CREATE TABLE automod_strikes (
    app_id    text    NOT NULL REFERENCES apps ON DELETE CASCADE,
    user_id   text    NOT NULL,
    strike_id bigint  GENERATED ALWAYS AS IDENTITY,
    at        bigint  NOT NULL,
    escalated boolean NOT NULL DEFAULT false,
    PRIMARY KEY (app_id, user_id, strike_id)
);

-- The moderation log's filters by moderator and by action (GET /v1/moderation/log), newest first: without them a rare
-- moderator or action walks the app's whole log.
CREATE INDEX moderation_actions_moderator ON moderation_actions (app_id, moderator, at DESC, action_id DESC);
CREATE INDEX moderation_actions_action ON moderation_actions (app_id, action, at DESC, action_id DESC);

-- The moderation log goes with its app (Migrations/0028 left it without a key to apps, so a deleted app's log stayed).
ALTER TABLE moderation_actions ADD CONSTRAINT moderation_actions_app FOREIGN KEY (app_id) REFERENCES apps ON DELETE CASCADE;
