-- The outbox: one delivery per stored event and enabled endpoint that selects it, in the storing transaction.
CREATE OR REPLACE FUNCTION parley_webhook_outbox() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_deliveries (app_id, webhook_id, kind, event_id, event_type, order_key, body, status,
                                    next_attempt_at, created_at)
    SELECT e.app_id, w.webhook_id, 'after', e.id, e.type, e.order_key,
           '{"id":"' || e.id || '","type":' || to_json(e.type) || ',"app_id":' || to_json(e.app_id)
               || ',"created_at":' || e.created_at || ',"data":' || e.data || '}',
           'pending', e.created_at, e.created_at
    FROM new_events e
    JOIN webhooks w ON w.app_id = e.app_id AND w.enabled AND parley_webhook_selects(w.event_types, e.type)
    ORDER BY e.id;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS events_webhook_outbox ON events;
CREATE TRIGGER events_webhook_outbox AFTER INSERT ON events REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION parley_webhook_outbox();
