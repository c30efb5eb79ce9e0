-- No trigger writes webhook deliveries any more: the event log is the outbox, read by each endpoint's cursor
-- (Migrations/0035_webhook_cursors.sql, Sources/ParleyAPI/Outbound/WebhookDispatcher.swift), so a transaction that
-- stores events does no webhook work at all, with or without endpoints.
--
-- The file stays, with the trigger's function reduced to nothing, so that a node of the previous release starting
-- against this database (a rollback) finds this file's text changed, re-applies its own copy and gets its trigger back;
-- a node of this release starting later drops it again. While both run, an event may be attempted twice (two
-- attempts, one delivery row: Migrations/0035); receivers deduplicate on `webhook-id`.
DROP TRIGGER IF EXISTS events_webhook_outbox ON events;
CREATE OR REPLACE FUNCTION parley_webhook_outbox() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RETURN NULL;
END
$$;
