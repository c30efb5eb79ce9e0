-- The event log is the webhook outbox: one cursor per endpoint instead of one delivery row per event written in the
-- event's transaction.
--
-- Until now a statement trigger on `events` (Migrations/functions/parley_webhook_outbox.sql) inserted a delivery row
-- for every event and matching endpoint inside the writing transaction, and the dispatcher leased, then updated it:
-- three writes of a ~700-byte row and its five indexes per delivery, the first of them on the send path. The
-- events are durable in `events` already, in id order, so the log itself is the outbox: each endpoint's cursor says
-- up to which event every delivery is written. The dispatcher of the node holding the cursor takes new events (from
-- memory for its own node's sends, from the log otherwise), attempts them, and writes each delivery once, with its
-- first attempt, moving the cursor in the same transaction. A crash before that transaction commits sends the
-- events after the cursor again (at least once; receivers dedupe on `webhook-id`); nothing is lost.
--
-- A delivery that cannot be attempted now (its ordering key waits on an open delivery, the queue in memory is full,
-- the endpoint was disabled meanwhile) is written as `pending` and leased from the table as before.

CREATE TABLE webhook_cursors (
    app_id     text NOT NULL,
    webhook_id text NOT NULL,
    -- Every event <= event_id that the endpoint selects has its delivery row (or was written while it was disabled).
    event_id   bigint NOT NULL,
    -- The node whose dispatcher takes the endpoint's events, and until when (real time; renewed every second).
    holder     text,
    held_until timestamptz,
    -- Set when the endpoint is disabled: the newest event id committed while it was enabled. Re-enabling writes the
    -- deliveries of (event_id, paused_at] that the dispatcher had not written, then moves event_id to the head.
    paused_at  bigint,
    PRIMARY KEY (app_id, webhook_id),
    FOREIGN KEY (app_id, webhook_id) REFERENCES webhooks ON DELETE CASCADE
);
-- Updated every second and every dispatcher round: keep the updates HOT.
ALTER TABLE webhook_cursors SET (fillfactor = 50);

-- One after-event delivery per endpoint and event: a dispatcher that replays the events after its cursor (after a
-- crash, or when another node takes the cursor over) writes each delivery once (ON CONFLICT DO NOTHING), whatever it
-- had written before the cursor moved. (Not CONCURRENTLY: that waits for every other transaction, among them the
-- other nodes starting at the same moment and waiting for the migration lock, a deadlock.)
CREATE UNIQUE INDEX webhook_deliveries_event ON webhook_deliveries (app_id, webhook_id, event_id) WHERE kind = 'after';

-- Existing endpoints start after the newest event: the trigger wrote the rows of everything before (it is dropped
-- when the function files are applied, right after this migration; an event between the two is attempted twice, one
-- row).
INSERT INTO webhook_cursors (app_id, webhook_id, event_id, paused_at)
SELECT w.app_id, w.webhook_id, coalesce((SELECT max(e.id) FROM events e WHERE e.app_id = w.app_id), 0),
       CASE WHEN w.enabled THEN NULL ELSE coalesce((SELECT max(e.id) FROM events e WHERE e.app_id = w.app_id), 0) END
FROM webhooks w;
