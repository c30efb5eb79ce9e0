-- Webhooks (API.md §15): endpoints, and the delivery outbox written in the transaction that stores the events.
--
-- After-event deliveries are rows of `webhook_deliveries`, one per event and matching enabled endpoint, inserted by
-- a statement trigger on `events`: every path that stores events (the sequencer moving pending events, the message
-- writer numbering its own) gets them in the same transaction, so a crash after the commit loses none and a rollback
-- sends none. Delivery workers (Sources/ParleyAPI/Outbound/WebhookDispatcher.swift, one per node) lease due rows
-- with `FOR UPDATE SKIP LOCKED`, attempt them without holding a transaction, and record the outcome.

CREATE TABLE webhooks (
    app_id                 text NOT NULL REFERENCES apps ON DELETE CASCADE,
    webhook_id             text NOT NULL,
    url                    text NOT NULL,
    event_types            text[] NOT NULL,
    -- `whsec_` + base64: kept as is because it signs (HMAC needs the key itself); shown only on create and rotate.
    secret                 text NOT NULL,
    -- During a rotation the old secret still signs (the second signature) until `previous_secret_until`.
    previous_secret        text,
    previous_secret_until  bigint,
    enabled                boolean NOT NULL,
    disabled_reason        text,
    description            text NOT NULL DEFAULT '',
    timeout_ms             int NOT NULL,
    fail_open              boolean NOT NULL,
    disable_after_failures int NOT NULL,
    consecutive_failures   int NOT NULL DEFAULT 0,
    created_at             bigint NOT NULL,
    updated_at             bigint NOT NULL,
    PRIMARY KEY (app_id, webhook_id)
);
CREATE INDEX webhooks_created ON webhooks (app_id, created_at, webhook_id);
-- At most one enabled endpoint per before-event type (§15.3); the routes answer 409 7000504 first, this holds races.
CREATE TABLE webhook_before_hooks (
    app_id     text NOT NULL,
    hook_type  text NOT NULL,
    webhook_id text NOT NULL,
    PRIMARY KEY (app_id, hook_type),
    FOREIGN KEY (app_id, webhook_id) REFERENCES webhooks ON DELETE CASCADE
);

CREATE SEQUENCE webhook_delivery_ids;

CREATE TABLE webhook_deliveries (
    app_id           text NOT NULL,
    id               bigint NOT NULL DEFAULT nextval('webhook_delivery_ids'),
    -- Opaque, fixed width so that its text order is the creation order.
    delivery_id      text GENERATED ALWAYS AS ('dlv_' || lpad(to_hex(id), 16, '0')) STORED,
    webhook_id       text NOT NULL,
    kind             text NOT NULL,             -- after, before, ping
    event_id         bigint,                    -- after: the event
    ref_id           text,                      -- ping: its ping_… id; before: the hook call id
    event_type       text NOT NULL,
    order_key        text,                      -- after: the event's ordering key (§15.2)
    body             text NOT NULL,             -- the request body, byte for byte on every attempt
    status           text NOT NULL,             -- pending, succeeded, failed, dead
    attempts         int NOT NULL DEFAULT 0,
    attempt_log      jsonb NOT NULL DEFAULT '[]',
    next_attempt_at  bigint,
    last_attempt_at  bigint,
    last_status_code int,
    last_error       text,
    response_excerpt text,
    duration_ms      int,
    decision         text,                      -- before: allow, modify, reject, drop, timeout, error
    -- A retried dead delivery gets one attempt and goes back to dead if it fails (§15.1).
    single_attempt   boolean NOT NULL DEFAULT false,
    -- The endpoint is disabled: the delivery keeps its status but is not attempted and does not age (§15.2).
    paused           boolean NOT NULL DEFAULT false,
    -- A worker holds it until then (real time, not the server clock: a test clock that jumps must not free it).
    leased_until     timestamptz,
    created_at       bigint NOT NULL,
    PRIMARY KEY (id),
    FOREIGN KEY (app_id, webhook_id) REFERENCES webhooks ON DELETE CASCADE
);
CREATE INDEX webhook_deliveries_list ON webhook_deliveries (app_id, webhook_id, created_at DESC, id DESC);
CREATE UNIQUE INDEX webhook_deliveries_delivery_id ON webhook_deliveries (delivery_id);
-- What the workers scan: open deliveries that may be due.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at, id)
    WHERE status IN ('pending', 'failed') AND NOT paused;
-- The ordering rule: the earliest open delivery of an endpoint and key goes first.
CREATE INDEX webhook_deliveries_open_key ON webhook_deliveries (app_id, webhook_id, order_key, event_id)
    WHERE status IN ('pending', 'failed');
-- Rows are inserted and updated at the send rate: vacuum and analyze it often, so that its statistics follow a backlog
-- that grows from nothing to tens of thousands of rows in seconds (the claim is cheap only through the due index).
ALTER TABLE webhook_deliveries SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000,
                                    autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 1000,
                                    autovacuum_vacuum_cost_delay = 0);
-- Retention of finished deliveries (7 days).
CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (created_at) WHERE status IN ('succeeded', 'dead');

CREATE INDEX webhooks_enabled ON webhooks (app_id) WHERE enabled;
-- The outbox trigger and the matching function: Migrations/functions/parley_webhook_outbox.sql, parley_webhook_selects.sql.
