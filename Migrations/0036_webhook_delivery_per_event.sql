-- migrate: no-transaction
-- One after-event delivery per endpoint and event: a dispatcher that replays the events after its cursor (after a
-- crash, or when another node takes the cursor over) writes each delivery once (ON CONFLICT DO NOTHING), whatever it
-- had written before the cursor moved. Built without blocking the table's writes.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS webhook_deliveries_event
    ON webhook_deliveries (app_id, webhook_id, event_id) WHERE kind = 'after';
