-- Turning push on (docs/push.md, "Turning push on and off"): when an app's settings go from "push not configured"
-- (`push.enabled` false or no `gateway_url`) to configured, its push cursor moves to its event log's head in the same
-- transaction, so the bridge starts with the first event written after the change and never pushes what was written
-- while push was off. It lives in SQL because every path that changes settings (either settings route, any node, a
-- release without this rule) goes through this UPDATE, and the head it reads is the one that transaction sees: no
-- node has to notice the change in time. While push is not configured no node reads the app's events at all, so the
-- cursor is left where push was turned off.
CREATE OR REPLACE FUNCTION parley_push_turned_on() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce((NEW.settings->'push'->>'enabled')::boolean, false) AND coalesce(NEW.settings->'push'->>'gateway_url', '') <> ''
       AND NOT (coalesce((OLD.settings->'push'->>'enabled')::boolean, false)
                AND coalesce(OLD.settings->'push'->>'gateway_url', '') <> '') THEN
        INSERT INTO push_cursors (app_id, event_id, user_after)
        SELECT NEW.app_id, h.head, NULL FROM event_heads h WHERE h.app_id = NEW.app_id
        ON CONFLICT (app_id) DO UPDATE SET event_id = greatest(push_cursors.event_id, EXCLUDED.event_id), user_after = NULL;
    END IF;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS apps_push_turned_on ON apps;
CREATE TRIGGER apps_push_turned_on AFTER UPDATE OF settings ON apps FOR EACH ROW EXECUTE FUNCTION parley_push_turned_on();
