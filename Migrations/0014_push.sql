-- The push bridge (API.md §16): where each app's planner stands in the event log, and the push attempts.
--
-- The bridge reads the event log like a webhook worker reads its outbox, but adds nothing to the writers: a node's
-- push worker (Sources/ParleyDomains/Push/PushBridge.swift) locks an app's cursor row with SKIP LOCKED, reads the
-- pushable events after it, decides each recipient (§16.1) and inserts the attempts, and moves the cursor, all in one
-- transaction; then it leases the pending attempts (SKIP LOCKED again), sends them without holding a transaction and
-- records each outcome. A crash before the commit plans the same events again; after it, every attempt is a row.

-- The planner's place per app: every event up to `event_id` is planned, or, while `user_after` is set, every event
-- before `event_id` and the recipients of event `event_id` up to `user_after` (a big group message or a broadcast is
-- planned one page of recipients per transaction). An app without a row starts at the beginning of its log.
CREATE TABLE push_cursors (
    app_id     text PRIMARY KEY REFERENCES apps ON DELETE CASCADE,
    event_id   bigint NOT NULL,
    user_after text
);
-- Existing apps start at their head: the messages stored before the bridge existed are not pushed now.
INSERT INTO push_cursors (app_id, event_id) SELECT app_id, head FROM event_heads;

CREATE TABLE push_attempts (
    app_id             text NOT NULL REFERENCES apps ON DELETE CASCADE,
    -- Sortable (time first), so the list's order is the creation order; also the generic format's `push_id`.
    attempt_id         text NOT NULL PRIMARY KEY,
    kind               text NOT NULL,          -- message, revoke, call, call_cancel, broadcast, application, test
    user_id            text NOT NULL,
    message_id         text,
    call_id            text,
    -- The candidates at decision time (a `rejected` answer names push keys).
    device_ids         text[] NOT NULL DEFAULT '{}',
    push_keys          text[] NOT NULL DEFAULT '{}',
    status             text NOT NULL,          -- pending, sent, rejected, failed, suppressed
    reason             text,
    gateway_status     int,
    rejected_push_keys text[] NOT NULL DEFAULT '{}',
    tries              int NOT NULL DEFAULT 0,
    -- The request, byte for byte on every try (§16.2), and its format; null for a suppressed attempt.
    url                text,
    format             text,
    body               text,
    next_attempt_at    bigint,
    -- A worker holds it until then (real time: a test clock that jumps must not free it).
    leased_until       timestamptz,
    created_at         bigint NOT NULL,
    updated_at         bigint NOT NULL
);
CREATE INDEX push_attempts_list ON push_attempts (app_id, created_at DESC, attempt_id DESC);
CREATE INDEX push_attempts_user ON push_attempts (app_id, user_id, created_at DESC, attempt_id DESC);
CREATE INDEX push_attempts_message ON push_attempts (app_id, message_id) WHERE message_id IS NOT NULL;
CREATE INDEX push_attempts_call ON push_attempts (app_id, call_id) WHERE call_id IS NOT NULL;
-- What the workers scan: pending attempts by due time.
CREATE INDEX push_attempts_due ON push_attempts (next_attempt_at, attempt_id) WHERE status = 'pending';
-- Retention (7 days, §16.3).
CREATE INDEX push_attempts_created ON push_attempts (created_at);
ALTER TABLE push_attempts SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000,
                               autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 1000,
                               autovacuum_vacuum_cost_delay = 0);
